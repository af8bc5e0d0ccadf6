"""``bag_recorder``: records the stack's topics into a standard rosbag2 (MCAP by default, or sqlite3).

``ros2 bag`` (rosbag2) does not install from PyPI, so this node does its job for our stack: it
subscribes to topics as *serialized* messages (rclpy ``raw=True``: nothing is deserialized) and
writes them unchanged (CDR) with ``rosbags.rosbag2.Writer`` (rosbag2 format version 9, readable by
``ros2 bag``, ``rosbags`` and, for MCAP, any MCAP reader with the ``ros2msg`` schema decoder).

* Topics: ``topics`` lists ``/name`` or ``/name:pkg/msg/Type`` entries. An entry with a type is
  subscribed at start-up, before any publisher exists, so the first message is never missed; an
  entry without one is subscribed once graph discovery (every ``discovery_period``) shows a
  publisher. With ``record_all`` (or an empty ``topics``) every other discovered topic is recorded
  too (from its discovery on). ``exclude`` removes topics. ``hold_topics``: start-up order, see
  :class:`~legged_wbc.ros.recording.bag_writer.StartupGate` (per-process layout: the bag complete from tick 0).
* QoS: reliable subscriptions of depth ``qos_depth`` (best-effort if a publisher only offers
  best-effort; transient-local if all publishers are, so latched data is recorded). A topic's
  ``offered_qos_profiles`` in the bag are the publishers' profiles, read from the graph when the
  topic's first message arrives.
* Definitions, type hashes, stamps: :mod:`legged_wbc.ros.recording.bag_writer`; in a container the bag is
  written by a process of its own (:mod:`legged_wbc.ros.recording.bag_process`).
* Stopping: on SIGINT/SIGTERM, or when a node named in ``stop_when_gone`` (seen once) leaves the
  graph, the recorder first drains every message already received (until ``drain_time`` passes
  without a new one), then closes the bag, which writes the MCAP summary / commits sqlite and
  writes ``metadata.yaml``: the bag is complete and readable. Exit status 0; 2 for a bad
  parameter or an existing output directory; 1 when the recording failed (a full disk, a file size limit,
  a recorder process that died, stalled or found its ring corrupt: ``failure``, one line with what the bag
  holds, repaired from the disk as ``ros2 bag reindex`` does) or DDS lost messages on their way to it
  (``LostMessages``: per topic in the closing line and metadata.yaml, ``recording INCOMPLETE``).

Parameters: see :class:`~legged_wbc.ros.recording.bag_writer.RecorderConfig` and ``config/recorder.yaml``.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from rclpy.node import Node

from legged_wbc.ros.nodekit import background
from legged_wbc.ros import io as ros_io
from legged_wbc.ros.transport import endpoints
from legged_wbc.ros.recording.bag_process import LocalTaps, RecorderProcessError, close_sink, open_sink, subscription_qos
from legged_wbc.ros.recording.bag_writer import (BagStamps, LostMessages, PeerWatch, RecorderConfig, StartupGate,
                                                 TopicChoice, default_output, describe_publishers, message_class)
from legged_wbc.ros.recording.cdr_layout import message_class_name
from legged_wbc.ros.nodekit.params import NodeParameters, ParameterSchemaError, init_node_process


class BagRecorder(Node):
    """See the module docstring. ``own_publications_only`` (a container's recorder in ``layout:=split``):
    its in-process taps take this process's publications only; the linked part records its own
    (:class:`~legged_wbc.ros.recording.bag_process.PeerRecorder`)."""

    def __init__(self, own_publications_only: bool = False, **kwargs):
        super().__init__("bag_recorder", **kwargs)
        self.params = NodeParameters(self, RecorderConfig, on_change=self._on_config)
        P = self.params
        self.discovery_timer = None   # start_discovery_timer(): discovery + peer checks on a timer
        out = Path(P["output"] or default_output()).expanduser()
        try:
            self.bag = open_sink(out, P.config, lambda t: describe_publishers(self.get_publishers_info_by_topic(t)),
                                 log=self.get_logger().warning)
        except (FileExistsError, RecorderProcessError) as exc:
            raise ParameterSchemaError(str(exc)) from None
        # in-process messages and values (a container): packed for the recorder process by LocalTaps
        self.local = LocalTaps(self.bag, self) if hasattr(self.bag, "write_message") else None
        if self.local is not None:
            self.local.own_only = own_publications_only
        self.path = out
        self.choice = TopicChoice(P["topics"], P["exclude"], self.resolve_topic_name)
        self.wanted = self.choice.wanted       # topic -> its type, or None (TopicChoice)
        self.subs: dict[str, object] = {}
        self.counts = self.bag.counts
        self.lost = LostMessages(self._touch)    # per topic: what DDS lost before this recorder took it
        self.last_rx = time.monotonic()
        self.peers = PeerWatch()          # stop_when_gone
        self.stop_reason: str | None = None
        self.closed = False
        self.failure = ""                 # a failed recording, in one line (close; its owner says it last)
        self._write_error: OSError | None = None
        self._qos_depth = int(P["qos_depth"])
        self._clock_topic_stamps = P["stamp_source"] == "clock_topic"
        self.stamps = BagStamps(bool(self.get_parameter("use_sim_time").value) or self._clock_topic_stamps)
        self.gate = StartupGate(self.wanted, P["hold_topics"], P["hold_timeout"], until=P["hold_until"])
        for name in self.gate.first:
            self._subscribe(name, self.wanted[name], [])
        self.get_logger().info(f"recording to {out} ({P['storage']}), "
                               f"{'all topics' if not self.wanted else sorted(self.wanted)}"
                               f"{' + all discovered' if self.wanted and P['record_all'] else ''}, "
                               f"stamps: {'sim time' if self.stamps.sim_time else 'wall time'}")

    config = property(lambda self: self.params.config)   # the RecorderConfig

    def _on_config(self, cfg: RecorderConfig, changed: list) -> None:
        if "discovery_period" in changed and self.discovery_timer is not None:
            self.discovery_timer.period = float(cfg.discovery_period)   # from its next run

    def start_discovery_timer(self):
        """Poll the graph every ``discovery_period`` in the background thread (``discovery_timer``): no executor."""
        self.discovery_timer = background.for_node(self, self.config.discovery_period,
                                                   lambda: (self.discover(), self.check_peers()), "discovery")

    def drain(self, spin_once, limit: float = 10.0) -> None:
        """Take everything already delivered (until ``drain_time`` passes without a message)."""
        drain = self.config.drain_time
        t_end = time.monotonic() + limit
        self.last_rx = time.monotonic()
        while time.monotonic() - self.last_rx < drain and time.monotonic() < t_end:
            spin_once(0.02)

    # ---------------------------------------------------------------- subscriptions
    def _subscribe(self, topic: str, msgtype: str, pub_infos) -> None:
        try:
            cls = message_class(msgtype)
            self.bag.add_topic(topic, msgtype)
        except Exception as exc:
            self.get_logger().warning(f"not recording {topic}: type {msgtype} unavailable ({exc})")
            self.subs[topic] = None
            return
        qos = subscription_qos(pub_infos, self._qos_depth)   # as the publishers offer it
        tap = self.local.tap(topic) if self.local is not None else None
        self.subs[topic] = endpoints.create_subscription(self, cls, topic, lambda data, t=topic: self._on_message(t, data),
                                                    qos, raw=True, tap=tap, event_callbacks=self.lost.callbacks(topic))
        self.get_logger().debug(f"subscribed {topic} [{msgtype}]")

    def subscribe_topics(self, topics: dict) -> None:
        """Subscribe ``topic -> message class`` at once (a container knows its topics before tick 0)."""
        for topic, cls in topics.items():
            if topic in self.subs or not self.choice.takes(topic, self.params["record_all"]):
                continue
            self._subscribe(topic, message_class_name(cls), [])

    def poll_gate(self, force: bool = False) -> None:
        """Subscribe the held topics when the ``StartupGate`` opens (forced: a container, all in-process)."""
        late = self.gate.poll(lambda t: self.subs[t].get_publisher_count() if self.subs.get(t) else 1,
                              self.count_publishers, force)
        if late is not None and self.gate.held:
            for name in self.gate.held:
                self._subscribe(name, self.wanted[name], [])
            (self.get_logger().warning if late else self.get_logger().info)(
                f"start-up: {f'no matched publisher on {late}' if late else 'every typed topic matched'}; "
                f"subscribed {self.gate.held}")

    def discover(self) -> None:
        if not self.gate.open:
            return      # the bridge's topics (record_all) only after the gate: poll_gate
        for topic, types in self.get_topic_names_and_types():
            if topic in self.subs or not types or not self.choice.takes(topic, self.params["record_all"]):
                continue
            infos = self.get_publishers_info_by_topic(topic)
            if not infos:
                continue  # only subscribers so far
            self._subscribe(topic, self.wanted.get(topic) or types[0], infos)

    def check_peers(self) -> None:
        watch = self.config.stop_when_gone    # live
        gone = self.peers.gone(watch, set(self.get_node_names()) if watch else set())
        if gone is not None and self.stop_reason is None:
            self.stop_reason = f"node {gone} left the graph"

    # ---------------------------------------------------------------- writing
    def _on_message(self, topic: str, data: bytes) -> None:
        if not self.closed and self._write_error is None:
            now = 0 if self._clock_topic_stamps else self.get_clock().now().nanoseconds
            try:
                self.bag.write(topic, self.stamps.of_bytes(topic, data, now), data)
            except OSError as exc:        # the disk: nothing more can be written (said once, at close)
                self._write_error = exc
                self.stop_reason = "the bag cannot be written"
            self.last_rx = time.monotonic()

    def _touch(self) -> None:             # a loss counts as traffic for the idle clock
        self.last_rx = time.monotonic()

    def record_linked_part(self, bus) -> list[str]:
        """``layout:=split``: the linked part (host link RECORD) records its own topics that this recorder
        subscribes into a second ring, stamped by this process's ``/clock`` (``IntraProcessBus.record_peer``)."""
        ring = self.bag.open_peer_ring()
        return bus.record_peer({"ring": ring, "stamp_topic": "/clock", "clock_topic": self._clock_topic_stamps,
                                "sim_time": self.stamps.sim_time})

    def close(self) -> None:
        """Close the bag once (:func:`~legged_wbc.ros.recording.bag_process.close_sink`): ``failure`` is set
        when the recording failed (its owner says it last), else the "bag closed" line is logged."""
        if self.closed:
            return
        self.closed = True
        self.failure, note = close_sink(self.bag, self.path, self.config.custom_data, self._write_error,
                                        own_only=self.local is not None and self.local.own_only, lost=self.lost.per_topic)
        if note:
            self.get_logger().info(note)


def main(argv: list[str] | None = None) -> int:
    import rclpy

    if not init_node_process(argv, "bag_recorder"):
        return 2
    node = executor = None
    stop = {"signal": None}

    def _on_signal(signum, frame):
        stop["signal"] = signal.Signals(signum).name

    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # a file size limit: a write error said in one line, not a kill
    rc = 0
    try:
        try:
            node = BagRecorder()
        except ParameterSchemaError as exc:
            print(f"bag_recorder: {exc}", file=sys.stderr)
            return 2
        # EventsExecutor by default (~50 instead of ~200 us CPU a message); every spin has a timeout (ros_io.spin_until)
        executor = ros_io.make_executor()
        executor.add_node(node)
        next_poll = 0.0
        while stop["signal"] is None and node.stop_reason is None:
            executor.spin_once(timeout_sec=0.05)
            node.poll_gate()
            now = time.monotonic()
            if now >= next_poll:
                node.discover()
                node.check_peers()
                next_poll = now + node.config.discovery_period   # live
        why = f"signal {stop['signal']}" if stop["signal"] else node.stop_reason
        node.drain(lambda t: executor.spin_once(timeout_sec=t))   # never lose the last messages
        node.get_logger().info(f"stopping ({why})")
        node.close()
        if node.failure or node.lost.line(node.path):
            node.get_logger().error(node.failure or node.lost.line(node.path))
            rc = 1
    finally:
        if node is not None and not node.closed:
            node.close()
        if executor is not None:  # before destroy_node: the EventsExecutor holds the subscriptions' callbacks
            executor.shutdown(timeout_sec=1.0)
        if node is not None:
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
        ros_io.ignore_stop_signals()   # the bag is closed: a late stop signal must not make this an exit -2
    return rc


if __name__ == "__main__":
    sys.exit(main())
