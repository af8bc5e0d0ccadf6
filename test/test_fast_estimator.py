"""The compiled estimator (:class:`StateEstimator`) against its oracle (:class:`ReferenceEstimator`) and the reference
functions: a recorded closed-loop walk through both estimators, every kernel against the code it
replaces, bad input, live parameter changes. No wall-clock assertions."""

import dataclasses
import math

import numpy as np
import pytest

from legged_wbc.kinematics import kinematic_tree, tree_foot_kinematics
from legged_wbc.gait import SWING_DOWN, GaitConfig, GaitScheduler, gait_state
from state_estimator import kernels
from state_estimator.config import EstimatorConfig, TouchdownConfig, VelocityConfig
from legged_wbc.closed_loop import _check_impl
from state_estimator.estimator import EstimatedState, StateEstimator
from state_estimator.oracle import ReferenceEstimator
from state_estimator.touchdown import TouchdownDetector
from state_estimator.velocity import BaseVelocityFilter

DT = 0.002
RTOL = 1e-12
FIELDS = [f.name for f in dataclasses.fields(EstimatedState)]
SAMPLE_KEYS = ("joint_pos", "joint_vel", "joint_effort", "imu_quat_xyzw", "imu_gyro", "imu_accel")


# ---------------------------------------------------------------------------------- recorded walk
@pytest.fixture(scope="module")
def walk():
    """Sensor samples of 5 s of the paper scenario (WBC-CBF): stand-up, then 2 s of tripod walking
    (every leg swings and lands twice), with the tick times the headless loop uses."""
    from legged_wbc.closed_loop import ClosedLoop
    from legged_wbc.scenario import load_scenario

    loop = ClosedLoop(load_scenario("paper"), "cbf")
    assert type(loop.est) is StateEstimator, "the headless loop must run the fast estimator by default"
    samples = []

    def hook(_loop, t, f, _est):
        samples.append((t,) + tuple(np.array(getattr(f, k), dtype=float) for k in SAMPLE_KEYS))

    res = loop.run(duration=5.0, on_tick=hook)
    assert not res.fell
    return loop, samples


IMPL_CLASS = {"fast": StateEstimator, "reference": ReferenceEstimator}


def make(loop, impl, cfg=None, rm=None):
    rm = rm or loop.rm
    _check_impl(impl)
    return IMPL_CLASS[impl](rm, GaitScheduler(loop.gait_cfg, rm.cfg.leg_names), cfg or loop.ecfg, dt=DT)


def run_both(fast, ref, samples, on_tick=None):
    """Feed both estimators the same samples; returns the two lists of EstimatedState."""
    out_f, out_r = [], []
    for i, s in enumerate(samples):
        if on_tick is not None:
            on_tick(i, fast, ref)
        out_f.append(fast.update(*s))
        out_r.append(ref.update(*s))
    return out_f, out_r


def assert_streams_agree(out_f, out_r, rtol=RTOL):
    """Every field of every cycle: same dtype and shape; bool / int fields and NaN positions equal;
    floats within ``rtol`` of the field's magnitude over the run (at least 1; a score
    ``||d tau_ext|| / dt`` of 0.1 N m/s is still compared at the scale of the run's scores)."""
    assert len(out_f) == len(out_r)
    for name in FIELDS:
        fast = [np.asarray(getattr(s, name)) for s in out_f]
        ref = [np.asarray(getattr(s, name)) for s in out_r]
        for k, (a, b) in enumerate(zip(fast, ref)):
            assert a.dtype == b.dtype and a.shape == b.shape, (name, k, a.dtype, b.dtype, a.shape, b.shape)
        a, b = np.stack(fast), np.stack(ref)                  # (cycles, ...)
        if b.dtype.kind in "biu":
            bad = (a != b).reshape(len(b), -1).any(axis=1)
        else:
            scale = max(1.0, float(np.nanmax(np.abs(b), initial=0.0)))
            nan = np.isnan(b)
            bad = ((np.isnan(a) != nan) | (~nan & ~(np.abs(a - b) <= rtol * scale))).reshape(len(b), -1).any(axis=1)
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise AssertionError(f"{name} differs at cycle {k} ({int(bad.sum())} cycles): fast {a[k]} "
                                 f"reference {b[k]}")


