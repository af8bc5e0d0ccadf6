"""The executors of the stack's processes (``ros_io.make_executor``: rclpy's EventsExecutor by
default, ``LEGGED_WBC_EXECUTOR=single`` for the SingleThreadedExecutor), as real processes over DDS.

rclpy 9.1.2's EventsExecutor busy-waits when it is spun without a timeout (its event queue waits
with the deadline ``time_point::max()``, which does not block): the spinning thread holds the
queue's mutex nearly all the time, so the middleware threads that enqueue new messages and
``shutdown()`` starve (messages stall, publishers get no acknowledgements, ``shutdown(timeout_sec=1)``
never returns) and Python signal handlers do not run: the "lost messages, hung at shutdown" once
seen with the recorder. ``ros_io.spin_until`` always spins with a timeout. These tests run a 1 kHz
publisher in another process and check, for both executors, that every message arrives and that
SIGINT / SIGTERM end the subscriber promptly with everything counted (the recorder: in the bag).
With an untimed spin the subscriber does not stop on SIGINT and the bridge-style threaded spin does
not shut down, so these tests fail on it.

Run as a script for the helper processes: ``python test_executors.py pub N`` (publish N
``/joint_states`` at 1 kHz once a subscriber matched, wait for the acknowledgements) and
``python test_executors.py sub [K]`` (count ``/joint_states`` with ``ros_io.spin_node``; the K-th
message's callback raises).
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
N_JOINTS = 24


# ------------------------------------------------------------------------------------ helper processes
def _topic() -> str:
    """The test's topic: a name of its own (another run that picked the same ROS_DOMAIN_ID on this
    machine must not add its /joint_states to the counts)."""
    return os.environ.get("EXECUTOR_TEST_TOPIC", "/joint_states")


def publisher_main(n: int, rate: float = 1000.0) -> int:
    import rclpy
    from rclpy.duration import Duration
    from rclpy.node import Node
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState

    from legged_wbc.ros import io as ros_io

    rclpy.init()
    node = Node("executor_test_pub")
    pub = node.create_publisher(JointState, _topic(), QoSProfile(depth=2000, reliability=ReliabilityPolicy.RELIABLE))
    while pub.get_subscription_count() < 1:
        time.sleep(0.01)
    time.sleep(0.3)  # let the subscriber's side of the match settle too
    names = [f"j{i}" for i in range(N_JOINTS)]
    t0 = time.monotonic()
    for k in range(n):
        delay = t0 + k / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        pub.publish(ros_io.joint_state_msg((k + 1) * 1_000_000, names, [0.1] * N_JOINTS, [0.2] * N_JOINTS,
                                           [0.3] * N_JOINTS))
    acked = pub.wait_for_all_acked(Duration(seconds=10))
    print(json.dumps({"published": n, "acked": bool(acked)}), flush=True)
    node.destroy_node()
    rclpy.shutdown()
    return 0


def subscriber_main(fail_at: int = -1) -> int:
    from legged_wbc.ros import io as ros_io

    def make_node():
        from rclpy.node import Node
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import JointState

        class Counter(Node):
            def __init__(self):
                super().__init__("executor_test_sub")
                self.stamps: list[int] = []
                self.create_subscription(JointState, _topic(), self.on_js,
                                         QoSProfile(depth=2000, reliability=ReliabilityPolicy.RELIABLE))
                print(f"subscriber ready ({ros_io.executor_kind()})", flush=True)

            def on_js(self, m):
                self.stamps.append(ros_io.stamp_ns(m.header.stamp))
                if len(self.stamps) == fail_at:
                    raise RuntimeError(f"callback failure at message {fail_at}")

            def destroy_node(self):
                s = self.stamps
                print(json.dumps({"received": len(s), "unique": len(set(s)), "in_order": s == sorted(s)}), flush=True)
                super().destroy_node()

        return Counter()

    return ros_io.spin_node(make_node, [sys.argv[0]])


# ------------------------------------------------------------------------------------ helpers
@pytest.fixture
def ros_env(ros_env):
    """conftest's, plus a topic of this test's own."""
    ros_env["EXECUTOR_TEST_TOPIC"] = f"/executor_test_{os.getpid()}_{random.randrange(10**9)}/joint_states"
    return ros_env


def _popen(cmd, env, log: Path) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                            start_new_session=True)


def _wait_for(log: Path, text: str, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        if text in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(f"no {text!r} in {log.name}:\n{log.read_text(errors='replace')}")


def _finish(proc: subprocess.Popen, log: Path, timeout: float) -> str:
    """Wait for ``proc`` (a hang = failure, the process is killed), return its output."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"{log.name}: still running {timeout:g} s after the signal (hung):\n"
                             f"{log.read_text(errors='replace')}") from None
    return log.read_text(errors="replace")


