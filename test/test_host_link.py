"""The host link (``legged_wbc.ros.host_link``) that joins the two containers of ``layout:=split``:
values cross bit for bit, batches arrive as one frame in order, late subscriptions are announced,
a peer that goes away ends the link and what could not be sent is counted."""

from __future__ import annotations

import os
import threading
import uuid

import numpy as np
import pytest

from legged_wbc.ros.adapters import ImuSample, JointSample, OdomSample
from legged_wbc.ros.host_link import HostLink, LinkError, ValueCodec

NAMES = [f"j{i}" for i in range(18)]
RNG = np.random.default_rng(7)


def _values():
    return {
        "JointStateAdapter": JointSample(123_456_789_012, NAMES, RNG.normal(size=18), RNG.normal(size=18),
                                         RNG.normal(size=18)),
        "ImuAdapter": ImuSample(2_000_000, RNG.normal(size=4), RNG.normal(size=3), RNG.normal(size=3)),
        "OdometryAdapter": OdomSample(4_000_000, RNG.normal(size=7), RNG.normal(size=6)),
        "ArrayAdapter": RNG.normal(size=11),
        "ClockAdapter": 1_999_999_999_999,
    }


def _same(a, b) -> bool:
    if isinstance(a, tuple):
        return all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, list):
        return list(a) == list(b)
    if isinstance(a, np.ndarray):
        return a.tobytes() == np.asarray(b).tobytes()        # bit for bit (NaN and -0.0 included)
    return a == b


@pytest.mark.parametrize("kind", list(_values()))
def test_values_cross_bit_for_bit(kind):
    v = _values()[kind]
    codec = ValueCodec(kind, names=NAMES if kind == "JointStateAdapter" else None)
    data = codec.encode(v)
    back = codec.decode(memoryview(bytearray(b"xx" + data)), 2, 2 + len(data))
    assert _same(v, back)


def test_joint_names_other_than_the_templates_travel_with_the_value():
    codec = ValueCodec("JointStateAdapter", names=NAMES)
    v = JointSample(5, list(reversed(NAMES)), np.arange(18.0), np.zeros(18), np.full(18, np.nan))
    back = codec.decode(memoryview(bytearray(codec.encode(v))), 0, len(codec.encode(v)))
    assert back.names == list(reversed(NAMES)) and _same(v, back)
    same = JointSample(5, list(NAMES), np.arange(18.0), np.zeros(18), np.zeros(18))
    assert len(codec.encode(same)) < len(codec.encode(v))     # the template's names are not sent


def _pair(tmp_name: str, sim_pubs, ctl_pubs, sim_subs, ctl_subs):
    sim, ctl = HostLink(tmp_name, "sim", log=lambda m: None), HostLink(tmp_name, "control", log=lambda m: None)
    t = threading.Thread(target=ctl.handshake, args=(ctl_pubs, ctl_subs, 10.0))
    t.start()
    sim.handshake(sim_pubs, sim_subs, 10.0)
    t.join()
    return sim, ctl


def _pub(topic, adapter, names=None):
    return {"topic": topic, "type": "sensor_msgs/msg/JointState", "adapter": adapter, "template": None, "names": names}


