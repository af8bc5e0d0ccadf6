"""Idle polling: keep idle CPUs from halting while a realtime loop runs.

A realtime loop that sleeps between its 2 ms ticks wakes up on cold caches when its vCPU halted in
between: the hypervisor deschedules a halted vCPU, and waking it again is an interrupt to a vCPU that
must first be scheduled back in. Real-time Linux set-ups forbid deep idle states (``idle=poll`` on the
kernel command line, or a PM QoS request of 0 us on ``/dev/cpu_dma_latency``, which leaves a cpuidle
driver only its polling state: :func:`legged_wbc.ros.stack.composition.hold_cpu_wakeup_latency`). The PM QoS
request needs a cpuidle driver to act on, though: on a VM whose kernel runs without one
(``/sys/devices/system/cpu/cpuidle/current_driver`` is ``none`` or absent) the idle loop halts whatever is
asked. There, :class:`IdlePollers` does the same from user space: one process per CPU, at ``SCHED_IDLE``
(it runs only when nothing else at all wants that CPU, and yields it at once when something does),
spinning, so that an idle CPU is never halted.

What it bought, measured on such a VM (no cpuidle driver, speed index 3950-5195 us; ``docs/realtime.md``,
*What a wake-up costs*): the split layout's control part started its tick 75 against 124 us at the median,
111 against 619 us at p90 after the sim part sent it; deadline misses 2.85-3.29 -> 1.03-1.66 % (20 s,
recording, alternated three times).

The price is the PM QoS request's: an idle CPU spins instead of halting (power; on a VM, host CPU time
the host could have given another guest). The pollers' CPU time is idle time spent spinning, not load:
``legged-wbc bench realtime`` lists them as ``idle_poller`` and leaves them out of the stack's figures.
``mode``: ``auto`` (poll only where the PM QoS request cannot: no cpuidle driver), ``always``, ``never``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

POLLER_NAME = "idle_poller"         # the pollers' process name (``comm``), as ps and the bench show it
MODES = ("auto", "always", "never")   # not on/off: a ROS parameter of YAML text "off" is the bool false
CPUIDLE_DRIVER = "/sys/devices/system/cpu/cpuidle/current_driver"

# the poller: no import of this package (a bare interpreter starts in ~20 ms); it renames itself, dies with
# its parent (PR_SET_PDEATHSIG), pins itself to its CPU at SCHED_IDLE and spins
_POLLER = f"""
import ctypes, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(15, b"{POLLER_NAME}", 0, 0, 0)
libc.prctl(1, signal.SIGKILL, 0, 0, 0)
if os.getppid() != int(sys.argv[2]):
    sys.exit(0)
os.sched_setaffinity(0, {{int(sys.argv[1])}})
os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
while True:
    pass
"""


def cpuidle_driver(path: str = CPUIDLE_DRIVER) -> str | None:
    """The kernel's cpuidle driver (``haltpoll``, ``intel_idle``, ``acpi_idle``, ...), or None when there is
    none (``none``, or no cpuidle in the kernel)."""
    try:
        with open(path) as fh:
            name = fh.read().strip()
    except OSError:
        return None
    return None if name in ("", "none") else name


def wanted(mode: str, driver: str | None) -> bool:
    """Poll in user space? ``auto``: only when there is no cpuidle driver (a PM QoS request then cannot keep
    idle CPUs polling)."""
    if mode not in MODES:
        raise ValueError(f"idle_poll must be one of {', '.join(MODES)}, not {mode!r}")
    return mode == "always" or (mode == "auto" and driver is None)


class IdlePollers:
    """One ``SCHED_IDLE`` spinning process per CPU of ``cpus`` while this object lives (:meth:`stop`; they
    also die with the process that started them)."""

    def __init__(self, cpus):
        self.cpus = sorted(cpus)
        self.procs = [subprocess.Popen([sys.executable, "-S", "-c", _POLLER, str(c), str(os.getpid())],
                                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL) for c in self.cpus]

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
        for p in self.procs:
            try:
                p.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                pass
        self.procs = []


def start_idle_pollers(mode: str, log, driver: str | None | bool = False) -> IdlePollers | None:
    """Idle pollers on every CPU this process may run on, if ``mode`` wants them (:func:`wanted`; ``driver``:
    the cpuidle driver, read from the kernel when not given); one line says so. None when not wanted or
    they could not start (one warning)."""
    drv = cpuidle_driver() if driver is False else driver
    if not wanted(mode, drv):
        return None
    cpus = os.sched_getaffinity(0)
    try:
        pollers = IdlePollers(cpus)
    except OSError as exc:
        log.warning(f"no idle polling ({exc}); idle CPUs may halt between ticks")
        return None
    why = ("idle_poll: always" if mode == "always"
           else "no cpuidle driver: a PM QoS request cannot keep idle CPUs from halting")
    log.info(f"idle polling on CPU {', '.join(map(str, pollers.cpus))} ({POLLER_NAME} at SCHED_IDLE; {why})")
    return pollers


def stop_idle_pollers(pollers: IdlePollers | None) -> None:
    if pollers is not None:
        pollers.stop()
