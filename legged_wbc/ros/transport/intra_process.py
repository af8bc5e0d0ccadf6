"""Intra-process handoff for rclpy nodes composed in one process (rclpy has none of its own).

rclcpp's composition hands a message to the subscriptions of the same process as a pointer; rclpy
always goes through DDS, which on our two-core machines costs 100-500 us of CPU per message and
wake-up (publisher and subscriber side), more than the whole 2 ms control period at ~20 messages per
tick. :class:`IntraProcessBus` restores the rclcpp behaviour for nodes that create their
publishers and subscriptions through :func:`legged_wbc.ros.io.create_publisher` /
:func:`legged_wbc.ros.io.create_subscription` while the bus is :meth:`IntraProcessBus.active`:

* every publisher is still a real rclpy publisher (the node and its topics are in the ROS graph,
  ``ros2 topic echo`` from another process works): :meth:`IntraPublisher.publish` calls the
  co-located subscriptions' callbacks directly (a function call in the publisher's thread,
  depth-first, in subscription order), then publishes on DDS **only if** a subscription outside the
  process is matched (kept up to date by the publisher's matched events);
* a subscription to a topic that has a publisher in the process gets its messages from the bus
  only (no DDS subscription is created, so a message is never delivered twice); a subscription to
  a topic nobody in the process publishes becomes an ordinary rclpy subscription when the bus is
  :meth:`finalized <IntraProcessBus.finalize>` (or at once, after that);
* type adaptation (:mod:`legged_wbc.ros.io.adapters`, ROS 2's REP 2007): a publisher created with an
  adapter publishes *values* (:meth:`IntraPublisher.publish_value`); subscriptions created with a
  ``value_callback`` get the value itself, and the message is filled only for subscriptions that take
  messages and for DDS (the stack's nodes fill and parse nothing in the container);
* ``raw=True`` subscriptions get the CDR bytes, serialized once per message
  (``rclpy.serialization.serialize_message``, ~7-20 us for an 18-joint JointState), unless they
  have a ``tap``: the container's bag recorder takes the message object and packs its numbers into
  shared memory itself (:mod:`legged_wbc.ros.recording.bag_process`), so nothing is serialized in the process.

* a bus may be joined to the bus of a second process by a host link (:mod:`legged_wbc.ros.transport.host_link`,
  ``layout:=split``): the other process's publishers appear here as :class:`LinkPublisher` stand-ins
  that deliver what comes over the link, and a publisher whose topic the other process subscribes
  also sends its values there (:meth:`IntraProcessBus.connect_link`). A tap marked ``own_only`` (a
  recorder's, when the other process records its own publications: :meth:`IntraProcessBus.record_peer`)
  takes this process's publications only: the link neither asks for nor delivers anything to it.

Contract for callbacks (as for rclcpp intra-process with borrowed messages): the message object
belongs to the publisher and may be refilled after the callback returns, so a callback copies what
it keeps (our nodes convert to numpy arrays at once); a callback must not block. An exception in a
callback is logged (full traceback the first time, then at most once per second per subscription)
and counted; delivery to the other subscriptions and the publisher's thread go on.

Publishers outside the process (rclcpp's intra-process delivery does the same): every in-process
subscription also has a real rclpy subscription, its *shadow*, created when the bus is finalized on the
subscribing node (``ros2 topic info``, ``count_subscribers`` and rqt_graph show the nodes' real
subscriptions). What a shadow receives from a publisher outside the process reaches the node's callbacks
as any DDS message does (the message and its ``MessageInfo``; raw subscriptions the CDR bytes), in the
control thread: it waits in a queue the container drains after each sample (:meth:`IntraProcessBus.drain_outside`,
one length check a sample while the queue is empty), except for subscriptions made with ``any_thread``
(the bridge's commands: its command path locks for itself), which take it in the executor thread. A
shadow matches the process's own publishers too (Fast DDS 3.2 can only ignore local endpoints for the
whole participant, rclpy does not expose ``ignore_local_publications``, and rmw_fastrtps filters that at
take time anyway), so:

* a publisher does not count the shadows of the stack (this process's, and the linked process's, which it
  announces over the host link) as subscribers outside: with no other subscriber it still publishes
  nothing on DDS, and the tick pays nothing while no node outside the stack takes part;
* a shadow rests out of the executor's wait set (its callback group, :func:`_shadow_group`) while its
  topic has no publisher outside the stack (:meth:`IntraProcessBus.check_outside`, from the container's
  background thread every 50 ms: a matched-publisher count, the graph's publisher GIDs when it changes):
  while an outside *subscriber* makes a publisher publish on DDS, the copies that reach its resting
  shadows are never taken (before: ~60,000 a 30 s walk, taken and dropped in the executor thread, cost
  the control process 2.7 x the CPU a tick and 1,454-3,170 deadline misses of 15,000);
* while a shadow is awake, the stack's own publications it receives are dropped by their publisher's
  GID (:mod:`.endpoint_ids`; the linked process's publishers' GIDs come over the link) before anything is
  deserialized, and counted (``own_copies``).
"""

