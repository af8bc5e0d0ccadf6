"""The QP as DAQP solves it: its least-distance form, built from the blocks (compiled).

DAQP turns a QP ``min 1/2 x^T H x + g^T x, bl <= A x <= bu`` into a least-distance problem (LDP)
through the Cholesky factor ``H = R^T R`` and ``y = R x``: ``min 1/2 ||y||^2 + (R^-T g)^T y`` over
the rows ``A R^-1``. For a dense ``H`` it does so in O(n^3 + m n^2) on every update (most of its
time here). Our ``H`` is block diagonal (base and force variables: diagonal; each leg's joint
accelerations: a 4x4 block), so the LDP is formed here, from the blocks the QP is made of, in
O(m n), and DAQP is given ``H = I``. Same problem, fewer variables and rows: the ``m_theta`` of
every foot is fixed at 0 by its equality row, so it is not a variable of the LDP (its cost and
rows vanish); the forces ``f_x, f_y, f_z`` of the feet are the first variables of ``y`` and
their bounds are DAQP's simple bounds: ``0 <= f_z <= f_z,max`` of a support foot, and for a foot
held at ``f_z = 0`` (outside the support set) all three forces at 0 (what its friction pyramid
implies) with its pyramid rows made loose. General rows, in this order: the 6 floating-base
equalities, the friction pyramids (4 per foot), the CBF rows (N), the torque rows (n), the
joint-limit rows (``joint_limit_barrier``: n) and the leg-collision rows (``leg_collision_barrier``: k) last, so that the problem without them is a prefix (the controller solves that one first, see
``WholeBodyController._solve_ldp``).

The kernels read the cycle's quantities and settings from the controller's workspace record
``w`` (:func:`wbc_controller.kernels.workspace_dtype`; fields by name) and the legs' kinematics as
:class:`legged_wbc.kinematics.LegBatch`. The specification is the stacked QP
(:func:`wbc_controller.kernels.qp_blocks`, the oracle's numpy blocks) transformed as DAQP would;
``test/test_fast_controller.py`` compares them.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from legged_wbc.jit import announce_compiles

from .blocks.cbf import cbf_bounds
from .blocks.joint_limits import joint_limit_bounds
from .blocks.torque import command_torque
from .qp import INF

announce_compiles(__name__)          # one line on stderr if this process has to compile a kernel

LDP_ZERO_TOL = 1e-11    # DAQP's zero_tol: a pivot <= zero_tol * (largest) means H is taken as singular


@njit(cache=True)
def all_finite(x):
    for k in range(x.shape[0]):
        if not math.isfinite(x[k]):
            return False
    return True


@njit(cache=True)
def _leg_cost(J, W, i, r, c):
    """Entry ``(r, c)`` of leg ``i``'s cost block ``J_i^T W_i J_i`` (as :func:`.blocks.tasks.task_cost` sums it)."""
    s = 0.0
    for k in range(4):
        s += J[i, k, r] * W[i, k] * J[i, k, c]
    return s


@njit(cache=True)
def _ldp_row_nu(Ay, a, M, row, nf, leg_v, dinv, Rinv):
    """Row ``a`` of the LDP on the ``nu_dot`` part of ``y`` from the QP row's coefficients
    ``M[row, :]`` on ``nu_dot`` (base columns: scaled; leg columns: times the block's ``R^-1``)."""
    for c in range(6):
        Ay[a, nf + c] = M[row, c] * dinv[nf + c]
    for i in range(leg_v.shape[0]):
        for r in range(leg_v.shape[1]):
            s = 0.0
            for k in range(r + 1):
                s += M[row, leg_v[i, k]] * Rinv[i, k, r]
            Ay[a, nf + leg_v[i, r]] = s