def assert_state_agrees(fast, ref, rtol=RTOL):
    pairs = [(fast.touchdown.x, ref.touchdown.x), (fast.touchdown.P, ref.touchdown.P),
             (fast.velocity.v, ref.velocity.v), (fast.velocity.P, ref.velocity.P),
             (fast._pos, ref._pos), (fast._M_inv, ref._M_inv), (fast._h_leg, ref._h_leg),
             (fast._M_lb, ref._M_lb), (np.asarray(fast._gyro_prev), np.asarray(ref._gyro_prev)),
             (np.asarray(fast._vb_prev), np.asarray(ref._vb_prev))]
    for a, b in pairs:
        np.testing.assert_allclose(a, b, rtol=0, atol=rtol * max(1.0, np.abs(b).max()))
    for a, b in [(fast.touchdown.count, ref.touchdown.count), (fast.touchdown.touchdown, ref.touchdown.touchdown),
                 (fast.touchdown.latched_cycle, ref.touchdown.latched_cycle),
                 (fast.velocity.cycles_in_support, ref.velocity.cycles_in_support),
                 (fast.velocity.prev_support, ref.velocity.prev_support)]:
        np.testing.assert_array_equal(a, b)
    assert fast._t == ref._t and fast._started == ref._started


def test_impl_choice(walk):
    loop, _ = walk
    assert type(make(loop, "fast")) is StateEstimator and type(make(loop, "reference")) is ReferenceEstimator
    for bad in ("numba", "Fast", "", None):
        with pytest.raises(ValueError, match="impl"):
            make(loop, bad)


def test_walk_fast_matches_reference(walk):
    """The recorded walk: stand-up, lift-offs, swing-downs, touchdowns, exclusion windows."""
    loop, samples = walk
    fast, ref = make(loop, "fast"), make(loop, "reference")
    for e in (fast, ref):
        e.reset(loop.q0)
    out_f, out_r = run_both(fast, ref, samples)
    td = np.array([s.touchdown for s in out_r])
    phase = np.array([s.phase for s in out_r])
    # the stream really exercises the touchdown logic and the exclusion windows
    assert (phase == SWING_DOWN).any(axis=0).all(), "every leg swings"
    assert td.any(axis=0).all(), "every leg is detected landing"
    assert np.array([s.vel_excluded for s in out_r]).any()
    assert_streams_agree(out_f, out_r)
    assert_state_agrees(fast, ref)


def perturbed(samples, leg_joints, seed=0):
    """The walk with a sliding support foot (joint velocities of leg 1 biased for 0.1 s, so its
    velocity measurement is an outlier: gating inflates it), sensor noise, and dropped samples
    (some steps of 4 and 6 ms: the off-nominal-dt branches)."""
    rng = np.random.default_rng(seed)
    out = []
    for i, (t, qj, dqj, tau, quat, gyro, acc) in enumerate(samples):
        if i % 97 in (13, 14) or i % 311 == 5:
            continue
        dqj = dqj + rng.normal(0.0, 0.01, dqj.shape)
        gyro = gyro + rng.normal(0.0, 0.003, 3)
        acc = acc + rng.normal(0.0, 0.05, 3)
        if 2000 <= i < 2050:
            dqj[leg_joints] += 20.0                     # leg 1 is in support at 4.0-4.1 s
        if 1200 <= i < 1210:
            acc = acc + np.array([40.0, -20.0, 5.0])        # an IMU jolt
        out.append((t, qj, dqj, tau, quat, gyro, acc))
    return out


@pytest.mark.parametrize("overrides", [
    {},
    {"touchdown.base_coupling": False, "velocity.gating": False, "velocity.exclusion_cycles": 0},
    {"touchdown.n_land": 1, "touchdown.gamma_land": 400.0, "velocity.gate_d2": 1.0,
     "velocity.max_inflation": 5.0, "height.cutoff_hz": 3.0},
])
def test_perturbed_walk_fast_matches_reference(walk, overrides):
    loop, samples = walk
    cfg = loop.ecfg.replace(**overrides)
    fast, ref = make(loop, "fast", cfg), make(loop, "reference", cfg)
    for e in (fast, ref):
        e.reset(loop.q0)
    out_f, out_r = run_both(fast, ref, perturbed(samples, loop.rm.leg_joints[1]))
    infl = np.array([s.vel_inflation for s in out_r])
    if cfg.velocity.gating:
        assert (infl > 1.0).any() and (infl == cfg.velocity.max_inflation).any(), "gating and its cap exercised"
    assert len({s.dt for s in out_r}) >= 3, "nominal and off-nominal steps"
    assert_streams_agree(out_f, out_r)
    assert_state_agrees(fast, ref)


