"""Whole-body controller: QP backends, constraints at the solution, CBF behaviour, failure handling."""


import numpy as np
import pinocchio as pin
import pytest

from legged_wbc.conventions import rotation_from_quat_xyzw
from legged_wbc.gait import GaitConfig
from legged_wbc.model import RobotModel
from wbc_controller.config import WbcConfig, load_wbc_config
from wbc_controller.controller import ControllerInput, InputError, WholeBodyController
from wbc_controller.qp import INF, QpProblem, make_backend
from legged_wbc.robot import ConfigError


@pytest.fixture(scope="module")
def rm():
    return RobotModel("hexapod")


def standing_input(rm, t=1.0, support=None, theta_offset=None, qdot=None):
    q = rm.stance_configuration()
    v = np.zeros(rm.nv)
    if qdot is not None:
        v[6:] = qdot
    return ControllerInput(t=t, q=q, v=v, support=np.ones(rm.n_legs, bool) if support is None else support)


def make_ctl(rm, **over):
    cfg = load_wbc_config(overrides=over)
    gait = GaitConfig.from_dict(dict(rm.cfg.gait, start_time=100.0))  # no gait in these tests
    ctl = WholeBodyController(rm, cfg, gait)
    ctl.reset(rm.stance_configuration())  # body reference: hold the nominal stance
    return ctl


# ------------------------------------------------------------------ QP backends on a known answer
def known_qp():
    """min 1/2|x - c|^2  s.t.  x0 + x1 + x2 = 1,  x2 <= 0.1,  -inf < x1 <= 0.2;  c = (1, 1, 1).

    KKT: x2 = 0.1, x1 = 0.2 (active), x0 = 0.7."""
    p = QpProblem(3, 1, 2)
    p.H[:] = np.eye(3)
    p.g[:] = -np.ones(3)
    p.A_eq[0] = 1.0
    p.b_eq[0] = 1.0
    p.C[0, 2] = 1.0
    p.u[0] = 0.1
    p.C[1, 1] = 1.0
    p.u[1] = 0.2
    p.l[:] = -INF
    return p, np.array([0.7, 0.2, 0.1])


@pytest.mark.parametrize("name", ["daqp", "proxqp", "osqp", "qpsolvers-daqp", "qpsolvers-osqp"])
def test_backends_known_answer(name):
    p, x_star = known_qp()
    be = make_backend(name, 3, 1, 2, tol=1e-9)
    for _ in range(2):  # second call exercises the warm-started / updated workspace
        res = be.solve(p)
        assert res.optimal, res.status
        np.testing.assert_allclose(res.x, x_star, atol=1e-6)
    eq, viol = p.residuals(res.x)
    assert eq < 1e-6 and viol < 1e-6


# ------------------------------------------------------------------ the WBC solution
def test_solution_satisfies_every_constraint(rm):
    ctl = make_ctl(rm, relative_pitch_mode="cbf")
    support = np.array([True, False, True, False, True, False])
    out = ctl.update(standing_input(rm, support=support))
    assert out.diag.qp_accepted, out.diag.qp_status
    x = ctl.last_x
    p = ctl.problem
    eq, viol = p.residuals(x)
    assert eq < 1e-6 and viol < 1e-6
    lam = x[rm.nv:rm.nv + 4 * rm.n_legs].reshape(rm.n_legs, 4)
    mu = ctl.cfg.mu
    for i in range(rm.n_legs):
        fx, fy, fz, m = lam[i]
        assert fz >= -1e-6 and abs(m) < 1e-6
        assert abs(fx) <= mu * fz + 1e-6 and abs(fy) <= mu * fz + 1e-6
        if not support[i]:
            assert np.abs(lam[i]).max() < 1e-6, "swing feet must get zero force"
    # support feet carry the robot's weight
    assert abs(lam[:, 2].sum() - rm.total_mass * 9.81) < 0.05 * rm.total_mass * 9.81
    tmin, tmax = ctl.tau_bounds()
    assert np.all(out.tau >= tmin) and np.all(out.tau <= tmax)


