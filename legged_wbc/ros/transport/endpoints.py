"""Publishers and subscriptions of the stack's nodes (in-process when composed), the start-up wait and
the closing wait for acknowledgements."""

from __future__ import annotations


# ----------------------------------------------------------------------------- publishers / subscriptions
def create_publisher(node, msg_type, topic: str, qos, adapter=None, **kw):
    """``node.create_publisher``, or, when the node is being composed into a container, an
    :class:`legged_wbc.ros.transport.intra_process.IntraPublisher` that hands messages to co-located
    subscriptions directly. Every node of the stack creates its publishers through this. With an
    ``adapter`` (:mod:`legged_wbc.ros.io.adapters`) the publisher also has ``publish_value``."""
    from legged_wbc.ros.transport.intra_process import active_bus

    bus = getattr(node, "_intra_bus", None) or active_bus()
    if bus is None:
        pub = node.create_publisher(msg_type, topic, qos, **kw)
        if adapter is None:
            return pub
        from legged_wbc.ros.io.adapters import AdaptedPublisher

        return AdaptedPublisher(pub, adapter)
    node._intra_bus = bus
    return bus.create_publisher(node, msg_type, topic, qos, adapter=adapter, **kw)


def create_subscription(node, msg_type, topic: str, callback, qos, raw: bool = False, tap=None, adapter=None,
                        tick_samples_only: bool = False, with_source: bool = False, any_thread: bool = False, **kw):
    """``node.create_subscription``, or the in-process subscription of a composed node (see
    :func:`create_publisher`; ``tap``: :meth:`IntraProcessBus.create_subscription`, ignored outside a
    container). With an ``adapter`` class (:mod:`legged_wbc.ros.io.adapters`) ``callback`` takes values:
    an adapted publisher's in the process as they are, any other message through ``adapter.to_value``.
    ``tick_samples_only``: ``callback`` ignores samples stamped between control ticks (``tick_from_stamp``
    None), so a linked process need not send them (:meth:`IntraProcessBus.create_subscription`).
    ``with_source``: ``callback(msg_or_value, source)`` also gets who sent it: through DDS rclpy's
    ``MessageInfo`` (a dict with the ``publisher_gid``), in the process the publisher
    (:class:`~legged_wbc.ros.transport.intra_process.IntraPublisher`, a ``LinkPublisher`` for the linked process's).
    ``any_thread`` (composed nodes): ``callback`` may be called in any thread, so a message from a publisher
    outside the process reaches it in the executor thread at once instead of in the control thread after
    the sample (:meth:`~legged_wbc.ros.transport.intra_process.IntraProcessBus.drain_outside`)."""
    from legged_wbc.ros.transport.intra_process import WithSource, active_bus

    bus = getattr(node, "_intra_bus", None) or active_bus()
    if with_source:
        on_msg = WithSource(callback if adapter is None else (lambda msg, src: callback(adapter.to_value(msg), src)))
    else:
        on_msg = callback if adapter is None else (lambda msg: callback(adapter.to_value(msg)))
    if bus is None:
        return node.create_subscription(msg_type, topic, on_msg, qos, raw=raw, **kw)
    node._intra_bus = bus
    return bus.create_subscription(node, msg_type, topic, on_msg, qos, raw=raw, tap=tap,
                                   value_callback=callback if adapter is not None else None,
                                   tick_samples_only=tick_samples_only, with_source=with_source,
                                   any_thread=any_thread, **kw)


# ----------------------------------------------------------------------------- start-up helper
def wait_for_matched_subscribers(node, publishers, timeout: float = 2.0, min_count: int = 0) -> bool:
    """Wait until each publisher is matched with every subscription the ROS graph shows for its topic
    (and at least ``min_count``). True if so within ``timeout`` wall seconds, else False (e.g. a
    QoS-incompatible subscriber that will never match). The stack's own shadow subscriptions
    (:meth:`~legged_wbc.ros.transport.intra_process.IntraProcessBus.stack_shadows`), which an in-process
    publisher does not count, are not waited for either."""
    import time

    def graph_count(p) -> int:
        bus = getattr(p, "bus", None)
        shadows = bus.stack_shadows(p.topic_name) if bus is not None else 0
        return node.count_subscribers(p.topic_name) - shadows

    t_end = time.monotonic() + timeout
    while True:
        ok = all(p.get_subscription_count() >= max(min_count, graph_count(p)) for p in publishers)
        if ok or time.monotonic() >= t_end:
            return ok
        time.sleep(0.01)


def wait_for_acks(node, publishers, timeout: float = 5.0) -> bool:
    """Wait until the subscribers acknowledged every publisher's last messages, ``timeout`` wall seconds
    in all (a node that exits at once loses samples: 3 of 501 in the bridge's case; Fast DDS acks: 3 s);
    each publisher not acknowledged by then is one warning. True if all were."""
    import time

    from rclpy.duration import Duration

    t_end = time.monotonic() + timeout
    ok = True
    for pub in publishers:
        left = max(0.0, t_end - time.monotonic())
        if not pub.wait_for_all_acked(Duration(nanoseconds=int(left * 1e9))):
            node.get_logger().warning(f"{pub.topic_name}: not all samples acknowledged within {timeout:g} s")
            ok = False
    return ok