@njit(cache=True)
def ldp_direct(support, legs, w):
    """The cycle's QP (the blocks :func:`wbc_controller.kernels.qp_blocks` fills, from the same
    quantities) in DAQP's least-distance form, in ``y = R z`` with ``z = [f_1 .. f_N (3 each),
    nu_dot, slacks]``: the linear term ``c = R^-T g_z`` (``w.c``), the general rows ``Ay = A_z R^-1``
    (``w.A``, in the order above; entries that are structurally zero are never written, ``Ay``
    starts at zero) with their bounds ``w.bl[3N:]``, ``w.bu[3N:]`` (unscaled), the simple bounds
    of the forces ``w.bl[:3N]``, ``w.bu[:3N]`` (in ``y``), and the factors :func:`qp_from_ldp` maps
    ``y`` back with: ``w.dinv`` (the ``1/sqrt(H_jj)`` of the diagonal variables, by ``y`` index)
    and ``w.Rinv`` (N, k, k; the inverse upper Cholesky factor of each leg block). Every joint
    belongs to a leg (``w.leg_j`` covers 0..n-1).

    Returns False (nothing usable filled) if a pivot of the factorization is <= ``LDP_ZERO_TOL``
    times the largest diagonal entry of ``H``: then the QP is solved as it is (DAQP regularizes)."""
    ok, reg, tol = _ldp_diagonal(legs.J, w)
    if not ok or not _ldp_leg_factors(legs.J, reg, tol, w):
        return False
    _ldp_base_and_friction_rows(support, legs.p, w)
    _ldp_torque_and_cbf_rows(legs, w)
    if w.n_jl > 0:
        _ldp_joint_limit_rows(w)
    if w.n_lc > 0:
        _ldp_collision_rows(w)
    return True


@njit(cache=True)
def _ldp_diagonal(J, w):
    """Regularization ``hessian_reg * max diag(H)`` (as ``task_cost``) and the diagonal variables:
    forces (no linear term), base (body task), slacks. Returns ``(ok, reg, tol)``."""
    W, lam_diag, dinv, c = w.W, w.lam_diag_f, w.dinv, w.c
    w_body, n_slack, slack_weight = w.w_body, w.n_slack, w.slack_weight
    N, nv = J.shape[0], w.M.shape[0]
    nf = 3 * N
    dmax = w_body
    for i in range(N):
        for r in range(J.shape[2]):
            dmax = max(dmax, _leg_cost(J, W, i, r, r))
    for k in range(lam_diag.shape[0]):
        dmax = max(dmax, lam_diag[k])
    reg = w.hessian_reg * dmax                 # the slacks' weight left out (as task_cost)
    tol = LDP_ZERO_TOL * (dmax + reg)
    for i in range(N):
        for k in range(3):
            hk = lam_diag[4 * i + k] + reg
            if not hk > tol:
                return False, reg, tol
            dinv[3 * i + k] = 1.0 / math.sqrt(hk)
            c[3 * i + k] = 0.0
    hk = w_body + reg
    if not hk > tol:
        return False, reg, tol
    d = math.sqrt(hk)
    for r in range(6):
        dinv[nf + r] = 1.0 / d
        c[nf + r] = (-w_body * w.acc_body[r]) / d
    for i in range(n_slack):
        hk = slack_weight + reg
        if not hk > tol:
            return False, reg, tol
        dinv[nf + nv + i] = 1.0 / math.sqrt(hk)
        c[nf + nv + i] = 0.0
    return True, reg, tol


@njit(cache=True)
def _ldp_leg_factors(J, reg, tol, w):
    """Leg blocks ``J^T W J + reg I``: upper Cholesky factor ``R`` (in ``w.Rinv[i]``), inverted in
    place, and ``c = R^-T g`` on the block (``g = -J^T W b``). False if a pivot is <= ``tol``."""
    W, b, Rinv, c, leg_v = w.W, w.b, w.Rinv, w.c, w.leg_v
    N, K = J.shape[0], J.shape[2]          # K joints per leg; J has the 4 task rows [p; theta]
    nf = 3 * N
    for i in range(N):
        for r in range(K):
            for k in range(K):
                Rinv[i, r, k] = 0.0
        for r in range(K):
            s = _leg_cost(J, W, i, r, r) + reg
            for k in range(r):
                s -= Rinv[i, k, r] * Rinv[i, k, r]
            if not s > tol:
                return False
            d = math.sqrt(s)
            Rinv[i, r, r] = d
            for k in range(r + 1, K):
                s = _leg_cost(J, W, i, r, k)
                for m in range(r):
                    s -= Rinv[i, m, r] * Rinv[i, m, k]
                Rinv[i, r, k] = s / d
        for k in range(K - 1, -1, -1):
            Rinv[i, k, k] = 1.0 / Rinv[i, k, k]
            for r in range(k - 1, -1, -1):
                s = 0.0
                for m in range(r + 1, k + 1):
                    s += Rinv[i, r, m] * Rinv[i, m, k]
                Rinv[i, r, k] = -s / Rinv[i, r, r]
        for r in range(K):
            s = 0.0
            for k in range(r + 1):
                gk = 0.0
                for m in range(4):
                    gk += J[i, m, k] * W[i, m] * b[i, m]
                s += Rinv[i, k, r] * -gk
            c[nf + leg_v[i, r]] = s
    return True


