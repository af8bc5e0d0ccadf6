"""Friction: per foot the pyramid ``|f_x|, |f_y| <= mu f_z`` (body z as the normal) and ``0 <= f_z``
(its upper bound is the contact state, :mod:`.contact`)."""

from __future__ import annotations

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