def _json_line(text: str, key: str) -> dict:
    for line in text.splitlines():
        if line.startswith("{") and key in line:
            return json.loads(line)
    raise AssertionError(f"no JSON line with {key!r}:\n{text}")


# ------------------------------------------------------------------------------------ unit
class _FakeExecutor:
    def __init__(self):
        self.timeouts: list = []

    def spin_once(self, timeout_sec=None):
        self.timeouts.append(timeout_sec)


def test_spin_until_never_spins_without_a_timeout():
    ex = _FakeExecutor()
    n = iter(range(5))
    from legged_wbc.ros import io as ros_io

    ros_io.spin_until(ex, lambda: next(n) >= 3)
    assert len(ex.timeouts) == 3
    assert all(t is not None and math.isfinite(t) and 0 < t <= ros_io.SPIN_PERIOD for t in ex.timeouts)


def test_executor_kind_from_the_environment(monkeypatch):
    from legged_wbc.ros import io as ros_io

    monkeypatch.delenv(ros_io.EXECUTOR_ENV, raising=False)
    assert ros_io.executor_kind() == "events"
    monkeypatch.setenv(ros_io.EXECUTOR_ENV, "single")
    assert ros_io.executor_kind() == "single"
    assert ros_io.executor_kind("events") == "events"
    monkeypatch.setenv(ros_io.EXECUTOR_ENV, "multi")
    with pytest.raises(ValueError, match="LEGGED_WBC_EXECUTOR"):
        ros_io.executor_kind()


# ------------------------------------------------------------------------------------ processes
N_MSGS = 2000  # 2 s at 1 kHz


