"""Intra-process handoff (legged_wbc.ros.transport.intra_process) with real rclpy nodes, and the bridge's command timing.

The bus tests run real nodes in this process (their own ROS context on a test domain); "outside the
process" is a second rclpy context, which DDS treats as another participant exactly like another
process would be.
"""

from __future__ import annotations

import math
import os
import time

import numpy as np
import pytest

from legged_wbc.ros.transport import endpoints
from mujoco_bridge.timing import CommandQueue, CommandTiming


# ------------------------------------------------------------------------------------ command timing
def test_command_timing_latency_and_deadlines():
    t = CommandTiming()
    t.sample_published(0, 10.000)
    t.sample_published(0, 10.500)                   # a re-published sample keeps its first time
    assert t.command_arrived(0, 10.0008) == pytest.approx(800.0)
    assert t.command_arrived(0, 10.0009) is None    # a second answer to the same tick: not counted
    assert not t.close_tick(0, deadline=10.002)
    t.sample_published(1, 10.002)
    t.command_arrived(1, 10.0045)                   # 2.5 ms: after its deadline
    assert t.close_tick(1, deadline=10.004)
    t.sample_published(2, 10.004)                   # never answered
    assert t.close_tick(2, deadline=10.006)
    stats, ticks, lat = t.take_window()
    assert ticks == [0, 1, 2]
    assert lat[0] == pytest.approx(800.0) and math.isnan(lat[1]) and math.isnan(lat[2])
    assert stats["window_deadline_misses"] == 2 and stats["window_ticks"] == 3
    assert stats["command_latency_p50_us"] == pytest.approx(800.0)
    assert t.deadline_misses == 2 and t.ticks_closed == 3
    stats, ticks, _ = t.take_window()               # the window restarts
    assert ticks == [] and stats["window_ticks"] == 0 and math.isnan(stats["command_latency_p99_us"])
    # lockstep: no deadline, latency only
    t.sample_published(3, 20.0)
    t.command_arrived(3, 20.003)
    assert not t.close_tick(3)
    assert t.take_window()[2] == [pytest.approx(3000.0)]


def test_command_timing_forgets_old_ticks():
    t = CommandTiming(keep_ticks=10)
    for k in range(100):
        t.sample_published(k, k * 0.002)            # nobody answers, nobody closes most ticks
    t.close_tick(99, deadline=1.0)
    assert len(t._published) <= 11


def test_command_queue_applies_the_newest_command_for_an_allowed_tick():
    q = CommandQueue()
    assert q.due(5) is None
    q.push(0, "c0")
    q.push(1, "c1")
    q.push(3, "c3")                                 # answers a tick the step may not answer yet
    assert q.due(-1) is None                        # a command delay: nothing may act yet
    assert q.due(1) == "c1"                         # the newest for a tick <= 1 (c0 is superseded)
    assert q.due(2) == "c1" and q.newest() == "c3"  # held; c3 waits for its tick
    assert q.due(3) == "c3"
    assert q.due(10) == "c3"                        # held


# ------------------------------------------------------------------------------------ bus with real nodes
@pytest.fixture
def ros_contexts():
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    import rclpy
    from rclpy.context import Context

    inside, outside = Context(), Context()
    rclpy.init(context=inside)
    rclpy.init(context=outside)
    yield inside, outside
    rclpy.shutdown(context=inside)
    rclpy.shutdown(context=outside)


def _js(k: int):
    from legged_wbc.ros import io as ros_io

    return ros_io.joint_state_msg(k * 2_000_000, ["a", "b"], [k, 1.0], [0.0, 0.0], [0.0, 0.0])


def _spin_until(executor, cond, timeout=10.0) -> bool:
    t_end = time.monotonic() + timeout
    while not cond() and time.monotonic() < t_end:
        executor.spin_once(timeout_sec=0.05)
    return cond()


