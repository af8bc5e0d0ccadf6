"""Recording off the control core: fixed-layout records, the shared-memory ring, the recorder process.

What must hold: a message packed by the control process and spliced by the recorder process is the
message rclpy would have serialized (decoded by rclpy itself); a message whose shape changed is never
spliced into an old template; the ring keeps order across wrap-around and counts what it drops; the
recorder process writes every message it got (MCAP and sqlite3) and closes the bag when its producer
dies; and through the container, both storages hold every topic, read back by readers that are not
the one that wrote them (the ``mcap`` library; Python's ``sqlite3`` + rclpy).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sqlite3
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from legged_wbc.ros import io as ros_io
from legged_wbc.ros.recording.cdr_layout import MessageLayout
from legged_wbc.ros.recording.shm_ring import RecordRing

ROOT = Path(__file__).resolve().parents[1]
NAMES = [f"leg{i // 3}_j{i % 3}" for i in range(18)]


def _stack_messages(rng):
    """One message of every type the stack publishes, with random numbers."""
    r = lambda n: rng.normal(size=n)  # noqa: E731
    q = np.r_[r(3), [0.0, 0.0, 0.0, 1.0], r(18)]
    return {
        "/joint_states": ros_io.joint_state_msg(int(rng.integers(1e12)), NAMES, r(18), r(18), r(18)),
        "/imu": ros_io.imu_msg(int(rng.integers(1e12)), "base_link", [0.0, 0.0, 0.0, 1.0], r(3), r(3)),
        "/estimator/odom": ros_io.odometry_msg(int(rng.integers(1e12)), q, r(24), "base_link"),
        "/wbc/diagnostics": ros_io.float64_array_msg(r(14), "wbc[" + ",".join("abcdefghijklmn") + "]"),
        "/clock": ros_io.clock_msg(int(rng.integers(1e12))),
        "/bridge/command_latency": ros_io.command_latency_msg(list(range(7)), r(7)),
    }


def test_packed_messages_splice_into_what_rclpy_serializes():
    from rclpy.serialization import deserialize_message, serialize_message

    rng = np.random.default_rng(3)
    msgs = _stack_messages(rng)
    layouts = {t: MessageLayout.from_message(m) for t, m in msgs.items()}   # checks its template itself
    for _ in range(5):                          # new numbers, same shapes: the same layouts
        new = _stack_messages(rng)
        for topic, m in new.items():
            data = layouts[topic].splicer.build(layouts[topic].pack(m))
            assert deserialize_message(data, type(m)) == m, topic
            ref = serialize_message(m)
            assert len(data) == len(ref) and data[:4] == ref[:4] == b"\x00\x01\x00\x00", topic
    # the payload is the numbers only: far smaller than the message for a named JointState
    js = msgs["/joint_states"]
    assert len(layouts["/joint_states"].pack(js)) == 8 + 3 * 18 * 8


def test_a_changed_shape_is_never_spliced_into_an_old_template():
    rng = np.random.default_rng(4)
    msgs = _stack_messages(rng)
    lay = {t: MessageLayout.from_message(m) for t, m in msgs.items()}
    js = msgs["/joint_states"]
    js.name = NAMES[:-1] + ["other"]                                 # a name
    assert lay["/joint_states"].pack(js) is None
    js.name = NAMES
    js.position = list(range(17))                                    # a length
    assert lay["/joint_states"].pack(js) is None
    imu = msgs["/imu"]
    imu.header.frame_id = "imu_link"                                 # a frame id
    assert lay["/imu"].pack(imu) is None
    diag = msgs["/wbc/diagnostics"]
    diag.layout.dim[0].label = "changed in place"                    # inside a nested sequence
    assert lay["/wbc/diagnostics"].pack(diag) is None
    lat = ros_io.command_latency_msg([1, 2], [3.0, 4.0])             # a variable-length topic
    assert lay["/bridge/command_latency"].pack(lat) is None


def test_adapter_records_are_the_filled_messages_records_whatever_the_arrays():
    """``Adapter.payload_parts`` (joined once per sample by ``write_values``) gives, for every adapter,
    the record ``MessageLayout.pack`` makes of the filled message and its size, whatever the value's
    arrays are: float64, lists, integers, float32, strided views."""
    from legged_wbc.ros.io import adapters as A

    rng = np.random.default_rng(8)
    forms = (lambda x: x, list, lambda x: np.round(x * 100).astype(np.int64), lambda x: x.astype(np.float32),
             lambda x: np.repeat(x, 2)[::2])
    js = A.JointStateAdapter(ros_io.joint_state_msg(0, NAMES, np.zeros(18), np.zeros(18), np.zeros(18)))
    imu = A.ImuAdapter(ros_io.imu_msg(0, "base_link", [0, 0, 0, 1], [0, 0, 0], [0, 0, 0], gyro_var=1e-4,
                                      accel_var=2e-3))
    odom = A.OdometryAdapter(ros_io.odometry_msg(0, np.r_[0, 0, 0.3, 0, 0, 0, 1, np.zeros(18)], np.zeros(24),
                                                 "base_link"))
    arr = A.ArrayAdapter(ros_io.float64_array_msg(np.zeros(5), "diag[a,b,c,d,e]"))
    clock = A.ClockAdapter(ros_io.clock_msg(0))
    for k, form in enumerate(forms * 3):
        t = int(rng.integers(-(10**12), 10**13))
        r = lambda n: form(rng.normal(size=n))  # noqa: E731
        for a, v in ((js, A.JointSample(t, NAMES, r(18), r(18), r(18))), (imu, A.ImuSample(t, r(4), r(3), r(3))),
                     (odom, A.OdomSample(t, r(7 + 18 * (k % 2)), r(6 + 18 * (k % 2)))), (arr, r(5)), (clock, t)):
            size, parts = a.payload_parts(v)
            want = MessageLayout.from_message(a.to_ros(v)).pack(a.to_ros(v))
            assert b"".join(parts) == a.payload(v) == want and size == len(want), (k, type(a).__name__)


def test_ring_keeps_order_across_wraparound_and_counts_drops():
    ring = RecordRing.create(4096, mp.get_context("spawn").Lock())
    reader = RecordRing.attach(ring.name, ring.lock)
    try:
        rng = np.random.default_rng(5)
        sent, got = [], []
        for i in range(3000):                   # ~40x the capacity, random sizes, read in random batches
            payload = rng.bytes(int(rng.integers(0, 300)))
            assert ring.put(0, i % 7, i, payload)
            sent.append((i % 7, i, payload))
            full = ring.capacity - (ring._w - reader._r) < 700
            if rng.random() < 0.5 or full:           # published in batches of random length
                ring.commit()
            if rng.random() < 0.3 or full:           # and read in batches of their own
                got += [(tid, t, bytes(p)) for _, tid, t, p in reader.read()]
                reader.consumed()
        ring.commit()
        got += [(tid, t, bytes(p)) for _, tid, t, p in reader.read()]
        reader.consumed()
        assert got == sent and ring.dropped == 0
        # nobody reads: the ring fills, the producer never blocks and counts each record it gives up
        n_ok = sum(ring.put(0, 1, 0, b"x" * 100) for _ in range(100))
        assert 0 < n_ok < 100 and ring.dropped == 100 - n_ok
        assert reader.read() == []                 # nothing is visible before the commit
        ring.commit()
        assert len(reader.read()) == n_ok         # what was accepted is intact
    finally:
        reader.release()
        ring.release()


def _read_mcap_independently(path: Path) -> dict:
    """``{topic: [decoded messages]}`` with the ``mcap`` library's own ROS 2 decoder."""
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory

    out: dict = {}
    for f in sorted(path.glob("*.mcap")):
        with open(f, "rb") as fh:
            for _, channel, _, msg in make_reader(fh, decoder_factories=[DecoderFactory()]).iter_decoded_messages():
                out.setdefault(channel.topic, []).append(msg)
    return out


