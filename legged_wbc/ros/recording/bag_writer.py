"""The rosbag2 side of ``bag_recorder`` (no rclpy): its parameters (:class:`RecorderConfig`), message definitions, QoS conversion and a writer
that takes serialized (CDR) messages; which topics it takes and when (:class:`TopicChoice`, :class:`StartupGate`,
:class:`PeerWatch`).

:class:`BagWriter` wraps ``rosbags.rosbag2.Writer`` (rosbag2 format version 9, MCAP or sqlite3).
A topic's connection is created at its first message, with the publishers' QoS profiles and type
hash from ``describe(topic)`` (the node asks the ROS graph). It writes in the caller's thread: in the
container the caller is a process of its own (:mod:`legged_wbc.ros.recording.bag_process`; closing a 1 MiB MCAP
chunk takes ~10 ms, which must not stall the control loop).
"""

from __future__ import annotations

import errno
import importlib
import json
import os
import sqlite3
import struct
import sys
import time
from datetime import datetime
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from legged_wbc.params import param, validate


# ------------------------------------------------------------------------------------ parameters
@dataclass(frozen=True)
class RecorderConfig:
    """The ``bag_recorder`` node's parameters. Live: ``discovery_period`` (the next poll),
    ``stop_when_gone`` (the next peer check), ``drain_time`` (the stop); the rest shape the bag and
    its subscriptions at start-up and are read-only."""

    output: str = param("", desc="bag directory to create (must not exist); empty = ./rosbag2_<date>-<time>",
                        live=False)
    storage: str = param("mcap", desc="rosbag2 storage plugin", choices=("mcap", "sqlite3"), live=False)
    topics: tuple = param((), desc="topics to record as /name or /name:pkg/msg/Type; empty = all discovered topics",
                          type="str_array", live=False)
    record_all: bool = param(True, desc="also record every other topic that appears in the graph", live=False)
    exclude: tuple = param(("/rosout", "/parameter_events"), desc="topics never recorded", variable_length=True,
                           live=False)
    qos_depth: int = param(2000, 1, 1_000_000, "subscription history depth", unit="messages", live=False)
    discovery_period: float = param(0.2, 0.01, 60.0, "graph polling period for new topics and peers", unit="s wall")
    stop_when_gone: tuple = param((), desc="close the bag when one of these nodes (seen once) leaves the graph",
                                  type="str_array")
    drain_time: float = param(0.3, 0.0, 10.0, "on stop, keep taking messages until none arrived for this long",
                              unit="s wall")
    custom_data: str = param("", desc="key=value pairs separated by ';' stored in metadata.yaml custom_data",
                             live=False)
    writer_process: bool = param(False, desc="write the bag from a process of its own, fed through shared memory "
                                 "(legged_wbc.ros.recording.bag_process): in-process messages are packed, not serialized, and "
                                 "rosbag2 costs the control process nothing (the container sets it)", live=False)
    ring_mb: float = param(0.0, 0.0, 4096.0, "writer_process: size of the shared-memory ring (layout:=split: also of "
                           "the control part's own); 0 = sized from the recorded topics' rates for ring_lag_s (64 MiB "
                           "where they are not known); a message that does not fit (the writer fell this far behind) is "
                           "dropped and counted", unit="MiB", live=False)
    ring_lag_s: float = param(4.0, 0.1, 600.0, "writer_process, ring_mb 0: how far the writer may fall behind before a "
                              "message is dropped (and counted): the ring holds this long of the recorded topics at "
                              "their rates (legged_wbc.ros.io.topics.RECORDED_TOPICS)", unit="s of recording",
                              live=False)
    stamp_source: str = param("node_clock", desc="message time stamps: node_clock = receive time on the node's "
                              "clock (sim time with use_sim_time), clock_topic = the newest recorded /clock (sim "
                              "time without a TimeSource; what the container uses)",
                              choices=("node_clock", "clock_topic"), live=False)
    compression: str = param("zstd", desc="MCAP chunk compression, as rosbag2's MCAP storage writes by default "
                             "(zstd); none = uncompressed chunks. sqlite3 is never compressed",
                             choices=("zstd", "none"), live=False)

    hold_topics: tuple = param((), desc="start-up: subscribe these typed topics only once every other typed topic "
                               "has a matched publisher (the per-process launch names the bridge's topics: the "
                               "bridge, waiting for a subscriber on each, then publishes tick 0 only when the "
                               "recorder takes the estimator's and controller's outputs)", type="str_array", live=False)
    hold_timeout: float = param(45.0, 0.0, 3600.0, "start-up: subscribe the hold_topics anyway after this long "
                                "(logged); 0 = wait forever", unit="s wall", live=False)
    hold_until: tuple = param((), desc="start-up: the typed topics whose publishers the hold waits for (default, "
                              "empty: every typed topic not held); the per-process launch names the estimator's "
                              "and the controller's outputs (controller:=external: no /wbc/* topic is published)",
                              type="str_array", live=False)

    def __post_init__(self):
        validate(self)