def test_torque_is_inverse_dynamics_of_solution(rm):
    """tau = S[M nu_dot + h - J_c^T lambda] + tau_sw, checked with Pinocchio's RNEA and world Jacobians."""
    ctl = make_ctl(rm, relative_pitch_mode="damping")
    rng = np.random.default_rng(0)
    inp = standing_input(rm, support=np.array([True, True, True, True, True, False]))
    inp.v[:] = rng.normal(scale=0.2, size=rm.nv)
    inp.q[3:7] = pin.Quaternion(pin.exp3(np.array([0.05, -0.03, 0.2]))).coeffs()
    out = ctl.update(inp)
    assert out.diag.qp_accepted
    x = ctl.last_x
    nu_dot = x[:rm.nv]
    lam = x[rm.nv:rm.nv + 4 * rm.n_legs].reshape(rm.n_legs, 4)
    gen = pin.rnea(rm.model, rm.data, inp.q, inp.v, nu_dot).copy()
    R = rotation_from_quat_xyzw(inp.q[3:7])
    Jw = rm.foot_jacobians_world(inp.q)
    for i in range(rm.n_legs):
        gen -= Jw[i].T @ (R @ lam[i, :3])   # forces are expressed in the base frame
    np.testing.assert_allclose(gen[:6], 0.0, atol=1e-5)            # floating-base rows hold
    np.testing.assert_allclose(gen[6:] + out.diag.tau_sw, out.tau, atol=1e-5)


def test_cbf_equals_damping_when_barrier_inactive(rm):
    a = make_ctl(rm, relative_pitch_mode="damping").update(standing_input(rm))
    b = make_ctl(rm, relative_pitch_mode="cbf").update(standing_input(rm))
    assert not b.diag.cbf_active.any()
    np.testing.assert_allclose(a.tau, b.tau, atol=1e-6 * max(1.0, np.abs(a.tau).max()))


def set_leg_pitch(rm, inp, leg, theta, theta_dot):
    """Move leg ``leg`` along its null space to relative pitch ``theta`` with rate ``theta_dot``."""
    p_target = rm.legs(inp.q[7:])[leg].p
    qj, ok = rm.leg_ik(leg, p_target, theta, inp.q[7:].copy())
    assert ok
    inp.q[7:] = qj
    lg = rm.legs(qj)[leg]
    n = lg.n
    inp.v[6 + rm.leg_joints[leg]] = n * theta_dot / (lg.J_theta @ n)
    return inp


def test_barrier_near_bound_is_active_and_limits_theta_ddot(rm):
    leg = 2
    inp = set_leg_pitch(rm, standing_input(rm), leg, 0.29, 0.5)
    ctl = make_ctl(rm, relative_pitch_mode="cbf")
    out = ctl.update(inp)
    assert out.diag.qp_accepted and out.diag.cbf_active[leg]
    lb = ctl.last_legs
    qdd = ctl.last_x[rm.leg_slice_v(leg)]
    theta_ddot = lb.J[leg, 3] @ qdd + lb.dJ_theta_dq[leg]
    c = ctl.cfg
    bound = c.kp_b * (c.theta_max - lb.theta[leg]) - c.kd_b * lb.theta_dot[leg]
    assert theta_ddot <= bound + 1e-6
    assert abs(theta_ddot - bound) < 1e-4  # the row is binding: theta_ddot is exactly the CBF limit
    assert bound < -c.theta_ddot_max      # stronger than what damping alone asks for
    # WBC-D at the same state only damps (saturated): theta_ddot ~ -theta_ddot_max, barrier ignored
    ctl_d = make_ctl(rm, relative_pitch_mode="damping")
    ctl_d.update(inp)
    th_dd_d = ctl_d.last_legs.J[leg, 3] @ ctl_d.last_x[rm.leg_slice_v(leg)] + ctl_d.last_legs.dJ_theta_dq[leg]
    assert th_dd_d > bound + 1.0


def test_cbf_rows_only_on_support_legs(rm):
    leg = 2
    inp = set_leg_pitch(rm, standing_input(rm), leg, 0.29, 0.5)
    inp.support[leg] = False
    ctl = make_ctl(rm, relative_pitch_mode="cbf")
    out = ctl.update(inp)
    assert out.diag.qp_accepted and not out.diag.cbf_active[leg]
    rc = ctl.row_cbf + leg
    assert ctl.problem.u[rc] >= INF and ctl.problem.l[rc] <= -INF


