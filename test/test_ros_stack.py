"""The bridge, the recorder, the launcher and ``legged-wbc param`` as real processes over real DDS.

Every test uses its own ``ROS_DOMAIN_ID`` (101-200) with ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``.
The "controller" is a tiny PD torque publisher defined in this file (run as
``python test_ros_stack.py [options] --ros-args ...``) that answers each control tick of the
lockstep protocol and can misbehave on purpose: send a NaN command, a command of the wrong length,
stall before answering, or hang (stop answering) so the test can kill it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
N_JOINTS = 24  # hexapod


# ------------------------------------------------------------------------------------ test controller
def controller_main(argv: list[str]) -> int:
    import argparse
    import threading

    ap = argparse.ArgumentParser()
    ap.add_argument("--kp", type=float, default=300.0)
    ap.add_argument("--kd", type=float, default=8.0)
    ap.add_argument("--nan-at", type=int, default=-1, help="send a NaN command first at this tick")
    ap.add_argument("--badlen-at", type=int, default=-1, help="send a command of n values (no tick) first")
    ap.add_argument("--stall-at", type=int, default=-1, help="answer this tick only after --stall-s seconds")
    ap.add_argument("--stall-s", type=float, default=1.0)
    ap.add_argument("--hang-at", type=int, default=-1, help="stop answering from this tick on")
    ap.add_argument("--cmd-subscribers", type=int, default=1,
                    help="matched /joint_torque_cmd subscriptions to wait for before answering tick 0")
    ap.add_argument("--untimed", action="store_true",
                    help="stamp commands 1 ms after the tick (off the grid), as a controller that does not know the ticks")
    ap.add_argument("--summary", default="")
    ap.add_argument("--end-s", type=float, default=-1.0,
                    help="print 'saw the end of the run' once a sample and a diagnostics message of this sim time came")
    own = argv[: argv.index("--ros-args")] if "--ros-args" in argv else argv
    opts = ap.parse_args(own)

    import rclpy
    from rclpy.node import Node
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    from legged_wbc.ros import io as ros_io
    from legged_wbc.ros.transport import endpoints

    rclpy.init(args=[sys.argv[0], *argv])
    node = Node("pd_test_controller")
    qos = QoSProfile(depth=200, reliability=ReliabilityPolicy.RELIABLE)
    pub = node.create_publisher(JointState, ros_io.TOPIC_TORQUE_CMD, qos)
    names = []
    st = {"q0": None, "hung": False, "stalling": False, "stall_max_ns": -1, "answered": 0, "samples": 0,
          "first_wall": None, "last_wall": None, "diag": {}, "end": set()}

    def seen_end(what):
        st["end"].add(what)
        if st["end"] == {"sample", "diag"}:
            print("saw the end of the run", flush=True)

    def answer(k, tau):
        if st["answered"] == 0:  # the protocol's advice: be matched with the recorder before tick 0
            if not endpoints.wait_for_matched_subscribers(node, [pub], timeout=10.0, min_count=opts.cmd_subscribers):
                print("WARNING: command subscribers not matched", flush=True)
        pub.publish(ros_io.torque_command_msg(k * ros_io.CONTROL_PERIOD_NS + opts.untimed * 1_000_000, names, tau))
        st["answered"] += 1

    def on_js(m):
        st["samples"] += 1
        now = time.monotonic()
        st["first_wall"] = st["first_wall"] or now
        st["last_wall"] = now
        ns = ros_io.stamp_ns(m)
        if opts.end_s >= 0 and ns >= round(opts.end_s * 1e9) and "sample" not in st["end"]:
            seen_end("sample")
        if st["stalling"]:
            st["stall_max_ns"] = max(st["stall_max_ns"], ns)
        k = ros_io.tick_from_stamp(ns)
        if k is None or st["hung"]:
            return
        q, dq = np.asarray(m.position), np.asarray(m.velocity)
        if st["q0"] is None:
            st["q0"] = q.copy()
            names[:] = list(m.name)
        tau = opts.kp * (st["q0"] - q) - opts.kd * dq
        if k == opts.hang_at:
            st["hung"] = True
            print(f"HUNG at tick {k}", flush=True)
            return
        if k == opts.nan_at:
            bad = tau.copy()
            bad[3] = np.nan
            pub.publish(ros_io.torque_command_msg(k * ros_io.CONTROL_PERIOD_NS, names, bad))
            time.sleep(0.1)
        if k == opts.badlen_at:
            pub.publish(ros_io.torque_command_msg(k * ros_io.CONTROL_PERIOD_NS, names[:-1], tau[:-1]))
            time.sleep(0.1)
        if k == opts.stall_at:
            st["stalling"] = True
            st["stall_max_ns"] = ns

            def later():
                time.sleep(opts.stall_s)
                st["stalling"] = False
                answer(k, tau)

            threading.Thread(target=later, daemon=True).start()
            return
        answer(k, tau)

    node.create_subscription(JointState, ros_io.TOPIC_JOINT_STATES, on_js, qos)
    def on_diag(m):
        st["diag"] = ros_io.diagnostics_dict(m)
        if opts.end_s >= 0 and st["diag"].get("sim_time", -1.0) >= opts.end_s - 1e-9 and "diag" not in st["end"]:
            seen_end("diag")

    node.create_subscription(Float64MultiArray, ros_io.TOPIC_BRIDGE_DIAGNOSTICS, on_diag, qos)
    print("controller ready", flush=True)
    try:
        rclpy.spin(node)
    except BaseException:  # KeyboardInterrupt / ExternalShutdownException on SIGINT
        pass
    finally:
        if opts.summary:
            out = {k: v for k, v in st.items() if k not in ("q0", "end")}
            Path(opts.summary).write_text(json.dumps(out))
    return 0


# ------------------------------------------------------------------------------------ helpers
class Proc:
    """A child process with its output in a file."""

    def __init__(self, name: str, cmd: list[str], env: dict, logdir: Path):
        self.name = name
        self.log = logdir / f"{name}.log"
        self._fh = open(self.log, "w")
        self.p = subprocess.Popen(cmd, stdout=self._fh, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                  start_new_session=True)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, pattern: str, timeout: float = 30.0) -> re.Match:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            m = re.search(pattern, self.text())
            if m:
                return m
            if self.p.poll() is not None:
                m = re.search(pattern, self.text())
                if m:
                    return m
                raise AssertionError(f"{self.name} exited ({self.p.returncode}) before {pattern!r}:\n{self.text()}")
            time.sleep(0.05)
        raise AssertionError(f"{self.name}: no {pattern!r} within {timeout} s:\n{self.text()}")

    def wait(self, timeout: float = 60.0) -> int:
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} still running after {timeout} s:\n{self.text()}") from None

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGINT)
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self._fh.close()


@pytest.fixture
def procs():
    started: list[Proc] = []
    yield started
    for p in reversed(started):
        p.stop()


def controller_cmd(*opts: str) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), *opts]


def read_bag(path: Path):
    """``{topic: [(recv_ns, msg), ...]}`` via rosbags' AnyReader."""
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import Stores, get_typestore

    out = defaultdict(list)
    with AnyReader([path], default_typestore=get_typestore(Stores.ROS2_KILTED)) as reader:
        for conn, t, raw in reader.messages():
            out[conn.topic].append((t, reader.deserialize(raw, conn.msgtype)))
    return out


