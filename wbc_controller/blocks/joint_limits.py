"""Joint position and velocity limits as acceleration-level control barriers (``joint_limit_barrier``).

For joint ``j`` with position ``q`` in ``[q_min, q_max]`` and velocity limit ``v_max``, the same
exponential CBF form as the relative-pitch barrier (``blocks/cbf.py``) on ``h = q_max - q`` and
``h = q - q_min`` (``h_ddot + k_d h_dot + k_p h >= 0``), and a first-order barrier on
``h = v_max -+ q_dot`` (``h_dot + k_v h >= 0``), all bounds on the joint's acceleration::

    q_ddot_j <= min(k_p (q_max - q) - k_d q_dot,  k_v (v_max - q_dot))
    q_ddot_j >= max(-k_p (q - q_min) - k_d q_dot, -k_v (v_max + q_dot))

One row per joint (``C[row_jl + j, 6 + j] = 1``), after the torque rows. Where the two bounds cross
(a joint outside its limits, moving outward fast) the row keeps the tighter side's value on both
bounds' midpoint (``lo = hi``), so it stays a row the QP can meet. ``par`` fields: ``jl_kp``,
``jl_kd``, ``jl_kv``, ``q_lower``, ``q_upper``, ``v_limit`` (n), ``row_jl`` (first row)."""

from __future__ import annotations

import numpy as np
from numba import njit

from legged_wbc.jit import announce_compiles

announce_compiles(__name__)          # one line on stderr if this process has to compile a kernel


@njit(cache=True)
def joint_limit_bounds(par, j, q, dq):
    """``(lower, upper)`` bound of joint ``j``'s acceleration (the one formula of both QP forms)."""
    kp, kd, kv = par.jl_kp, par.jl_kd, par.jl_kv
    hi = min(kp * (par.q_upper[j] - q) - kd * dq, kv * (par.v_limit[j] - dq))
    lo = max(-kp * (q - par.q_lower[j]) - kd * dq, -kv * (par.v_limit[j] + dq))
    if lo > hi:
        lo = hi = 0.5 * (lo + hi)
    return lo, hi


@njit(cache=True)
def joint_limit_rows(qj, dqj, par, C, l, u):
    """The stacked QP's joint-limit rows ``row_jl + j``: 1 on ``q_ddot_j`` (column ``6 + j``)."""
    row_jl = par.row_jl
    for j in range(qj.shape[0]):
        C[row_jl + j, 6 + j] = 1.0
        l[row_jl + j], u[row_jl + j] = joint_limit_bounds(par, j, qj[j], dqj[j])


def joint_limit_bounds_reference(qj, dqj, kp, kd, kv, q_lower, q_upper, v_limit):
    """:func:`joint_limit_bounds` for every joint in numpy: ``(lo, hi)``."""
    hi = np.minimum(kp * (q_upper - qj) - kd * dqj, kv * (v_limit - dqj))
    lo = np.maximum(-kp * (qj - q_lower) - kd * dqj, -kv * (v_limit + dqj))
    cross = lo > hi
    mid = 0.5 * (lo + hi)
    return np.where(cross, mid, lo), np.where(cross, mid, hi)


def joint_limit_rows_reference(qj, dqj, cfg, rm, row_jl, C, l, u) -> None:
    """:func:`joint_limit_rows` in numpy from the configuration ``cfg`` and the robot model ``rm``."""
    n = qj.shape[0]
    rows = row_jl + np.arange(n)
    C[rows, 6 + np.arange(n)] = 1.0
    l[rows], u[rows] = joint_limit_bounds_reference(qj, dqj, cfg.joint_limit_kp, cfg.joint_limit_kd,
                                                    cfg.joint_velocity_gain, rm.lower, rm.upper, rm.velocity_limit)
