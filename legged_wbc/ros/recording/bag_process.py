"""Recording off the control core: the container's bag is written by a process of its own.

The control process (``walking_container``) must not pay for rosbag2 on its tick: rclpy serializes a
message in ~7-20 us and rosbags writes one in ~14 us, ~8000 messages per simulated second. So the
container's ``bag_recorder`` node hands every message to a :class:`ShmBagSink` instead:

* in-process topics arrive as message objects (the intra-process bus, after each sample's control
  chain): :class:`~legged_wbc.ros.recording.cdr_layout.MessageLayout` packs their numbers into a fixed-layout
  payload (~1-4 us, no serialization), which goes into a shared-memory
  :class:`~legged_wbc.ros.recording.shm_ring.RecordRing`;
* topics that come through DDS (published outside the process) arrive serialized and go into the
  ring as they are;
* a topic's first record (and a new one whenever the message's shape changes, e.g. a variable-length
  latency array) describes it: type, QoS, type hash and the layout's constant CDR segments.

The recorder process (:func:`run`, spawned by the sink; it imports neither rclpy nor the stack)
splices payloads back into the exact CDR bytes (padding aside, they are what rclpy serializes) and
writes them with ``rosbags`` from its single thread, so ``storage:=sqlite3`` works here too. A record
that does not fit the ring (the recorder fell more than ``ring_lag_s`` of recording behind: the ring is sized
from the recorded topics' rates, :func:`ring_bytes`; or ``ring_mb``) is dropped by the producer
and counted: the count is logged at the end by both processes and stored in the bag's
``metadata.yaml`` custom data (``dropped_messages``). The recorder process ignores SIGINT/SIGTERM: the
container stops it by closing the ring once the last sample is in it, and it drains everything before
closing the bag; if the container dies, it notices within ~0.1 s and closes the bag just the same.

``layout:=split``: the recorder node lives in the sim part, but the control part's own topics never cross
the host link for it. The sim part's sink opens a second ring (:meth:`ShmBagSink.open_peer_ring`, announced
to the recorder process by a :data:`KIND_PEER` record) and asks the control part over the link (a RECORD
frame) to record them there itself: :class:`PeerRecorder` taps its own publishers (:class:`PeerTaps`,
stamped by the sim part's ``/clock``, which the link then carries) and writes through a :class:`RingSink`,
the producer half of :class:`ShmBagSink`. The recorder process drains both rings and closes the bag once
each is closed (or its producer is gone); drops of either producer are counted in its ring and summed.
"""

from __future__ import annotations

import os
import signal
import struct
import sys
import threading
import time
from pathlib import Path

from legged_wbc.ros.recording.shm_ring import DONE, FAILED, READY, STARTING, RecordRing, RingCorrupt
from legged_wbc.ros.recording.ring_records import pack_peer_ring, pack_topic_info, unpack_peer_ring, unpack_topic_info

KIND_DATA, KIND_RAW, KIND_TOPIC, KIND_BATCH, KIND_PEER = 0, 1, 2, 3, 4   # KIND_PEER: a ring to drain too
_PAD = bytes(8)
_SUB = struct.Struct("<IIq")   # KIND_BATCH: one sub-record (payload length, topic id, stamp [ns]) + payload
_SUB_HEAD, _SUB_STAMP = struct.Struct("<II"), struct.Struct("<q")   # _SUB in two parts (write_values)
POLL_S = 0.02           # recorder process: sleep when the ring is empty [s] (the ring holds ~4 s; fewer wake-ups)
START_TIMEOUT_S = 30.0  # the recorder process must have its bag open by then [s]
COMMIT_RECORDS = 256    # publish to the recorder process at the latest after this many records (else at flush())
PEER_COMMIT_S = 0.01    # the control part (split) publishes its records at most this often (its ring's lock is a
#                         system call pair; the recorder process looks every POLL_S anyway) [s]
PEER_ATTACH_S = 5.0     # once the own ring is done: wait this long for a producer that never attached a peer ring [s]
PEER_IDLE_S = 10.0      # ... and this long for a live producer that neither writes nor closes its ring [s]
STALL_S = 5.0           # at the close: a recorder process whose heartbeat stands still this long is killed [s]


class RecorderProcessError(RuntimeError):
    """The recorder process could not start (bad output path, storage, ...)."""


# ------------------------------------------------------------------------------------ producer side
class LocalTaps:
    """The in-process taps of a container's ``bag_recorder`` (``node``: its ``stamps``, ``closed``,
    ``last_rx``, ``_clock_topic_stamps`` and clock): one tap per topic
    (:meth:`~legged_wbc.ros.transport.intra_process.IntraProcessBus.create_subscription`'s ``tap``) that takes a
    message or an adapted value at a time, or, as the bus's deferred deliveries are flushed after each
    sample, all of that sample's at once (:meth:`on_batch`: adapted values go to the recorder
    process as one batch record, :meth:`ShmBagSink.write_values`)."""

    def __init__(self, sink: "RingSink", node):
        from legged_wbc.ros.io.adapters import AdaptedValue

        self.sink, self.node = sink, node
        self.failed = 0                     # messages that could not be recorded (said once)
        self.own_only = False               # taps made from now on skip what a host link delivers (split)
        self._adapted = AdaptedValue

    def tap(self, topic: str) -> "_Tap":
        return _Tap(self, topic)

    def _now(self) -> int:
        n = self.node
        return 0 if n._clock_topic_stamps else n.get_clock().now().nanoseconds

    def on_message(self, topic: str, item) -> None:
        from legged_wbc.ros.io.adapters import AdaptedValue

        if isinstance(item, AdaptedValue):
            self.on_batch([(topic, item)])
        else:
            self._write_message(topic, item)

    def _write_message(self, topic: str, msg) -> None:
        n = self.node
        if not n.closed:
            self.sink.write_message(topic, n.stamps.of_message(topic, msg, self._now()), msg)
            n.last_rx = time.monotonic()

    def on_batch(self, items: list) -> None:
        n = self.node
        if n.closed:
            return
        now, of_value, adapted, values = self._now(), n.stamps.of_value, self._adapted, []
        add, stamp = values.append, None
        for topic, item in items:
            if type(item) is adapted:
                value, adapter = item
                if stamp is None or topic == "/clock":   # BagStamps: only /clock's own value moves a stamp
                    stamp = of_value(topic, value, now)
                add((topic, stamp, value, adapter))
                continue
            stamp = None
            if values:                              # keep the order of the sample's messages
                self.sink.write_values(values)
                values = []
                add = values.append
            try:
                self._write_message(topic, item)
            except Exception as exc:                # one bad message costs itself only, never the batch
                self.failed += 1
                if self.failed == 1:
                    self.sink.log(f"{topic}: a message could not be recorded ({type(exc).__name__}: {exc}); "
                                  "failures are counted")
        if values:
            self.sink.write_values(values)
        n.last_rx = time.monotonic()


