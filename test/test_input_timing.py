"""Hardware input timing: ``input_timing: sample`` on the estimator and the controller (stamps off the
2 ms tick grid), and the bridge's hardware emulation ``sample_stamps: wall``.

The nodes are driven through their subscription callbacks with hand-made messages (no DDS); the
end-to-end test runs the launch file in realtime with wall stamps and untimed commands."""

from __future__ import annotations

from domains import domain_id
import copy
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from legged_wbc.robot import ConfigError
from legged_wbc.ros import io as ros_io
from mujoco_bridge.config import BridgeConfig

ROOT = Path(__file__).resolve().parents[1]
MS = 1_000_000
W0 = 1_760_000_000_123_456_789       # a wall-clock stamp [ns] (2025), far off the 2 ms grid


# ------------------------------------------------------------------------------ no ROS
def test_sample_ticks_rate_limit_a_jittery_1khz_source_to_500hz():
    st = ros_io.SampleTicks()
    assert st.period_ns - st.tolerance_ns == 2 * MS - ros_io.SAMPLE_TICK_TOLERANCE_NS == 1_500_000
    rng = np.random.default_rng(1)
    stamps = W0 + np.arange(2000) * MS + rng.integers(-240_000, 240_000, 2000)   # +-0.24 ms jitter
    ticked = []
    for i, ns in enumerate(stamps.tolist()):
        if st.status(ns) == st.NEW:
            st.take(ns)
            ticked.append(i)
    assert ticked == list(range(0, 2000, 2))                  # every other sample: 500 Hz, never 333 Hz
    assert st.t(int(stamps[0])) == 0.0 and st.t(int(stamps[10])) == (int(stamps[10]) - int(stamps[0])) * 1e-9
    last = int(stamps[ticked[-1]])
    assert st.status(last) == st.REPEAT and st.status(last - 1) == st.STALE
    due = st.due_ns                                            # the schedule: first stamp + 2 ms per tick
    assert due == int(stamps[0]) + 1000 * 2 * MS and st.reanchors == 0
    assert st.status(due - 500_001) == st.SKIP and st.status(due - 500_000) == st.NEW


def test_sample_ticks_keep_one_tick_per_period_when_samples_come_late():
    """A late sample does not push the schedule: the next period still gets its tick (a rule that
    counted from the last tick's actual stamp would skip the sample after a late one)."""
    st = ros_io.SampleTicks()
    stamps = [0, MS, 2 * MS + 600_000, 3 * MS, 4 * MS, 5 * MS, 6 * MS]   # the tick at 2 ms arrives 0.6 ms late
    ticked = [ns for ns in stamps if st.status(ns) == st.NEW and st.take(ns) is not None]
    assert ticked == [0, 2 * MS + 600_000, 4 * MS, 6 * MS]
    rng = np.random.default_rng(2)                              # heavy jitter: +-0.45 ms on a 1 kHz source
    st = ros_io.SampleTicks()
    stamps = W0 + np.arange(4000) * MS + rng.integers(-450_000, 450_000, 4000)
    n = sum(1 for ns in np.sort(stamps).tolist() if st.status(ns) == st.NEW and st.take(ns) is not None)
    assert n == 2000 and st.reanchors == 0                      # one tick per 2 ms period, none lost
    st.take(int(stamps[-1]) + 50 * MS)                          # a 50 ms pause: the schedule starts again there
    assert st.reanchors == 1 and st.due_ns == int(stamps[-1]) + 52 * MS


def test_sample_ticks_time_equals_the_tick_clock_for_grid_stamps_from_zero():
    st = ros_io.SampleTicks()
    for k in range(0, 5000):
        ns = k * ros_io.CONTROL_PERIOD_NS
        assert st.status(ns) == st.NEW
        st.take(ns)
        assert st.t(ns) == k * ros_io.CONTROL_PERIOD_NS * 1e-9          # the same float as tick_grid's t
        assert st.status(ns + MS) == st.SKIP                             # the 1 kHz sample in between


def test_tick_sync_keyed_by_stamp_bounds_its_buffer():
    sync = ros_io.TickSync(("js", "odom"), max_pending=4)
    for i in range(10):                       # joint states that never become ticks
        assert sync.add(W0 + i * MS, "js", i) is None
    assert sync.pending() == 4 and min(sync._buf) == W0 + 6 * MS      # the oldest were dropped
    assert sync.add(W0 + 8 * MS, "odom", "o") == {"js": 8, "odom": "o"}
    assert sync.last_tick == W0 + 8 * MS and sync.pending() == 1       # older incomplete ones dropped
    unbounded = ros_io.TickSync(("js",))
    for i in range(300):
        unbounded.add(i, "x", i)
    assert unbounded.pending() == 300                                  # tick_grid: as before