def _read_sqlite_independently(path: Path) -> dict:
    """``{topic: [rclpy messages]}`` with Python's sqlite3 and rclpy's deserializer."""
    from rclpy.serialization import deserialize_message

    from legged_wbc.ros.recording.bag_writer import message_class

    out: dict = {}
    for f in sorted(path.glob("*.db3")):
        con = sqlite3.connect(f)
        topics = {i: (name, message_class(typ)) for i, name, typ in con.execute("SELECT id, name, type FROM topics")}
        for tid, data in con.execute("SELECT topic_id, data FROM messages ORDER BY timestamp, id"):
            name, cls = topics[tid]
            out.setdefault(name, []).append(deserialize_message(bytes(data), cls))
        con.close()
    return out


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_recorder_process_writes_every_message(tmp_path, storage):
    from rclpy.serialization import serialize_message

    from legged_wbc.ros.recording.bag_process import ShmBagSink
    from legged_wbc.ros.recording.bag_writer import message_class

    rng = np.random.default_rng(6)
    bag = tmp_path / "bag"
    sink = ShmBagSink(bag, storage, "controller=cbf", ring_bytes=1 << 20)
    sent: dict = {}
    for k in range(300):
        for topic, m in _stack_messages(rng).items():
            if k % 50 == 0 and topic == "/bridge/command_latency":
                m = ros_io.command_latency_msg(list(range(k % 13)), rng.normal(size=k % 13))   # new shapes
            sink.add_topic(topic, ros_io_type(m))
            if topic == "/clock":               # as from DDS: serialized bytes
                sink.write(topic, k * 1000, serialize_message(m))
            else:
                sink.write_message(topic, k * 1000, m)
            sent.setdefault(topic, []).append(m)
    assert sink.close() == 0
    assert (bag / "metadata.yaml").is_file()
    read = _read_mcap_independently(bag) if storage == "mcap" else _read_sqlite_independently(bag)
    assert sorted(read) == sorted(sent)
    from rclpy.serialization import deserialize_message

    for topic, msgs in sent.items():
        assert len(read[topic]) == len(msgs), topic
        cls = message_class(ros_io_type(msgs[0]))
        for a, b in zip(msgs, read[topic]):
            if storage == "sqlite3":
                assert a == b, topic
            else:   # mcap_ros2 decodes to its own classes: compare through rclpy
                assert a == deserialize_message(serialize_message(a), cls)
                assert _same_numbers(a, b), topic


def ros_io_type(m) -> str:
    from legged_wbc.ros.recording.cdr_layout import message_type_name

    return message_type_name(m)


def _same_numbers(a, b) -> bool:
    """Field-by-field equality of an rclpy message and a decoded one (any class with the same fields)."""
    for name in a.get_fields_and_field_types():
        x, y = getattr(a, name), getattr(b, name)
        if hasattr(x, "get_fields_and_field_types"):
            if not _same_numbers(x, y):
                return False
        elif isinstance(x, (list, tuple)) and x and hasattr(x[0], "get_fields_and_field_types"):
            if len(x) != len(y) or not all(_same_numbers(u, v) for u, v in zip(x, y)):
                return False
        elif isinstance(x, str) or np.isscalar(x):
            if x != y:
                return False
        elif not np.array_equal(np.asarray(x), np.asarray(y)):
            return False
    return True


PRODUCER = """
import os, signal, sys, time
import numpy as np
from legged_wbc.ros import io as ros_io
from legged_wbc.ros.recording.bag_process import ShmBagSink
sink = ShmBagSink(sys.argv[1], "mcap", "", ring_bytes=1 << 20)
sink.add_topic("/joint_states", "sensor_msgs/msg/JointState")
m = ros_io.joint_state_msg(0, [f"j{i}" for i in range(18)], np.zeros(18), np.zeros(18), np.zeros(18))
for k in range(500):
    ros_io.fill_joint_state(m, ros_io.time_msg(k * 1000000), np.full(18, k), np.zeros(18), np.zeros(18))
    sink.write_message("/joint_states", k * 1000000, m)
    sink.flush()                          # as the container does after each sample
print(sink.proc.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)      # dies without closing anything
"""


def test_recorder_process_closes_the_bag_when_the_container_dies(tmp_path):
    bag = tmp_path / "orphan"
    p = subprocess.run([sys.executable, "-c", PRODUCER, str(bag)], capture_output=True, text=True, cwd=ROOT,
                       timeout=120)
    assert p.returncode == -signal.SIGKILL, p.stderr
    child = int(p.stdout.split()[0])
    t_end = time.monotonic() + 60
    while not (bag / "metadata.yaml").is_file():
        assert time.monotonic() < t_end, "the orphaned recorder process never closed the bag"
        time.sleep(0.1)
    while _alive(child) and time.monotonic() < t_end:
        time.sleep(0.1)
    msgs = _read_mcap_independently(bag)["/joint_states"]
    assert [m.position[0] for m in msgs] == list(range(500))      # everything the producer put in


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


