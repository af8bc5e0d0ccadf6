"""Relative-pitch control-barrier rows (paper sec. 4.3): on support legs and landing legs in ``cbf`` mode

``-(k_p (theta - theta_lo) + k_d theta_dot + J_theta_dot q_dot) <= J_theta q_ddot
<= k_p (theta_hi - theta) - k_d theta_dot - J_theta_dot q_dot``,

loose (``+-INF``) otherwise, so every mode and contact state has the same problem size.

The paper puts the rows on support legs only. We also put them on **landing** legs
(:func:`barrier_legs`): legs out of the support set in the second half of their nominal swing
(``SWING_DOWN``: an early touchdown brings them into the support set) or late (after their nominal
swing, kept descending by the swing kernel, ``late_descent``, :func:`.swing.swing_torques`). Such a
leg joins the support set at whatever tick its touchdown is seen; with only the soft swing-pitch
task (``kp_swing_pitch``) on it, it could land with its pitch already past a bound (a foot in
unseen contact with a step in its swing-down was pushed to 0.375 rad).

Why the row is valid for a swing leg: its pitch acceleration is ``J_theta q_ddot + J_theta_dot
q_dot`` with the QP's ``q_ddot`` (which the torque rows realize) plus what the swing PD torque
``tau_sw``, added outside the QP, gives. With ``swing_pitch_projection`` (the default) ``tau_sw`` is
projected so that ``J_theta M_ll^-1 tau_sw = 0``: it gives none, to the leg-block approximation of
the mass matrix (the leg's coupling to the base and other legs through ``M`` neglected, as the
projection does). The leg has no contact force in the QP (its ``f_z`` bound is 0, so the pyramid
holds its force at 0); an unseen contact (a foot touching the terrain before its touchdown is seen)
is met by the barrier as a disturbance on a support leg is. With the projection off, ``tau_sw``
moves the pitch and the row bounds only the QP's part of it. Legs lifting off (``SWING_UP``) keep
no row: they do not land, and their pitch task re-centres them before the swing-down.

``par`` fields: ``cbf_on``, ``kp_b``, ``kd_b``, ``th_lo``, ``th_hi`` (the bounds with the margin),
``cbf_shift`` (N, 2): per leg, how far the lower / upper bound moves inwards this cycle
(``cbf_margin_mode: tau_ext``, :func:`disturbance_shift`; else 0), ``leg_v`` (N, k) columns of each
leg in ``nu_dot``, ``row_cbf`` (first CBF row).

``cbf_margin_mode: tau_ext`` (a torque-aware barrier boundary): against an external null-space
torque the exponential barrier settles ``d / k_p,b`` beyond its bound, ``d`` the pitch acceleration
the torque gives; with the estimated external torque ``tau_ext`` (the touchdown filter's, "opposing
the motor") of a support leg, ``d = -(J_theta n)(n . tau_ext) / (n^T M_ll n)`` (``n``: the unit
null-space vector of ``J_p``, ``J_theta n >= 0``; ``M_ll``: the leg's block of the mass matrix), and the
bound on the side ``d`` pushes towards is moved inwards by ``min(|d| / k_p,b, cbf_margin_max)``."""

from __future__ import annotations

import numpy as np
from numba import njit

from legged_wbc.jit import announce_compiles

from legged_wbc.gait import SUPPORT, SWING_DOWN
from legged_wbc.model import null_vectors

from ..qp import INF
from .compensation import leg_null_vector
from .swing import is_late

announce_compiles(__name__)          # one line on stderr if this process has to compile a kernel


@njit(cache=True)
def barrier_legs(support, phases, planned, late_descent, no_pitch, out):
    """``out[i]`` (N; 1 / 0): leg ``i`` carries a CBF row this cycle: it has the foot pitch joint
    (``no_pitch[i]`` 0; a point-foot leg has no relative pitch to bound) and it is in the support set,
    or, after a planned swing start, it is landing: in its nominal ``SWING_DOWN``, or late (its
    nominal phase back at ``SUPPORT`` and ``late_descent`` > 0: the swing kernel's late branch,
    :func:`.swing.swing_torques`)."""
    for i in range(support.shape[0]):
        landing = (planned[i] != 0 and phases[i] == SWING_DOWN) or is_late(planned[i], phases[i], late_descent)
        out[i] = 1 if (support[i] or landing) and no_pitch[i] == 0 else 0


def barrier_legs_reference(support, phases, planned, late_descent, pitch=None) -> np.ndarray:
    """:func:`barrier_legs` in numpy (bool, N); ``pitch`` None: every leg has the foot pitch joint."""
    late = (phases == SUPPORT) & (late_descent > 0.0)
    out = support | (np.asarray(planned, bool) & ((phases == SWING_DOWN) | late))
    return out if pitch is None else out & np.asarray(pitch, bool)


@njit(cache=True)
def cbf_bounds(par, i, theta, theta_dot, dJ_theta):
    """``(lower, upper)`` bound of barrier leg ``i``'s row ``J_theta q_ddot`` (the one formula of the
    stacked rows, :func:`cbf_rows`, and of the least-distance form, ``kernels.ldp_direct``)."""
    lo = -(par.kp_b * (theta - (par.th_lo + par.cbf_shift[i, 0])) + par.kd_b * theta_dot + dJ_theta)
    hi = par.kp_b * ((par.th_hi - par.cbf_shift[i, 1]) - theta) - par.kd_b * theta_dot - dJ_theta
    return lo, hi