class _Tap:
    """One recorded topic's tap (see :class:`LocalTaps`). ``own_only``: it takes this process's
    publications only, never what a host link delivers (the linked part records its own)."""

    __slots__ = ("topic", "batch", "_taps", "own_only")

    def __init__(self, taps: LocalTaps, topic: str, own_only: bool | None = None):
        self.topic, self._taps, self.batch = topic, taps, taps.on_batch
        self.own_only = taps.own_only if own_only is None else own_only

    def __call__(self, item) -> None:
        self._taps.on_message(self.topic, item)


class PeerTaps(LocalTaps):
    """The control part's taps (:class:`PeerRecorder`): its own topics, plus the sim part's clock
    (``stamp_topic``), which only advances the stamps (the sim part records it) in the order the bus
    delivered it, as the container's recorder sees it."""

    def __init__(self, sink: "RingSink", node, stamp_topic: str | None):
        super().__init__(sink, node)
        self.own_only = True
        self.stamp_topic = stamp_topic

    def stamp_tap(self) -> _Tap:
        return _Tap(self, self.stamp_topic, own_only=False)   # from the link: the sim part publishes it

    def on_message(self, topic: str, item) -> None:
        self.on_batch([(topic, item)])

    def on_batch(self, items: list) -> None:
        rec, stamp_topic, stamps = [], self.stamp_topic, self.node.stamps
        for topic, item in items:
            if topic != stamp_topic:
                rec.append((topic, item))
                continue
            if rec:
                super().on_batch(rec)
                rec = []
            stamps.of_value(topic, getattr(item, "value", item), 0)
        if rec:
            super().on_batch(rec)


class RingSink:
    """The producer end of a recorder ring (:class:`~legged_wbc.ros.recording.shm_ring.RecordRing`): the calls of
    :class:`~legged_wbc.ros.recording.bag_writer.BagWriter` (``add_topic``, ``write`` for serialized messages,
    ``counts``) plus :meth:`write_message` for message objects and :meth:`write_values` for adapted
    values. Thread-safe (the control thread and a background thread both write). :meth:`close` closes the
    ring; whoever drains it (the recorder process) finishes then."""

    def __init__(self, ring: RecordRing, describe=None, log=None):
        self.ring = ring
        self.describe = describe or (lambda topic: ([], None))
        self.log = log or (lambda text: print(text, file=sys.stderr))
        self.types: dict[str, str] = {}
        self.counts: dict[str, int] = {}
        self._ids: dict[str, int] = {}
        self._layouts: dict[str, object] = {}
        self._unpublished = 0                   # records put since the last commit
        self._value_ok: dict[str, bool] = {}    # adapted topics whose payload was checked against the message
        self._fast: dict[str, tuple] = {}       # write_values: topic -> (payload size, header, padding)
        self._serialized: set[str] = set()      # topics no fixed layout fits: recorded serialized
        self._lock = threading.Lock()
        self.closed = False
        self.described: dict[int, list] = {}   # topic id -> [(ring position, its topic record)], in order

    def add_topic(self, topic: str, msgtype: str) -> None:
        self.types[topic] = msgtype
        self.counts.setdefault(topic, 0)

    def _topic_record(self, topic: str, splicer) -> bool:
        """Describe ``topic`` to the recorder process (False: it did not fit the ring, nor will its message)."""
        tid = self._ids.setdefault(topic, len(self._ids))
        qos, digest = self.describe(topic)
        record, at = pack_topic_info(topic, self.types[topic], splicer, qos, digest), self.ring.position
        if not self.ring.put(KIND_TOPIC, tid, 0, record):
            return False
        self.described.setdefault(tid, []).append((at, record))   # ShmBagSink.take_back
        return True

    def write(self, topic: str, t_ns: int, data: bytes) -> None:
        """A serialized (CDR) message of ``topic``."""
        with self._lock:
            if not self.closed:
                self._write_raw(topic, t_ns, data)
                self.ring.commit()            # from DDS (the executor thread): no batch to wait for

    def _write_raw(self, topic: str, t_ns: int, data: bytes) -> None:
        if self._layouts.get(topic, 0) is not None:   # first message, or the topic was packed before
            if not self._topic_record(topic, None):
                self.ring.note_dropped()
                return
            self._layouts[topic] = None
            self._fast.pop(topic, None)
        if self.ring.put(KIND_RAW, self._ids[topic], t_ns, data):
            self.counts[topic] += 1

    def write_message(self, topic: str, t_ns: int, msg) -> None:
        """An rclpy message object of ``topic`` (in-process): packed into a fixed-layout record."""
        from legged_wbc.ros.recording.cdr_layout import LayoutError, MessageLayout

        with self._lock:
            if self.closed:
                return
            layout = self._layouts.get(topic)
            payload = layout.pack(msg) if layout is not None else None
            if payload is None:               # first message, or its shape changed: a new layout
                try:
                    if topic in self._serialized:
                        raise LayoutError("")
                    layout = MessageLayout.from_message(msg)
                except LayoutError as exc:
                    if topic not in self._serialized:  # said once; the topic stays serialized
                        self._serialized.add(topic)
                        self.log(f"{topic}: {exc}; recording it serialized")
                    from rclpy.serialization import serialize_message

                    self._write_raw(topic, t_ns, serialize_message(msg))
                    self._commit_soon()
                    return
                if not self._topic_record(topic, layout.splicer):
                    self.ring.note_dropped()
                    return
                self._layouts[topic] = layout
                self._fast.pop(topic, None)           # write_values: checked again (_check_fast)
                payload = layout.pack(msg)
            if self.ring.put(KIND_DATA, self._ids[topic], t_ns, payload):
                self.counts[topic] += 1
            self._commit_soon()

    def _commit_soon(self) -> None:
        self._unpublished += 1
        if self._unpublished >= COMMIT_RECORDS:
            self.ring.commit()
            self._unpublished = 0

    def write_value(self, topic: str, t_ns: int, value, adapter) -> None:
        """A value of an adapted publisher (:mod:`legged_wbc.ros.io.adapters`): its record comes from
        ``adapter.payload`` without filling a message, once the first message of the topic showed that
        payload to equal the one packed from the filled message (else every message is filled)."""
        with self._lock:
            layout = self._layouts.get(topic)
            if self._value_ok.get(topic) and layout is not None and not self.closed:
                payload = adapter.payload(value)
                if len(payload) == layout.splicer.payload_size:
                    if self.ring.put(KIND_DATA, self._ids[topic], t_ns, payload):
                        self.counts[topic] += 1
                    self._commit_soon()
                    return
        msg = adapter.to_ros(value)
        self.write_message(topic, t_ns, msg)
        with self._lock:
            layout = self._layouts.get(topic)
            if layout is not None and topic not in self._value_ok:
                ok = adapter.payload(value) == layout.pack(msg)
                self._value_ok[topic] = ok
                if not ok:
                    self.log(f"{topic}: {type(adapter).__name__}.payload differs from the message's record; "
                             "filling every message of the topic instead")

    def write_values(self, items: list) -> None:
        """Several ``(topic, t_ns, value, adapter)`` at once (the container's recorder, once per sample):
        their records go into the ring as ONE batch record (one ring entry instead of one per message;
        the recorder process splits it). A topic's first value takes :meth:`write_value`'s checked path,
        and so does a value whose record is not the size of its topic's layout (a new shape). The parts
        of the records (headers, the adapters' bytes and arrays, :meth:`Adapter.payload_parts`) are
        joined once for the whole batch."""
        parts, counted, slow = [], [], []
        with self._lock:
            if self.closed:
                return
            fast, add, more, count = self._fast, parts.append, parts.extend, counted.append
            last_t = stamp = None                 # a sample's messages share their stamp: packed once
            for item in items:
                topic, t_ns, value, adapter = item
                f = fast.get(topic)               # (payload size, its sub-record header, padding): checked
                if f is not None:
                    size, rec = adapter.payload_parts(value)
                    if size == f[0]:
                        if t_ns != last_t:
                            last_t, stamp = t_ns, _SUB_STAMP.pack(t_ns)
                        add(f[1])
                        add(stamp)
                        more(rec)
                        if f[2]:
                            add(f[2])
                        count(topic)
                        continue
                slow.append(item)
            if parts:
                if self.ring.put(KIND_BATCH, 0, 0, b"".join(parts)):
                    counts = self.counts
                    for topic in counted:
                        counts[topic] += 1
                else:
                    self.ring.note_dropped(len(counted) - 1)   # put() counted one
                self._commit_soon()
        for item in slow:                    # first messages: checked against the filled message
            self.write_value(*item)
        if slow:
            with self._lock:
                for item in slow:
                    self._check_fast(item[0])

    def _check_fast(self, topic: str) -> None:
        """:meth:`write_values`'s entry for ``topic`` once its adapter's record equals the message's
        (``_value_ok``) under its current layout (a layout taken since replaces it; the caller holds the lock)."""
        layout = self._layouts.get(topic)
        if self._value_ok.get(topic) and layout is not None:
            size = layout.splicer.payload_size
            self._fast[topic] = (size, _SUB_HEAD.pack(size, self._ids[topic]), _PAD[:(-size) % 8])
        else:
            self._fast.pop(topic, None)

    def flush(self) -> None:
        """Publish what was written to the recorder process (the container: after each sample)."""
        with self._lock:
            if not self.closed:
                self.ring.commit()
                self._unpublished = 0

    @property
    def dropped(self) -> int:
        return self.ring.dropped

    def close(self) -> int:
        """Publish what is left and close the ring (the consumer drains it, then finishes); release it.
        Returns the number of messages dropped (also logged)."""
        with self._lock:
            if self.closed:
                return 0
            self.closed = True
            self.ring.commit()
            self.ring.close()
            dropped = self.ring.dropped
        if dropped:
            self.log(f"{dropped} messages did not fit the recorder's ring and were dropped "
                     f"(the recorder process fell behind)")
        self.ring.release()
        return dropped