@pytest.mark.ros
@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_container_records_both_storages_completely(tmp_path, ros_env, storage):
    """Through the container (the recorder process behind it), each storage holds every topic from
    tick 0; read back by a reader other than rosbags. (sqlite3 wrote 0 messages through the container
    before: SQLite objects cannot cross threads.)"""
    bag = tmp_path / f"bag_{storage}"
    p = subprocess.run([str(ROOT / ".venv/bin/legged-wbc"), "launch", "walking_sim", "controller:=cbf",
                        "scenario:=nominal", "duration:=1", f"record:={bag}", f"storage:={storage}"],
                       env=ros_env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    assert "0 dropped" in p.stdout, p.stdout[-3000:]
    read = _read_mcap_independently(bag) if storage == "mcap" else _read_sqlite_independently(bag)
    expect = {"/clock": 1001, "/joint_states": 1001, "/imu": 1001, "/ground_truth/odom": 501,
              "/ground_truth/contacts": 501, "/disturbance": 501, "/estimator/odom": 501, "/estimator/support": 501,
              "/estimator/tau_ext": 501, "/estimator/diagnostics": 501, "/joint_torque_cmd": 501,
              "/wbc/relative_pitch": 501, "/wbc/diagnostics": 501}
    for topic, n in expect.items():
        assert len(read.get(topic, [])) == n, (topic, len(read.get(topic, [])))
    stamps = [m.header.stamp.sec * 10**9 + m.header.stamp.nanosec for m in read["/joint_torque_cmd"]]
    assert stamps == list(range(0, 1_000_000_001, 2_000_000))
    assert len(read["/bridge/diagnostics"]) >= 10 and len(read["/bridge/command_latency"]) >= 9


# The fast MCAP path against rosbags' Writer.write (both compressions): test_bag_format.py


def test_a_message_no_layout_fits_is_recorded_serialized_and_said_once(tmp_path, monkeypatch):
    from legged_wbc.ros.recording import cdr_layout
    from legged_wbc.ros.recording.bag_process import ShmBagSink

    def refuse(msg, check=True):
        raise cdr_layout.LayoutError("no fixed layout for this type")

    monkeypatch.setattr(cdr_layout.MessageLayout, "from_message", staticmethod(refuse))
    said: list[str] = []
    sink = ShmBagSink(tmp_path / "bag", "mcap", "", ring_bytes=1 << 20, log=said.append)
    sink.add_topic("/joint_states", "sensor_msgs/msg/JointState")
    msgs = [ros_io.joint_state_msg(k * 1000, NAMES, np.full(18, k), np.zeros(18), np.zeros(18)) for k in range(50)]
    for k, m in enumerate(msgs):
        sink.write_message("/joint_states", k * 1000, m)
    assert sink.close() == 0
    assert len(said) == 1 and "recording it serialized" in said[0]
    got = _read_mcap_independently(tmp_path / "bag")["/joint_states"]
    assert [m.position[0] for m in got] == list(range(50))


def test_a_samples_values_go_as_one_batch_record_and_come_out_message_for_message(tmp_path):
    """``write_values`` (the container's recorder after each sample): the adapters' records of several
    topics in one ring record; the bag holds each message as if written one by one, in order, and a
    batch that does not fit the ring counts every message it held as dropped."""
    from legged_wbc.ros.io import adapters as A
    from legged_wbc.ros.recording.bag_process import KIND_BATCH, ShmBagSink, _expand_batches

    rng = np.random.default_rng(11)
    names = [f"j{i}" for i in range(18)]
    js = A.JointStateAdapter(ros_io.joint_state_msg(0, names, np.zeros(18), np.zeros(18), np.zeros(18)))
    imu = A.ImuAdapter(ros_io.imu_msg(0, "base_link", [0, 0, 0, 1], [0, 0, 0], [0, 0, 0], gyro_var=1e-4,
                                      accel_var=1e-3))
    arr = A.ArrayAdapter(ros_io.float64_array_msg(np.zeros(5), "diag[a,b,c,d,e]"))
    bag = tmp_path / "bag"
    sink = ShmBagSink(bag, "mcap", "", ring_bytes=1 << 20)
    expect: dict = {}
    for topic, a in (("/joint_states", js), ("/imu", imu), ("/diag", arr)):
        sink.add_topic(topic, ros_io_type(a.msg))
    for k in range(200):
        t = k * 2_000_000
        values = [("/joint_states", t, A.JointSample(t, names, *rng.normal(size=(3, 18))), js),
                  ("/imu", t, A.ImuSample(t, rng.normal(size=4), rng.normal(size=3), rng.normal(size=3)), imu),
                  ("/diag", t, rng.normal(size=5), arr)]
        sink.write_values(values)
        sink.flush()
        for topic, _, v, _a in values:
            expect.setdefault(topic, []).append(v)
    assert sink.close() == 0
    read = _read_mcap_independently(bag)
    for topic, a in (("/joint_states", js), ("/imu", imu), ("/diag", arr)):
        assert len(read[topic]) == 200, topic
    for v, m in zip(expect["/joint_states"], read["/joint_states"]):   # in order, bit for bit
        assert m.header.stamp.sec * 10**9 + m.header.stamp.nanosec == v.stamp_ns and list(m.name) == names
        assert np.array_equal(m.position, v.position) and np.array_equal(m.effort, v.effort)
    for v, m in zip(expect["/imu"], read["/imu"]):
        assert np.array_equal([m.angular_velocity.x, m.angular_velocity.y, m.angular_velocity.z], v.gyro)
    assert all(np.array_equal(m.data, v) for v, m in zip(expect["/diag"], read["/diag"]))
    # a value of a new shape (17 joints) amid a batch: its own template, the others stay batched
    sink = ShmBagSink(tmp_path / "shape", "mcap", "", ring_bytes=1 << 20)
    for topic, a in (("/joint_states", js), ("/diag", arr)):
        sink.add_topic(topic, ros_io_type(a.msg))
    sizes = [18, 18, 17, 17, 18]
    for k, n in enumerate(sizes):
        sink.write_values([("/joint_states", k, A.JointSample(k, names[:n], *np.full((3, n), float(k))), js),
                           ("/diag", k, np.full(5, float(k)), arr)])
        sink.flush()
    assert sink.close() == 0
    read = _read_mcap_independently(tmp_path / "shape")
    assert [len(m.position) for m in read["/joint_states"]] == sizes
    assert [m.position[0] for m in read["/joint_states"]] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert [m.data[0] for m in read["/diag"]] == [0.0, 1.0, 2.0, 3.0, 4.0]
    # a batch record splits into its messages, payload for payload
    recs = [(KIND_BATCH, 0, 0, memoryview(struct.pack("<IIq", 8, 4, 77) + b"abcdefgh" + struct.pack("<IIq", 3, 5, 78)
                                                      + b"xyz" + bytes(5)))]
    out = _expand_batches(recs)
    assert [(k, tid, t, bytes(p)) for k, tid, t, p in out] == [(0, 4, 77, b"abcdefgh"), (0, 5, 78, b"xyz")]
    # a batch that does not fit: every message in it is counted as dropped
    small = ShmBagSink(tmp_path / "small", "mcap", "", ring_bytes=1 << 12)
    small.add_topic("/joint_states", "sensor_msgs/msg/JointState")
    v = ("/joint_states", 0, A.JointSample(0, names, np.zeros(18), np.zeros(18), np.zeros(18)), js)
    small.write_values([v])                 # the first message: described and checked on its own
    small.write_values([v] * 40)            # ~18 kB: more than the ring holds
    assert small.close() == 40


PEER_PRODUCER = """
import os, signal, sys
import numpy as np
from legged_wbc.ros import io as ros_io
from legged_wbc.ros.recording.bag_process import RingSink
from legged_wbc.ros.recording.shm_ring import RecordRing
ring = RecordRing.attach_file(sys.argv[1])      # no multiprocessing object shared with the ring's creator
ring.set_producer(os.getpid())
said = []
sink = RingSink(ring, log=said.append)
sink.add_topic("/estimator/odom", "nav_msgs/msg/Odometry")
sink.add_topic("/big", "std_msgs/msg/Float64MultiArray")
q = np.r_[0.0, 0.0, 0.3, 0.0, 0.0, 0.0, 1.0, np.zeros(18)]
for k in range(300):
    q[0] = k
    sink.write_message("/estimator/odom", k * 2_000_000, ros_io.odometry_msg(k * 2_000_000, q, np.zeros(24), "base"))
    sink.flush()                                 # as the control part does after each frame
sink.write_message("/big", 1, ros_io.float64_array_msg(np.zeros(1 << 16), "big"))   # 512 kB: more than the ring
sink.flush()
if sys.argv[2] == "close":
    print(sink.close(), said, flush=True)
else:
    print(sink.dropped, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)          # dies without closing its ring
"""


@pytest.mark.parametrize("end", ["closes its ring", "dies"])
def test_a_second_ring_from_another_process_goes_into_the_same_bag_and_drops_are_summed(tmp_path, end):
    """The split layout's control part writes its own topics into a second ring (``open_peer_ring``) from a
    process that shares no multiprocessing object with the sink: the recorder process drains both rings
    into one bag, each record as written, and finishes once the second ring is closed or its producer is
    gone; a record that fits neither ring is dropped and counted by its producer, and ``dropped_messages``
    in ``metadata.yaml`` is the sum of both."""
    import yaml

    from legged_wbc.ros.recording.bag_process import ShmBagSink

    said: list[str] = []
    bag = tmp_path / "bag"
    sink = ShmBagSink(bag, "mcap", "layout=split", ring_bytes=1 << 20, log=said.append)
    peer = sink.open_peer_ring(256 << 10)
    p = subprocess.run([sys.executable, "-c", PEER_PRODUCER, peer, "close" if end == "closes its ring" else "kill"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    if end == "closes its ring":
        assert p.returncode == 0, p.stderr
        assert p.stdout.startswith("1 [") and "1 messages did not fit" in p.stdout, p.stdout   # said by the producer
    else:
        assert p.returncode == -signal.SIGKILL and p.stdout.strip() == "1", p.stderr
    sink.add_topic("/joint_states", "sensor_msgs/msg/JointState")
    sink.add_topic("/big", "std_msgs/msg/Float64MultiArray")
    for k in range(100):
        m = ros_io.joint_state_msg(k * 1_000_000, NAMES, np.full(18, k), np.zeros(18), np.zeros(18))
        sink.write_message("/joint_states", k * 1_000_000, m)
        sink.flush()
    sink.write_message("/big", 2, ros_io.float64_array_msg(np.zeros(1 << 18), "big"))     # 2 MB: more than the ring
    t0 = time.monotonic()
    assert sink.close() == 2
    assert time.monotonic() - t0 < 10.0            # the producer's end was seen, not waited out
    assert any("1 messages of the linked part did not fit" in s for s in said), said
    meta = yaml.safe_load((bag / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert meta["custom_data"]["dropped_messages"] == "2" and meta["custom_data"]["layout"] == "split"
    read = _read_mcap_independently(bag)
    assert [m.position[0] for m in read["/joint_states"]] == list(range(100))
    odom = read["/estimator/odom"]
    assert [m.pose.pose.position.x for m in odom] == list(range(300))
    assert [m.header.stamp.sec * 10**9 + m.header.stamp.nanosec for m in odom] == [k * 2_000_000 for k in range(300)]
    assert "/big" not in read


# ------------------------------------------------------------------------------------ trust in the rings
# Records are versioned plain JSON, never pickles; a ring is attached by a name of its scheme only, if it is
# this user's 0600 file and not a symlink; records that run past the data are corruption (RingCorrupt).
class _Mkdir:
    """A pickle that makes a directory when unpickled: proof that code ran."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def test_ring_records_of_the_old_pickle_format_are_refused(tmp_path):
    """The recorder process reads a topic record and a second ring's name as versioned JSON checked field
    by field: records in the old pickle format (one that would run code among them), a ring name that is a
    path and a layout whose slices run past its payload are :class:`RingCorrupt`, and nothing is unpickled.
    What the producer writes comes back equal (layout, QoS, type hash)."""
    import pickle

    from rclpy.qos import QoSProfile

    from legged_wbc.ros.recording.bag_process import KIND_PEER, KIND_TOPIC, _BagSide
    from legged_wbc.ros.recording.bag_writer import qos_to_rosbags
    from legged_wbc.ros.recording.shm_ring import RingCorrupt
    from legged_wbc.ros.io.wire import pack
    from legged_wbc.ros.recording.ring_records import pack_peer_ring, pack_topic_info, unpack_peer_ring, unpack_topic_info

    marker = tmp_path / "code_ran"
    splicer = MessageLayout.from_message(_stack_messages(np.random.default_rng(1))["/joint_states"]).splicer
    qos = [qos_to_rosbags(QoSProfile(depth=7))]
    rec = pack_topic_info("/joint_states", "sensor_msgs/msg/JointState", splicer, qos, "RIHS01_" + "c" * 64)
    assert unpack_topic_info(rec) == {"topic": "/joint_states", "msgtype": "sensor_msgs/msg/JointState",
                                      "splicer": splicer, "qos": qos, "digest": "RIHS01_" + "c" * 64}
    name = "legged_wbc_ring_" + "0123456789abcdef" * 2
    assert unpack_peer_ring(pack_peer_ring(name)) == name
    old_topic = pickle.dumps({"topic": "/joint_states", "msgtype": "sensor_msgs/msg/JointState", "splicer": splicer,
                              "qos": [], "digest": None, "x": _Mkdir(marker)})
    bad_slices = pack(0xB1, {"topic": "/a", "msgtype": "std_msgs/msg/String", "qos": [], "digest": None,
                             "splicer": {"consts": ["", ""], "slices": [[0, 99]], "size": 8}})
    bag = _BagSide(str(tmp_path / "bag"), "mcap", "", "zstd")
    try:
        for kind, payload in ((KIND_TOPIC, old_topic), (KIND_TOPIC, bad_slices), (KIND_TOPIC, b""),
                              (KIND_PEER, pickle.dumps({"ring": name})), (KIND_PEER, pack_peer_ring("../../tmp/x")),
                              (KIND_PEER, pack(0xB1, {"ring": name, "more": 1}))):
            with pytest.raises(RingCorrupt):
                bag.write_records([(kind, 0, 0, memoryview(payload))], {})
        assert not marker.exists()
    finally:
        bag.writer.close()


def test_a_ring_is_attached_by_a_name_of_its_scheme_only_and_only_if_it_is_this_users(tmp_path):
    """``attach_file`` (what the split's control part does with RECORD's ring, and the recorder process with
    a peer ring) refuses a path (the issue's ``../../<dir>/<file>``), another naming scheme, a symlink (the
    file it points to stays untouched), a file of mode 0644 or of another user, and a header whose capacity
    does not fit the file; the rings it creates carry 128 random bits in their names, mode 0600."""
    from legged_wbc.ros.recording.shm_ring import RING_NAME, RING_PREFIX, SHM_DIR, RingRefused

    ring = RecordRing.create(1 << 12, None)
    try:
        assert RING_NAME.fullmatch(ring.name) and os.stat(f"{SHM_DIR}/{ring.name}").st_mode & 0o777 == 0o600
        RecordRing.attach_file(ring.name).release()
    finally:
        ring.release()
    for name in ("../../tmp/x", "psm_1234abcd", RING_PREFIX + "0" * 31 + "/", RING_PREFIX + "../" + "0" * 29):
        with pytest.raises(RingRefused, match="not a ring name"):
            RecordRing.attach_file(name)
    target = tmp_path / "target"
    target.write_bytes(bytes(8192))
    target.chmod(0o600)
    path = Path(SHM_DIR, RING_PREFIX + os.urandom(16).hex())
    try:
        path.symlink_to(target)
        with pytest.raises(OSError):                 # O_NOFOLLOW: ELOOP
            RecordRing.attach_file(path.name)
        path.unlink()
        path.write_bytes(bytes(8192))
        path.chmod(0o644)
        with pytest.raises(RingRefused, match="mode 0600"):
            RecordRing.attach_file(path.name)
        path.chmod(0o600)
        with pytest.raises(RingRefused, match="capacity 0 does not fit"):
            RecordRing.attach_file(path.name)
        if os.geteuid() == 0:                        # a file of another user (root can make one)
            os.chown(path, 65534, 65534)
            with pytest.raises(RingRefused, match="uid 65534"):
                RecordRing.attach_file(path.name)
    finally:
        path.unlink(missing_ok=True)
    assert target.read_bytes() == bytes(8192)


def test_a_record_past_the_published_data_is_ring_corruption():
    """A record header whose size runs past the published write position or the ring's end, and a write
    position more than a ring ahead of the read position, are :class:`RingCorrupt`, never a loop."""
    from legged_wbc.ros.recording.shm_ring import REC, RingCorrupt

    ring = RecordRing.create(1 << 12, mp.get_context("spawn").Lock())
    try:
        assert ring.put(0, 1, 5, b"abcdefgh")
        ring.commit()
        REC.pack_into(ring.buf, 0, 1000, 0, 1, 5)          # the size word says more than was published
        with pytest.raises(RingCorrupt, match="past the published data"):
            ring.read()
        REC.pack_into(ring.buf, 0, 1 << 20, 0, 1, 5)
        with pytest.raises(RingCorrupt, match="past the ring"):
            ring.read()
        ring._hdr[0] = 1 << 40                              # write position
        with pytest.raises(RingCorrupt, match="write position"):
            ring.read()
    finally:
        ring.release()


# ------------------------------------------------------------------------------------ a failed recording says so
# Each failure is made for real on a recorder process fed by this test (a few seconds each, not a walk): the
# recording ends in one line naming the cause and the messages in the bag, the recorder process's exit status
# is not 0 (the container then exits 1), and the bag opens with rosbags AND the mcap reader holding exactly the
# reported messages, in order; nothing that reached the recorder is lost unless the disk itself refused it.
def _js(k: int):
    return ros_io.joint_state_msg(k * 1_000_000, NAMES, np.full(18, float(k)), np.zeros(18), np.zeros(18))


def _produce(sink, n: int, at: int | None = None, action=None) -> int:
    """``n`` JointStates (position[0] = k) into ``sink``, published after each as the container does;
    ``action(sink)`` once ``at`` of them are in. Returns how many the sink put into its ring."""
    sink.add_topic("/joint_states", "sensor_msgs/msg/JointState")
    for k in range(n):
        if k == at:
            action(sink)
        sink.write_message("/joint_states", k * 1_000_000, _js(k))
        sink.flush()
    return sum(sink.counts.values())


def _reported(failure: str) -> int:
    import re

    assert failure and "\n" not in failure and failure.startswith("recording FAILED ("), failure
    m = re.search(r": (\d+) messages in the bag ", failure)
    assert m, failure
    return int(m.group(1))


def _bag_positions(bag: Path) -> list:
    """position[0] of every /joint_states message, read by rosbags (through metadata.yaml; its AnyReader
    too) and by the mcap reader (its summary or, without one, its stream) or Python's sqlite3 + rclpy: they
    must agree."""
    from rosbags.highlevel import AnyReader
    from rosbags.rosbag2 import Reader
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_KILTED)
    with Reader(bag) as r:
        read = [(c.topic, d) for c, _, d in r.messages()]
        assert r.message_count == len(read)
        by_rosbags = [store.deserialize_cdr(d, "sensor_msgs/msg/JointState").position[0]
                      for topic, d in read if topic == "/joint_states"]
    with AnyReader([bag], default_typestore=store) as r:
        assert [r.deserialize(d, c.msgtype).position[0] for c, _, d in r.messages()
                if c.topic == "/joint_states"] == by_rosbags
    if list(bag.glob("*.db3")):
        assert not list(bag.glob("*-journal"))                         # rolled back: rosbags reads it as it is
        by_other = [m.position[0] for m in _read_sqlite_independently(bag).get("/joint_states", [])]
    else:
        by_other = [m.position[0] for m in _read_mcap_independently(bag).get("/joint_states", [])]
    assert by_rosbags == by_other
    return by_other


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_a_full_disk_ends_the_recording_in_one_line_and_leaves_a_readable_bag(tmp_path, capfd, monkeypatch,
                                                                                  storage):
    """The recorder process may write 2.5 MB (a file size limit, as a full disk: the write fails with EFBIG
    instead of ENOSPC; sqlite says "disk full" or "disk I/O error"): one line, no traceback, the bag repaired
    with what reached the disk (sqlite3: its commits)."""
    import resource

    from legged_wbc.ros.recording import bag_process
    from legged_wbc.ros.recording.bag_process import ShmBagSink

    bag = tmp_path / "bag"
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    create = RecordRing.create

    def limited_after_the_ring(*args):                  # the ring exists: the recorder process spawned next
        ring = create(*args)                            # inherits the limit
        resource.setrlimit(resource.RLIMIT_FSIZE, (2_500_000, hard))
        return ring

    monkeypatch.setattr(bag_process.RecordRing, "create", staticmethod(limited_after_the_ring))
    try:
        sink = ShmBagSink(bag, storage, "run=full", ring_bytes=8 << 20, compression="none")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        monkeypatch.undo()
    put = _produce(sink, 8000)
    sink.close()
    assert sink.proc.exitcode == 3
    cause = "file size limit reached" if storage == "mcap" else ("disk full (sqlite", "write error (sqlite")
    assert sink.failure.startswith(tuple(f"recording FAILED ({c}" for c in np.atleast_1d(cause))), sink.failure
    n = _reported(sink.failure)
    assert 0 < n < put == 8000
    assert _bag_positions(bag) == list(range(n))                       # what reached the disk, in order
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_a_killed_recorder_loses_nothing_it_was_given(tmp_path, storage):
    """SIGKILL mid-run: the bag is rebuilt from the file and the ring (records the process had read but not
    yet put into the file are taken back): every message put into the ring is in the bag. sqlite3: the
    committed messages (a commit per ~1 MiB; before, one at the close only: the bag held nothing)."""
    from legged_wbc.ros.recording.bag_process import ShmBagSink

    bag = tmp_path / "bag"
    sink = ShmBagSink(bag, storage, "", ring_bytes=8 << 20)
    put = _produce(sink, 12000, at=7000, action=lambda s: (time.sleep(0.3), os.kill(s.proc.pid, signal.SIGKILL)))
    sink.close()
    assert sink.proc.exitcode == -signal.SIGKILL
    assert "the recorder process was killed by SIGKILL" in sink.failure, sink.failure
    assert _reported(sink.failure) == put == 12000
    assert _bag_positions(bag) == list(range(12000))


def test_a_sqlite3_batch_is_in_the_file_exactly_when_end_batch_says_so(tmp_path):
    """chunk_by_caller + sqlite3: end_batch commits once ~1 MiB is pending (or on force), True only then;
    another connection (committed rows only, what the container reads after a kill) then sees next_mark()
    messages, before it fewer. One commit per MiB, not per batch."""
    from rclpy.serialization import serialize_message

    from legged_wbc.ros.recording.bag_repair import in_file_mark
    from legged_wbc.ros.recording.bag_writer import BagWriter

    bag = tmp_path / "bag"
    w = BagWriter(bag, "sqlite3", chunk_by_caller=True)
    w.add_topic("/joint_states", "sensor_msgs/msg/JointState")
    size, said = 0, []
    for k in range(4000):
        data = serialize_message(_js(k))
        w.write("/joint_states", k * 1_000_000, data)
        size += len(data)
        if k % 50 == 49:
            said.append(w.end_batch())
            if said[-1]:
                assert in_file_mark(bag, "sqlite3") == w.next_mark() == k + 1
            else:
                assert in_file_mark(bag, "sqlite3") < w.next_mark() == k + 1
    assert w.chunks_closed == sum(said) and size // 2**20 - 1 <= w.chunks_closed <= size // 2**20
    w.write("/joint_states", 4000 * 1_000_000, serialize_message(_js(4000)))
    assert w.end_batch() is False and in_file_mark(bag, "sqlite3") < 4001
    assert w.end_batch(force=True) is True and in_file_mark(bag, "sqlite3") == 4001
    assert w.end_batch(force=True) is True and w.chunks_closed == sum(said) + 1      # nothing pending: no commit
    w.close()
    assert _bag_positions(bag) == list(range(4001))


def _dead_sqlite_bag(bag: Path, committed: int, more: int, describe=None):
    """A sqlite3 bag whose writer died: ``committed`` JointStates committed, ``more`` written after them
    and never committed."""
    from rclpy.serialization import serialize_message

    from legged_wbc.ros.recording.bag_writer import BagWriter

    w = BagWriter(bag, "sqlite3", chunk_by_caller=True, describe=describe)
    w.add_topic("/joint_states", "sensor_msgs/msg/JointState")
    for k in range(committed + more):
        w.write("/joint_states", k * 1_000_000, serialize_message(_js(k)))
        if k + 1 == committed:
            assert w.end_batch(force=True)
    w.abandon()                                                          # the open transaction is lost


def test_a_sqlite3_bag_is_repaired_with_the_messages_taken_back_as_the_recorder_writes_them(tmp_path):
    """repair_bag on a .db3 without metadata.yaml: the committed messages, then the ``extra`` ones; a topic
    new to the file gets the ``topics`` and ``message_definitions`` rows the recorder would have written."""
    from rclpy.serialization import serialize_message
    from rosbags.interfaces import Qos, QosDurability, QosHistory, QosLiveliness, QosReliability, QosTime

    from legged_wbc.ros.recording.bag_repair import repair_bag
    from legged_wbc.ros.recording.bag_writer import BagWriter

    never = QosTime(sec=0x7FFFFFFF, nsec=0xFFFFFFFF)
    qos = [Qos(QosHistory.KEEP_LAST, 10, QosReliability.BEST_EFFORT, QosDurability.VOLATILE, never, never,
               QosLiveliness.AUTOMATIC, never, False)]
    bag = tmp_path / "bag"
    _dead_sqlite_bag(bag, 1000, 300)
    imu = serialize_message(ros_io.imu_msg(0, "base_link", [0.0, 0.0, 0.0, 1.0], [1.0, 2.0, 3.0], [4.0, 5.0, 6.0]))
    extra = [("/joint_states", "sensor_msgs/msg/JointState", [], None, k * 1_000_000, serialize_message(_js(k)))
             for k in range(1000, 1300)] + [("/imu", "sensor_msgs/msg/Imu", qos, None, k, imu) for k in range(50)]
    rep = repair_bag(bag, {"run": "x"}, extra)
    assert (rep.problem, rep.extra_written, rep.counts) == ("", 350, {"/joint_states": 1300, "/imu": 50})
    assert _bag_positions(bag) == list(range(1300))
    ref = BagWriter(tmp_path / "ref", "sqlite3", describe=lambda topic: (qos, None))
    ref.add_topic("/imu", "sensor_msgs/msg/Imu")
    ref.write("/imu", 0, imu)
    ref.close()
    rows = []
    for db in (bag / "bag.db3", tmp_path / "ref" / "ref.db3"):
        con = sqlite3.connect(db)
        rows.append((con.execute("SELECT name, type, serialization_format, offered_qos_profiles, "
                                 "type_description_hash FROM topics WHERE name = '/imu'").fetchall(),
                     con.execute("SELECT topic_type, encoding, encoded_message_definition, type_description_hash "
                                 "FROM message_definitions WHERE topic_type = 'sensor_msgs/msg/Imu'").fetchall(),
                     con.execute("SELECT ros_distro FROM schema").fetchall()))
        con.close()
    assert rows[0] == rows[1] and len(rows[0][0]) == 1 == len(rows[0][1]) and rows[0][2] == [("kilted",)]
    meta = (bag / "metadata.yaml").read_text()
    assert "storage_identifier: sqlite3" in meta and "run: x" in meta and "ros_distro: kilted" in meta


def test_repairing_a_sqlite3_bag_on_a_full_disk_says_so_and_keeps_what_it_held(tmp_path):
    """No room for the taken-back messages (a file size limit just above the file): ``problem`` says so, no
    exception, and the bag is readable with its committed messages."""
    bag = tmp_path / "bag"
    _dead_sqlite_bag(bag, 1000, 100)
    limit = (bag / "bag.db3").stat().st_size + 64 * 1024
    child = f"""
import json, resource, signal, sys
import numpy as np
from rclpy.serialization import serialize_message
from legged_wbc.ros import io as ros_io
from legged_wbc.ros.recording.bag_repair import repair_bag
names = {NAMES!r}
data = serialize_message(ros_io.joint_state_msg(0, names, np.ones(18), np.zeros(18), np.zeros(18)))
extra = [("/joint_states", "sensor_msgs/msg/JointState", [], None, (1000 + k) * 10**6, data) for k in range(3000)]
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
rep = repair_bag(sys.argv[1], {{}}, extra)
print(json.dumps([rep.problem, rep.extra_written, rep.total]))
"""
    import json

    p = subprocess.run([sys.executable, "-c", child, str(bag)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    problem, written, total = json.loads(p.stdout.splitlines()[-1])
    assert "3000 messages taken back from the ring could not be added" in problem, problem
    assert (written, total) == (0, 1000)
    assert _bag_positions(bag) == list(range(1000))


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_a_stopped_recorder_is_killed_after_a_bounded_wait_and_its_bag_rebuilt(tmp_path, monkeypatch, storage):
    from legged_wbc.ros.recording import bag_process
    from legged_wbc.ros.recording.bag_process import ShmBagSink

    monkeypatch.setattr(bag_process, "STALL_S", 1.0)
    bag = tmp_path / "bag"
    sink = ShmBagSink(bag, storage, "", ring_bytes=8 << 20)
    put = _produce(sink, 6000, at=3000, action=lambda s: (time.sleep(0.3), os.kill(s.proc.pid, signal.SIGSTOP)))
    t0 = time.monotonic()
    sink.close()
    assert time.monotonic() - t0 < 1.0 + 4.0                             # the stall bound, not the 120 s timeout
    assert sink.proc.exitcode == -signal.SIGKILL
    assert "made no progress for 1 s (stopped or hung) and was killed" in sink.failure, sink.failure
    assert _reported(sink.failure) == put == 6000
    assert _bag_positions(bag) == list(range(6000))


def _garbage(sink) -> None:
    """64 random bytes committed as if they were records, right after what the producer put."""
    ring = sink.ring
    off = ring.position % ring.capacity
    ring.buf[off:off + 64] = b"\xff" * 8 + os.urandom(56)
    ring._w += 64
    ring.commit()


def test_garbage_in_the_ring_ends_the_recording_with_what_came_before(tmp_path):
    """The recorder stops at the first record that does not check out (no endless loop on garbage), closes
    the bag with everything before it, says so and exits 3; the container does not wait forever."""
    from legged_wbc.ros.recording.bag_process import ShmBagSink

    bag = tmp_path / "bag"
    sink = ShmBagSink(bag, "mcap", "", ring_bytes=8 << 20)
    put = _produce(sink, 3000, at=1000, action=_garbage)
    t0 = time.monotonic()
    sink.close()
    assert time.monotonic() - t0 < 5.0
    assert sink.proc.exitcode == 3
    assert "corrupt ring" in sink.failure, sink.failure
    assert _reported(sink.failure) == 1000 and put == 3000
    assert _bag_positions(bag) == list(range(1000))


def test_a_closed_word_set_from_outside_is_said_and_truncates_nothing(tmp_path):
    """The ring's closed word set by someone else than its producer (no seal: the final position the
    producer announces when it closes): the recorder says so and records on until the real close."""
    from legged_wbc.ros.recording.bag_process import ShmBagSink

    bag = tmp_path / "bag"
    sink = ShmBagSink(bag, "mcap", "", ring_bytes=8 << 20)

    def close_from_outside(s):
        s.ring._hdr[3] = 1                                              # the closed word, no seal
        time.sleep(0.3)                                                 # the recorder has seen it

    put = _produce(sink, 3000, at=1000, action=close_from_outside)
    sink.close()
    assert sink.proc.exitcode == 3
    assert "set without its producer's seal (from outside)" in sink.failure, sink.failure
    assert _reported(sink.failure) == put == 3000
    assert _bag_positions(bag) == list(range(3000))


def test_a_clean_recording_reports_no_failure_and_keeps_its_records_until_they_are_in_the_file(tmp_path):
    """The recorder gives ring space back only once the records are in the file (a chunk written), so the
    producer's read position trails; a clean close: no failure, exit 0, every message."""
    from legged_wbc.ros.recording.bag_process import ShmBagSink

    bag = tmp_path / "bag"
    sink = ShmBagSink(bag, "mcap", "", ring_bytes=8 << 20)
    put = _produce(sink, 600)    # ~0.5 MB: less than a chunk (1 MiB), however the recorder's reads fall
    time.sleep(0.5)
    with sink.ring.lock:
        kept = int(sink.ring._hdr[0]) - int(sink.ring._hdr[1])
    assert kept > 0                                                      # read, not yet in a closed chunk
    sink.close()
    assert sink.failure == "" and sink.proc.exitcode == 0
    assert _bag_positions(bag) == list(range(put))


def _descendants(pid: int) -> list[int]:
    """Every descendant of ``pid`` (the children of each of its threads: a child started from another
    thread than the main one is listed under that thread's task)."""
    kids = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids += [int(x) for x in (task / "children").read_text().split()]
        except OSError:
            pass
    return kids + [d for k in kids for d in _descendants(k)]


@pytest.mark.ros
@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_a_container_whose_recorder_is_killed_ends_the_launch_non_zero_with_every_message(tmp_path, ros_env,
                                                                                          storage):
    """Through the launch: the container's recorder process SIGKILLed mid-walk; the launch exits non-zero,
    its last word is the one failure line, and the bag holds every message the container put in the ring
    (read by rosbags and by the mcap reader, or Python's sqlite3 + rclpy)."""
    import re

    from rosbags.rosbag2 import Reader

    bag = tmp_path / "bag"
    p = subprocess.Popen([str(ROOT / ".venv/bin/legged-wbc"), "launch", "walking_sim", "controller:=cbf",
                          "scenario:=nominal", f"duration:={60 if storage == 'mcap' else 30}", f"record:={bag}",
                          f"storage:={storage}"],   # killed long before its end (sqlite3: a shorter walk)
                         env=ros_env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in p.stdout:
        lines.append(line)
        if "composed" in line:
            break
    t_end = time.monotonic() + 60.0      # the recorder's process starts with the bag, once the nodes are up
    while True:
        time.sleep(1.0)
        writers = [d for d in _descendants(p.pid) if b"spawn_main" in Path(f"/proc/{d}/cmdline").read_bytes()]
        if writers or time.monotonic() > t_end:
            break
    assert len(writers) == 1, lines
    os.kill(writers[0], signal.SIGKILL)
    out = "".join(lines) + p.stdout.read()
    assert p.wait(timeout=300) != 0, out[-3000:]
    failed = [ln for ln in out.splitlines() if "recording FAILED" in ln and "walking_container:" in ln]
    assert len(failed) >= 1 and "killed by SIGKILL" in failed[0], out[-3000:]
    m = re.search(r": (\d+) messages in the bag .* of the (\d+) put in the recorder's ring here", failed[0])
    assert m and m.group(1) == m.group(2), failed[0]
    with Reader(bag) as r:
        assert r.message_count == int(m.group(1))
    read = _read_mcap_independently(bag) if storage == "mcap" else _read_sqlite_independently(bag)
    assert sum(len(v) for v in read.values()) == int(m.group(1))
    assert "Traceback" not in out


@pytest.mark.ros
def test_a_full_disk_under_the_per_process_recorder_ends_the_launch_non_zero(tmp_path, ros_env):
    """``layout:=processes``: the bag_recorder node writes its bag itself; on a full disk (a 1 MiB tmpfs,
    mounted when this user may) it stops, repairs the bag and exits 1 with one line; the launch fails."""
    import re

    from rosbags.rosbag2 import Reader

    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here (not root)")
    try:
        bag = disk / "bag"
        p = subprocess.run([str(ROOT / ".venv/bin/legged-wbc"), "launch", "walking_sim", "controller:=cbf",
                            "scenario:=nominal", "duration:=3", f"record:={bag}", "layout:=processes"],
                           env=ros_env, cwd=ROOT, capture_output=True, text=True, timeout=300)
        out = p.stdout + p.stderr
        assert p.returncode != 0, out[-3000:]
        failed = [ln for ln in out.splitlines()            # the node's line (the launcher quotes it once more)
                  if ln.startswith("[bag_recorder]") and "[bag_recorder]: recording FAILED (disk full" in ln]
        assert len(failed) == 1, out[-3000:]
        n = int(re.search(r": (\d+) messages in the bag ", failed[0]).group(1))
        assert n > 0 and "Traceback" not in out
        with Reader(bag) as r:
            assert r.message_count == n
        assert sum(len(v) for v in _read_mcap_independently(bag).values()) == n
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)


def test_rings_are_sized_from_the_topics_rates():
    """The recording rings hold ``ring_lag_s`` of the recorded topics at their rates (``RECORDED_TOPICS``): each
    topic's bound on its numbers covers the payload its messages pack into (the hexapod's shapes), and the
    ring is that many bytes per second times the lag (``ring_mb`` > 0: that size; no rates: 64 MiB)."""
    from types import SimpleNamespace

    from legged_wbc.ros.io.topics import (RECORD_OVERHEAD_BYTES, RECORDED_TOPICS, TOPIC_CLOCK, TOPIC_GT_ODOM,
                                          TOPIC_IMU, TOPIC_JOINT_STATES, recorded_bytes_per_s)
    from legged_wbc.ros.recording.bag_process import DEFAULT_RING_BYTES, MIN_RING_BYTES, ring_bytes

    rng = np.random.default_rng(9)
    n, legs = 24, 6
    names = [f"j{k}" for k in range(n)]
    msgs = {TOPIC_JOINT_STATES: ros_io.joint_state_msg(5, names, rng.normal(size=n), rng.normal(size=n),
                                                       rng.normal(size=n)),
            TOPIC_IMU: ros_io.imu_msg(5, "base_link", [0.0, 0.0, 0.0, 1.0], rng.normal(size=3), rng.normal(size=3)),
            TOPIC_GT_ODOM: ros_io.odometry_msg(5, np.r_[rng.normal(size=3), [0.0, 0.0, 0.0, 1.0], rng.normal(size=n)],
                                               rng.normal(size=n + 6), "base_link"),
            TOPIC_CLOCK: ros_io.clock_msg(5)}
    for topic, m in msgs.items():
        payload = len(MessageLayout.from_message(m).pack(m))
        assert payload + 16 <= 8 * RECORDED_TOPICS[topic][2](n, legs) + RECORD_OVERHEAD_BYTES, topic
    sim, control = recorded_bytes_per_s(("sim",), n, legs), recorded_bytes_per_s(("control",), n, legs)
    assert 1e6 < sim < 2.5e6 and 1e6 < control < 2.5e6       # measured: ~1.4 MB/s each, walking in real time
    assert recorded_bytes_per_s(("sim", "control"), n, legs) == sim + control
    cfg = SimpleNamespace(ring_mb=0.0, ring_lag_s=4.0)
    assert ring_bytes(cfg, sim) % 4096 == 0 and 4.0 * sim <= ring_bytes(cfg, sim) < 4.0 * sim + 4096
    assert ring_bytes(cfg, None) == DEFAULT_RING_BYTES and ring_bytes(cfg, 10) == MIN_RING_BYTES
    assert ring_bytes(SimpleNamespace(ring_mb=2.0, ring_lag_s=4.0), sim) == 2 << 20