def test_no_support_phases_match_reference(walk):
    """An estimator gait that swings all legs at once (not the walk's): cycles with no support
    foot (height from the integrated velocity), also with off-nominal steps."""
    loop, samples = walk
    legs = loop.rm.cfg.leg_names
    gait_cfg = GaitConfig(groups=(tuple(legs),), period=0.8, duty=0.5, start_time=3.1)
    fast, ref = (IMPL_CLASS[impl](loop.rm, GaitScheduler(gait_cfg, legs), loop.ecfg, dt=DT)
                 for impl in ("fast", "reference"))
    for e in (fast, ref):
        e.reset(loop.q0)
    out_f, out_r = run_both(fast, ref, perturbed(samples, loop.rm.leg_joints[1]))
    no_support = np.array([not s.support.any() for s in out_r])
    steps = np.array([s.dt for s in out_r])
    assert (no_support & (steps > 1.5 * DT)).any() and (no_support & (steps < 1.5 * DT)).any()
    assert_streams_agree(out_f, out_r)
    assert_state_agrees(fast, ref)


def test_imu_offset_and_reset_variants_match_reference(walk):
    """IMU away from the base origin (lever-arm terms), reset without q0 (height from the feet)
    and with t0 (the first sample has dt > 0), a second reset mid-stream."""
    from legged_wbc.model import RobotModel

    loop, samples = walk
    rm = RobotModel(dataclasses.replace(loop.rm.cfg, imu_xyz=(0.05, -0.02, 0.03)))
    fast, ref = make(loop, "fast", rm=rm), make(loop, "reference", rm=rm)
    for e in (fast, ref):
        e.reset(t0=samples[0][0] - DT)

    def on_tick(i, f, r):
        if i == 1800:
            for e in (f, r):
                e.reset(np.r_[0.1, 0.2, 0.41, 0.0, 0.0, 0.0, 1.0, samples[1799][1]], t0=samples[1799][0])

    out_f, out_r = run_both(fast, ref, samples, on_tick)
    assert_streams_agree(out_f, out_r)
    assert_state_agrees(fast, ref)


def test_quadruped_pd_swing_matches_reference(quadruped):
    """Another robot (4 legs): MuJoCo with a joint PD, leg lf lifts and is driven into the ground;
    the fast and the reference estimator on the same samples (a low landing threshold, so the
    landing test fires and latches in this gentle swing)."""
    from mujoco_bridge.sim import MujocoSim

    rm = quadruped
    q0 = rm.stance_configuration()
    cols = rm.leg_joints[0]
    leg = rm.legs(q0[7:])[0]
    q_up, ok1 = rm.leg_ik(0, leg.p + [0, 0, 0.06], leg.theta, q0[7:])
    q_dn, ok2 = rm.leg_ik(0, leg.p - [0, 0, 0.03], leg.theta, q0[7:])
    assert ok1 and ok2
    gait_cfg = GaitConfig(groups=(("lf",),), period=1.0, duty=0.6, start_time=0.3)
    gait = GaitScheduler(gait_cfg, rm.cfg.leg_names)
    cfg = EstimatorConfig().replace(**{"touchdown.gamma_land": 300.0})
    fast, ref = (IMPL_CLASS[impl](rm, GaitScheduler(gait_cfg, rm.cfg.leg_names), cfg)
                 for impl in ("fast", "reference"))
    sim = MujocoSim(rm)
    sim.reset(q0)
    for e in (fast, ref):
        e.reset(q0)
    out_f, out_r = [], []
    for _ in range(400):
        fr = sim.sensors()
        out_f.append(fast.update_sensors(fr))
        out_r.append(ref.update_sensors(fr))
        target = q0[7:].copy()
        ph, sp = gait.phases(fr.t)[0], gait.swing_progress(fr.t)[0]
        if ph != 0:
            a = 0.5 - 0.5 * math.cos(math.pi * min(sp / 0.5, 1.0))
            b = 0.5 - 0.5 * math.cos(math.pi * max(sp - 0.5, 0.0) / 0.5)
            target[cols] = q0[7:][cols] + a * (q_up[cols] - q0[7:][cols]) + b * (q_dn[cols] - q_up[cols])
        sim.set_torque(800.0 * (target - fr.joint_pos) - 15.0 * fr.joint_vel)
        sim.step(2)
    assert any(s.touchdown[0] for s in out_r)
    assert_streams_agree(out_f, out_r)
    assert_state_agrees(fast, ref)


