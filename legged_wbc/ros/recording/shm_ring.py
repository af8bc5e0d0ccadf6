"""A single-producer, single-consumer byte ring in shared memory (no rclpy, no serialization).

The container's control process hands every recorded message to the recorder process through one
:class:`RecordRing`: a ``multiprocessing.shared_memory`` segment holding a 64-byte header and a ring of
variable-length records, each ``[u32 payload size][u16 kind][u16 topic id][i64 stamp ns][payload]``
padded to 8 bytes. A record never wraps: when it does not fit before the end of the ring, the
producer writes a :data:`WRAP` marker (or leaves fewer than 16 bytes) and starts again at offset 0.

Positions are byte counters that only grow (offset = position % capacity). The producer appends records and
then publishes its write position (:meth:`RecordRing.commit`, once per batch: the container commits
after each sample), the consumer reads up to the published position and then publishes its read
position; both publications and their loads go through one
``multiprocessing.Lock`` (a futex: a memory barrier on every architecture, ~0.3 us uncontended), so a
record's bytes are visible before the position that covers them. The producer never waits: a record
that does not fit is **dropped and counted** (``dropped`` in the header), never lost silently.

Header (uint64 words): write position, read position, dropped records, producer state (0 open,
1 closed), consumer state (:data:`STARTING`, :data:`READY`, :data:`FAILED`, :data:`DONE`),
capacity, the producer's pid (0 until a producer of another process attaches, :meth:`RecordRing.set_producer`).

Two processes that are not parent and child (``layout:=split``: the control process writes into a ring
that the sim process's recorder process drains) cannot share a ``multiprocessing.Lock``; they use a
:class:`FileLock` instead (a POSIX record lock on the segment's file: a system call, ~1.3 us a lock and
unlock here against ~0.6 us, with the same ordering guarantee) and map the segment by name without
multiprocessing's resource tracker (:meth:`RecordRing.attach_file`).

Trust: a ring is a ``/dev/shm`` file of mode 0600 named ``legged_wbc_ring_<32 random hex digits>``
(:data:`RING_NAME`, 128 bits: not guessable). :meth:`RecordRing.attach_file` takes a name of that scheme
only (no path, no ``..``), opens it without following a symlink and maps it only if it is a regular file
of this user with mode 0600 and a header that fits it (else :class:`RingRefused`); :meth:`RecordRing.read`
raises :class:`RingCorrupt` for a record that runs past the published data or the ring's end.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import re
import secrets
import stat
import struct
from multiprocessing import shared_memory

import numpy as np

HEADER_BYTES = 64
REC = struct.Struct("<IHHq")        # payload size, kind, topic id, stamp [ns] (16 bytes)
_REC_PACK = REC.pack_into
ALIGN = 8
WRAP = 0xFFFF                       # kind: skip to the start of the ring

# consumer states
STARTING, READY, FAILED, DONE = 0, 1, 2, 3
_W, _R, _DROPPED, _CLOSED, _CONSUMER, _CAP, _PRODUCER, _SEALED = range(8)
SHM_DIR = "/dev/shm"                # where POSIX shared memory segments live (Linux)
RING_PREFIX = "legged_wbc_ring_"
RING_NAME = re.compile(RING_PREFIX + "[0-9a-f]{32}")   # the names create() gives: nothing else is attached


class RingRefused(OSError):
    """A ring that is not one of ours: a name outside :data:`RING_NAME`, a symlink, another user's file,
    a mode other than 0600, a header that does not fit the file."""


class RingCorrupt(ValueError):
    """A ring whose contents are not what a producer of the stack writes (a record past the published data
    or the ring's end; a descriptive record that fails its format check, :mod:`legged_wbc.ros.recording.ring_records`)."""


def check_ring_name(name) -> str:
    """``name`` if it is of the ring naming scheme (:data:`RING_NAME`), else :class:`RingRefused`."""
    if not isinstance(name, str) or not RING_NAME.fullmatch(name):
        raise RingRefused(f"{str(name)[:80]!r} is not a ring name of this stack ({RING_PREFIX}<32 hex digits>)")
    return name


def _padded(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


class FileLock:
    """A lock between processes that share no ``multiprocessing`` object: a POSIX record lock
    (``lockf``) on an open file (the segment's). Locks are per process: threads of one process must
    serialize among themselves (the ring's producer does, :class:`~legged_wbc.ros.recording.bag_process.RingSink`)."""

    def __init__(self, fd: int):
        self.fd = fd

    def __enter__(self):
        fcntl.lockf(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.lockf(self.fd, fcntl.LOCK_UN)
        return False


class _MappedSegment:
    """A shared-memory segment mapped by name (``/dev/shm/<name>``) without multiprocessing's resource
    tracker: attached through ``SharedMemory``, an unrelated process would register it with a tracker of
    its own, which unlinks it (under its creator) when that process exits. Same attributes as
    ``SharedMemory`` for :class:`RecordRing` (``buf``, ``name``, ``close``), plus ``fd``."""

    def __init__(self, name: str):
        self.name = check_ring_name(name)
        self.fd = os.open(os.path.join(SHM_DIR, name), os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            st = os.fstat(self.fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) != 0o600:
                raise RingRefused(f"ring {name}: not a file of this user with mode 0600 (uid {st.st_uid}, "
                                  f"mode {stat.S_IMODE(st.st_mode):o})")
            if st.st_size < HEADER_BYTES + 4096:
                raise RingRefused(f"ring {name}: {st.st_size} bytes, too small for a ring")
            self._mmap = mmap.mmap(self.fd, st.st_size)
        except BaseException:
            os.close(self.fd)
            raise
        self.buf = memoryview(self._mmap)

    def close(self) -> None:
        if self.buf is not None:
            self.buf.release()
            self.buf = None
            self._mmap.close()
            os.close(self.fd)


class RecordRing:
    """Both ends of the ring: :meth:`create` (producer), :meth:`attach` (consumer, a child of the
    creator) or :meth:`attach_file` (either end, any process on the machine)."""

    def __init__(self, shm: shared_memory.SharedMemory, lock, owner: bool):
        self.shm = shm
        self.lock = lock
        self.owner = owner
        self._hdr = np.ndarray((8,), dtype=np.uint64, buffer=shm.buf[:HEADER_BYTES])
        self.capacity = int(self._hdr[_CAP])
        self.buf = shm.buf[HEADER_BYTES:HEADER_BYTES + self.capacity]
        self._w = int(self._hdr[_W])          # producer: next write position (published by commit)
        self._r_seen = int(self._hdr[_R])     # producer: the consumer's read position, last looked up
        self._r = self._r_next = int(self._hdr[_R])   # consumer: next read position

    # ------------------------------------------------------------------ set-up
    @classmethod
    def create(cls, capacity: int, lock) -> "RecordRing":
        capacity = _padded(max(int(capacity), 4096))
        while True:
            try:                              # O_CREAT | O_EXCL, mode 0600
                shm = shared_memory.SharedMemory(RING_PREFIX + secrets.token_hex(16), create=True,
                                                 size=HEADER_BYTES + capacity)
                break
            except FileExistsError:           # 2**-128: never, but never a ring that is not new either
                continue
        hdr = np.ndarray((8,), dtype=np.uint64, buffer=shm.buf[:HEADER_BYTES])
        hdr[:] = 0
        hdr[_CAP] = capacity
        del hdr
        return cls(shm, lock, owner=True)

    @classmethod
    def attach(cls, name: str, lock) -> "RecordRing":
        return cls(shared_memory.SharedMemory(name=name), lock, owner=False)

    @classmethod
    def attach_file(cls, name: str) -> "RecordRing":
        """Attach ring ``name`` from any process (no ``multiprocessing`` object shared with its creator):
        mapped by name, locked with a :class:`FileLock` on the segment's file. Raises ``OSError``."""
        seg = _MappedSegment(name)
        cap, size = int(np.frombuffer(seg.buf[:HEADER_BYTES], dtype=np.uint64)[_CAP]), len(seg.buf)
        if cap < 4096 or cap % ALIGN or HEADER_BYTES + cap > size:
            seg.close()
            raise RingRefused(f"ring {name}: its header's capacity {cap} does not fit its {size} bytes")
        return cls(seg, FileLock(seg.fd), owner=False)

    @property
    def name(self) -> str:
        return self.shm.name

    def release(self) -> None:
        """Detach (and, for the producer, remove the segment)."""
        self._hdr = None
        self.buf.release()
        self.buf = None
        self.shm.close()
        if self.owner:
            self.shm.unlink()

    # ------------------------------------------------------------------ header fields
    @property
    def dropped(self) -> int:
        return int(self._hdr[_DROPPED])

    @property
    def closed(self) -> bool:
        return bool(self._hdr[_CLOSED])

    def close(self) -> None:
        """Producer: nothing more will come (the consumer drains and finishes). Seals the ring first: its
        final write position (:attr:`sealed`) tells the consumer that everything up to it was announced by
        the producer itself, and a closed word set from outside (no seal, or another position) apart."""
        with self.lock:
            self._hdr[_SEALED] = int(self._hdr[_W]) + 1
            self._hdr[_CLOSED] = 1

    @property
    def sealed(self) -> int | None:
        """The final write position the producer announced when it closed the ring (None: not sealed)."""
        s = int(self._hdr[_SEALED])
        return s - 1 if s else None

    @property
    def consumer_state(self) -> int:
        return int(self._hdr[_CONSUMER])

    def set_consumer_state(self, state: int) -> None:
        with self.lock:
            self._hdr[_CONSUMER] = state

    @property
    def producer_pid(self) -> int:
        """The pid of the producer that attached from another process (0: none yet)."""
        return int(self._hdr[_PRODUCER])

    def set_producer(self, pid: int) -> None:
        with self.lock:
            self._hdr[_PRODUCER] = pid

    def note_dropped(self, n: int = 1) -> None:
        """Producer: count ``n`` messages given up without a :meth:`put` of their own (a topic whose
        description did not fit, the other messages of a batch record that did not fit)."""
        self._hdr[_DROPPED] += n

    # ------------------------------------------------------------------ producer
    def put(self, kind: int, topic_id: int, t_ns: int, payload) -> bool:
        """Append one record (the consumer sees it after :meth:`commit`); False (and counted in
        ``dropped``) if the ring is full."""
        n = len(payload)
        need = 16 + ((n + 7) & ~7)                  # REC.size + the payload padded to 8 bytes
        cap = self.capacity
        w = self._w
        off = w % cap
        skip = cap - off if cap - off < need else 0  # the record starts again at offset 0
        if w + skip + need - self._r_seen > cap:
            with self.lock:
                self._r_seen = int(self._hdr[_R])
            if w + skip + need - self._r_seen > cap:
                self._hdr[_DROPPED] += 1         # only the producer writes this word
                return False
        buf = self.buf
        if skip:
            if skip >= 16:
                _REC_PACK(buf, off, 0, WRAP, 0, 0)
            w += skip
            off = 0
        _REC_PACK(buf, off, n, kind, topic_id, t_ns)
        buf[off + 16:off + 16 + n] = payload
        self._w = w + need
        return True

    @property
    def position(self) -> int:
        """Producer: the position the next record goes to (or after, past a wrap)."""
        return self._w

    def commit(self) -> None:
        """Publish every record put so far to the consumer."""
        with self.lock:
            self._hdr[_W] = self._w

    # ------------------------------------------------------------------ consumer
    def read(self, limit: int = 4096) -> list[tuple[int, int, int, memoryview]]:
        """Up to ``limit`` published records ``(kind, topic id, stamp ns, payload)``; the payloads are
        views into the ring, valid until :meth:`consumed`."""
        with self.lock:
            w_pub = int(self._hdr[_W])
        out = []
        cap = self.capacity
        r = self._r
        if not 0 <= w_pub - r <= cap:
            raise RingCorrupt(f"ring {self.name}: write position {w_pub} against read position {r} "
                              f"(capacity {cap})")
        while r < w_pub and len(out) < limit:
            off = r % cap
            if cap - off < REC.size:
                r += cap - off
                continue
            n, kind, tid, t_ns = REC.unpack_from(self.buf, off)
            if kind == WRAP:
                r += cap - off
                continue
            if n > cap - off - REC.size or r + REC.size + n > w_pub:
                raise RingCorrupt(f"ring {self.name}: a record of {n} bytes at position {r} runs past "
                                  f"{'the ring' if n > cap - off - REC.size else 'the published data'}")
            out.append((kind, tid, t_ns, self.buf[off + REC.size:off + REC.size + n]))
            r += REC.size + _padded(n)
        self._r_next = r
        return out

    def consumed(self, upto: int | None = None) -> None:
        """Give the records returned by the last :meth:`read` back to the producer; ``upto``: only the
        records before that position (the consumer keeps the rest until they are safe elsewhere; it reads
        on from its own position, :attr:`read_position`)."""
        self._r = self._r_next
        with self.lock:
            self._hdr[_R] = self._r if upto is None else upto

    @property
    def read_position(self) -> int:
        """The consumer's next read position (ahead of the published one while it keeps records)."""
        return self._r

    def unread_bytes(self) -> int:
        """Consumer: published bytes it has not read yet."""
        with self.lock:
            return int(self._hdr[_W]) - self._r

    def take_over(self, start: int | None = None) -> int:
        """Read from the position the consumer published, or ``start`` (the producer taking over a dead
        consumer's records with :meth:`read`); returns that position."""
        with self.lock:
            self._r = self._r_next = int(self._hdr[_R]) if start is None else start
        return self._r