@pytest.mark.parametrize("impl", ["fast", "reference"])
def test_cbf_row_on_a_late_leg(rm, impl):
    """A late leg (out of the support set after a planned swing, its nominal phase back at support:
    the swing kernel keeps it descending) carries the CBF row, as it may join the support set at any
    tick: moving towards its upper bound, its pitch acceleration is held to the barrier's limit
    (the swing-pitch task alone would let it pass); with ``late_descent_velocity`` 0 (no late
    branch: the foot is held) the row is loose as on any swing leg. The compiled controller and the
    numpy oracle build the same row."""
    from legged_wbc.closed_loop import make_controller

    leg = 2
    inp = set_leg_pitch(rm, standing_input(rm), leg, 0.29, 1.0)
    inp.support[leg] = False
    gait = GaitConfig.from_dict(dict(rm.cfg.gait, start_time=100.0))   # nominal phase: support
    rows = {}
    for late_v in (0.4, 0.0):
        cfg = load_wbc_config(overrides={"relative_pitch_mode": "cbf", "late_descent_velocity": late_v})
        ctl = make_controller(rm, cfg, gait, impl)
        ctl.reset(rm.stance_configuration())
        ctl.swing.planned[leg] = True          # its swing was planned and has ended without a touchdown
        out = ctl.update(inp)
        rc = ctl.row_cbf + leg
        rows[late_v] = (ctl.problem.l[rc], ctl.problem.u[rc])
        assert out.diag.qp_accepted and not out.diag.support[leg]
        if late_v == 0.0:
            assert rows[late_v] == (-INF, INF) and not out.diag.cbf_active[leg]
            continue
        lb, c = ctl.last_legs, ctl.cfg
        theta_ddot = lb.J[leg, 3] @ ctl.last_x[rm.leg_slice_v(leg)] + lb.dJ_theta_dq[leg]
        bound = c.kp_b * (c.theta_max - c.cbf_margin - lb.theta[leg]) - c.kd_b * lb.theta_dot[leg]
        assert rows[late_v][1] == pytest.approx(bound - lb.dJ_theta_dq[leg], rel=1e-12)
        assert out.diag.cbf_active[leg]
        assert abs(theta_ddot - bound) < 1e-4          # binding: the swing-pitch task wanted more
        recenter = c.kp_swing_pitch * (ctl.theta_nominal[leg] - lb.theta[leg]) - c.kd_swing_pitch * lb.theta_dot[leg]
        assert recenter > bound + 1.0


def test_same_problem_size_in_every_mode_and_contact_state(rm):
    sizes = set()
    for mode in ("none", "damping", "cbf"):
        ctl = make_ctl(rm, relative_pitch_mode=mode)
        for sup in (np.ones(6, bool), np.array([1, 0, 1, 0, 1, 0], bool)):
            ctl.update(standing_input(rm, support=sup))
            p = ctl.problem
            sizes.add((p.n, p.n_eq, p.n_in, p.H.shape, p.C.shape))
    assert len(sizes) == 1


def test_infeasible_qp_held_then_safe_stop(rm):
    ctl = make_ctl(rm)
    good = ctl.update(standing_input(rm))
    assert good.diag.qp_accepted
    # inject infeasibility: contradictory bounds on a row, solved by the real backend (the first torque
    # row of the stacked QP; with DAQP the fast cycle solves the least-distance form: a row there)
    broken = {"on": True}

    def breaking(backend, lo, up, row):
        real_solve = backend.solve

        def infeasible_solve(p):
            if broken["on"]:
                getattr(p, lo)[row], getattr(p, up)[row] = 1.0, -1.0
            return real_solve(p)

        backend.solve = infeasible_solve

    breaking(ctl.backend, "l", "u", ctl.row_tau)
    assert ctl.ldp_backend is not None                    # the default: DAQP (solved first without the torque
    for be in (ctl.ldp_backend, ctl.ldp_backend_free):    # rows: break the first floating-base row in both)
        breaking(be, "bl", "bu", ctl.ldp.ms)
    for k in range(1, ctl.cfg.max_failures + 1):
        out = ctl.update(standing_input(rm))
        assert not out.diag.qp_accepted and not out.diag.safe_stop
        np.testing.assert_array_equal(out.tau, good.tau)  # hold the last valid solution
        assert out.diag.consecutive_failures == k
    out = ctl.update(standing_input(rm))
    assert out.diag.safe_stop and np.all(out.tau == 0.0)
    # latched: even a feasible problem keeps the safe stop until reset()
    broken["on"] = False
    out = ctl.update(standing_input(rm))
    assert out.diag.safe_stop and np.all(out.tau == 0.0)
    ctl.reset(rm.stance_configuration())
    assert ctl.update(standing_input(rm)).diag.qp_accepted


