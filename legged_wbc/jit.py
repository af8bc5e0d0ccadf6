"""The numba kernels of the stack: a one-line notice when a process has to compile them, and the
table of kernel modules the warm-up (:mod:`legged_wbc.tools.bench.warmup`, run by ``setup.sh``) compiles.

The kernels are ``@njit(cache=True)``: the first call of each compiles it (or loads it from numba's
on-disk cache). A compile happens on the first run after an install, after a change of any kernel
module's source or of numba's version, and on a CPU the cache was not built for (the cache key holds
the CPU name and features). It takes ~20-75 s for all of them (by the machine); a process that loads them from the
cache takes well under a second.

Where the cache lives: ``$NUMBA_CACHE_DIR`` (else ``.numba_cache`` at the checkout's root), in a
directory named after a digest of every kernel module's source (:func:`kernel_sources_digest`).
numba alone keys a kernel's entry on its *own* file: a kernel of ``wbc_controller/kernels.py`` that
calls a block of ``wbc_controller/blocks/friction.py`` kept running the old block's machine code after
that block changed, silently, until the cache was deleted. With the digest, a change of any kernel
module starts a fresh cache (and the default location's stale ones are removed).

:func:`announce_compiles` (called by every kernel module at import) makes the process print
:data:`NOTICE` to stderr once, at the start of its first real compile of one of those modules'
kernels: numba broadcasts a ``"numba:compile"`` event only after its disk cache missed for that
signature (``Dispatcher.compile``: cache load first, the event around the compiler), so a process
that loads every kernel from the cache prints nothing. No ROS import here (math modules use it).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]     # the checkout (or the install's site-packages)

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
                                                       "joint_limits", "leg_collision", "swing", "tasks",
                                                       "torque")},
}

NOTICE = ("legged_wbc: compiling the estimator/controller kernels for this CPU "
          "(first run after an install or a code change, ~20-75 s; cached afterwards)...")

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


def kernel_sources_digest(root: Path = ROOT) -> str:
    """16 hex digits of a SHA-256 over every kernel module's name and source (:data:`KERNEL_MODULES`,
    the files under ``root``)."""
    h = hashlib.sha256()
    for mod in sorted(KERNEL_MODULES):
        h.update(mod.encode() + b"\0")
        h.update(root.joinpath(*mod.split(".")).with_suffix(".py").read_bytes())
    return h.hexdigest()[:16]


def _key_numba_cache() -> str:
    """Point numba's cache at ``<base>/<digest>`` (see the module docstring); returns that directory.
    Runs when this module is imported, which every kernel module does before it defines a kernel
    (numba picks a kernel's cache directory when the decorator runs)."""
    from numba.core import config

    user = os.environ.get("NUMBA_CACHE_DIR")
    base = Path(user) if user else ROOT / ".numba_cache"
    digest = kernel_sources_digest()
    if not user and base.is_dir():                 # our own location: the other digests are stale
        for d in base.iterdir():
            if d.is_dir() and d.name != digest and len(d.name) == 16:
                shutil.rmtree(d, ignore_errors=True)
    config.CACHE_DIR = str(base / digest)
    return config.CACHE_DIR


CACHE_DIR = _key_numba_cache()
