"""``/diagnostics``: each node's level follows the real condition.

What must hold: the bridge is ERROR while its watchdog damps the joints (a real scheduler driven through a
command gap), WARN in the window after it and for deadline misses, OK in a clean window; the controller
node is OK on accepted QPs, WARN while it holds the last torque after QP failures and ERROR in safe stop
(the real controller, its QP made infeasible); the estimator node is WARN for rejected samples and OK
again in the next clean window; the message is a valid ``diagnostic_msgs/DiagnosticArray``.
"""

from __future__ import annotations

import numpy as np
import pytest

from legged_wbc.ros.nodekit.diagnostics import ERROR, OK, WARN, Window, bridge_status, status_of
from test_bridge_scheduler import Rig


class DiagRig(Rig):
    """A real scheduler; the bridge's status taken after the samples of ``at`` steps."""

    def __init__(self, at, **kw):
        super().__init__(**kw)
        self.at, self.status = set(at), {}
        self.window = Window(clock=self.clock.monotonic)

    def publish_sample(self, step):
        super().publish_sample(step)
        if step in self.at:
            self.status[step] = bridge_status(self.sched, self.window, "rig")


def test_bridge_error_while_the_watchdog_damps_then_warn_then_ok():
    hang = range(5, 12)                               # ticks 5..11 never answered (as in test_bridge_scheduler)
    r = DiagRig(at=(8, 16, 30, 44), latency=lambda k: None if k in hang else 1e-4, duration=0.05,
                watchdog_timeout=0.3, watchdog_damping=5.0).run()
    s = r.status
    assert [s[k].level for k in (8, 16, 30, 44)] == [OK, ERROR, WARN, OK], [(k, v.level, v.message)
                                                                            for k, v in s.items()]
    assert "watchdog" in s[16].message and s[16].values["watchdog_active"] == "true"
    assert "watchdog released" in s[30].message and s[30].values["watchdog_active"] == "false"
    assert s[44].values["watchdog_events"] == "1" and s[44].values["watchdog_events_last_window"] == "0"
    assert s[44].name == "mujoco_bridge: command timing" and s[44].hardware_id == "rig"
    # a second publisher under the followed controller's name: ERROR for the rest of the run, both named
    alarm = bridge_status(r.sched, Window(), "rig", "two publishers named /wbc_controller on /joint_torque_cmd, "
                          "one dropped", "following /wbc_controller (gid 01, pid 7), dropping /wbc_controller (gid 02)")
    assert alarm.level == ERROR and "two publishers named /wbc_controller" in alarm.message
    assert alarm.values["command_source_alarm"].startswith("following /wbc_controller (gid 01, pid 7)")


def test_bridge_warns_for_deadline_misses_in_realtime():
    late = range(8, 12)                               # these commands arrive 5 ms after their sample
    r = DiagRig(at=(10, 40, 58), lockstep=False, duration=0.06, watchdog_timeout=1.0,
                latency=lambda k: 5e-3 if k in late else 1e-4).run()
    assert r.sched.counters["deadline_misses"] > 0
    assert r.status[10].level == OK
    assert r.status[40].level == WARN and "deadline misses" in r.status[40].message, r.status[40]
    assert int(r.status[40].values["deadline_misses_last_window"]) == r.sched.counters["deadline_misses"]
    assert r.status[58].level == OK, r.status[58]


