"""``bag_recorder``: records the stack's topics into a standard rosbag2 (MCAP by default, or sqlite3).

``ros2 bag`` (rosbag2) does not install from PyPI, so this node does its job for our stack: it
subscribes to topics as *serialized* messages (rclpy ``raw=True``: nothing is deserialized) and
writes them unchanged (CDR) with ``rosbags.rosbag2.Writer`` (rosbag2 format version 9, readable by
``ros2 bag``, ``rosbags`` and, for MCAP, any MCAP reader with the ``ros2msg`` schema decoder).

* Topics: ``topics`` lists ``/name`` or ``/name:pkg/msg/Type`` entries. An entry with a type is
  subscribed at start-up, before any publisher exists, so the first message is never missed; an
  entry without one is subscribed once graph discovery (every ``discovery_period``) shows a
  publisher. With ``record_all`` (or an empty ``topics``) every other discovered topic is recorded
  too (from its discovery on). ``exclude`` removes topics.
* QoS: reliable subscriptions of depth ``qos_depth`` (best-effort if a publisher only offers
  best-effort; transient-local if all publishers are, so latched data is recorded). A topic's
  ``offered_qos_profiles`` in the bag are the publishers' profiles, read from the graph when the
  topic's first message arrives.
* Message definitions and type hashes (RIHS01) come from rosbags' Kilted type store, or from the
  ``.msg`` files of the installed interface packages for types it lacks.
* Time stamps: receive time on the node's clock, i.e. sim time (``/clock``) when the node runs with
  ``use_sim_time: true`` (the launch file sets it), wall time otherwise. With sim time, a recorded
  ``/clock`` message also advances the recorder's time at once (it is subscribed first, so the
  samples published right after a clock tick get that tick's time rather than the previous one).
* Stopping: on SIGINT/SIGTERM, or when a node named in ``stop_when_gone`` (seen once) leaves the
  graph, the recorder first drains every message already received (until ``drain_time`` passes
  without a new one), then closes the bag, which writes the MCAP summary / commits sqlite and
  writes ``metadata.yaml``: the bag is complete and readable. Exit status 0; 2 for a bad
  parameter or an existing output directory.

Parameters: see :class:`RecorderConfig` and ``config/recorder.yaml``.
"""

from __future__ import annotations

import importlib
import os
import signal
import struct
import sys
import time
from datetime import datetime
from pathlib import Path

from legged_wbc.ros import io as ros_io
from dataclasses import dataclass

from legged_wbc.params import param, validate
from legged_wbc.ros.params import NodeParameters, ParameterSchemaError


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
    writer_thread: bool = param(False, desc="write the bag from a thread of its own (the callback only queues the "
                                "bytes): closing a 1 MiB MCAP chunk takes ~10 ms, which must not stall a control "
                                "loop sharing the process (the container sets it)", live=False)
    stamp_source: str = param("node_clock", desc="message time stamps: node_clock = receive time on the node's "
                              "clock (sim time with use_sim_time), clock_topic = the newest recorded /clock (sim "
                              "time without a TimeSource; what the container uses)",
                              choices=("node_clock", "clock_topic"), live=False)

    def __post_init__(self):
        validate(self)


# ------------------------------------------------------------------------------------ type support
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


WRITER_POLL_S = 0.005   # writer thread: how long it sleeps when the queue is empty [s]


def default_output() -> str:
    return datetime.now().strftime("rosbag2_%Y_%m_%d-%H_%M_%S")


