"""``foxglove:=PORT``: the running stack live in Foxglove, over the Foxglove WebSocket protocol (``foxglove-sdk``).

What ``foxglove_bridge`` does for a ROS install, inside the container (``layout:=container``; with
``layout:=split`` in the simulation part: the control part's topics come over the host link, whose frame
carries them every tick while the view is served, and its nodes' parameters through their services): a node
``foxglove_bridge`` composed with the others serves, on ``127.0.0.1:PORT`` only (WebSocket subprotocol
``foxglove.sdk.v1``; reach it from another machine deliberately, through an SSH tunnel: ``ssh -L
8765:localhost:8765 robot``). The protocol authenticates nobody and foxglove-sdk checks no ``Origin``: any
local user, or a web page open in a local browser, can connect. So the view is **read-only** unless the launch
says ``foxglove_control:=true``: parameters are listed and read, a set is refused (one status line, counted),
and the server advertises no ``clientPublish`` (a client's channel is refused all the same):

* **every topic** of the stack as a channel with its ROS 2 schema (``ros2msg``: the message definition
  the recorder writes into bags, :func:`message_definition`) and ``cdr`` messages: the in-process topics
  (and the linked part's) through a tap on the bus, the others (``/robot_description``, ``/tf_static``,
  ``/rosout``, an outside node's) found by polling the graph (1 s) and taken through a DDS subscription
  while a client subscribes to them (a latched one from the start), so their publisher serializes nothing
  for the view while nobody watches. A latched topic's last message is
  sent again to a client that subscribes later (the 3D panel needs ``/robot_description``). Message log
  times are sim time (the newest ``/clock``, as in the bags); the server announces it (``time``).
* **the nodes' live parameters** as ``/<node>.<parameter>``: get, and with ``foxglove_control:=true`` set
  (through ``node.set_parameters``, or the linked part's nodes' ``SetParameters`` service,
  :class:`~legged_wbc.ros.nodekit.remote_node.RemoteNode`: the declared type, range and read-only flag, then the node's
  own validation, :class:`~legged_wbc.ros.nodekit.params.NodeParameters`; a refusal is one status line to the
  client naming the parameter and why), updates pushed to subscribed clients (from any source: ``legged-wbc
  param set`` too).
* **client publishing** (``foxglove_control:=true``) of the command topics a user may send
  (:data:`CLIENT_TOPICS`: ``/cmd_vel``, ``geometry_msgs/msg/Twist``, ``cdr``): each message is checked (it
  deserializes as that type) and published on DDS by this node, as any outside publisher's; anything else is refused and counted.

Off the control path, the way the recorder is: the tap (:class:`ViewerTap`, the bus's deferred deliveries
after each sample's chain, in the bridge's thread) looks at a dict and, for a channel somebody is
subscribed to, packs the message's numbers (:class:`~legged_wbc.ros.recording.cdr_layout.MessageLayout`, the
adapters' records, ~1-2 us) into a bounded queue; nothing else. The process's background thread
(:mod:`legged_wbc.ros.nodekit.background`) splices the CDR bytes every 10 ms and hands them to the SDK, whose
own threads send them; a client that reads too slowly loses its oldest messages in the SDK
(``message_backlog_size``), never a tick. What the queue drops (full: the background thread fell
``QUEUE_MAX`` messages behind) is counted and said in ``/diagnostics`` (``foxglove_bridge: live view``).
With no client subscribed the tap costs a dict look-up per message; with ``foxglove:=0`` (the default) it
does not exist.
"""

from __future__ import annotations

import collections
import time

from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

from legged_wbc.ros.io.adapters import AdaptedValue
from legged_wbc.ros.nodekit import background, diagnostics
from legged_wbc.ros.recording.bag_writer import ensure_type, message_class
from legged_wbc.ros.recording.cdr_layout import LayoutError, MessageLayout, message_class_name
from legged_wbc.ros.transport import endpoints

