"""The estimator and controller nodes through real DDS: bad inputs never reach the torque output,
and the lockstep ROS stack reproduces the headless loop."""

from domains import domain_id
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.ros


def ros_env():
    env = dict(os.environ)
    env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    env["ROS_DOMAIN_ID"] = str(domain_id())
    return env


def test_nan_and_short_joint_states_never_reach_the_torque(tmp_path):
    """Feed the estimator + controller processes hand-made samples: a valid tick, a NaN tick, a short tick,
    a tick naming a joint twice (the extra entry holding 1e6 rad), a tick with a joint at 1e6 rad, a
    valid tick. Only the valid ticks are answered, and no published torque is NaN."""
    env = ros_env()
    procs = [subprocess.Popen([str(BIN / exe), "--ros-args", "-p", "scenario:=nominal"] +
                              (["--params-file", str(ROOT / f"config/{cfgf}")]),
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for exe, cfgf in (("state_estimator", "estimator.yaml"), ("wbc_controller", "wbc_controller.yaml"))]
    code = r'''
import sys, time, numpy as np, rclpy
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy, HistoryPolicy
from sensor_msgs.msg import JointState, Imu
from std_msgs.msg import Float64MultiArray
from legged_wbc.ros import io as ros_io
from legged_wbc.model import RobotModel
rclpy.init()
n = Node("feeder")
qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=200, reliability=ReliabilityPolicy.RELIABLE)
pj = n.create_publisher(JointState, "joint_states", qos)
pi = n.create_publisher(Imu, "imu", qos)
cmds = []
n.create_subscription(JointState, "joint_torque_cmd",
                      lambda m: cmds.append(np.append(m.effort, ros_io.stamp_ns(m) / ros_io.CONTROL_PERIOD_NS)), qos)
rm = RobotModel("hexapod")
q = rm.stance_configuration(0.30)
t_end = time.monotonic() + 60
while (n.count_subscribers("joint_states") < 2 or n.count_subscribers("imu") < 1
       or n.count_publishers("joint_torque_cmd") < 1) and time.monotonic() < t_end:
    rclpy.spin_once(n, timeout_sec=0.05)
time.sleep(1.0)
def send(k, pos, vel, names=None):
    t = k * ros_io.CONTROL_PERIOD_NS
    names = names or rm.joint_names[:len(pos)]
    pj.publish(ros_io.joint_state_msg(t, names, pos, vel, np.zeros(len(pos))))
    pi.publish(ros_io.imu_msg(t, "base_link", [0, 0, 0, 1], [0, 0, 0], [0, 0, 9.81]))
bad = q[7:].copy(); bad[3] = np.nan
far = q[7:].copy(); far[5] = 1e6
dup_names = list(rm.joint_names) + [rm.joint_names[0]]
samples = [(q[7:], np.zeros(24), None), (bad, np.zeros(24), None), (q[7:-1], np.zeros(23), None),
           (np.append(q[7:], 1e6), np.zeros(25), dup_names), (far, np.zeros(24), None), (q[7:], np.zeros(24), None)]
for k, (pos, vel, names) in enumerate(samples):
    # like the bridge at start-up: re-send a valid sample until it is answered (a late match may drop it)
    valid = k in (0, 5)
    for attempt in range(6 if valid else 1):
        send(k, pos, vel, names)
        t_end = time.monotonic() + (5 if valid else 2)
        while time.monotonic() < t_end:
            rclpy.spin_once(n, timeout_sec=0.05)
            if any(c[-1] == k for c in cmds):
                break
        if not valid or any(c[-1] == k for c in cmds):
            break
for _ in range(20):
    rclpy.spin_once(n, timeout_sec=0.05)
ticks = sorted({int(c[-1]) for c in cmds})
print("TICKS", ticks, "NAN", any(not np.all(np.isfinite(c)) for c in cmds), flush=True)
'''
    try:
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=240)
    finally:
        for p in procs:
            p.send_signal(2)
        logs = [p.communicate(timeout=20)[0] for p in procs]
    assert "TICKS" in out.stdout, out.stdout + out.stderr + "".join(logs)
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("TICKS")][0]
    assert "TICKS [0, 5]" in line and "NAN False" in line, line + "".join(logs)
    assert "rejected" in logs[0] and "rejected" in logs[1]
    # each kind said in one line (the nodes throttle repeats to one a second, so look for the first two)
    assert "more than once" in logs[0] + logs[1] or "far outside its limits" in logs[0] + logs[1], logs
    for p in procs:
        assert p.returncode == 130          # stopped by SIGINT: 128 + 2 (legged_wbc.ros.tooling.lifetime)


