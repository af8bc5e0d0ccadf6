"""Torque: the final-torque rows ``tau_min <= S[M nu_dot + h - J_c^T lambda] + tau_sw <= tau_max``
and the command torque ``tau = S[M nu_dot* + h - J_c^T lambda*] + tau_sw`` at the solution.

``par`` fields: ``leg_j`` (N, 4) joint indices per leg, ``lam0`` (first force column),
``row_tau`` (first torque row), ``tmin_f``, ``tmax_f``, ``tau_tol_f`` (n) [N m].

The bounds ``tau_min``, ``tau_max``: the paper's constant ``+-tau_limit_paper``, or (``torque_limit_mode:
realistic``) the drives' torque-speed envelope at the estimated joint velocity ``w``
(:func:`torque_envelope`, the formula of the simulation's :class:`mujoco_bridge.sim.ActuatorEnvelope`,
refilled every cycle): ``tau_max = clip(S (1 - w / W), 0, P)``, ``tau_min = -clip(S (1 + w / W), 0, P)``
with stall torque ``S``, no-load speed ``W`` and peak torque ``P`` (``par``: ``tau_stall``,
``tau_slope = S / W``, ``tau_peak``)."""

from __future__ import annotations

import numpy as np
from numba import njit

from legged_wbc.jit import announce_compiles

announce_compiles(__name__)          # one line on stderr if this process has to compile a kernel


@njit(cache=True)
def torque_envelope(w, par, tmin, tmax):
    """The torque bounds ``tmin``, ``tmax`` (n) [N m] at the joint velocities ``w`` (n) [rad/s]: the
    torque-speed envelope of the module docstring."""
    stall, slope, peak = par.tau_stall, par.tau_slope, par.tau_peak
    for j in range(w.shape[0]):
        sw = slope[j] * w[j]
        tmax[j] = min(max(stall[j] - sw, 0.0), peak[j])
        tmin[j] = -min(max(stall[j] + sw, 0.0), peak[j])


def torque_envelope_reference(w, stall, no_load_speed, peak):
    """:func:`torque_envelope` in numpy: ``(tau_min, tau_max)``."""
    slope = np.asarray(stall) / np.asarray(no_load_speed)
    return -np.clip(stall + slope * w, 0.0, peak), np.clip(stall - slope * w, 0.0, peak)


@njit(cache=True)
def torque_rows(M, h, J, tau_sw_total, par, C, l, u):
    """``C[tau] = [M[6:], -J_i^T on lambda_i]``, bounds ``tau_min/max - h[6:] - tau_sw_total``."""
    leg_j, lam0, row_tau, tmin, tmax = par.leg_j, par.lam0, par.row_tau, par.tmin_f, par.tmax_f
    n = M.shape[0] - 6
    nv = M.shape[0]
    for j in range(n):
        for c in range(nv):
            C[row_tau + j, c] = M[6 + j, c]
        l[row_tau + j] = tmin[j] - h[6 + j] - tau_sw_total[j]
        u[row_tau + j] = tmax[j] - h[6 + j] - tau_sw_total[j]
    N = J.shape[0]
    for i in range(N):
        for r in range(leg_j.shape[1]):           # the leg's joints
            row = row_tau + leg_j[i, r]
            for k in range(4):                    # lambda_i = [f_x, f_y, f_z, m_theta]
                C[row, lam0 + 4 * i + k] = -J[i, k, r]


@njit(cache=True)
def command_torque(M, h, J, x, tau_sw_total, par, tau_wbc, tau):
    """``tau_wbc = S[M nu_dot + h - J_c^T lambda]`` and ``tau = tau_wbc + tau_sw_total`` at the
    solution ``x``; returns whether every ``tau`` is finite and within the bounds (+ tolerance)."""
    leg_j, lam0, tmin, tmax, tau_tol = par.leg_j, par.lam0, par.tmin_f, par.tmax_f, par.tau_tol_f
    nv = M.shape[0]
    n = nv - 6
    for j in range(n):
        s = 0.0
        for c in range(nv):
            s += M[6 + j, c] * x[c]
        tau_wbc[j] = s + h[6 + j]
    N = J.shape[0]
    for i in range(N):
        c = lam0 + 4 * i
        for r in range(leg_j.shape[1]):
            tau_wbc[leg_j[i, r]] -= (J[i, 0, r] * x[c] + J[i, 1, r] * x[c + 1] + J[i, 2, r] * x[c + 2]
                                     + J[i, 3, r] * x[c + 3])
    ok = True
    for j in range(n):
        tau[j] = tau_wbc[j] + tau_sw_total[j]
        if not (tau[j] >= tmin[j] - tau_tol[j] and tau[j] <= tmax[j] + tau_tol[j]):
            ok = False
    return ok


def torque_index(leg_j, lam0, row_tau):
    """``(rows, cols)`` of the ``-J_i^T`` entries of the torque rows (for :func:`torque_rows_reference`)."""
    leg_j = np.asarray(leg_j)
    lam = lam0 + 4 * np.arange(leg_j.shape[0])[:, None] + np.arange(4)[None, :]   # (N, 4)
    return np.repeat(row_tau + leg_j, 4, axis=1).reshape(-1), np.tile(lam, (1, leg_j.shape[1])).reshape(-1)


def torque_rows_reference(M, h, J, tau_sw_total, index, row_tau, tmin, tmax, C, l, u) -> None:
    """:func:`torque_rows` in numpy; ``index``: :func:`torque_index`."""
    n, nv = M.shape[0] - 6, M.shape[0]
    C[row_tau:row_tau + n, :nv] = M[6:]
    C[index] = (-J.transpose(0, 2, 1)).reshape(-1)
    l[row_tau:row_tau + n] = tmin - h[6:] - tau_sw_total
    u[row_tau:row_tau + n] = tmax - h[6:] - tau_sw_total


def command_torque_reference(M, h, J, x, tau_sw_total, leg_j, lam0):
    """``(tau_wbc, tau)`` of :func:`command_torque` in numpy."""
    N, nv = J.shape[0], M.shape[0]
    lam = x[lam0:lam0 + 4 * N]
    tau_wbc = M[6:] @ x[:nv] + h[6:]
    tau_wbc[np.asarray(leg_j).reshape(-1)] -= np.einsum("nji,nj->ni", J, lam.reshape(N, 4)).reshape(-1)
    return tau_wbc, tau_wbc + tau_sw_total