NODE_NAME = "foxglove_bridge"
HOST = "127.0.0.1"
SEND_PERIOD_S = 0.01
QUEUE_MAX = 20000                     # messages waiting for the background thread (~1 s of the whole stack)
BACKLOG = 4096                        # per client, in the SDK: the oldest message dropped past it
DISCOVERY_PERIOD_S = 1.0
EXCLUDE = ("/parameter_events",)
CLIENT_TOPICS = {"/cmd_vel": "geometry_msgs/msg/Twist"}   # topic -> the type a client may publish on it


def message_definition(msgtype: str, typestore=None) -> str:
    """The ``ros2msg`` text of ``msgtype`` (``pkg/msg/Name``) as the recorder writes it into a bag's MCAP
    schema (``rosbags``' type store, the installed ``.msg`` files added): what Foxglove parses."""
    if typestore is None:
        from rosbags.typesys import Stores, get_typestore

        typestore = get_typestore(Stores.ROS2_KILTED)
    ensure_type(typestore, msgtype)
    return typestore.generate_msgdef(msgtype, ros_version=2)[0]


class ViewerTap:
    """The control thread's side (a raw subscription's ``tap`` on every in-process topic; ``batch``: a
    sample's deferred deliveries at once). For a topic with a subscribed client it appends
    ``(topic, log_time_ns, payload, splicer)`` to ``queue``: the fixed-layout record of the message and the
    :class:`~legged_wbc.ros.recording.cdr_layout.CdrSplicer` that makes its CDR, or, for a message without a
    fixed layout, its CDR and None."""

    own_only = False

    def __init__(self, wanted: dict, max_len: int = QUEUE_MAX):
        self.wanted = wanted                  # topic -> subscribed clients (the server's listener keeps it)
        self.queue = collections.deque()
        self.max_len = max_len
        self.clock_ns = 0                     # the newest /clock [ns sim]
        self.dropped = self.failed = 0
        self._layouts: dict = {}              # topic -> MessageLayout (messages) or record size (values)
        self._splicers: dict = {}             # topic -> the CdrSplicer of its current layout
        self._serialized: set = set()         # topics without a fixed layout: serialized here
        self.batch = self.on_batch

    def __call__(self, item, topic: str = "") -> None:
        self.on_batch([(topic, item)])

    def on_batch(self, items) -> None:
        wanted, q = self.wanted, self.queue
        for topic, item in items:
            if topic == "/clock" and type(item) is AdaptedValue:
                self.clock_ns = int(item.value)
            if not wanted.get(topic):
                continue
            if len(q) >= self.max_len:
                self.dropped += 1
                continue
            try:
                q.append(self._pack(topic, item))
            except Exception:             # a message we cannot pack costs itself only
                self.failed += 1

    def on_bytes(self, topic: str, data) -> None:
        """A message's CDR (a background publisher's, DDS): queued as it is."""
        if self.wanted.get(topic):
            if len(self.queue) >= self.max_len:
                self.dropped += 1
            else:
                self.queue.append((topic, self.clock_ns, bytes(data), None))

    def _pack(self, topic: str, item) -> tuple:
        t = self.clock_ns
        if type(item) is AdaptedValue:
            size = self._layouts.get(topic)
            if type(size) is int:
                rec = item.adapter.payload(item.value)
                if len(rec) == size:
                    return topic, t, rec, self._splicers[topic]
            msg = item.adapter.to_ros(item.value)
        else:
            msg = item
            layout = self._layouts.get(topic)
            rec = layout.pack(msg) if layout is not None else None
            if rec is not None:
                return topic, t, rec, layout.splicer
        return self._first(topic, t, msg, item)

    def _first(self, topic: str, t: int, msg, item) -> tuple:
        """A topic's first message or a new shape: its layout (checked against rclpy's serialization),
        else its serialization from now on."""
        from rclpy.serialization import serialize_message

        if topic not in self._serialized:
            try:
                layout = MessageLayout.from_message(msg)
            except LayoutError:
                self._serialized.add(topic)
            else:
                rec = layout.pack(msg)
                self._splicers[topic] = layout.splicer
                self._layouts[topic] = layout
                if type(item) is AdaptedValue and item.adapter.payload(item.value) == rec:
                    self._layouts[topic] = len(rec)      # the adapter's record is the message's
                return topic, t, rec, layout.splicer
        return topic, t, serialize_message(msg), None


