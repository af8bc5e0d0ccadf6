"""Which inputs make a control tick and when it runs: tick pairing (:class:`TickSync`), newest tick
first (:class:`NewestTickRunner`), hardware-stamped samples (:class:`SampleTicks`), a tick's outputs."""

from __future__ import annotations

from legged_wbc.conventions import CONTROL_PERIOD_NS


# ----------------------------------------------------------------------------- tick synchronizer
class TickSync:
    """Collects one control tick's inputs from several topics (the estimator and the controller
    nodes): a tick runs once, when every ``required`` input stamped on it has arrived.

    ``status(tick)`` says what a sample stamped on ``tick`` is before it is parsed: ``NEW``, ``REPEAT``
    (the tick that ran last: the bridge re-published it because the answer got lost, answer again)
    or ``STALE`` (older). ``add(tick, key, value)`` stores a new tick's input and returns all of them
    (a dict) when the tick is complete, else None; older incomplete ticks are dropped then.

    The keys are any increasing integers: tick numbers (``input_timing: tick_grid``) or stamps in
    nanoseconds (``input_timing: sample``, where most 1 kHz joint states never complete a tick:
    ``max_pending`` then bounds the buffer, the oldest incomplete key is dropped first)."""

    NEW, REPEAT, STALE = "new", "repeat", "stale"

    def __init__(self, required, max_pending: int | None = None):
        self.required = tuple(required)
        self.last_tick = -1
        self.max_pending = max_pending     # None: unbounded (tick_grid); keys are then stamps [ns]
        self._buf: dict[int, dict] = {}

    def status(self, tick: int) -> str:
        if tick < self.last_tick:
            return self.STALE
        return self.REPEAT if tick == self.last_tick else self.NEW

    def add(self, tick: int, key: str, value) -> dict | None:
        if tick <= self.last_tick:
            return None
        d = self._buf.get(tick)
        if d is None:
            if self.max_pending is not None and len(self._buf) >= self.max_pending:
                del self._buf[min(self._buf)]           # the oldest incomplete tick (never completed)
            d = self._buf[tick] = {}
        d[key] = value
        if any(k not in d for k in self.required):
            return None
        for k in [k for k in self._buf if k <= tick]:
            del self._buf[k]
        self.last_tick = tick
        return d

    def pending(self) -> int:
        """Ticks waiting for an input (diagnostics / tests)."""
        return len(self._buf)


# ----------------------------------------------------------------------------- newest tick first
class NewestTickRunner:
    """Runs a node's control ticks (the estimator's and the controller's ``run(*args)``), always on
    the newest complete tick.

    By default a tick runs at once, in the caller's thread: so it does when the node is composed in
    a container, where the whole chain runs in the bridge's thread, one tick after the other, and
    nothing can pile up. A node in a process of its own (``layout:=processes``; :func:`spin_node`
    calls :meth:`start_worker` of the node's ``ticks``) runs its ticks in a worker thread while the executor thread goes on taking
    samples, so a node that fell behind (a slow tick, a busy machine) does not work through a
    backlog: when a tick is done and several complete ticks are waiting, only the newest runs; the
    older ones are skipped (their answers would come later still) and counted in :attr:`skipped`. In
    lockstep the bridge publishes the next tick only after this tick's command, so nothing is ever
    skipped there. An exception in the worker is raised again by the next :meth:`submit` (in the
    executor thread: the node ends, as when a callback raises)."""

    def __init__(self, run, name: str = "ticks"):
        import threading

        self._run = run
        self.name = name
        self.ran = 0                    # ticks run
        self.skipped = 0                # complete ticks never run: a newer one was waiting
        self._ready = None
        self._error: BaseException | None = None
        self._stop = False
        self._cond = threading.Condition()
        self._thread = None

    @property
    def threaded(self) -> bool:
        return self._thread is not None

    def start_worker(self) -> None:
        """From now on run the ticks in a worker thread, the newest first (see the class docstring)."""
        import threading

        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            self._thread.start()

    def submit(self, *args) -> None:
        """A complete tick: run it now (no worker), or when the worker is free unless a newer one comes
        first."""
        if self._thread is None:
            self._run(*args)
            self.ran += 1
            return
        with self._cond:
            if self._error is not None:
                err, self._error = self._error, None
                raise err
            if self._ready is not None:
                self.skipped += 1
            self._ready = args
            self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._ready is None and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                args, self._ready = self._ready, None
            try:
                self._run(*args)
                self.ran += 1
            except BaseException as exc:  # noqa: BLE001  (handed to the executor thread)
                with self._cond:
                    self._error = exc

    def close(self, timeout: float = 2.0) -> str:
        """Stop the worker, if any (a tick in progress is finished; one still waiting is not run);
        returns ``"R ticks run, S stale ticks skipped"`` for the node's closing log line."""
        if self._thread is not None:
            with self._cond:
                self._stop = True
                self._cond.notify()
            self._thread.join(timeout)
        return f"{self.ran} ticks run, {self.skipped} stale ticks skipped"


