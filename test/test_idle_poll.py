"""Idle polling (``legged_wbc.idle_poll``): SCHED_IDLE spinners keep idle CPUs from halting where a PM QoS
request cannot (no cpuidle driver)."""

import os
import subprocess
import sys
import time

import pytest

from legged_wbc.idle_poll import POLLER_NAME, IdlePollers, cpuidle_driver, start_idle_pollers, stop_idle_pollers, wanted
from logs import Log


def _stat(pid: int) -> tuple[str, str, int]:
    """(comm, state, policy) of a live process."""
    raw = open(f"/proc/{pid}/stat").read()
    comm = raw[raw.index("(") + 1:raw.rindex(")")]
    rest = raw[raw.rindex(")") + 2:].split()
    return comm, rest[0], int(rest[38])      # field 41: policy


def _wait_renamed(pid: int, timeout: float = 10.0) -> tuple[str, str, int]:
    t_end = time.monotonic() + timeout
    while True:
        st = _stat(pid)
        if st[0] == POLLER_NAME and st[2] == os.SCHED_IDLE or time.monotonic() > t_end:
            return st
        time.sleep(0.02)


def test_auto_polls_only_without_a_cpuidle_driver(tmp_path):
    assert wanted("auto", None) and not wanted("auto", "haltpoll")
    assert wanted("always", "haltpoll") and not wanted("never", None)
    with pytest.raises(ValueError, match="idle_poll"):
        wanted("off", None)                   # the YAML trap: a parameter "off" would be the bool false
    (tmp_path / "drv").write_text("none\n")
    assert cpuidle_driver(str(tmp_path / "drv")) is None
    (tmp_path / "drv").write_text("haltpoll\n")
    assert cpuidle_driver(str(tmp_path / "drv")) == "haltpoll"
    assert cpuidle_driver(str(tmp_path / "missing")) is None
    log = Log()
    assert start_idle_pollers("auto", log, driver="haltpoll") is None and log.lines == []
    assert start_idle_pollers("never", log, driver=None) is None and log.lines == []


def test_pollers_spin_at_sched_idle_on_each_cpu_and_stop():
    log = Log()
    pollers = start_idle_pollers("always", log, driver="haltpoll")
    try:
        assert pollers is not None and pollers.cpus == sorted(os.sched_getaffinity(0))
        assert len(log.lines) == 1 and "idle polling on CPU" in log.lines[0][1]
        for pid, cpu in zip(pollers.pids(), pollers.cpus):
            comm, state, policy = _wait_renamed(pid)
            assert comm == POLLER_NAME and policy == os.SCHED_IDLE, (comm, policy)
            assert os.sched_getaffinity(pid) == {cpu}
        # they spin: CPU time grows (at SCHED_IDLE they get what nothing else wants; a few ms in 0.3 s at least)
        def cpu_s(pid):
            rest = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")
        before = [cpu_s(p) for p in pollers.pids()]
        time.sleep(0.3)
        assert sum(cpu_s(p) for p in pollers.pids()) > sum(before)
        pids = pollers.pids()
    finally:
        stop_idle_pollers(pollers)
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or _stat(pid)[1] == "Z"


def test_pollers_die_with_the_process_that_started_them():
    """A container killed with SIGKILL leaves no spinner behind (PR_SET_PDEATHSIG)."""
    code = ("import sys, time; from legged_wbc.idle_poll import IdlePollers; p = IdlePollers([0]); "
            "print(p.pids()[0], flush=True); time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(parent.stdout.readline())
        assert _wait_renamed(pid)[0] == POLLER_NAME
        parent.kill()
        parent.wait()
        t_end = time.monotonic() + 5.0
        while os.path.exists(f"/proc/{pid}") and _stat(pid)[1] != "Z" and time.monotonic() < t_end:
            time.sleep(0.02)
        assert not os.path.exists(f"/proc/{pid}") or _stat(pid)[1] == "Z"
    finally:
        if parent.poll() is None:
            parent.kill()


def test_idle_pollers_object_with_no_cpus_is_harmless():
    p = IdlePollers([])
    assert p.pids() == []
    p.stop()