class StartupGate:
    """The order of the recorder's start-up subscriptions (per-process layout: bag complete from tick 0).

    A recorder in its own process matches the estimator's and controller's publishers some time after
    it subscribes; their tick-0 wait (``endpoints.wait_for_matched_subscribers``) covers only the
    subscriptions their own graph view shows by then, so under load the recorder missed their first
    ticks. The gate closes that race from the recorder's side: the typed topics are split into
    ``first`` (subscribed at once) and ``held`` (``hold_topics``: the bridge's). ``ready(matched,
    in_graph)`` is true once every ``first`` topic has at least one matched publisher and as many as the
    graph shows; then the recorder subscribes the held topics. The bridge (``startup_wait_all_topics``)
    waits for a matched subscriber on each of its topics, and on some of them the recorder is the only
    one, so tick 0 starts only after the recorder is matched with the estimator's and controller's
    outputs. ``expired()``: ``hold_timeout`` passed (subscribe anyway). ``until``: the ``first`` topics to
    wait for (empty: all of them), so a typed topic nobody publishes in this launch (``/wbc/*`` with an
    outside controller) does not hold the start for ``hold_timeout``."""

    def __init__(self, typed: dict, hold, timeout: float, clock: Callable[[], float] = time.monotonic,
                 until=()):
        hold, until = set(hold), set(until)
        self.first = [t for t, typ in typed.items() if typ and t not in hold]
        self.awaited = [t for t in self.first if not until or t in until]
        self.held = [t for t, typ in typed.items() if typ and t in hold]
        self.open = not self.held
        self.clock = clock
        self.t_end = clock() + timeout if timeout else float("inf")

    def missing(self, matched: Callable[[str], int], in_graph: Callable[[str], int]) -> list[str]:
        """The awaited ``first`` topics not matched yet (``matched(topic)``: the subscription's matched
        publishers, ``in_graph(topic)``: the publishers the graph shows)."""
        return [t for t in self.awaited if matched(t) < max(1, in_graph(t))]

    def expired(self) -> bool:
        return self.clock() >= self.t_end

    def poll(self, matched, in_graph, force: bool = False) -> list[str] | None:
        """None while the gate stays closed; when it opens (now: ready, expired or ``force``), the
        ``first`` topics still unmatched (empty when all are)."""
        if self.open:
            return None
        missing = [] if force else self.missing(matched, in_graph)
        if missing and not self.expired():
            return None
        self.open = True
        return missing