# ------------------------------------------------------------------------------------ node
def _make_node_class():
    from rclpy.node import Node
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

    class BagRecorder(Node):
        """See the module docstring."""

        def __init__(self, **kwargs):
            super().__init__("bag_recorder", **kwargs)
            self.params = NodeParameters(self, RecorderConfig, on_change=self._on_config)
            P = self.params
            self.discovery_timer = None   # start_discovery_timer(): discovery + peer checks on a timer
            from rosbags.rosbag2 import StoragePlugin, Writer
            from rosbags.typesys import Stores, get_typestore

            self.typestore = get_typestore(Stores.ROS2_KILTED)
            out = Path(P["output"] or default_output()).expanduser()
            if out.exists():
                raise ParameterSchemaError(f"output {out} exists already; rosbag2 never overwrites a bag")
            plugin = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}[P["storage"]]
            self.writer = Writer(out, version=9, storage_plugin=plugin)
            for item in filter(None, (s.strip() for s in P["custom_data"].split(";"))):
                key, _, value = item.partition("=")
                self.writer.set_custom_data(key.strip(), value.strip())
            self.writer.open()
            self.path = out
            self.exclude = set(P["exclude"])
            self.wanted: dict[str, str | None] = {}
            for entry in P["topics"]:
                name, _, typ = entry.partition(":")
                self.wanted[self.resolve_topic_name(name)] = typ or None
            self.subs: dict[str, object] = {}
            self.types: dict[str, str] = {}
            self.connections: dict[str, object] = {}
            self.counts: dict[str, int] = {}
            self.last_rx = time.monotonic()
            self.seen_peers: set[str] = set()
            self.stop_reason: str | None = None
            self.closed = False
            self._qos_depth = int(P["qos_depth"])
            self._clock_topic_stamps = P["stamp_source"] == "clock_topic"
            self._sim_time = bool(self.get_parameter("use_sim_time").value) or self._clock_topic_stamps
            self._clock_ns = 0
            self._queue = None
            self._closing = False
            self._write_errors: set[str] = set()
            if P["writer_thread"]:
                import collections
                import threading

                self._queue = collections.deque()   # append: no wake-up, no GIL hand-over in the caller
                self._writer_thread = threading.Thread(target=self._writer_loop, name="bag_writer", daemon=True)
                self._writer_thread.start()
            self._QoS = (QoSProfile, HistoryPolicy, ReliabilityPolicy, DurabilityPolicy)
            for name, typ in self.wanted.items():
                if typ:
                    self._subscribe(name, typ, [])
            self.get_logger().info(f"recording to {out} ({P['storage']}), "
                                   f"{'all topics' if not self.wanted else sorted(self.wanted)}"
                                   f"{' + all discovered' if self.wanted and P['record_all'] else ''}, "
                                   f"stamps: {'sim time' if self._sim_time else 'wall time'}")

        # ---------------------------------------------------------------- parameters
        @property
        def config(self) -> RecorderConfig:
            return self.params.config

        def _on_config(self, cfg: RecorderConfig, changed: list) -> None:
            if "discovery_period" in changed and self.discovery_timer is not None:
                self.discovery_timer.timer_period_ns = int(round(cfg.discovery_period * 1e9))

        def start_discovery_timer(self):
            """Poll the graph (new topics, peers) every ``discovery_period`` from the executor."""
            def poll():
                self.discover()
                self.check_peers()

            self.discovery_timer = self.create_timer(self.config.discovery_period, poll)
            return self.discovery_timer

        def drain(self, spin_once, limit: float = 10.0) -> None:
            """Take everything already delivered (until ``drain_time`` passes without a message)."""
            drain = self.config.drain_time
            t_end = time.monotonic() + limit
            self.last_rx = time.monotonic()
            while time.monotonic() - self.last_rx < drain and time.monotonic() < t_end:
                spin_once(0.02)

        # ---------------------------------------------------------------- subscriptions
        def _subscribe(self, topic: str, msgtype: str, pub_infos) -> None:
            QoSProfile, HistoryPolicy, ReliabilityPolicy, DurabilityPolicy = self._QoS
            try:
                cls = message_class(msgtype)
                ensure_type(self.typestore, msgtype)
            except Exception as exc:
                self.get_logger().warning(f"not recording {topic}: type {msgtype} unavailable ({exc})")
                self.subs[topic] = None
                return
            reliable = all(i.qos_profile.reliability == ReliabilityPolicy.RELIABLE for i in pub_infos)
            latched = bool(pub_infos) and all(
                i.qos_profile.durability == DurabilityPolicy.TRANSIENT_LOCAL for i in pub_infos)
            qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=self._qos_depth,
                             reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE)
            self.types[topic] = msgtype
            self.counts[topic] = 0
            self.subs[topic] = ros_io.create_subscription(self, cls, topic, lambda data, t=topic: self._on_message(t, data),
                                                        qos, raw=True)
            self.get_logger().debug(f"subscribed {topic} [{msgtype}]")

        def subscribe_topics(self, topics: dict) -> None:
            """Subscribe ``topic -> message class`` at once (a container knows its topics before tick 0)."""
            for topic, cls in topics.items():
                if topic in self.subs or topic in self.exclude:
                    continue
                if self.wanted and topic not in self.wanted and not self.params["record_all"]:
                    continue
                pkg = cls.__module__.split(".")[0]
                self._subscribe(topic, f"{pkg}/msg/{cls.__name__}", [])

        def discover(self) -> None:
            for topic, types in self.get_topic_names_and_types():
                if topic in self.subs or topic in self.exclude or not types:
                    continue
                if self.wanted and topic not in self.wanted and not self.params["record_all"]:
                    continue
                infos = self.get_publishers_info_by_topic(topic)
                if not infos:
                    continue  # only subscribers so far
                self._subscribe(topic, self.wanted.get(topic) or types[0], infos)

        def check_peers(self) -> None:
            watch = self.config.stop_when_gone
            if not watch:
                return
            names = set(self.get_node_names())
            for peer in watch:
                if peer in names:
                    self.seen_peers.add(peer)
                elif peer in self.seen_peers and self.stop_reason is None:
                    self.stop_reason = f"node {peer} left the graph"

        # ---------------------------------------------------------------- writing
        def _connection(self, topic: str):
            conn = self.connections.get(topic)
            if conn is None:
                msgtype = self.types[topic]
                infos = self.get_publishers_info_by_topic(topic)
                qos = [qos_to_rosbags(i.qos_profile) for i in infos]
                digest = None
                for i in infos:
                    h = str(getattr(i, "topic_type_hash", "") or "")
                    if h.startswith("RIHS01_") and h != "RIHS01_" + "0" * 64:
                        digest = h
                        break
                msgdef, _ = self.typestore.generate_msgdef(msgtype, ros_version=2)
                conn = self.writer.add_connection(topic, msgtype, msgdef=msgdef,
                                                  rihs01=digest or self.typestore.hash_rihs01(msgtype),
                                                  offered_qos_profiles=qos)
                self.connections[topic] = conn
            return conn

        def _on_message(self, topic: str, data: bytes) -> None:
            if self.closed:
                return
            t = 0 if self._clock_topic_stamps else self.get_clock().now().nanoseconds
            if self._sim_time:
                if topic == "/clock" and len(data) >= 12 and data[1] == 1:  # CDR little-endian Clock
                    sec, nsec = struct.unpack_from("<iI", data, 4)
                    self._clock_ns = max(self._clock_ns, sec * 1_000_000_000 + nsec)
                # the recorded /clock is usually taken before the TimeSource's best-effort copy
                t = max(t, self._clock_ns)
            if self._queue is not None:
                self._queue.append((topic, t, data))
            else:
                self._write(topic, t, data)
            self.last_rx = time.monotonic()

        def _write(self, topic: str, t: int, data: bytes) -> None:
            self.writer.write(self._connection(topic), t, data)
            self.counts[topic] += 1

        def _writer_loop(self) -> None:
            """The writer thread: everything queued is written, in order, until close() and the
            queue is empty. It polls (every WRITER_POLL_S) instead of being woken per message."""
            q = self._queue
            while True:
                if not q:
                    if self._closing:
                        return
                    time.sleep(WRITER_POLL_S)
                    continue
                item = q.popleft()
                try:
                    self._write(*item)
                except Exception as exc:  # keep writing the others; say it once per topic
                    if item[0] not in self._write_errors:
                        self._write_errors.add(item[0])
                        self.get_logger().error(f"{item[0]}: could not write a message ({exc})")

        def close(self) -> None:
            if self.closed:
                return
            self.closed = True
            if self._queue is not None:
                self._closing = True             # the writer empties the queue, then returns
                self._writer_thread.join()
            self.writer.close()
            total = sum(self.counts.values())
            per = ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items()) if v)
            self.get_logger().info(f"bag closed: {self.path} ({total} messages: {per})")

    return BagRecorder


