"""Bring your own controller: ``legged-wbc launch walking_sim controller:=external`` + ``legged-wbc
example-controller`` (real processes, DDS, MuJoCo, the bag read with rosbags); and the launch arguments
ROS users type: a params file naming an unknown parameter stops the launch (rc 2, one line).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mujoco_bridge.scheduler import DIAG_FIELDS

CLI = [sys.executable, "-m", "legged_wbc.cli"]
DURATION = 3.0
TICKS = int(DURATION / 0.002)


def _read_bag(bag: Path) -> dict:
    from rosbags.highlevel import AnyReader

    out = {"stamps": [], "diag_stamps": [], "cmd_ticks": [], "z": [], "bridge": None, "clock": [], "estimates": 0}
    with AnyReader([bag]) as r:
        for c, t, raw in r.messages():
            m = r.deserialize(raw, c.msgtype)
            header = getattr(m, "header", None)
            if header is not None:
                ns = header.stamp.sec * 1_000_000_000 + header.stamp.nanosec
                out["stamps"].append((c.topic, ns))
                if c.topic == "/diagnostics":
                    out["diag_stamps"].append(ns)
                if c.topic == "/joint_torque_cmd":
                    out["cmd_ticks"].append(ns // 2_000_000)
            out["estimates"] += c.topic == "/estimator/odom"
            if c.topic == "/ground_truth/odom":
                out["z"].append(m.pose.pose.position.z)
            if c.topic == "/clock":
                out["clock"].append(m.clock.sec * 1_000_000_000 + m.clock.nanosec)
            if c.topic == "/bridge/diagnostics":
                out["bridge"] = dict(zip(DIAG_FIELDS, m.data))
    return out


@pytest.mark.parametrize("layout", ["container", "split", "processes"])
def test_external_controller_answers_every_lockstep_tick(tmp_path, ros_env, layout):
    """The example answers every tick (commands_applied == ticks, no watchdog), the robot stands up, the
    bag holds every command, and every stamp (/diagnostics included) is sim time: one time base."""
    bag = tmp_path / "bag"
    ctrl = subprocess.Popen([*CLI, "example-controller"], env=ros_env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        run = subprocess.run([*CLI, "launch", "walking_sim", f"layout:={layout}", "controller:=external",
                              f"duration:={DURATION}", f"record:={bag}"], env=ros_env, capture_output=True,
                             text=True, timeout=400)
    finally:
        ctrl.terminate()
        try:
            out, _ = ctrl.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            ctrl.kill()
            out, _ = ctrl.communicate()
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    # SIGTERM after the run: the example ends on its own, without a traceback (it spins with a timeout)
    assert ctrl.returncode == 0 and "Traceback" not in out, (ctrl.returncode, out[-2000:])
    assert f"{TICKS} commands applied, 0 watchdog events" in run.stdout
    assert "wbc_controller" not in run.stdout.split("composed", 1)[-1].split("\n", 1)[0]
    b = _read_bag(bag)
    assert b["bridge"]["commands_applied"] == b["bridge"]["tick"] == TICKS and b["bridge"]["watchdog_events"] == 0
    # every applied tick's answer recorded, from tick 0; the answer to the last sample (tick TICKS, after the
    # duration: never applied) comes from outside the process and may arrive after the bag closed
    assert b["cmd_ticks"][:TICKS] == list(range(TICKS)) and len(b["cmd_ticks"]) in (TICKS, TICKS + 1)
    assert b["z"][0] < 0.32 and b["z"][-1] > 0.36                # from the crouch it starts in to standing
    end = max(b["clock"])
    assert end == int(DURATION * 1e9)
    late = [(topic, ns) for topic, ns in b["stamps"] if not 0 <= ns <= end]
    assert not late, late[:5]                                    # no wall-clock stamp anywhere
    assert len(b["diag_stamps"]) >= 4 and max(b["diag_stamps"]) <= end
    if layout != "processes":    # lockstep, in a container: the estimator runs every tick (processes: the newest)
        # one estimate per applied tick; the one of the last sample (after the duration) may come after the
        # bag closed, as the answer to it
        assert b["estimates"] in (TICKS, TICKS + 1), b["estimates"]


@pytest.mark.parametrize("example", [["example-controller"], ["teleop-example", "--vx", "0.1"]])
def test_the_examples_end_on_sigterm_at_once_without_a_traceback(ros_env, example):
    """A stop signal shuts the examples' rclpy context down: the controller's executor, which waits for
    messages that may never come again, and the teleop's publishing loop end within a second, rc 0."""
    import signal
    import time

    p = subprocess.Popen([*CLI, *example], env=ros_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(6.0)                                   # up and waiting (imports, rclpy init, discovery)
    assert p.poll() is None, p.communicate()[0]
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    try:
        out, _ = p.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
    assert p.returncode == 0 and "Traceback" not in out, (p.returncode, out[-2000:])
    assert time.monotonic() - t0 < 5.0


def test_unknown_parameter_in_a_params_file_stops_the_launch(tmp_path, ros_env):
    """``kp_bb: 1.0``: one line naming it and the closest names, rc 2, nothing started (launcher); a node
    started by hand with the file says the same at start-up."""
    f = tmp_path / "mine.yaml"
    f.write_text("wbc_controller:\n  ros__parameters:\n    kp_bb: 1.0\n")
    for layout in ("container", "processes"):
        r = subprocess.run([*CLI, "launch", "walking_sim", f"layout:={layout}", f"params_file:={f}"], env=ros_env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and "[launch] started" not in r.stdout
        assert r.stderr.strip() == f"legged-wbc launch: params file {f}: wbc_controller: unknown parameter 'kp_bb' " \
                                   "(closest: kp_b, kd_b)"
    w = tmp_path / "wild.yaml"
    w.write_text("/**:\n  ros__parameters:\n    watchdog_timout: 1.0\n    kp_b: 2000.0\n")
    r = subprocess.run([*CLI, "launch", "walking_sim", "--dry-run", f"params_file:={w}"], env=ros_env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "'watchdog_timout' (closest: watchdog_timeout" in r.stderr
    exe = Path(sys.executable).parent / "wbc_controller"
    r = subprocess.run([str(exe), "--ros-args", "--params-file", str(f)], env=ros_env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().endswith("wbc_controller: unknown parameter 'kp_bb' (closest: kp_b, kd_b)")


def test_ros_args_on_launch(ros_env):
    ok = subprocess.run([*CLI, "launch", "walking_sim", "--dry-run", "--ros-args", "--log-level", "debug"],
                        env=ros_env, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "--ros-args --log-level debug" in ok.stdout
    bad = subprocess.run([*CLI, "launch", "walking_sim", "--dry-run", "--ros-args", "-r", "a:=b"], env=ros_env,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "log_level:=" in bad.stderr
