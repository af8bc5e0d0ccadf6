"""Which legs are neighbours: consecutive legs around the body (the leg-collision barrier's and the
MuJoCo model's leg-leg contact pairs)."""

from __future__ import annotations

import numpy as np


def neighbour_pairs(mount_xy) -> list[tuple[int, int]]:
    """Consecutive legs around the body (sorted by the angle of their mount point about the base
    origin): ``N`` pairs ``(a, b)`` with ``a < b`` for ``N >= 3`` legs (one pair for 2 legs)."""
    mount_xy = np.asarray(mount_xy, dtype=float).reshape(-1, 2)
    N = mount_xy.shape[0]
    order = np.argsort(np.arctan2(mount_xy[:, 1], mount_xy[:, 0]), kind="stable")
    pairs: list[tuple[int, int]] = []
    for k in range(N):
        a, b = int(order[k]), int(order[(k + 1) % N])
        p = (min(a, b), max(a, b))
        if a != b and p not in pairs:
            pairs.append(p)
    return pairs
