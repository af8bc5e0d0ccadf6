"""Fast controller path: compiled QP blocks and kernels against known entries and against the
reference cycle (today's numpy code) on recorded closed-loop states."""

import dataclasses
import math

import numpy as np
import pytest

from legged_wbc.closed_loop import ClosedLoop, make_controller
from legged_wbc.gait import GaitConfig, GaitScheduler, gait_state
from legged_wbc.kinematics import R2_EPS, LegBatch, legs_dtype, legs_from_frames, record_legs
from legged_wbc.model import RobotModel, null_vectors
from legged_wbc.scenario import load_scenario
from wbc_controller import kernels as K
from wbc_controller.blocks import cbf, compensation, contact, floating_base, friction, swing, tasks, torque
from wbc_controller.config import load_wbc_config
from wbc_controller.controller import STAGES, ControllerInput, InputError, WholeBodyController
from wbc_controller.ldp import check_direct, qp_from_ldp
from wbc_controller.qp import INF, QpProblem
from wbc_controller.blocks.swing import SwingPlanner
from wbc_controller.blocks.tasks import BodyReferenceGenerator, body_task_reference as body_task, vee

from ulps import assert_ulps_close


@pytest.fixture(scope="module")
def rm():
    return RobotModel("hexapod")


@pytest.fixture(scope="module")
def walk():
    """Controller inputs of 2 s of closed-loop walking (gait from 3 s; a 30 N m push on a support
    leg from 3.6 s, so CBF rows bind), recorded tick by tick."""
    sc = load_scenario("paper", ["disturbance.start_offset=-2.4", "disturbance.torque_nm=30"])
    loop = ClosedLoop(sc, "cbf")
    inputs = []
    real = loop.ctl.update

    def hooked(inp):
        if inp.t >= 2.8:
            inputs.append(ControllerInput(t=inp.t, q=inp.q.copy(), v=inp.v.copy(), support=inp.support.copy(),
                                          tau_ext=inp.tau_ext.copy()))
        return real(inp)

    loop.ctl.update = hooked
    loop.run(4.8)
    return loop, inputs


def params(**fields):
    """:class:`kernels.Params` with the given fields, the others zero (the kernel under test reads
    only its own)."""
    base = {k: t(0) for k, t in K.PARAM_SCALARS}
    base.update({k: np.zeros(shape(1, 1), dtype=t) for k, t, shape in K.PARAM_ARRAYS})
    base.update(fields)
    return K.Params(**base)


def leg_batch(**fields):
    """:class:`LegBatch` of 3 legs with the given fields, the others zero."""
    base = dict(p=np.zeros((3, 3)), J=np.zeros((3, 4, 4)), a=np.zeros((3, 3)), theta=np.zeros(3),
                theta_dot=np.zeros(3), J_w=np.zeros((3, 3, 4)), dJ_p_dq=np.zeros((3, 3)), dJ_theta_dq=np.zeros(3),
                v_p=np.zeros((3, 3)))
    base.update(fields)
    return LegBatch(**base)


def pair(loop, **over):
    cfg = dataclasses.replace(loop.wcfg, **over)
    out = []
    for impl in ("fast", "reference"):
        c = make_controller(loop.rm, cfg, loop.gait_cfg, impl)
        c.reset(loop.q0)
        out.append(c)
    return out


def rel(a, b):
    return float(np.max(np.abs(a - b) / np.maximum(1.0, np.abs(b)))) if np.size(a) else 0.0


VARIANTS = [
    {},
    {"relative_pitch_mode": "damping"},
    {"relative_pitch_mode": "none"},
    {"null_space_compensation": True, "support_foot_acceleration": "consistent"},
    {"cbf_slack": True, "torque_limit_mode": "realistic"},
    {"jdot_mode": "fd", "swing_pitch_projection": False, "swing_pitch_recenter": False},
    {"cbf_margin_mode": "tau_ext", "cbf_margin": 0.01},
    {"joint_limit_barrier": True, "joint_limit_kp": 1e4, "joint_limit_kd": 200.0, "torque_limit_mode": "realistic"},
    {"leg_collision_barrier": True, "leg_collision_d_min": 0.2, "leg_collision_range": 1.0,
     "leg_collision_kp": 3000.0, "leg_collision_kd": 110.0, "torque_limit_mode": "realistic"},
]


