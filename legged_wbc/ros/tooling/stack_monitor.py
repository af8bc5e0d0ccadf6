"""Watching a running stack from outside (``legged-wbc bench realtime``): a small node in its own rclpy context.

:class:`StackMonitor` joins the stack's ``ROS_DOMAIN_ID`` with a node of its own (``stack_monitor``,
own context, its own executor thread) and subscribes to

* ``/bridge/diagnostics`` (10 Hz of sim time): every sample is passed, deserialized, to
  ``on_bridge_diagnostics(wall_monotonic, fields)`` from the executor thread (the bench samples the
  stack's CPU time there, so each CPU sample is paired with the bridge's tick count) and kept;
* ``record_topics`` (optional): subscribed by a second node that no executor spins, so nothing in
  this process wakes up per message: every ``take_period`` s the monitor's thread takes what the
  subscriptions' history holds (``KEEP_LAST`` of ``depth`` messages, reliable), serialized, in one
  loop; :meth:`messages` deserializes them once the stack has ended. (Taking them only at the end
  loses most of a long run: the middleware's reader history does not hold it all.)

What it costs the stack: a topic that only this node subscribes to is published on DDS by the
stack for it (in the container, a topic without an outside subscriber is not published at all):
``/bridge/diagnostics`` is 10 messages per sim second; each 500 Hz topic of ``record_topics`` is one
DDS publication per control tick in the publishing process.
"""

from __future__ import annotations

import threading
import time

# topic -> (package, message) of the topics the bench may watch
TOPIC_TYPES = {
    "/bridge/diagnostics": ("std_msgs.msg", "Float64MultiArray"),
    "/bridge/command_latency": ("std_msgs.msg", "Float64MultiArray"),
    "/wbc/diagnostics": ("std_msgs.msg", "Float64MultiArray"),
    "/wbc/relative_pitch": ("sensor_msgs.msg", "JointState"),
    "/estimator/support": ("sensor_msgs.msg", "JointState"),
    "/ground_truth/odom": ("nav_msgs.msg", "Odometry"),
    "/joint_torque_cmd": ("sensor_msgs.msg", "JointState"),
}
BRIDGE_DIAGNOSTICS = "/bridge/diagnostics"


def _message_class(topic: str):
    import importlib

    if topic not in TOPIC_TYPES:
        raise ValueError(f"stack monitor: no message type known for {topic} (known: {', '.join(TOPIC_TYPES)})")
    mod, name = TOPIC_TYPES[topic]
    return getattr(importlib.import_module(mod), name)


class StackMonitor:
    """See the module docstring. ``close()`` (or the ``with`` block's end) stops the node."""

    def __init__(self, domain_id: int, on_bridge_diagnostics=None, record_topics=(), depth: int = 2000,
                 take_period: float = 0.2):
        import rclpy
        from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
        from rclpy.signals import SignalHandlerOptions

        from legged_wbc.ros import io as ros_io

        self.on_bridge_diagnostics = on_bridge_diagnostics
        self.diagnostics: list[tuple[float, dict]] = []      # (wall monotonic, fields)
        self.callback_errors: list[str] = []
        self._stop = threading.Event()
        self._diag_dict = ros_io.diagnostics_dict
        self._diag_raw: list[tuple[int, object]] = []
        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx, domain_id=int(domain_id), signal_handler_options=SignalHandlerOptions.NO)
        self.node = rclpy.create_node("stack_monitor", context=self.ctx)

        def qos(n):
            return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=n, reliability=ReliabilityPolicy.RELIABLE,
                              durability=DurabilityPolicy.VOLATILE)

        self.node.create_subscription(_message_class(BRIDGE_DIAGNOSTICS), BRIDGE_DIAGNOSTICS, self._on_diag, qos(100))
        self.record_topics = tuple(record_topics)
        self.store_node = rclpy.create_node("stack_monitor_store", context=self.ctx) if self.record_topics else None
        self._stored = {t: self.store_node.create_subscription(_message_class(t), t, lambda _m: None, qos(depth),
                                                               raw=True)
                        for t in self.record_topics if t != BRIDGE_DIAGNOSTICS}
        self._taken: dict[str, list[tuple[int, bytes]]] = {t: [] for t in self._stored}
        self.take_period = float(take_period)
        self.executor = ros_io.make_executor(context=self.ctx)
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self._spin, name="stack_monitor", daemon=True)
        self.thread.start()

    def _spin(self) -> None:
        """The diagnostics callbacks, and every ``take_period`` the stored topics (timeouts always
        finite: see :func:`legged_wbc.ros.io.spin_until`)."""
        next_take = time.monotonic()
        try:
            while not self._stop.is_set():
                self.executor.spin_once(timeout_sec=min(0.1, self.take_period))
                if self._stored and time.monotonic() >= next_take:
                    self._take()
                    next_take = time.monotonic() + self.take_period
            self._take()
        except Exception as exc:  # noqa: BLE001 - reported by the bench, never silent
            self.callback_errors.append(f"{type(exc).__name__}: {exc}")

    def _take(self) -> None:
        for topic, sub in self._stored.items():
            store, cls = self._taken[topic], sub.msg_type
            with sub.handle:
                while True:
                    taken = sub.handle.take_message(cls, True)
                    if taken is None:
                        break
                    data, info = taken
                    store.append((int(info.get("received_timestamp", 0)), data))

    def _on_diag(self, msg) -> None:
        now = time.monotonic()
        fields = self._diag_dict(msg)
        self.diagnostics.append((now, fields))
        self._diag_raw.append((time.monotonic_ns(), msg))
        if self.on_bridge_diagnostics is not None:
            self.on_bridge_diagnostics(now, fields)

    def drain(self, quiet: float = 0.3, timeout: float = 3.0) -> None:
        """Wait until no ``/bridge/diagnostics`` sample has arrived for ``quiet`` s (at most ``timeout``
        s): the stack's last one is taken before :meth:`close`."""
        t_end = time.monotonic() + timeout
        last, t_last = len(self.diagnostics), time.monotonic()
        while time.monotonic() < t_end and time.monotonic() - t_last < quiet:
            time.sleep(0.05)
            if len(self.diagnostics) != last:
                last, t_last = len(self.diagnostics), time.monotonic()

    def messages(self) -> dict[str, list[tuple[int, object]]]:
        """``{topic: [(receive ns, message), ...]}`` of ``record_topics``, deserialized now (call it after
        :meth:`close`: the last messages are taken when the thread stops)."""
        from rclpy.serialization import deserialize_message

        out: dict[str, list] = {}
        for topic in self.record_topics:
            if topic == BRIDGE_DIAGNOSTICS:
                out[topic] = list(self._diag_raw)
            else:
                cls = _message_class(topic)
                out[topic] = [(t, deserialize_message(data, cls)) for t, data in self._taken[topic]]
        return out

    def close(self) -> None:
        self._stop.set()
        if self.thread is not None:
            self.thread.join(timeout=2.0)
            self.thread = None
        try:
            self.executor.shutdown(timeout_sec=1.0)
            for n in (self.node, self.store_node):
                if n is not None:
                    n.destroy_node()
            if self.ctx.ok():
                self.ctx.shutdown()
        except Exception:  # noqa: BLE001 - shutting down
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
