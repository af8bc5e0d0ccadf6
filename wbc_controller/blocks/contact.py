"""Contact: the rows every foot has (its ``m_theta = 0`` row and its force in the base force
rows) and the contact state, ``0 <= f_z <= f_z,max`` on support feet, ``f_z = 0`` elsewhere (the
friction pyramid then holds the tangential forces at 0)."""

from __future__ import annotations

import numpy as np
from numba import njit

from legged_wbc.jit import announce_compiles

announce_compiles(__name__)          # one line on stderr if this process has to compile a kernel


@njit(cache=True)
def contact_rows(n_legs, lam0, A_eq):
    """Constant contact rows: per foot ``m_theta = 0`` (row ``6 + i``) and ``-I_3`` on ``(f_x, f_y,
    f_z)`` in the base force rows 0-2 (forces from column ``lam0``, 4 per foot)."""
    for i in range(n_legs):
        c = lam0 + 4 * i
        A_eq[6 + i, c + 3] = 1.0
        for r in range(3):
            for k in range(3):
                A_eq[r, c + k] = -1.0 if r == k else 0.0


@njit(cache=True)
def normal_force_bounds(support, fz_max, row_fric, u):
    """Contact state: ``f_z <= fz_max`` for support feet, ``f_z <= 0`` (no force) otherwise (the
    ``f_z`` row of foot ``i`` is ``row_fric + 5 i + 4``)."""
    for i in range(support.shape[0]):
        u[row_fric + 5 * i + 4] = fz_max if support[i] else 0.0


def contact_rows_reference(n_legs, lam0, A_eq) -> None:
    """:func:`contact_rows` in numpy."""
    for i in range(n_legs):
        c = lam0 + 4 * i
        A_eq[6 + i, c + 3] = 1.0
        A_eq[0:3, c:c + 3] = -np.eye(3)


def normal_force_bounds_reference(support, fz_max, fz_rows, u) -> None:
    """:func:`normal_force_bounds` in numpy (``fz_rows``: the ``f_z`` rows, ``row_fric + 5 i + 4``)."""
    u[fz_rows] = np.where(support, fz_max, 0.0)