@pytest.mark.parametrize("over", VARIANTS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default")
def test_fast_equals_reference_on_recorded_states(walk, over):
    """Same inputs, every tick: the QP matrices agree to 1e-12 (relative per entry), the torques to
    1e-9 of max |tau|, the diagnostics to 1e-9; both accept the same cycles."""
    loop, inputs = walk
    fast, ref = pair(loop, **over)
    worst_tau, worst_qp, binding, swings = 0.0, 0.0, 0, 0
    for inp in inputs:
        of, orf = fast.update(inp), ref.update(inp)
        pf, pr = fast.problem, ref.problem
        for k in ("H", "g", "A_eq", "b_eq", "C", "l", "u"):
            worst_qp = max(worst_qp, rel(getattr(pf, k), getattr(pr, k)))
        worst_tau = max(worst_tau, float(np.abs(of.tau - orf.tau).max() / max(1.0, np.abs(orf.tau).max())))
        assert of.diag.qp_accepted == orf.diag.qp_accepted
        assert of.diag.qp_status == orf.diag.qp_status
        np.testing.assert_array_equal(of.diag.cbf_active, orf.diag.cbf_active)
        np.testing.assert_array_equal(of.diag.support, orf.diag.support)
        for k in ("theta", "theta_dot", "forces", "tau_wbc", "tau_sw", "tau_comp", "body_error_rpy"):
            a, b = getattr(of.diag, k), getattr(orf.diag, k)
            assert rel(a, b) <= 1e-9 * max(1.0, float(np.abs(b).max(initial=0.0))), k
        binding += int(of.diag.cbf_active.any())
        swings += int((~inp.support).any())
    assert worst_qp <= 1e-12
    assert worst_tau <= 1e-9
    assert swings > 100                      # the recording covers swing legs
    if over.get("relative_pitch_mode", "cbf") == "cbf":
        assert binding > 0                   # and binding barrier rows


def kkt_violation(p, x):
    """How far ``x`` is from satisfying the KKT conditions of ``p`` (the full QP, solved as it is by
    nobody here): ``(primal, stationarity)``. Primal: the normalized residual / violation of
    :meth:`QpProblem.residuals`. Stationarity: the smallest ``|H x + g + A_act^T mu|_inf`` over
    multipliers of the right sign (``>= 0`` on the side of a bound a row is at, free on equalities;
    non-negative least squares over the rows within 1e-6 of a bound), relative to
    ``max(1, |H x|_inf, |g|_inf)``."""
    from scipy.optimize import nnls

    eq, viol = p.residuals(x)
    Cx = p.C @ x
    up = (p.u < INF) & (Cx >= p.u - 1e-6 * np.maximum(1.0, np.abs(p.u)))
    lo = (p.l > -INF) & (Cx <= p.l + 1e-6 * np.maximum(1.0, np.abs(p.l)))
    G = np.hstack([p.A_eq.T, -p.A_eq.T, p.C[up].T, -p.C[lo].T])
    r = p.H @ x + p.g
    mu, _ = nnls(G, -r, maxiter=50 * G.shape[1])
    scale = max(1.0, np.abs(p.H @ x).max(), np.abs(p.g).max())
    return max(eq, viol), float(np.abs(r + G @ mu).max() / scale)


@pytest.mark.parametrize("over", [{}, {"cbf_slack": True, "torque_limit_mode": "realistic"},
                                  {"relative_pitch_mode": "none"}, {"tau_limit_paper": 60.0}],
                         ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default")
def test_ldp_solution_is_the_full_qp_optimum(walk, over):
    """The fast cycle gives DAQP the QP in least-distance form (``m_theta`` eliminated, the forces'
    bounds as simple bounds, ``H = I`` after the block Cholesky factor). On recorded walking states
    (swing legs, binding CBF rows) its solution satisfies the full QP's KKT conditions to the
    solver's tolerance (1e-6: DAQP's primal and dual tolerance) and equals the full QP solved by
    DAQP as it is (the reference cycle's way) to a few ulps of the torque scale (both are exact
    solutions of the same active set)."""
    loop, inputs = walk
    fast, ref = pair(loop, **over)
    assert fast.ldp_backend is not None
    worst_p, worst_s, worst_tau, binding = 0.0, 0.0, 0.0, 0
    with_tau_rows = 0
    real = fast.ldp_backend.solve

    def counted(p):
        nonlocal with_tau_rows
        with_tau_rows += 1
        return real(p)

    fast.ldp_backend.solve = counted
    for k, inp in enumerate(inputs):
        of, orf = fast.update(inp), ref.update(inp)
        assert of.diag.qp_accepted and orf.diag.qp_accepted
        worst_tau = max(worst_tau, float(np.abs(of.tau - orf.tau).max() / max(1.0, np.abs(orf.tau).max())))
        binding += int(of.diag.cbf_active.any())
        if k % 5 == 0 or of.diag.cbf_active.any():
            prim, stat = kkt_violation(fast.problem, fast.last_x)
            worst_p, worst_s = max(worst_p, prim), max(worst_s, stat)
        lam = fast.last_x[fast.lam0:fast.lam0 + 4 * fast.N].reshape(fast.N, 4)
        assert np.all(lam[:, 3] == 0.0)                        # m_theta: eliminated, exactly 0
        assert np.abs(lam[~inp.support, :3]).max(initial=0.0) <= 1e-12 * np.abs(lam).max()  # no force off support
    assert worst_p <= 1e-6 and worst_s <= 1e-6, (worst_p, worst_s)
    assert worst_tau <= 1e-9
    if over.get("relative_pitch_mode", "cbf") == "cbf":
        assert binding > 0
    # the torque rows are solved with only once one binds (60 N m: they do, on a part of the cycles)
    if "tau_limit_paper" in over:
        assert 0 < with_tau_rows < len(inputs)
    else:
        assert with_tau_rows == 0


def ldp_layout(ctl):
    """The QP columns of the LDP's variables (forces f_x, f_y, f_z of each foot, nu_dot, slacks) and
    the stacked rows of its general rows (floating-base, friction pyramids, CBF, torque, joint-limit and
    leg-collision rows when the options are on)."""
    N, n_eq = ctl.N, ctl.n_eq
    zcol = [ctl.lam0 + 4 * i + k for i in range(N) for k in range(3)] + list(range(ctl.nv)) + \
        [ctl.nv + 4 * N + k for k in range(ctl.ns)]
    fric = [n_eq + ctl.row_fric + 5 * i + k for i in range(N) for k in range(4)]
    rows = list(range(6)) + fric + list(range(n_eq + ctl.row_cbf, n_eq + ctl.row_cbf + N)) + \
        list(range(n_eq + ctl.row_tau, n_eq + ctl.row_tau + ctl.n)) + \
        list(range(n_eq + ctl.row_jl, n_eq + ctl.row_jl + ctl.n_jl)) + \
        list(range(n_eq + ctl.row_lc, n_eq + ctl.row_lc + ctl.n_lc))
    return np.array(zcol), np.array(rows)


@pytest.mark.parametrize("over", [{}, {"cbf_slack": True, "torque_limit_mode": "realistic"}],
                         ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default")
def test_ldp_is_the_stacked_qp_in_least_distance_form(walk, over):
    """:func:`kernels.ldp_direct` (built from the cycle's blocks) against the stacked QP the other
    kernels build (``ctl.problem``) transformed with numpy as DAQP would: ``H_z = R^T R`` over the
    LDP's variables ``z``, ``c = R^-T g_z``, rows ``A[rows, z] R^-1`` with their bounds (a foot
    outside the support set: pyramid rows loose), the force bounds in ``y``; nothing of the QP lost:
    the columns left out are the ``m_theta`` (fixed at 0 by their rows, weighted only in the cost)
    and the rows left out are those ``m_theta = 0`` rows and the ``f_z`` rows (now the simple bounds).
    :func:`kernels.qp_from_ldp` maps ``y`` back to ``x = R^-1 y``. To a few ulps of each quantity's scale."""
    loop, inputs = walk
    ctl, _ = pair(loop, **over)
    zcol, rows = ldp_layout(ctl)
    N, d = ctl.N, ctl.ldp
    ms = 3 * N
    checked = 0
    for inp in inputs[::9]:
        ctl.update(inp)
        p = ctl.problem
        bu, bl = p.stacked_bounds()
        m_theta = ctl.lam0 + 4 * np.arange(N) + 3
        assert sorted(set(range(ctl.nx)) - set(zcol)) == sorted(m_theta)
        np.testing.assert_array_equal(p.A_eq[6:, m_theta], np.eye(N))         # the rows fixing them
        dropped = sorted(set(range(p.A.shape[0])) - set(rows))
        assert dropped == sorted(list(range(6, 6 + N)) + list(ctl.n_eq + ctl.row_fric + 5 * np.arange(N) + 4))
        Hz = p.H[np.ix_(zcol, zcol)]
        np.testing.assert_array_equal(p.H[np.ix_(m_theta, zcol)], 0.0)         # m_theta: decoupled in the cost
        R = np.linalg.cholesky(Hz).T
        Ri = np.linalg.inv(R)
        close = lambda a, b: np.testing.assert_allclose(a, b, rtol=0, atol=1e-12 * max(1.0, np.abs(b).max()))  # noqa: E731
        close(d.c, np.linalg.solve(R.T, p.g[zcol]))
        close(d.A, p.A[np.ix_(rows, zcol)] @ Ri)
        gen_u, gen_l = bu[rows].copy(), bl[rows].copy()
        for i in np.flatnonzero(~inp.support):
            gen_u[6 + 4 * i:10 + 4 * i] = INF
        np.testing.assert_array_equal(d.bl[ms:], gen_l)
        np.testing.assert_allclose(d.bu[ms:], gen_u, rtol=1e-15, atol=0)
        sq = np.sqrt(np.diag(Hz))[:ms]
        for i in range(N):
            fz = ctl.n_eq + ctl.row_fric + 5 * i + 4
            if inp.support[i]:
                np.testing.assert_array_equal(d.bl[3 * i:3 * i + 2], -INF)
                np.testing.assert_array_equal(d.bu[3 * i:3 * i + 2], INF)
                assert d.bl[3 * i + 2] == bl[fz] == 0.0
                assert d.bu[3 * i + 2] == pytest.approx(bu[fz] * sq[3 * i + 2], rel=1e-14)
            else:
                assert bu[fz] == bl[fz] == 0.0
                np.testing.assert_array_equal(d.bl[3 * i:3 * i + 3], 0.0)
                np.testing.assert_array_equal(d.bu[3 * i:3 * i + 3], 0.0)
        y = np.random.default_rng(checked).normal(size=d.n)
        x = np.full(ctl.nx, 9.0)
        qp_from_ldp(y, ctl._leg_v, ctl._ldp_dinv, ctl._ldp_Rinv, ctl.ns, x)
        expect = np.zeros(ctl.nx)
        expect[zcol] = Ri @ y
        close(x, expect)
        assert np.all(x[m_theta] == 0.0)
        checked += 1
    assert checked > 20


def test_direct_checks_equal_the_stacked_checks(walk):
    """:func:`ldp.check_direct` (the fast cycle's residuals, torque and barrier checks from the
    blocks) against :func:`kernels.check_solution` on the stacked QP, at the cycle's solution and at
    perturbed points (so that residuals and violations are far from 0): the same numbers to a few
    ulps, the same torques, the same binding CBF rows."""
    loop, inputs = walk
    ctl, _ = pair(loop)
    N, n = ctl.N, ctl.n
    rng = np.random.default_rng(11)
    worst = 0.0
    for inp in inputs[::13]:
        ctl.update(inp)
        p = ctl.problem
        for scale in (0.0, 1e-3, 1.0, 100.0):
            x = ctl.last_x + scale * rng.normal(size=ctl.nx)
            outs = []
            for direct in (True, False):
                act = np.zeros(N, dtype=bool)
                if direct:
                    r = check_direct(x, inp.support, ctl.last_legs, ctl._ws[0], act)
                    tau_rows = r[4]
                    r = r[:4]
                    C_tau = p.C[ctl.row_tau:ctl.row_tau + n] @ x           # the torque rows' values
                    assert tau_rows == bool(np.all((C_tau >= p.l[ctl.row_tau:ctl.row_tau + n] - 1e-9)
                                                   & (C_tau <= p.u[ctl.row_tau:ctl.row_tau + n] + 1e-9)))
                else:
                    r = K.check_solution(ctl._qp, x, inp.support, ctl._ws, act)
                outs.append((r, ctl._tau.copy(), act))
            (fa, ea, va, ba), tau_a, act_a = outs[0]
            (fb, eb, vb, bb), tau_b, act_b = outs[1]
            assert fa == fb and ba == bb
            np.testing.assert_array_equal(tau_a, tau_b)
            np.testing.assert_array_equal(act_a, act_b)
            for a, b in ((ea, eb), (va, vb)):
                assert abs(a - b) <= 1e-12 * max(1.0, abs(b)), (scale, a, b)
                worst = max(worst, abs(b))
    assert worst > 1.0        # the perturbed points were checked with large residuals


def test_singular_cost_block_solves_the_qp_as_it_is(walk):
    """Without force weights and regularization the force block of H is 0: the least-distance form
    does not exist (the plain Cholesky factor does not), and the cycle solves the full QP with DAQP
    (which regularizes it) instead, as the reference does. (The optimum is not unique then, so the
    two need not pick the same one: each is checked against the KKT conditions.)"""
    loop, inputs = walk
    fast, ref = pair(loop, w_lambda_t=0.0, w_lambda_n=0.0, hessian_reg=0.0)
    calls = {"ldp": 0, "full": 0}
    for name, be in (("ldp", fast.ldp_backend), ("full", fast.backend)):
        real = be.solve
        be.solve = lambda p, real=real, name=name: (calls.__setitem__(name, calls[name] + 1), real(p))[1]
    for inp in inputs[:40:4]:
        of, orf = fast.update(inp), ref.update(inp)
        assert of.diag.qp_accepted and orf.diag.qp_accepted
        for c in (fast, ref):
            prim, stat = kkt_violation(c.problem, c.last_x)
            assert prim <= 1e-6 and stat <= 1e-6, (prim, stat)
    assert calls == {"ldp": 0, "full": 10}


def test_no_recompilation_during_the_walk(walk):
    """Every kernel the cycle calls was compiled (or loaded) when the controller was built, for the
    controller's argument types (warm-up = real calls): the walk compiles nothing."""
    loop, inputs = walk
    fast, _ = pair(loop)
    kernels = K.KERNELS + K.STAGE_KERNELS
    before = {k.__name__: len(k.signatures) for k in kernels}
    assert all(before.values())
    for inp in inputs[:50]:
        fast.update(inp)
    assert {k.__name__: len(k.signatures) for k in kernels} == before


def test_diagnostics_and_stage_times_filled(walk):
    loop, inputs = walk
    fast, _ = pair(loop)
    out = fast.update(inputs[0])
    d = out.diag
    assert d.qp_accepted and d.qp_iterations > 0
    assert 0 < d.solve_time_us <= d.qp_time_us <= d.cycle_time_us
    assert set(fast.stage_us) == set(STAGES) and all(v > 0 for v in fast.stage_us.values())
    assert d.forces.shape == (4 * rm_n_legs(loop),) and d.tau_wbc.shape == (loop.rm.n,)
    # outputs are fresh arrays: the next cycle does not change them
    kept = (out.tau.copy(), d.theta.copy(), d.tau_wbc.copy())
    fast.update(inputs[1])
    np.testing.assert_array_equal(out.tau, kept[0])
    np.testing.assert_array_equal(d.theta, kept[1])
    np.testing.assert_array_equal(d.tau_wbc, kept[2])


def rm_n_legs(loop):
    return loop.rm.n_legs


# ------------------------------------------------------------------ live configuration
@pytest.mark.parametrize("impl", ["fast", "reference"])
@pytest.mark.parametrize("name,value", [("mu", 0.3), ("w_lambda_t", 1e-3), ("w_lambda_n", 1e-3)])
def test_set_config_refills_friction_and_force_weights(walk, impl, name, value):
    """mu, w_lambda_t, w_lambda_n are live parameters: the next QP uses the new values (pyramids
    about body z: their normal-force entries are then exactly -mu)."""
    loop, inputs = walk
    wcfg = dataclasses.replace(loop.wcfg, contact_normal="body_z")
    ctl = make_controller(loop.rm, wcfg, loop.gait_cfg, impl)
    ctl.reset(loop.q0)
    ctl.update(inputs[0])
    before = ctl.problem.copy()
    ctl.set_config(dataclasses.replace(wcfg, **{name: value}))
    ctl.update(inputs[0])
    p, N, c0 = ctl.problem, ctl.N, ctl.lam0
    fric = p.C[ctl.row_fric:ctl.row_fric + 5 * N]
    lam_diag = p.H.diagonal()[c0:c0 + 4 * N] - (p.H.diagonal()[0] - loop.wcfg.w_body)  # minus the regularization
    if name == "mu":
        assert not np.array_equal(fric, before.C[:5 * N])
        for i in range(N):
            np.testing.assert_array_equal(fric[5 * i:5 * i + 4, c0 + 4 * i + 2], -value)
    else:
        cols = [0, 1, 3] if name == "w_lambda_t" else [2]
        for i in range(N):
            np.testing.assert_allclose(lam_diag[4 * i + np.array(cols)], value, rtol=1e-9)
        assert not np.array_equal(p.H, before.H)
    # and both paths agree after the change
    other = make_controller(loop.rm, dataclasses.replace(wcfg, **{name: value}), loop.gait_cfg,
                            "reference" if impl == "fast" else "fast")
    other.reset(loop.q0)
    other.update(inputs[0])
    for k in ("H", "C", "l", "u"):
        assert rel(getattr(p, k), getattr(other.problem, k)) <= 1e-12


@pytest.mark.parametrize("impl", ["fast", "reference"])
def test_set_config_rebuild_keeps_state(walk, impl):
    """cbf_slack rebuilds the QP workspace in place (no new object): the failure bookkeeping and
    the reference's start point are kept, the problem has the slack columns, and the next cycle
    agrees with a controller built with the slack from the start."""
    loop, inputs = walk
    ctl = make_controller(loop.rm, loop.wcfg, loop.gait_cfg, impl)
    ctl.reset(loop.q0)
    ctl.total_failures = 3
    p0 = ctl.refs.p0.copy()
    cfg = dataclasses.replace(loop.wcfg, cbf_slack=True)
    ctl.set_config(cfg)
    assert ctl.ns == ctl.N and ctl.problem.H.shape == (ctl.nx, ctl.nx) and ctl.total_failures == 3
    np.testing.assert_array_equal(ctl.refs.p0, p0)
    fresh = make_controller(loop.rm, cfg, loop.gait_cfg, impl)
    fresh.reset(loop.q0)
    np.testing.assert_array_equal(ctl.update(inputs[0]).tau, fresh.update(inputs[0]).tau)
    with pytest.raises(ValueError, match="impl"):
        make_controller(loop.rm, loop.wcfg, loop.gait_cfg, "numba")


@pytest.mark.parametrize("field,value", [("q", np.full(31, np.nan)), ("v", np.zeros(5)),
                                         ("support", np.ones(3, bool)), ("tau_ext", np.full(24, np.inf))])
def test_fast_rejects_bad_input_like_reference(walk, field, value):
    loop, inputs = walk
    msgs = []
    for impl in ("fast", "reference"):
        ctl = make_controller(loop.rm, loop.wcfg, loop.gait_cfg, impl)
        inp = dataclasses.replace(inputs[0], **{field: value})
        with pytest.raises(InputError) as e:
            ctl.update(inp)
        msgs.append(str(e.value))
    assert msgs[0] == msgs[1]


# ------------------------------------------------------------------ kernels against numpy / known entries
@pytest.mark.parametrize("robot", ["hexapod", "quadruped"])
@pytest.mark.parametrize("use_chain", [True, False], ids=["chain-kernel", "pinocchio-pass"])
def test_leg_kinematics_workspace_equals_legs_batch(robot, use_chain):
    """Both workspace paths against Pinocchio's frame quantities (legs_batch) at random states:
    equal to a few ulps of each quantity's scale. Not bit for bit, not even the Pinocchio pass (it
    shares Pinocchio's p, J, a, J_w, dJ_p): the reference's ``J @ dq`` products go through OpenBLAS,
    whose kernel depends on the CPU (test/ulps.py). The scale of ``dJ_theta_dq`` is per leg
    ``(1 + |w|^2) / r``, ``w = J_w dq`` the foot link's angular velocity and ``r`` the horizontal
    length of its x-axis: the size of the terms it sums (``(dg/dt) . a_dot ~ |w|^2 / r``), which
    cancel near ``r = 0``; against max(1, |dJ_theta_dq|) a leg at r = 0.003 differs by ~3700 ulps.
    Measured: <= 7 ulps of these scales over 2000 random states, and over 400 with OpenBLAS, numpy's
    SIMD and numba's target set to other CPUs (OPENBLAS_CORETYPE, NPY_DISABLE_CPU_FEATURES,
    NUMBA_CPU_NAME)."""
    rm = RobotModel(robot)
    ws = rm.leg_workspace(use_chain=use_chain)
    assert (ws.chain is not None) == use_chain      # our legs are serial chains on the base
    rng = np.random.default_rng(3)
    q0 = rm.stance_configuration()[7:]
    cols = np.array(rm.leg_joints)
    for _ in range(40):
        qj, dqj = q0 + rng.normal(0, 0.5, rm.n), rng.normal(0, 3.0, rm.n)
        ref, b = rm.legs_batch(qj, dqj), ws.update(qj, dqj)
        for k in ("p", "J", "a", "theta", "theta_dot", "J_w", "dJ_p_dq", "v_p"):
            assert_ulps_close(getattr(b, k), getattr(ref, k), err_msg=k)
        w = np.einsum("lij,lj->li", ref.J_w, dqj[cols])
        r = np.maximum(np.hypot(ref.a[:, 0], ref.a[:, 1]), math.sqrt(R2_EPS))  # below it, dJ_theta = 0 both
        assert_ulps_close(b.dJ_theta_dq, ref.dJ_theta_dq, scale=(1.0 + (w * w).sum(axis=1)) / r, err_msg="dJ_theta_dq")


def test_leg_kinematics_vertical_foot_link_zeroes_theta_row():
    """Foot-link x-axis along base z: the J_theta row, theta_dot and the drift are zero."""
    N = 1
    Jw = np.asfortranarray(np.arange(24.0).reshape(6, 4))
    rec = np.zeros(1, dtype=legs_dtype(N))
    rec["leg_j"] = np.arange(4, dtype=np.int64).reshape(1, 4)
    rec["leg_a"], rec["leg_acc"], rec["leg_J"], rec["leg_theta_dot"], rec["leg_dJ_theta"] = [0.0, 0.0, -1.0], 1.0, 7.0, 1.0, 1.0
    legs_from_frames(Jw, np.ones(4), rec)
    out = record_legs(rec)
    J, th, thd, Jwo, dJt = out.J, out.theta, out.theta_dot, out.J_w, out.dJ_theta_dq
    assert th[0] == pytest.approx(math.pi / 2) and thd[0] == 0.0 and dJt[0] == 0.0
    np.testing.assert_array_equal(J[0, 3], 0.0)
    np.testing.assert_array_equal(J[0, :3], Jw[:3])          # p = 0: v - p x w = v (exact on any IEEE machine)
    np.testing.assert_array_equal(Jwo[0], Jw[3:])


def test_symmetrize_mass_and_rotation():
    U = np.triu(np.arange(1.0, 17.0).reshape(4, 4))
    M, h = np.zeros((4, 4)), np.zeros(4)
    floating_base.symmetrize_mass(U, np.arange(4.0), M, h)
    np.testing.assert_array_equal(M, U + np.triu(U, 1).T)
    np.testing.assert_array_equal(h, np.arange(4.0))
    from legged_wbc.conventions import rotation_from_quat_xyzw
    q = np.zeros(7)
    q[3:7] = np.array([0.1, -0.3, 0.2, 0.9]) / np.linalg.norm([0.1, -0.3, 0.2, 0.9])
    R = np.zeros((3, 3))
    floating_base.rotation_from_quat(q, R)
    assert_ulps_close(R, rotation_from_quat_xyzw(q[3:7]), err_msg="R")      # compiled vs numpy arithmetic


def test_friction_cone_rows_known_entries():
    """Per foot i: rows f_x - mu f_z <= 0, -f_x - mu f_z <= 0, f_y - mu f_z <= 0, -f_y - mu f_z <= 0,
    0 <= f_z; m_theta,i = 0; base force rows -I_3."""
    N, lam0, nx = 2, 3, 3 + 8
    A_eq, C = np.zeros((6 + N, nx)), np.zeros((5 * N, nx))
    lo, up = np.full(5 * N, 5.0), np.full(5 * N, 5.0)
    friction.friction_rows(N, lam0, 0, 0.5, A_eq, C, lo, up)
    c = lam0 + 4  # foot 1
    np.testing.assert_array_equal(C[5:10, c:c + 4], [[1, 0, -0.5, 0], [-1, 0, -0.5, 0], [0, 1, -0.5, 0],
                                                     [0, -1, -0.5, 0], [0, 0, 1, 0]])
    np.testing.assert_array_equal(lo[5:10], [-INF] * 4 + [0.0])
    np.testing.assert_array_equal(up[5:9], 0.0)
    assert up[9] == 5.0                     # f_z upper bound: the contact state's, untouched
    assert A_eq[7, c + 3] == 1.0 and A_eq[6, lam0 + 3] == 1.0
    np.testing.assert_array_equal(A_eq[:3, c:c + 3], -np.eye(3))
    up[:] = 1.0
    contact.normal_force_bounds(np.array([True, False]), 700.0, 0, up)
    assert up[4] == 700.0 and up[9] == 0.0 and up[3] == 1.0


def test_floating_base_rows_known_entries():
    nv, N = 8, 2
    lam0, nx = nv, nv + 4 * N
    M = np.arange(nv * nv, dtype=float).reshape(nv, nv)
    h = np.arange(nv, dtype=float) + 1.0
    P = np.array([[1.0, 2.0, 3.0], [-4.0, 5.0, -6.0]])
    A_eq, b_eq = np.full((6 + N, nx), 9.0), np.zeros(6 + N)
    floating_base.floating_base_rows(M, h, P, lam0, A_eq, b_eq)
    np.testing.assert_array_equal(A_eq[:6, :nv], M[:6])
    np.testing.assert_array_equal(b_eq[:6], -h[:6])
    for i in range(N):
        x, y, z = P[i]
        c = lam0 + 4 * i
        # moment rows: -(r x f) = -[r]x f
        np.testing.assert_array_equal(A_eq[3:6, c:c + 3], [[0, z, -y], [-z, 0, x], [y, -x, 0]])
        f = np.array([0.3, -0.7, 1.1])
        np.testing.assert_allclose(A_eq[3:6, c:c + 3] @ f, -np.cross(P[i], f))


def test_torque_rows_and_command_torque_known_entries():
    """tau rows C = [M[6:], -J^T per leg], bounds tau_min/max - h - tau_sw; the command torque at x
    is S[M nu_dot + h - J_c^T lambda] + tau_sw and lies between the bounds of the rows."""
    rng = np.random.default_rng(0)
    N, n = 2, 8
    nv = n + 6
    lam0, nx = nv, nv + 4 * N
    M, h = rng.normal(size=(nv, nv)), rng.normal(size=nv)
    J = rng.normal(size=(N, 4, 4))
    leg_j = np.array([[4, 5, 6, 7], [0, 1, 2, 3]], dtype=np.int64)
    tmin, tmax, tsw = -np.full(n, 50.0), np.full(n, 50.0), rng.normal(size=n)
    C, lo, up = np.zeros((n, nx)), np.zeros(n), np.zeros(n)
    par = params(leg_j=leg_j, lam0=lam0, row_tau=0, tmin_f=tmin, tmax_f=tmax, tau_tol_f=np.full(n, 1e-6))
    torque.torque_rows(M, h, J, tsw, par, C, lo, up)
    np.testing.assert_array_equal(C[:, :nv], M[6:])
    for i in range(N):
        for r in range(4):
            np.testing.assert_array_equal(C[leg_j[i, r], lam0 + 4 * i:lam0 + 4 * i + 4], -J[i, :, r])
    assert_ulps_close(lo, tmin - h[6:] - tsw, err_msg="lower")           # compiled vs numpy arithmetic
    assert_ulps_close(up, tmax - h[6:] - tsw, err_msg="upper")
    x = rng.normal(size=nx)
    tau_wbc, tau = np.zeros(n), np.zeros(n)
    ok = torque.command_torque(M, h, J, x, tsw, par, tau_wbc, tau)
    expect = M[6:] @ x[:nv] + h[6:]
    for i in range(N):
        expect[leg_j[i]] -= J[i].T @ x[lam0 + 4 * i:lam0 + 4 * i + 4]
    np.testing.assert_allclose(tau_wbc, expect, rtol=1e-13, atol=1e-12)
    np.testing.assert_allclose(tau, expect + tsw, rtol=1e-13, atol=1e-12)
    np.testing.assert_allclose(C @ x, tau - h[6:] - tsw, atol=1e-12)   # the rows are the torque
    assert ok == bool(np.all(np.abs(tau) <= 50.0 + 1e-6))
    tmax_small = np.full(n, 1e-3)
    small = par._replace(tmin_f=-tmax_small, tmax_f=tmax_small, tau_tol_f=np.zeros(n))
    assert not torque.command_torque(M, h, J, x, tsw, small, tau_wbc, tau)


def test_cbf_rows_known_entries():
    N = 3
    J = np.zeros((N, 4, 4))
    J[:, 3] = [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]
    leg_v = np.array([[6, 7, 8, 9], [10, 11, 12, 13], [14, 15, 16, 17]], dtype=np.int64)
    th, thd, dJt = np.array([0.1, 0.1, 0.1]), np.array([0.2, 0.2, 0.2]), np.array([0.3, 0.3, 0.3])
    C, lo, up = np.zeros((N, 18)), np.zeros(N), np.zeros(N)
    sup = np.array([True, False, True])
    legs = leg_batch(J=J, theta=th, theta_dot=thd, dJ_theta_dq=dJt)
    on = params(leg_v=leg_v, row_cbf=0, cbf_on=True, kp_b=100.0, kd_b=10.0, th_lo=-0.3, th_hi=0.3,
                cbf_shift=np.zeros((N, 2)))
    cbf.cbf_rows(sup, legs, on, C, lo, up)
    for i in range(N):
        np.testing.assert_array_equal(C[i, leg_v[i]], J[i, 3])
    # lower: -(k_p (theta - theta_lo) + k_d theta_dot + Jdot qdot) = -(40 + 2 + 0.3)
    assert lo[0] == pytest.approx(-42.3) and up[0] == pytest.approx(20.0 - 2.0 - 0.3)
    assert lo[1] == -INF and up[1] == INF          # swing leg: loose
    shifted = on._replace(cbf_shift=np.array([[0.0, 0.0], [0.0, 0.0], [0.02, 0.05]]))   # tau_ext boundary moves
    cbf.cbf_rows(sup, legs, shifted, C, lo, up)
    assert lo[2] == pytest.approx(-(100.0 * 0.38 + 2.0 + 0.3)) and up[2] == pytest.approx(100.0 * 0.15 - 2.3)
    assert lo[0] == pytest.approx(-42.3)
    cbf.cbf_rows(sup, legs, on._replace(cbf_on=False), C, lo, up)
    assert np.all(lo == -INF) and np.all(up == INF)  # damping / none: loose everywhere
    act = np.zeros(N, dtype=bool)
    x = np.zeros(18)
    cbf.cbf_rows(sup, legs, on, C, lo, up)
    x[6] = up[0]                                   # leg 0 exactly on its upper bound
    cbf.cbf_active(sup, C, lo, up, x, 0, act)
    np.testing.assert_array_equal(act, [True, False, False])


def test_barrier_legs_support_and_late_legs():
    """The legs with a CBF row: the support set, and the landing legs out of it after a planned swing
    start: in the swing-down, or late (nominal phase back at support, ``late_descent`` > 0); not a
    leg lifting off, nor one never planned (held). Compiled == numpy."""
    from legged_wbc.gait import SUPPORT, SWING_DOWN, SWING_UP

    support = np.array([True, False, False, False, False, True])
    phases = np.array([SUPPORT, SUPPORT, SWING_DOWN, SWING_UP, SUPPORT, SWING_DOWN], dtype=np.int64)
    planned = np.array([1, 1, 1, 1, 0, 0], dtype=np.uint8)
    out = np.zeros(6, dtype=np.uint8)
    every = np.zeros(6, dtype=np.int64)       # no leg without the foot pitch joint
    for late_v, expect in ((0.4, [1, 1, 1, 0, 0, 1]), (0.0, [1, 0, 1, 0, 0, 1])):
        cbf.barrier_legs(support, phases, planned, late_v, every, out)
        np.testing.assert_array_equal(out, expect)
        ref = cbf.barrier_legs_reference(support, phases, planned, late_v)
        np.testing.assert_array_equal(ref, np.array(expect, bool))
    # a leg without the foot pitch joint (a point-foot leg) never carries a row
    pitch = np.array([0, 1, 1, 1, 1, 1], dtype=np.int64)
    cbf.barrier_legs(support, phases, planned, 0.4, 1 - pitch, out)
    np.testing.assert_array_equal(out, [0, 1, 1, 0, 0, 1])
    np.testing.assert_array_equal(cbf.barrier_legs_reference(support, phases, planned, 0.4, pitch),
                                  np.array([0, 1, 1, 0, 0, 1], bool))


def test_task_cost_known_entries():
    """Identity leg Jacobians: leg blocks diag(W_i), gradient -W_i b_i; body rows w_body I, force
    weights on the lambda diagonal, slack weight, then + hessian_reg * max diag (of the rest)."""
    N, nv = 2, 14
    lam0, nx = nv, nv + 4 * N + N
    J = np.repeat(np.eye(4)[None], N, axis=0)
    W = np.array([[1.0, 2.0, 3.0, 4.0], [0.5, 0.5, 0.5, 0.25]])
    b = np.arange(8.0).reshape(N, 4)
    acc = np.arange(6.0)
    leg_v = np.array([[6, 7, 8, 9], [10, 11, 12, 13]], dtype=np.int64)
    lam_diag = np.tile([1e-5, 1e-5, 1e-6, 1e-5], N)
    H, g = np.full((nx, nx), 3.0), np.full(nx, 3.0)
    tasks.task_cost(J, W, b, acc, params(w_body=2.0, lam_diag_f=lam_diag, n_slack=N, slack_weight=1e6, hessian_reg=1e-9,
                                         leg_v=leg_v, lam0=lam0), H, g)
    reg = 1e-9 * 4.0                                   # max diag without the slacks: W = 4
    expect = np.zeros((nx, nx))
    expect[:6, :6] = 2.0 * np.eye(6)
    for i in range(N):
        expect[np.ix_(leg_v[i], leg_v[i])] = np.diag(W[i])
    expect[lam0:lam0 + 8, lam0:lam0 + 8] = np.diag(lam_diag)
    expect[lam0 + 8:, lam0 + 8:] = 1e6 * np.eye(N)
    np.testing.assert_allclose(H, expect + reg * np.eye(nx), rtol=1e-15, atol=0)
    expect_g = np.zeros(nx)
    expect_g[:6] = -2.0 * acc
    for i in range(N):
        expect_g[leg_v[i]] = -W[i] * b[i]
    assert_ulps_close(g, expect_g, err_msg="g")                          # compiled vs numpy arithmetic


def test_residuals_equal_qpproblem(rm):
    rng = np.random.default_rng(1)
    p = QpProblem(10, 3, 6)
    p.A_eq[:], p.b_eq[:], p.C[:] = rng.normal(size=(3, 10)), rng.normal(size=3) * 5, rng.normal(size=(6, 10))
    p.l[:] = [-INF, -1.0, -2.0, -INF, -0.1, -3.0]
    p.u[:] = [1.0, INF, 2.0, INF, 0.1, 30.0]
    for _ in range(20):
        x = rng.normal(size=10)
        assert K.residuals(p.A_eq, p.b_eq, p.C, p.l, p.u, x) == pytest.approx(p.residuals(x), rel=1e-12, abs=1e-15)


def test_references_and_gait_equal_numpy(rm):
    cfg = load_wbc_config()
    gcfg = GaitConfig.from_dict(rm.cfg.gait)
    gen = BodyReferenceGenerator(cfg, gcfg.start_time)
    gen.reset(np.array([0.1, -0.2, 0.3]))
    sch = GaitScheduler(gcfg, rm.cfg.leg_names)
    rng = np.random.default_rng(2)
    p, v, a, acc, e = (np.zeros(3) for _ in range(5))
    acc = np.zeros(6)
    R = np.zeros((3, 3))
    ph, pr, cy = np.zeros(rm.n_legs, np.int64), np.zeros(rm.n_legs), np.zeros(rm.n_legs, np.int64)
    for t in np.concatenate([np.linspace(0.0, 12.0, 400), [gcfg.start_time, 6.0]]):
        ref = gen(float(t))
        tasks.body_reference(float(t), gen.p0, params(stand_up_start=cfg.stand_up_start,
                                                      stand_up_duration=cfg.stand_up_duration,
                                                      stand_height=cfg.stand_height, gait_start=gen.gait_start,
                                                      velocity_ramp_end=cfg.velocity_ramp_end,
                                                      forward_velocity=cfg.forward_velocity), p, v, a)
        np.testing.assert_allclose(np.concatenate([p, v, a]), np.concatenate([ref.p, ref.v, ref.a]), rtol=1e-14,
                                   atol=1e-15)
        q = np.zeros(7 + rm.n)
        q[:3] = rng.normal(size=3)
        q[3:7] = rng.normal(size=4)
        q[3:7] /= np.linalg.norm(q[3:7])
        vel = rng.normal(size=6 + rm.n)
        floating_base.rotation_from_quat(q, R)
        tasks.body_task(p, v, a, q, R, vel, params(kp_pos=cfg._kp_pos, kd_pos=cfg._kd_pos, kp_rot=cfg._kp_rot,
                                                   kd_rot=cfg._kd_rot), acc, e)
        expect = body_task(cfg, ref, q[:3], R, vel[:3], vel[3:6])
        np.testing.assert_allclose(acc, expect, rtol=1e-12, atol=1e-10)

        np.testing.assert_allclose(e, 0.5 * vee(ref.R.T @ R - R.T @ ref.R), rtol=1e-14, atol=1e-16)
        gait_state(float(t), gcfg.start_time, gcfg.stop_time, gcfg.period, sch.swing_duration,
                     sch.offset.astype(float), sch.group.astype(np.int64), ph, pr, cy)
        eph, epr, ecy = sch.state(float(t))
        np.testing.assert_array_equal(ph, eph)                             # decisions: equal
        assert_ulps_close(pr, epr, err_msg=f"progress t={t!r}")           # compiled vs numpy arithmetic
        np.testing.assert_array_equal(cy, ecy)


def test_swing_reference_equals_planner():
    rng = np.random.default_rng(4)
    sp = SwingPlanner(3)
    for i in range(3):
        sp.begin(i, rng.normal(size=3), rng.normal(size=3), 0.3 + 0.1 * i, v_start=rng.normal(size=3),
                 v_end=rng.normal(size=3))
    P, V, A = np.zeros(3), np.zeros(3), np.zeros(3)
    for s in np.linspace(-0.1, 1.1, 25):
        eP, eV, eA = sp(np.arange(3), np.full(3, s), 0.08)
        for i in range(3):
            swing.swing_reference(sp.start[i], sp.target[i], sp.v_start[i], sp.v_end[i], sp.duration[i], s, 0.08, 0.0, P, V, A)
            np.testing.assert_allclose(np.concatenate([P, V, A]), np.concatenate([eP[i], eV[i], eA[i]]),
                                       rtol=1e-13, atol=1e-13)


def test_solve4_and_null_space_compensation():
    rng = np.random.default_rng(5)
    x = np.zeros(4)
    for _ in range(20):
        M = rng.normal(size=(4, 4)) + 4 * np.eye(4)
        b = rng.normal(size=4)
        swing.solve4(M, b, x, np.zeros((4, 5)))
        np.testing.assert_allclose(x, np.linalg.solve(M, b), rtol=1e-12, atol=1e-13)
    N = 3
    J = rng.normal(size=(N, 4, 4))
    leg_j = np.arange(12, dtype=np.int64).reshape(N, 4)
    tau_ext = rng.normal(size=12) * 100
    out = np.full(12, 9.0)
    sup = np.array([True, False, True])
    compensation.null_space_compensation(sup, J, leg_j, tau_ext, 50.0, out, np.zeros(4))
    n = null_vectors(J[:, :3], J[:, 3])
    for i in range(N):
        d = np.clip(n[i] @ tau_ext[leg_j[i]], -50, 50) if sup[i] else 0.0
        np.testing.assert_allclose(out[leg_j[i]], n[i] * d, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(J[i, :3] @ n[i], 0.0, atol=1e-12)   # in J_p's null space


def test_start_swings_plans_only_new_swings():
    """A leg leaving nominal support in a new gait cycle gets a plan (Raibert-offset target at the
    touchdown height, ground-speed end velocity, zero vertical end velocities); others are left."""
    N = 3
    phases = np.array([0, 1, 2], dtype=np.int64)          # support, swing-up, swing-down
    cycles = np.array([4, 4, 4], dtype=np.int64)
    swing_cycle = np.array([3, 3, 4], dtype=np.int64)     # leg 2 already planned in cycle 4
    stance = np.arange(9.0).reshape(N, 3)
    R = np.eye(3)
    v_ref = np.array([0.1, 0.2, 0.3])
    p, v_p = np.full((N, 3), 0.5), np.full((N, 3), -0.5)
    start, target, vs, ve = (np.zeros((N, 3)) for _ in range(4))
    dur, planned = np.zeros(N), np.zeros(N, dtype=bool)
    par = params(stance_p=stance, z_touchdown=-0.4, raibert_gain=0.5, support_duration=0.6, swing_duration=0.4)
    n = swing.start_swings(phases, cycles, leg_batch(p=p, v_p=v_p), R, v_ref, par,
                           swing.SwingPlan(swing_cycle, start, target, vs, ve, dur, planned, np.zeros(N), np.zeros(N),
                                           np.zeros(N)))
    assert n == 1 and planned.tolist() == [False, True, False] and swing_cycle.tolist() == [3, 4, 4]
    np.testing.assert_allclose(target[1], [3.0 + 0.5 * 0.1 * 0.6, 4.0 + 0.5 * 0.2 * 0.6, -0.4])
    np.testing.assert_array_equal(start[1], p[1])
    np.testing.assert_array_equal(vs[1], [-0.5, -0.5, 0.0])
    np.testing.assert_array_equal(ve[1], [-0.1, -0.2, 0.0])
    assert dur[1] == 0.4 and dur[0] == 0.0 and np.all(target[[0, 2]] == 0.0)


# ------------------------------------------------------------------ what each option changes
# One recorded walking state (support and swing legs, the null-space push on a support leg), one
# cycle of a fresh controller with the default configuration and one with the option switched;
# the QP blocks and torques the option must change, changed as its definition says, the rest equal.

def option_state(walk):
    """A recorded input with legs in nominal swing and in support, the push on (3.6 s on)."""
    loop, inputs = walk
    return next(inp for inp in inputs if inp.t >= 3.75 and (~inp.support).sum() >= 2 and inp.support.sum() >= 3)


def one_cycle(loop, inp, **over):
    ctl = WholeBodyController(loop.rm, dataclasses.replace(loop.wcfg, **over), loop.gait_cfg)
    ctl.reset(loop.q0)
    return ctl, ctl.update(inp)


def assert_same_blocks(a, b, but=()):
    for k in ("H", "g", "A_eq", "b_eq", "C", "l", "u"):
        if k not in but:
            np.testing.assert_array_equal(getattr(a.problem, k), getattr(b.problem, k), err_msg=k)


def test_option_jdot_fd_changes_only_the_pitch_drift(walk):
    """``jdot_mode: fd``: J_theta_dot q_dot by the central difference, close to the exact one; it
    moves the CBF bounds and the pitch-row targets by exactly that difference, nothing else."""
    loop, _ = walk
    inp = option_state(walk)
    ex, _ = one_cycle(loop, inp)
    fd, _ = one_cycle(loop, inp, jdot_mode="fd")
    le, lf = ex.last_legs, fd.last_legs
    for k in ("p", "J", "theta", "theta_dot", "dJ_p_dq", "v_p"):
        np.testing.assert_array_equal(getattr(lf, k), getattr(le, k), err_msg=k)
    diff = lf.dJ_theta_dq - le.dJ_theta_dq
    assert np.abs(diff).max() > 0                                        # a different computation
    np.testing.assert_allclose(lf.dJ_theta_dq, le.dJ_theta_dq, rtol=1e-5, atol=1e-6)
    rc, N = slice(ex.row_cbf, ex.row_cbf + ex.N), ex.N
    sup = inp.support
    np.testing.assert_allclose((fd.problem.u[rc] - ex.problem.u[rc])[sup], -diff[sup], rtol=0, atol=1e-9)
    np.testing.assert_allclose((fd.problem.l[rc] - ex.problem.l[rc])[sup], -diff[sup], rtol=0, atol=1e-9)
    dg = fd.problem.g - ex.problem.g
    for i in range(N):                                  # g_i = -J_i^T W_i b_i, b_i[3] = ... - dJ_theta
        np.testing.assert_allclose(dg[ex.leg_v[i]], le.J[i, 3] * ex.cfg.w_pitch * diff[i], rtol=0, atol=1e-9)
    np.testing.assert_array_equal(np.delete(dg, np.array(ex.leg_v).reshape(-1)), 0.0)
    assert_same_blocks(ex, fd, but=("g", "l", "u"))
    rows = np.r_[0:ex.row_cbf]
    np.testing.assert_array_equal(fd.problem.l[rows], ex.problem.l[rows])
    np.testing.assert_array_equal(fd.problem.u[rows], ex.problem.u[rows])
    # a leg at rest has no drift in the paper's difference (|q_dot_i| <= 1e-6)
    v = inp.v.copy()
    v[ex.leg_v[0]] = 0.0
    fd.update(ControllerInput(t=inp.t + 0.002, q=inp.q, v=v, support=inp.support, tau_ext=inp.tau_ext))
    assert fd.last_legs.dJ_theta_dq[0] == 0.0


INFEASIBLE_BARRIER = dict(torque_limit_mode="realistic", theta_min=-0.5, theta_max=0.1, cbf_margin=0.2, kp_b=1e6)
"""Barrier bounds [-0.3, -0.1] rad with k_p,b = 1e6 1/s^2: a support leg near theta = 0 is asked for
~-1e5 rad/s^2 of relative-pitch acceleration, far beyond what its drives give (the hard QP is infeasible)."""


def test_option_cbf_slack_adds_one_penalized_slack_per_barrier_row(walk):
    """``cbf_slack``: N more variables weighted ``cbf_slack_weight`` in the cost (the Hessian's
    regularization as without them). A feasible barrier is solved hard: the slack columns are 0,
    the slacks exactly 0, the command the one without the option. An infeasible one is solved again
    with the slacks, each in its CBF row only (coefficient 1); every other row and bound as without."""
    loop, _ = walk
    inp = option_state(walk)
    base, ob = one_cycle(loop, inp)
    sl, osl = one_cycle(loop, inp, cbf_slack=True)
    n0, N, pb, ps = base.nx, base.N, base.problem, sl.problem
    assert sl.nx == n0 + N and ps.C.shape == (pb.C.shape[0], n0 + N)
    np.testing.assert_array_equal(ps.C[:, n0:], 0.0)               # the hard barrier
    np.testing.assert_array_equal(ps.A_eq[:, n0:], 0.0)
    np.testing.assert_array_equal(ps.C[:, :n0], pb.C)
    np.testing.assert_array_equal(ps.A_eq[:, :n0], pb.A_eq)
    for k in ("l", "u", "b_eq"):
        np.testing.assert_array_equal(getattr(ps, k), getattr(pb, k), err_msg=k)
    reg = pb.H[0, 0] - base.cfg.w_body                 # hessian_reg * max diag, on every diagonal entry
    np.testing.assert_allclose(np.diag(ps.H)[n0:], sl.cfg.cbf_slack_weight + reg, rtol=1e-15)
    np.testing.assert_array_equal(ps.H[n0:, :n0], 0.0)
    np.testing.assert_array_equal(ps.H[:n0, :n0], pb.H)
    np.testing.assert_array_equal(ps.g[n0:], 0.0)
    assert ob.diag.qp_accepted and osl.diag.qp_accepted and ob.diag.cbf_active.any()
    np.testing.assert_array_equal(sl.last_x[n0:], 0.0)     # feasible barrier: the slacks exactly 0
    np.testing.assert_array_equal(osl.diag.cbf_slack, 0.0)
    np.testing.assert_allclose(osl.tau, ob.tau, rtol=0, atol=1e-9 * np.abs(ob.tau).max())
    # infeasible: hard fails, the slacks take it
    hard, oh = one_cycle(loop, inp, **INFEASIBLE_BARRIER)
    soft, os_ = one_cycle(loop, inp, cbf_slack=True, **INFEASIBLE_BARRIER)
    assert not oh.diag.qp_accepted and os_.diag.qp_accepted
    ph = hard.problem
    expect = np.zeros((ph.C.shape[0], N))
    expect[hard.row_cbf:hard.row_cbf + N] = np.eye(N)
    np.testing.assert_array_equal(soft.problem.C[:, n0:], expect)
    s = os_.diag.cbf_slack
    rows = soft.problem.u[soft.row_cbf:soft.row_cbf + N] < INF      # support and landing legs (barrier_legs)
    assert rows[inp.support].all()
    assert np.all(s[~rows] == 0.0) and np.all(s[rows] < -1e3)     # pushed below hi: s < 0


def test_option_null_space_compensation_cancels_tau_ext_along_support_null_spaces(walk):
    """``null_space_compensation``: per support leg ``n_i clip(n_i . tau_ext_i)`` added to the
    command and taken out of the torque-row bounds; swing legs and the rest of the QP unchanged."""
    loop, _ = walk
    inp = option_state(walk)
    off, o0 = one_cycle(loop, inp)
    on, o1 = one_cycle(loop, inp, null_space_compensation=True)
    np.testing.assert_array_equal(o0.diag.tau_comp, 0.0)
    lb, lim = on.last_legs, on.cfg.compensation_limit
    n = null_vectors(lb.J[:, :3], lb.J[:, 3])
    expect = np.zeros(on.n)
    for i in range(on.N):
        cols = on.leg_j[i]
        if inp.support[i]:
            expect[cols] = n[i] * np.clip(n[i] @ inp.tau_ext[cols], -lim, lim)
    assert np.abs(expect).max() > 1.0                    # the push is on a support leg
    np.testing.assert_allclose(o1.diag.tau_comp, expect, rtol=1e-12, atol=1e-12)
    rt = slice(on.row_tau, on.row_tau + on.n)
    np.testing.assert_allclose(on.problem.u[rt], off.problem.u[rt] - expect, rtol=0, atol=1e-9)
    np.testing.assert_allclose(on.problem.l[rt], off.problem.l[rt] - expect, rtol=0, atol=1e-9)
    assert_same_blocks(on, off, but=("l", "u"))
    assert o1.diag.qp_accepted
    np.testing.assert_allclose(o1.tau, o1.diag.tau_wbc + o1.diag.tau_sw + o1.diag.tau_comp, rtol=0, atol=1e-9)


def test_option_consistent_support_foot_acceleration(walk):
    """``support_foot_acceleration: consistent``: the support-foot rows target the body-relative
    acceleration of a world-fixed foot, ``-(v_dot_B + w_dot_B x p) - w_B x v_p``; swing legs and
    everything but the cost's linear term unchanged."""
    loop, _ = walk
    inp = option_state(walk)
    zero, _ = one_cycle(loop, inp)
    cons, _ = one_cycle(loop, inp, support_foot_acceleration="consistent")
    lb, acc, w = cons.last_legs, cons._acc_body, inp.v[3:6]
    dg = cons.problem.g - zero.problem.g
    for i in range(cons.N):
        if inp.support[i]:
            a_rel = -(acc[:3] + np.cross(acc[3:], lb.p[i])) - np.cross(w, lb.v_p[i])
            np.testing.assert_allclose(dg[cons.leg_v[i]], -lb.J[i, :3].T @ (cons.cfg.w_support * a_rel),
                                       rtol=1e-9, atol=1e-9)
            assert np.abs(a_rel).max() > 1e-3
        else:
            np.testing.assert_array_equal(dg[cons.leg_v[i]], 0.0)
    np.testing.assert_array_equal(dg[:6], 0.0)
    assert_same_blocks(cons, zero, but=("g",))


def test_option_realistic_torque_limits(walk):
    """``torque_limit_mode: realistic``: the torque rows are bounded by the drives' torque-speed
    envelope at the estimated joint velocity (peak = URDF effort) instead of +-tau_limit_paper,
    and the accepted command respects them."""
    loop, _ = walk
    inp = option_state(walk)
    paper, _ = one_cycle(loop, inp)
    real, out = one_cycle(loop, inp, torque_limit_mode="realistic")
    rm = loop.rm
    eff = rm.effort
    assert np.all(eff > 0) and np.all(eff < paper.cfg.tau_limit_paper)
    lo, hi = real.tau_bounds()
    w = inp.v[6:]
    assert np.abs(w).max() > 0.05                       # the envelope differs from +-effort here
    slope = rm.stall_torque / rm.no_load_speed
    np.testing.assert_allclose(hi, np.clip(rm.stall_torque - slope * w, 0, eff), rtol=1e-15, atol=1e-12)
    np.testing.assert_allclose(lo, -np.clip(rm.stall_torque + slope * w, 0, eff), rtol=1e-15, atol=1e-12)
    assert np.any(hi < eff) and np.any(lo > -eff)
    rt = slice(real.row_tau, real.row_tau + real.n)
    shift = real._h[6:] + real._tau_sw_total
    np.testing.assert_allclose(real.problem.u[rt], hi - shift, rtol=0, atol=1e-9)
    np.testing.assert_allclose(real.problem.l[rt], lo - shift, rtol=0, atol=1e-9)
    np.testing.assert_allclose(paper.problem.u[rt], paper.cfg.tau_limit_paper - shift, rtol=0, atol=1e-9)
    assert_same_blocks(real, paper, but=("l", "u"))
    assert out.diag.qp_accepted and np.all(out.tau <= hi * (1 + 1e-6) + 1e-6) and np.all(out.tau >= lo * (1 + 1e-6) - 1e-6)


def test_option_swing_pitch_recenter_off(walk):
    """``swing_pitch_recenter: false``: swing legs' pitch rows target zero pitch acceleration
    instead of the PD back to the nominal pitch; support legs unchanged."""
    loop, _ = walk
    inp = option_state(walk)
    rec, _ = one_cycle(loop, inp)
    off, _ = one_cycle(loop, inp, swing_pitch_recenter=False)
    lb, c = rec.last_legs, rec.cfg
    dg = off.problem.g - rec.problem.g
    for i in range(rec.N):
        if inp.support[i]:
            np.testing.assert_array_equal(dg[rec.leg_v[i]], 0.0)
        else:                                   # g_i = -J_i^T W_i b_i: b_i[3] loses the PD
            pd = c.kp_swing_pitch * (rec.theta_nominal[i] - lb.theta[i]) - c.kd_swing_pitch * lb.theta_dot[i]
            assert abs(pd) > 1e-3
            np.testing.assert_allclose(dg[rec.leg_v[i]], lb.J[i, 3] * c.w_pitch * pd, rtol=1e-9, atol=1e-9)
    assert_same_blocks(off, rec, but=("g",))


def test_option_swing_pitch_projection_off(walk):
    """``swing_pitch_projection: false``: the swing PD torque is ``J_p^T F`` as it is; with the
    projection (default) it differs by a multiple of ``J_theta`` and no longer accelerates theta
    through the leg's inertia block (``J_theta M_ll^-1 tau_sw = 0``)."""
    loop, _ = walk
    inp = option_state(walk)
    proj, op = one_cycle(loop, inp)
    raw, orw = one_cycle(loop, inp, swing_pitch_projection=False)
    lb, M = proj.last_legs, proj._M
    for i in range(proj.N):
        cols, vcols = proj.leg_j[i], proj.leg_v[i]
        tp, tr = op.diag.tau_sw[cols], orw.diag.tau_sw[cols]
        if inp.support[i]:
            np.testing.assert_array_equal(tp, 0.0)
            np.testing.assert_array_equal(tr, 0.0)
            continue
        Jt = lb.J[i, 3]
        Minv_Jt = np.linalg.solve(M[np.ix_(vcols, vcols)], Jt)
        assert abs(Minv_Jt @ tr) > 1e-6 * np.abs(Minv_Jt).max() * np.abs(tr).max()   # raw torque moves theta
        assert abs(Minv_Jt @ tp) <= 1e-9 * np.abs(Minv_Jt).max() * np.abs(tr).max()  # projected: does not
        coef = (Minv_Jt @ tr) / (Jt @ Minv_Jt)
        np.testing.assert_allclose(tp, tr - coef * Jt, rtol=1e-9, atol=1e-9)
    rt = slice(proj.row_tau, proj.row_tau + proj.n)
    np.testing.assert_allclose(raw.problem.u[rt] - proj.problem.u[rt], op.diag.tau_sw - orw.diag.tau_sw,
                               rtol=0, atol=1e-9)
    assert_same_blocks(raw, proj, but=("l", "u"))