def js_arrays(msgs):
    stamps = np.array([m.header.stamp.sec * 10**9 + m.header.stamp.nanosec for _, m in msgs])
    pos = np.array([m.position for _, m in msgs])
    vel = np.array([m.velocity for _, m in msgs])
    eff = np.array([m.effort for _, m in msgs])
    return stamps, pos, vel, eff


# ------------------------------------------------------------------------------------ tests
@pytest.mark.ros
def test_lockstep_bridge_recorder_params_and_bad_commands(tmp_path, ros_env, procs):
    """Lockstep: the sim advances only on the current tick's command, 1000 samples per sim second,
    commands applied with ZOH, NaN / wrong-length commands rejected and never applied, a live
    parameter update (rejected out of range, accepted in range) takes effect, and the MCAP bag
    reads back with rosbags and with the mcap reader."""
    bag = tmp_path / "bag"
    summary = tmp_path / "ctrl.json"
    rec = Proc("recorder", [str(BIN / "bag_recorder"), "--ros-args", "--params-file",
                            str(ROOT / "config/recorder.yaml"), "-p", f"output:={bag}", "-p", "use_sim_time:=true"],
               ros_env, tmp_path)
    procs.append(rec)
    bridge = Proc("bridge", [str(BIN / "mujoco_bridge"), "--ros-args", "--params-file",
                             str(ROOT / "config/mujoco_bridge.yaml"), "-p", "duration:=0.2",
                             "-p", "startup_min_subscribers:=2", "-p", "startup_wait_all_topics:=true",
                             "-p", "watchdog_timeout:=0.5"], ros_env, tmp_path)
    procs.append(bridge)
    bridge.wait_for(r"24 joints, mode=lockstep")

    # live tuning through the parameter services: out of range rejected with a reason, in range accepted
    cli = [str(BIN / "legged-wbc"), "param", "set", "mujoco_bridge", "watchdog_timeout"]
    r = subprocess.run(cli + ["5000"], env=ros_env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "watchdog_timeout" in r.stderr and "out of range" in r.stderr and "3600" in r.stderr
    r = subprocess.run(cli + ["3"], env=ros_env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "Set parameter successful: watchdog_timeout = 3.0" in r.stdout, r.stderr
    bridge.wait_for(r"parameter watchdog_timeout := 3\.0")

    ctrl = Proc("controller", controller_cmd("--cmd-subscribers", "2", "--nan-at", "10", "--badlen-at", "11",
                                             "--stall-at", "50",
                                             "--stall-s", "1.0", "--summary", str(summary)), ros_env, tmp_path)
    procs.append(ctrl)
    assert bridge.wait(60) == 0, bridge.text()
    log = bridge.text()
    assert "torque command rejected: non-finite effort for joint(s) ['lf_ankle'] (tick 10)" in log, log
    assert ("torque command rejected: joint names must be each of the 24 joints once (unknown [], missing "
            "['rm_ankle'], duplicate []) (tick 11)") in log, log
    assert "watchdog:" not in log  # the 1 s stall is under the updated 3 s timeout (0.5 s would have fired)
    assert "duration reached: t = 0.200 s, 100 commands applied" in log
    assert rec.wait(30) == 0, rec.text()  # closes by itself: stop_when_gone [mujoco_bridge]
    assert "node mujoco_bridge left the graph" in rec.text()
    ctrl.stop()
    st = json.loads(summary.read_text())
    # while tick 50's answer was held back, no sample after t_50 = 100 ms was published
    assert st["stall_max_ns"] == 50 * 2_000_000, st

    # ---- the bag, via rosbags
    assert (bag / "metadata.yaml").exists()
    topics = read_bag(bag)
    # at start-up the bridge re-publishes the tick-0 sample when its answer is slow (loaded machine):
    # keep the first copy of each stamp (stamps are unique otherwise)
    for k, msgs in topics.items():
        stamp_of = (lambda m: m.header.stamp) if msgs and hasattr(msgs[0][1], "header") else \
            (lambda m: m.clock) if msgs and hasattr(msgs[0][1], "clock") else None
        if stamp_of is not None:
            seen, keep = set(), []
            for rec in msgs:
                st_ns = stamp_of(rec[1]).sec * 10**9 + stamp_of(rec[1]).nanosec
                if st_ns == 0 and st_ns in seen:
                    continue
                seen.add(st_ns)
                keep.append(rec)
            topics[k] = keep
    raw_counts = {k: len(v) for k, v in read_bag(bag).items()}
    counts = {k: len(v) for k, v in topics.items()}
    for t in ("/joint_states", "/imu", "/clock"):
        assert counts[t] == 201, counts           # 1 kHz: t = 0 .. 0.2 s
    for t in ("/ground_truth/odom", "/ground_truth/contacts", "/disturbance"):
        assert counts[t] == 101, counts           # 500 Hz, on the control ticks
    stamps, pos, vel, eff = js_arrays(topics["/joint_states"])
    assert np.array_equal(stamps, np.arange(201) * 1_000_000)
    assert np.all(np.isfinite(eff)) and np.all(np.isfinite(pos))
    assert topics["/joint_states"][0][1].name[:2] == ["lf_hip_yaw", "lf_hip_pitch"]
    # the command of tick k is the effort of the two physics steps after t_k (zero-order hold)
    valid = {}
    for _, m in topics["/joint_torque_cmd"]:
        d = np.asarray(m.effort)
        if d.size == N_JOINTS and np.all(np.isfinite(d)):
            valid[(m.header.stamp.sec * 10**9 + m.header.stamp.nanosec) // 2_000_000] = d
    assert set(range(100)) <= set(valid)
    for k in range(100):
        assert np.allclose(eff[2 * k + 1], valid[k], rtol=0, atol=1e-9), k
        assert np.allclose(eff[2 * k + 2], valid[k], rtol=0, atol=1e-9), k
    assert np.allclose(eff[0], 0.0)
    assert np.max(np.abs(pos[-1] - pos[0])) < 0.2  # the PD holds the legs
    diag = ros_io_diag(topics["/bridge/diagnostics"][-1][1])
    assert diag["rejected_commands"] == 2 and diag["commands_applied"] == 100 and diag["watchdog_events"] == 0
    odom = topics["/ground_truth/odom"][0][1]
    assert odom.header.frame_id == "world" and odom.child_frame_id == "base_link"
    assert topics["/ground_truth/contacts"][0][1].layout.dim[0].label == "foot_contact_0or1[lf,lm,lh,rf,rm,rh]"
    # receive stamps are sim time
    assert topics["/joint_states"][-1][0] <= 200_000_000 + 2_000_000

    # ---- the same bag, via the mcap reader with the ROS 2 decoder
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory

    mcap_counts, js_2ms = Counter(), False
    (mcap_file,) = bag.glob("*.mcap")
    with open(mcap_file, "rb") as fh:
        reader = make_reader(fh, decoder_factories=[DecoderFactory()])
        for schema, channel, message, decoded in reader.iter_decoded_messages():
            assert schema.encoding == "ros2msg" and channel.message_encoding == "cdr"
            mcap_counts[channel.topic] += 1
            if channel.topic == "/joint_states" and decoded.header.stamp.nanosec == 2_000_000:
                assert len(decoded.effort) == N_JOINTS      # (a slow start re-publishes tick 0 first)
                js_2ms = True
    assert js_2ms and dict(mcap_counts) == raw_counts       # every message, re-published ones included


def ros_io_diag(msg) -> dict:
    label = msg.layout.dim[0].label
    names = label[label.index("[") + 1: label.rindex("]")].split(",")
    return dict(zip(names, np.asarray(msg.data).tolist()))


@pytest.mark.ros
def test_launcher_watchdog_on_dead_controller_and_sqlite_bag(tmp_path, ros_env, procs):
    """Through `legged-wbc launch`: the controller hangs at tick 50 and is frozen (SIGSTOP); the bridge's
    watchdog engages (logged), damps the joints and finishes `duration`; its exit shuts the launch
    down (on_exit=shutdown); the recorder still closes a readable sqlite3 bag; the frozen controller is
    killed after its sigterm_timeout + sigkill_timeout and the launcher exits 1 naming it. (A node that
    dies unasked would shut the launch down at once: test_ros_launch.py.)"""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    wrapper = bindir / "lwbc_pd_controller"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).resolve()}" "$@"\n')
    wrapper.chmod(0o755)
    env = dict(ros_env)
    env["PATH"] = f"{bindir}{os.pathsep}{env['PATH']}"
    bag = tmp_path / "bag_sqlite"
    launch = tmp_path / "wd.launch.xml"
    launch.write_text(f"""<launch>
  <arg name="bag"/>
  <node pkg="legged_wbc" exec="mujoco_bridge" name="mujoco_bridge" output="screen" on_exit="shutdown">
    <param from="$(find-pkg-share legged_wbc)/config/mujoco_bridge.yaml"/>
    <param name="duration" value="0.4"/>
    <param name="watchdog_timeout" value="0.3"/>
    <param name="watchdog_damping" value="5.0"/>
    <param name="ground_truth_decimation" value="1"/>
    <param name="startup_min_subscribers" value="2"/>
    <param name="startup_wait_all_topics" value="true"/>
  </node>
  <node pkg="legged_wbc" exec="lwbc_pd_controller" name="pd_test_controller" args="--hang-at 50 --cmd-subscribers 2"
        sigterm_timeout="1" sigkill_timeout="1"/>
  <node pkg="legged_wbc" exec="bag_recorder" name="bag_recorder" sigterm_timeout="10">
    <param from="$(find-pkg-share legged_wbc)/config/recorder.yaml"/>
    <param name="output" value="$(var bag)"/>
    <param name="storage" value="sqlite3"/>
    <param name="use_sim_time" value="true"/>
    <param name="custom_data" value="test=watchdog"/>
  </node>
</launch>
""")
    lp = Proc("launch", [str(BIN / "legged-wbc"), "launch", str(launch), f"bag:={bag}"], env, tmp_path)
    procs.append(lp)
    pid = int(lp.wait_for(r"started pd_test_controller \[pid (\d+)\]").group(1))
    lp.wait_for(r"\[pd_test_controller\] HUNG at tick 50")
    os.kill(pid, signal.SIGSTOP)
    rc = lp.wait(60)
    out = lp.text()
    assert rc == 1, out
    assert "process pd_test_controller did not stop within 2 s of SIGINT and SIGTERM: killed by SIGKILL" in out
    assert re.search(r"\[mujoco_bridge\] \[ERROR\] .*watchdog: no command for tick 50 \(t = 0\.100 s\) within 0\.3 s "
                     r"wall; applying joint damping 5 N m s/rad", out), out
    assert "[mujoco_bridge] " in out and "duration reached: t = 0.400 s, 50 commands applied, 1 watchdog events" in out
    assert "mujoco_bridge exited and is marked on_exit=shutdown" in out
    assert "[bag_recorder] " in out and "bag closed" in out and re.search(r"process bag_recorder finished \(exit code (0|130)\)", out), out
    assert (bag / "metadata.yaml").exists() and list(bag.glob("*.db3"))
    assert "test: watchdog" in (bag / "metadata.yaml").read_text()

    topics = read_bag(bag)
    stamps, pos, vel, eff = js_arrays(topics["/joint_states"])
    # a slow start re-publishes the tick-0 sample (control inputs only): keep its first copy
    first = np.r_[True, stamps[1:] != 0]
    stamps, pos, vel, eff = stamps[first], pos[first], vel[first], eff[first]
    imu_ns = [m.header.stamp.sec * 10**9 + m.header.stamp.nanosec for _, m in topics["/imu"]]
    assert np.array_equal(stamps, np.arange(401) * 1_000_000)  # every sample up to the end, none lost
    assert len(topics["/ground_truth/odom"]) == 401 and len(imu_ns[:1] + [t for t in imu_ns[1:] if t]) == 401
    # after the watchdog engaged at tick 50 (t = 100 ms): tau = -5 dq of the state the step started from
    assert np.allclose(eff[101:], -5.0 * vel[100:-1], rtol=0, atol=1e-9)
    assert np.all(np.isfinite(eff))


@pytest.mark.ros
@pytest.mark.parametrize("timing", ["stamped", "untimed"])
def test_realtime_mode_is_wall_clock_paced(tmp_path, ros_env, procs, timing):
    """Realtime pacing; with command_timing:=untimed the bridge applies commands whose stamps are off
    the tick grid (a hardware-style input) instead of rejecting them."""
    summary = tmp_path / "ctrl.json"
    ctrl = Proc("controller", controller_cmd("--summary", str(summary), "--end-s", "0.5",
                                             *(["--untimed"] if timing == "untimed" else [])), ros_env, tmp_path)
    procs.append(ctrl)
    bridge = Proc("bridge", [str(BIN / "mujoco_bridge"), "--ros-args", "--params-file",
                             str(ROOT / "config/mujoco_bridge.yaml"), "-p", "mode:=realtime", "-p", "duration:=0.5",
                             "-p", "diagnostics_period:=0.05", "-p", f"command_timing:={timing}"], ros_env, tmp_path)
    procs.append(bridge)
    assert bridge.wait(60) == 0, bridge.text()
    # the controller may lag behind the bridge on a loaded machine: stop it only once it has taken the last
    # sample and the final diagnostics (a fixed 0.3 s cut its summary short under load)
    ctrl.wait_for(r"saw the end of the run", timeout=60)
    ctrl.stop()
    st = json.loads(summary.read_text())
    # realtime: a subscriber that falls behind loses samples (KEEP_LAST history); the newest state is what matters
    # (the last one, stamp 0.5 s, always arrives: the wait above)
    assert 250 <= st["samples"] <= 501, st
    # paced: the bridge publishes the sample of t only after t wall seconds since the first command, which
    # followed the arrival of the tick-0 sample, so the span is >= 0.499 s whatever the load (a loaded
    # machine only adds to it)
    assert st["last_wall"] - st["first_wall"] >= 0.45, st
    d = st["diag"]        # the final /bridge/diagnostics (sim_time 0.5): whole-run counters
    assert {"deadline_misses", "watchdog_active", "realtime_factor", "commands_applied"} <= set(d)
    assert d["sim_time"] == pytest.approx(0.5)
    # on a loaded 2-core machine several answers can arrive within one physics step: only the newest is applied
    assert d["commands_applied"] > 20 and d["watchdog_events"] == 0 and d["rejected_commands"] == 0
    assert f"{int(d['commands_applied'])} commands applied, 0 watchdog events" in bridge.text()
    assert "mode=realtime" in bridge.text()


def test_untimed_commands_need_realtime_mode(ros_env):
    r = subprocess.run([str(BIN / "mujoco_bridge"), "--ros-args", "-p", "mode:=lockstep", "-p", "command_timing:=untimed"],
                       env=ros_env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip().splitlines()[-1] == (
        "mujoco_bridge: command_timing: untimed needs mode: realtime (lockstep pairs commands with ticks)"), r.stderr


if __name__ == "__main__":
    sys.exit(controller_main(sys.argv[1:]))
