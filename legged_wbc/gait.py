"""Nominal gait schedule shared by the estimator and the controller (both compute it from time).

One schedule: :func:`gait_state` (compiled; the estimator's and the controller's 500 Hz path) and
:meth:`GaitScheduler.state` (numpy, its specification; ``phases``, ``swing_progress`` and
``cycle_index`` are read off it), compared at and around every phase boundary by the tests.

Legs swing in groups, one group after the other, within a cycle of ``period`` seconds. Group ``k``
of ``G`` starts its swing at ``start_time + k * period / G`` (mod ``period``) and swings for
``(1 - duty) * period``; the first half of a swing is *swing-up*, the second *swing-down*. Before
``start_time`` (standing up) and after ``stop_time`` every leg is in support.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from legged_wbc.jit import announce_compiles
from legged_wbc.robot import ConfigError

announce_compiles(__name__)          # one line on stderr if this process has to compile a kernel

SUPPORT, SWING_UP, SWING_DOWN = 0, 1, 2
PHASE_NAMES = ("support", "swing_up", "swing_down")


@dataclass(frozen=True)
class GaitConfig:
    """Gait: leg groups swung in sequence, cycle period [s], support duty factor, start/stop [s]."""

    groups: tuple[tuple[str, ...], ...]
    period: float = 1.0
    duty: float = 0.6
    start_time: float = 3.0
    stop_time: float = math.inf

    def __post_init__(self):
        if not self.groups or any(len(g) == 0 for g in self.groups):
            raise ConfigError("gait.groups: need at least one non-empty group of leg names")
        if not 0.05 <= self.period <= 10.0:
            raise ConfigError(f"gait.period: {self.period} s out of range [0.05, 10]")
        G = len(self.groups)
        if not (1.0 - 1.0 / G) - 1e-9 <= self.duty < 1.0:
            raise ConfigError(f"gait.duty: {self.duty} out of range [{1 - 1 / G:.3f}, 1) for {G} groups "
                              "(swings of different groups must not overlap)")

    @classmethod
    def from_dict(cls, d: dict) -> "GaitConfig":
        return cls(groups=tuple(tuple(str(x) for x in g) for g in d["groups"]),
                   period=float(d.get("period", 1.0)), duty=float(d.get("duty", 0.6)),
                   start_time=float(d.get("start_time", 3.0)),
                   stop_time=float(d["stop_time"]) if d.get("stop_time") is not None else math.inf)


class GaitScheduler:
    """Per-leg nominal phase, swing progress and swing-cycle index at a time ``t`` [s]."""

    def __init__(self, cfg: GaitConfig, leg_names: list[str]):
        self.cfg = cfg
        self.leg_names = list(leg_names)
        self.n_legs = len(leg_names)
        group_of = {}
        for k, g in enumerate(cfg.groups):
            for name in g:
                if name not in leg_names:
                    raise ConfigError(f"gait.groups: unknown leg {name!r} (legs: {leg_names})")
                if name in group_of:
                    raise ConfigError(f"gait.groups: leg {name!r} is in two groups")
                group_of[name] = k
        self.group = np.array([group_of.get(n, -1) for n in leg_names])  # -1: never swings
        G = len(cfg.groups)
        self.offset = np.where(self.group >= 0, self.group * cfg.period / G, 0.0)
        self.swing_duration = (1.0 - cfg.duty) * cfg.period
        self.support_duration = cfg.duty * cfg.period

    def _local(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """Time since the current cycle began for each leg, and the cycle index (a float)."""
        tau = t - self.cfg.start_time - self.offset
        k = np.floor(tau / self.cfg.period)
        return tau - k * self.cfg.period, k

    def active(self, t: float) -> bool:
        return self.cfg.start_time <= t < self.cfg.stop_time

    def state(self, t: float, paused: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(phases, swing_progress, cycle_index)`` at ``t``: nominal phase per leg (``SUPPORT``,
        ``SWING_UP`` in the first half of its swing, ``SWING_DOWN`` in the second), swing progress
        in [0, 1) (0 in support), index of each leg's current gait cycle (-1 before the gait
        starts). ``paused`` (a paused gait clock, ``wbc_controller.blocks.command.GaitClock``): every
        leg in support, as after ``stop_time`` (the kernel: ``stop_time = -inf``). The numpy
        specification of :func:`gait_state`; ``t`` is the gait clock's time (the time itself while
        the gait was never paused)."""
        N = self.n_legs
        if t < self.cfg.start_time:
            return np.zeros(N, dtype=int), np.zeros(N), -np.ones(N, dtype=int)
        loc, k = self._local(t)
        cycles = k.astype(int)
        if paused or not self.active(t):
            return np.zeros(N, dtype=int), np.zeros(N), cycles
        s = loc / self.swing_duration
        swinging = (s < 1.0) & (k >= 0) & (self.group >= 0)
        phases = np.where(swinging, np.where(s < 0.5, SWING_UP, SWING_DOWN), SUPPORT)
        return phases, np.where(swinging, s, 0.0), cycles

    def phases(self, t: float) -> np.ndarray:
        """Nominal phase per leg: ``SUPPORT``, ``SWING_UP`` or ``SWING_DOWN`` (:meth:`state`)."""
        return self.state(t)[0]

    def swing_progress(self, t: float) -> np.ndarray:
        """Swing progress in [0, 1) per leg (0 in support; :meth:`state`)."""
        return self.state(t)[1]

    def cycle_index(self, t: float) -> np.ndarray:
        """Index of each leg's current gait cycle (-1 before the gait starts; :meth:`state`)."""
        return self.state(t)[2]

    def nominal_support(self, t: float) -> np.ndarray:
        return self.phases(t) == SUPPORT


@njit(cache=True, error_model="numpy")
def gait_state(t, start_time, stop_time, period, swing_duration, offset, group, phases, progress, cycles):
    """:meth:`GaitScheduler.state` compiled, with the same operations (so the same floating-point
    decisions): leg ``i`` swings from ``start_time + offset[i]`` every ``period`` [s] for
    ``swing_duration`` unless ``group[i] < 0``; all legs in ``SUPPORT`` outside ``[start_time,
    stop_time)``; cycle -1 before ``start_time``. Writes ``phases``, ``progress``, ``cycles`` (N,)."""
    active = start_time <= t < stop_time
    for i in range(offset.shape[0]):
        phases[i] = SUPPORT
        progress[i] = 0.0
        if t < start_time:
            cycles[i] = -1
            continue
        tau = t - start_time - offset[i]
        k = np.floor(tau / period)                  # a float, as in numpy
        loc = tau - k * period
        # float -> int64 as numpy's astype on x86-64 (out of range: INT64_MIN, no undefined cast)
        cycles[i] = np.int64(k) if -9.2e18 < k < 9.2e18 else np.int64(-9223372036854775807 - 1)
        if active:
            s = loc / swing_duration
            if s < 1.0 and k >= 0 and group[i] >= 0:
                phases[i] = SWING_UP if s < 0.5 else SWING_DOWN
                progress[i] = s
