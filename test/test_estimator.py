"""State estimator: filter invariants, the touchdown and gating laws, config, and MuJoCo checks."""

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from legged_wbc.gait import SUPPORT, SWING_DOWN, SWING_UP, GaitConfig, GaitScheduler
from legged_wbc.robot import ConfigError
from state_estimator.config import (EstimatorConfig, HeightConfig, TouchdownConfig, VelocityConfig,
                                    load_estimator_config, parameter_schema)
from state_estimator.estimator import StateEstimator
from state_estimator.touchdown import TouchdownDetector
from state_estimator import kernels
from state_estimator.velocity import BaseVelocityFilter

ROOT = Path(__file__).resolve().parent.parent
DT = 0.002


def assert_spd(P, what=""):
    P = np.asarray(P)
    np.testing.assert_array_equal(P, np.swapaxes(P, -1, -2), err_msg=f"{what} not symmetric")
    assert np.linalg.eigvalsh(P).min() > 0.0, f"{what} not positive definite"


def random_spd(rng, k, scale=0.3):
    A = rng.normal(size=(k, k))
    return scale * (A @ A.T / k + 0.3 * np.eye(k))


# ---------------------------------------------------------------------------------- config
def test_schema_yaml_and_defaults_agree():
    schema = parameter_schema()
    names = [p.name for p in schema]
    assert len(names) == len(set(names))
    defaults = EstimatorConfig().to_flat()
    assert set(defaults) == set(names)
    for p in schema:
        assert defaults[p.name] == p.default, p.name
        assert (p.unit and f"[{p.unit}]" in p.description) or p.type == "bool", f"{p.name}: unit missing"
        if p.type != "bool":
            assert p.min <= p.default <= p.max, p.name
    doc = yaml.safe_load((ROOT / "config" / "estimator.yaml").read_text())
    params = doc["state_estimator"]["ros__parameters"]
    assert set(params) == set(names), "config/estimator.yaml must list every parameter"
    assert load_estimator_config() == EstimatorConfig.from_flat(params)
    assert load_estimator_config().to_flat() == defaults, "the YAML file and the schema defaults differ"


def test_config_out_of_range_names_the_parameter(tmp_path):
    for p in parameter_schema():
        if p.type == "bool":
            with pytest.raises(ConfigError, match=p.name.replace(".", r"\.")):
                EstimatorConfig.from_flat({p.name: 1.5})
            continue
        bad = p.min - (1 if p.type == "int" else abs(p.min) * 0.5 + 1e-3)
        with pytest.raises(ConfigError, match=p.name.replace(".", r"\.")):
            load_estimator_config(overrides={p.name: bad})
        with pytest.raises(ConfigError, match=p.name.replace(".", r"\.")):
            EstimatorConfig.from_flat({p.name: p.max * 2 + 1})
    with pytest.raises(ConfigError, match=r"touchdown\.n_land"):
        TouchdownConfig(n_land=1.5)
    with pytest.raises(ConfigError, match=r"velocity\.gate_d2"):
        VelocityConfig(gate_d2=float("nan"))
    with pytest.raises(ConfigError, match=r"height\.cutoff_hz"):
        HeightConfig(cutoff_hz=0.0)
    with pytest.raises(ConfigError, match=r"touchdown\.gama_land"):
        load_estimator_config(overrides={"touchdown.gama_land": 1.0})  # typo in our namespace
    # nested form, node-level keys ignored, overrides applied
    f = tmp_path / "est.yaml"
    f.write_text("state_estimator:\n  ros__parameters:\n    robot: hexapod\n"
                 "    touchdown:\n      n_land: 3\n    velocity.gating: false\n")
    cfg = load_estimator_config(f, overrides={"height.cutoff_hz": 10})
    assert cfg.touchdown.n_land == 3 and cfg.velocity.gating is False and cfg.height.cutoff_hz == 10.0
    f.write_text("other_node:\n  ros__parameters: {}\n")
    with pytest.raises(ConfigError, match="state_estimator"):
        load_estimator_config(f)