class ShmBagSink(RingSink):
    """What a container's ``bag_recorder`` writes to (a :class:`RingSink`): it creates the ring and spawns
    the recorder process that drains it into the bag; :meth:`close` waits until the bag is closed. In the
    split layout it also creates the control part's ring (:meth:`open_peer_ring`).

    A recording that fails is said, never taken for a success: :meth:`close` checks how the recorder
    process ended (its report, its exit status) and kills one that made no progress for :data:`STALL_S`;
    if the bag was not closed there, the records the process had not yet put into the file are taken
    back from the ring (:meth:`take_back`) and the bag is repaired (:func:`~legged_wbc.ros.recording.bag_repair.
    repair_bag`). ``failure``: then one line naming the cause and the messages in the bag, for the owner to
    say last (the container's exit), else ""."""

    peer_ring_bytes = 0     # the size of :meth:`open_peer_ring`'s ring (0: this one's)

    def __init__(self, path: Path, storage: str, custom_data: str, ring_bytes: int, describe=None, log=None,
                 compression: str = "zstd"):
        import multiprocessing as mp

        self.path = Path(path)
        if self.path.exists():
            raise FileExistsError(f"output {self.path} exists already; rosbag2 never overwrites a bag")
        ctx = mp.get_context("spawn")     # never fork a process that runs DDS threads
        super().__init__(RecordRing.create(ring_bytes, ctx.Lock()), describe=describe, log=log)
        self.peer_rings: list[RecordRing] = []
        self.custom_data, self.failure, self.storage = custom_data, "", storage
        self._beat = ctx.RawArray("Q", 3)                 # the recorder process's progress (_drain)
        self._reports, report = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=process_main, name="bag_writer", daemon=False,
                                args=(self.ring.name, self.ring.lock, str(self.path), storage, custom_data,
                                      os.getpid(), compression, self._beat, report))
        self.proc.start()
        report.close()
        t_end = time.monotonic() + START_TIMEOUT_S
        while self.ring.consumer_state == STARTING and self.proc.is_alive() and time.monotonic() < t_end:
            time.sleep(0.01)
        if self.ring.consumer_state != READY:
            state = self.ring.consumer_state
            self._shutdown(timeout=5.0)
            why = "it failed" if state == FAILED else "it exited" if state != STARTING else "timed out"
            raise RecorderProcessError(f"the recorder process could not open {self.path} ({why}; see its output)")

    def _wait(self, timeout: float) -> str:
        """Wait for the recorder process to finish; kill it if its heartbeat stood still for
        :data:`STALL_S` (stopped, hung) or it ran past ``timeout`` [s]. Returns why it was killed, or ""."""
        last, t_last, t_end = self._beat[0], time.monotonic(), time.monotonic() + timeout
        why = ""
        while self.proc.is_alive():
            self.proc.join(0.05)
            now, beat = time.monotonic(), self._beat[0]
            if beat != last:
                last, t_last = beat, now
            elif now - t_last > STALL_S:
                why = f"the recorder process made no progress for {STALL_S:g} s (stopped or hung) and was killed"
            if now > t_end:
                why = f"the recorder process did not finish within {timeout:g} s and was killed"
            if why and self.proc.is_alive():
                os.kill(self.proc.pid, signal.SIGKILL)   # SIGTERM is ignored; a stopped process still dies
                self.proc.join(5.0)
                break
        return why

    def _outcome(self, stalled: str) -> None:
        """After the recorder process ended: its report, or its exit status; if the bag was not closed
        there, take the ring's unwritten records back and repair the bag. Sets ``failure``."""
        import json

        report = None
        try:
            if self._reports.poll(0):
                report = json.loads(self._reports.recv_bytes(1 << 20))
        except (OSError, EOFError, ValueError):
            report = None
        code = self.proc.exitcode
        if stalled:
            cause = stalled
        elif isinstance(report, dict) and report.get("cause"):
            cause = str(report["cause"])
        elif code is not None and code < 0:
            cause = f"the recorder process was killed by {signal.Signals(-code).name}"
        elif code != 0 or not isinstance(report, dict):
            cause = f"the recorder process ended with exit status {code} without closing the bag"
        else:
            return
        put = sum(self.counts.values())
        lost = f", {self.ring.dropped} dropped when the ring was full" if self.ring.dropped else ""
        if isinstance(report, dict) and report.get("closed"):
            n = sum(int(v) for v in dict(report.get("counts") or {}).values())
            self.failure = f"recording FAILED ({cause}): {n} messages in the bag {self.path} of the {put} put " \
                           f"in the recorder's ring here{lost}"
            return
        self.failure = self._repair(cause, put, lost, took_back=not (isinstance(report, dict) and report.get("cause")))

    def _repair(self, cause: str, put: int, lost: str, took_back: bool) -> str:
        """Repair the bag a dead recorder process left (the ring's unwritten records added when it died
        without a word: ``took_back``); the failure line."""
        from legged_wbc.ros.recording.bag_repair import repair_bag

        extra = self.take_back(self._safe_in_file()) if took_back else []
        custom = dict(kv.split("=", 1) for kv in (x.strip() for x in self.custom_data.split(";")) if "=" in kv)
        custom = {k.strip(): v.strip() for k, v in custom.items()}
        if self.ring.dropped:
            custom["dropped_messages"] = str(self.ring.dropped)
        rep = repair_bag(self.path, custom, extra)
        state = f"left unreadable: {rep.problem}" if rep.problem else f"repaired: {rep.how}"
        back = f", {rep.extra_written} of them taken back from the ring" if rep.extra_written else ""
        peer = sum(_unwritten(ring) for ring in self.peer_rings)
        peer = f"; {peer} messages the linked part had put in its ring are not in it" if peer else ""
        return (f"recording FAILED ({cause}): {rep.total} messages in the bag {self.path}{back} of the {put} put "
                f"in the recorder's ring here{lost}{peer}; {state}")

    def _safe_in_file(self) -> int | None:
        """The own ring's position up to which the file holds the records when the recorder process died
        after writing the chunk it was closing (sqlite3: after the commit) but before it said so (else None:
        its read position)."""
        from legged_wbc.ros.recording.bag_repair import in_file_mark

        number, pos = self._beat[1], self._beat[2]
        if not number or pos <= self.ring.take_over():
            return None
        return pos if in_file_mark(self.path, self.storage) >= number else None

    def take_back(self, start: int | None = None) -> list:
        """The records the recorder process read but had not put into the bag's file, and those it never
        read: ``(topic, msgtype, qos, digest, stamp [ns], CDR bytes)`` from the published read position
        (:meth:`RecordRing.take_over`; ``start``: from there instead) on, with the topic descriptions this
        producer gave (a record that does not check out ends it)."""
        start = self.ring.take_over(start)
        topics = {}
        for tid, hist in self.described.items():
            before = [rec for at, rec in hist if at <= start]
            if before:
                topics[tid] = unpack_topic_info(before[-1])
        out = []
        try:
            while True:
                records = self.ring.read()
                if not records:
                    break
                for kind, tid, t_ns, payload in _expand_batches(records):
                    if kind == KIND_TOPIC:
                        topics[tid] = unpack_topic_info(payload)
                    elif kind in (KIND_DATA, KIND_RAW) and tid in topics:
                        info = topics[tid]
                        data = info["splicer"].build(payload) if kind == KIND_DATA else bytes(payload)
                        out.append((info["topic"], info["msgtype"], info["qos"], info["digest"], t_ns, data))
                self.ring.consumed()
        except (RingCorrupt, ValueError):
            pass
        return out

    def open_peer_ring(self, ring_bytes: int | None = None) -> str:
        """A second ring for a producer in another process (the split's control part: it attaches with
        :meth:`RecordRing.attach_file`), drained by the same recorder process into the same bag. Returns
        its name (what the producer attaches). Raises :class:`RecorderProcessError` if the recorder
        process cannot be told."""
        ring = RecordRing.create(ring_bytes or self.peer_ring_bytes or self.ring.capacity, None)   # never locked here
        with self._lock:
            ok = not self.closed and self.ring.put(KIND_PEER, len(self.peer_rings), 0,
                                                   pack_peer_ring(ring.name))
            if ok:
                self.peer_rings.append(ring)
                self.ring.commit()
        if not ok:
            ring.release()
            raise RecorderProcessError("the recorder process could not be told of a second ring (its ring is "
                                       "full or closed)")
        return ring.name

    def close(self, timeout: float = 120.0) -> int:
        """Close the ring, wait until the recorder process has written everything (its peer rings too) and
        closed the bag. Returns the number of dropped records, the peer rings' included. A failed
        recording: ``failure`` (one line, not logged here) instead of the lines on drops."""
        with self._lock:
            if self.closed:
                return 0
            self.closed = True
        dropped = self.ring.dropped
        peer_dropped = self._shutdown(timeout)
        if self.failure:
            return dropped + peer_dropped
        if dropped:
            self.log(f"{dropped} messages did not fit the recorder's ring and were dropped "
                     f"(the recorder process fell behind)")
        if peer_dropped:
            self.log(f"{peer_dropped} messages of the linked part did not fit its ring and were dropped there")
        return dropped + peer_dropped

    def _shutdown(self, timeout: float) -> int:
        """Close the ring, wait for the recorder process (killed if it stalls), find out how the recording
        ended (``failure``), release the rings; the peer rings' drops."""
        self.ring.commit()
        self.ring.close()
        stalled = self._wait(timeout)
        if self.ring.consumer_state in (READY, DONE):   # it had opened the bag: did the recording go well?
            self._outcome(stalled)
        self.ring.release()
        dropped = 0
        for ring in self.peer_rings:
            dropped += ring.dropped
            ring.release()
        self.peer_rings = []
        return dropped