def test_outputs_are_fresh_arrays(walk):
    """Callers may keep every array of an EstimatedState: later cycles must not change them, and
    none is shared with another cycle or with the estimator's state."""
    loop, samples = walk
    est = make(loop, "fast")
    est.reset(loop.q0)
    kept = []
    for s in samples[1400:1700]:
        out = est.update(*s)
        kept.append((out, {k: np.copy(getattr(out, k)) for k in FIELDS}))
    internals = [est.touchdown.x, est.touchdown.P, est.touchdown.count, est.touchdown.touchdown,
                 est.velocity.v, est.velocity.P, est._p_foot, est._v_rel, est._in, est._st]
    for i, (out, copy) in enumerate(kept):
        for k in FIELDS:
            np.testing.assert_array_equal(getattr(out, k), copy[k], err_msg=f"{k} of cycle {i} changed")
    a, b = kept[-2][0], kept[-1][0]
    for k in FIELDS:
        x, y = getattr(a, k), getattr(b, k)
        if isinstance(x, np.ndarray):
            assert not np.shares_memory(x, y), k
            for z in internals:
                assert not np.shares_memory(y, z), k


def test_no_compilation_in_the_loop(walk):
    """Constructing a fast estimator compiles (or loads) every kernel it runs: the cycles do not."""
    from numba.core.registry import CPUDispatcher

    loop, samples = walk
    est = make(loop, "fast")
    est.reset(loop.q0)
    disp = {n: f for n, f in vars(kernels).items() if isinstance(f, CPUDispatcher)}
    before = {n: len(f.signatures) for n, f in disp.items()}
    for s in samples[:400] + samples[1500:2500]:
        est.update(*s)
    assert {n: len(f.signatures) for n, f in disp.items()} == before


# ---------------------------------------------------------------------------------- bad input
def snapshot(est):
    td, vf = est.touchdown, est.velocity
    arrays = [td.x, td.P, td.score, td.count, td.touchdown, td.latched_cycle, td._prev_phase, td._prev_cycle,
              vf.v, vf.P, vf.cycles_in_support, vf.prev_support, vf.d2, vf.inflation, vf.used, vf.excluded,
              est._pos, est._M_inv, est._h_leg, est._M_lb, est._gyro_prev, est._vb_prev]
    return [np.copy(a) for a in arrays] + [est._t, est._started]


def test_bad_input_rejected_without_touching_state(walk):
    loop, samples = walk
    n = loop.rm.n
    est, twin = make(loop, "fast"), make(loop, "fast")
    for e in (est, twin):
        e.reset(loop.q0)
    for s in samples[:1600]:
        est.update(*s)
        twin.update(*s)
    t, qj, dqj, tau, quat, gyro, acc = samples[1600]
    good = dict(joint_pos=qj, joint_vel=dqj, joint_effort=tau, imu_quat_xyzw=quat, imu_gyro=gyro, imu_accel=acc)
    t_last = samples[1599][0]
    cases = [
        (t, {"joint_pos": np.r_[qj[:-1], np.nan]}, "joint_pos.*NaN"),
        (t, {"joint_vel": np.r_[np.inf, dqj[1:]]}, "joint_vel.*NaN"),
        (t, {"joint_effort": tau[:-1]}, "joint_effort.*shape"),
        (t, {"joint_effort": np.r_[tau, 0.0]}, "joint_effort.*shape"),
        (t, {"joint_pos": qj.reshape(1, -1)}, "joint_pos.*shape"),
        (t, {"joint_pos": 0.3}, "joint_pos.*shape"),
        (t, {"imu_quat_xyzw": quat[:3]}, "imu_quat_xyzw.*shape"),
        (t, {"imu_quat_xyzw": 2.0 * quat}, "unit quaternion"),
        (t, {"imu_quat_xyzw": np.array([np.nan, 0.0, 0.0, 1.0])}, "imu_quat_xyzw.*NaN"),
        (t, {"imu_gyro": np.array([0.0, -np.inf, 0.0])}, "imu_gyro.*NaN"),
        (t, {"imu_accel": np.array([0.0, 0.0, np.nan])}, "imu_accel.*NaN"),
        (t, {"imu_accel": [0.0, "x", 9.81]}, "imu_accel"),
        (t, {"joint_vel": [float("nan")] * n}, "joint_vel.*NaN"),         # a list: the Python path
        (t_last, {}, "increasing"),
        (t_last - DT, {}, "increasing"),
        (float("nan"), {}, "finite"),
        ("abc", {}, "time"),
    ]
    before = snapshot(est)
    for tt, change, msg in cases:
        with pytest.raises(ValueError, match=msg):
            est.update(tt, **{**good, **change})
        for a, b in zip(before, snapshot(est)):
            np.testing.assert_array_equal(a, b)
    # the next good samples give exactly what an estimator that never saw the bad ones gives,
    # also as lists / tuples (the Python path), strided arrays and integer arrays (converted)
    variants = [dict(good, joint_pos=list(qj), joint_effort=tuple(tau)),
                dict(good, joint_vel=np.repeat(dqj, 2)[::2], imu_gyro=np.repeat(gyro, 3)[::3]),
                dict(good, joint_effort=np.round(tau).astype(np.int64))]
    for k, var in enumerate(variants):
        tk = samples[1600 + k][0]
        same = dict(good, joint_effort=np.round(tau)) if k == 2 else good
        s1, s2 = est.update(tk, **var), twin.update(tk, **same)
        for name in FIELDS:
            np.testing.assert_array_equal(getattr(s1, name), getattr(s2, name), err_msg=f"{name}, variant {k}")


