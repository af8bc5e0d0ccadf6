"""Which node a DDS message came from: its publisher's GID (rclpy's ``MessageInfo``) looked up in the ROS graph.

A subscription made ``with_source`` (:func:`legged_wbc.ros.transport.endpoints.create_subscription`) hands
its callback the ``MessageInfo`` of a message from DDS; :class:`PublisherNames` turns that into the
publishing node's fully qualified name (the bridge's ``command_source``, :mod:`mujoco_bridge.command_source`).
"""

from __future__ import annotations

import time
from typing import Callable

_GRAPH_PERIOD = 0.2        # [s] the graph is asked again at most this often while a publisher is not in it


class PublisherNames:
    """``names(info)``: the fully qualified name (``/ns/node``) of the node whose publisher sent a DDS
    message (its ``MessageInfo``), from the publishers the ROS graph shows on ``topic()`` (asked again at
    most every 0.2 s while a publisher is not in it); None if unknown. Known GIDs are kept for the run."""

    def __init__(self, node, topic: Callable[[], str]):
        self.node, self.topic = node, topic
        self._gid_names: dict[bytes, str] = {}
        self._graph_asked = -1e9            # time.monotonic() of the last look at the graph [s]

    def __call__(self, info: dict) -> str | None:
        gid = info.get("publisher_gid")
        key = bytes(gid["data"]) if gid else None
        if key in self._gid_names or key is None or time.monotonic() - self._graph_asked < _GRAPH_PERIOD:
            return self._gid_names.get(key)
        self._graph_asked = time.monotonic()
        for ep in self.node.get_publishers_info_by_topic(self.topic()):
            if ep.node_name and ep.node_name != "_NODE_NAME_UNKNOWN_":
                ns = ep.node_namespace.rstrip("/")
                self._gid_names[bytes(bytearray(ep.endpoint_gid))] = f"{ns}/{ep.node_name}"
        return self._gid_names.get(key)