@njit(cache=True)
def _ldp_base_and_friction_rows(support, P, w):
    """Floating-base rows ``M_B nu_dot - [sum f; sum p x f] = -h_B``, the friction pyramids and
    the forces' simple bounds (a foot held at ``f_z = 0``: no force, its pyramid rows loose)."""
    Ay, ubu, ubl, dinv, M, h = w.A, w.bu, w.bl, w.dinv, w.M, w.h
    fz_max, leg_v, Rinv = w.fz_max, w.leg_v, w.Rinv
    N = P.shape[0]
    ms = nf = 3 * N
    for r in range(6):
        _ldp_row_nu(Ay, r, M, r, nf, leg_v, dinv, Rinv)
        for i in range(N):
            px, py, pz = P[i, 0], P[i, 1], P[i, 2]
            if r < 3:
                c0, c1, c2 = -1.0 if r == 0 else 0.0, -1.0 if r == 1 else 0.0, -1.0 if r == 2 else 0.0
            elif r == 3:
                c0, c1, c2 = 0.0, pz, -py
            elif r == 4:
                c0, c1, c2 = -pz, 0.0, px
            else:
                c0, c1, c2 = py, -px, 0.0
            Ay[r, 3 * i] = c0 * dinv[3 * i]
            Ay[r, 3 * i + 1] = c1 * dinv[3 * i + 1]
            Ay[r, 3 * i + 2] = c2 * dinv[3 * i + 2]
        ubu[ms + r] = -h[r]
        ubl[ms + r] = -h[r]
    coef = w.fric_coef
    for i in range(N):
        dx, dy, dz = dinv[3 * i], dinv[3 * i + 1], dinv[3 * i + 2]
        for k in range(4):
            a = 6 + 4 * i + k
            Ay[a, 3 * i] = coef[i, k, 0] * dx
            Ay[a, 3 * i + 1] = coef[i, k, 1] * dy
            Ay[a, 3 * i + 2] = coef[i, k, 2] * dz
            ubl[ms + a] = -INF
        hi = fz_max if support[i] else 0.0
        if hi == 0.0:
            for k in range(3):
                ubl[3 * i + k] = 0.0
                ubu[3 * i + k] = 0.0
            for k in range(4):
                ubu[ms + 6 + 4 * i + k] = INF
        else:
            for k in range(2):
                ubl[3 * i + k] = -INF
                ubu[3 * i + k] = INF
            ubl[3 * i + 2] = 0.0
            ubu[3 * i + 2] = hi / dz
            for k in range(4):
                ubu[ms + 6 + 4 * i + k] = 0.0