class _TopicTap:
    """One in-process topic's tap: ``batch`` is the shared :meth:`ViewerTap.on_batch` (the bus gives a
    sample's deliveries to all of them at once)."""

    __slots__ = ("topic", "batch", "_tap", "own_only")

    def __init__(self, tap: ViewerTap, topic: str):
        self.topic, self._tap, self.batch, self.own_only = topic, tap, tap.on_batch, False

    def __call__(self, item) -> None:
        self._tap.on_batch([(self.topic, item)])


def _finite(msg) -> bool:
    """Every floating-point number of ``msg`` (nested messages, sequences) is finite."""
    import math

    for name in msg.get_fields_and_field_types():
        v = getattr(msg, name)
        if isinstance(v, float):
            if not math.isfinite(v):
                return False
        elif hasattr(v, "get_fields_and_field_types"):
            if not _finite(v):
                return False
        elif isinstance(v, (list, tuple)) or hasattr(v, "tolist"):
            items = v.tolist() if hasattr(v, "tolist") else v
            if any((isinstance(x, float) and not math.isfinite(x)) or
                   (hasattr(x, "get_fields_and_field_types") and not _finite(x)) for x in items):
                return False
    return True


# ------------------------------------------------------------------------------------ parameters
def to_foxglove(name: str, p):
    """An rclpy ``Parameter`` as a ``foxglove.Parameter`` named ``name`` (floats keep their type on the wire)."""
    import foxglove
    from rclpy.parameter import Parameter

    T, v = Parameter.Type, p.value
    if p.type_ == T.NOT_SET:
        return foxglove.Parameter(name)
    if p.type_ == T.DOUBLE:
        return foxglove.Parameter(name, value=float(v), type=foxglove.ParameterType.Float64)
    if p.type_ == T.DOUBLE_ARRAY:
        return foxglove.Parameter(name, value=[float(x) for x in v], type=foxglove.ParameterType.Float64Array)
    if p.type_ == T.BYTE_ARRAY:
        return foxglove.Parameter(name, value=b"".join(bytes(x) for x in v), type=foxglove.ParameterType.ByteArray)
    return foxglove.Parameter(name, value=list(v) if p.type_ in (T.BOOL_ARRAY, T.INTEGER_ARRAY, T.STRING_ARRAY)
                              else v)


def to_ros(name: str, ptype, value):
    """A client's value as an rclpy ``Parameter`` of the declared type ``ptype`` (an integer for a double
    is taken as the double; any other mismatch raises ``TypeError``)."""
    from rclpy.parameter import Parameter

    T = Parameter.Type
    num = lambda x: float(x) if isinstance(x, int) and not isinstance(x, bool) else x   # noqa: E731
    if ptype == T.DOUBLE:
        value = num(value)
    elif ptype == T.DOUBLE_ARRAY and isinstance(value, list):
        value = [num(x) for x in value]
    elif ptype == T.BYTE_ARRAY and isinstance(value, (bytes, bytearray)):
        value = [bytes([b]) for b in value]
    return Parameter(name, ptype, value)