@njit(cache=True)
def disturbance_shift(support, J, M, leg_v, leg_j, tau_ext, par, shift, nvec):
    """``shift`` (N, 2) of ``cbf_margin_mode: tau_ext`` (module docstring): per support leg, the lower
    (``[i, 0]``) or upper (``[i, 1]``) bound's inward move [rad]; 0 for swing legs, or with ``k_p,b``
    = 0. ``par``: ``kp_b``, ``cbf_margin_max``; ``nvec`` a scratch of 4."""
    N = J.shape[0]
    for i in range(N):
        shift[i, 0] = 0.0
        shift[i, 1] = 0.0
        if not support[i] or not par.kp_b > 0.0 or J.shape[2] != 4:    # a null space on 4-joint legs only
            continue
        leg_null_vector(J, i, nvec)
        jn, nt, mn = 0.0, 0.0, 0.0
        for k in range(4):
            jn += J[i, 3, k] * nvec[k]
            nt += nvec[k] * tau_ext[leg_j[i, k]]
            for c in range(4):
                mn += nvec[k] * M[leg_v[i, k], leg_v[i, c]] * nvec[c]
        if not mn > 0.0:
            continue
        d = -jn * nt / mn
        s = min(abs(d) / par.kp_b, par.cbf_margin_max)
        if d > 0.0:
            shift[i, 1] = s
        else:
            shift[i, 0] = s


def disturbance_shift_reference(support, J, M, leg_v, leg_j, tau_ext, kp_b, margin_max) -> np.ndarray:
    """:func:`disturbance_shift` in numpy: ``shift`` (N, 2)."""
    N = J.shape[0]
    shift = np.zeros((N, 2))
    sup = np.flatnonzero(support)
    if not sup.size or not kp_b > 0.0 or J.shape[2] != 4:
        return shift
    n_vec = null_vectors(J[sup, :3], J[sup, 3])
    for m, i in enumerate(sup):
        n = n_vec[m]
        lv = np.asarray(leg_v[i])
        mn = float(n @ M[np.ix_(lv, lv)] @ n)
        if not mn > 0.0:
            continue
        d = -float(J[i, 3] @ n) * float(n @ tau_ext[np.asarray(leg_j[i])]) / mn
        shift[i, 1 if d > 0.0 else 0] = min(abs(d) / kp_b, margin_max)
    return shift


@njit(cache=True)
def cbf_rows(barrier, legs, par, C, l, u):
    """The CBF rows ``row_cbf + i``: ``J_theta,i`` on leg ``i``'s columns, bounds as the module says
    on the legs with ``barrier[i]`` (:func:`barrier_legs`), loose on the others (``legs``: ``J``,
    ``theta``, ``theta_dot``, ``dJ_theta_dq`` of :class:`LegBatch`)."""
    J, leg_v, row_cbf, on = legs.J, par.leg_v, par.row_cbf, par.cbf_on
    for i in range(J.shape[0]):
        row = row_cbf + i
        for k in range(leg_v.shape[1]):
            C[row, leg_v[i, k]] = J[i, 3, k]
        if on and barrier[i] != 0:
            l[row], u[row] = cbf_bounds(par, i, legs.theta[i], legs.theta_dot[i], legs.dJ_theta_dq[i])
        else:
            l[row] = -INF
            u[row] = INF


@njit(cache=True)
def cbf_active(barrier, C, l, u, x, row_cbf, active):
    """Per leg: a CBF bound is binding at ``x`` (within ``1e-6 max(1, |u|)``), legs with a row
    (``barrier``, :func:`barrier_legs`) only."""
    n = x.shape[0]
    for i in range(barrier.shape[0]):
        row = row_cbf + i
        s = 0.0
        for c in range(n):
            s += C[row, c] * x[c]
        tol = 1e-6 * max(1.0, abs(u[row]))
        active[i] = barrier[i] != 0 and (s >= u[row] - tol or s <= l[row] + tol)


def cbf_index(leg_v, row_cbf):
    """``(rows, cols)`` of the ``J_theta`` entries of the CBF rows (for :func:`cbf_rows_reference`)."""
    leg_v = np.asarray(leg_v)
    return np.repeat(row_cbf + np.arange(leg_v.shape[0]), leg_v.shape[1]), leg_v.reshape(-1)


def cbf_rows_reference(barrier, legs, cfg, index, row_cbf, C, l, u, shift=None) -> None:
    """:func:`cbf_rows` in numpy, from the configuration ``cfg`` (:class:`WbcConfig`); ``barrier``:
    :func:`barrier_legs_reference`; ``index``: :func:`cbf_index`; ``shift`` (N, 2):
    :func:`disturbance_shift_reference` (None: 0)."""
    N = legs.J.shape[0]
    C[index] = legs.J[:, 3].reshape(-1)
    rc = slice(row_cbf, row_cbf + N)
    if cfg.relative_pitch_mode == "cbf":
        th_lo, th_hi = cfg.theta_min + cfg.cbf_margin, cfg.theta_max - cfg.cbf_margin
        if shift is not None:
            th_lo, th_hi = th_lo + shift[:, 0], th_hi - shift[:, 1]
        lo = -(cfg.kp_b * (legs.theta - th_lo) + cfg.kd_b * legs.theta_dot + legs.dJ_theta_dq)
        hi = cfg.kp_b * (th_hi - legs.theta) - cfg.kd_b * legs.theta_dot - legs.dJ_theta_dq
        l[rc] = np.where(barrier, lo, -INF)
        u[rc] = np.where(barrier, hi, INF)
    else:
        l[rc], u[rc] = -INF, INF


def cbf_active_reference(barrier, C, l, u, x, row_cbf) -> np.ndarray:
    """:func:`cbf_active` in numpy."""
    rc = slice(row_cbf, row_cbf + barrier.shape[0])
    Cx = C[rc] @ x
    tol = 1e-6 * np.maximum(1.0, np.abs(u[rc]))
    return barrier & ((Cx >= u[rc] - tol) | (Cx <= l[rc] + tol))