def test_update_before_reset_raises(walk):
    loop, samples = walk
    with pytest.raises(RuntimeError, match="reset"):
        make(loop, "fast").update(*samples[0])


# ---------------------------------------------------------------------------------- live parameters
CHANGE = {"touchdown.gamma_land": 500.0, "touchdown.n_land": 1, "touchdown.sigma_dq_meas": 0.1,
          "touchdown.sigma_tau_process": 3.0, "touchdown.base_coupling": False,
          "velocity.gating": False, "velocity.sigma_meas": 0.02, "velocity.sigma_accel": 0.5,
          "velocity.exclusion_cycles": 5, "height.cutoff_hz": 5.0}


def test_set_config_takes_effect_on_the_fast_path(walk):
    """A live change at t = 3.5 s (mid-walk) on the estimator, and one on a filter directly:
    fast and reference keep agreeing, and differ from an estimator without the change."""
    loop, samples = walk
    fast, ref, unchanged = make(loop, "fast"), make(loop, "reference"), make(loop, "fast")
    for e in (fast, ref, unchanged):
        e.reset(loop.q0)
    k_change = 1750
    new = loop.ecfg.replace(**CHANGE)

    def on_tick(i, f, r):
        if i == k_change:
            f.set_config(new)
            r.set_config(new)
        if i == k_change + 300:
            for e in (f, r):
                e.velocity.set_config(VelocityConfig(sigma_meas=0.2))
                e.touchdown.set_config(TouchdownConfig(gamma_land=2500.0))

    out_f, out_r = run_both(fast, ref, samples, on_tick)
    out_u = [unchanged.update(*s) for s in samples]
    assert_streams_agree(out_f, out_r)
    assert_state_agrees(fast, ref)
    assert fast.cfg == new and fast.touchdown.cfg.gamma_land == 2500.0
    for k in range(k_change):
        np.testing.assert_array_equal(out_f[k].q, out_u[k].q)
    # each group of parameters changed the fast estimate after the change
    diff = lambda name: max(np.abs(np.asarray(getattr(a, name), dtype=float)
                                   - np.asarray(getattr(b, name), dtype=float)).max()
                            for a, b in zip(out_f[k_change:], out_u[k_change:]))
    assert diff("tau_ext") > 1e-3 and diff("v_world") > 1e-4 and diff("vel_excluded") == 1.0
    assert abs(out_f[-1].q[2] - out_u[-1].q[2]) > 1e-6


# ---------------------------------------------------------------------------------- kernels alone
def random_spd(rng, k, scale=0.3):
    A = rng.normal(size=(k, k))
    return scale * (A @ A.T / k + 0.3 * np.eye(k))


def close(a, b, what=""):
    np.testing.assert_allclose(a, b, rtol=0, atol=RTOL * max(1.0, float(np.abs(b).max())), err_msg=what)


