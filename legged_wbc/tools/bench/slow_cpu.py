"""Emulate a slower machine: real-time "steal" tasks take a fixed share of every CPU in fine slices.

A 500 Hz stack that keeps its deadlines here must keep them on the slower machines of our kind (the
same 2 cores, ~3x slower). :func:`slow_cpus` makes this machine one of those: on each CPU a process
with ``SCHED_FIFO`` priority :data:`STEAL_PRIORITY` (above the container's control thread, priority 10)
spins for a share ``1 - 1/factor`` of every :data:`SLICE_S` and sleeps the rest, so every other
thread on that CPU, the control thread included, runs at ``1/factor`` of its speed with a granularity
of a fraction of a millisecond: each tick's computation takes ``factor`` times longer, as on a slower
CPU. The busy time is adjusted every slice to the measured sleep (a sleep overshoots by tens of us), so
the share holds. Linux's real-time throttling (95 % by default) keeps the machine usable.

Why not a cgroup CPU quota (``cpu.cfs_quota_us``): a quota caps a group's *average* CPU over a period
of at least ~1 ms and lets a thread run at full speed until the budget is spent, then stalls it for the
rest of the period. A control loop that needs 20 % of a core is then never slowed at all (its latency
stays this machine's) until the cap binds, and when it binds, it stalls for whole milliseconds, which
no slower CPU does. The steal tasks slow every slice instead: the latency and the utilization both
scale by ``factor``. Check an emulation with ``legged-wbc bench cycle`` under it (its reference path's
p50 is the machine's speed index: it grows ~``factor`` times).

Needs ``CAP_SYS_NICE`` (root): without it :func:`slow_cpus` raises ``PermissionError`` with one line.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import time

STEAL_PRIORITY = 50      # SCHED_FIFO priority of the steal tasks (the container's control thread: 10)
SLICE_S = 300e-6         # one busy + sleep cycle [s]


def _steal(cpu: int, factor: float, stop, ready) -> None:
    os.sched_setaffinity(0, {cpu})
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(STEAL_PRIORITY))
    except PermissionError:
        ready.put(f"no permission for SCHED_FIFO on CPU {cpu} (needs root / CAP_SYS_NICE)")
        return
    ready.put("")
    share = 1.0 - 1.0 / factor
    busy = share * SLICE_S
    clock = time.perf_counter
    parent, n = os.getppid(), 0
    while not stop.is_set():
        n += 1
        if n % 1000 == 0 and os.getppid() != parent:   # orphaned (the caller was killed): stop stealing
            return
        t0 = clock()
        while clock() - t0 < busy:
            pass
        t1 = clock()
        time.sleep(max(SLICE_S - busy, 20e-6))
        slept = clock() - t1
        busy = share / (1.0 - share) * slept   # keep busy / (busy + slept) at the share


@contextlib.contextmanager
def slow_cpus(factor: float, cpus: list[int] | None = None):
    """Within the block, every CPU of ``cpus`` (default: all this process may use) runs other threads at
    ``1/factor`` of its speed. ``factor`` <= 1: no emulation."""
    if factor <= 1.0:
        yield
        return
    cpus = sorted(os.sched_getaffinity(0)) if cpus is None else cpus
    ctx = mp.get_context("spawn")
    stop, ready = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_steal, args=(c, factor, stop, ready), daemon=True) for c in cpus]
    for p in procs:
        p.start()
    try:
        errors = [e for e in (ready.get(timeout=30) for _ in procs) if e]
        if errors:
            raise PermissionError(errors[0])
        yield
    finally:
        stop.set()
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()


def main(argv: list[str] | None = None) -> int:
    """``python -m legged_wbc.tools.bench.slow_cpu FACTOR -- CMD ...``: run CMD on a machine FACTOR times slower."""
    import subprocess
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3 or args[1] != "--":
        print("usage: python -m legged_wbc.tools.bench.slow_cpu FACTOR -- CMD [ARGS ...]", file=sys.stderr)
        return 2
    try:
        with slow_cpus(float(args[0])):
            return subprocess.call(args[2:])
    except PermissionError as exc:
        print(f"slow_cpu: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
