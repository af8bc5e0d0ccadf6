"""The slower-machine emulation (``legged_wbc.tools.bench.slow_cpu``): steal tasks exist while it is on, run
with real-time priority on every CPU, take their share from a CPU-bound thread, and are gone after."""

from __future__ import annotations

import os
import time

import pytest

from legged_wbc.tools.bench.slow_cpu import STEAL_PRIORITY, slow_cpus


def _children() -> set[int]:
    me = os.getpid()
    out = set()
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                stat = open(f"/proc/{p}/stat").read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == me:
                out.add(int(p))
    return out


def test_steal_tasks_take_their_share_of_a_cpu_bound_thread():
    if os.geteuid() != 0:
        pytest.skip("needs root (SCHED_FIFO)")
    before = _children()
    cpu = sorted(os.sched_getaffinity(0))[0]
    old = os.sched_getaffinity(0)
    with slow_cpus(3.0):
        steal = _children() - before
        rt = [p for p in steal if os.sched_getscheduler(p) == os.SCHED_FIFO
              and os.sched_getparam(p).sched_priority == STEAL_PRIORITY]
        assert len(rt) == len(old)                      # one per CPU, real-time
        os.sched_setaffinity(0, {cpu})
        try:
            w0, c0 = time.perf_counter(), time.thread_time()
            while time.perf_counter() - w0 < 0.5:       # CPU-bound, on one CPU
                pass
            share = (time.thread_time() - c0) / (time.perf_counter() - w0)
        finally:
            os.sched_setaffinity(0, old)
    # the steal task takes 2/3 of the CPU whatever else runs: this thread gets at most ~1/3 (one-sided, so a
    # loaded machine cannot make it fail)
    assert share < 0.5, share
    time.sleep(0.2)
    assert not any(p in _children() for p in rt)       # gone after the block