@pytest.mark.ros
def test_controller_ok_then_hold_then_safe_stop(ros_context):
    from rclpy.parameter import Parameter

    from legged_wbc.ros.nodekit.diagnostics import to_msg
    from wbc_controller.node import WbcNode

    node = WbcNode(context=ros_context, parameter_overrides=[Parameter("scenario", value="none")])
    try:
        rm, ctl = node.rm, node.ctl
        q = rm.stance_configuration()
        d = {"js": (q[7:], np.zeros(rm.n)), "odom": (q[:7], np.zeros(6)), "support": np.ones(rm.n_legs, bool)}
        win = Window()
        assert status_of(node, win).message == "waiting for the first tick"
        node._run_tick(1, d)
        ok = status_of(node, win)
        assert ok.level == OK and ok.values["qp_accepted"] == "true", ok
        # the QP made infeasible (contradictory bounds on a row of each backend, as test_controller does)
        for be, lo, up, row in ((ctl.backend, "l", "u", ctl.row_tau), (ctl.ldp_backend, "bl", "bu", ctl.ldp.ms),
                                (ctl.ldp_backend_free, "bl", "bu", ctl.ldp.ms)):
            real = be.solve

            def infeasible(p, real=real, lo=lo, up=up, row=row):
                getattr(p, lo)[row], getattr(p, up)[row] = 1.0, -1.0
                return real(p)

            be.solve = infeasible
        node._run_tick(2, d)
        hold = status_of(node, win)
        assert hold.level == WARN and "holding the last accepted torque (1 consecutive" in hold.message, hold
        for k in range(3, 4 + ctl.cfg.max_failures):
            node._run_tick(k, d)
        stop = status_of(node, win)
        assert stop.level == ERROR and stop.message.startswith("safe stop"), stop
        assert stop.values["safe_stop"] == "true"
        msg = to_msg([stop], 123_000_000)
        assert msg.status[0].level == bytes([2]) and msg.header.stamp.nanosec == 123_000_000
        assert {kv.key for kv in msg.status[0].values} >= {"total_failures", "consecutive_failures", "qp_time_us"}
        assert node.diagnostics_publisher.topic_name == "/diagnostics"
    finally:
        node.destroy_node()


@pytest.mark.ros
def test_estimator_warns_for_rejected_samples(ros_context):
    from rclpy.parameter import Parameter

    from state_estimator.node import EstimatorNode

    node = EstimatorNode(context=ros_context, parameter_overrides=[Parameter("scenario", value="none")])
    try:
        rm = node.rm
        q0 = rm.stance_configuration()
        quat = np.array([0.0, 0.0, 0.0, 1.0])

        def sample(pos):
            return {"js": (pos, np.zeros(rm.n), np.zeros(rm.n)), "imu": (quat, np.zeros(3), np.array([0, 0, 9.81]))}

        win = Window()
        for k in range(1, 4):
            node._run_tick(k, sample(q0[7:]))
        ok = status_of(node, win)
        assert ok.level == OK and ok.values["legs_used"], ok
        bad = q0[7:].copy()
        bad[0] = np.nan
        node._run_tick(4, sample(bad))                # rejected by the estimator (NaN): counted
        warn = status_of(node, win)
        assert warn.level == WARN and "1 samples rejected" in warn.message, warn
        node._run_tick(5, sample(q0[7:]))
        assert status_of(node, win).level == OK
    finally:
        node.destroy_node()


def test_background_one_shot_jobs_run_in_order_off_the_calling_thread_and_drain():
    """``background.soon``: what the bridge hands over at each diagnostics window runs once, in the order
    given, in the background thread; ``drain`` waits for all of them (the bridge, before its last window)."""
    import threading
    import time

    from legged_wbc.ros.nodekit import background

    ran, threads = [], set()
    gate = threading.Event()

    def job(k):
        gate.wait(5.0)
        ran.append(k)
        threads.add(threading.current_thread().name)

    def boom():
        raise RuntimeError("boom")

    background.soon(lambda: job(0), "test")
    background.soon(boom, "test_failing")              # one line, and the ones after it still run
    for k in range(1, 5):
        background.soon(lambda k=k: job(k), "test")
    assert not background.drain(timeout=0.05)          # held at the gate: not done
    gate.set()
    assert background.drain(timeout=5.0)
    assert ran == list(range(5)) and threads == {"off_path_publications"}
    t0 = time.monotonic()
    assert background.drain(timeout=5.0) and time.monotonic() - t0 < 0.1   # nothing pending: at once


def test_window_stats_split_from_the_physics_thread_equals_the_one_go():
    """The bridge's diagnostics: the snapshot the physics thread takes plus the stats computed later give
    the sample ``diagnostics()`` gives in one go."""
    import math

    from mujoco_bridge.timing import CommandTiming, window_stats

    a, b = CommandTiming(), CommandTiming()
    for t in (a, b):
        for k in range(50):
            t.sample_published(k, k * 0.002)
            t.command_arrived(k, k * 0.002 + 0.0004 + 1e-5 * k)
            t.close_tick(k, deadline=k * 0.002 + 0.003)
        t.stalled(2)
    stats, ticks, lat = a.take_window()
    ticks2, lat2, missed = b.take_window_raw()
    assert (ticks, lat) == (ticks2, lat2) and stats == window_stats(ticks2, lat2, missed)
    assert stats["window_ticks"] == 52 and stats["window_deadline_misses"] == 2
    assert math.isclose(stats["command_latency_max_us"], 400 + 10 * 49)