# ----------------------------------------------------------------------------- input_timing: sample
INPUT_TIMINGS = ("tick_grid", "sample")
# How early a sample may be and still be the tick the schedule (SampleTicks) expects: half a 1 kHz
# sample period, so with a 1 kHz source the sample 1 ms after a tick is skipped and the one due is
# taken (500 Hz, never 333 Hz because a sample came 10 us early); a 500 Hz source ticks on every sample.
SAMPLE_TICK_TOLERANCE_NS = 500_000
IMU_MAX_AGE_NS = 20_000_000     # sample mode: the newest /imu may be this much older than the joint state


class SampleTicks:
    """Which sensor samples become control ticks with ``input_timing: sample`` (hardware stamps,
    off our 2 ms grid), and the nodes' time ``t`` of a tick.

    Ticks follow a schedule that advances one control period per tick from the first tick's stamp
    (``due`` = the next tick's scheduled stamp): a sample stamped at or after ``due - tolerance``
    becomes the next tick. Advancing the schedule, not the last tick's actual stamp, keeps one tick
    per period under stamp jitter: a late sample does not push the next tick later (with a 1 kHz
    source the sample 1 ms after the due one would otherwise be skipped and that period lose its
    tick). A sample more than a period behind the schedule re-anchors it (a pause, a dropped burst).

    Two ticks are at least ``tolerance`` apart.

    ``status(ns)`` of a sample stamped ``ns`` [ns]: ``NEW`` (it becomes a tick), ``REPEAT`` (the last
    tick's stamp again: answer again), ``STALE`` (older than the last tick) or ``SKIP`` (before the
    schedule: rate limit, e.g. a 1 kHz source -> 500 Hz). ``take(ns)`` records a tick. ``t(ns)`` [s] =
    ``(ns - first tick's ns) * 1e-9``: the first tick is t = 0, as tick 0 of ``tick_grid`` (for
    samples stamped ``k * 2 ms`` from 0 the two agree exactly, same float)."""

    NEW, REPEAT, STALE, SKIP = TickSync.NEW, TickSync.REPEAT, TickSync.STALE, "skip"

    def __init__(self, control_period_ns: int = CONTROL_PERIOD_NS, tolerance_ns: int = SAMPLE_TICK_TOLERANCE_NS):
        self.period_ns = int(control_period_ns)
        self.tolerance_ns = int(tolerance_ns)
        self.first_ns: int | None = None
        self.last_ns: int | None = None
        self.due_ns: int | None = None  # scheduled stamp of the next tick
        self.count = 0                  # ticks taken
        self.reanchors = 0              # times a sample came more than a period behind the schedule

    def status(self, ns: int) -> str:
        last = self.last_ns
        if last is None:
            return self.NEW
        if ns == last:
            return self.REPEAT
        if ns < last:
            return self.STALE
        # on the schedule, and never closer than the tolerance to the last tick (a late tick followed
        # at once by the next on-time sample)
        return self.NEW if ns >= self.due_ns - self.tolerance_ns and ns - last >= self.tolerance_ns else self.SKIP

    def take(self, ns: int) -> int:
        """Record the tick stamped ``ns``; returns its index (0 for the first)."""
        if self.first_ns is None:
            self.first_ns = ns
            self.due_ns = ns
        due = self.due_ns + self.period_ns
        if ns >= due - self.tolerance_ns:       # more than a period behind: start the schedule here
            due = ns + self.period_ns
            self.reanchors += 1
        self.due_ns = due
        self.last_ns = ns
        self.count += 1
        return self.count - 1

    def t(self, ns: int) -> float:
        return (ns - self.first_ns) * 1e-9


class TickOutputs:
    """What the estimator and controller nodes share about a tick's outputs: ``_last_out`` (the tick's
    ``(publisher, value)`` pairs), re-sent when the bridge re-publishes a tick's samples because its answer
    got lost (start-up), and the count of rejected inputs, each logged at most once a second."""

    _last_out: list = []
    rejected = 0

    def _resend(self) -> None:
        """The bridge re-publishes a tick's samples when its answer got lost (start-up): answer again."""
        for pub, value in self._last_out:
            pub.publish_value(value)

    def _reject(self, what: str, reason: str) -> None:
        self.rejected += 1
        self.get_logger().warning(f"rejected {what}: {reason}", throttle_duration_sec=1.0)

    def destroy_node(self):
        """The closing line (``ticks``: the node's :class:`NewestTickRunner`, absent when the node was
        stopped while starting up: Ctrl-C, a dead peer), then the node's own clean-up."""
        ticks = getattr(self, "ticks", None)
        if ticks is not None:
            self.get_logger().info(f"{ticks.close()}, {self.rejected} inputs rejected")
        super().destroy_node()