class LiveParameters:
    """The parameters of ``nodes`` as Foxglove sees them: ``/<node>.<parameter>`` (the node's fully
    qualified name, then its parameter's, dots and all). Sets go through ``node.set_parameters``: what
    the ``SetParameters`` service does (declared type, range, read-only, then the node's own callbacks)."""

    def __init__(self, nodes, log=None, read_only: bool = False):
        self.nodes = {n.get_fully_qualified_name(): n for n in nodes}
        self.read_only = read_only
        self.server = None
        self.log = log
        self.subscribed: set[str] = set()
        self.accepted = self.refused = 0
        for fqn, n in self.nodes.items():
            n.add_post_set_parameters_callback(lambda params, fqn=fqn: self._changed(fqn, params))

    def split(self, name: str):
        """``(node, parameter name)`` of a Foxglove name, or ``(None, name)``."""
        for fqn, node in self.nodes.items():
            if name.startswith(fqn + "."):
                return node, name[len(fqn) + 1:]
        return None, name

    def get(self, names: list[str]) -> list:
        """The named parameters' values (all of every node's for an empty list); unknown names left out."""
        out = []
        if not names:
            for fqn, node in self.nodes.items():
                for pname, p in sorted(node.get_parameters_by_prefix("").items()):
                    out.append(to_foxglove(f"{fqn}.{pname}", p))
            return out
        for name in names:
            node, pname = self.split(name)
            if node is not None and node.has_parameter(pname):
                out.append(to_foxglove(name, node.get_parameter(pname)))
        return out

    def set(self, params) -> list:
        """Set each (a refusal: one status line to the clients, counted); returns their values now."""
        import foxglove

        for fp in params:
            reason = self._set_one(fp.name, fp.get_value())
            if reason is None:
                self.accepted += 1
                continue
            self.refused += 1
            line = f"parameter {fp.name} not set: {reason}"
            if self.log is not None:
                self.log(line)
            if self.server is not None:
                self.server.publish_status(line, foxglove.StatusLevel.Warning)
        return self.get([fp.name for fp in params])

    def _set_one(self, name: str, value) -> str | None:
        if self.read_only:
            return "the live view is read-only (launch with foxglove_control:=true to set parameters)"
        node, pname = self.split(name)
        if node is None:
            return f"no node of this stack (nodes: {', '.join(sorted(self.nodes))})"
        if not node.has_parameter(pname):
            return f"{node.get_fully_qualified_name()} has no parameter {pname!r}"
        ptype = node.get_parameter(pname).type_
        try:
            p = to_ros(pname, ptype, value)
        except (TypeError, ValueError) as exc:
            return f"expected a {ptype.name.lower()} ({exc})"
        result = node.set_parameters([p])[0]
        return None if result.successful else (result.reason or "refused")

    def _changed(self, fqn: str, params) -> None:
        """Any accepted change (from a Foxglove client, ``legged-wbc param set``, ...): pushed to subscribers."""
        server = self.server
        names = [f"{fqn}.{p.name}" for p in params]
        if server is not None and any(n in self.subscribed for n in names):
            server.publish_parameter_values([to_foxglove(f"{fqn}.{p.name}", p) for p in params
                                             if f"{fqn}.{p.name}" in self.subscribed])