@njit(cache=True)
def _ldp_torque_and_cbf_rows(legs, w):
    """Torque rows (last): ``M[6 + j] nu_dot - J_i^T f_i`` in ``[tau_min, tau_max] - h - tau_sw``;
    CBF rows ``J_theta,i q_ddot_i (+ s_i)`` with the bounds of :func:`.blocks.cbf.cbf_bounds` on the
    legs of ``w.cbf_leg`` (:func:`.blocks.cbf.barrier_legs`), loose on the others."""
    Ay, ubu, ubl, dinv, Rinv, M, h = w.A, w.bu, w.bl, w.dinv, w.Rinv, w.M, w.h
    leg_j, leg_v, tmin, tmax, tau_sw_total = w.leg_j, w.leg_v, w.tmin_f, w.tmax_f, w.tau_sw_total
    J = legs.J
    N, nv = J.shape[0], M.shape[0]
    ms = nf = 3 * N
    row_cbf = 6 + 4 * N
    row_tau = row_cbf + N
    K = leg_j.shape[1]
    for i in range(N):
        for r in range(K):
            j = leg_j[i, r]
            a = row_tau + j
            _ldp_row_nu(Ay, a, M, 6 + j, nf, leg_v, dinv, Rinv)
            for k in range(3):
                Ay[a, 3 * i + k] = -J[i, k, r] * dinv[3 * i + k]
            ubl[ms + a] = tmin[j] - h[6 + j] - tau_sw_total[j]
            ubu[ms + a] = tmax[j] - h[6 + j] - tau_sw_total[j]
    for i in range(N):
        a = row_cbf + i
        for r in range(K):
            s = 0.0
            for k in range(r + 1):
                s += J[i, 3, k] * Rinv[i, k, r]
            Ay[a, nf + leg_v[i, r]] = s
        if w.n_slack > 0:               # the slack's column: 0 until a solve needs it (ldp_slack_on)
            Ay[a, nf + nv + i] = dinv[nf + nv + i] if w.slack_on[0] else 0.0
        if w.cbf_on and w.cbf_leg[i] != 0:         # support and landing legs (blocks.cbf.barrier_legs)
            ubl[ms + a], ubu[ms + a] = cbf_bounds(w, i, legs.theta[i], legs.theta_dot[i], legs.dJ_theta_dq[i])
        else:
            ubl[ms + a] = -INF
            ubu[ms + a] = INF


@njit(cache=True)
def _ldp_joint_limit_rows(w):
    """Joint-limit rows (after the torque rows): ``q_ddot_j`` of leg ``i``'s joint ``r`` is
    ``sum_{c >= r} R^-1[i, r, c] y_c`` (the leg block's variables), bounds of
    :func:`.blocks.joint_limits.joint_limit_bounds`."""
    Ay, ubu, ubl, Rinv, leg_j, leg_v = w.A, w.bu, w.bl, w.Rinv, w.leg_j, w.leg_v
    N, nv = leg_j.shape[0], w.M.shape[0]
    n = nv - 6
    ms = nf = 3 * N
    row_jl = 6 + 4 * N + N + n
    K = leg_j.shape[1]
    for i in range(N):
        for r in range(K):
            j = leg_j[i, r]
            a = row_jl + j
            for c in range(r, K):
                Ay[a, nf + leg_v[i, c]] = Rinv[i, r, c]
            ubl[ms + a], ubu[ms + a] = joint_limit_bounds(w, j, w.qj[j], w.dqj[j])


@njit(cache=True)
def _ldp_collision_rows(w):
    """Leg-collision rows (last, :mod:`.blocks.leg_collision`): ``coef . q_ddot`` of the row's
    two legs, ``q_ddot`` of leg ``i`` being ``R^-1[i] y`` on its block; ``lc_lo <= . <= INF``.
    The row's legs change from cycle to cycle: its ``nu_dot`` part is cleared first."""
    Ay, ubu, ubl, Rinv, leg_v = w.A, w.bu, w.bl, w.Rinv, w.leg_v
    N, nv = leg_v.shape[0], w.M.shape[0]
    n = nv - 6
    ms = nf = 3 * N
    row_lc = 6 + 4 * N + N + n + w.n_jl
    for r in range(w.n_lc):
        a = row_lc + r
        for c in range(nv):
            Ay[a, nf + c] = 0.0
        for side in range(2):
            i = w.lc_leg[r, side]
            if i < 0:
                continue
            for c in range(leg_v.shape[1]):
                s = 0.0
                for k in range(c + 1):
                    s += w.lc_coef[r, 4 * side + k] * Rinv[i, k, c]
                Ay[a, nf + leg_v[i, c]] = s
        ubl[ms + a] = w.lc_lo[r]
        ubu[ms + a] = INF


@njit(cache=True)
def ldp_slack_on(ws):
    """Give the CBF rows their slacks (``cbf_slack``): the slack columns of the LDP's CBF rows and
    ``w.slack_on`` (which :func:`wbc_controller.kernels.qp_blocks` reads for the stacked QP's).
    The cycle first solves with those columns at 0, the slacks then having no row, no linear term
    and hence the value 0 exactly (the hard barrier); only when that problem has no accepted
    solution is it solved again with them (``WholeBodyController.update``)."""
    w = ws[0]
    w.slack_on[0] = 1
    N, nv = w.leg_v.shape[0], w.M.shape[0]
    nf = 3 * N
    row_cbf = 6 + 4 * N
    for i in range(w.n_slack):
        w.A[row_cbf + i, nf + nv + i] = w.dinv[nf + nv + i]


