"""Compile the stack's numba kernels into their on-disk cache (``python -m legged_wbc.tools.bench.warmup``,
run by ``setup.sh``): every module of :data:`legged_wbc.jit.KERNEL_MODULES` with its warm-up, then a
few ticks of the default robot's headless walk."""

from __future__ import annotations

import importlib
import sys

from legged_wbc.jit import KERNEL_MODULES


def warm_all() -> None:
    """Import every module of :data:`KERNEL_MODULES` and run its warm-up, then a few ticks of the
    default robot's headless walk (the controller's stage kernels and the estimator's cycle kernel
    are compiled for their records' types when a controller or an estimator is built, which no
    module warm-up can know): afterwards the stack's kernels are in numba's cache for this CPU
    (compiled now if they were not)."""
    for name, fn in KERNEL_MODULES.items():
        module = importlib.import_module(name)
        if fn is not None:
            getattr(module, fn)()
    from legged_wbc.closed_loop import ClosedLoop
    from legged_wbc.scenario import load_scenario

    for mode in ("cbf", "damping"):
        ClosedLoop(load_scenario("paper"), mode).run(0.02, stop_on_fall=False)


def main() -> int:
    warm_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
