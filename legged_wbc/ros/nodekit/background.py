"""Periodic publications off the control path: one daemon thread per process (:func:`every`), not rclpy timers.

``/diagnostics`` (1 Hz) and ``/tf`` (``tf_rate``) are built from what the nodes keep anyway. As rclpy
timers they cost what a wake-up of the executor costs: measured ~1 ms of CPU per timer firing with the
container's five nodes (the executor rebuilds its wait set over every entity), plus one more wake-up per
message the recorder then took through DDS; at 20 Hz that was +160 us of CPU per control tick of
``walking_container`` without recording and +430 us with it (``bench realtime``, before -> after; from this
thread: +43 / -10 us in two alternating pairs, within the noise). Here a
job runs in a plain thread that sleeps on the steady clock, and :func:`publish` hands a message to the
in-process subscribers (the container's recorder: its thread-safe sink) directly and to DDS only when a
subscriber outside the process is matched; nothing wakes the executor.
"""

from __future__ import annotations

import heapq
import itertools
import os
import threading
import time
import traceback


class _Jobs:
    """The process's background thread and its schedule (started at the first job)."""

    def __init__(self):
        self.cond = threading.Condition()
        self.heap: list = []
        self.seq = itertools.count()
        self.thread: threading.Thread | None = None
        self.pending = 0                          # one-shot jobs not run yet

    def drain(self, timeout: float) -> bool:
        """Wait until every one-shot job added so far has run; False after ``timeout`` s."""
        t_end = time.monotonic() + timeout
        with self.cond:
            while self.pending > 0:
                left = t_end - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(left)
        return True

    def add(self, period: float, fn, name: str) -> "Job":
        """``period`` > 0: every ``period`` s; 0: once, now (after the one-shot jobs added before it)."""
        job = Job(period, fn, name)
        with self.cond:
            if period <= 0:
                self.pending += 1
            heapq.heappush(self.heap, (time.monotonic() + max(period, 0.0), next(self.seq), job))
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="off_path_publications", daemon=True)
                self.thread.start()
            self.cond.notify()
        return job

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.heap or self.heap[0][0] > time.monotonic():
                    self.cond.wait(None if not self.heap else max(0.0, self.heap[0][0] - time.monotonic()))
                t, _, job = heapq.heappop(self.heap)
            if job.period <= 0:                   # a one-shot job (soon): run once, whatever happens
                self._run_once(job)
                continue
            if job.cancelled:
                continue
            _below_the_control_thread()
            try:
                job.fn()
            except Exception:                      # a job that fails is said once and stopped
                if not job.cancelled:             # (not when its node was being destroyed meanwhile)
                    print(f"[{job.name}] stopped: {traceback.format_exc().strip().splitlines()[-1]}", flush=True)
                job.cancelled = True
                continue
            with self.cond:                       # the next slot; a late job skips the slots it missed
                nxt = t + job.period
                now = time.monotonic()
                if nxt < now:
                    nxt += job.period * ((now - nxt) // job.period + 1)
                heapq.heappush(self.heap, (nxt, next(self.seq), job))

    def _run_once(self, job: "Job") -> None:
        """A one-shot job: run (unless cancelled), say a failure in one line, count it done."""
        try:
            if not job.cancelled:
                _below_the_control_thread()
                job.fn()
        except Exception:                          # said, and the next one-shot job runs all the same
            print(f"[{job.name}] failed: {traceback.format_exc().strip().splitlines()[-1]}", flush=True)
        finally:
            with self.cond:
                self.pending -= 1
                self.cond.notify_all()


_control_thread: int | None = None       # native id of the process's realtime control thread (set_control_thread)


def set_control_thread(native_id: int | None) -> None:
    """The process's realtime control thread is ``native_id`` (the control part's: the host link's receiver
    thread, not the main thread); None: the main thread."""
    global _control_thread
    _control_thread = native_id


def _below_the_control_thread() -> None:
    """With a realtime control thread (``SCHED_FIFO``, realtime mode: the container's main thread, or the
    one :func:`set_control_thread` named), run at the FIFO priority just below it. A normal-priority thread
    holding the GIL can be preempted by any other process on a loaded machine, and the control thread then
    waits for the GIL until the holder runs again (priority inversion: measured 6 -> 13 % ticks commanded
    late at load 4-5); at FIFO it finishes its short job first. Nothing is changed otherwise; fails soft."""
    try:
        main = _control_thread or threading.main_thread().native_id
        if os.sched_getscheduler(main) != os.SCHED_FIFO:
            return
        want = max(1, os.sched_getparam(main).sched_priority - 1)
        if os.sched_getscheduler(0) != os.SCHED_FIFO or os.sched_getparam(0).sched_priority != want:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(want))
    except (OSError, AttributeError):
        pass


class Job:
    """A periodic job; :meth:`cancel` stops it (before its next run)."""

    def __init__(self, period: float, fn, name: str):
        self.period, self.fn, self.name = float(period), fn, name
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


_JOBS = _Jobs()


def every(period_s: float, fn, name: str = "job") -> Job:
    """Run ``fn()`` every ``period_s`` seconds (steady clock) in the process's background thread."""
    if period_s <= 0:
        raise ValueError(f"period must be > 0, got {period_s}")
    return _JOBS.add(period_s, fn, name)


def soon(fn, name: str = "job") -> Job:
    """Run ``fn()`` once, as soon as the background thread gets to it (one-shot jobs in the order given):
    what ``realtime_tools::RealtimePublisher`` does for a control loop, the loop hands over what an
    observer's message needs and the message is built and published off its path."""
    return _JOBS.add(0.0, fn, name)


def drain(timeout: float = 2.0) -> bool:
    """Wait until the one-shot jobs given so far (:func:`soon`) have run; False after ``timeout`` s."""
    return _JOBS.drain(timeout)


def for_node(node, period_s: float, fn, name: str) -> Job:
    """:func:`every`, cancelled when ``node`` is destroyed (its ``destroy_node`` is wrapped) or its context
    shut down."""
    def run():
        if node.context.ok():
            fn()

    job = every(period_s, run, name)
    destroy = node.destroy_node

    def destroy_node(*a, **kw):
        job.cancel()
        return destroy(*a, **kw)

    node.destroy_node = destroy_node
    return job


def subscribed(pub) -> bool:
    """Anyone to publish for: a co-located subscription or a matched DDS one (``IntraPublisher``), or a
    matched subscription of a plain rclpy publisher."""
    has = getattr(pub, "has_subscribers", None)
    return bool(has()) if has is not None else pub.get_subscription_count() > 0


def publish(pub, msg) -> None:
    """Publish ``msg`` (a message, or its CDR ``bytes``) from the background thread. A container's
    ``IntraPublisher``: :meth:`~legged_wbc.ros.transport.intra_process.IntraPublisher.publish_now` (its in-process
    subscribers now, in this thread, never deferred to the control thread; DDS and a host link only
    for subscribers there). Anything else: ``publish`` (rclpy publishes bytes as they are)."""
    now = getattr(pub, "publish_now", None)
    if now is None:
        pub.publish(msg)
    else:
        now(msg)