@pytest.mark.ros
def test_bus_hands_messages_over_in_process_and_on_dds_only_when_asked(ros_contexts):
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.serialization import deserialize_message
    from sensor_msgs.msg import JointState
    from std_msgs.msg import String

    from legged_wbc.ros import io as ros_io
    from legged_wbc.ros.transport.intra_process import IntraProcessBus

    inside, outside = ros_contexts
    bus = IntraProcessBus()
    got, raw_got, order = [], [], []
    with bus.active():
        a = Node("ip_pub", context=inside)
        b = Node("ip_sub", context=inside)
        r = Node("ip_rec", context=inside)
        # subscriptions may come before the publisher exists (the bridge subscribes to the command first)
        endpoints.create_subscription(b, JointState, "js", lambda m: (got.append(m), order.append("b")), 10)
        endpoints.create_subscription(r, JointState, "/js", lambda d: (raw_got.append(d), order.append("r")), 10,
                                   raw=True)
        endpoints.create_subscription(b, String, "from_outside", lambda m: got.append(m.data), 10)
        pub = endpoints.create_publisher(a, JointState, "js", 10)
    assert bus.finalize() == ["/from_outside"]          # nobody inside publishes it: DDS
    assert pub.get_subscription_count() == 2 and pub.local_subscription_count() == 2
    assert bus.local_topics() == {"/js": ["ip_sub", "ip_rec"]}

    m = _js(1)
    pub.publish(m)
    # delivered synchronously, the very object to the typed subscription, CDR bytes to the raw one
    assert got == [m] and got[0] is m and order == ["b", "r"]
    back = deserialize_message(raw_got[0], JointState)
    assert list(back.position) == [1.0, 1.0] and back.header.stamp.nanosec == 2_000_000
    assert pub.dds_published == 0                        # nobody outside: nothing went on DDS

    # a subscriber outside the process: from now on the messages also go on DDS, once each
    ext = Node("ip_external", context=outside)
    ext_got = []
    ext.create_subscription(JointState, "/js", lambda msg: ext_got.append(msg), 10)
    ex_out = SingleThreadedExecutor(context=outside)
    ex_out.add_node(ext)
    ex_in = SingleThreadedExecutor(context=inside)
    ex_in.add_node(a)
    # the publisher learns of the match from its matched event (the container's executor thread spins it)
    assert _spin_until(ex_in, lambda: pub.dds_subscription_count() == 1)
    for k in range(2, 5):
        pub.publish(_js(k))
    assert _spin_until(ex_out, lambda: len(ext_got) == 3), ext_got
    assert [msg.position[0] for msg in ext_got] == [2.0, 3.0, 4.0]
    assert pub.dds_published == 3 and len(got) == 4    # in-process: each message exactly once

    # a topic published outside reaches the composed subscriber through DDS
    ex_in.add_node(b)
    opub = ext.create_publisher(String, "from_outside", 10)
    t_end = time.monotonic() + 10
    while opub.get_subscription_count() == 0 and time.monotonic() < t_end:
        time.sleep(0.02)
    opub.publish(String(data="hello"))
    assert _spin_until(ex_in, lambda: "hello" in got)
    for ex in (ex_in, ex_out):
        ex.shutdown()
    for n in (a, b, r, ext):
        n.destroy_node()


