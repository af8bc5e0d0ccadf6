"""Relative-pitch control-barrier rows (paper sec. 4.3): on support legs in ``cbf`` mode

``-(k_p (theta - theta_lo) + k_d theta_dot + J_theta_dot q_dot) <= J_theta q_ddot
<= k_p (theta_hi - theta) - k_d theta_dot - J_theta_dot q_dot``,

loose (``+-INF``) otherwise, so every mode and contact state has the same problem size.
``par`` fields: ``cbf_on``, ``kp_b``, ``kd_b``, ``th_lo``, ``th_hi`` (the bounds with the margin),
``leg_v`` (N, 4) columns of each leg in ``nu_dot``, ``row_cbf`` (first CBF row)."""

from __future__ import annotations

import numpy as np
from numba import njit

from legged_wbc.jit import announce_compiles

from ..qp import INF

announce_compiles(__name__)          # one line on stderr if this process has to compile a kernel


@njit(cache=True)
def cbf_bounds(par, theta, theta_dot, dJ_theta):
    """``(lower, upper)`` bound of one support leg's row ``J_theta q_ddot`` (the one formula of the
    stacked rows, :func:`cbf_rows`, and of the least-distance form, ``kernels.ldp_direct``)."""
    lo = -(par.kp_b * (theta - par.th_lo) + par.kd_b * theta_dot + dJ_theta)
    hi = par.kp_b * (par.th_hi - theta) - par.kd_b * theta_dot - dJ_theta
    return lo, hi


@njit(cache=True)
def cbf_rows(support, legs, par, C, l, u):
    """The CBF rows ``row_cbf + i``: ``J_theta,i`` on leg ``i``'s columns, bounds as the module says
    (``legs``: ``J``, ``theta``, ``theta_dot``, ``dJ_theta_dq`` of :class:`LegBatch`)."""
    J, leg_v, row_cbf, on = legs.J, par.leg_v, par.row_cbf, par.cbf_on
    for i in range(J.shape[0]):
        row = row_cbf + i
        for k in range(4):
            C[row, leg_v[i, k]] = J[i, 3, k]
        if on and support[i]:
            l[row], u[row] = cbf_bounds(par, legs.theta[i], legs.theta_dot[i], legs.dJ_theta_dq[i])
        else:
            l[row] = -INF
            u[row] = INF


@njit(cache=True)
def cbf_active(support, C, l, u, x, row_cbf, active):
    """Per leg: a CBF bound is binding at ``x`` (within ``1e-6 max(1, |u|)``), support legs only."""
    n = x.shape[0]
    for i in range(support.shape[0]):
        row = row_cbf + i
        s = 0.0
        for c in range(n):
            s += C[row, c] * x[c]
        tol = 1e-6 * max(1.0, abs(u[row]))
        active[i] = support[i] and (s >= u[row] - tol or s <= l[row] + tol)


def cbf_index(leg_v, row_cbf):
    """``(rows, cols)`` of the ``J_theta`` entries of the CBF rows (for :func:`cbf_rows_reference`)."""
    leg_v = np.asarray(leg_v)
    return np.repeat(row_cbf + np.arange(leg_v.shape[0]), 4), leg_v.reshape(-1)


def cbf_rows_reference(support, legs, cfg, index, row_cbf, C, l, u) -> None:
    """:func:`cbf_rows` in numpy, from the configuration ``cfg`` (:class:`WbcConfig`); ``index``:
    :func:`cbf_index`."""
    N = legs.J.shape[0]
    C[index] = legs.J[:, 3].reshape(-1)
    rc = slice(row_cbf, row_cbf + N)
    if cfg.relative_pitch_mode == "cbf":
        th_lo, th_hi = cfg.theta_min + cfg.cbf_margin, cfg.theta_max - cfg.cbf_margin
        lo = -(cfg.kp_b * (legs.theta - th_lo) + cfg.kd_b * legs.theta_dot + legs.dJ_theta_dq)
        hi = cfg.kp_b * (th_hi - legs.theta) - cfg.kd_b * legs.theta_dot - legs.dJ_theta_dq
        l[rc] = np.where(support, lo, -INF)
        u[rc] = np.where(support, hi, INF)
    else:
        l[rc], u[rc] = -INF, INF


def cbf_active_reference(support, C, l, u, x, row_cbf) -> np.ndarray:
    """:func:`cbf_active` in numpy."""
    rc = slice(row_cbf, row_cbf + support.shape[0])
    Cx = C[rc] @ x
    tol = 1e-6 * np.maximum(1.0, np.abs(u[rc]))
    return support & ((Cx >= u[rc] - tol) | (Cx <= l[rc] + tol))