@pytest.mark.parametrize("k", [3, 4])
def test_td_filter_kernel_matches_touchdown_filter(k):
    rng = np.random.default_rng(k)
    L = 5
    cfg = TouchdownConfig(sigma_dq_process=0.03, sigma_tau_process=2.0, sigma_dq_meas=0.04)
    ref = TouchdownDetector(cfg, L, k, DT)
    ref.reset(rng.normal(size=(L, k)), rng.normal(size=(L, k)) * 5)
    x, P = ref.x.copy(), ref.P.copy()
    score, work = np.zeros(L), np.zeros((6, 2 * k, 2 * k))
    q_diag = np.diag(ref._Q).copy()
    for step in range(300):
        M_inv = np.linalg.inv(np.array([random_spd(rng, k, rng.uniform(0.05, 1.0)) for _ in range(L)]))
        tau, h, dq = rng.normal(size=(L, k)) * 30, rng.normal(size=(L, k)) * 10, rng.normal(size=(L, k))
        dt = DT if step % 3 else DT * rng.choice([0.5, 2.0, 3.0])
        s_ref = ref.filter(M_inv, tau, h, dq, dt)
        assert kernels.td_filter(x, P, M_inv, tau, h, dq, dt, DT, q_diag, ref._r, score, work) == kernels.OK
        close(x, ref.x, f"x at step {step}")
        close(P, ref.P, f"P at step {step}")
        close(score, s_ref, f"score at step {step}")
        np.testing.assert_array_equal(P, np.swapaxes(P, 1, 2))
    # a singular innovation covariance is reported, not inverted
    bad = np.full((L, k, k), np.nan)
    assert kernels.td_filter(x, P, bad, tau, h, dq, DT, DT, q_diag, ref._r, score, work) == kernels.SINGULAR


@pytest.mark.parametrize("late_max", [0, 7])
def test_td_detect_kernel_matches_landing_test(late_max):
    rng = np.random.default_rng(5)
    L = 6
    cfg = TouchdownConfig(gamma_land=1000.0, n_land=3, late_max_cycles=late_max)
    ref = TouchdownDetector(cfg, L, 4, DT)
    ref.reset(np.zeros((L, 4)))
    st = [ref.touchdown.copy(), ref.count.copy(), ref.latched_cycle.copy(), ref._prev_phase.copy(),
          ref._prev_cycle.copy(), ref.late.copy(), ref.event.copy()]
    test = kernels.LandingTest(gamma=cfg.gamma_land, n_land=cfg.n_land, late_max=late_max)
    flags = lates = 0
    phase, cycle = np.zeros(L, np.int64), np.zeros(L, np.int64)
    for step in range(3000):
        # random phase walk with cycle changes, scores around the threshold
        change = rng.random(L) < 0.05
        phase = np.where(change, rng.integers(0, 3, L), phase).astype(np.int64)
        cycle = cycle + (rng.random(L) < 0.02)
        ref.score = rng.uniform(0, 2000, L)
        td_ref = ref.detect(phase, cycle).copy()
        kernels.td_detect(phase, cycle, ref.score, test, *st)
        np.testing.assert_array_equal(st[0], td_ref)
        for a, b in zip(st[1:], [ref.count, ref.latched_cycle, ref._prev_phase, ref._prev_cycle, ref.late,
                                 ref.event]):
            np.testing.assert_array_equal(a, b)
        flags += int(td_ref.sum())
        lates += int((ref.late > 0).sum())
    assert flags > 100
    assert (lates > 100) if late_max else lates == 0