@njit(cache=True)
def qp_from_ldp(y, leg_v, dinv, Rinv, n_slack, x):
    """The QP's solution ``x = [nu_dot; lambda; s]`` from the LDP's ``y`` (:func:`ldp_direct`):
    ``z = R^-1 y``, ``m_theta = 0``."""
    N = leg_v.shape[0]
    nf = 3 * N
    lam0 = x.shape[0] - 4 * N - n_slack
    nv = lam0
    for i in range(N):
        for k in range(3):
            x[lam0 + 4 * i + k] = y[3 * i + k] * dinv[3 * i + k]
        x[lam0 + 4 * i + 3] = 0.0
    for r in range(6):
        x[r] = y[nf + r] * dinv[nf + r]
    K = leg_v.shape[1]
    for i in range(N):
        for r in range(K):
            s = 0.0
            for k in range(r, K):
                s += Rinv[i, r, k] * y[nf + leg_v[i, k]]
            x[leg_v[i, r]] = s
    for i in range(n_slack):
        x[lam0 + 4 * N + i] = y[nf + nv + i] * dinv[nf + nv + i]


@njit(cache=True)
def check_direct(x, support, legs, w, cbf_act):
    """:func:`wbc_controller.kernels.check_solution` for a cycle solved through :func:`ldp_direct`,
    without the stacked matrices: the same rows and bounds evaluated from the blocks they are made
    of (the torque rows' bounds and the CBF rows' from the LDP's general bounds ``w.bl``,
    ``w.bu``), normalized as :func:`wbc_controller.kernels.residuals`; the command torque
    (:func:`.blocks.torque.command_torque`, into ``w.tau_wbc``, ``w.tau``) and the binding CBF rows
    (into ``cbf_act``). Returns ``(finite, equality residual, inequality violation, torque in
    bounds, torque and joint-limit rows satisfied)``, the last without tolerance (``tau_min <= tau <= tau_max``
    exactly, as the rows' values)."""
    finite = all_finite(x)
    in_bounds = command_torque(w.M, w.h, legs.J, x, w.tau_sw_total, w, w.tau_wbc, w.tau)
    for i in range(cbf_act.shape[0]):
        cbf_act[i] = False
    if not finite:
        return False, np.inf, np.inf, in_bounds, False
    r_eq = _base_residual(x, w.M, w.h, legs.p)
    viol = _force_violation(x, support, w)
    viol, tau_rows = _torque_violation(x, viol, legs.J.shape[0], w)
    if w.n_jl > 0:
        viol, jl_rows = _joint_limit_violation(x, viol, legs.J.shape[0], w)
        tau_rows = tau_rows and jl_rows
    if w.n_lc > 0:
        viol, lc_rows = _collision_violation(x, viol, w)
        tau_rows = tau_rows and lc_rows
    viol = _cbf_violation(x, viol, legs.J, w, cbf_act)
    return True, r_eq, viol, in_bounds, tau_rows


@njit(cache=True)
def _base_residual(x, M, h, P):
    """Normalized residual of the floating-base rows and the ``m_theta = 0`` rows at ``x``."""
    N, nv = P.shape[0], M.shape[0]
    lam0 = nv
    r_eq = 0.0
    for r in range(6):
        s = 0.0
        for cc in range(nv):
            s += M[r, cc] * x[cc]
        for i in range(N):
            fx, fy, fz = x[lam0 + 4 * i], x[lam0 + 4 * i + 1], x[lam0 + 4 * i + 2]
            px, py, pz = P[i, 0], P[i, 1], P[i, 2]
            if r < 3:
                s -= x[lam0 + 4 * i + r]
            elif r == 3:
                s += pz * fy - py * fz
            elif r == 4:
                s += -pz * fx + px * fz
            else:
                s += py * fx - px * fy
        r_eq = max(r_eq, abs(s + h[r]) / max(1.0, abs(h[r])))
    for i in range(N):
        r_eq = max(r_eq, abs(x[lam0 + 4 * i + 3]))
    return r_eq