def test_core_modules_import_no_ros():
    code = ("import sys, state_estimator.estimator, state_estimator.touchdown, state_estimator.velocity, "
            "state_estimator.config; assert 'rclpy' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    for f in ("estimator.py", "touchdown.py", "velocity.py", "config.py"):
        assert "rclpy" not in (ROOT / "state_estimator" / f).read_text()


# ---------------------------------------------------------------------------------- touchdown KF
class SyntheticLeg:
    """A leg obeying the filter's own model: M dq_dot = tau - h - tau_ext (exactly)."""

    def __init__(self, rng, k=4):
        self.M = random_spd(rng, k)
        self.M_inv = np.linalg.inv(self.M)
        self.h = rng.normal(size=k) * 5.0
        self.dq = np.zeros(k)
        self.tau_ext = np.zeros(k)

    def step(self, tau):
        self.dq = self.dq + DT * self.M_inv @ (tau - self.h - self.tau_ext)
        return self.dq.copy()


def run_synthetic(phase_of, tau_ext_of, n_steps, cfg=None, cycle_of=lambda k: 0, seed=0):
    rng = np.random.default_rng(seed)
    leg = SyntheticLeg(rng)
    det = TouchdownDetector(cfg or TouchdownConfig(), n_legs=1, k=4, dt=DT)
    det.reset(np.zeros((1, 4)), np.zeros((1, 4)))
    flags, scores = [], []
    for k in range(n_steps):
        tau = 20.0 * np.sin(0.01 * k + np.arange(4))          # smooth motor torque
        leg.tau_ext = tau_ext_of(k)
        dq = leg.step(tau)                                     # sample k measures the step k-1 -> k
        td = det.update(leg.M_inv[None], tau[None], leg.h[None], dq[None],
                        np.array([phase_of(k)]), np.array([cycle_of(k)]))
        flags.append(bool(td[0]))
        scores.append(float(det.score[0]))
    return np.array(flags), np.array(scores), det


def test_touchdown_step_detected_within_expected_samples():
    cfg = TouchdownConfig()
    k0 = 300                                                  # external torque step acts from step k0 on
    step = np.array([0.0, 30.0, -20.0, -8.0])                 # [N m], like a foot landing
    flags, scores, _ = run_synthetic(lambda k: SWING_DOWN, lambda k: step if k >= k0 else np.zeros(4), 600)
    # before the step: model is exact, scores stay tiny and nothing fires
    assert not flags[:k0].any()
    assert scores[50:k0].max() < 0.01 * cfg.gamma_land
    # the step shows in the measurement of sample k0; the n_land-th consecutive sample fires
    first = int(np.argmax(flags))
    assert flags[k0:].any()
    assert first == k0 + cfg.n_land - 1, (first, scores[k0 - 1:k0 + 4])
    assert flags[first:].all(), "touchdown is latched for the rest of the swing-down"
    # the filter converges to the true external torque (sign: opposes the motor)
    _, _, det = run_synthetic(lambda k: SWING_DOWN, lambda k: step if k >= k0 else np.zeros(4), 900)
    np.testing.assert_allclose(det.tau_ext[0], step, atol=0.05)


def test_touchdown_needs_n_land_consecutive_samples():
    cfg = TouchdownConfig(n_land=3)
    det = TouchdownDetector(cfg, n_legs=1, dt=DT)
    det.reset(np.zeros((1, 4)))
    ph, cy = np.array([SWING_DOWN]), np.array([0])
    hi, lo = 2 * cfg.gamma_land, 0.5 * cfg.gamma_land
    for s, expect in [(hi, False), (hi, False), (lo, False), (hi, False), (hi, False), (hi, True), (lo, True)]:
        det.score = np.array([s])
        assert det.detect(ph, cy)[0] == expect


def test_no_detection_outside_swing_down_and_reset_next_cycle():
    step = np.array([0.0, 30.0, -20.0, -8.0])

    # phases: swing-up [0, 200), swing-down [200, 400), support [400, 600), swing-down again [600, 800)
    def phase(k):
        return SWING_UP if k < 200 else SWING_DOWN if k < 400 else SUPPORT if k < 600 else SWING_DOWN

    def cycle(k):
        return 0 if k < 600 else 1

    # a large external torque step during swing-up: the filter runs, nothing is detected
    flags, scores, _ = run_synthetic(phase, lambda k: step if 100 <= k else np.zeros(4), 800, cycle_of=cycle)
    assert scores[100:103].max() > TouchdownConfig().gamma_land   # it would have fired in swing-down
    assert not flags.any()
    # a step in swing-down fires and stays latched until that swing-down ends ...
    flags, _, _ = run_synthetic(phase, lambda k: step if 250 <= k < 450 else np.zeros(4), 800, cycle_of=cycle)
    assert flags[252:400].all() and not flags[:250].any()
    assert not flags[400:].any(), "latch must clear when the swing-down ends; support and next cycle start clean"
    # ... and a new cycle index clears the latch even without a phase change
    flags, _, _ = run_synthetic(lambda k: SWING_DOWN, lambda k: step if k >= 100 else np.zeros(4), 400,
                                cycle_of=lambda k: 0 if k < 300 else 1)
    assert flags[101:300].all() and not flags[300:].any()


def test_touchdown_covariance_stays_spd_long_run():
    rng = np.random.default_rng(4)
    L, k = 6, 4
    det = TouchdownDetector(TouchdownConfig(), n_legs=L, k=k, dt=DT)
    det.reset(np.zeros((L, k)))
    # leg inertias from light to heavy (0.05..1 kg m^2 scale), drawn once and cycled
    pool = [np.linalg.inv(np.array([random_spd(rng, k, scale=rng.uniform(0.05, 1.0)) for _ in range(L)]))
            for _ in range(32)]
    for n in range(5000):
        det.filter(pool[n % 32], rng.normal(size=(L, k)) * 50, rng.normal(size=(L, k)) * 20,
                   rng.normal(size=(L, k)) * 2)
        if n % 50 == 0 or n > 4950:
            assert_spd(det.P, f"touchdown P at step {n}")
    assert np.all(np.isfinite(det.x))


# ---------------------------------------------------------------------------------- velocity filter
def test_gating_law():
    """A foot's covariance inflation as the filter computes it (reference ``correct`` and the compiled
    ``vel_correct`` of the fast path): 1 up to the gate d2 = 7.81, then d2 / 7.81 (continuous,
    monotone), capped at 100."""
    thr, cap = 7.81, 100.0
    d2 = np.concatenate([[0.0, 1.0, 5.0, 7.8, thr, thr + 1e-9, 15.62, 78.1, 390.5, thr * cap, 1e6],
                         np.linspace(0, 2000, 2001)])
    cfg = VelocityConfig()
    f = BaseVelocityFilter(cfg, n_feet=len(d2), dt=DT)
    f.reset(np.array([0.1, -0.05, 0.02]))
    s = f.P[0, 0] + cfg.sigma_meas ** 2                             # P = sigma_init^2 I, so S = s I
    z = f.v + np.sqrt(d2 * s)[:, None] * np.array([0.6, 0.0, 0.8])   # |z - v|^2 / s = d2
    none = np.zeros(len(d2), dtype=bool)
    v0, P0 = f.v.copy(), f.P.copy()
    f.correct(z, none, ~none)                                       # evaluated, none used
    np.testing.assert_allclose(f.d2, d2, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(f.inflation, np.clip(d2 / thr, 1.0, cap), rtol=1e-12)
    c = f.inflation
    assert np.all(c[:4] == 1.0)                                     # below the gate: untouched
    assert abs(c[5] - 1.0) < 1e-9                                   # continuous at the gate
    np.testing.assert_allclose(c[6:9], [2.0, 10.0, 50.0], rtol=1e-12)
    assert c[9] == pytest.approx(cap) and c[10] == cap              # capped at 100x
    grid = c[11:]
    assert np.all(np.diff(grid) >= 0) and np.abs(np.diff(grid)).max() < 1.0 / thr + 1e-9   # monotone, no jumps
    np.testing.assert_array_equal(f.v, v0)
    np.testing.assert_array_equal(f.P, P0)
    # the compiled correction of the fast estimator: the same law
    d2k, ck, used = np.empty(len(d2)), np.empty(len(d2)), np.empty(len(d2), dtype=bool)
    assert kernels.vel_correct(v0.copy(), P0.copy(), z, none, ~none, f._r, cfg.gate_d2, cfg.max_inflation, True,
                               d2k, ck, used) == kernels.OK
    np.testing.assert_allclose(ck, c, rtol=1e-14)
    np.testing.assert_allclose(d2k, f.d2, rtol=1e-14, atol=1e-14)


def stacked_update(v, P, Z, R_list):
    """Reference: stacked KF update with H = [I; I; ...] (no tricks)."""
    m = len(Z)
    H = np.vstack([np.eye(3)] * m)
    R = np.zeros((3 * m, 3 * m))
    for i, Ri in enumerate(R_list):
        R[3 * i:3 * i + 3, 3 * i:3 * i + 3] = Ri
    S = H @ P @ H.T + R
    K = P @ H.T @ np.linalg.inv(S)
    return v + K @ (np.concatenate(Z) - H @ v), (np.eye(3) - K @ H) @ P


@pytest.mark.parametrize("gating", [True, False])
def test_velocity_update_matches_gating_definition(gating):
    cfg = VelocityConfig(gating=gating, sigma_meas=0.03)
    f = BaseVelocityFilter(cfg, n_feet=4, dt=DT)
    f.reset(np.array([0.1, -0.05, 0.0]))
    f.P = np.diag([1e-4, 2e-4, 1.5e-4])
    v0, P0 = f.v.copy(), f.P.copy()
    r = cfg.sigma_meas ** 2
    Z = np.array([[0.11, -0.05, 0.0], [1.5, 0.3, -0.2], [0.2, -0.1, 0.05], [5.0, 5.0, 5.0]])
    usable = np.array([True, True, True, False])
    f.correct(Z, usable)
    S_inv = np.linalg.inv(P0 + r * np.eye(3))
    d2 = np.array([(z - v0) @ S_inv @ (z - v0) for z in Z])
    np.testing.assert_allclose(f.d2[:3], d2[:3])
    assert np.isnan(f.d2[3])
    c = np.clip(d2 / 7.81, 1.0, 100.0) if gating else np.ones(4)
    assert (d2[1] > 7.81 * 100) and (7.81 < d2[2] < 781)        # one capped outlier, one mild one
    np.testing.assert_allclose(f.inflation[:3], c[:3])
    v_ref, P_ref = stacked_update(v0, P0, list(Z[:3]), [c[i] * r * np.eye(3) for i in range(3)])
    np.testing.assert_allclose(f.v, v_ref, atol=1e-12)
    np.testing.assert_allclose(f.P, P_ref, atol=1e-12)
    assert list(f.used) == list(usable)


def test_exclusion_window():
    cfg = VelocityConfig()
    assert cfg.exclusion_cycles == 20
    f = BaseVelocityFilter(cfg, n_feet=2, dt=DT)
    f.reset(support=np.array([True, False]))
    usable = []
    for n in range(60):
        sup = np.array([True, n >= 10])                        # foot 1 enters the support set at cycle 10
        usable.append(f.reliable(sup).copy())
        if n == 10:
            assert f.excluded[1] and f.cycles_in_support[1] == 0
    usable = np.array(usable)
    assert usable[:, 0].all(), "a foot in support at reset is settled"
    assert not usable[:30, 1].any(), "ignored on cycles 10..29 (20 cycles = 40 ms)"
    assert usable[30:, 1].all()
    # leaving support and coming back restarts the window
    f.reliable(np.array([True, False]))
    assert not f.reliable(np.array([True, True]))[1]


def test_velocity_covariance_stays_spd_long_run():
    rng = np.random.default_rng(2)
    f = BaseVelocityFilter(VelocityConfig(), n_feet=6, dt=DT)
    f.reset()
    for n in range(5000):
        f.predict(rng.normal(size=3))
        sup = rng.random(6) < 0.7
        f.correct(rng.normal(size=(6, 3)) * rng.choice([0.01, 1.0, 30.0]), f.reliable(sup), sup)
        if n % 100 == 0:
            assert_spd(f.P, f"velocity P at step {n}")
    assert_spd(f.P)


# ---------------------------------------------------------------------------------- estimator
@pytest.fixture(scope="module")
def rm():
    from legged_wbc.model import RobotModel

    return RobotModel("hexapod")


def standing_gait(rm):
    groups = (tuple(rm.cfg.leg_names[:3]), tuple(rm.cfg.leg_names[3:]))
    return GaitScheduler(GaitConfig(groups=groups, start_time=1e6), rm.cfg.leg_names)


def static_inputs(rm, q):
    return dict(joint_pos=q[7:].copy(), joint_vel=np.zeros(rm.n), joint_effort=np.zeros(rm.n),
                imu_quat_xyzw=q[3:7].copy(), imu_gyro=np.zeros(3), imu_accel=np.array([0.0, 0.0, 9.81]))


def snapshot(est):
    td, vf = est.touchdown, est.velocity
    arrays = [td.x, td.P, td.score, td.count, td.touchdown, vf.v, vf.P, vf.cycles_in_support,
              vf.prev_support, est._pos, est._M_inv, est._h_leg, est._M_lb, est._gyro_prev]
    return [np.copy(a) for a in arrays] + [est._t, est._started]


@pytest.mark.parametrize("oracle", [False, True], ids=["compiled", "oracle"])
def test_dynamics_blocks_match_robot_model(rm, oracle):
    from state_estimator.oracle import ReferenceEstimator

    est = (ReferenceEstimator if oracle else StateEstimator)(rm, standing_gait(rm))
    rng = np.random.default_rng(0)
    q = rm.stance_configuration()
    q[7:] += rng.normal(size=rm.n) * 0.1
    v = rng.normal(size=rm.nv)
    (est._dynamics if oracle else est._dynamics_fast)(q, v)
    M, h = rm.mass_matrix(q), rm.bias(q, v)
    for i, cols in enumerate(rm.leg_joints):
        idx = cols + 6
        np.testing.assert_allclose(est._M_inv[i], np.linalg.inv(M[np.ix_(idx, idx)]), rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(est._h_leg[i], h[idx], atol=1e-10)
        np.testing.assert_allclose(est._M_lb[i], M[np.ix_(idx, np.arange(6))], atol=1e-12)


def test_invalid_inputs_rejected_without_corrupting_state(rm):
    q0 = rm.stance_configuration()
    est, twin = StateEstimator(rm, standing_gait(rm)), StateEstimator(rm, standing_gait(rm))
    with pytest.raises(RuntimeError, match="reset"):
        est.update(0.0, **static_inputs(rm, q0))
    est.reset(q0)
    twin.reset(q0)
    good = static_inputs(rm, q0)
    for k in range(5):
        est.update(k * DT, **good)
        twin.update(k * DT, **good)
    before = snapshot(est)
    t = 5 * DT
    bad_cases = [
        (t, {"joint_pos": np.full(rm.n, np.nan)}, "joint_pos"),
        (t, {"joint_vel": np.r_[np.zeros(rm.n - 1), np.inf]}, "joint_vel"),
        (t, {"joint_effort": np.zeros(rm.n - 1)}, "joint_effort"),
        (t, {"imu_quat_xyzw": np.array([0.0, 0.0, 0.0, 2.0])}, "imu_quat_xyzw"),
        (t, {"imu_quat_xyzw": np.array([0.0, 0.0, 1.0])}, "imu_quat_xyzw"),
        (t, {"imu_gyro": np.array([0.0, np.nan, 0.0])}, "imu_gyro"),
        (t, {"imu_accel": "abc"}, "imu_accel"),
        (4 * DT, {}, "increasing"),                          # same time as the last sample
        (3 * DT, {}, "increasing"),                          # out of order
        (float("nan"), {}, "finite"),
    ]
    for tt, change, msg in bad_cases:
        with pytest.raises(ValueError, match=msg):
            est.update(tt, **{**good, **change})
        after = snapshot(est)
        for a, b in zip(before, after):
            np.testing.assert_array_equal(a, b)
    # the next good sample gives exactly what an estimator that never saw the bad ones gives
    s1, s2 = est.update(t, **good), twin.update(t, **good)
    np.testing.assert_array_equal(s1.q, s2.q)
    np.testing.assert_array_equal(s1.v, s2.v)
    np.testing.assert_array_equal(s1.vel_cov, s2.vel_cov)
    np.testing.assert_array_equal(s1.tau_ext, s2.tau_ext)


def run_stand(rm, est, q0, seconds, kp=800.0, kd=15.0, swing=None):
    """MuJoCo with a joint PD holding ``q0``'s joints; ``swing(t, ref)`` may edit the joint targets.

    Returns per cycle: the estimate, the true ``q`` and ``v`` at the sample time, and the true foot
    contacts after each of the two physics steps that follow."""
    from mujoco_bridge.sim import MujocoSim

    sim = MujocoSim(rm)
    sim.reset(q0)
    est.reset(q0)
    log = []
    for _ in range(int(round(seconds / DT))):
        fr = sim.sensors()
        truth = sim.ground_truth()                            # at the sample time
        s = est.update_sensors(fr)
        ref = q0[7:].copy()
        if swing is not None:
            swing(fr.t, ref)
        sim.set_torque(kp * (ref - fr.joint_pos) - kd * fr.joint_vel)
        contacts = []
        for _ in range(2):
            sim.step()
            contacts.append(sim.foot_contacts())
        log.append((s, *truth, contacts))
    return log


def test_stand_velocity_and_height_mujoco(rm):
    q0 = rm.stance_configuration()
    est = StateEstimator(rm, standing_gait(rm))
    log = run_stand(rm, est, q0, 1.5)
    for s, q_true, v_true, _ in log[-250:]:                   # last 0.5 s, settled
        assert np.linalg.norm(s.v[:3]) < 0.005, s.v[:3]
        assert np.linalg.norm(s.v[:3] - v_true[:3]) < 0.003
        assert abs(s.q[2] - q_true[2]) < 0.003, (s.q[2], q_true[2])
        assert np.linalg.norm(s.q[:2] - q_true[:2]) < 0.01
        np.testing.assert_allclose(s.q[3:], q_true[3:], atol=1e-6)   # orientation and joints as measured
        np.testing.assert_allclose(s.v[3:], v_true[3:], atol=1e-6)
        assert s.support.all() and not s.touchdown.any() and s.vel_used.all()
        assert np.all(s.vel_d2 < 7.81)
        assert_spd(s.vel_cov)
    # the robot starts with its feet just touching and sags ~1 cm onto the PD: the velocity follows
    # (the lag comes from the soft contacts: the loading feet sink into the floor, i.e. move)
    err = np.array([np.linalg.norm(s.v[:3] - vt[:3]) for s, _, vt, _ in log])
    assert err.max() < 0.02
    assert err[200:].max() < 0.002
    assert_spd(est.touchdown.P)


def test_reset_without_q0_takes_height_from_feet(rm):
    q0 = rm.stance_configuration()
    est = StateEstimator(rm, standing_gait(rm))
    est.reset()
    s = est.update(0.0, **static_inputs(rm, q0))
    assert abs(s.q[2] - q0[2]) < 1e-9 and abs(s.height_raw - q0[2]) < 1e-9
    np.testing.assert_array_equal(s.q[:2], 0.0)


def test_touchdown_on_real_foot_mujoco(rm):
    """Leg lf swings (joint PD): lift 6 cm in swing-up, aim 3 cm into the ground in swing-down.

    The touchdown must be flagged after the true first contact, within 10 ms, never on the other
    legs, and the landed foot must then sit out its velocity-exclusion window."""
    q0 = rm.stance_configuration()
    lf = 0
    cols = rm.leg_joints[lf]
    leg = rm.legs(q0[7:])[lf]
    q_up, ok1 = rm.leg_ik(lf, leg.p + [0, 0, 0.06], leg.theta, q0[7:])
    q_dn, ok2 = rm.leg_ik(lf, leg.p - [0, 0, 0.03], leg.theta, q0[7:])
    assert ok1 and ok2
    gait = GaitScheduler(GaitConfig(groups=(("lf",),), period=1.0, duty=0.6, start_time=0.3), rm.cfg.leg_names)

    def swing(t, ref):
        ph, s = gait.phases(t)[lf], gait.swing_progress(t)[lf]
        if ph == SWING_UP:
            a = 0.5 - 0.5 * math.cos(math.pi * s / 0.5)
            ref[cols] = q0[7:][cols] + a * (q_up[cols] - q0[7:][cols])
        elif ph == SWING_DOWN:
            a = 0.5 - 0.5 * math.cos(math.pi * (s - 0.5) / 0.5)
            ref[cols] = q_up[cols] + a * (q_dn[cols] - q_up[cols])

    est = StateEstimator(rm, gait)
    log = run_stand(rm, est, q0, 0.75, swing=swing)
    t = np.array([s.t for s, *_ in log])
    phase = np.array([s.phase[lf] for s, *_ in log])
    # true contact of the foot, at 1 kHz (time of the physics step that made it)
    contact = np.array([[c[lf] for c in cs] for *_, cs in log])   # (cycles, 2)
    down = np.flatnonzero(phase == SWING_DOWN)
    lifted = down[0] - 1
    assert not contact[lifted].any(), "the foot must be in the air when the swing-down starts"
    k_c = down[np.flatnonzero(contact[down].any(axis=1))[0]]
    t_contact = t[k_c] + DT / 2 * (1 + int(np.argmax(contact[k_c])))
    td = np.array([s.touchdown[lf] for s, *_ in log])
    k_d = int(np.flatnonzero(td)[0])
    latency = t[k_d] - t_contact
    assert 0.0 <= latency <= 0.010, latency
    assert td[k_d:down[-1] + 1].all() and not td[down[-1] + 1:].any()
    assert not any(s.touchdown[[1, 2, 3, 4, 5]].any() for s, *_ in log)
    # the support set takes the leg at detection, the velocity filter ignores it for 20 cycles
    s_d = log[k_d][0]
    assert s_d.support[lf] and s_d.vel_excluded[lf] and not s_d.vel_used[lf]
    assert log[k_d + 19][0].vel_excluded[lf] and log[k_d + 20][0].vel_used[lf]
    # the velocity estimate stays close to the truth through lift-off and touchdown (after the
    # initial sag onto the PD, see the stand test)
    err = max(np.linalg.norm(s.v[:3] - vt[:3]) for s, _, vt, _ in log[100:])
    assert err < 0.015, err


def test_imu_lever_arm_is_removed(rm):
    """An IMU away from the base origin measures extra w_dot x r + w x (w x r): the estimator with
    that offset, fed those readings, must match the estimator of an IMU at the origin."""
    import dataclasses

    from legged_wbc.model import RobotModel

    r = np.array([0.2, -0.1, 0.05])
    rm_off = RobotModel(dataclasses.replace(rm.cfg, imu_xyz=tuple(r)))
    q0 = rm.stance_configuration()
    est0, est1 = StateEstimator(rm, standing_gait(rm)), StateEstimator(rm_off, standing_gait(rm_off))
    est0.reset(q0)
    est1.reset(q0)
    rng = np.random.default_rng(3)
    w_prev = np.zeros(3)
    for k in range(50):
        w = np.array([0.3 * math.sin(0.1 * k), 0.2 * math.cos(0.07 * k), 0.5 * math.sin(0.05 * k)])
        w_dot = (w - w_prev) / DT if k else np.zeros(3)
        f_base = np.array([0.0, 0.0, 9.81]) + rng.normal(size=3) * 0.1
        f_imu = f_base + np.cross(w_dot, r) + np.cross(w, np.cross(w, r))
        inp = {**static_inputs(rm, q0), "imu_gyro": w, "joint_vel": rng.normal(size=rm.n) * 0.05}
        s0 = est0.update(k * DT, **{**inp, "imu_accel": f_base})
        s1 = est1.update(k * DT, **{**inp, "imu_accel": f_imu})
        w_prev = w
        np.testing.assert_allclose(s1.v, s0.v, atol=1e-12)
        np.testing.assert_allclose(s1.td_score, s0.td_score, rtol=1e-9, atol=1e-6)


def test_set_config_applies_new_gains_and_keeps_state():
    """Live parameter updates (the node's on-set callback) change the derived filter constants."""
    from legged_wbc.gait import GaitConfig, GaitScheduler
    from legged_wbc.model import RobotModel
    from state_estimator.estimator import StateEstimator

    rm = RobotModel("hexapod")
    e = StateEstimator(rm, GaitScheduler(GaitConfig.from_dict(rm.cfg.gait), rm.cfg.leg_names))
    e.reset(rm.stance_configuration())
    v_before = e.velocity.v.copy()
    e.set_config(e.cfg.replace(**{"touchdown.sigma_dq_meas": 0.2, "velocity.sigma_meas": 0.1,
                                  "height.cutoff_hz": 10.0}))
    assert abs(e.touchdown._r - 0.04) < 1e-12 and abs(e.velocity._r - 0.01) < 1e-12
    assert abs(e._alpha_nom - e._alpha(e.dt)) < 1e-15 and e.cfg.height.cutoff_hz == 10.0
    assert (e.velocity.v == v_before).all()