class PeerRecorder:
    """The control part's half of a split recording (``layout:=split``): when the sim part's recorder asks
    (host link RECORD, :meth:`start`, in the link's receiver thread before any sample), this process
    attaches the ring the sim part opened for it (:meth:`ShmBagSink.open_peer_ring`) and taps its own
    publishers of the requested topics (:class:`PeerTaps`: values and messages packed as the container's
    recorder packs them), so they need not cross the link nor pass through the sim process. Stamps: the
    sim part's ``/clock`` as it came with the samples (the link sends it once asked to record). The bus's
    deliveries of a frame go to the ring after the frame's replies are sent (:meth:`flush`, the link's
    ``after_frame``). ``node``: the container's node (graph queries for the topics' QoS, its logger)."""

    def __init__(self, bus, node):
        self.bus, self.node = bus, node
        self.log = node.get_logger().warning
        self.sink: RingSink | None = None
        self.taps: PeerTaps | None = None
        self.stamps = None
        self.closed = False
        self.last_rx = 0.0
        self._clock_topic_stamps = True
        self._topics: set[str] = set()
        self._lock = threading.Lock()            # flush (the link's receiver thread) against close
        self._committed = 0.0                    # when the records were last published to the recorder process

    def get_clock(self):                     # LocalTaps: the receive time without clock_topic stamps
        return self.node.get_clock()

    def start(self, info: dict) -> None:
        """Record ``info["topics"]`` (topic -> type) into ring ``info["ring"]``, stamped as ``info`` says
        (``clock_topic``, ``sim_time``, ``stamp_topic``); called again with more topics, adds them. A ring
        that cannot be attached (or any other failure) is said in one line and nothing is recorded here."""
        if self.closed:
            return
        try:
            self._start(info)
        except Exception as exc:
            self.log(f"cannot record this part's topics ({type(exc).__name__}: {exc}); the bag will miss them")

    def _start(self, info: dict) -> None:
        if self.sink is None:
            from legged_wbc.ros.recording.bag_writer import BagStamps, describe_publishers

            try:
                ring = RecordRing.attach_file(info["ring"])
            except OSError as exc:
                self.closed = True
                self.log(f"cannot record this part's topics: the recorder's ring {info['ring']} ({exc})")
                return
            ring.set_producer(os.getpid())
            node = self.node
            self.sink = RingSink(ring, describe=lambda t: describe_publishers(node.get_publishers_info_by_topic(t)),
                                 log=self.log)
            self._clock_topic_stamps = bool(info.get("clock_topic", True))
            self.stamps = BagStamps(bool(info.get("sim_time", True)))
            stamp_topic = info.get("stamp_topic")
            self.taps = PeerTaps(self.sink, self, stamp_topic)
            if stamp_topic:
                self._subscribe(stamp_topic, "rosgraph_msgs/msg/Clock", self.taps.stamp_tap(), own=False)
        own, new = self.bus.own_topics(), []
        for topic, msgtype in sorted(info["topics"].items()):
            if topic in own and topic not in self._topics:
                self.sink.add_topic(topic, msgtype)
                self._subscribe(topic, msgtype, self.taps.tap(topic))
                new.append(topic)
        if new:
            self.node.get_logger().info(
                f"recording {', '.join(new)} into the recorder's second ring {info['ring']}"
                + (f", stamped by the sim part's {self.taps.stamp_topic}" if self.taps.stamp_topic else ""))

    def _subscribe(self, topic: str, msgtype: str, tap, own: bool = True) -> None:
        from rclpy.qos import QoSProfile

        from legged_wbc.ros.recording.bag_writer import message_class

        self.bus.create_subscription(self.node, message_class(msgtype), topic,
                                     lambda data, t=topic: self._on_serialized(t, data), QoSProfile(depth=10),
                                     raw=True, tap=tap)
        if own:
            self._topics.add(topic)

    def _on_serialized(self, topic: str, data: bytes) -> None:
        """A message from a background publisher (``/diagnostics``, ``/tf``), serialized: as from DDS."""
        if self.closed:
            return
        now = 0 if self._clock_topic_stamps else self.get_clock().now().nanoseconds
        t_ns = self.stamps.of_bytes(topic, data, now)
        if topic in self._topics:
            self.sink.write(topic, t_ns, data)

    def flush(self) -> None:
        """The bus's deferred deliveries (this frame's) into the ring; published to the recorder process
        every :data:`PEER_COMMIT_S` (a killed control part loses at most that much)."""
        with self._lock:
            if self.sink is not None and not self.closed:
                self.bus.flush()
                now = time.monotonic()
                if now - self._committed >= PEER_COMMIT_S:
                    self.sink.flush()
                    self._committed = now

    def close(self) -> None:
        """Record what is left, close the ring (the recorder process finishes the bag once the sim part is
        done too); logs what this process recorded and dropped."""
        with self._lock:
            if self.sink is None or self.closed:
                self.closed = True
                return
            self.bus.flush()
            self.closed = True
        counts = dict(self.sink.counts)
        dropped = self.sink.close()
        per = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if v)
        self.node.get_logger().info(f"recorded this part's topics into the recorder's second ring: "
                                    f"{sum(counts.values())} messages ({per}); {dropped} dropped")