def test_untimed_decoder_keeps_the_stamp():
    dec = ros_io.TorqueCommandDecoder(["a", "b"], timed=False)
    cmd = dec.decode(ros_io.torque_command_msg(W0, ["b", "a"], [1.0, 2.0]))
    assert cmd.tick == ros_io.UNTIMED_TICK and cmd.stamp_ns == W0 and cmd.tau.tolist() == [2.0, 1.0]
    assert ros_io.TorqueCommandDecoder(["a"]).decode(ros_io.torque_command_msg(4 * MS, ["a"], [0.0])).stamp_ns is None


@pytest.mark.parametrize("kw, msg", [
    ({"sample_stamps": "wall"}, "sample_stamps: wall needs mode: realtime (wall stamps are hardware emulation)"),
    ({"sample_stamps": "wall", "mode": "realtime"},
     "sample_stamps: wall needs command_timing: untimed (commands carry wall stamps, not ticks)"),
])
def test_wall_stamps_need_realtime_and_untimed(kw, msg):
    with pytest.raises(ConfigError) as exc:
        BridgeConfig(**kw)
    assert str(exc.value) == msg and "\n" not in str(exc.value)
    cfg = BridgeConfig(sample_stamps="wall", mode="realtime", command_timing="untimed")
    assert cfg.sample_stamps == "wall" and BridgeConfig().sample_stamps == "sim"


# ------------------------------------------------------------------------------ the nodes, driven directly


class FakePub:
    """Records what a node publishes, as messages (and matches no one, so the start-up wait returns at
    once). ``adapter``: the replaced publisher's (values are filled into its message, as for DDS)."""

    def __init__(self, topic: str, adapter=None):
        self.topic_name = topic
        self.adapter = adapter
        self.msgs: list = []

    def get_subscription_count(self):
        return 0

    def publish(self, msg):
        self.msgs.append(copy.deepcopy(msg))        # the bridge refills its message objects in place

    def publish_value(self, value):
        self.publish(self.adapter.to_ros(value))


def _v(msg):
    """The value a node's subscription gets for ``msg`` (what arrives through DDS is adapted so)."""
    from legged_wbc.ros.io import adapters

    kind = {"JointState": adapters.JointStateAdapter, "Imu": adapters.ImuAdapter,
            "Odometry": adapters.OdometryAdapter}[type(msg).__name__]
    return kind.to_value(msg)


def _estimator(ctx, timing: str):
    from rclpy.parameter import Parameter

    from state_estimator.node import EstimatorNode

    node = EstimatorNode(context=ctx, parameter_overrides=[Parameter("scenario", value="none"),
                                                                Parameter("input_timing", value=timing)])
    for name in ("pub_odom", "pub_support", "pub_tau_ext", "pub_diag"):
        setattr(node, name, FakePub(name, getattr(node, name).adapter))
    calls = []
    update = node.est.update
    node.est.update = lambda t, *a, **kw: calls.append(t) or update(t, *a, **kw)
    return node, calls


def _controller(ctx, timing: str):
    from rclpy.parameter import Parameter

    from wbc_controller.node import WbcNode

    node = WbcNode(context=ctx, parameter_overrides=[Parameter("scenario", value="none"),
                                                                Parameter("input_timing", value=timing)])
    for name in ("pub_cmd", "pub_pitch", "pub_diag"):
        setattr(node, name, FakePub(name, getattr(node, name).adapter))
    ts = []
    update = node.ctl.update
    node.ctl.update = lambda inp: ts.append(inp.t) or update(inp)
    return node, ts


def _samples(rm, n: int, seed: int = 0):
    """``n`` 1 kHz sensor samples near the stance (joint pos, vel, effort, quat, gyro, accel)."""
    rng = np.random.default_rng(seed)
    q0 = rm.stance_configuration()
    out = []
    for _ in range(n):
        quat = np.array([0.01, -0.02, 0.0, 1.0]) + 0.002 * rng.standard_normal(4)
        out.append((q0[7:] + 0.02 * rng.standard_normal(rm.n), 0.3 * rng.standard_normal(rm.n),
                    20.0 * rng.standard_normal(rm.n), quat / np.linalg.norm(quat), 0.1 * rng.standard_normal(3),
                    np.array([0.0, 0.0, 9.81]) + rng.standard_normal(3)))
    return out