@pytest.mark.parametrize("field,value", [("q", np.full(31, np.nan)), ("q", np.zeros(30)),
                                         ("v", np.zeros(29)), ("support", np.ones(5, bool))])
def test_bad_input_rejected(rm, field, value):
    ctl = make_ctl(rm)
    before = ctl.update(standing_input(rm)).tau.copy()
    inp = standing_input(rm)
    setattr(inp, field, value)
    with pytest.raises(InputError, match=field):
        ctl.update(inp)
    inp = standing_input(rm)
    inp.v[10] = np.inf
    with pytest.raises(InputError, match="NaN"):
        ctl.update(inp)
    assert ctl.consecutive_failures == 0 and np.array_equal(ctl.last_tau, before)


def test_backends_agree_with_reference(rm):
    ctl = make_ctl(rm, relative_pitch_mode="cbf")
    inp = set_leg_pitch(rm, standing_input(rm, support=np.array([1, 0, 1, 0, 1, 0], bool)), 2, 0.28, 0.3)
    ctl.update(inp)
    p = ctl.problem.copy()
    ref = make_backend("qpsolvers-osqp", p.n, p.n_eq, p.n_in, tol=1e-9).solve(p)
    assert ref.optimal
    for name in ("daqp", "proxqp", "osqp"):
        res = make_backend(name, p.n, p.n_eq, p.n_in, tol=1e-9, max_iter=500).solve(p)
        assert res.optimal, name
        assert abs(p.objective(res.x) - p.objective(ref.x)) <= 1e-6 * max(1.0, abs(p.objective(ref.x))), name


def test_config_validation_names_parameter():
    with pytest.raises(ConfigError, match="kp_b"):
        WbcConfig(kp_b=-1.0)
    with pytest.raises(ConfigError, match="relative_pitch_mode"):
        WbcConfig(relative_pitch_mode="strong")
    with pytest.raises(ConfigError, match="unknown parameter"):
        load_wbc_config(overrides={"kp_bb": 1.0})
    with pytest.raises(ConfigError, match=r"kp_pos\[2\]"):
        WbcConfig(kp_pos=(1.0, 2.0, -3.0))


def test_swing_planner_derivatives_and_end_conditions():
    from wbc_controller.blocks.swing import SwingPlanner

    sp = SwingPlanner(3)
    rng = np.random.default_rng(0)
    for i in range(3):
        sp.begin(i, rng.normal(size=3), rng.normal(size=3), 0.4, rng.normal(size=3), rng.normal(size=3))
    legs, s, h = np.array([0, 2]), np.array([0.3, 0.7]), 1e-6
    p, v, a = sp(legs, s, 0.08)
    pp, vp, _ = sp(legs, s + h / 0.4, 0.08)
    pm, vm, _ = sp(legs, s - h / 0.4, 0.08)
    np.testing.assert_allclose((pp - pm) / (2 * h), v, atol=1e-6)   # velocity is d/dt of position
    np.testing.assert_allclose((vp - vm) / (2 * h), a, atol=1e-5)   # acceleration is d/dt of velocity
    p1, v1, _ = sp(legs, np.ones(2), 0.08)
    np.testing.assert_allclose(sp(legs, np.zeros(2), 0.08)[0], sp.start[legs], atol=1e-15)
    np.testing.assert_allclose(p1, sp.target[legs], atol=1e-15)
    np.testing.assert_allclose(v1, sp.v_end[legs], atol=1e-12)      # lands at ground speed, z velocity 0
    mid = sp(legs, np.full(2, 0.5), 0.08)[0]
    lin = 0.5 * (sp.start[legs, 2] + sp.target[legs, 2])
    np.testing.assert_allclose(mid[:, 2] - lin, 0.08, atol=1e-12)   # apex: lift height above the blend