@pytest.mark.ros
def test_outside_publishers_reach_in_process_subscriptions_once_and_own_copies_are_dropped(ros_contexts):
    """A composed subscription has a real subscription in the graph (an outside node counts it); a publisher
    outside the process reaches it (in the control thread's drain; raw ones get the CDR bytes, with_source ones
    the MessageInfo) and nothing goes on DDS for the shadows. Once an outside subscriber makes the in-process
    publisher publish on DDS, the shadows receive those publications too: dropped by GID, never delivered twice."""
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.serialization import deserialize_message
    from sensor_msgs.msg import JointState

    from legged_wbc.ros.transport.intra_process import IntraProcessBus

    inside, outside = ros_contexts
    bus = IntraProcessBus()
    typed, raw, src = [], [], []
    with bus.active():
        a = Node("op_pub", context=inside)
        b = Node("op_sub", context=inside)
        r = Node("op_rec", context=inside)
        endpoints.create_subscription(b, JointState, "ojs", typed.append, 10)
        endpoints.create_subscription(b, JointState, "ojs", lambda m, s: src.append(s), 10, with_source=True)
        endpoints.create_subscription(r, JointState, "ojs", raw.append, 10, raw=True)
        pub = endpoints.create_publisher(a, JointState, "ojs", 10)
    assert bus.finalize() == []
    ext = Node("op_external", context=outside)
    ex_in, ex_out = SingleThreadedExecutor(context=inside), SingleThreadedExecutor(context=outside)
    for n in (a, b, r):
        ex_in.add_node(n)
    ex_out.add_node(ext)
    # the graph shows one subscription per subscribing node (before: 0, the bus had no DDS subscription)
    assert _spin_until(ex_in, lambda: ext.count_subscribers("/ojs") == 2), ext.count_subscribers("/ojs")
    ex_in.spin_once(timeout_sec=0.2)                  # the publisher's matched events (the shadows)
    assert pub._matched == 2 and pub.dds_subscription_count() == 0 and pub.get_subscription_count() == 3
    pub.publish(_js(1))
    assert pub.dds_published == 0 and len(typed) == 1 and len(src) == 1 and len(raw) == 1

    assert bus.check_outside() == []                  # only the bus's own publisher: the shadows rest
    opub = ext.create_publisher(JointState, "/ojs", 10)
    assert _spin_until(ex_in, lambda: opub.get_subscription_count() == 2)
    assert _spin_until(ex_in, lambda: bus.check_outside() == ["/ojs"])   # the container: every 50 ms
    for k in (2, 3):
        opub.publish(_js(k))
    assert _spin_until(ex_in, lambda: bus.outside_messages == 4)   # 2 messages x 2 shadows (b's, r's)
    assert len(typed) == 1                             # not in the executor thread: waiting for the control thread
    assert bus.drain_outside() == 6                    # b's two subscriptions and r's, 2 messages each
    assert [m.position[0] for m in typed[1:]] == [2.0, 3.0]
    assert [deserialize_message(d, JointState).position[0] for d in raw[1:]] == [2.0, 3.0]
    assert isinstance(src[1], dict) and bytes(src[1]["publisher_gid"]["data"]) not in bus.stack_gids

    # an outside subscriber: the in-process publisher now publishes on DDS, its shadows get the copies too
    ext_got = []
    ext.create_subscription(JointState, "/ojs", ext_got.append, 10)
    assert _spin_until(ex_in, lambda: pub.dds_subscription_count() == 1)
    for k in (4, 5, 6):
        pub.publish(_js(k))
    assert _spin_until(ex_out, lambda: len(ext_got) == 3)
    assert _spin_until(ex_in, lambda: bus.own_copies == 6)          # 3 messages x 2 shadows, dropped
    ex_in.spin_once(timeout_sec=0.2)
    assert bus.outside_messages == 4 and bus.drain_outside() == 0
    assert [m.position[0] for m in typed] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]   # each exactly once
    assert len(raw) == 6 and len(src) == 6 and pub.dds_published == 3
    for ex in (ex_in, ex_out):
        ex.shutdown()
    for n in (a, b, r, ext):
        n.destroy_node()


@pytest.mark.ros
def test_bus_survives_a_failing_callback(ros_contexts):
    from rclpy.node import Node
    from sensor_msgs.msg import JointState

    from legged_wbc.ros import io as ros_io
    from legged_wbc.ros.transport.intra_process import IntraProcessBus

    inside, _ = ros_contexts
    bus = IntraProcessBus()
    got = []
    with bus.active():
        a = Node("ip_pub2", context=inside)
        b = Node("ip_bad", context=inside)
        c = Node("ip_good", context=inside)

        def bad(msg):
            raise RuntimeError("boom")

        endpoints.create_subscription(b, JointState, "js2", bad, 10)
        endpoints.create_subscription(c, JointState, "js2", got.append, 10)
        pub = endpoints.create_publisher(a, JointState, "js2", 10)
    bus.finalize()
    for k in range(3):
        pub.publish(_js(k))
    assert len(got) == 3                                  # the others still get every message
    assert bus.stats()["callback_errors"] == 3
    for n in (a, b, c):
        n.destroy_node()