def _feed(est, ctl, rm, samples, stamps, imu_stamps=None):
    """Publish each sample as the bridge does (IMU, then joint states, same stamp unless ``imu_stamps``)
    to the estimator, and the joint states plus the estimator's new outputs to the controller."""
    pubs = (est.pub_odom, est.pub_support, est.pub_tau_ext)
    seen = [len(p.msgs) for p in pubs]
    for i, (s, ns) in enumerate(zip(samples, stamps)):
        js = ros_io.joint_state_msg(ns, rm.joint_names, s[0], s[1], s[2])
        imu_ns = ns if imu_stamps is None else imu_stamps[i]
        if imu_ns is not None:
            est._on_imu(_v(ros_io.imu_msg(imu_ns, "base", s[3], s[4], s[5])))
        est._on_js(_v(js))
        if ctl is not None:
            ctl._on_js(_v(js))
            for j, (p, cb) in enumerate(zip(pubs, (ctl._on_odom, ctl._on_support, ctl._on_tau_ext))):
                for m in p.msgs[seen[j]:]:
                    cb(_v(m))
                seen[j] = len(p.msgs)


@pytest.mark.ros
def test_sample_mode_equals_tick_grid_on_shifted_grid_stamps(ros_context):
    """Samples stamped W0 + k ms (a wall clock) in sample mode give exactly what samples stamped k ms
    give in tick_grid mode: the same ticks (every other sample), outputs and torques (so the same t:
    the stand-up reference depends on it), outputs and commands stamped with the sample's stamp."""
    runs = {}
    for timing, base in (("tick_grid", 0), ("sample", W0)):
        est, est_t = _estimator(ros_context, timing)
        ctl, ctl_t = _controller(ros_context, timing)
        samples = _samples(est.rm, 401)
        stamps = [base + i * MS for i in range(401)]
        _feed(est, ctl, est.rm, samples, stamps)
        runs[timing] = (est, est_t, ctl, ctl_t, stamps)
    (eg, eg_t, cg, cg_t, _), (es, es_t, cs, cs_t, stamps) = runs["tick_grid"], runs["sample"]
    assert len(es_t) == len(eg_t) == 201 and es_t == eg_t == [k * 2 * MS * 1e-9 for k in range(201)]
    assert cs_t == cg_t and len(cs_t) == 201
    for a, b in ((eg.pub_odom, es.pub_odom), (eg.pub_support, es.pub_support), (eg.pub_tau_ext, es.pub_tau_ext)):
        assert [ros_io.stamp_ns(m) for m in b.msgs] == stamps[::2]
        assert [ros_io.stamp_ns(m) for m in a.msgs] == [k * 2 * MS for k in range(201)]
    for ma, mb in zip(eg.pub_odom.msgs, es.pub_odom.msgs):
        assert ros_io.odometry_arrays(ma)[0].tolist() == ros_io.odometry_arrays(mb)[0].tolist()
        assert ros_io.odometry_arrays(ma)[1].tolist() == ros_io.odometry_arrays(mb)[1].tolist()
    cmds_g, cmds_s = cg.pub_cmd.msgs, cs.pub_cmd.msgs
    assert len(cmds_s) == 201 and [ros_io.stamp_ns(m) for m in cmds_s] == stamps[::2]
    tau_g = np.array([list(m.effort) for m in cmds_g])
    tau_s = np.array([list(m.effort) for m in cmds_s])
    assert np.array_equal(tau_g, tau_s) and np.ptp(tau_s, axis=0).max() > 1.0     # they do change over time
    diag_ticks = [m.data[0] for m in cs.pub_diag.msgs]
    assert diag_ticks == [float(k) for k in range(201)]               # t's tick on the 2 ms grid
    assert cs.sync.pending() <= 64


