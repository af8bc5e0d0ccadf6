"""Benchmarks: the controller cycle against its reference path (:mod:`.bench_cycle`), the real-time
stack (:mod:`.bench_realtime`), a slower machine emulated (:mod:`.slow_cpu`) and the kernels' warm-up
(:mod:`.warmup`, run by ``setup.sh``).

May import: what :mod:`legged_wbc.tools.analysis` may, that room, :mod:`legged_wbc.ros.tooling` and
:mod:`legged_wbc.ros.stack`.
"""