class TopicChoice:
    """Which topics the recorder takes (:class:`RecorderConfig` ``topics``, ``exclude``, ``record_all``).
    ``wanted``: each listed topic (its name resolved by ``resolve``, e.g. the node's ``resolve_topic_name``)
    -> its type, or None (subscribed once discovery shows a publisher); empty: every topic is wanted."""

    def __init__(self, topics, exclude, resolve: Callable[[str], str]):
        self.wanted: dict[str, str | None] = {resolve(name): typ or None for name, _, typ in
                                              (entry.partition(":") for entry in topics)}
        self.exclude = set(exclude)

    def takes(self, topic: str, record_all: bool) -> bool:
        """Record ``topic`` (one not subscribed yet)? Not excluded, and listed, or every topic wanted."""
        return topic not in self.exclude and (not self.wanted or topic in self.wanted or record_all)


class PeerWatch:
    """``stop_when_gone``: the watched nodes once seen in the ROS graph, and the first of them that left it."""

    def __init__(self):
        self.seen: set[str] = set()

    def gone(self, watch, names: set) -> str | None:
        """The first node of ``watch`` seen before and not in ``names`` (the graph's node names now), else None."""
        self.seen |= names & set(watch)
        return next((p for p in watch if p in self.seen and p not in names), None)


class LostMessages:
    """Per topic, the messages DDS lost before the recorder took them (the subscriptions' message-lost
    event: a reliable writer's KEEP_LAST history overwrote them before they were received). ``touch``
    is called on each loss (the recorder's idle clock)."""

    def __init__(self, touch: Callable[[], None] = lambda: None):
        self.per_topic: dict[str, int] = {}
        self._touch = touch

    def callbacks(self, topic: str):
        """The ``event_callbacks`` of ``topic``'s subscription (rclpy's, imported here: the writer process
        never calls this)."""
        from rclpy.event_handler import SubscriptionEventCallbacks

        return SubscriptionEventCallbacks(message_lost=lambda info: self.add(topic, int(info.total_count_change)))

    def add(self, topic: str, n: int) -> None:
        if n > 0:
            self.per_topic[topic] = self.per_topic.get(topic, 0) + n
            self._touch()

    def line(self, path) -> str:
        """One line when messages were lost (a recording that is not clean), else ''."""
        n = sum(self.per_topic.values())
        if not n:
            return ""
        per = ", ".join(f"{t} {k}" for t, k in sorted(self.per_topic.items()))
        return f"recording INCOMPLETE: {n} messages were lost before the recorder took them ({per}); the bag {path} holds the others"


def describe_publishers(infos) -> tuple[list, str | None]:
    """``(offered QoS profiles, RIHS01 type hash or None)`` of a topic's publishers (rclpy endpoint infos)."""
    digest = None
    for i in infos:
        h = str(getattr(i, "topic_type_hash", "") or "")
        if h.startswith("RIHS01_") and h != "RIHS01_" + "0" * 64:
            digest = h
            break
    return [qos_to_rosbags(i.qos_profile) for i in infos], digest


def message_class(msgtype: str):
    """The rclpy message class of ``pkg/msg/Name`` (raises ImportError/AttributeError)."""
    pkg, kind, name = msgtype.split("/")
    return getattr(importlib.import_module(f"{pkg}.{kind}"), name)


def _msg_file(msgtype: str) -> Path | None:
    """The installed ``share/<pkg>/msg/<Name>.msg``: in the venv (the PyPI ROS wheels install there)
    or under an ``AMENT_PREFIX_PATH`` prefix."""
    pkg, kind, name = msgtype.split("/")
    prefixes = [sys.prefix, *filter(None, os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep))]
    for prefix in prefixes:
        p = Path(prefix, "share", pkg, kind, f"{name}.msg")
        if p.exists():
            return p
    return None


def _type_description_file(msgtype: str) -> Path | None:
    """The installed ``share/<pkg>/msg/<Name>.json`` (rosidl's type description with its hashes), if any."""
    path = _msg_file(msgtype)
    return path.with_suffix(".json") if path is not None and path.with_suffix(".json").exists() else None


