"""Friction: per foot a pyramid about the foot's contact normal ``n`` (base frame),
``|t_1 . f|, |t_2 . f| <= mu n . f`` (``t_1``, ``t_2`` tangents), and ``0 <= f_z`` (its upper
bound is the contact state, :mod:`.contact`).

The normal is the controller's ``contact_normal`` choice (:func:`contact_normals`): body z (the
paper's; the pyramid is then ``|f_x|, |f_y| <= mu f_z``, the constant rows of
:func:`friction_rows`) or the estimator's support-plane normal (``docs/terrain.md``). The pyramid
rows' coefficients are refilled every cycle (:func:`pyramid_coefficients`); their bounds are
constant. The pyramid implies ``n . f >= 0`` (the unilateral constraint about the normal); the
``f_z`` bounds stay on body z (``f_z >= 0`` is implied by the pyramid for a normal within
``90 deg - atan(mu)`` of body z; ``f_z <= f_z,max`` bounds the load)."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from legged_wbc.jit import announce_compiles

from ..qp import INF
from .contact import contact_rows

announce_compiles(__name__)          # one line on stderr if this process has to compile a kernel


@njit(cache=True)
def friction_rows(n_legs, lam0, row_fric, mu, A_eq, C, l, u):
    """The constant rows of every foot: :func:`.contact.contact_rows` and the pyramid rows
    ``row_fric + 5 i + (0..4)`` on the foot's forces (from column ``lam0``, 4 per foot)."""
    contact_rows(n_legs, lam0, A_eq)
    for i in range(n_legs):
        c = lam0 + 4 * i
        r = row_fric + 5 * i
        C[r + 0, c + 0], C[r + 0, c + 2] = 1.0, -mu
        C[r + 1, c + 0], C[r + 1, c + 2] = -1.0, -mu
        C[r + 2, c + 1], C[r + 2, c + 2] = 1.0, -mu
        C[r + 3, c + 1], C[r + 3, c + 2] = -1.0, -mu
        C[r + 4, c + 2] = 1.0
        for k in range(4):
            l[r + k] = -INF
            u[r + k] = 0.0
        l[r + 4] = 0.0


def pyramid_rows_reference(n_legs, lam0, row_fric, mu, C, l, u) -> None:
    """The pyramid rows of :func:`friction_rows` in numpy (one 5 x 3 block per foot)."""
    block = [[1.0, 0.0, -mu], [-1.0, 0.0, -mu], [0.0, 1.0, -mu], [0.0, -1.0, -mu], [0.0, 0.0, 1.0]]
    for i in range(n_legs):
        c, r = lam0 + 4 * i, row_fric + 5 * i
        C[r:r + 5, c:c + 3] = block
        l[r:r + 4] = -INF
        u[r:r + 4] = 0.0
        l[r + 4] = 0.0


@njit(cache=True)
def contact_normals(R, normal_w, estimated, normals_b):
    """Each foot's contact normal in the base frame into ``normals_b`` (N, 3): with ``estimated``
    the world-frame normal ``normal_w`` (the estimator's support plane) as ``R^T n`` (``R`` base ->
    world), else body z ``(0, 0, 1)`` (the paper's)."""
    if estimated:
        n0 = R[0, 0] * normal_w[0] + R[1, 0] * normal_w[1] + R[2, 0] * normal_w[2]
        n1 = R[0, 1] * normal_w[0] + R[1, 1] * normal_w[1] + R[2, 1] * normal_w[2]
        n2 = R[0, 2] * normal_w[0] + R[1, 2] * normal_w[1] + R[2, 2] * normal_w[2]
    else:
        n0, n1, n2 = 0.0, 0.0, 1.0
    for i in range(normals_b.shape[0]):
        normals_b[i, 0], normals_b[i, 1], normals_b[i, 2] = n0, n1, n2


@njit(cache=True)
def pyramid_coefficients(normals, mu, coef):
    """The pyramid about each foot's unit normal ``n`` (rows of ``normals`` (N, 3), base frame):
    ``coef[i, k] . f <= 0`` for ``k = 0..3`` with the rows ``t1 - mu n``, ``-t1 - mu n``,
    ``t2 - mu n``, ``-t2 - mu n``; ``t1`` is base x projected on the contact plane (normalized),
    ``t2 = n x t1``. For ``n = (0, 0, 1)`` these are exactly the body-z rows ``(+-1, 0, -mu)``,
    ``(0, +-1, -mu)`` of :func:`friction_rows`. (Every entry gets ``+ 0.0``: no ``-0.0``.)"""
    for i in range(normals.shape[0]):
        nx, ny, nz = normals[i, 0], normals[i, 1], normals[i, 2]
        ax, ay, az = 1.0 - nx * nx, -nx * ny, -nx * nz
        s = 1.0 / math.sqrt(ax * ax + ay * ay + az * az)
        t1x, t1y, t1z = ax * s, ay * s, az * s
        t2x, t2y, t2z = ny * t1z - nz * t1y, nz * t1x - nx * t1z, nx * t1y - ny * t1x
        mx, my, mz = mu * nx, mu * ny, mu * nz
        coef[i, 0, 0], coef[i, 0, 1], coef[i, 0, 2] = (t1x - mx) + 0.0, (t1y - my) + 0.0, (t1z - mz) + 0.0
        coef[i, 1, 0], coef[i, 1, 1], coef[i, 1, 2] = (-t1x - mx) + 0.0, (-t1y - my) + 0.0, (-t1z - mz) + 0.0
        coef[i, 2, 0], coef[i, 2, 1], coef[i, 2, 2] = (t2x - mx) + 0.0, (t2y - my) + 0.0, (t2z - mz) + 0.0
        coef[i, 3, 0], coef[i, 3, 1], coef[i, 3, 2] = (-t2x - mx) + 0.0, (-t2y - my) + 0.0, (-t2z - mz) + 0.0


@njit(cache=True)
def pyramid_rows(coef, lam0, row_fric, C):
    """The stacked QP's pyramid rows ``row_fric + 5 i + (0..3)`` from :func:`pyramid_coefficients`
    (their bounds, ``(-inf, 0]``, are constant: :func:`friction_rows`)."""
    for i in range(coef.shape[0]):
        c, r = lam0 + 4 * i, row_fric + 5 * i
        for k in range(4):
            for j in range(3):
                C[r + k, c + j] = coef[i, k, j]


def pyramid_coefficients_reference(normals, mu) -> np.ndarray:
    """:func:`pyramid_coefficients` in numpy: ``(N, 4, 3)``."""
    n = np.asarray(normals, dtype=float)
    t1 = np.array([1.0, 0.0, 0.0]) - n[:, :1] * n
    t1 /= np.linalg.norm(t1, axis=1, keepdims=True)
    t2 = np.cross(n, t1)
    return np.stack([t1 - mu * n, -t1 - mu * n, t2 - mu * n, -t2 - mu * n], axis=1) + 0.0


def contact_normals_reference(R, normal_w, estimated: bool, N: int) -> np.ndarray:
    """:func:`contact_normals` in numpy: ``(N, 3)``."""
    nb = np.asarray(R).T @ np.asarray(normal_w, dtype=float) if estimated else np.array([0.0, 0.0, 1.0])
    return np.tile(nb, (N, 1))