@pytest.mark.ros
def test_sample_mode_jittery_stamps_newest_imu_and_measured_intervals(ros_context):
    """Jittery 1 kHz joint states, a 400 Hz IMU on its own clock: the estimator ticks on the samples
    due by the 2 ms schedule (SampleTicks), with the newest IMU, stamps its outputs with the sample's
    stamp, and its filters integrate over the measured intervals (t = stamp - first stamp)."""
    from state_estimator.estimator import StateEstimator

    est, est_t = _estimator(ros_context, "sample")
    rm = est.rm
    n = 300
    rng = np.random.default_rng(3)
    stamps = (W0 + np.arange(n) * MS + rng.integers(-200_000, 200_000, n)).tolist()
    stamps[150] = stamps[149] + 1_600_000          # a late sample: it is a tick 1.6 ms after the last
    stamps[151] = stamps[150] + 300_000            # ... and the next one comes early (skipped)
    imu_stamps = [W0 - 700_000 + 990_000 * i if i % 5 != 1 else None for i in range(n)]   # its own clock, gaps
    samples = _samples(rm, n, seed=4)
    # what the rule says, computed here: ticks and the newest IMU when each tick's joint state arrives
    expected, due, last, newest = [], None, None, None
    for i in range(n):                  # the schedule: first stamp + 2 ms per tick, +-0.5 ms, >= 0.5 ms apart
        if imu_stamps[i] is not None and (newest is None or imu_stamps[i] >= imu_stamps[newest]):
            newest = i
        if due is None or (stamps[i] >= due - 500_000 and stamps[i] - stamps[last] >= 500_000):
            expected.append((i, newest))
            due = (stamps[i] if due is None else due) + 2 * MS
            due = stamps[i] + 2 * MS if stamps[i] >= due - 500_000 else due
            last = i
    ticked = [i for i, _ in expected]
    assert 151 not in ticked and n // 2 - 2 <= len(ticked) <= n // 2 + 1
    assert any(j != i for i, j in expected)                    # some ticks pair an IMU of an earlier call
    _feed(est, None, rm, samples, stamps, imu_stamps)
    assert [ros_io.stamp_ns(m) for m in est.pub_odom.msgs] == [stamps[i] for i, _ in expected]
    assert est_t == [(stamps[i] - stamps[0]) * 1e-9 for i, _ in expected]
    # the same estimator fed directly with the measured times and the newest IMU: identical outputs
    ref = StateEstimator(rm, est.est.gait, est.est.cfg)
    ref.reset(rm.stance_configuration())
    fixed = StateEstimator(rm, est.est.gait, est.est.cfg)
    fixed.reset(rm.stance_configuration())
    for k, ((i, j), m) in enumerate(zip(expected, est.pub_odom.msgs)):
        js, imu = samples[i], samples[j]
        e = ref.update((stamps[i] - stamps[0]) * 1e-9, *js[:3], *imu[3:])
        f = fixed.update(k * 0.002, *js[:3], *imu[3:])
        qb, vb = ros_io.odometry_arrays(m)
        assert qb.tolist() == e.q[:7].tolist() and vb.tolist() == e.v[:6].tolist()
    assert not np.allclose(f.v_world, e.v_world, rtol=0, atol=1e-12)   # a fixed 2 ms step would differ


@pytest.mark.ros
def test_sample_mode_start_up_waits_for_the_first_imu_and_answers_repeats(ros_context):
    est, est_t = _estimator(ros_context, "sample")
    rm, s = est.rm, _samples(est.rm, 3)[0]
    js = ros_io.joint_state_msg(W0, rm.joint_names, s[0], s[1], s[2])
    est._on_js(_v(js))                              # no IMU yet: held
    assert est_t == [] and not est.pub_odom.msgs
    est._on_imu(_v(ros_io.imu_msg(W0 - 300_000, "base", s[3], s[4], s[5])))
    assert est_t == [0.0] and [ros_io.stamp_ns(m) for m in est.pub_odom.msgs] == [W0]
    est._on_js(_v(js))                              # the same sample again (a re-publication): answered again
    assert est_t == [0.0] and len(est.pub_odom.msgs) == 2
    late = ros_io.joint_state_msg(W0 + 30 * MS, rm.joint_names, s[0], s[1], s[2])
    est._on_js(_v(late))                            # the newest IMU is 30.3 ms old: rejected, no tick
    assert est_t == [0.0] and est.rejected == 1