DEFAULT_RING_BYTES = 64 << 20   # a ring whose topics' rates are not known (``ring_mb`` 0 without ``rates``)
MIN_RING_BYTES = 1 << 20


def ring_bytes(cfg, rate: int | None) -> int:
    """The size of a recording ring [bytes]: ``cfg.ring_mb`` if set, else ``cfg.ring_lag_s`` seconds of
    recording at ``rate`` [bytes per second, :func:`legged_wbc.ros.io.topics.recorded_bytes_per_s`] (at least
    :data:`MIN_RING_BYTES`, whole pages), else :data:`DEFAULT_RING_BYTES`."""
    if cfg.ring_mb > 0:
        return int(cfg.ring_mb * 2**20)
    if not rate:
        return DEFAULT_RING_BYTES
    page = 4096
    return max(MIN_RING_BYTES, -(-int(cfg.ring_lag_s * rate) // page) * page)


def open_sink(path: Path, cfg, describe, log=None, rates: tuple | None = None):
    """The bag the recorder node writes to: a :class:`ShmBagSink` (``cfg.writer_process``: the
    container) or a :class:`~legged_wbc.ros.recording.bag_writer.BagWriter` in the node's own process (``cfg``:
    :class:`~legged_wbc.ros.recording.bag_writer.RecorderConfig`). ``rates``: the bytes per second of recording
    of its own ring and of the linked part's (:func:`ring_bytes`), or None. Raises ``FileExistsError`` (the
    bag exists) or :class:`RecorderProcessError`."""
    if cfg.writer_process:
        own, peer = rates or (None, None)
        sink = ShmBagSink(path, cfg.storage, cfg.custom_data, ring_bytes(cfg, own), describe=describe, log=log,
                          compression=cfg.compression)
        sink.peer_ring_bytes = ring_bytes(cfg, peer)
        return sink
    from legged_wbc.ros.recording.bag_writer import BagWriter

    return BagWriter(path, cfg.storage, cfg.custom_data, describe=describe, compression=cfg.compression)


def subscription_qos(infos, depth: int):
    """The rclpy ``QoSProfile`` a recording subscription asks for, given the topic's publishers (rclpy
    endpoint infos; none yet: a typed topic subscribed at start-up): keep the last ``depth`` messages,
    reliable (best-effort if a publisher only offers best-effort), transient-local if all publishers are
    (so latched data is recorded), else volatile."""
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

    reliable = all(i.qos_profile.reliability == ReliabilityPolicy.RELIABLE for i in infos)
    latched = bool(infos) and all(i.qos_profile.durability == DurabilityPolicy.TRANSIENT_LOCAL for i in infos)
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth,
                      reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
                      durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE)


def close_sink(bag, path: Path, custom_data: str, write_failed: OSError | None = None,
               own_only: bool = False, lost: dict | None = None) -> tuple[str, str]:
    """Close ``bag`` (:func:`open_sink`'s, at ``path``) and say how it went: ``(failure, note)``.

    ``failure`` is a failed recording in one line, else ''. The recorder process's failure is the
    :class:`ShmBagSink`'s (said by the sink). When the in-process writer could not write
    (``write_failed``, a write's ``OSError`` kept for now, or an error at closing: ``layout:=processes``),
    its file is left as it is and the bag repaired from what is on disk (:func:`_repaired_after`).
    ``note`` is the "bag closed" line for the log ('' after a failure): messages per topic (``own_only``:
    those of this process, a container's ``layout:=split``), drops, the bag's size. ``lost``: per topic, the
    messages DDS lost before the recorder took them: said in ``note`` and, with the in-process writer, in
    ``metadata.yaml``'s custom data (``lost_messages``: their number, ``lost_messages_per_topic``:
    ``/topic=N,...``)."""
    dropped, lost = 0, {t: n for t, n in (lost or {}).items() if n}
    try:
        if write_failed is not None:
            raise write_failed
        if lost and hasattr(bag, "set_custom_data"):
            bag.set_custom_data("lost_messages", str(sum(lost.values())))
            bag.set_custom_data("lost_messages_per_topic", ",".join(f"{t}={n}" for t, n in sorted(lost.items())))
        dropped = bag.close() or 0
    except OSError as exc:            # this process's writer (layout:=processes): repaired here
        bag.abandon()
        return _repaired_after(exc, path, custom_data, sum(bag.counts.values())), ""
    failure = getattr(bag, "failure", "")   # the recorder process's (said by the sink)
    if failure:
        return failure, ""
    from legged_wbc.ros.recording.bag_writer import size_note

    by_process = hasattr(bag, "write_message")    # a ShmBagSink
    total = sum(bag.counts.values())
    per = ", ".join(f"{k} {v}" for k, v in sorted(bag.counts.items()) if v)
    where = " by the recorder process" if by_process else ""
    mine = " from this process" if by_process and own_only else ""
    gone = f"; {sum(lost.values())} LOST ({', '.join(f'{t} {n}' for t, n in sorted(lost.items()))})" if lost else ""
    return "", (f"bag closed{where}: {path} ({total} messages{mine}: {per}"
                f"{f'; {dropped} DROPPED' if dropped else ''}{gone}; {size_note(path)})")


def _repaired_after(exc: OSError, path: Path, custom_data: str, took: int) -> str:
    """The in-process writer failed with ``exc``: the bag at ``path`` repaired (its ``custom_data``,
    ``key=value`` pairs separated by ';', kept); the failure line, with the ``took`` messages the
    recorder had taken."""
    from legged_wbc.ros.recording.bag_repair import repair_bag

    custom = dict(kv.split("=", 1) for kv in (x.strip() for x in custom_data.split(";")) if "=" in kv)
    rep = repair_bag(path, {k.strip(): v.strip() for k, v in custom.items()})
    state = f"left unreadable: {rep.problem}" if rep.problem else f"repaired: {rep.how}"
    return (f"recording FAILED ({write_error(exc)}): {rep.total} messages in the bag {path} of the "
            f"{took} it took; {state}")


# ------------------------------------------------------------------------------------ recorder process
def _unwritten(ring: RecordRing) -> int:
    """Messages in a peer ring past the position its dead consumer published (not taken back: their topic
    descriptions were in the records it had consumed)."""
    import contextlib

    n = 0
    if ring.lock is None:                  # the creator of a peer ring never locks it: words read as they are
        ring.lock = contextlib.nullcontext()
    ring.take_over()
    try:
        while records := ring.read():
            n += sum(kind in (KIND_DATA, KIND_RAW) for kind, _, _, _ in _expand_batches(records))
            ring.consumed()
    except RingCorrupt:
        pass
    return n


def _parent_alive(pid: int) -> bool:
    if os.getppid() != pid:
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _expand_batches(records: list) -> list:
    """The records of a read with each KIND_BATCH record replaced by the KIND_DATA records it holds
    (payloads stay views into the ring); :class:`RingCorrupt` for a batch whose lengths do not add up."""
    if not any(r[0] == KIND_BATCH for r in records):
        return records
    out = []
    for rec in records:
        if rec[0] != KIND_BATCH:
            out.append(rec)
            continue
        buf, off, end = rec[3], 0, len(rec[3])
        while off < end:
            if end - off < _SUB.size:
                raise RingCorrupt(f"a batch record ends in {end - off} stray bytes")
            n, tid, t_ns = _SUB.unpack_from(buf, off)
            off += _SUB.size
            if n > end - off:
                raise RingCorrupt(f"a batch's sub-record of {n} bytes runs past its batch ({end - off} left)")
            out.append((KIND_DATA, tid, t_ns, buf[off:off + n]))
            off += n + (-n) % 8
    return out


def _splice_batches(records: list, topics: dict) -> dict:
    """Record index -> CDR bytes for the data records of a read batch whose topic description precedes
    the batch (each topic's records spliced together, :meth:`CdrSplicer.build_many`); the others (a
    description inside the batch, a record of the wrong size) are built one by one by the caller."""
    by_topic: dict[int, list[int]] = {}
    for i, (kind, tid, _, _) in enumerate(records):
        if kind == KIND_TOPIC:         # a (new) layout inside the batch: this topic's records one by one
            by_topic[tid] = None
        elif kind == KIND_DATA and tid in topics:
            lst = by_topic.setdefault(tid, [])
            if lst is not None:
                lst.append(i)
    out: dict[int, bytes] = {}
    for tid, idx in by_topic.items():
        if not idx:
            continue
        splicer = topics[tid]["splicer"]
        size = splicer.payload_size
        if any(len(records[i][3]) != size for i in idx):
            continue
        for i, data in zip(idx, splicer.build_many([records[i][3] for i in idx])):
            out[i] = data
    return out


_PREFIX = "[bag_writer] "


def _say(text: str) -> None:
    print(f"{_PREFIX}{text}", file=sys.stderr, flush=True)


class _BagSide:
    """The recorder process's bag: the topics that failed (said once each), the newest description of
    each topic by name, and the rosbag2 writer. Topic ids are per ring (:class:`_Source`)."""

    def __init__(self, path: str, storage: str, custom_data: str, compression: str):
        from legged_wbc.ros.recording.bag_writer import BagWriter

        self.by_name: dict[str, dict] = {}
        self.errors: set[str] = set()
        self.writer = BagWriter(Path(path), storage, custom_data, compression=compression, chunk_by_caller=True,
                                describe=lambda topic: (self.by_name[topic]["qos"], self.by_name[topic]["digest"]))

    def describe(self, tid: int, payload, topics: dict) -> None:
        """A topic record: the topic's type, QoS, hash and layout (``topics``: its ring's ids); raises
        :class:`~legged_wbc.ros.recording.shm_ring.RingCorrupt` for a record that fails its format check."""
        info = unpack_topic_info(payload)
        topics[tid] = info
        if info["topic"] not in self.by_name:
            try:
                self.writer.add_topic(info["topic"], info["msgtype"])
            except Exception as exc:
                _say(f"{info['topic']}: not recorded ({exc})")
                self.errors.add(info["topic"])
        self.by_name[info["topic"]] = info

    def write_records(self, records: list, topics: dict) -> list[str]:
        """One read of a ring (``topics``: its ids): batches expanded, fixed-layout payloads spliced into
        CDR, written. Returns the names of the peer rings it announced (:data:`KIND_PEER`)."""
        records = _expand_batches(records)
        built = _splice_batches(records, topics)
        peers = []
        for i, (kind, tid, t_ns, payload) in enumerate(records):
            if kind == KIND_TOPIC:
                self.describe(tid, payload, topics)
                continue
            if kind == KIND_PEER:
                peers.append(unpack_peer_ring(payload))     # RingCorrupt unless a ring name of the scheme
                continue
            if kind not in (KIND_DATA, KIND_RAW):
                raise RingCorrupt(f"a record of kind {kind}, which no producer writes")
            info = topics.get(tid)
            if info is None or info["topic"] in self.errors:   # no description (dropped: ring full) / failed
                continue
            topic = info["topic"]
            try:
                data = built.get(i)
                if data is None:
                    data = info["splicer"].build(payload) if kind == KIND_DATA else bytes(payload)
                self.writer.write(topic, t_ns, data)
            except OSError:            # the disk (full, a file size limit, an I/O error): the recording ends
                raise
            except Exception as exc:   # keep writing the other topics; say it once per topic
                self.errors.add(topic)
                _say(f"{topic}: could not write a message ({exc})")
        return peers

    def close(self, path: str, dropped: int, orphaned: bool, peer_dropped: int = 0) -> str:
        """Close the bag; returns its closing line (the caller prints it when the recording went well)."""
        from legged_wbc.ros.recording.bag_writer import size_note

        w = self.writer
        if dropped:
            w.set_custom_data("dropped_messages", str(dropped))
        w.close()
        per = ", ".join(f"{k} {v}" for k, v in sorted(w.counts.items()) if v)
        why = " (the container exited without closing the ring)" if orphaned else ""
        peer = f", {peer_dropped} of them by the linked part" if peer_dropped else ""
        return (f"{_PREFIX}bag closed: {path} ({sum(w.counts.values())} messages: {per}; {dropped} dropped{peer}; "
                f"{size_note(Path(path))}){why}")


class _Source:
    """A ring the recorder process drains: the container's own, or a peer ring (the split's control part
    writes it; attached by name, :meth:`RecordRing.attach_file`), with its topic ids. ``written``: the ring
    position up to which its records are written to the bag; ``safe``: up to which they are in the file
    (the read position published to the producer: a killed recorder's records after it are still in the
    ring, :meth:`ShmBagSink.take_back`)."""

    def __init__(self, ring: RecordRing, name: str = ""):
        self.ring, self.name = ring, name
        self.topics: dict[int, dict] = {}
        self.done = False
        self.last_data = time.monotonic()
        self.written = self.safe = ring.read_position
        self.outside_close = ""                      # the closed word seen without the producer's seal

    def drained(self) -> bool:
        """Closed by its producer and read to the end it announced (:attr:`RecordRing.sealed`). A closed
        word without the seal (set from outside) is noted once and not obeyed: the producer may still
        write. :class:`RingCorrupt` if the announced end is not where the data ends (a ring cut short)."""
        ring = self.ring
        if not ring.closed or ring.unread_bytes():
            return False
        sealed = ring.sealed
        if sealed is None:
            if not self.outside_close:
                self.outside_close = (f"the closed word of ring {ring.name} was set without its producer's seal "
                                      f"(from outside) at byte {ring.read_position}; ignored")
            return False
        if sealed != ring.read_position:
            raise RingCorrupt(f"ring {ring.name} cut short: its producer announced {sealed} bytes, "
                              f"{ring.read_position} were there")
        return True

    def finished(self, since: float, now: float) -> bool:
        """A peer ring, once the own ring is done (at ``since``): closed and drained, or its producer gone
        (and drained), or none attached within :data:`PEER_ATTACH_S`, or a live one idle for
        :data:`PEER_IDLE_S` (said)."""
        ring = self.ring
        if self.drained():                           # sealed after the producer's last commit
            return True
        pid = ring.producer_pid
        if pid and not _alive(pid):                  # gone: what it committed before is there to read
            return ring.unread_bytes() == 0
        if ring.unread_bytes():
            return False
        if not pid:
            if now - since > PEER_ATTACH_S:
                _say(f"nobody attached the linked part's ring {self.name}; closing without it")
                return True
            return False
        if now - max(since, self.last_data) > PEER_IDLE_S:
            _say(f"the linked part (pid {pid}) neither wrote nor closed its ring for {PEER_IDLE_S:g} s; "
                 "closing the bag without waiting longer")
            return True
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True                                   # exists (another user's: not ours, but alive)
    return True


def _read_into_bag(src: _Source, sources: list, bag: _BagSide, beat=None) -> bool:
    """One read of ``src`` written to the bag; its ring space given back up to what is in the file (all
    of it once the writer closed a chunk or committed: then every source's; a source holding back more
    than a quarter of its ring forces it). Before a chunk may close, ``beat[1]``/``beat[2]`` say which mark
    of the file (:meth:`BagWriter.next_mark`: MCAP, the chunk's number; sqlite3, the messages committed)
    makes the own ring safe up to which position: killed while writing it, the container finds out from
    the file whether it got there (:meth:`ShmBagSink.take_back`). False if there was nothing to read."""
    records = src.ring.read()
    if not records:
        return False
    src.last_data = time.monotonic()
    for name in bag.write_records(records, src.topics):
        try:
            sources.append(_Source(RecordRing.attach_file(name), name))
        except OSError as exc:
            _say(f"cannot attach the linked part's ring {name}: {exc}")
    del records
    src.ring.consumed(src.safe)
    src.written = src.ring.read_position
    if beat is not None:
        beat[2], beat[1] = sources[0].written, bag.writer.next_mark()
    if bag.writer.end_batch(force=src.written - src.safe > src.ring.capacity // 4):
        for s in sources:
            s.safe = s.written
        src.ring.consumed(src.safe)
    return True


def _drain(ring, bag: _BagSide, parent_pid: int, beat=None) -> tuple[bool, list]:
    """Write what the producers put into the rings (the own ring and the peer rings it announces) until
    the producer of the own ring closes it (or dies: orphaned, checked every 0.1 s while the rings are
    empty) and every peer ring is finished (:meth:`_Source.finished`). ``beat``: shared counters, [0]
    bumped on every turn (the container's sign of progress), [1] and [2] set by :func:`_read_into_bag`.
    Returns ``(orphaned, all sources)``."""
    sources = [_Source(ring)]
    last_check = time.monotonic()
    orphaned, own_done_at = False, None
    while True:
        if beat is not None:
            beat[0] += 1
        busy = False
        for src in list(sources):
            busy = _read_into_bag(src, sources, bag, beat) or busy
        if busy:
            continue
        now = time.monotonic()
        if own_done_at is None and (orphaned or sources[0].drained()):
            own_done_at = now
        if own_done_at is not None:
            for src in sources[1:]:
                if not src.done:
                    src.done = src.finished(own_done_at, now)
            if all(src.done for src in sources[1:]):
                return orphaned, sources
        if not orphaned and now - last_check > 0.1:
            last_check = now
            orphaned = not _parent_alive(parent_pid)   # then one more read of every ring before finishing
        time.sleep(POLL_S)


def write_error(exc: OSError) -> str:
    """One line for a write that failed (no traceback): disk full, a file size limit, another error."""
    import errno

    what = {errno.ENOSPC: "disk full", errno.EFBIG: "file size limit reached", errno.EDQUOT: "disk quota exceeded"}
    return f"{what.get(exc.errno, 'write error')} ({exc.strerror or exc})"


def run(ring_name: str, lock, path: str, storage: str, custom_data: str, parent_pid: int,
        compression: str = "zstd", beat=None, report=None) -> int:
    """The recorder process: ring(s) -> rosbag2 until the producers close their rings (or die).
    ``report``: the sending end of a pipe; the outcome goes there as one JSON object (:func:`_report`).
    Exit status 0; 2: the bag could not be opened; 3: the recording failed (said in the report, not here:
    the container says it in one line)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C reaches the whole process group: the
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # container stops us by closing the ring
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a file size limit: a write error (EFBIG), not a kill
    ring = RecordRing.attach(ring_name, lock)
    try:
        bag = _BagSide(path, storage, custom_data, compression)
    except Exception as exc:
        _say(f"cannot open the bag {path}: {exc}")
        ring.set_consumer_state(FAILED)
        ring.release()
        return 2
    ring.set_consumer_state(READY)
    cause, closed, sources = "", False, []
    try:
        orphaned, sources = _drain(ring, bag, parent_pid, beat)
        peer_dropped = sum(src.ring.dropped for src in sources[1:])
        line = bag.close(path, ring.dropped + peer_dropped, orphaned, peer_dropped)
        closed = True
        cause = "; ".join(src.outside_close for src in sources if src.outside_close)
        if not cause:
            print(line, flush=True)
    except RingCorrupt as exc:
        cause = f"corrupt ring: {exc}"
        closed = _close_anyway(bag, path, ring)
    except OSError as exc:
        cause = write_error(exc)
    _report(report, cause, closed, bag.writer.counts)
    if cause and not closed:                        # nothing more to write: no flush at exit (a full disk)
        sys.stdout.flush()
        os._exit(3)
    for src in sources[1:]:
        src.ring.release()
    ring.set_consumer_state(DONE)                   # FAILED: the bag could not be opened (a failure: the report)
    ring.release()
    return 3 if cause else 0


def process_main(*args) -> None:
    """The recorder process's entry (``multiprocessing``): :func:`run`'s return value is its exit status."""
    sys.exit(run(*args))


def _close_anyway(bag: _BagSide, path: str, ring) -> bool:
    """Close the bag after a corrupt ring (what was read before is written); False if that failed too."""
    try:
        bag.close(path, ring.dropped, False)
        return True
    except Exception:
        return False


def _report(conn, cause: str, closed: bool, counts: dict) -> None:
    """Tell the container how the recording ended: ``{"cause": "" or one line, "closed": the bag was closed
    here, "counts": messages written per topic}`` (JSON: nothing that runs code when read)."""
    import json

    if conn is None:
        return
    try:
        conn.send_bytes(json.dumps({"cause": cause, "closed": closed, "counts": counts}).encode())
        conn.close()
    except OSError:
        pass
