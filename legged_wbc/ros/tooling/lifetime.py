"""A process's lifetime: children that die with their parent, and the exit status of a node stopped by a signal.

* :func:`die_with_parent`: a ``preexec_fn`` for ``subprocess.Popen`` that sets the child's parent-death
  signal (Linux ``prctl(PR_SET_PDEATHSIG)``) before it execs, so a launcher killed by ``kill -9`` still takes
  its nodes with it. The kernel sends the signal when the *thread* that forked the child ends: call ``Popen``
  from a thread that lives as long as its children (the launcher's ``run``).
* :class:`StopSignals`: which of SIGINT / SIGTERM reached this process while a node's ``main`` ran (whatever
  handlers ``main`` installs), through the interpreter's signal wake-up fd; :func:`exit_status` turns it into
  the convention of the stack's processes: a node stopped by a signal exits ``128 + signum`` (130 after
  SIGINT, 143 after SIGTERM), so a launcher can tell a node it stopped from one stopped from outside.
"""

from __future__ import annotations

import os
import signal

PR_SET_PDEATHSIG = 1                      # <linux/prctl.h>
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def die_with_parent(sig: int = signal.SIGTERM):
    """A ``preexec_fn``: the child gets ``sig`` when the calling thread of this process ends (its parent dies).

    Made in the parent (libc's ``prctl`` resolved, the parent's pid taken here), so the child between fork and
    exec only makes the call. If the parent died before the call took effect (the child's parent is then
    already another process), the child exits ``128 + sig`` instead of running an orphan."""
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()
    signum = int(sig)

    def set_parent_death_signal() -> None:
        if prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:
            os._exit(128 + signum)

    return set_parent_death_signal


class StopSignals:
    """Records the SIGINT / SIGTERM that reach the process while it is open (main thread only).

    It uses ``signal.set_wakeup_fd``: the interpreter writes the number of every signal that has a Python
    handler (the node's own, or Python's default SIGINT handler) to a pipe, whichever handler runs; a signal
    set to ``SIG_IGN`` (a node ignoring late stop signals once its work is saved) is not recorded."""

    def __init__(self):
        self._r, self._w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._old = signal.set_wakeup_fd(self._w, warn_on_full_buffer=False)
        self._seen: list[int] = []

    def first(self) -> int | None:
        """The first stop signal received so far, or None."""
        while True:
            try:
                data = os.read(self._r, 256)
            except BlockingIOError:
                break
            if not data:
                break
            self._seen += [b for b in data if b in STOP_SIGNALS]
        return self._seen[0] if self._seen else None

    def close(self) -> None:
        self.first()
        signal.set_wakeup_fd(self._old)
        os.close(self._r)
        os.close(self._w)


def exit_status(rc: int | None, stop_signal: int | None) -> int:
    """A node's exit status: its ``main``'s ``rc`` (None = 0); ``128 + stop_signal`` when ``main`` ended
    cleanly (0) after a stop signal. A failure's own code is kept (it says more than the signal)."""
    rc = 0 if rc is None else int(rc)
    if rc == 0 and stop_signal is not None:
        return 128 + int(stop_signal)
    return rc
