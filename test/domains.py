"""ROS domain ids for the tests' own ROS processes, leased so that two test suites on one machine never share one.

Every pytest process takes a block of ids at its first call and holds an exclusive ``flock`` on one lock file per id
(``$TMPDIR/legged_wbc-ros-domain-<id>.lock``) until it exits; the kernel drops the locks when the process dies, so a
killed suite leaks nothing. Calls hand the block out round-robin, so a test's id was last used ``BLOCK`` ROS tests ago
(a straggler process of an earlier test is long gone). Ids 101-230: valid on Linux (Fast DDS's port formula ends at
232), clear of the default domain 0. The host link's socket name is per domain too, so it follows.
"""
from __future__ import annotations

import fcntl
import itertools
import os
import random
import tempfile

LOW, HIGH = 101, 230
BLOCK = 12
_held: list[int] = []
_fds: list[int] = []
_cycle = None


def _lease_block() -> None:
    ids = list(range(LOW, HIGH + 1))
    random.shuffle(ids)
    for domain in ids:
        path = os.path.join(tempfile.gettempdir(), f"legged_wbc-ros-domain-{domain}.lock")
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        _fds.append(fd)
        _held.append(domain)
        if len(_held) == BLOCK:
            return
    if not _held:
        raise RuntimeError(f"every ROS domain id {LOW}-{HIGH} is leased by another test process")


def domain_id() -> int:
    """A ROS domain id no other test process on this machine uses now (see the module's docstring)."""
    global _cycle
    if _cycle is None:
        _lease_block()
        _cycle = itertools.cycle(_held)
    return next(_cycle)
