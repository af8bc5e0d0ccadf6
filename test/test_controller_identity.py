"""Controller identity: a node named ``wbc_controller`` that publishes ``/joint_torque_cmd`` from before the
launch never commands the robot. A real rclpy process (the impostor) publishes a command for tick 0
every 2 ms until the stack's first sample (so it is the first publisher named ``wbc_controller`` that the
bridge hears: a bridge following the name followed it), then answers every tick it sees, with 1e9 N m on
every joint (the bridge clamps it to the effort limits: each of its commands that were applied
would count in ``commands_clamped`` and throw the robot), then the project's launcher runs the lockstep walk (``watchdog_timeout:=30``: a stall of a loaded machine is
not what is tested here).

What the product promises, per layout (``container``: the bridge follows the controller it composed, by
identity; ``processes``: the publisher GID the launch's own ``wbc_controller`` process handed over at
start-up; ``split``: the control part's publisher over the host link): 0 of the impostor's commands applied, every tick answered by the real controller (``commands_applied
== ticks``, no watchdog), the impostor's commands counted foreign, one ERROR alarm line naming both publishers
by GID (the real one with its pid) and ``/diagnostics`` ERROR naming the alarm; the robot walks (the base stays
up). The followed publisher's GID is the real controller's: never the impostor's.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys

import pytest

from test_ros_stack import BIN, ROOT

DURATION = 4.0
TICKS = int(DURATION / 0.002)

IMPOSTOR = r'''
import json, sys, time, numpy as np, rclpy
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from nav_msgs.msg import Odometry
from std_msgs.msg import Float64MultiArray
from diagnostic_msgs.msg import DiagnosticArray
from legged_wbc.ros import io as ros_io
from legged_wbc.ros.transport.endpoint_ids import publisher_gid
from legged_wbc.robot import load_robot_config
duration = float(sys.argv[1])
rclpy.init()
n = Node("wbc_controller")
qos = QoSProfile(depth=200, reliability=ReliabilityPolicy.RELIABLE)
cmd = n.create_publisher(JointState, ros_io.TOPIC_TORQUE_CMD, qos)
names = load_robot_config("hexapod").joint_names
st = {"gid": publisher_gid(cmd).hex(), "sent": 0, "early": 0, "diag": {}, "levels": [], "z_min": 1e9, "z_last": None}
done = set()
def on_js(m):
    k = ros_io.tick_from_stamp(ros_io.stamp_ns(m))
    if k is None or k in done:
        return
    done.add(k)
    cmd.publish(ros_io.torque_command_msg(k * ros_io.CONTROL_PERIOD_NS, list(m.name), np.full(len(m.name), 1e9)))
    st["sent"] += 1
def on_odom(m):
    z = m.pose.pose.position.z
    st["z_min"], st["z_last"] = min(st["z_min"], z), z
def on_diag(m):
    for s in m.status:
        if s.name.startswith("mujoco_bridge"):
            st["levels"].append([int.from_bytes(s.level, "little") if isinstance(s.level, bytes) else int(s.level),
                                 s.message])
n.create_subscription(JointState, ros_io.TOPIC_JOINT_STATES, on_js, qos)
n.create_subscription(Odometry, ros_io.TOPIC_GT_ODOM, on_odom, qos)
n.create_subscription(Float64MultiArray, ros_io.TOPIC_BRIDGE_DIAGNOSTICS,
                      lambda m: st["diag"].update(ros_io.diagnostics_dict(m)), qos)
n.create_subscription(DiagnosticArray, "/diagnostics", on_diag, 50)
for _ in range(30):                       # its participant announced before the stack starts
    rclpy.spin_once(n, timeout_sec=0.05)
print("READY " + st["gid"], flush=True)
t_end = time.monotonic() + 500
early = ros_io.torque_command_msg(0, names, np.full(len(names), 1e9))
try:                                      # until the stack's end (its last diagnostics) or SIGINT
    while time.monotonic() < t_end and st["diag"].get("sim_time", 0.0) < duration - 1e-6:
        if not done:                      # before the stack's first sample: tick 0's command, every 2 ms
            cmd.publish(early)
            st["early"] += 1
        rclpy.spin_once(n, timeout_sec=0.002 if not done else 0.05)
    t_more = time.monotonic() + 1.5       # the bridge's final /diagnostics report
    while time.monotonic() < t_more:
        rclpy.spin_once(n, timeout_sec=0.05)
except KeyboardInterrupt:
    pass
st["diag"] = {k: st["diag"].get(k, -1) for k in ("commands_foreign", "commands_applied", "commands_clamped",
                                                 "watchdog_events", "tick")}
print("IMPOSTOR " + json.dumps(st), flush=True)
'''


def run_with_impostor(env, layout: str, duration: float = DURATION) -> tuple[dict, str]:
    """The impostor up first, then ``legged-wbc launch walking_sim layout:=LAYOUT`` (lockstep); its report
    and the launch's output."""
    imp = subprocess.Popen([sys.executable, "-c", IMPOSTOR, str(duration)], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    first = imp.stdout.readline()
    try:
        assert first.startswith("READY"), first + imp.communicate(timeout=30)[0]
        run = subprocess.run([str(BIN / "legged-wbc"), "launch", "walking_sim", f"layout:={layout}",
                              "controller:=cbf", "scenario:=nominal", f"duration:={duration}",
                              "watchdog_timeout:=30"],      # a loaded machine's stall is not what is tested
                             env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
        try:
            text = first + imp.communicate(timeout=20)[0]
        except subprocess.TimeoutExpired:          # it missed the stack's last diagnostics: stop it
            imp.send_signal(signal.SIGINT)
            text = first + imp.communicate(timeout=60)[0]
    finally:
        if imp.poll() is None:
            imp.kill()
    logs = run.stdout + run.stderr
    assert run.returncode == 0, logs[-4000:]
    line = [ln for ln in text.splitlines() if ln.startswith("IMPOSTOR ")]
    assert line, text[-3000:]
    return json.loads(line[0][len("IMPOSTOR "):]), logs


def figures(st: dict, logs: str) -> dict:
    """What the run shows: the impostor's commands applied (each would be clamped: the WBC's never are),
    the real controller's applied, the alarm and the followed publisher's lines."""
    applied = int(re.search(r"(\d+) commands applied, (\d+) watchdog events", logs).group(1))
    clamped = max(st["diag"]["commands_clamped"], 0)
    # ticks the watchdog damped (a stalled tick: no command of anybody's reached the bridge in 30 s)
    damped = sum(int(b) - int(a) for a, b in zip(re.findall(r"watchdog: no command for tick (\d+)", logs),
                                                  re.findall(r"watchdog released: command for tick (\d+)", logs)))
    return {"impostor_applied": clamped, "real_applied": applied - (0 if damped else clamped), "ticks": TICKS,
            "damped": damped,
            "foreign": st["diag"]["commands_foreign"], "impostor_sent": st["sent"] + st["early"],
            "alarms": [ln for ln in logs.splitlines() if "ALARM" in ln],
            "following": [ln for ln in logs.splitlines() if "torque commands: following" in ln]}


@pytest.mark.ros
@pytest.mark.parametrize("layout", ["container", "processes", "split"])
def test_an_impostor_named_wbc_controller_started_before_the_launch_never_commands(ros_env, layout):
    st, logs = run_with_impostor(ros_env, layout)
    f = figures(st, logs)
    print(f"{layout}: impostor commands applied {f['impostor_applied']}, real controller's applied "
          f"{f['real_applied']} of {TICKS} ticks ({f['damped']} damped by the watchdog), impostor's sent "
          f"{f['impostor_sent']}, counted foreign {f['foreign']}")
    print("\n".join(f["following"] + f["alarms"]))
    said = "\n".join(f["alarms"] + f["following"])
    # every tick answered by the real controller: none of its commands dropped (a tick the watchdog damped, which
    # a machine loaded by others caused once in a while in lockstep processes, had no command of anybody's)
    # (after such a stall the WBC's own catch-up torques may be clamped: then the followed publisher's GID below,
    # the real controller's from the first tick to the last, is what says that none of the impostor's was applied)
    assert f["real_applied"] + f["damped"] == TICKS and f["damped"] <= 50, (f, said, logs[-3000:])
    assert f["impostor_applied"] == 0 or f["damped"] > 0, (f, said, logs[-3000:])
    # it took part (it answers the ticks it sees in time: the stack does not wait for it, and on a loaded machine
    # it misses some); its commands are counted as they come (the bridge's last diagnostics leave out its last
    # 0.1-0.3 s, and a loaded machine's executor thread takes the last ones after the run)
    assert st["sent"] >= TICKS // 4 and st["sent"] + st["early"] + 1 >= f["foreign"] > 0, (f, st)
    # followed: the real controller, by its GID (composed here, or handed over by its own process), never the impostor
    assert len(f["following"]) == 1 and st["gid"] not in f["following"][0], said
    # (split: the control part's publisher over the host link, named by that process's pid)
    real = re.search(r"following /wbc_controller \((?:gid ([0-9a-f]{32}), )?pid (\d+)\)", f["following"][0])
    assert real and (real.group(1) is None) == (layout == "split"), said
    assert {"container": "composed in this process", "processes": "handed over at start-up",
            "split": "over the host link"}[layout] in f["following"][0]
    ident = f"gid {real.group(1)}, pid {real.group(2)}" if real.group(1) else f"pid {real.group(2)}"
    # one alarm line, naming both: the real one by GID and pid, the impostor by GID
    assert len(f["alarms"]) == 1, said
    assert [ident in ln and st["gid"] in ln for ln in logs.splitlines()].count(True) == 1, said
    assert "two publishers named /wbc_controller" in f["alarms"][0] and ident in f["alarms"][0]
    assert f"gid {st['gid']}, pid unknown" in f["alarms"][0], said
    assert not re.search(rf"torque commands from /wbc_controller \({ident}", logs)     # never swapped
    errors = [msg for level, msg in st["levels"] if level == 2]
    assert errors and "two publishers named /wbc_controller on /joint_torque_cmd" in errors[-1], st["levels"][-5:]
    assert st["z_min"] > 0.25 and st["z_last"] > 0.3, st                 # walking, not thrown


READ = r'''
import json
from legged_wbc.ros.nodekit.launch_identity import read_identity
i = read_identity()
print(json.dumps(None if i is None else [i.gid.hex(), i.pid, i.node]))
'''


def test_the_handover_is_taken_from_a_sibling_of_the_same_launch_only(ros_env, monkeypatch):
    """read_identity (the bridge's side): the file of its own parent, a regular file of this user with mode 0600,
    naming a live sibling; a file naming a process of another parent (a node started before the launch), a
    dead one, or with another mode, is not taken."""
    import os
    import time

    from legged_wbc.ros.nodekit.launch_identity import handover_path

    env = {**ros_env, "PYTHONPATH": str(ROOT) + os.pathsep + ros_env.get("PYTHONPATH", "")}
    monkeypatch.setenv("ROS_DOMAIN_ID", env["ROS_DOMAIN_ID"])
    path = handover_path(os.getpid())          # this test process plays the launch: its children are siblings
    sibling = subprocess.Popen(["sleep", "60"])
    try:
        def read(pid, mode=0o600):
            body = {"pid": pid, "ppid": os.getpid(), "node": "/wbc_controller", "topic": "/joint_torque_cmd",
                    "gid": "ab" * 16}
            if os.path.exists(path):
                os.unlink(path)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            with os.fdopen(fd, "w") as f:
                json.dump(body, f)
            os.chmod(path, mode)
            out = subprocess.run([sys.executable, "-c", READ], env=env, capture_output=True, text=True, timeout=60)
            return json.loads(out.stdout.strip().splitlines()[-1])

        assert read(sibling.pid) == ["ab" * 16, sibling.pid, "/wbc_controller"]
        assert read(sibling.pid, mode=0o644) is None               # not private
        assert read(os.getpid()) is None                           # another launch's (its parent is not ours)
        dead = subprocess.Popen(["true"])
        dead.wait()
        time.sleep(0.1)
        assert read(dead.pid) is None                              # gone
    finally:
        sibling.kill()
        sibling.wait()
        if os.path.exists(path):
            os.unlink(path)