def rihs01_of_description(described: dict) -> str:
    """RIHS01 of a type description as rosidl computes it (``rosidl_generator_type_description.
    calculate_type_hash``): SHA-256 of the compact JSON of ``{type_description, referenced_type_descriptions}``
    without the fields' default values."""
    d = {"type_description": described["type_description"],
         "referenced_type_descriptions": described["referenced_type_descriptions"]}
    strip = lambda td: {**td, "fields": [{k: v for k, v in f.items() if k != "default_value"}   # noqa: E731
                                         for f in td["fields"]]}
    d = {"type_description": strip(d["type_description"]),
         "referenced_type_descriptions": [strip(td) for td in d["referenced_type_descriptions"]]}
    import hashlib

    text = json.dumps(d, ensure_ascii=True, allow_nan=False, indent=None, separators=(", ", ": "), sort_keys=False)
    return "RIHS01_" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def type_hash(msgtype: str, typestore=None) -> str:
    """The RIHS01 type hash of ``msgtype``: computed from the installed rosidl type description
    (``share/<pkg>/msg/<Name>.json``, what the type support and the ROS graph use; a mismatch with the
    hash stored in that file raises), else from rosbags' type store (types without an installed
    package, e.g. ``tf2_msgs``; rosbags follows the same algorithm, except that it maps ``char`` to
    ``uint8``, which none of the recorded types use)."""
    path = _type_description_file(msgtype)
    if path is not None:
        doc = json.loads(path.read_text())
        digest = rihs01_of_description(doc["type_description_msg"])
        shipped = next((h["hash_string"] for h in doc.get("type_hashes", []) if h.get("type_name") == msgtype), None)
        if shipped is not None and shipped != digest:
            raise ValueError(f"{path}: type hash {shipped} does not match its description ({digest})")
        return digest
    if typestore is None:
        from rosbags.typesys import Stores, get_typestore

        typestore = get_typestore(Stores.ROS2_KILTED)
        ensure_type(typestore, msgtype)
    return typestore.hash_rihs01(msgtype)


def ensure_type(typestore, msgtype: str, _seen: set | None = None) -> None:
    """Register ``msgtype`` (and what it uses) in ``typestore`` from installed ``.msg`` files if missing."""
    from rosbags.typesys import get_types_from_msg
    from rosbags.typesys.base import Nodetype

    seen = _seen if _seen is not None else set()
    if msgtype in seen:
        return
    seen.add(msgtype)
    if msgtype not in typestore.fielddefs:
        path = _msg_file(msgtype)
        if path is None:
            raise KeyError(f"no message definition for {msgtype} (not in the type store, no .msg installed)")
        typestore.register(get_types_from_msg(path.read_text(), msgtype))
    for _, desc in typestore.fielddefs[msgtype][1]:
        node = desc
        while node[0] in (Nodetype.ARRAY, Nodetype.SEQUENCE):
            node = node[1][0]
        if node[0] == Nodetype.NAME:
            ensure_type(typestore, node[1], seen)


