"""The numba kernels of the stack: a one-line notice when a process has to compile them, and the
table of kernel modules the warm-up (:mod:`legged_wbc.tools.warmup`, run by ``setup.sh``) compiles.

The kernels are ``@njit(cache=True)``: the first call of each compiles it (or loads it from numba's
on-disk cache, ``__pycache__`` next to the module, or ``$NUMBA_CACHE_DIR``). A compile happens on
the first run after an install, after a change of the kernel module's source (numba keys its cache
on the source file's content) or of numba's version, and on a CPU the cache was not built for (the
cache key holds the CPU name and features). It takes ~20-30 s for all of them; a process that loads
them from the cache takes well under a second.

:func:`announce_compiles` (called by every kernel module at import) makes the process print
:data:`NOTICE` to stderr once, at the start of its first real compile of one of those modules'
kernels: numba broadcasts a ``"numba:compile"`` event only after its disk cache missed for that
signature (``Dispatcher.compile``: cache load first, the event around the compiler), so a process
that loads every kernel from the cache prints nothing. No ROS import here (math modules use it).
"""

from __future__ import annotations

import sys
import threading

# every module with numba kernels -> its warm-up function (compiles / loads every kernel of the
# module for the argument types the stack calls it with)
KERNEL_MODULES = {
    "state_estimator.kernels": "warm_up",
    "state_estimator.support_plane": None,       # compiled by the estimator's construction (its warm_up)
    "wbc_controller.kernels": "warmup",
    # kernels compiled by the warm-ups above and the walk below (they call them): imported only
    "legged_wbc.gait": None,
    "legged_wbc.kinematics": None,
    "wbc_controller.ldp": None,
    **{f"wbc_controller.blocks.{m}": None for m in ("cbf", "compensation", "contact", "floating_base", "friction",
                                                       "joint_limits", "swing", "tasks", "torque")},
}

NOTICE = ("legged_wbc: compiling the estimator/controller kernels for this CPU "
          "(first run after an install or a code change, ~20-30 s; cached afterwards)...")

_modules: set[str] = set()
_lock = threading.Lock()
_listener = None
_announced = False


def _make_listener():
    from numba.core import event

    class _CompileNotice(event.Listener):
        def on_start(self, ev):
            global _announced
            disp = (ev.data or {}).get("dispatcher")
            module = getattr(getattr(disp, "py_func", None), "__module__", None)
            if _announced or module not in _modules:
                return
            _announced = True
            print(NOTICE, file=sys.stderr, flush=True)

        def on_end(self, ev):
            pass

    listener = _CompileNotice()
    event.register("numba:compile", listener)
    return listener


def announce_compiles(module: str) -> None:
    """Print :data:`NOTICE` (once per process, stderr) when a kernel of ``module`` (its
    ``__name__``) is about to be compiled rather than loaded from numba's cache."""
    global _listener
    with _lock:
        _modules.add(module)
        if _listener is None:
            _listener = _make_listener()


def announced() -> bool:
    """Whether this process has printed :data:`NOTICE` (it compiled a kernel)."""
    return _announced
