"""Floating-base dynamics: the model quantities of one cycle and the 6 floating-base rows
``M_B nu_dot - [sum f_i; sum r_i x f_i] = -h_B`` (paper sec. 4, eq. of motion of the base)."""

from __future__ import annotations

import numpy as np
from numba import njit

from legged_wbc.jit import announce_compiles

announce_compiles(__name__)          # one line on stderr if this process has to compile a kernel


@njit(cache=True)
def symmetrize_mass(M_upper, h_in, M, h):
    """``M`` (nv x nv) from Pinocchio's crba output (upper triangle filled), ``h`` copied."""
    nv = M.shape[0]
    for i in range(nv):
        for j in range(i, nv):
            x = M_upper[i, j]
            M[i, j] = x
            M[j, i] = x
        h[i] = h_in[i]


@njit(cache=True)
def rotation_from_quat(q, R):
    """Rotation base -> world of the unit quaternion ``q[3:7] = [x, y, z, w]`` (into ``R``)."""
    x, y, z, w = q[3], q[4], q[5], q[6]
    R[0, 0] = 1 - 2 * (y * y + z * z)
    R[0, 1] = 2 * (x * y - z * w)
    R[0, 2] = 2 * (x * z + y * w)
    R[1, 0] = 2 * (x * y + z * w)
    R[1, 1] = 1 - 2 * (x * x + z * z)
    R[1, 2] = 2 * (y * z - x * w)
    R[2, 0] = 2 * (x * z - y * w)
    R[2, 1] = 2 * (y * z + x * w)
    R[2, 2] = 1 - 2 * (x * x + y * y)


@njit(cache=True)
def floating_base_rows(M, h, P, lam0, A_eq, b_eq):
    """Floating-base rows: ``A_eq[:6, :nv] = M[:6]``, ``b_eq[:6] = -h[:6]``, the moment rows
    ``-[r_i]x`` on each foot's ``(f_x, f_y, f_z)`` (foot points ``P`` (N, 3), base frame; forces
    from column ``lam0``). The force rows ``-I_3`` are constant (:func:`.contact.contact_rows`)."""
    nv = M.shape[0]
    for r in range(6):
        for c in range(nv):
            A_eq[r, c] = M[r, c]
        b_eq[r] = -h[r]
    N = P.shape[0]
    for i in range(N):
        c = lam0 + 4 * i
        px, py, pz = P[i, 0], P[i, 1], P[i, 2]
        # -[r]x = [[0, z, -y], [-z, 0, x], [y, -x, 0]]
        A_eq[3, c + 0] = 0.0
        A_eq[3, c + 1] = pz
        A_eq[3, c + 2] = -py
        A_eq[4, c + 0] = -pz
        A_eq[4, c + 1] = 0.0
        A_eq[4, c + 2] = px
        A_eq[5, c + 0] = py
        A_eq[5, c + 1] = -px
        A_eq[5, c + 2] = 0.0


def floating_base_index(N, lam0):
    """``(rows, cols)`` of the moment rows' entries ``-[r_i]x`` (row-major per foot; for
    :func:`floating_base_rows_reference`)."""
    f_cols = lam0 + 4 * np.arange(N)[:, None] + np.arange(3)[None, :]
    return np.tile(np.repeat(np.arange(3, 6), 3), N), np.concatenate([np.tile(f_cols[i], 3) for i in range(N)])


def floating_base_rows_reference(M, h, P, index, A_eq, b_eq) -> None:
    """:func:`floating_base_rows` in numpy (``index``: :func:`floating_base_index`)."""
    nv = M.shape[0]
    A_eq[:6, :nv] = M[:6]
    b_eq[:6] = -h[:6]
    ns = np.zeros((P.shape[0], 9))                # -[r]x row-major per foot
    ns[:, 1], ns[:, 2], ns[:, 5] = P[:, 2], -P[:, 1], P[:, 0]
    ns[:, 3], ns[:, 6], ns[:, 7] = -P[:, 2], P[:, 1], -P[:, 0]
    A_eq[index] = ns.reshape(-1)