from __future__ import annotations

import collections
import functools
import inspect
import threading
import time
import traceback
from dataclasses import dataclass, field

from legged_wbc.ros.recording.cdr_layout import message_class_name
from legged_wbc.ros.io.adapters import AdaptedValue
from legged_wbc.ros.io.stamps import tick_from_stamp
from legged_wbc.ros.transport.endpoint_ids import publisher_gid

_active = threading.local()


def active_bus() -> "IntraProcessBus | None":
    """The bus nodes constructed in this thread right now should use (None: plain rclpy)."""
    return getattr(_active, "bus", None)


@dataclass
class _Subscription:
    node: object
    msg_type: type
    topic: str
    callback: object                    # takes a message (bytes if raw)
    qos: object
    raw: bool
    tap: object = None                  # raw subscriptions in-process: takes the message object instead of bytes
    batch: object = None                # the tap's ``batch`` sink, if it has one (see IntraProcessBus.flush)
    value_cb: object = None             # adapted subscriptions: takes the value of an adapted publisher
    dds: object = None                  # the rclpy subscription, if it had to go through DDS
    own_only: bool = False              # a tap that takes this process's publications only (never the link's)
    tick_samples_only: bool = False     # ignores samples stamped between control ticks (a linked peer skips them)
    with_source: bool = False           # the callbacks also take the publisher: cb(value_or_msg, publisher)
    any_thread: bool = False            # the callbacks may run in any thread (outside messages: the executor's)
    shadow: object = None               # the rclpy subscription in the graph (outside publishers' messages)
    errors: int = 0
    _last_log: float = field(default=-1e9, repr=False)

    @property
    def topic_name(self) -> str:
        return self.topic