@pytest.mark.ros
def test_withdrawn_subscriptions_get_nothing_and_stay_off_dds(ros_contexts):
    """A chained node's withdrawn inputs: no in-process delivery, no DDS subscription at finalize, the
    other subscribers of the topic unaffected; once finalized the bus refuses."""
    from rclpy.node import Node
    from sensor_msgs.msg import JointState

    from legged_wbc.ros import io as ros_io
    from legged_wbc.ros.transport.intra_process import IntraProcessBus

    inside, _ = ros_contexts
    bus = IntraProcessBus()
    kept, withdrawn = [], []
    with bus.active():
        a = Node("ip_pub4", context=inside)
        b = Node("ip_chained4", context=inside)
        c = Node("ip_other4", context=inside)
        endpoints.create_subscription(b, JointState, "js4", withdrawn.append, 10)
        endpoints.create_subscription(b, JointState, "nobody_publishes4", withdrawn.append, 10)
        endpoints.create_subscription(c, JointState, "js4", kept.append, 10)
        pub = endpoints.create_publisher(a, JointState, "js4", 10)
    assert bus.withdraw(b, ["js4", "nobody_publishes4"]) == 2
    assert bus.finalize() == []                     # the withdrawn outside topic made no DDS subscription
    for k in range(2):
        pub.publish(_js(k))
    assert len(kept) == 2 and withdrawn == []
    assert b.count_subscribers("/nobody_publishes4") == 0
    with pytest.raises(RuntimeError, match="finalized"):
        bus.withdraw(c, ["js4"])
    for n in (a, b, c):
        n.destroy_node()


@pytest.mark.ros
def test_deferred_raw_deliveries_wait_for_flush(ros_contexts):
    """defer_raw: the recorder's copies are made at flush(), in publication order, from the messages
    as they were when flushed (the publisher refills only after the flush)."""
    from rclpy.node import Node
    from rclpy.serialization import deserialize_message
    from sensor_msgs.msg import JointState

    from legged_wbc.ros import io as ros_io
    from legged_wbc.ros.transport.intra_process import IntraProcessBus

    inside, _ = ros_contexts
    bus = IntraProcessBus(defer_raw=True)
    typed, raw = [], []
    with bus.active():
        a = Node("ip_pub3", context=inside)
        b = Node("ip_ctl3", context=inside)
        r = Node("ip_rec3", context=inside)
        endpoints.create_subscription(r, JointState, "js3", raw.append, 10, raw=True)
        endpoints.create_subscription(b, JointState, "js3", lambda m: typed.append(m.position[0]), 10)
        pub = endpoints.create_publisher(a, JointState, "js3", 10)
    bus.finalize()
    for k in range(3):
        pub.publish(_js(k))
    assert typed == [0.0, 1.0, 2.0] and raw == []          # the control path got them at once
    assert bus.flush() == 3 and bus.flush() == 0
    assert [deserialize_message(d, JointState).position[0] for d in raw] == [0.0, 1.0, 2.0]
    for n in (a, b, r):
        n.destroy_node()


def test_nodes_use_plain_rclpy_outside_a_container():
    """Without an active bus, ros_io.create_* are exactly node.create_* (the per-process layout)."""
    calls = []

    class FakeNode:
        def create_publisher(self, *a, **kw):
            calls.append(("pub", a))
            return "P"

        def create_subscription(self, *a, **kw):
            calls.append(("sub", a, kw))
            return "S"

    from legged_wbc.ros import io as ros_io

    n = FakeNode()
    assert endpoints.create_publisher(n, int, "t", 10) == "P"
    assert endpoints.create_subscription(n, int, "t", print, 10, raw=True) == "S"
    assert calls[1][2] == {"raw": True}
    assert np.array_equal([c[0] for c in calls], ["pub", "sub"])


def test_tick_sync_runs_a_tick_once_when_complete():
    from legged_wbc.ros.io import TickSync

    s = TickSync(("js", "imu"))
    assert s.status(0) == TickSync.NEW
    assert s.add(0, "js", 1) is None
    assert s.add(1, "js", 2) is None                  # a newer tick may start before the older completes
    assert s.add(0, "imu", 3) == {"js": 1, "imu": 3}
    assert s.status(0) == TickSync.REPEAT and s.status(-1) == TickSync.STALE and s.status(1) == TickSync.NEW
    assert s.add(0, "js", 9) is None                  # a repeated tick never runs twice
    assert s.add(3, "js", 4) is None and s.add(3, "imu", 5) == {"js": 4, "imu": 5}
    assert s.pending() == 0                           # tick 1 never completed: dropped once 3 ran
    assert s.status(2) == TickSync.STALE
    s.required = ("js",)                              # e.g. the controller without tau_ext
    assert s.add(4, "js", 6) == {"js": 6}