@pytest.mark.parametrize("gating", [True, False])
def test_velocity_kernels_match_filter(gating):
    rng = np.random.default_rng(7)
    cfg = VelocityConfig(gating=gating, exclusion_cycles=7, max_inflation=20.0)
    L = 6
    ref = BaseVelocityFilter(cfg, L, DT)
    ref.reset(rng.normal(size=3) * 0.1, support=rng.random(L) < 0.5)
    v, P = ref.v.copy(), ref.P.copy()
    prev, cyc = ref.prev_support.copy(), ref.cycles_in_support.astype(np.int64)
    d2, infl, used, excl = np.zeros(L), np.zeros(L), np.zeros(L, bool), np.zeros(L, bool)
    no_feet = 0
    for step in range(3000):
        a = rng.normal(size=3) * 3
        dt = DT if step % 4 else DT * 2
        ref.predict(a, dt)
        kernels.vel_predict(v, P, a[0], a[1], a[2], dt, DT, ref._q)
        sup = rng.random(L) < (0.8 if step % 200 > 20 else 0.0)
        usable_ref = ref.reliable(sup)
        new = np.zeros(L, np.int64)
        kernels.vel_reliable(sup, prev, cyc, cfg.exclusion_cycles, new, used, excl)
        cyc = new
        np.testing.assert_array_equal(used, usable_ref)
        np.testing.assert_array_equal(excl, ref.excluded)
        np.testing.assert_array_equal(cyc, ref.cycles_in_support)
        np.testing.assert_array_equal(prev, ref.prev_support)
        z = v + rng.normal(size=(L, 3)) * rng.choice([0.01, 0.1, 2.0], size=(L, 1))
        ref.correct(z, usable_ref, sup)
        assert kernels.vel_correct(v, P, z, used, sup, ref._r, cfg.gate_d2, cfg.max_inflation, gating,
                                   d2, infl, used) == kernels.OK
        no_feet += not usable_ref.any()
        np.testing.assert_array_equal(np.isnan(d2), np.isnan(ref.d2))
        close(np.nan_to_num(d2), np.nan_to_num(ref.d2))
        close(infl, ref.inflation)
        np.testing.assert_array_equal(used, ref.used)
        close(v, ref.v)
        close(P, ref.P)
    assert no_feet > 50


def test_inv_small_and_coupled_bias():
    rng = np.random.default_rng(1)
    for m in (1, 2, 3, 4, 6):
        for _ in range(50):
            A = rng.normal(size=(m, m)) + 0.1 * np.eye(m)
            out, work = np.zeros((m, m)), np.zeros((m, m))
            assert kernels.inv_small(A, out, work)
            np.testing.assert_allclose(out, np.linalg.inv(A), rtol=1e-9, atol=1e-9 * np.abs(out).max())
    assert not kernels.inv_small(np.zeros((3, 3)), np.zeros((3, 3)), np.zeros((3, 3)))
    assert not kernels.inv_small(np.array([[1.0, 2.0], [2.0, 4.0]]), np.zeros((2, 2)), np.zeros((2, 2)))
    h, M_lb, a = rng.normal(size=(6, 4)), rng.normal(size=(6, 4, 6)), rng.normal(size=6)
    out = np.zeros((6, 4))
    kernels.coupled_bias(h, M_lb, a, out)
    close(out, h + M_lb @ a)


@pytest.mark.parametrize("robot", ["hexapod", "quadruped"])
def test_leg_blocks_and_kinematics_match_pinocchio(robot, request):
    rm = request.getfixturevalue(robot)
    gait = GaitScheduler(GaitConfig(groups=((rm.cfg.leg_names[0],),), start_time=1e6), rm.cfg.leg_names)
    fast, ref = StateEstimator(rm, gait), ReferenceEstimator(rm, gait)
    assert fast._tree is not None, "the compiled kinematics must cover this robot"
    rng = np.random.default_rng(0)
    for _ in range(30):
        q = rm.stance_configuration()
        q[:3] += rng.normal(size=3)
        quat = rng.normal(size=4)
        q[3:7] = quat / np.linalg.norm(quat)
        q[7:] += rng.normal(size=rm.n) * 0.5
        v = rng.normal(size=rm.nv) * 2
        fast._dynamics_fast(q, v)
        ref._dynamics(q, v)
        close(fast._M_inv, ref._M_inv)
        close(fast._h_leg, ref._h_leg)
        close(fast._M_lb, ref._M_lb)
        fast._kinematics_fast(q[7:], v[6:])
        ref._kinematics(q[7:], v[6:])
        close(fast._p_foot, ref._p_foot)
        close(fast._v_rel, ref._v_rel)