@pytest.mark.ros
def test_bridge_wall_stamps_sensors_keeps_sim_time_for_ground_truth(ros_context):
    import time

    from rclpy.parameter import Parameter

    from mujoco_bridge.node import MujocoBridge

    node = MujocoBridge(context=ros_context, parameter_overrides=[
        Parameter("mode", value="realtime"), Parameter("command_timing", value="untimed"),
        Parameter("sample_stamps", value="wall")])
    try:
        fakes = {name: FakePub(name, getattr(node, name).adapter) for name in ("pub_js", "pub_imu", "pub_odom",
                                                                                 "pub_clock")}
        for name, pub in fakes.items():
            pub.get_subscription_count = pub.has_subscribers = lambda: 1
            setattr(node, name, pub)
        before = time.time_ns()
        for step in (1, 2):
            node.publish_sample(step)
        after = time.time_ns()
        js = [ros_io.stamp_ns(m) for m in fakes["pub_js"].msgs]
        assert before <= js[0] < js[1] <= after                                   # ROS time now (wall)
        assert [ros_io.stamp_ns(m) for m in fakes["pub_imu"].msgs] == js         # same stamp per sample
        assert [ros_io.stamp_ns(m) for m in fakes["pub_odom"].msgs] == [2 * MS]  # ground truth: sim time
        assert ros_io.stamp_ns(fakes["pub_clock"].msgs[-1].clock) == 2 * MS
        assert node.sched.tick_of_stamp(js[0]) == 0 and node.sched.tick_of_stamp(js[1]) == 1
        node._on_command(_v(ros_io.torque_command_msg(js[1], node.joint_names, np.zeros(node.n))))
        assert node.sched.timing._arrived.keys() == {1} and node.sched.counters["rejected_commands"] == 0
        node._on_support(_v(ros_io.joint_state_msg(js[1], node.leg_names, np.ones(6), np.zeros(6), np.zeros(6))))
        # the estimated support of a wall-stamped sample reaches the disturbance gating (only subscribed with
        # a disturbance scenario; the mapping is the same)
        assert node.sched.support_estimate(1) is not None and node.sched.support_estimate(1).all()
    finally:
        node.destroy_node()


# ------------------------------------------------------------------------------ falling behind: newest tick first
def _wait_for(cond, timeout=10.0):
    import time

    t_end = time.monotonic() + timeout
    while not cond() and time.monotonic() < t_end:
        time.sleep(0.001)
    return cond()


def test_newest_tick_runner_skips_the_ticks_a_newer_one_overtook():
    import threading

    ran, gate = [], threading.Event()

    def run(k):
        if k == "boom":
            raise RuntimeError("tick failed")
        if not ran:
            gate.wait(10.0)                      # the first tick is slow
        ran.append(k)

    r = ros_io.NewestTickRunner(run)
    r.submit(-1)                                 # no worker: at once, in this thread
    assert ran == [-1] and r.ran == 1 and not r.threaded
    ran.clear()
    r.start_worker()
    r.submit(0)
    assert _wait_for(lambda: r._ready is None)   # the worker took tick 0 (and is stuck in it)
    for k in (1, 2, 3):                          # complete meanwhile: only the newest will run
        r.submit(k)
    gate.set()
    assert _wait_for(lambda: r.ran == 3) and ran == [0, 3] and r.skipped == 2
    r.submit("boom")
    assert _wait_for(lambda: r._error is not None)
    with pytest.raises(RuntimeError, match="tick failed"):
        r.submit(4)                              # raised in the submitting (executor) thread
    r.close()
    assert not r._thread.is_alive()


class _Log:
    def __init__(self):
        self.lines = []

    def info(self, text, **kw):
        self.lines.append(text)

    warning = error = info


@pytest.mark.ros
def test_controller_behind_answers_the_newest_tick_and_counts_the_skipped(ros_context):
    """A controller in its own process (worker started) whose tick 0 takes long: ticks 1-3 complete
    meanwhile; it then answers tick 4 only (the newest), counts 3 skipped ticks in its diagnostics
    and its closing log line. The estimator, driven synchronously, runs every tick."""
    import threading

    est, est_t = _estimator(ros_context, "tick_grid")
    ctl, ctl_t = _controller(ros_context, "tick_grid")
    gate, update = threading.Event(), ctl.ctl.update

    def slow_first(inp):
        if inp.t == 0.0:
            gate.wait(10.0)
        return update(inp)
    ctl.ctl.update = slow_first
    ctl.ticks.start_worker()
    samples, stamps = _samples(est.rm, 9), [i * MS for i in range(9)]     # ticks 0..4: every other sample
    _feed(est, ctl, est.rm, samples[:1], stamps[:1])
    assert _wait_for(lambda: ctl.ticks._ready is None)                    # the worker is in tick 0
    _feed(est, ctl, est.rm, samples[1:], stamps[1:])
    assert est_t == [k * 2 * MS * 1e-9 for k in range(5)] and est.ticks.skipped == 0
    gate.set()
    assert _wait_for(lambda: ctl.ticks.ran == 2) and ctl.ticks._error is None
    assert ctl_t == [0.0, 4 * 2 * MS * 1e-9] and ctl.ticks.skipped == 3
    assert [ros_io.stamp_ns(m) for m in ctl.pub_cmd.msgs] == [0, 8 * MS]
    from wbc_controller.diagnostics import DIAG_FIELDS

    diag = [list(m.data) for m in ctl.pub_diag.msgs]
    # cumulative, as of the publication (tick 0's went out after ticks 1-3 had been overtaken)
    assert [d[DIAG_FIELDS.index("skipped_ticks")] for d in diag] == [3.0, 3.0]
    assert [d[0] for d in diag] == [0.0, 4.0]
    assert ros_io.array_label(est.pub_diag.msgs[-1]).endswith(",height_raw_m,skipped_ticks]")
    assert est.pub_diag.msgs[-1].data[-1] == 0.0
    logs = {}
    for name, node in (("ctl", ctl), ("est", est)):
        logs[name] = log = _Log()
        node.get_logger = lambda log=log: log
        node.destroy_node()
    assert logs["ctl"].lines[-1] == "2 ticks run, 3 stale ticks skipped, 0 inputs rejected"
    assert logs["est"].lines[-1] == "5 ticks run, 0 stale ticks skipped, 0 inputs rejected"


