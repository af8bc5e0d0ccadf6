"""Joint states into a fixed joint order, by name, with corrupt samples rejected."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def all_finite(*arrays) -> bool:
    """Whether every value of the float arrays is finite. The inputs' check on every sample, so it is
    fast: one dot product per array (0.5 us; a NaN or an inf makes ``a . a`` non-finite), exact only
    when that fails (``a . a`` also overflows for |a| > 1e154: then ``np.isfinite`` decides)."""
    for a in arrays:
        if type(a) is not np.ndarray or a.ndim != 1:
            a = np.asarray(a, dtype=float).ravel()
        if not math.isfinite(a.dot(a)) and not np.isfinite(a).all():
            return False
    return True


# Corrupt-sample bounds. The simulation does not enforce joint limits (the controller's business), and
# WBC-0 legitimately spins a foot link ~200 rad (30 turns) past its range: the bounds catch garbage
# (a finite 1e6 rad passes a NaN check), not physics.
POSITION_MARGIN_RAD = 1000.0   # accepted excursion of a joint position beyond its URDF range [rad]
VELOCITY_FACTOR = 100.0        # accepted |velocity| in multiples of the URDF velocity limit


class JointOrder:
    """Reorders ``JointState`` arrays into a fixed joint order, by name (cached per name list).

    A message naming a joint twice is rejected (``ValueError``: which entry would count?). With
    ``bounds = (lower, upper, velocity_limit)`` (arrays in this order, [rad], [rad/s]) positions more
    than ``POSITION_MARGIN_RAD`` outside ``[lower, upper]`` and velocities above
    ``VELOCITY_FACTOR * velocity_limit`` are rejected too: no joint of the robot or the simulation
    reports them, so the sample is corrupt."""

    def __init__(self, joint_names: Sequence[str], bounds=None):
        self.joint_names = list(joint_names)
        self._cache: dict[tuple, np.ndarray] = {}
        self._last: tuple = (None, None, None)   # (names object, its copy, its index): the usual case
        self._bounds = None
        if bounds is not None:
            lo, hi, vmax = (np.asarray(b, dtype=float) for b in bounds)
            self._bounds = (lo - POSITION_MARGIN_RAD, hi + POSITION_MARGIN_RAD, VELOCITY_FACTOR * vmax)
            self._mid = 0.5 * (self._bounds[0] + self._bounds[1])
            with np.errstate(divide="ignore"):     # a joint with no velocity bound: inf, its test exact
                self._inv_half = 1.0 / (0.5 * (self._bounds[1] - self._bounds[0]))
                self._inv_vmax = 1.0 / self._bounds[2]

    def index(self, msg_names: Sequence[str]) -> np.ndarray:
        obj, copy, idx = self._last
        if msg_names is obj and msg_names == copy:   # the same list as last time (a publisher's names)
            return idx
        idx = self._index(msg_names)
        self._last = (msg_names, list(msg_names), idx)
        return idx

    def _index(self, msg_names: Sequence[str]) -> np.ndarray:
        key = tuple(msg_names)
        idx = self._cache.get(key)
        if idx is None:
            if len(set(key)) != len(key):
                dup = sorted({n for n in key if key.count(n) > 1})
                raise ValueError(f"JointState names {dup} more than once")
            pos = {n: k for k, n in enumerate(key)}
            missing = [n for n in self.joint_names if n not in pos]
            if missing:
                raise ValueError(f"JointState lacks joints {missing}")
            idx = np.array([pos[n] for n in self.joint_names], dtype=int)
            self._cache[key] = idx
        return idx

    def arrays(self, msg) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(position, velocity, effort)`` of a JointState in this order (empty fields -> NaN)."""
        return self.arrays_of(msg.name, msg.position, msg.velocity, msg.effort)

    def arrays_of(self, names, position, velocity, effort) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`arrays` of a JointState's fields (e.g. an adapted value, :mod:`legged_wbc.ros.io.adapters`)."""
        idx = self.index(names)
        n = len(names)
        out = []
        for field in (position, velocity, effort):
            a = np.asarray(field, dtype=float)
            out.append(a[idx] if len(a) == n else np.full(len(idx), np.nan))
        if self._bounds is not None:
            self._check_plausible(out[0], out[1])
        return out[0], out[1], out[2]

    def _check_plausible(self, pos: np.ndarray, vel: np.ndarray) -> None:
        lo, hi, vmax = self._bounds
        x = (pos - self._mid) * self._inv_half     # |x_j| <= 1: joint j within its position bounds
        y = vel * self._inv_vmax
        if x.dot(x) <= 1.0 and y.dot(y) <= 1.0:
            return          # the usual path: max |x_j| <= |x|_2 <= 1 (a NaN or inf compares False: exact test)
        pos, vel = np.nan_to_num(pos, nan=self._mid), np.nan_to_num(vel, nan=0.0)  # NaN: checked later
        bad_p = np.flatnonzero((pos < lo) | (pos > hi))
        bad_v = np.flatnonzero(np.abs(vel) > vmax)
        if bad_p.size:
            j = int(bad_p[0])
            raise ValueError(f"joint {self.joint_names[j]} position {pos[j]:.6g} rad is far outside its limits "
                             f"[{lo[j] + POSITION_MARGIN_RAD:g}, {hi[j] - POSITION_MARGIN_RAD:g}]")
        if bad_v.size:
            j = int(bad_v[0])
            raise ValueError(f"joint {self.joint_names[j]} velocity {vel[j]:.6g} rad/s exceeds "
                             f"{VELOCITY_FACTOR:g}x its limit {vmax[j] / VELOCITY_FACTOR:g} rad/s")


def joint_bounds(rm) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(lower, upper, velocity_limit)`` of a ``RobotModel``'s joints in its joint order (URDF limits)."""
    return rm.lower, rm.upper, rm.velocity_limit