# ------------------------------------------------------------------------------------ the node
class FoxgloveBridge(Node):
    """The ``foxglove_bridge`` node of a container (see the module docstring). Construct it while the bus
    is active (its ``/diagnostics`` goes in-process), then :meth:`serve` once the bus is finalized."""

    def __init__(self, port: int, control: bool = False, remote_nodes: tuple = (), **kwargs):
        super().__init__(NODE_NAME, **kwargs)
        self.port = int(port)
        self.control = bool(control)                 # clients may set parameters and publish CLIENT_TOPICS
        self.remote_nodes = tuple(remote_nodes)      # the linked part's nodes: parameters through their services
        self.wanted: dict[str, int] = {}             # topic -> subscriptions of clients
        self.client_subs: dict[int, int] = {}            # client id -> its subscriptions
        self.tap = ViewerTap(self.wanted)
        self.channels: dict[str, object] = {}
        self.latched: dict[str, bytes | None] = {}   # latched topics (DDS) -> their last message
        self._resend: collections.deque = collections.deque()
        self._dds: dict = {}                         # DDS topic -> (message class, QoS) of its subscription
        self._dds_subs: dict = {}                    # DDS topic -> its subscription, while it has one
        self._dds_changed: collections.deque = collections.deque()   # topics whose client subscriptions changed
        self._advertised: dict = {}                  # (client id, channel id) -> (topic, class, publisher)
        self._client_pubs: dict = {}
        self.sent = self.send_failed = 0
        self.client_published = self.client_refused = 0
        self.server = self.params = self._ctx = None
        self._types = None
        self._last_time = -1
        qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10, reliability=ReliabilityPolicy.RELIABLE)
        from diagnostic_msgs.msg import DiagnosticArray

        self._pub_diag = endpoints.create_publisher(self, DiagnosticArray, diagnostics.TOPIC, qos)
        self._window = diagnostics.Window()

    def serve(self, bus, nodes) -> None:
        """Channels and taps for every topic published in the process, the server on ``127.0.0.1:port``, the
        parameters of ``nodes``, the background jobs (sending, graph discovery, ``/diagnostics``).
        Raises :class:`~legged_wbc.robot.ConfigError` (one line) if the port cannot be had."""
        import foxglove
        from foxglove.websocket import Capability

        from legged_wbc.robot import ConfigError

        self._ctx = foxglove.Context()
        for topic, cls in sorted(bus.published_topics().items()):
            if topic in EXCLUDE or not self._channel(topic, message_class_name(cls)):
                continue
            endpoints.create_subscription(self, cls, topic, lambda data, t=topic: self.tap.on_bytes(t, data),
                                          QoSProfile(depth=10), raw=True, tap=_TopicTap(self.tap, topic))
        from legged_wbc.ros.nodekit.remote_node import RemoteNode

        remote = [RemoteNode(self, fqn) for fqn in self.remote_nodes]
        self.params = LiveParameters([n for n in nodes if n is not self] + remote, log=self.get_logger().warning,
                                     read_only=not self.control)
        caps = [Capability.Parameters, Capability.Time] + ([Capability.ClientPublish] if self.control else [])
        try:
            self.server = foxglove.start_server(
                name="legged_wbc", host=HOST, port=self.port, context=self._ctx, server_listener=_Listener(self),
                capabilities=caps,
                supported_encodings=["cdr"], message_backlog_size=BACKLOG)
        except Exception as exc:
            raise ConfigError(f"foxglove: cannot serve on {HOST}:{self.port}: {exc}") from None
        self.params.server = self.server
        self._discover()
        background.for_node(self, SEND_PERIOD_S, self._send, "foxglove_bridge send")
        background.for_node(self, DISCOVERY_PERIOD_S, self._discover, "foxglove_bridge discovery")
        background.for_node(self, diagnostics.PERIOD_S, self._report, "foxglove_bridge /diagnostics")
        access = (f"clients may set them and publish {', '.join(CLIENT_TOPICS)}" if self.control else
                  "read-only: foxglove_control:=true lets clients set them and publish " + ", ".join(CLIENT_TOPICS))
        self.get_logger().info(f"Foxglove: ws://{HOST}:{self.server.port} ({len(self.channels)} topics, "
                               f"parameters of {len(self.params.nodes)} nodes; {access})")

    def _channel(self, topic: str, msgtype: str) -> bool:
        """A channel for ``topic`` (False, said once, if its type has no definition)."""
        import foxglove

        if self._types is None:
            from rosbags.typesys import Stores, get_typestore

            self._types = get_typestore(Stores.ROS2_KILTED)
        try:
            text = message_definition(msgtype, self._types)
        except Exception as exc:
            self.get_logger().warning(f"Foxglove: not serving {topic}: no definition of {msgtype} ({exc})")
            self.channels[topic] = None
            return False
        schema = foxglove.Schema(name=msgtype, encoding="ros2msg", data=text.encode())
        self.channels[topic] = foxglove.Channel(topic, schema=schema, message_encoding="cdr", context=self._ctx)
        return True

    def _discover(self) -> None:
        """Topics published outside the bus (latched ``/robot_description`` and ``/tf_static``, ``/rosout``,
        other processes' nodes): a channel each. A latched topic is subscribed at once (its last message
        goes to a late client); any other only while a client subscribes to its channel
        (:meth:`_update_dds`): a publisher in another process serializes for DDS only while somebody
        matches it."""
        for topic, types in self.get_topic_names_and_types():
            if topic in self.channels or topic in EXCLUDE or not types:
                continue
            infos = self.get_publishers_info_by_topic(topic)
            if not infos or not self._channel(topic, types[0]):
                continue
            latched = all(i.qos_profile.durability == DurabilityPolicy.TRANSIENT_LOCAL for i in infos)
            best_effort = any(i.qos_profile.reliability == ReliabilityPolicy.BEST_EFFORT for i in infos)
            qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10 if not latched else 1,
                             reliability=ReliabilityPolicy.BEST_EFFORT if best_effort else ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE)
            self._dds[topic] = (message_class(types[0]), qos)
            if latched:
                self.latched[topic] = None
                self._dds_subs[topic] = self._dds_subscription(topic)
            elif self.wanted.get(topic):
                self._dds_changed.append(topic)

    def _dds_subscription(self, topic: str):
        cls, qos = self._dds[topic]
        return self.create_subscription(cls, topic, lambda data, t=topic: self._on_dds(t, data), qos, raw=True)

    def _update_dds(self) -> None:
        """The DDS subscriptions of the channels whose client subscriptions changed (background thread):
        made for a watched channel, destroyed once no client watches it."""
        while self._dds_changed:
            topic = self._dds_changed.popleft()
            if topic not in self._dds or topic in self.latched:
                continue
            sub = self._dds_subs.get(topic)
            if self.wanted.get(topic) and sub is None:
                self._dds_subs[topic] = self._dds_subscription(topic)
            elif not self.wanted.get(topic) and sub is not None:
                self.destroy_subscription(self._dds_subs.pop(topic))

    def _on_dds(self, topic: str, data: bytes) -> None:
        if topic in self.latched:
            self.latched[topic] = bytes(data)
        self.tap.on_bytes(topic, data)

    def _send(self) -> None:
        """The background thread's part: the queued records spliced into CDR (a topic's at once), logged."""
        if self._dds_changed:
            self._update_dds()
        while self._resend:
            topic = self._resend.popleft()
            data = self.latched.get(topic)
            if data is not None:
                self._log(topic, [(self.tap.clock_ns, data)], None)
        q = self.tap.queue
        groups: dict = {}
        for _ in range(len(q)):
            topic, t, data, splicer = q.popleft()
            groups.setdefault((topic, splicer), []).append((t, data))
        for (topic, splicer), items in groups.items():
            self._log(topic, items, splicer)
        clock = self.tap.clock_ns
        if clock != self._last_time and self.server is not None:
            self._last_time = clock
            self.server.broadcast_time(clock)

    def _log(self, topic: str, items: list, splicer) -> None:
        ch = self.channels.get(topic)
        try:
            datas = splicer.build_many([d for _, d in items]) if splicer is not None else [d for _, d in items]
            for (t, _), data in zip(items, datas):
                ch.log(data, log_time=t)
            self.sent += len(items)
        except Exception:
            self.send_failed += len(items)

    def status(self) -> diagnostics.Status:
        """``foxglove_bridge: live view``: WARN when messages were dropped or refused since the last report."""
        tap, w = self.tap, self._window
        new_drops = w.delta("dropped", tap.dropped) + w.delta("failed", tap.failed + self.send_failed)
        new_refused = w.delta("refused", self.client_refused + (self.params.refused if self.params else 0))
        level = diagnostics.WARN if new_drops or new_refused else diagnostics.OK
        msg = (f"{int(new_drops)} messages dropped in the last window" if new_drops else
               f"{int(new_refused)} client requests refused in the last window" if new_refused else
               f"{sum(1 for v in self.client_subs.values() if v)} clients subscribed")
        values = {"port": self.port, "clients subscribed": sum(1 for v in self.client_subs.values() if v),
                  "subscribed topics": sum(1 for v in self.wanted.values() if v), "messages sent": self.sent,
                  "dds subscriptions": len(self._dds_subs), "latched topics": len(self.latched),
                  "dropped (queue full)": tap.dropped, "not packed or sent": tap.failed + self.send_failed,
                  "queued": len(tap.queue), "client messages published": self.client_published,
                  "client messages refused": self.client_refused,
                  "parameter sets accepted": self.params.accepted if self.params else 0,
                  "parameter sets refused": self.params.refused if self.params else 0}
        return diagnostics.Status(level, f"{NODE_NAME}: live view", msg, values)

    def _report(self) -> None:
        background.publish(self._pub_diag, diagnostics.to_msg([self.status()], self.get_clock().now().nanoseconds))

    def destroy_node(self):
        if self.server is not None:
            self.server.stop()
            self.server = None
        return super().destroy_node()

    # ---------------------------------------------------------------- client publishing
    def advertise(self, client, channel) -> None:
        if not self.control:
            self._refuse(f"client channel {channel.topic} refused: the live view is read-only (launch with "
                         "foxglove_control:=true to publish " + ", ".join(CLIENT_TOPICS) + ")")
            return
        want = CLIENT_TOPICS.get(channel.topic)
        ok = (want is not None and channel.encoding == "cdr"
              and channel.schema_name in (want, want.replace("/msg/", "/")))
        if not ok:
            self._refuse(f"client channel {channel.topic} ({channel.schema_name}, {channel.encoding}) refused: "
                         "clients may publish " + ", ".join(f"{t} as {ty} in cdr" for t, ty in CLIENT_TOPICS.items()))
            return
        pub = self._client_pubs.get(channel.topic)
        cls = message_class(want)
        if pub is None:     # a DDS publisher, as an outside node's: the stack takes it as it takes any
            pub = self._client_pubs[channel.topic] = self.create_publisher(cls, channel.topic, 10)
        self._advertised[(client.id, channel.id)] = (channel.topic, cls, pub)

    def client_message(self, client, channel_id: int, data: bytes) -> None:
        from rclpy.serialization import deserialize_message

        entry = self._advertised.get((client.id, channel_id))
        if entry is None:
            self._refuse(f"a message on client channel {channel_id}, not advertised or refused: dropped")
            return
        topic, cls, pub = entry
        try:
            msg = deserialize_message(bytes(data), cls)
            good = _finite(msg)
        except Exception:
            good = False
        if not good:
            self._refuse(f"{topic}: a message that is not a finite {message_class_name(cls)} in cdr: dropped")
            return
        pub.publish(msg)
        self.client_published += 1

    def _refuse(self, line: str) -> None:
        import foxglove

        self.client_refused += 1
        if self.client_refused == 1 or self.client_refused % 1000 == 0:
            self.get_logger().warning(f"{line} ({self.client_refused} refused so far)")
        if self.server is not None:
            self.server.publish_status(line, foxglove.StatusLevel.Warning)