# ------------------------------------------------------------------------------ end to end
KEEPS_REAL_TIME = 0.95   # sim seconds per wall second from which a run counts as real time


@pytest.mark.ros
def test_realtime_wall_stamps_untimed_sample_mode_walks(tmp_path):
    """The container in realtime with wall-clock sensor stamps (a ros2_control robot's), untimed
    commands and sample-mode estimator / controller: 7 s of the nominal walk, recorded. It walks on
    any machine of our kind (the wall stamps stay on the physics' clock when the simulation runs
    behind, ``mujoco_bridge.timing.WallStamps``); the deadlines are checked where it keeps real time."""
    from legged_wbc.tools.analysis import bag_metrics as bm, bag_series

    bag = tmp_path / "bag"
    env = {**os.environ, "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST",
           "ROS_DOMAIN_ID": str(domain_id())}
    r = subprocess.run([str(Path(sys.executable).parent / "legged-wbc"), "launch", "walking_sim", "mode:=realtime",
                        "command_timing:=untimed", "sample_stamps:=wall", "input_timing:=sample", "duration:=7",
                        f"record:={bag}"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    run = bm.load_run(bag)
    S = run.series
    t, z = S["t"], S["base_pos"][:, 2]
    assert t[-1] > 6.9 and np.nanmin(z[t > 2.0]) > 0.35 and not run.fell          # stands up, walks, stays up
    assert S["base_pos"][-1, 0] - S["base_pos"][0, 0] > 0.08                         # walked (gait from 3 s)
    b = run.bridge
    ticks = b["tick"]
    assert b["watchdog_events"] == 0 and b["rejected_commands"] == 0 and b["stale_commands"] == 0
    q = bm.realtime_quality(run)
    assert q["ticks_timed"] >= 0.99 * ticks                                           # latency measured per tick
    rtf = run.sim_time_s / run.wall_time_s
    if rtf >= KEEPS_REAL_TIME:      # the deadlines are the promise of a machine that keeps real time
        assert b["commands_applied"] >= 0.9 * ticks and q["deadline_miss_pct"] < 10.0, (rtf, q)
        assert 0 < q["command_latency_p50_us"] < 2000
    else:                           # a machine too slow for 500 Hz: it slows down, walks, and says so
        print(f"the machine did not keep real time ({rtf:.2f}x): {q['deadline_miss_pct']:.1f} % of the deadlines "
              f"missed; the walk is what is checked")
        assert b["commands_applied"] >= 0.5 * ticks and q["command_latency_p50_us"] > 0
    # sensor stamps are wall time, ground truth sim time (bag metrics align it by tick)
    msgs, _ = bm.read_bag_messages(bag, topics=("/joint_torque_cmd", "/estimator/odom"))
    cmd_ns = [bag_series._stamp_ns(m.header) for _, m in msgs["/joint_torque_cmd"]]
    assert min(cmd_ns) > 1_600_000_000 * 10**9 and sum(ns % (2 * MS) == 0 for ns in cmd_ns) < 5
    gaps = np.diff(cmd_ns)
    assert gaps.min() >= 500_000 and abs(np.median(gaps) - 2 * MS) < 100_000           # 500 Hz ticks from 1 kHz
    assert len(cmd_ns) >= 0.9 * ticks
