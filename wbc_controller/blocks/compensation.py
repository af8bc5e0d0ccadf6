"""Null-space disturbance compensation (our addition, off in the paper's setting): the estimated
external joint torque along each support leg's ``J_p`` null space is cancelled by the command
(``J_p^T f`` has no component along ``n``, so ``n^T tau_ext`` is free of the contact forces)."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from legged_wbc.jit import announce_compiles

from legged_wbc.model import null_vectors

announce_compiles(__name__)          # one line on stderr if this process has to compile a kernel


@njit(cache=True)
def leg_null_vector(J, i, nvec):
    """``nvec`` (4): leg ``i``'s unit null-space vector of ``J_p`` with ``J_theta n >= 0`` (as in
    :func:`null_space_compensation`)."""
    for k in range(4):
        a0 = 1 if k == 0 else 0
        a1 = a0 + 1 + (1 if k == a0 + 1 else 0)
        a2 = a1 + 1 + (1 if k == a1 + 1 else 0)
        ax_, ay_, az_ = J[i, 0, a0], J[i, 1, a0], J[i, 2, a0]
        bx_, by_, bz_ = J[i, 0, a1], J[i, 1, a1], J[i, 2, a1]
        cx_, cy_, cz_ = J[i, 0, a2], J[i, 1, a2], J[i, 2, a2]
        det = (ax_ * (by_ * cz_ - bz_ * cy_) - bx_ * (ay_ * cz_ - az_ * cy_)
               + cx_ * (ay_ * bz_ - az_ * by_))
        nvec[k] = det if k % 2 == 0 else -det     # signed minor of J_p without column k
    nrm = max(math.sqrt(nvec[0] ** 2 + nvec[1] ** 2 + nvec[2] ** 2 + nvec[3] ** 2), 1e-300)
    s = 0.0
    for k in range(4):
        nvec[k] /= nrm
        s += J[i, 3, k] * nvec[k]
    if s < 0.0:
        for k in range(4):
            nvec[k] = -nvec[k]


@njit(cache=True)
def null_space_compensation(support, J, leg_j, tau_ext, limit, tau_comp, nvec):
    """``tau_comp`` (n): minus nothing, plus ``n_i (n_i . tau_ext,i)`` clipped to ``+-limit`` [N m] per
    support leg, ``n_i`` the unit null-space vector of ``J_p,i`` with ``J_theta,i n_i >= 0``
    (signed 3x3 minors, as :func:`legged_wbc.model.null_vectors`); ``nvec`` is a scratch of 4."""
    N = J.shape[0]
    for k in range(tau_comp.shape[0]):
        tau_comp[k] = 0.0
    for i in range(N):
        if not support[i] or J.shape[2] != 4:     # a null space of J_p on 4-joint legs only
            continue
        leg_null_vector(J, i, nvec)
        d = 0.0
        for k in range(4):
            d += nvec[k] * tau_ext[leg_j[i, k]]
        d = min(max(d, -limit), limit)
        for k in range(4):
            tau_comp[leg_j[i, k]] = nvec[k] * d


def null_space_compensation_reference(support, J, leg_j, tau_ext, limit) -> np.ndarray:
    """:func:`null_space_compensation` in numpy: returns ``tau_comp`` (n)."""
    tau_comp = np.zeros(tau_ext.shape[0])
    sup = np.flatnonzero(support) if J.shape[2] == 4 else np.zeros(0, dtype=int)
    if sup.size:
        n_vec = null_vectors(J[sup, :3], J[sup, 3])
        jidx = np.asarray(leg_j)[sup]
        d = np.einsum("ki,ki->k", n_vec, tau_ext[jidx])
        d = np.clip(d, -limit, limit)
        tau_comp[jidx.reshape(-1)] = (n_vec * d[:, None]).reshape(-1)
    return tau_comp