class _Listener:
    """``foxglove.websocket.ServerListener`` of a :class:`FoxgloveBridge` (called from the SDK's threads)."""

    def __init__(self, bridge: FoxgloveBridge):
        self.b = bridge

    def on_subscribe(self, client, channel) -> None:
        b = self.b
        b.wanted[channel.topic] = b.wanted.get(channel.topic, 0) + 1
        b.client_subs[client.id] = b.client_subs.get(client.id, 0) + 1
        if channel.topic in b.latched:
            b._resend.append(channel.topic)      # its last message, at the next send
        b._dds_changed.append(channel.topic)     # a DDS topic: subscribed at the next send

    def on_unsubscribe(self, client, channel) -> None:
        b = self.b
        b.wanted[channel.topic] = max(0, b.wanted.get(channel.topic, 0) - 1)
        b.client_subs[client.id] = max(0, b.client_subs.get(client.id, 0) - 1)
        b._dds_changed.append(channel.topic)

    def on_client_advertise(self, client, channel) -> None:
        self.b.advertise(client, channel)

    def on_client_unadvertise(self, client, client_channel_id: int) -> None:
        self.b._advertised.pop((client.id, client_channel_id), None)

    def on_message_data(self, client, client_channel_id: int, data: bytes) -> None:
        self.b.client_message(client, client_channel_id, data)

    def on_get_parameters(self, client, param_names: list, request_id=None) -> list:
        return self.b.params.get(list(param_names))

    def on_set_parameters(self, client, parameters: list, request_id=None) -> list:
        return self.b.params.set(parameters)

    def on_parameters_subscribe(self, param_names: list) -> None:
        self.b.params.subscribed |= set(param_names)

    def on_parameters_unsubscribe(self, param_names: list) -> None:
        self.b.params.subscribed -= set(param_names)


def serve(nodes: list, bus) -> None:
    """A container's ``foxglove_bridge`` among ``nodes`` (if any) starts serving (after ``bus.finalize``)."""
    for n in nodes:
        if isinstance(n, FoxgloveBridge):
            n.serve(bus, nodes)