class IntraPublisher:
    """A real rclpy publisher plus direct delivery to the subscriptions of the same process.

    ``adapter`` (:mod:`legged_wbc.ros.io.adapters`): :meth:`publish_value` hands the value to adapted
    subscriptions and to recorder taps, and fills the message only for whoever needs one."""

    def __init__(self, bus: "IntraProcessBus", node, pub, adapter=None):
        self.bus = bus
        self.node = node
        self.pub = pub
        self.adapter = adapter
        self.topic_name = pub.topic_name
        self._local: list[_Subscription] = bus._subs.setdefault(self.topic_name, [])
        self.dds_published = 0
        self.local_deliveries = 0
        self._matched = pub.get_subscription_count()  # matched DDS subscriptions, then kept by the matched events
        self._dds_n = self._matched                   # ... of them outside the stack (not a shadow)
        self._link_n = 0                              # subscriptions in the linked process (host_link)
        self._link_ticks_only = False                 # ... which take the samples on the control ticks only

    @property
    def msg_type(self):
        return self.pub.msg_type

    def publish(self, msg) -> None:
        self._deliver(msg, None)

    def publish_value(self, value) -> None:
        self._deliver(None, value)

    def _deliver(self, msg, value) -> None:
        raw = None
        bus = self.bus
        for sub in self._local:
            try:
                if value is not None and sub.value_cb is not None:
                    if sub.with_source:           # the subscriber decides whose messages it takes
                        sub.value_cb(value, self)
                    else:
                        sub.value_cb(value)
                elif sub.tap is not None:          # recorder: the object, packed by the recorder itself
                    item = msg if value is None else AdaptedValue(value, self.adapter)
                    if bus.defer_raw:             # after the control chain, see IntraProcessBus.flush
                        bus._deferred.append((sub, item))
                        continue
                    sub.tap(item)
                else:
                    if msg is None:
                        msg = self.adapter.to_ros(value)
                    if not sub.raw:
                        sub.callback(msg, self) if sub.with_source else sub.callback(msg)
                    elif bus.defer_raw:
                        bus._deferred.append((sub, msg))
                        continue
                    else:
                        if raw is None:
                            raw = _serialize(msg)
                        sub.callback(raw)
            except Exception:  # a subscriber's bug must not take the publisher down
                bus._callback_failed(sub)
            self.local_deliveries += 1
        if self._dds_n:                           # somebody outside the process listens (matched events)
            if msg is None:
                msg = self.adapter.to_ros(value)
            self.pub.publish(msg)
            self.dds_published += 1
        if self._link_n:                          # the linked process subscribes (host_link)
            if value is None and self.adapter is not None:
                value = self.adapter.to_value(msg)
            if self._link_ticks_only and value is not None and not _on_tick(value):
                return                            # a sample between ticks nobody there takes
            bus.link.send(self.topic_name, msg if value is None else value)

    def publish_now(self, msg) -> None:
        """Publish ``msg`` (a message or its CDR ``bytes``) from a thread other than the control
        chain's (a background publisher): co-located subscribers get it now, in this thread, never
        deferred to the chain's flush; a raw subscription (the recorder) gets the serialization, as from
        DDS (these messages have no fixed layout; the recorder's sink is thread-safe), any other the
        message; then DDS for matched outside subscribers (rclpy publishes bytes as they are) and the
        linked process (one frame of its own) if it subscribes."""
        raw = msg if isinstance(msg, (bytes, bytearray)) else None
        obj = None if raw is not None else msg
        for sub in list(self._local):
            try:
                if sub.raw:
                    if raw is None:
                        raw = _serialize(msg)
                    sub.callback(raw)
                elif sub.value_cb is None:
                    if obj is None:
                        from rclpy.serialization import deserialize_message

                        obj = deserialize_message(bytes(raw), self.msg_type)
                    sub.callback(obj, self) if sub.with_source else sub.callback(obj)
            except Exception:
                self.bus._callback_failed(sub)
        if self._dds_n:
            self.pub.publish(msg)
            self.dds_published += 1
        if self._link_n:
            if self.adapter is not None:
                if obj is None:
                    from rclpy.serialization import deserialize_message

                    obj = deserialize_message(bytes(raw), self.msg_type)
                self.bus.link.send(self.topic_name, self.adapter.to_value(obj))
            else:
                self.bus.link.send(self.topic_name, msg)     # plain topics cross as CDR (bytes as they are)

    def _on_matched(self, current_count: int) -> None:
        """The publisher's matched event (executor thread): the DDS subscriptions matched now.
        (``get_subscription_count`` goes through the rmw graph: asked on every publication it cost
        ~3 % of the control thread.) The stack's shadows are not counted as subscribers outside."""
        self._matched = int(current_count)
        self._dds_n = max(0, self._matched - self.bus.stack_shadows(self.topic_name))

    def dds_subscription_count(self) -> int:
        """Matched DDS subscriptions as this publisher knows them (matched events)."""
        return self._dds_n

    def has_subscribers(self) -> bool:
        """Any co-located subscription, or a matched DDS one."""
        return bool(self._local) or self._dds_n > 0 or self._link_n > 0

    def get_subscription_count(self) -> int:
        """Co-located subscriptions + matched DDS subscriptions outside the stack + the linked process's."""
        dds = max(0, self.pub.get_subscription_count() - self.bus.stack_shadows(self.topic_name))
        return len(self._local) + dds + self._link_n

    def local_subscription_count(self) -> int:
        return len(self._local)

    def wait_for_all_acked(self, timeout) -> bool:
        return self.pub.wait_for_all_acked(timeout)

    def __getattr__(self, name):                 # everything else: the rclpy publisher's
        return getattr(self.pub, name)


class LinkPublisher(IntraPublisher):
    """The in-process stand-in for a publisher of the linked process (:mod:`legged_wbc.ros.transport.host_link`):
    values that come over the link are delivered to this process's subscriptions as if published here
    (its real rclpy publisher, and with it DDS, is in the other process); never to ``own_only`` taps."""

    def __init__(self, bus: "IntraProcessBus", topic: str, msg_type, adapter=None):
        self.bus, self.node, self.pub, self.adapter = bus, None, None, adapter
        self.topic_name = topic
        self._msg_type = msg_type
        self._local = bus._link_subs.setdefault(topic, [])
        self.dds_published = self.local_deliveries = 0
        self._dds_n = self._link_n = self._matched = 0

    @property
    def msg_type(self):
        return self._msg_type

    def deliver(self, item) -> None:
        """A value (adapted topics) or a message's CDR bytes (plain topics) from the link."""
        if self.adapter is None:
            self.publish_now(item)                    # raw subscribers get the bytes, others the message
        else:
            self._deliver(None, item)

    def get_subscription_count(self) -> int:
        return len(self._local)

    def __getattr__(self, name):
        raise AttributeError(f"{self.topic_name} is published by the linked process: no {name}")


def _shadow_group():
    """A callback group whose subscriptions the executor waits on only while ``active``: a shadow stays out
    of the wait set (nothing woken, nothing taken) until a publisher outside the stack exists on its topic
    (:meth:`IntraProcessBus.check_outside`)."""
    from rclpy.callback_groups import CallbackGroup

    class ShadowGroup(CallbackGroup):
        def __init__(self):
            super().__init__()
            self.active = False
            self.matched = -1                 # the shadows' matched publishers when last looked at
            self.asked = -1e9                 # when the graph was last asked [s, monotonic]

        def can_execute(self, entity) -> bool:
            return self.active

        def beginning_execution(self, entity) -> bool:
            return True

        def ending_execution(self, entity) -> None:
            pass

    return ShadowGroup()