@njit(cache=True)
def _force_violation(x, support, w):
    """Normalized violation of the friction pyramids (about each foot's normal, ``w.fric_coef``)
    and the ``f_z`` bounds at ``x``."""
    lam0, fz_max, coef = w.M.shape[0], w.fz_max, w.fric_coef
    viol = 0.0
    for i in range(support.shape[0]):
        fx, fy, fz = x[lam0 + 4 * i], x[lam0 + 4 * i + 1], x[lam0 + 4 * i + 2]
        for k in range(4):
            viol = max(viol, coef[i, k, 0] * fx + coef[i, k, 1] * fy + coef[i, k, 2] * fz)
        viol = max(viol, -fz)
        hi = fz_max if support[i] else 0.0
        viol = max(viol, (fz - hi) / max(1.0, hi))
    return viol


@njit(cache=True)
def _torque_violation(x, viol, N, w):
    """``viol`` with the torque rows' violation (values from ``w.tau_wbc``), and whether every
    torque row holds exactly."""
    ubl, ubu, tau_wbc, h = w.bl, w.bu, w.tau_wbc, w.h
    n = h.shape[0] - 6
    row_tau = 3 * N + 6 + 4 * N + N
    tau_rows = True
    for j in range(n):
        s = tau_wbc[j] - h[6 + j]          # the torque row's value
        lo, up = ubl[row_tau + j], ubu[row_tau + j]
        viol = max(viol, (lo - s) / max(1.0, abs(lo)), (s - up) / max(1.0, abs(up)))
        tau_rows = tau_rows and lo <= s <= up
    return viol, tau_rows


@njit(cache=True)
def _joint_limit_violation(x, viol, N, w):
    """``viol`` with the joint-limit rows' violation, and whether every one holds exactly."""
    ubl, ubu = w.bl, w.bu
    n = w.h.shape[0] - 6
    row_jl = 3 * N + 6 + 4 * N + N + n
    ok = True
    for j in range(n):
        s = x[6 + j]
        lo, up = ubl[row_jl + j], ubu[row_jl + j]
        viol = max(viol, (lo - s) / max(1.0, abs(lo)), (s - up) / max(1.0, abs(up)))
        ok = ok and lo <= s <= up
    return viol, ok


@njit(cache=True)
def _collision_violation(x, viol, w):
    """``viol`` with the leg-collision rows' violation, and whether every one holds exactly."""
    ok = True
    for r in range(w.n_lc):
        lo = w.lc_lo[r]
        if not lo > -INF:
            continue
        s = 0.0
        for side in range(2):
            i = w.lc_leg[r, side]
            if i >= 0:
                for m in range(w.leg_v.shape[1]):
                    s += w.lc_coef[r, 4 * side + m] * x[w.leg_v[i, m]]
        viol = max(viol, (lo - s) / max(1.0, abs(lo)))
        ok = ok and lo <= s
    return viol, ok


@njit(cache=True)
def _cbf_violation(x, viol, J, w, cbf_act):
    """``viol`` with the CBF rows' violation; the binding rows into ``cbf_act`` (``cbf`` mode)."""
    ubl, ubu, leg_v, n_slack, cbf_on = w.bl, w.bu, w.leg_v, w.n_slack, w.cbf_on
    N = J.shape[0]
    lam0 = w.M.shape[0]
    row_cbf = 3 * N + 6 + 4 * N
    for i in range(N):
        s = 0.0
        for r in range(leg_v.shape[1]):
            s += J[i, 3, r] * x[leg_v[i, r]]
        if n_slack > 0:
            s += x[lam0 + 4 * N + i]
        lo, up = ubl[row_cbf + i], ubu[row_cbf + i]
        if lo > -INF:
            viol = max(viol, (lo - s) / max(1.0, abs(lo)))
        if up < INF:
            viol = max(viol, (s - up) / max(1.0, abs(up)))
        if cbf_on:
            t = 1e-6 * max(1.0, abs(up))
            cbf_act[i] = w.cbf_leg[i] != 0 and (s >= up - t or s <= lo + t)
    return viol