def _short_manoeuvres(path):
    """The manoeuvres scenario in 4 s: stand up, an arc from 1 s (the command filter, turning footholds), a
    stop at 2 s (the gait clock pauses after stand_delay with every leg in support), sideways from 3.6 s
    (it resumes): the scheduled command the controller and the estimator nodes each compute."""
    import yaml

    from legged_wbc.scenario import dump_scenario, load_scenario

    d = yaml.safe_load(dump_scenario(load_scenario("manoeuvres", ["stand_up.start=0.1", "stand_up.duration=0.8",
                                                                  "walk.gait_start=1.0", "walk.t_s=1.1"])))
    body = d.get("scenario", d)
    body["commands"] = [{"t": 0.0, "vx": 0.0, "vy": 0.0, "wz": 0.0}, {"t": 1.0, "vx": 0.1, "vy": 0.0, "wz": 0.3},
                        {"t": 2.0, "vx": 0.0, "vy": 0.0, "wz": 0.0}, {"t": 3.6, "vx": 0.0, "vy": 0.1, "wz": 0.0}]
    body["duration"] = 4.0
    path.write_text(yaml.safe_dump(d))
    return str(path)


@pytest.mark.parametrize("scenario,duration", [("nominal", 2.0), ("manoeuvres_short", 4.0)])
def test_lockstep_stack_matches_headless_loop(tmp_path, scenario, duration):
    """Same config, same core objects: the ROS lockstep run and the headless loop give the same joint
    trajectory (<= 1e-6 rad over 2 s); under a command schedule (the short manoeuvres: turning, the gait
    stopping and resuming) the same bits."""
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import Stores, get_typestore

    from legged_wbc.closed_loop import ClosedLoop
    from legged_wbc.model import RobotModel
    from legged_wbc.scenario import load_scenario

    if scenario == "manoeuvres_short":
        scenario = _short_manoeuvres(tmp_path / "manoeuvres_short.yaml")
    bag = tmp_path / "bag"
    env = ros_env()
    run = subprocess.run([str(BIN / "legged-wbc"), "launch", "walking_sim", "controller:=cbf", f"scenario:={scenario}",
                          f"duration:={duration}", f"record:={bag}"], env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rm = RobotModel("hexapod")
    ros = {}
    with AnyReader([bag], default_typestore=get_typestore(Stores.ROS2_KILTED)) as reader:
        counts = {}
        for c in reader.connections:
            counts[c.topic] = counts.get(c.topic, 0) + c.msgcount
        # sensors at 1 kHz, commands and estimates at 500 Hz (within 1 %)
        for topic, expect in (("/joint_states", 1000 * duration), ("/imu", 1000 * duration),
                              ("/joint_torque_cmd", 500 * duration), ("/estimator/odom", 500 * duration),
                              ("/wbc/relative_pitch", 500 * duration), ("/ground_truth/odom", 500 * duration)):
            assert abs(counts.get(topic, 0) - expect) <= 0.01 * expect + 1, (topic, counts.get(topic))
        heights = [reader.deserialize(raw, c.msgtype).pose.pose.position.z for c, _, raw in
                   reader.messages(connections=[c for c in reader.connections if c.topic == "/ground_truth/odom"])]
        assert min(heights[-100:]) > 0.3, "the robot stands"
        conns = [c for c in reader.connections if c.topic == "/joint_states"]
        for conn, _, raw in reader.messages(connections=conns):
            m = reader.deserialize(raw, conn.msgtype)
            ns = m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec
            if ns % 2_000_000 == 0:
                idx = [list(m.name).index(j) for j in rm.joint_names]
                ros[ns // 2_000_000] = np.asarray(m.position)[idx]
    head = ClosedLoop(load_scenario(scenario), "cbf").run(duration)
    ticks = sorted(k for k in ros if k < len(head.series["t"]))
    assert len(ticks) >= 495 * duration, f"only {len(ticks)} ticks in the bag"
    diff = max(np.abs(ros[k] - head.series["joint_pos"][k]).max() for k in ticks)
    assert diff <= 1e-6, f"max joint difference ROS vs headless {diff:.3e} rad"
    if load_scenario(scenario).raw.get("commands"):
        assert diff == 0.0, f"max joint difference ROS vs headless {diff:.3e} rad"
        paused = np.asarray(head.series["gait_paused"])      # the schedule stopped and restarted the gait
        assert paused.any() and not paused[-1] and abs(head.series["cmd_ref"][-1, 2]) > 0.2


INTRUDER = r'''
import sys, time, numpy as np, rclpy
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from nav_msgs.msg import Odometry
from std_msgs.msg import Float64MultiArray
from legged_wbc.ros import io as ros_io
duration = float(sys.argv[1])
rclpy.init()
n = Node("intruder")
qos = QoSProfile(depth=200, reliability=ReliabilityPolicy.RELIABLE)
pub = n.create_publisher(JointState, ros_io.TOPIC_TORQUE_CMD, qos)
st = {"sent": 0, "z": [], "diag": {}}
def on_js(m):
    k = ros_io.tick_from_stamp(ros_io.stamp_ns(m))
    if k is not None:                     # every tick answered with 1e9 N m on every joint, well-formed
        pub.publish(ros_io.torque_command_msg(k * ros_io.CONTROL_PERIOD_NS, list(m.name), np.full(len(m.name), 1e9)))
        st["sent"] += 1
n.create_subscription(JointState, ros_io.TOPIC_JOINT_STATES, on_js, qos)
n.create_subscription(Odometry, ros_io.TOPIC_GT_ODOM,
                      lambda m: st["z"].append((ros_io.stamp_ns(m) * 1e-9, m.pose.pose.position.z)), qos)
n.create_subscription(Float64MultiArray, ros_io.TOPIC_BRIDGE_DIAGNOSTICS,
                      lambda m: st["diag"].update(ros_io.diagnostics_dict(m)), qos)
t_end = time.monotonic() + 240
while time.monotonic() < t_end and st["diag"].get("sim_time", 0.0) < duration - 1e-6:
    rclpy.spin_once(n, timeout_sec=0.05)
late = [z for t, z in st["z"] if t >= duration - 1.0]
print("SENT", st["sent"], "FOREIGN", int(st["diag"].get("commands_foreign", -1)),
      "APPLIED", int(st["diag"].get("commands_applied", -1)), "ZMIN", min(late) if late else -1.0, flush=True)
'''


def test_a_second_publisher_s_commands_are_not_applied_in_layout_processes(tmp_path):
    """layout:=processes, lockstep: a real rclpy node answers every tick with a well-formed 1e9 N m command
    on every joint (before: the last command of a tick won, MuJoCo clipped it to the effort limit, the robot
    was thrown). The bridge follows the launch's own controller: none of them is applied, each is counted
    (commands_foreign) and the intruder is logged once; the robot stands (base height)."""
    env = ros_env()
    duration = 3.0
    intruder = subprocess.Popen([sys.executable, "-c", INTRUDER, str(duration)], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
    try:
        run = subprocess.run([str(BIN / "legged-wbc"), "launch", "walking_sim", "layout:=processes",
                              "scenario:=nominal", f"duration:={duration}"], env=env, capture_output=True, text=True,
                             timeout=600)
        out = intruder.communicate(timeout=120)[0]
    finally:
        if intruder.poll() is None:
            intruder.kill()
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    line = [ln for ln in out.splitlines() if ln.startswith("SENT")]
    assert line, out
    _, sent, _, foreign, _, applied, _, zmin = line[0].split()
    # counted as they come (the last ones may still be in flight when the bridge sends its last diagnostics)
    assert int(sent) > 500 and int(sent) >= int(foreign) >= 0.9 * int(sent), line
    assert int(applied) >= 0.99 * round(duration / 0.002), line         # the controller's, one per tick
    assert float(zmin) > 0.35, line                                     # standing (0.42 m), not thrown
    logs = run.stdout + run.stderr
    # said once, naming the node (ROS 2 names a publisher only through the graph: the line waits for it)
    # (by node, GID and pid where known: DDS does not tell the intruder's)
    said = [ln for ln in logs.splitlines() if re.search(r"torque commands from \S+ \(gid [0-9a-f]{32}, pid unknown\) "
                                                        r"dropped", ln)]
    assert len(said) == 1 and "torque commands from /intruder (gid " in said[0], logs[-3000:]
    assert re.search(r"following /wbc_controller \(gid [0-9a-f]{32}, pid \d+\), this launch's controller", logs)