def test_kinematic_tree_refuses_unknown_joints():
    import pinocchio as pin

    model = pin.Model()
    j = model.addJoint(0, pin.JointModelSpherical(), pin.SE3.Identity(), "ball")
    f = model.addFrame(pin.Frame("foot", j, 0, pin.SE3.Identity(), pin.FrameType.OP_FRAME))
    assert kinematic_tree(model, [f]) is None
    model = pin.Model()
    j1 = model.addJoint(0, pin.JointModelRevoluteUnaligned(np.array([0.6, 0.0, 0.8])), pin.SE3.Random(), "a")
    j2 = model.addJoint(j1, pin.JointModelPY(), pin.SE3.Random(), "b")
    j3 = model.addJoint(j2, pin.JointModelRX(), pin.SE3.Random(), "c")
    f = model.addFrame(pin.Frame("foot", j3, 0, pin.SE3(np.eye(3), np.array([0.1, 0.2, -0.3])),
                                 pin.FrameType.OP_FRAME))
    tree = kinematic_tree(model, [f])
    assert tree is not None
    data = model.createData()
    rng = np.random.default_rng(3)
    p, vr = tree["p_foot"][0], tree["v_rel"][0]
    for _ in range(20):
        q, dq = rng.normal(size=3), rng.normal(size=3)
        tree_foot_kinematics(q, dq, tree)
        pin.forwardKinematics(model, data, q, dq)
        pin.updateFramePlacement(model, data, f)
        close(p[0], data.oMf[f].translation)
        close(vr[0], pin.getFrameVelocity(model, data, f, pin.ReferenceFrame.LOCAL_WORLD_ALIGNED).linear)


def test_gait_kernel_matches_scheduler():
    legs = ["a", "b", "c", "d", "e"]
    for cfg in (GaitConfig(groups=(("a", "c"), ("b",), ("d",)), period=0.9, duty=0.7, start_time=0.3, stop_time=4.1),
                GaitConfig(groups=(("a", "b", "c"), ("d", "e")), period=1.0, duty=0.6, start_time=3.0),
                # binary fractions: the phase boundaries are hit exactly
                GaitConfig(groups=(("a", "b"), ("c", "d")), period=1.0, duty=0.5, start_time=2.0, stop_time=6.5)):
        g = GaitScheduler(cfg, legs)
        G = len(cfg.groups)
        # a dense grid plus the exact phase boundaries and their neighbours
        ts = list(np.arange(-0.5, 8.0, 0.0005))
        for c in range(-1, 9):
            for k in range(G):
                for frac in (0.0, 0.5 * g.swing_duration, g.swing_duration):
                    b = cfg.start_time + c * cfg.period + k * cfg.period / G + frac
                    ts += [b, np.nextafter(b, -np.inf), np.nextafter(b, np.inf)]
        ts.append(cfg.start_time)
        if math.isfinite(cfg.stop_time):
            ts += [cfg.stop_time, np.nextafter(cfg.stop_time, -np.inf)]
        ph, pr, cy = np.zeros(len(legs), np.int64), np.zeros(len(legs)), np.zeros(len(legs), np.int64)
        for t in ts:
            gait_state(float(t), cfg.start_time, cfg.stop_time, cfg.period, g.swing_duration, g.offset, g.group,
                       ph, pr, cy)
            eph, epr, ecy = g.state(float(t))
            np.testing.assert_array_equal(ph, eph, err_msg=f"t={t!r}")
            np.testing.assert_array_equal(pr, epr, err_msg=f"t={t!r}")
            np.testing.assert_array_equal(cy, ecy, err_msg=f"t={t!r}")


def test_sample_check_codes():
    n = 3
    buf = np.zeros(3 * n + 10)
    good = [np.arange(n, dtype=float), np.ones(n), np.zeros(n), np.array([0.0, 0.0, 0.0, 1.0]), np.zeros(3),
            np.array([0.0, 0.0, 9.81])]
    assert kernels.load_sample(buf, *good, 1e-2) == kernels.OK
    np.testing.assert_array_equal(buf, np.concatenate(good))
    for field, (o, m) in enumerate(kernels.sample_layout(n)):
        bad = [a.copy() for a in good]
        bad[field][m - 1] = np.nan
        assert kernels.load_sample(buf, *bad, 1e-2) == field
        short = [a.copy() for a in good]
        short[field] = short[field][:-1]
        assert kernels.load_sample(buf, *short, 1e-2) == kernels.BAD_SHAPE
    q = [a.copy() for a in good]
    q[3] = np.array([0.0, 0.0, 0.0, 1.011])
    assert kernels.load_sample(buf, *q, 1e-2) == kernels.BAD_QUAT
    q[3] = np.array([0.0, 0.0, 0.0, 1.009])
    assert kernels.load_sample(buf, *q, 1e-2) == kernels.OK