def main(argv: list[str] | None = None) -> int:
    import rclpy
    from rclpy.signals import SignalHandlerOptions

    rclpy.init(args=argv if argv is not None else sys.argv, signal_handler_options=SignalHandlerOptions.NO)
    node = executor = None
    stop = {"signal": None}

    def _on_signal(signum, frame):
        stop["signal"] = signal.Signals(signum).name

    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    rc = 0
    try:
        try:
            node = _make_node_class()()
        except ParameterSchemaError as exc:
            print(f"bag_recorder: {exc}", file=sys.stderr)
            return 2
        # ros_io.make_executor: rclpy's EventsExecutor by default (~50 instead of ~200 us of CPU per
        # message here), LEGGED_WBC_EXECUTOR=single for the SingleThreadedExecutor. It once "lost
        # messages and hung at shutdown": that is what an EventsExecutor does when spun without a
        # timeout (its queue busy-waits holding its mutex, see ros_io.spin_until); every spin here has one.
        executor = ros_io.make_executor()
        executor.add_node(node)
        next_poll = 0.0
        while stop["signal"] is None and node.stop_reason is None:
            executor.spin_once(timeout_sec=0.05)
            now = time.monotonic()
            if now >= next_poll:
                node.discover()
                node.check_peers()
                next_poll = now + node.config.discovery_period   # live
        why = f"signal {stop['signal']}" if stop["signal"] else node.stop_reason
        # drain: take everything already delivered before closing (never lose the last messages)
        node.drain(lambda t: executor.spin_once(timeout_sec=t))
        node.get_logger().info(f"stopping ({why})")
        node.close()
    finally:
        if node is not None and not node.closed:
            node.close()
        if executor is not None:  # before destroy_node: the EventsExecutor holds the subscriptions' callbacks
            executor.shutdown(timeout_sec=1.0)
        if node is not None:
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    return rc


if __name__ == "__main__":
    sys.exit(main())
