"""Real-time quality of the torque commands, as ros2_control users measure it (no ROS here).

Wall times are seconds of one monotonic clock (``time.monotonic()`` in the bridge; any float clock
in tests). For each control tick ``k`` the bridge reports when it published the tick's sensor
sample (:meth:`CommandTiming.sample_published`) and when a command answering ``k`` arrived
(:meth:`CommandTiming.command_arrived`, the first one counts); at the tick's deadline it closes the
tick (:meth:`CommandTiming.close_tick`):

* **command latency** of tick ``k`` = arrival of its command - publication of its sample [us]
  (NaN when no command came by the deadline);
* **deadline miss**: no command for ``k`` arrived by the deadline (realtime mode: the scheduled wall
  time of the physics step that starts tick ``k + 1 + N``, ``N`` = the scenario's command delay in
  ticks; from then on the next tick's command may act).

:meth:`CommandTiming.take_window` returns the statistics of the ticks closed since the last call
(``/bridge/diagnostics``) and their per-tick latencies (``/bridge/command_latency``, from which
``legged-wbc compare`` computes whole-run percentiles and the histogram).
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np


class CommandTiming:
    """Per-tick command latency and deadline bookkeeping (see the module docstring)."""

    def __init__(self, keep_ticks: int = 512):
        self.keep_ticks = int(keep_ticks)
        self._published: dict[int, float] = {}
        self._arrived: dict[int, float] = {}
        self._window_ticks: list[int] = []
        self._window_lat: list[float] = []
        self._window_missed = 0
        self.ticks_closed = 0
        self.deadline_misses = 0

    def sample_published(self, tick: int, wall: float) -> None:
        self._published.setdefault(tick, wall)          # a re-published sample keeps its first time

    def command_arrived(self, tick: int, wall: float) -> float | None:
        """Record the arrival of a command for ``tick``; returns its latency [us] (None if the
        sample's publication is unknown, e.g. an untimed command)."""
        if tick in self._arrived:
            return None
        self._arrived[tick] = wall
        pub = self._published.get(tick)
        return None if pub is None else (wall - pub) * 1e6

    def answer_arrived(self, tick: int, published: float, wall: float) -> None:
        """An untimed command for the period of ``tick`` that answers a sample published at
        ``published`` (wall; it names the sample by its stamp): its latency runs from that sample;
        the first answer of a tick counts."""
        if tick not in self._arrived:
            self._published[tick] = published
            self._arrived[tick] = wall

    def close_tick(self, tick: int, deadline: float = math.inf) -> bool:
        """Close ``tick`` at its ``deadline`` (wall); True if its command missed it."""
        arr = self._arrived.pop(tick, None)
        pub = self._published.pop(tick, None)
        missed = arr is None or arr > deadline
        lat = (arr - pub) * 1e6 if (arr is not None and pub is not None and not missed) else math.nan
        self._window_ticks.append(tick)
        self._window_lat.append(lat)
        self._window_missed += int(missed)
        self.ticks_closed += 1
        self.deadline_misses += int(missed)
        if len(self._published) > self.keep_ticks or len(self._arrived) > self.keep_ticks:
            for d in (self._published, self._arrived):
                for old in [t for t in d if t < tick - self.keep_ticks]:
                    del d[old]
        return missed

    def stalled(self, ticks: int) -> None:
        """``ticks`` control ticks lost to a stall: the bridge fell more than a control period behind
        its schedule and re-anchored it (the simulated world waits, a robot's would not: its
        controller would have missed those ticks). Each counts as a missed deadline, listed as tick
        -1 with no latency."""
        for _ in range(int(ticks)):
            self._window_ticks.append(-1)
            self._window_lat.append(math.nan)
        self._window_missed += int(ticks)
        self.ticks_closed += int(ticks)
        self.deadline_misses += int(ticks)

    def take_window(self) -> tuple[dict, list[int], list[float]]:
        """``(stats, ticks, latencies_us)`` of the ticks closed since the last call (:func:`window_stats`)."""
        ticks, lat, missed = self.take_window_raw()
        return window_stats(ticks, lat, missed), ticks, lat

    def take_window_raw(self) -> tuple[list[int], list[float], int]:
        """``(ticks, latencies_us, deadline misses)`` of the ticks closed since the last call, as they are
        (no arithmetic: the physics thread takes them, :func:`window_stats` may run elsewhere)."""
        out = self._window_ticks, self._window_lat, self._window_missed
        self._window_ticks, self._window_lat, self._window_missed = [], [], 0
        return out


def window_stats(ticks: list[int], lat: list[float], missed: int) -> dict:
    """A diagnostics window's stats: ``window_ticks``, ``window_deadline_misses``, ``command_latency_p50_us``,
    ``command_latency_p99_us``, ``command_latency_max_us`` (NaN without an answered tick)."""
    a = np.asarray([x for x in lat if not math.isnan(x)], dtype=float)
    return {"window_ticks": float(len(ticks)), "window_deadline_misses": float(missed),
            "command_latency_p50_us": float(np.percentile(a, 50)) if a.size else math.nan,
            "command_latency_p99_us": float(np.percentile(a, 99)) if a.size else math.nan,
            "command_latency_max_us": float(a.max()) if a.size else math.nan}


class CommandQueue:
    """Realtime: the accepted commands in arrival order, each with the tick it answers, so a physics
    step applies the newest command that exists for a tick it may answer (:meth:`due`). Whether the
    bridge runs on its schedule or behind it, a step takes what is there when it runs: behind the
    schedule (the machine is busy) the physics is not held on an older torque because the newest
    one came after the step's scheduled time (the deadline accounting, :class:`CommandTiming`, still
    judges every command by the schedule)."""

    def __init__(self, maxlen: int = 64):
        self._q: deque = deque(maxlen=maxlen)
        self.current = None
        self.current_tick = -(1 << 62)

    def push(self, tick: int, cmd) -> None:
        """A command that answers ``tick`` (commands come in non-decreasing ticks: older ones are
        stale and never pushed)."""
        self._q.append((tick, cmd))

    def due(self, max_tick: int):
        """The newest command answering a tick ``<= max_tick`` (else the one applied before, or None)."""
        q = self._q
        while q and q[0][0] <= max_tick:
            self.current_tick, self.current = q.popleft()
        return self.current

    def newest(self):
        return self._q[-1][1] if self._q else self.current


class CommandDelayLine:
    """The scenario's ``command_delay_ticks`` ``N`` in the headless loop and the lockstep bridge: the
    torque entered for control tick ``k`` comes out at tick ``k + N``, i.e. drives control period
    ``k + 1 + N`` (tick ``k + N`` to ``k + N + 1``). ``N = 0``: it comes out at once (the same array)."""

    def __init__(self, ticks: int):
        self.ticks = int(ticks)
        if self.ticks < 0:
            raise ValueError(f"command delay must be >= 0 ticks, got {ticks}")
        self._line: deque = deque()

    def push(self, tau):
        """Enter tick ``k``'s torque (None: none, e.g. the watchdog's tick) and return tick ``k - N``'s
        (a copy; None during the first ``N`` ticks or when that tick had none)."""
        if self.ticks == 0:
            return tau
        self._line.append(None if tau is None else np.array(tau, dtype=float))
        return self._line.popleft() if len(self._line) > self.ticks else None


class WallStamps:
    """Sensor stamps of ``sample_stamps: wall`` (a ros2_control robot's: ROS time when read), kept
    consistent with the physics when the simulation cannot keep real time.

    A real robot's physics never runs slower than the wall clock; a simulation on a busy machine can.
    Stamping each sample with the bare wall time would then stretch every interval the estimator
    integrates over (0.8x real time: 2.5 ms between stamps for 2 ms of physics) and steer it wrong.
    So a sample's schedule is the wall time the first sample was published at plus the sample's sim
    time, and its stamp is the wall time it is published at, but never more than ``max_jitter_ns``
    after its schedule: on time (or early: the steps between ticks may run before their slot) the
    stamps are the real publication times, like a driver's; behind, they stay on the physics' clock.
    A stamp is never in the future.
    """

    def __init__(self, max_jitter_ns: int = 1_000_000):
        self.max_jitter_ns = int(max_jitter_ns)
        self.epoch_ns = None                 # wall time [ns] - sim time [ns] of the first sample

    def stamp(self, sim_ns: int, now_ns: int) -> int:
        if self.epoch_ns is None:
            self.epoch_ns = now_ns - sim_ns
        due = self.epoch_ns + sim_ns
        return min(now_ns, due + self.max_jitter_ns)