@pytest.mark.ros
@pytest.mark.parametrize("also_every_sample", [False, True])
def test_linked_bus_sends_tick_samples_only_to_subscriptions_that_ignore_the_rest(ros_contexts, monkeypatch,
                                                                               also_every_sample):
    """Two buses joined by a host link (the split): when every subscription of the control part on
    /joint_states is ``tick_samples_only`` (the estimator on the tick grid), the sim part sends the samples
    stamped on control ticks only (half the 1 kHz samples); one more subscription that takes every
    sample gets them all, and so do both."""
    import threading
    import uuid

    from rclpy.node import Node
    from sensor_msgs.msg import JointState

    from legged_wbc.ros.io import adapters
    from legged_wbc.ros import io as ros_io
    from legged_wbc.ros.transport.host_link import HostLink
    from legged_wbc.ros.transport.intra_process import IntraProcessBus

    monkeypatch.setenv("ROS_DOMAIN_ID", str(230 + os.getpid() % 20))
    inside, _ = ros_contexts
    name = uuid.uuid4().hex
    sim_bus = IntraProcessBus(link=HostLink(name, "sim", log=lambda m: None))
    ctl_bus = IntraProcessBus(link=HostLink(name, "control", log=lambda m: None))
    ticks_only, every = [], []
    with sim_bus.active():
        sim_node = Node("ip_link_sim", context=inside)
        pub = endpoints.create_publisher(sim_node, JointState, "/joint_states", 10, adapter=adapters.JointStateAdapter(
            ros_io.joint_state_msg(0, ["a", "b"], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0])))
    with ctl_bus.active():
        ctl_node = Node("ip_link_ctl", context=inside)
        endpoints.create_subscription(ctl_node, JointState, "/joint_states", ticks_only.append, 10,
                                   adapter=adapters.JointStateAdapter, tick_samples_only=True)
        if also_every_sample:
            endpoints.create_subscription(ctl_node, JointState, "/joint_states", every.append, 10,
                                       adapter=adapters.JointStateAdapter)
    t = threading.Thread(target=ctl_bus.connect_link, args=(10.0,))
    t.start()
    sim_bus.connect_link(10.0)
    t.join()
    sim_bus.finalize()
    ctl_bus.finalize()
    try:
        ctl_bus.link.start()
        stamps = [k * 1_000_000 for k in range(8)]              # 1 kHz samples: even ms on the 2 ms ticks
        for ns in stamps:
            pub.publish_value(adapters.JointSample(ns, ["a", "b"], np.array([1.0, 2.0]), np.zeros(2), np.zeros(2)))
        got = every if also_every_sample else ticks_only
        t_end = time.monotonic() + 5.0
        while len(got) < (8 if also_every_sample else 4) and time.monotonic() < t_end:
            time.sleep(0.01)
        time.sleep(0.1)                                          # nothing more comes
        if also_every_sample:
            assert [v.stamp_ns for v in every] == stamps == [v.stamp_ns for v in ticks_only]
            assert sim_bus.link.sent == 8
        else:
            assert [v.stamp_ns for v in ticks_only] == stamps[::2] and sim_bus.link.sent == 4
    finally:
        for bus in (sim_bus, ctl_bus):
            bus.link.close()
        sim_node.destroy_node()
        ctl_node.destroy_node()


def test_the_tick0_wait_does_not_wait_for_the_stacks_own_shadow_subscriptions():
    """A composed publisher does not count the stack's shadow subscriptions (the graph shows them):
    the start-up wait for matched subscribers must not wait for them either (it waited out its whole
    timeout, 5 s per node, before the first command of a split launch)."""
    import time
    from types import SimpleNamespace

    from legged_wbc.ros.transport.endpoints import wait_for_matched_subscribers

    bus = SimpleNamespace(stack_shadows=lambda topic: 2)          # the bridge's and the recorder's shadows
    pub = SimpleNamespace(topic_name="/joint_torque_cmd", bus=bus, get_subscription_count=lambda: 1)
    node = SimpleNamespace(count_subscribers=lambda topic: 3)   # 2 shadows + 1 outside subscriber, matched
    t0 = time.monotonic()
    assert wait_for_matched_subscribers(node, [pub], timeout=2.0)
    assert time.monotonic() - t0 < 0.5
    unmatched = SimpleNamespace(topic_name="/joint_torque_cmd", bus=bus, get_subscription_count=lambda: 0)
    assert not wait_for_matched_subscribers(node, [unmatched], timeout=0.05)    # the outside one still counts
    plain = SimpleNamespace(topic_name="/x", get_subscription_count=lambda: 2)  # an rclpy publisher: no bus
    assert not wait_for_matched_subscribers(node, [plain], timeout=0.05)