def qos_to_rosbags(profile):
    """rclpy ``QoSProfile`` -> ``rosbags.interfaces.Qos`` (for ``offered_qos_profiles``)."""
    from rosbags.interfaces import Qos, QosDurability, QosHistory, QosLiveliness, QosReliability, QosTime

    def t(d):
        ns = d.nanoseconds
        if ns >= 2**63 - 1 or ns < 0:
            return QosTime(sec=0x7FFFFFFF, nsec=0xFFFFFFFF)  # rosbag2's "infinite"
        return QosTime(sec=ns // 1_000_000_000, nsec=ns % 1_000_000_000)

    def enum(cls, v, default):
        try:
            return cls(int(v))
        except ValueError:
            return default

    return Qos(
        history=enum(QosHistory, profile.history, QosHistory.UNKNOWN),
        depth=int(profile.depth),
        reliability=enum(QosReliability, profile.reliability, QosReliability.UNKNOWN),
        durability=enum(QosDurability, profile.durability, QosDurability.UNKNOWN),
        deadline=t(profile.deadline),
        lifespan=t(profile.lifespan),
        liveliness=enum(QosLiveliness, profile.liveliness, QosLiveliness.UNKNOWN),
        liveliness_lease_duration=t(profile.liveliness_lease_duration),
        avoid_ros_namespace_conventions=bool(profile.avoid_ros_namespace_conventions),
    )


_MCAP_MESSAGE = struct.Struct("<BQHIQQ")   # opcode, record length, channel id, sequence, log time, publish time
_MCAP_CHUNK_BYTES = 2**20                  # rosbags closes a chunk past 1 MiB


def _has_mcap_internals(writer) -> bool:
    """The ``rosbags`` MCAP writer internals :meth:`BagWriter._mcap_write` relies on (pinned rosbags 0.11.9);
    without them every message goes through ``Writer.write``."""
    s = getattr(writer, "storage", None)
    return (writer.compression_mode.name in ("NONE", "STORAGE") and type(s).__name__ == "McapWriter"
            and all(hasattr(s, a) for a in ("chunk", "channel_stats", "close_chunk", "message_start_time"))
            and all(hasattr(writer, a) for a in ("counts", "min_timestamp", "max_timestamp")))


class BagStamps:
    """The recorder's time stamps: the receive time on the node's clock (``now``), or, with sim time,
    never before the newest recorded ``/clock`` (it is usually taken before the TimeSource's
    best-effort copy, so the samples published right after a clock tick get that tick's time)."""

    def __init__(self, sim_time: bool):
        self.sim_time = sim_time
        self.clock_ns = 0

    def _stamp(self, topic: str, now: int, clock_ns) -> int:
        if not self.sim_time:
            return now
        if topic == "/clock" and clock_ns is not None and clock_ns > self.clock_ns:
            self.clock_ns = clock_ns
        c = self.clock_ns
        return now if now >= c else c        # max(now, c) (the builtin costs ~3x: every recorded message)

    def of_bytes(self, topic: str, data: bytes, now: int) -> int:
        clock = None
        if topic == "/clock" and len(data) >= 12 and data[1] == 1:   # CDR little-endian Clock
            sec, nsec = struct.unpack_from("<iI", data, 4)
            clock = sec * 1_000_000_000 + nsec
        return self._stamp(topic, now, clock)

    def of_message(self, topic: str, msg, now: int) -> int:
        clk = getattr(msg, "clock", None) if topic == "/clock" else None
        return self._stamp(topic, now, None if clk is None else clk.sec * 1_000_000_000 + clk.nanosec)

    def of_value(self, topic: str, value, now: int) -> int:
        """An adapted value (``/clock``'s is its time [ns])."""
        return self._stamp(topic, now, int(value) if topic == "/clock" else None)


def default_output() -> str:
    return datetime.now().strftime("rosbag2_%Y_%m_%d-%H_%M_%S")


ROS_DISTRO = "kilted"   # what rosbag2 writes in metadata.yaml (rosbags writes "rosbags")


class BagWriter:
    """A rosbag2 being written: ``add_topic``, ``write`` (serialized messages), ``close``.

    As rosbag2 (Kilted) writes it, on top of ``rosbags``' writer: ``ros_distro: kilted`` (metadata.yaml,
    the MCAP ``rosbag2`` metadata record, the sqlite3 ``schema`` table); each MCAP channel's metadata holds
    ``topic_type_hash`` (RIHS01, :func:`type_hash`) next to ``offered_qos_profiles``; MCAP chunks are
    zstd-compressed unless ``compression="none"`` (rosbag2's MCAP default; metadata.yaml's
    ``compression_format``/``compression_mode`` stay empty: compression inside the storage, as rosbag2 says).

    ``chunk_by_caller`` (the recorder process): an MCAP chunk is closed (sqlite3: the transaction committed)
    only at :meth:`end_batch`, so the caller knows which of the messages it wrote are in the file (a chunk, a
    commit is the unit the storage writes). Without it, sqlite3 commits past ~1 MiB as MCAP closes its chunks
    (rosbags alone commits at :meth:`close` only: a writer that dies leaves an empty bag). sqlite's errors of
    the disk (full, I/O) are raised as ``OSError``, as MCAP's are."""

    def __init__(self, path: Path, storage: str = "mcap", custom_data: str = "",
                 describe: Callable[[str], tuple[list, str | None]] | None = None, compression: str = "zstd",
                 chunk_by_caller: bool = False):
        from rosbags.rosbag2 import StoragePlugin, Writer
        from rosbags.rosbag2.enums import CompressionFormat, CompressionMode
        from rosbags.typesys import Stores, get_typestore

        self.typestore = get_typestore(Stores.ROS2_KILTED)
        self.path = Path(path)
        if self.path.exists():
            raise FileExistsError(f"output {self.path} exists already; rosbag2 never overwrites a bag")
        if compression not in ("zstd", "none"):
            raise ValueError(f"compression must be zstd or none, not {compression!r}")
        plugin = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}[storage]
        self.writer = Writer(self.path, version=9, storage_plugin=plugin)
        if storage == "mcap" and compression == "zstd":
            self.writer.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
        for item in filter(None, (s.strip() for s in custom_data.split(";"))):
            key, _, value = item.partition("=")
            self.writer.set_custom_data(key.strip(), value.strip())
        self.writer.open()
        self.storage = storage
        _as_rosbag2_writes(self.writer.storage)
        self._mcap = self.writer.storage if storage == "mcap" and _has_mcap_internals(self.writer) else None
        self._sqlite = getattr(self.writer.storage, "conn", None) if storage == "sqlite3" else None
        self._auto_chunk = not (chunk_by_caller and (self._mcap is not None or self._sqlite is not None))
        self.chunks_closed = 0              # chunk_by_caller: chunks (sqlite3: commits) end_batch put into the file
        self._pending = 0                   # sqlite3: bytes written since the last commit (messages + 24 each)
        self.describe = describe or (lambda topic: ([], None))
        self.types: dict[str, str] = {}
        self.counts: dict[str, int] = {}
        self.connections: dict[str, object] = {}
        self.closed = False

    def add_topic(self, topic: str, msgtype: str) -> None:
        """Make ``topic`` writable (raises if ``msgtype`` has no definition)."""
        ensure_type(self.typestore, msgtype)
        self.types[topic] = msgtype
        self.counts.setdefault(topic, 0)

    def write(self, topic: str, t_ns: int, data: bytes) -> None:
        """Write one serialized message of ``topic`` stamped ``t_ns``."""
        if self._mcap is not None:
            self._mcap_write(self._connection(topic), t_ns, data)
        elif self._sqlite is not None:
            self._sqlite_write(topic, t_ns, data)
        else:
            self.writer.write(self._connection(topic), t_ns, data)
        self.counts[topic] += 1

    def _sqlite_write(self, topic: str, t_ns: int, data) -> None:
        """``rosbags``' ``Writer.write`` for sqlite3 (one INSERT into the open transaction), committed past
        ~1 MiB (:data:`_MCAP_CHUNK_BYTES`) unless the caller commits (:meth:`end_batch`)."""
        try:
            self.writer.write(self._connection(topic), t_ns, data)
            self._pending += len(data) + 24
            if self._auto_chunk and self._pending > _MCAP_CHUNK_BYTES:
                self._commit()
        except sqlite3.Error as exc:
            raise _as_os_error(exc) from exc

    def _commit(self) -> None:
        self._sqlite.commit()
        self._pending = 0
        self.chunks_closed += 1

    def _mcap_write(self, conn, t_ns: int, data) -> None:
        """``rosbags``' ``Writer.write`` for MCAP, the same bytes in ~4 instead of ~11 us: one MCAP Message
        record (opcode 0x05, length, channel id, sequence 0, log and publish time, data) appended to the
        open chunk with one ``struct`` call instead of a ``BytesIO`` per message, and the same bookkeeping
        (chunk index, channel statistics, time range, per-connection counts). Checked byte for byte against
        ``Writer.write`` by ``test/test_bag_process.py``."""
        w, s = self.writer, self._mcap
        cid = conn.id
        if t_ns < s.message_start_time:
            s.message_start_time = t_ns
        if t_ns > s.message_end_time:
            s.message_end_time = t_ns
        s.channel_stats[cid] += 1
        chunk = s.chunk
        if t_ns < chunk.message_start_time:
            chunk.message_start_time = t_ns
        if t_ns > chunk.message_end_time:
            chunk.message_end_time = t_ns
        bio = chunk.bio
        chunk.msgs[cid].append((t_ns, bio.tell()))
        bio.write(_MCAP_MESSAGE.pack(0x05, 22 + len(data), cid, 0, t_ns, t_ns))
        bio.write(data)
        if bio.tell() > _MCAP_CHUNK_BYTES and self._auto_chunk:
            s.close_chunk()
        w.counts[cid] += 1
        if t_ns < w.min_timestamp:
            w.min_timestamp = t_ns
        if t_ns > w.max_timestamp:
            w.max_timestamp = t_ns

    def end_batch(self, force: bool = False) -> bool:
        """``chunk_by_caller``: close the open MCAP chunk (sqlite3: commit the transaction) if it passed
        :data:`_MCAP_CHUNK_BYTES` (or ``force`` and it holds anything) and hand the file its bytes. True when
        every message written so far is in the file (the OS has it: a killed process loses none of it), or
        when the writer does not tell (rosbags' own chunking): the caller cannot do better than take them as
        written. A failed commit (a full disk) raises ``OSError``."""
        if self._auto_chunk:
            return True
        if self._sqlite is not None:
            return self._end_sqlite_batch(force)
        s = self._mcap
        size = s.chunk.bio.tell()
        if size > _MCAP_CHUNK_BYTES or (force and size):
            s.close_chunk()
            s.bio.flush()
            self.chunks_closed += 1
            return True
        return not size

    def _end_sqlite_batch(self, force: bool) -> bool:
        if self._pending > _MCAP_CHUNK_BYTES or (force and self._pending):
            try:
                self._commit()
            except sqlite3.Error as exc:
                raise _as_os_error(exc) from exc
            return True
        return not self._pending

    def next_mark(self) -> int:
        """What :func:`~legged_wbc.ros.recording.bag_repair.in_file_mark` reads from the file once every
        message written so far is in it (``chunk_by_caller``): MCAP, the number of the chunk that closes
        them (:meth:`end_batch` closes it); sqlite3, the messages written (the rows after the commit)."""
        return sum(self.counts.values()) if self._sqlite is not None else self.chunks_closed + 1

    def set_custom_data(self, key: str, value: str) -> None:
        """A ``metadata.yaml`` custom-data entry (before :meth:`close`)."""
        self.writer.set_custom_data(key, value)

    def _connection(self, topic: str):
        conn = self.connections.get(topic)
        if conn is None:
            msgtype = self.types[topic]
            qos, digest = self.describe(topic)
            msgdef, _ = self.typestore.generate_msgdef(msgtype, ros_version=2)
            conn = self.writer.add_connection(topic, msgtype, msgdef=msgdef,
                                              rihs01=digest or type_hash(msgtype, self.typestore),
                                              offered_qos_profiles=qos)
            self.connections[topic] = conn
        return conn

    def close(self) -> None:
        """Close the bag (MCAP summary / sqlite commit, metadata.yaml)."""
        if self.closed:
            return
        self.closed = True
        self.writer.close()
        meta = self.path / "metadata.yaml"   # rosbags writes ros_distro: rosbags (2-space indent, one line)
        meta.write_text(meta.read_text().replace("\n  ros_distro: rosbags\n", f"\n  ros_distro: {ROS_DISTRO}\n"))
        if self.storage == "sqlite3":
            import sqlite3

            for db in self.path.glob("*.db3"):
                con = sqlite3.connect(db)
                with con:
                    con.execute("UPDATE schema SET ros_distro = ?", (ROS_DISTRO,))
                con.close()

    def abandon(self) -> None:
        """Let go of the storage files without writing anything more (after a write error: a full disk);
        what is on disk stays for :func:`~legged_wbc.ros.recording.bag_repair.repair_bag`."""
        self.closed = True
        for f in (getattr(self.writer.storage, "bio", None), getattr(self.writer.storage, "conn", None)):
            try:
                if f is not None:
                    f.close()
            except Exception:
                pass

    def size_bytes(self) -> int:
        """Bytes of the bag's storage files (after :meth:`close`)."""
        return bag_size_bytes(self.path)