def test_a_batch_arrives_as_one_frame_in_order_and_the_replies_come_back(monkeypatch):
    monkeypatch.setenv("ROS_DOMAIN_ID", str(200 + os.getpid() % 30))
    name = uuid.uuid4().hex
    sim, ctl = _pair(name, [_pub("/joint_states", "JointStateAdapter", NAMES), _pub("/clock", "ClockAdapter")],
                     [_pub("/cmd", "JointStateAdapter", NAMES)], {"/cmd": 1}, {"/joint_states": 2})
    try:
        assert sim.sends("/joint_states") and not sim.sends("/clock")      # the control part takes no /clock
        assert ctl.sends("/cmd") and [p["topic"] for p in ctl.peer_pubs] == ["/joint_states", "/clock"]
        got, replies = [], []
        done = threading.Event()

        def on_js(v):                   # the control part answers each sample, in its receiver thread
            got.append(v)
            ctl.send("/cmd", JointSample(v.stamp_ns, NAMES, v.effort, v.effort, -v.effort))

        ctl.bind_inputs({"/joint_states": on_js})
        sim.bind_inputs({"/cmd": lambda v: (replies.append(v), len(replies) == 6 and done.set())})
        ctl.start(batch_replies=True)
        sim.start()
        sim.batching()
        samples = [JointSample(k * 1_000_000, NAMES, RNG.normal(size=18), RNG.normal(size=18), RNG.normal(size=18))
                   for k in range(6)]
        for k, s in enumerate(samples):
            sim.send("/joint_states", s)
            if k % 2 == 1:
                sim.flush()             # two samples a frame, like the bridge's 1 kHz samples per tick
        assert done.wait(5.0)
        assert [v.stamp_ns for v in got] == [s.stamp_ns for s in samples] and all(map(_same, samples, got))
        assert ctl.received == 3 and sim.sent == 3
        assert ctl.sent == 3 and sim.received == 3               # the replies to a frame: one frame back
        assert [r.stamp_ns for r in replies] == [s.stamp_ns for s in samples]
        assert all(_same(-s.effort, r.effort) for s, r in zip(samples, replies))
        # a subscription made later is announced; the other side starts sending
        seen = threading.Event()
        sim.on_peer_subs = lambda subs: seen.set()
        ctl.announce_subs({"/joint_states": 2, "/clock": 1})
        assert seen.wait(5.0) and sim.sends("/clock")
        # RECORD (the split's recorder asks the control part to record its own topics) arrives before the
        # frames sent after it; after_frame runs after each data frame's deliveries and replies
        events, done2 = [], threading.Event()
        ctl.on_record = lambda info: events.append(("record", info))
        ctl.after_frame = lambda: (events.append(("after", len(got), ctl.sent)), len(events) == 3 and done2.set())
        sim.announce_record({"ring": "r", "topics": {"/cmd": "sensor_msgs/msg/JointState"}})
        for s in samples[:4]:
            sim.send("/joint_states", s)
            if len(sim._tls.batch) == 2:
                sim.flush()
        assert done2.wait(5.0)
        assert events == [("record", {"ring": "r", "topics": {"/cmd": "sensor_msgs/msg/JointState"}}),
                          ("after", 8, 4), ("after", 10, 5)]
        # the end: bye from the sim part, answered by the control part
        sim.bye()
        assert ctl.closed.wait(5.0) and sim.closed.wait(5.0)
    finally:
        sim.close()
        ctl.close()


def test_a_peer_that_dies_ends_the_link_and_sends_are_counted(monkeypatch):
    monkeypatch.setenv("ROS_DOMAIN_ID", str(200 + os.getpid() % 30))
    msgs = []
    sim, ctl = _pair(uuid.uuid4().hex, [_pub("/a", "ClockAdapter")], [_pub("/b", "ClockAdapter")],
                     {"/b": 1}, {"/a": 1})
    sim.log = msgs.append
    sim.bind_inputs({})
    sim.start()
    ctl.close()                                             # the control process dies
    assert sim.closed.wait(5.0)
    for _ in range(3):
        sim.send("/a", 1)
    assert sim.dropped == 3 and len(msgs) == 1 and "dropped" in msgs[0]
    sim.close()


def test_two_stacks_with_one_link_name_are_one_clear_error(monkeypatch):
    monkeypatch.setenv("ROS_DOMAIN_ID", str(200 + os.getpid() % 30))
    name = uuid.uuid4().hex
    a = HostLink(name, "sim")
    try:
        with pytest.raises(LinkError, match="address in use"):
            HostLink(name, "sim")
        with pytest.raises(LinkError, match="no sim part"):
            HostLink(name + "-nobody", "control").handshake([], {}, timeout=0.3)
    finally:
        a.close()
    with pytest.raises(LinkError, match="part must be one of"):
        HostLink(name, "bridge")