class WithSource:
    """A subscription callback ``fn(msg, source)`` that rclpy calls with the message and its
    ``MessageInfo``. Its signature asks for both (rclpy then takes the info with the message); it also
    takes the pair as one argument, as rclpy 9.1.2's EventsExecutor passes it (``callback(msg_info)``
    with the ``(msg, info)`` tuple, where the wait-set executors call ``callback(msg, info)``)."""

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *args):
        msg, source = args if len(args) == 2 else args[0]
        return self.fn(msg, source)


WithSource.__signature__ = inspect.Signature(
    [inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY) for n in ("msg", "source")])


def _on_tick(value) -> bool:
    """Is an adapted value stamped on a control tick? (Values without a stamp count as on one.)"""
    stamp = getattr(value, "stamp_ns", None)
    return stamp is None or tick_from_stamp(int(stamp)) is not None


def _serialize(msg) -> bytes:
    from rclpy.serialization import serialize_message

    return msg if isinstance(msg, (bytes, bytearray)) else serialize_message(msg)


class IntraProcessBus:
    """Topic -> co-located subscriptions; see the module docstring.

    ``defer_raw``: deliveries to ``raw=True`` subscriptions (the recorder: pack into shared memory,
    ~1-4 us a message) wait in a list until :meth:`flush`, so they cost nothing inside the sample -> estimator
    -> controller -> command chain. Whoever sets it flushes before the published message objects are
    refilled (the container: the bridge flushes at the end of each ``publish_sample``)."""

    def __init__(self, defer_raw: bool = False, link=None):
        self.defer_raw = defer_raw
        self.link = link                                 # a host_link.HostLink joining a second process
        self._deferred = collections.deque()             # appended from any thread, flushed by one
        self._subs: dict[str, list[_Subscription]] = {}
        self._link_subs: dict[str, list[_Subscription]] = {}   # the same without own_only taps (LinkPublisher)
        self._peer_record: dict | None = None      # record_peer(): what the linked process records itself
        self._pubs: dict[str, list[IntraPublisher]] = {}
        self._pending: list[_Subscription] = []    # subscriptions not yet known to be local
        self._dds_subs: list[_Subscription] = []   # co-located nodes' subscriptions that go through DDS
        self._finalized = False
        self._lock = threading.Lock()
        self.callback_errors = 0
        # publishers outside the process (see the module docstring)
        self._shadow_n: dict[str, int] = {}        # topic -> shadows here
        self._peer_shadow_n: dict[str, int] = {}   # topic -> shadows in the linked process
        self.stack_gids: set[bytes] = set()        # GIDs of the stack's publishers (here and linked)
        self._outside_ready = False                # the stack's shadows and GIDs are known
        self._inbox = collections.deque()          # (subscription, CDR bytes, MessageInfo) for the control thread
        self.outside_messages = 0                  # messages from publishers outside the stack
        self.own_copies = 0                        # the stack's own publications that reached a shadow (dropped)
        self.outside_unready = 0                   # ... arrived before the stack was known (dropped)
        self.outside_overflow = 0                  # dropped: the queue held INBOX_MAX already
        self._shadow_subs: dict[tuple, tuple] = {}  # (id(node), topic) -> (its in-process subscriptions, shadow)
        self._shadows: dict[str, list] = {}        # topic -> its shadow subscriptions (rclpy)
        self._shadow_nodes: dict[str, list] = {}   # topic -> their nodes
        self._shadow_groups: dict[str, object] = {}   # topic -> its shadows' callback group (check_outside)
        self._own_gids: set[bytes] = set()
        self._peer_gids: set[bytes] = set()
        self._peer_known = False                   # the linked process's stack was announced

    # ------------------------------------------------------------------ composition
    def active(self):
        """Context manager: nodes constructed inside use this bus (``ros_io.create_*``)."""
        bus = self

        class _Ctx:
            def __enter__(self):
                self.prev = active_bus()
                _active.bus = bus
                return bus

            def __exit__(self, *exc):
                _active.bus = self.prev
                return False

        return _Ctx()

    def create_publisher(self, node, msg_type, topic: str, qos, adapter=None, **kw) -> IntraPublisher:
        holder: list[IntraPublisher] = []
        if "event_callbacks" not in kw:          # DDS matches reported by events: nothing asked per publish
            from rclpy.event_handler import PublisherEventCallbacks

            kw["event_callbacks"] = PublisherEventCallbacks(
                matched=lambda info: holder and holder[0]._on_matched(info.current_count))
        pub = node.create_publisher(msg_type, topic, qos, **kw)
        ip = IntraPublisher(self, node, pub, adapter)
        holder.append(ip)
        with self._lock:
            self._pubs.setdefault(ip.topic_name, []).append(ip)
            late = [s for s in self._dds_subs if s.topic == ip.topic_name]
        if late:
            node.get_logger().warning(f"{ip.topic_name}: publisher created after the bus was finalized; "
                                      f"{len(late)} co-located subscription(s) keep receiving through DDS")
        return ip

    def create_subscription(self, node, msg_type, topic: str, callback, qos, raw: bool = False, tap=None,
                            value_callback=None, tick_samples_only: bool = False, with_source: bool = False,
                            any_thread: bool = False, **kw):
        """``tap`` (raw subscriptions only): called with the message object (or, from an adapted
        publisher, an :class:`AdaptedValue`) for in-process deliveries, instead of ``callback`` with its
        serialization (the recorder packs it itself, see :mod:`legged_wbc.ros.recording.bag_process`); messages
        through DDS still reach ``callback`` as bytes. A tap with a ``batch`` attribute (deferred
        deliveries only): :meth:`flush` calls ``batch([(topic, item), ...])`` once with all of them
        instead. ``value_callback``: called with the value of an adapted publisher in the process
        (``callback`` then takes messages: DDS, plain publishers). ``tick_samples_only``: the callbacks
        ignore samples stamped between control ticks; when every subscription a linked process feeds on a
        topic says so, that process does not send those samples (:meth:`link_tick_only`). ``with_source``:
        the callbacks take the publisher too (``cb(value, publisher)``; through DDS rclpy's message info):
        the bridge applies one publisher's commands, whatever the transport delivers. ``any_thread``: messages
        from publishers outside the process reach the callbacks in the executor thread at once, not in the
        control thread after the sample (the callbacks lock for themselves)."""
        name = node.resolve_topic_name(topic)
        sub = _Subscription(node=node, msg_type=msg_type, topic=name, callback=callback, qos=qos, raw=raw,
                            tap=tap if raw else None, value_cb=value_callback,
                            batch=getattr(tap, "batch", None) if raw else None,
                            own_only=bool(raw and tap is not None and getattr(tap, "own_only", False)),
                            tick_samples_only=bool(tick_samples_only), with_source=bool(with_source),
                            any_thread=bool(any_thread))
        late_shadow = False
        with self._lock:
            if self._finalized and name not in self._pubs:
                sub.dds = node.create_subscription(msg_type, name, callback, qos, raw=raw, **kw)
                self._dds_subs.append(sub)
            else:
                late_shadow = self._finalized
                self._subs.setdefault(name, []).append(sub)
                if not sub.own_only:
                    self._link_subs.setdefault(name, []).append(sub)
                if not self._finalized:
                    self._pending.append(sub)
            linked = self.link is not None and self.link.sock is not None and any(
                isinstance(p, LinkPublisher) for p in self._pubs.get(name, ()))
        if linked and not sub.own_only:
            self.link.announce_subs(self.link_wants(), self.link_tick_only())
        elif linked and self._peer_record is not None:
            self._announce_record()            # one more topic the linked process records itself
        if late_shadow:
            self._make_shadows([sub])
            self._stack_changed()
        return sub

    def withdraw(self, node, topics) -> int:
        """Remove ``node``'s subscriptions to ``topics`` (before :meth:`connect_link` and :meth:`finalize`):
        a node chained to a co-located one takes those inputs from it directly
        (:func:`legged_wbc.ros.stack.composition.chain_controller`). Returns how many were removed."""
        n = 0
        with self._lock:
            if self._finalized:
                raise RuntimeError("IntraProcessBus.withdraw: the bus is finalized")
            for topic in topics:
                name = node.resolve_topic_name(topic)
                for table in (self._subs, self._link_subs):
                    subs = table.get(name, [])
                    mine = [s for s in subs if s.node is node]
                    for s in mine:
                        subs.remove(s)
                    n += len(mine) if table is self._subs else 0
                self._pending = [s for s in self._pending if not (s.node is node and s.topic == name)]
        return n

    def finalize(self) -> list[str]:
        """All nodes are constructed: subscriptions to topics nobody in the process publishes go
        through DDS. Returns those topics."""
        dds = []
        with self._lock:
            for sub in self._pending:
                if sub.topic not in self._pubs:
                    self._subs[sub.topic].remove(sub)
                    if sub in self._link_subs.get(sub.topic, ()):
                        self._link_subs[sub.topic].remove(sub)
                    sub.dds = sub.node.create_subscription(sub.msg_type, sub.topic, sub.callback, sub.qos, raw=sub.raw)
                    self._dds_subs.append(sub)
                    dds.append(sub.topic)
            self._pending.clear()
            self._finalized = True
            in_process = [sub for subs in self._subs.values() for sub in subs]
        self._make_shadows(in_process)
        self._stack_changed()
        return dds

    def flush(self) -> int:
        """Deliver the deferred raw messages (in publication order); returns how many."""
        items = self._deferred
        last_msg = last_raw = None
        n = 0
        batches: dict = {}
        while items:
            sub, msg = items.popleft()
            n += 1
            try:
                if sub.tap is not None:
                    sink = sub.batch
                    if sink is not None:      # collected: one call per sink and flush (the recorder)
                        batch = batches.get(sink)
                        if batch is None:
                            batch = batches[sink] = (sub, [])
                        batch[1].append((sub.topic, msg))
                    else:
                        sub.tap(msg)          # a message or an AdaptedValue
                    continue
                if msg is not last_msg:
                    last_msg, last_raw = msg, _serialize(msg)
                sub.callback(last_raw)
            except Exception:
                self._callback_failed(sub)
        for sink, (sub, batch) in batches.items():
            try:
                sink(batch)
            except Exception:
                self._callback_failed(sub)
        return n

    # ------------------------------------------------------------------ host link
    def link_wants(self) -> dict[str, int]:
        """Topic -> subscriptions here that take the link's deliveries (the linked process sends those it
        publishes: a topic may have publishers on both sides, /tf); ``own_only`` taps are not counted."""
        return {t: len(subs) for t, subs in self._link_subs.items() if subs}

    def link_tick_only(self) -> list[str]:
        """Topics of :meth:`link_wants` whose every such subscription is ``tick_samples_only``: the linked
        process sends them on the control ticks only (the estimator on the tick grid: half the 1 kHz samples)."""
        return sorted(t for t, subs in self._link_subs.items() if subs and all(s.tick_samples_only for s in subs))

    def link_publisher(self, topic: str) -> "LinkPublisher | None":
        """The stand-in of the linked process's publisher on ``topic`` (after :meth:`connect_link`), or None."""
        return next((p for p in self._pubs.get(topic, ()) if isinstance(p, LinkPublisher)), None)

    def own_topics(self) -> set[str]:
        """Topics with a publisher in this process (not only a :class:`LinkPublisher`)."""
        return {t for t, pubs in self._pubs.items() if any(not isinstance(p, LinkPublisher) for p in pubs)}

    def record_peer(self, info: dict) -> list[str]:
        """Split recording: the linked process records its own publications of the topics this
        process's ``own_only`` taps subscribe, into the ring ``info["ring"]`` (host link RECORD, sent now
        and again when such a tap is added; ``info`` also says how to stamp them: ``stamp_topic``,
        ``clock_topic``, ``sim_time``). The stamp topic (``/clock``) is sent to it from now on: the
        linked process stamps a record by the newest clock it was given, as the recorder here would.
        Returns the topics the linked process is asked to record."""
        self._peer_record = dict(info)
        stamp = info.get("stamp_topic")
        if stamp and stamp in self.own_topics():
            link = self.link
            link.peer_subs = {**link.peer_subs, stamp: max(1, link.peer_subs.get(stamp, 0))}
            self._on_peer_subs(link.peer_subs)
        return self._announce_record()

    def _announce_record(self) -> list[str]:
        topics = {}
        for t, subs in self._subs.items():
            if any(isinstance(p, LinkPublisher) for p in self._pubs.get(t, ())):
                for sub in subs:
                    if sub.own_only:
                        topics[t] = message_class_name(sub.msg_type)
                        break
        self.link.announce_record({**self._peer_record, "topics": topics})
        return sorted(topics)

    def connect_link(self, timeout: float, stop=None) -> list[str]:
        """Join the linked process (:mod:`legged_wbc.ros.transport.host_link`; call it once every node is
        constructed, before :meth:`finalize`): its topics that we subscribe are fed by the link, ours
        that it subscribes are sent over it. Returns the topics that come over the link."""
        from legged_wbc.ros.io import adapters
        from legged_wbc.ros.recording.bag_writer import message_class

        link = self.link
        pubs = []
        for topic, ips in self._pubs.items():
            ip = ips[0]
            a = ip.adapter
            mt = ip.msg_type
            pubs.append({"topic": topic, "type": message_class_name(mt),
                         "adapter": type(a).__name__ if a is not None else None,
                         "template": _serialize(a.msg) if a is not None else None,
                         "names": list(a.msg.name) if isinstance(a, adapters.JointStateAdapter) else None})
        link.handshake(pubs, self.link_wants(), timeout, stop, tick_only=self.link_tick_only())
        from rclpy.serialization import deserialize_message

        deliver = {}
        for p in link.peer_pubs:                     # (a topic published here too gets both sources)
            mt = message_class(p["type"])
            adapter = None
            if p["adapter"] is not None:
                adapter = getattr(adapters, p["adapter"])(deserialize_message(p["template"], mt))
            lp = LinkPublisher(self, p["topic"], mt, adapter)
            self._pubs.setdefault(p["topic"], []).append(lp)
            deliver[p["topic"]] = lp.deliver
        link.bind_inputs(deliver)
        link.on_peer_subs = self._on_peer_subs
        link.on_peer_stack = self._on_peer_stack
        self._on_peer_subs(link.peer_subs)
        return sorted(deliver)

    def _on_peer_subs(self, subs: dict[str, int]) -> None:
        for topic, ips in self._pubs.items():
            for ip in ips:
                if not isinstance(ip, LinkPublisher):
                    ip._link_n = int(subs.get(topic, 0)) if self.link.sends(topic) else 0
                    ip._link_ticks_only = topic in self.link.peer_tick_only

    # ------------------------------------------------------------------ publishers outside the process
    INBOX_MAX = 4096            # outside messages waiting for the control thread, at most (more: dropped, counted)

    def _make_shadows(self, subs) -> None:
        """A shadow (see the module docstring) for each node's in-process subscriptions to a topic."""
        for sub in subs:
            key = (id(sub.node), sub.topic)
            if key not in self._shadow_subs:
                group = self._shadow_groups.get(sub.topic)
                if group is None:
                    group = self._shadow_groups[sub.topic] = _shadow_group()
                subs = []                          # the node's subscriptions take what comes from outside
                shadow = sub.node.create_subscription(sub.msg_type, sub.topic,
                                                      WithSource(functools.partial(self._from_dds, subs)), sub.qos,
                                                      raw=True, callback_group=group)
                self._shadow_subs[key] = (subs, shadow)
                self._shadows.setdefault(sub.topic, []).append(shadow)
                self._shadow_nodes.setdefault(sub.topic, []).append(sub.node)
                self._shadow_n[sub.topic] = self._shadow_n.get(sub.topic, 0) + 1
            subs, sub.shadow = self._shadow_subs[key]
            subs.append(sub)

    GRAPH_RECHECK_S = 1.0       # while a topic's shadows are idle, the graph is asked again this often [s]

    def check_outside(self) -> list[str]:
        """Wake the shadows of the topics that have a publisher outside the stack, put the others to rest
        (call it off the control path, often: the container's background thread, every 50 ms). Costs a
        matched-publisher count per shadow; the ROS graph (publisher GIDs) is asked when that count
        changed, and every :attr:`GRAPH_RECHECK_S` while publishers are matched and the shadows idle.
        Returns the topics whose shadows are awake."""
        now = time.monotonic()
        for topic, group in list(self._shadow_groups.items()):
            shadows = self._shadows.get(topic, [])
            try:
                n = max((s.get_publisher_count() for s in shadows), default=0)
            except Exception:                      # being destroyed (shutdown)
                continue
            if n == group.matched and (group.active or n == 0 or now - group.asked < self.GRAPH_RECHECK_S):
                continue
            group.matched, group.asked = n, now
            outside = n > 0 and self._outside_publisher(topic)
            if outside != group.active:
                group.active = outside
                if outside:                        # the executors wait on it from their next wait set
                    for node in self._shadow_nodes[topic]:
                        if node.executor is not None:
                            node.executor.wake()
        return sorted(t for t, g in self._shadow_groups.items() if g.active)

    def _outside_publisher(self, topic: str) -> bool:
        """Does the ROS graph show a publisher on ``topic`` that is not the stack's (by GID)?"""
        node = self._shadow_nodes[topic][0]
        try:
            eps = node.get_publishers_info_by_topic(topic)
        except Exception:
            return False
        return any(bytes(bytearray(ep.endpoint_gid))[:16] not in self.stack_gids for ep in eps)

    def stack_shadows(self, topic: str) -> int:
        """Shadow subscriptions of the stack on ``topic``: this process's and the linked process's."""
        return self._shadow_n.get(topic, 0) + self._peer_shadow_n.get(topic, 0)

    def _own_publisher_gids(self) -> set[bytes]:
        """The GIDs of this process's publishers (:func:`.endpoint_ids.publisher_gid`; where the rmw cannot
        tell: those the ROS graph gives the publishing node on the topic)."""
        gids = set()
        for p in self._own_publishers():
            gid = publisher_gid(p.pub)
            if gid is not None:
                gids.add(gid)
                continue
            node = p.node
            gids.update(bytes(bytearray(ep.endpoint_gid)) for ep in node.get_publishers_info_by_topic(p.topic_name)
                        if ep.node_name == node.get_name() and ep.node_namespace == node.get_namespace())
        return gids

    def _stack_changed(self) -> None:
        """Shadows were made: the publishers recount their subscribers outside; the linked process is told
        this process's shadows and publisher GIDs (it then takes outside messages: :meth:`_on_peer_stack`)."""
        self._own_gids = self._own_publisher_gids()
        self._restack()
        self._outside_ready = self.link is None or self._peer_known
        if self.link is not None and self.link.sock is not None:
            self.link.announce_subs(self.link_wants(), self.link_tick_only(),
                                    stack={"pub_gids": sorted(g.hex() for g in self._own_gids),
                                           "shadows": dict(self._shadow_n)})

    def _on_peer_stack(self, pub_gids: set[bytes], shadows: dict[str, int]) -> None:
        """The linked process's publisher GIDs and shadows (host link SUBS): its publications that reach a
        shadow here are the stack's own; its shadows are not subscribers outside."""
        self._peer_gids, self._peer_shadow_n = set(pub_gids), dict(shadows)
        self._restack()
        self._peer_known = True
        self._outside_ready = self._finalized

    def _restack(self) -> None:
        """The stack's publisher GIDs or shadows changed: this process's publishers recount their
        subscribers outside (:meth:`IntraPublisher._on_matched`) and :meth:`check_outside` asks the graph
        again for every topic."""
        self.stack_gids = self._own_gids | self._peer_gids
        for p in self._own_publishers():
            p._on_matched(p._matched)
        for group in list(self._shadow_groups.values()):
            group.matched = -1

    def _own_publishers(self) -> list:
        """This process's publishers (not the linked process's stand-ins)."""
        with self._lock:
            return [p for ps in self._pubs.values() for p in ps if not isinstance(p, LinkPublisher)]

    def _from_dds(self, subs: list, raw: bytes, info: dict) -> None:
        """A shadow received ``raw`` (executor thread): the stack's own publication is dropped, anything
        else goes to the subscriptions (``any_thread`` ones now, the others through the control thread's queue)."""
        gid = info.get("publisher_gid")
        if gid is not None and bytes(gid["data"]) in self.stack_gids:
            self.own_copies += 1
            return
        if not self._outside_ready:
            self.outside_unready += 1
            return
        self.outside_messages += 1
        inbox = self._inbox
        for sub in subs:
            if sub.own_only:
                continue                      # takes this process's publications only
            if sub.any_thread:
                self._deliver_outside(sub, raw, info)
            elif len(inbox) < self.INBOX_MAX:
                inbox.append((sub, raw, info))
            else:
                self.outside_overflow += 1

    def drain_outside(self) -> int:
        """Deliver the outside messages waiting for the control thread (call it there, between ticks: the
        container does after each sample); returns how many."""
        inbox, n = self._inbox, 0
        while inbox:
            sub, raw, info = inbox.popleft()
            self._deliver_outside(sub, raw, info)
            n += 1
        return n

    def _deliver_outside(self, sub: _Subscription, raw: bytes, info: dict) -> None:
        """As through DDS: raw subscriptions get the bytes, the others the message (and its info if
        ``with_source``); the receiving node checks it as it checks any input."""
        try:
            if sub.raw:
                sub.callback(raw)
                return
            from rclpy.serialization import deserialize_message

            msg = deserialize_message(raw, sub.msg_type)
            sub.callback(msg, info) if sub.with_source else sub.callback(msg)
        except Exception:
            self._callback_failed(sub)

    # ------------------------------------------------------------------ introspection
    def local_topics(self) -> dict[str, list[str]]:
        """Topic -> names of the nodes subscribed in-process to a publisher in this process."""
        return {t: [s.node.get_name() for s in subs] for t, subs in self._subs.items()
                if subs and not isinstance((self._pubs.get(t) or [None])[0], LinkPublisher)}

    def linked_topics(self) -> list[str]:
        """Topics published by the linked process and subscribed here (through the link)."""
        return sorted(t for t, pubs in self._pubs.items()
                      if any(isinstance(p, LinkPublisher) for p in pubs) and self._link_subs.get(t))

    def published_topics(self) -> dict[str, object]:
        """Topic -> message type of every in-process publisher."""
        return {t: pubs[0].msg_type for t, pubs in self._pubs.items() if pubs}

    def stats(self) -> dict:
        pubs = [p for ps in self._pubs.values() for p in ps]
        return {"local_deliveries": sum(p.local_deliveries for p in pubs),
                "dds_published": sum(p.dds_published for p in pubs),
                "callback_errors": self.callback_errors,
                "outside_messages": self.outside_messages, "own_copies": self.own_copies,
                "outside_dropped": self.outside_unready + self.outside_overflow}

    def _callback_failed(self, sub: _Subscription) -> None:
        self.callback_errors += 1
        sub.errors += 1
        now = time.monotonic()
        if sub.errors == 1 or now - sub._last_log >= 1.0:
            sub._last_log = now
            detail = traceback.format_exc() if sub.errors == 1 else traceback.format_exc().strip().splitlines()[-1]
            sub.node.get_logger().error(f"callback for {sub.topic} raised ({sub.errors} so far): {detail}")
