"""Whose torque commands the bridge applies (``command_source``): one publisher, never several (no ROS).

``/joint_torque_cmd`` is an ordinary topic: any node of the ROS domain may publish on it. The bridge
follows one publisher, as a ros2_control hardware interface takes its commands from the one controller
that claimed the joints:

* ``command_source: first`` (the default, for a controller started outside the launch): the first
  publisher of the run whose command is well-formed (it passed :class:`legged_wbc.ros.io.TorqueCommandDecoder`);
* a node name (``/wbc_controller``; without a namespace, ``/`` is meant): the first publisher of the run
  belonging to a node of that name (the launch names its own controller);
* ``link``: the linked process of ``layout:=split`` (commands that come over the host link, whose peer
  the link itself checks).

A command from any other publisher is never applied: it is counted (``commands_foreign``,
``/bridge/diagnostics``) and each such publisher is logged once, with its node's name (a DDS publisher that
the ROS graph does not name yet is logged once it does, or as ``(unknown node)`` after
:data:`UNNAMED_PATIENCE` of its commands; so is the line naming the publisher followed). The rule is the
bridge's, whatever the transport: through DDS a publisher is its GID (rclpy's ``MessageInfo``), its node
taken from the ROS graph; in a container it is the in-process publisher
(:class:`~legged_wbc.ros.transport.intra_process.IntraPublisher`) and its node, and a publisher outside
the process (its commands reach a container through the bridge's shadow subscription,
:mod:`legged_wbc.ros.transport.intra_process`) is its GID, as through DDS. Node names are not authenticated
in ROS 2 (SROS2 does that, with per-node certificates): a node that takes the controller's name before
the controller sends its first command is followed; once one is followed, a second publisher of the same
name is not.
"""

from __future__ import annotations

import re
from typing import Callable

FIRST = "first"
LINK = "link"
DIRECT = "(direct call)"          # a command handed to the bridge by a call (tests), no publisher
UNKNOWN = "(unknown node)"        # a DDS publisher the ROS graph does not name (yet)
UNNAMED_PATIENCE = 1000          # commands (2 s at 500 Hz) an unnamed publisher's line waits for the graph
_NAME = re.compile(r"^/?[A-Za-z_][A-Za-z0-9_]*(/[A-Za-z_][A-Za-z0-9_]*)*$")
_UNSET = object()


def check_command_source(value: str) -> str | None:
    """Why ``value`` is not a ``command_source`` (None if it is one)."""
    if value in (FIRST, LINK) or _NAME.match(value or ""):
        return None
    return (f"command_source: {value!r} is neither 'first', 'link' nor a node name (e.g. /wbc_controller: "
            "letters, digits and _, namespaces separated by /)")


def normalized(value: str) -> str:
    """``first`` / ``link`` as they are; a node name fully qualified (``wbc_controller`` -> ``/wbc_controller``)."""
    return value if value in (FIRST, LINK) or value.startswith("/") else "/" + value


def source_key(source):
    """What identifies the publisher of a command: the GID bytes of a DDS ``MessageInfo``, the in-process
    publisher object itself, or None (a direct call)."""
    if isinstance(source, dict):
        gid = source.get("publisher_gid")
        return bytes(gid["data"]) if gid else None
    return source


class CommandSources:
    """The rule of the module docstring. ``node_name(source) -> str | None``: the fully qualified name
    of the node that published (None: not known yet, e.g. DDS discovery behind); ``counters``: the
    scheduler's (``commands_foreign`` is counted there); ``log``: warning / info lines."""

    def __init__(self, policy: str, node_name: Callable[[object], str | None], counters: dict, log):
        self.policy = normalized(policy)
        self.node_name = node_name
        self.counters = counters
        counters.setdefault("commands_foreign", 0)
        self.log = log
        self.followed = _UNSET          # the followed publisher's key
        self.followed_name = None
        self._logged: set = set()       # foreign publishers already logged (keys)
        self._unnamed: dict = {}        # foreign publishers not named yet -> their commands so far
        self._follow_unsaid = 0         # commands of the followed publisher while the graph does not name it

    def check(self, source) -> bool | None:
        """True: ``source`` is the followed publisher; False: another one (counted, logged once per
        publisher): drop its command; None: ``first`` and nobody followed yet: decode the command, and
        :meth:`follow` the source if it is well-formed. Costs a key comparison once a publisher is followed."""
        key = source_key(source)
        if key == self.followed:
            if self._follow_unsaid:
                self._say_following(source)
            return True
        if self.followed is not _UNSET:
            return self._foreign(key, source)
        if self.policy == FIRST:
            return None
        name = self._name(source)
        if name == self.policy:
            self.follow(source, name)
            return True
        return self._foreign(key, source, name)

    def follow(self, source, name: str | None = None) -> None:
        """From now on the bridge applies ``source``'s commands only."""
        self.followed = source_key(source)
        self.followed_name = name
        self._follow_unsaid = 0
        self._say_following(source)

    def _say_following(self, source) -> None:
        """The line naming the followed publisher, once the graph names it (or after
        :data:`UNNAMED_PATIENCE` of its commands, as ``(unknown node)``)."""
        self._follow_unsaid += 1
        self.followed_name = self.followed_name or self._name_or_wait(source, self._follow_unsaid)
        if self.followed_name is None:
            return
        self._follow_unsaid = 0
        how = "the first publisher of the run" if self.policy == FIRST else f"command_source: {self.policy}"
        self.log.info(f"torque commands: following {self.followed_name} ({how}); commands from any other "
                      "publisher are dropped and counted (commands_foreign)")

    def _name_or_wait(self, source, seen: int) -> str | None:
        """The publisher's node name; None while the graph does not name it and it has sent fewer than
        :data:`UNNAMED_PATIENCE` commands (``seen``), then :data:`UNKNOWN`."""
        name = self._name(source)
        if name is None and seen >= UNNAMED_PATIENCE:
            return UNKNOWN
        return name

    def _name(self, source) -> str | None:
        if source is None:
            return DIRECT
        if isinstance(source, dict):
            return self.node_name(source)
        node = getattr(source, "node", None)     # in the process: the publisher's node (None: the host link)
        return LINK if node is None else node.get_fully_qualified_name()

    def _foreign(self, key, source, name: str | None = None) -> bool:
        self.counters["commands_foreign"] += 1
        if key not in self._logged and len(self._logged) < 100:
            seen = self._unnamed[key] = self._unnamed.get(key, 0) + 1
            name = name or self._name_or_wait(source, seen)
            if name is None:            # DDS discovery behind: say it once the graph names it
                return False
            self._logged.add(key)
            self._unnamed.pop(key, None)
            follows = self.followed_name or f"command_source: {self.policy}"
            self.log.warning(f"torque commands from {name} dropped: the bridge follows {follows}; they are "
                             "counted in commands_foreign (/bridge/diagnostics), this line is not repeated "
                             "for that publisher")
        return False