def _as_os_error(exc: sqlite3.Error) -> Exception:
    """sqlite's error of the disk (full, I/O: its primary result codes 13 and 10) as the ``OSError`` the
    recorder handles for every storage (one line, the bag repaired); any other error as it is."""
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    if code == sqlite3.SQLITE_FULL:
        return OSError(errno.ENOSPC, f"sqlite: {exc}")
    if code == sqlite3.SQLITE_IOERR:
        return OSError(errno.EIO, f"sqlite: {exc}")
    return exc


def bag_size_bytes(path: Path) -> int:
    """Bytes of a rosbag2 directory's storage files (``*.mcap``, ``*.db3``, compressed variants)."""
    return sum(f.stat().st_size for f in Path(path).iterdir() if f.is_file() and f.name != "metadata.yaml")


def size_note(path: Path) -> str:
    """``"3.1 MB, 1.04 MB per recorded second"`` of a closed bag (its storage files over metadata.yaml's
    duration: sim time when the stamps are) for the recorder's closing line; "" if unreadable."""
    import yaml

    try:
        size = bag_size_bytes(path)
        info = yaml.safe_load((Path(path) / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
        duration_s = info["duration"]["nanoseconds"] / 1e9
    except (OSError, KeyError, TypeError, yaml.YAMLError):
        return ""
    per = f", {size / 1e6 / duration_s:.2f} MB per recorded second" if duration_s and duration_s > 0 else ""
    return f"{size / 1e6:.1f} MB{per}"


def _as_rosbag2_writes(storage) -> None:
    """Make ``rosbags``' open storage writer write what rosbag2 does where the two differ (pinned rosbags
    0.11.9): the MCAP channel metadata gets ``topic_type_hash``, the metadata handed to the storage (the MCAP
    ``rosbag2`` record, the sqlite3 ``metadata`` table) says ``ros_distro: kilted``."""
    close = storage.close

    def close_as_kilted(version, metadata: str):
        return close(version, metadata.replace("\nros_distro: rosbags", f"\nros_distro: {ROS_DISTRO}"))

    storage.close = close_as_kilted
    if type(storage).__name__ != "McapWriter":
        return
    from rosbags.rosbag2 import storage_mcap as sm

    def add_connection(connection, offered_qos_profiles: str) -> None:   # McapWriter.add_connection + the hash
        from io import BytesIO

        metadata = BytesIO()
        sm.write_string(metadata, "offered_qos_profiles")
        sm.write_string(metadata, offered_qos_profiles)
        if connection.digest:
            sm.write_string(metadata, "topic_type_hash")
            sm.write_string(metadata, connection.digest)
        storage.channels.append(sm.Channel(connection.id, connection.msgtype, connection.topic,
                                           connection.ext.serialization_format, metadata.getvalue()))
        storage.channel_stats[connection.id] = 0
        sm.write_channel(storage.chunk.bio, storage.channels[-1], storage.schemas)

    storage.add_connection = add_connection