@pytest.mark.ros
@pytest.mark.parametrize("kind", ["events", "single"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_spin_node_receives_everything_and_stops_on_signal(tmp_path, ros_env, kind, sig):
    """A spin_node subscriber (the estimator's and controller's main) takes every one of 2000
    messages published at 1 kHz by another process, in order, then stops on the signal."""
    env = dict(ros_env, **{"LEGGED_WBC_EXECUTOR": kind})
    sub_log, pub_log = tmp_path / "sub.log", tmp_path / "pub.log"
    sub = _popen([sys.executable, __file__, "sub"], env, sub_log)
    try:
        _wait_for(sub_log, f"subscriber ready ({kind})", sub)
        pub = _popen([sys.executable, __file__, "pub", str(N_MSGS)], env, pub_log)
        out = _finish(pub, pub_log, timeout=120)
        assert _json_line(out, "published") == {"published": N_MSGS, "acked": True}, out
        sub.send_signal(sig)
        text = _finish(sub, sub_log, timeout=20)
    finally:
        if sub.poll() is None:
            sub.kill()
    assert sub.returncode == 128 + sig, text          # stopped by the signal: 130 / 143
    assert _json_line(text, "received") == {"received": N_MSGS, "unique": N_MSGS, "in_order": True}, text


@pytest.mark.ros
@pytest.mark.parametrize("kind", ["events", "single"])
def test_spin_node_callback_exception_ends_the_process(tmp_path, ros_env, kind):
    """A callback that raises ends spin_node with the exception (non-zero exit, traceback): the
    process does not spin on with the EventsExecutor, which would never take the rest of that
    batch of messages."""
    env = dict(ros_env, **{"LEGGED_WBC_EXECUTOR": kind})
    sub_log, pub_log = tmp_path / "sub.log", tmp_path / "pub.log"
    sub = _popen([sys.executable, __file__, "sub", "5"], env, sub_log)
    pub = None
    try:
        _wait_for(sub_log, f"subscriber ready ({kind})", sub)
        pub = _popen([sys.executable, __file__, "pub", "200"], env, pub_log)
        text = _finish(sub, sub_log, timeout=60)
    finally:
        for p in (sub, pub):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    assert sub.returncode not in (0, None), text
    assert "RuntimeError: callback failure at message 5" in text, text
    assert _json_line(text, "received")["received"] == 5, text


@pytest.mark.ros
@pytest.mark.parametrize("kind", ["events", "single"])
def test_threaded_spin_shuts_down(tmp_path, ros_env, kind):
    """The bridge's layout: the executor spins in a thread (ros_io.spin_until) while the main thread
    publishes at 1 kHz; the thread stops and ``shutdown(timeout_sec=1)`` succeeds."""
    code = f'''
import json, os, threading, time
import rclpy
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rclpy.signals import SignalHandlerOptions
from std_msgs.msg import Int64
from legged_wbc.ros import io as ros_io
rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
qos = QoSProfile(depth=2000, reliability=ReliabilityPolicy.RELIABLE)
node = rclpy.create_node("threaded_spin")
got = []
topic = os.environ["EXECUTOR_TEST_TOPIC"] + "_threaded"
node.create_subscription(Int64, topic, lambda m: got.append(m.data), qos)
pub = node.create_publisher(Int64, topic, qos)
ex = ros_io.make_executor({kind!r})
ex.add_node(node)
running = threading.Event(); running.set()
th = threading.Thread(target=ros_io.spin_until, args=(ex, lambda: not running.is_set()), daemon=True)
th.start()
while pub.get_subscription_count() < 1:
    time.sleep(0.01)
for k in range(1000):
    pub.publish(Int64(data=k)); time.sleep(0.001)
t_end = time.monotonic() + 10
while len(got) < 1000 and time.monotonic() < t_end:
    time.sleep(0.01)
running.clear(); th.join(timeout=5)
ok = ex.shutdown(timeout_sec=1.0)
print(json.dumps({{"got": len(got), "thread_alive": th.is_alive(), "shutdown": ok}}), flush=True)
node.destroy_node(); rclpy.shutdown()
'''
    log = tmp_path / "threaded.log"
    p = _popen([sys.executable, "-c", code], ros_env, log)
    text = _finish(p, log, timeout=60)
    assert p.returncode == 0, text
    assert _json_line(text, "got") == {"got": 1000, "thread_alive": False, "shutdown": True}, text


@pytest.mark.ros
@pytest.mark.parametrize("kind", ["events", "single"])
def test_recorder_records_every_message_and_stops_on_sigint(tmp_path, ros_env, kind):
    """bag_recorder (its real main) with each executor: every /joint_states message published at
    1 kHz by another process is in the bag, in order; SIGINT closes a complete bag, exit 130."""
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import Stores, get_typestore

    env = dict(ros_env, **{"LEGGED_WBC_EXECUTOR": kind})
    params = tmp_path / "rec.yaml"
    topic = env["EXECUTOR_TEST_TOPIC"]
    params.write_text("bag_recorder:\n  ros__parameters:\n"
                      f"    topics: ['{topic}:sensor_msgs/msg/JointState']\n    record_all: false\n")
    bag = tmp_path / "bag"
    rec_log, pub_log = tmp_path / "rec.log", tmp_path / "pub.log"
    rec = _popen([str(BIN / "bag_recorder"), "--ros-args", "--params-file", str(params), "-p", f"output:={bag}"],
                 env, rec_log)
    try:
        _wait_for(rec_log, "recording to", rec)
        pub = _popen([sys.executable, __file__, "pub", str(N_MSGS)], env, pub_log)
        out = _finish(pub, pub_log, timeout=120)
        assert _json_line(out, "published") == {"published": N_MSGS, "acked": True}, out
        rec.send_signal(signal.SIGINT)
        text = _finish(rec, rec_log, timeout=30)
    finally:
        if rec.poll() is None:
            rec.kill()
    assert rec.returncode == 130, text                # bag closed, then the convention: 128 + SIGINT
    assert "stopping (signal SIGINT)" in text and f"{topic} {N_MSGS}" in text, text
    assert (bag / "metadata.yaml").exists()
    stamps = []
    with AnyReader([bag], default_typestore=get_typestore(Stores.ROS2_KILTED)) as reader:
        for conn, _, raw in reader.messages():
            m = reader.deserialize(raw, conn.msgtype)
            stamps.append(m.header.stamp.sec * 10**9 + m.header.stamp.nanosec)
    assert stamps == [(k + 1) * 1_000_000 for k in range(N_MSGS)]


if __name__ == "__main__":
    if sys.argv[1] == "pub":
        sys.exit(publisher_main(int(sys.argv[2])))
    if sys.argv[1] == "sub":
        sys.exit(subscriber_main(int(sys.argv[2]) if len(sys.argv) > 2 else -1))
    sys.exit(f"unknown helper {sys.argv[1]!r}")
