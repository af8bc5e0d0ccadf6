"""Whose torque commands the bridge applies (``command_source``): one publisher, never several (no ROS).

``/joint_torque_cmd`` is an ordinary topic: any node of the ROS domain may publish on it, and node names are
not authenticated in ROS 2 (SROS2 does that, with per-node certificates). The bridge follows one publisher,
as a ros2_control hardware interface takes its commands from the one controller that claimed the joints,
and it knows that publisher by identity wherever the launch can tell it:

* composed (``layout:=container``): the container hands the bridge its controller's in-process publisher
  (:meth:`CommandSources.pin`, :func:`legged_wbc.ros.stack.composition.compose_nodes`), whatever
  ``command_source`` says; ``layout:=split``: the sim part pins the host link's ``/joint_torque_cmd``
  (the control part's controller; the link admits only the launch's own peer);
* ``command_source: launch`` (``layout:=processes``): the publisher GID that the launch's own
  ``wbc_controller`` process handed over at start-up (:mod:`legged_wbc.ros.nodekit.launch_identity`: a
  private file of the launch that the bridge takes only from a sibling process). Until it is there, every
  command is dropped; if none comes within :data:`HANDOVER_PATIENCE_S` of the first command of a publisher
  named :data:`LAUNCH_CONTROLLER`, the bridge falls back to the name rule below for that name (one warning);
* a node name (``/my_controller``; without a namespace, ``/`` is meant; ``controller:=external`` with
  ``external_controller:=NAME``): the first publisher of the run belonging to a node of that name;
* ``first`` (``controller:=external`` by default): the first publisher of the run whose command is
  well-formed (it passed :class:`legged_wbc.ros.io.TorqueCommandDecoder`);
* ``link``: the linked process of ``layout:=split`` (commands that come over the host link, whose peer
  the link itself checks).

Once a publisher is followed it is never swapped for another. A command from any other publisher is never
applied: it is counted (``commands_foreign``, ``/bridge/diagnostics``) and each such publisher is logged
once, by its node's name, GID and (where known) pid. A second publisher under the followed publisher's name
(or, while the launch's controller is awaited, under :data:`LAUNCH_CONTROLLER`) is an **alarm**: one ERROR
line naming both publishers, said once both are known, and ``/diagnostics`` ERROR for the rest of the run
(:attr:`CommandSources.alarm`). A DDS publisher that the ROS graph does not name yet is logged once it does,
or as ``(unknown node)`` after :data:`UNNAMED_PATIENCE` of its commands; so is the line naming the publisher
followed. Through DDS a publisher is its GID (rclpy's ``MessageInfo``), its node taken from the ROS graph; in
a container it is the in-process publisher
(:class:`~legged_wbc.ros.transport.intra_process.IntraPublisher`) and its node, and a publisher outside
the process (its commands reach a container through the bridge's shadow subscription,
:mod:`legged_wbc.ros.transport.intra_process`) is its GID, as through DDS.
"""

from __future__ import annotations

import os
import re
import time
from typing import Callable

FIRST = "first"
LINK = "link"
LAUNCH = "launch"
KEYWORDS = (FIRST, LINK, LAUNCH)
LAUNCH_CONTROLLER = "/wbc_controller"   # the launch's controller node (command_source: launch, its fallback)
DIRECT = "(direct call)"          # a command handed to the bridge by a call (tests), no publisher
UNKNOWN = "(unknown node)"        # a DDS publisher the ROS graph does not name (yet)
UNNAMED_PATIENCE = 1000          # commands (2 s at 500 Hz) an unnamed publisher's line waits for the graph
HANDOVER_PATIENCE_S = 10.0       # [s wall] command_source: launch waits this long for the handover, then the name
HANDOVER_REREAD_S = 0.1          # [s] a publisher seen before is not a reason to read the handover more often
MAX_LOGGED = 100                 # publishers said in a line, at most (the count goes on)
_NAME = re.compile(r"^/?[A-Za-z_][A-Za-z0-9_]*(/[A-Za-z_][A-Za-z0-9_]*)*$")
_UNSET = object()


def check_command_source(value: str) -> str | None:
    """Why ``value`` is not a ``command_source`` (None if it is one)."""
    if value in KEYWORDS or _NAME.match(value or ""):
        return None
    return (f"command_source: {value!r} is neither 'first', 'launch', 'link' nor a node name (e.g. /my_controller: "
            "letters, digits and _, namespaces separated by /)")


def normalized(value: str) -> str:
    """The keywords as they are; a node name fully qualified (``wbc_controller`` -> ``/wbc_controller``)."""
    return value if value in KEYWORDS or value.startswith("/") else "/" + value


def source_key(source):
    """What identifies the publisher of a command: the GID bytes of a DDS ``MessageInfo``, the in-process
    publisher object itself, or None (a direct call)."""
    if isinstance(source, dict):
        gid = source.get("publisher_gid")
        return bytes(gid["data"]) if gid else None
    return source


def _no_identity():
    return None


def _no_gid(pub):
    return None


class CommandSources:
    """The rule of the module docstring. ``node_name(source) -> str | None``: the fully qualified name
    of the node that published (None: not known yet, e.g. DDS discovery behind); ``counters``: the
    scheduler's (``commands_foreign`` is counted there); ``log``: error / warning / info lines;
    ``identity() -> Identity | None``: the launch's handover (``command_source: launch``,
    :func:`legged_wbc.ros.nodekit.launch_identity.read_identity`); ``clock``: wall seconds; ``gid_of``: an
    rclpy publisher's GID (:func:`legged_wbc.ros.transport.endpoint_ids.publisher_gid`)."""

    def __init__(self, policy: str, node_name: Callable[[object], str | None], counters: dict, log,
                 identity: Callable[[], object] = _no_identity, clock: Callable[[], float] = time.monotonic,
                 topic: str = "/joint_torque_cmd", gid_of: Callable[[object], bytes | None] = _no_gid):
        self.policy = normalized(policy)
        self.node_name, self.identity, self.clock, self.topic = node_name, identity, clock, topic
        self.gid_of = gid_of            # an rclpy publisher of this process -> its GID (None: not known)
        self.counters = counters
        counters.setdefault("commands_foreign", 0)
        self.log = log
        self.followed = _UNSET          # the followed publisher's key
        self.followed_name = None
        self.followed_who = None        # how the lines name it: name (gid, pid)
        self.how = None                 # why it is followed
        self.alarm: str | None = None   # a second publisher under the followed name (/diagnostics ERROR) ...
        self.alarm_detail = ""          # ... and the two publishers, named
        self._followed_pid = None
        self._logged: set = set()       # foreign publishers already logged (keys)
        self._unnamed: dict = {}        # foreign publishers not named yet -> their commands so far
        self._pending: dict = {}        # foreign publishers said once the followed one is named -> (name, who)
        self._follow_unsaid = 0         # commands of the followed publisher while the graph does not name it
        self._handover = None           # the launch's identity, once read
        self._asked: dict = {}          # command_source: launch: key -> when its command last read the handover
        self._fallback_t0 = None        # first command under LAUNCH_CONTROLLER without a handover

    # ------------------------------------------------------------------ deciding
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
        if self.policy == LAUNCH:
            return self._launch(key, source)
        name = self._name(source)
        if name == self.policy:
            self.follow(source, name)
            return True
        return self._foreign(key, source, name)

    def _launch(self, key, source) -> bool:
        """``command_source: launch``: the handed-over GID, or after :data:`HANDOVER_PATIENCE_S` without
        a handover the first publisher named :data:`LAUNCH_CONTROLLER`."""
        ident = self._read_handover(key)
        if ident is not None:
            if key == ident.gid:
                self.follow(source, ident.node, how="this launch's controller: its GID handed over at start-up",
                            pid=ident.pid)
                return True
            return self._foreign(key, source)
        name = self._name(source)
        if name == LAUNCH_CONTROLLER:
            now = self.clock()
            self._fallback_t0 = now if self._fallback_t0 is None else self._fallback_t0
            if now - self._fallback_t0 >= HANDOVER_PATIENCE_S:
                self.log.warning(f"torque commands: no publisher identity handed over by the launch within "
                                 f"{HANDOVER_PATIENCE_S:g} s: following the first publisher named "
                                 f"{LAUNCH_CONTROLLER} (a second one is an alarm)")
                self.follow(source, name, how=f"no handover: the first publisher named {LAUNCH_CONTROLLER}")
                return True
        return self._foreign(key, source, name)

    def _read_handover(self, key):
        """The launch's identity (read at a new publisher's first command, else at most every
        :data:`HANDOVER_REREAD_S`)."""
        if self._handover is None:
            now = self.clock()
            if now - self._asked.get(key, -1e18) >= HANDOVER_REREAD_S:
                self._asked[key] = now
                self._handover = self.identity()
        return self._handover

    def pin(self, source, name: str, pid: int | None = None, how: str = "composed in this process") -> None:
        """Follow ``source`` from now on by identity (the container's own controller, the host link), whatever
        the policy said: no other publisher is ever followed. Its line is said at its first command."""
        self.follow(source, name, how=how, pid=pid, say=False)

    def follow(self, source, name: str | None = None, how: str | None = None, pid: int | None = None,
               say: bool = True) -> None:
        """From now on the bridge applies ``source``'s commands only (``say``: its line now, else at its next
        command)."""
        self.followed = source_key(source)
        self.followed_name = name
        self._followed_pid = pid
        self.how = how or ("the first publisher of the run" if self.policy == FIRST
                           else f"command_source: {self.policy}")
        self._follow_unsaid = 0 if say else 1
        if say:
            self._say_following(source)

    # ------------------------------------------------------------------ saying
    def who(self, source, name: str | None) -> str:
        """``name (gid HEX, pid N)``: a publisher named unambiguously (``pid unknown`` for a DDS publisher
        that handed nothing over; the host link's peer has no GID here)."""
        gid, pid = self._gid_pid(source)
        if source is None:
            return DIRECT
        if isinstance(source, dict) or getattr(source, "node", None) is not None:
            return f"{name} (gid {gid.hex() if gid else 'unknown'}, pid {pid if pid else 'unknown'})"
        return f"{name} (pid {pid if pid else 'unknown'})"

    def _gid_pid(self, source) -> tuple[bytes | None, int | None]:
        key = source_key(source)
        pid = self._followed_pid if key == self.followed else None
        if isinstance(source, dict):
            if self._handover is not None and key == self._handover.gid:
                pid = self._handover.pid
            return key, pid
        pub = getattr(source, "pub", None)       # an in-process publisher: its rclpy publisher, this process
        if pub is None or getattr(source, "node", None) is None:
            return None, pid
        return self.gid_of(pub), os.getpid()

    def _say_following(self, source) -> None:
        """The line naming the followed publisher, once the graph names it (or after
        :data:`UNNAMED_PATIENCE` of its commands, as ``(unknown node)``); then the lines that waited for it."""
        self._follow_unsaid += 1
        self.followed_name = self.followed_name or self._name_or_wait(source, self._follow_unsaid)
        if self.followed_name is None:
            return
        self._follow_unsaid = 0
        self.followed_who = self.who(source, self.followed_name)
        self.log.info(f"torque commands: following {self.followed_who}, {self.how}; commands from any other "
                      "publisher are dropped and counted (commands_foreign)")
        pending, self._pending = self._pending, {}
        for key, (name, who) in pending.items():
            if key != self.followed:                # (the fallback follows a publisher that waited here)
                self._say_foreign(key, name, who)

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
        if key in self._logged or key in self._pending or len(self._logged) >= MAX_LOGGED:
            return False
        seen = self._unnamed[key] = self._unnamed.get(key, 0) + 1
        name = name or self._name_or_wait(source, seen)
        if name is None:            # DDS discovery behind: say it once the graph names it
            return False
        self._unnamed.pop(key, None)
        who = self.who(source, name)
        if self.followed_who is None and name == self._expected_name():
            self._pending[key] = (name, who)     # an alarm names both: said once the followed one is known
            return False
        self._say_foreign(key, name, who)
        return False

    def _expected_name(self) -> str | None:
        """The name a second publisher must not have: the followed one's, or the one awaited."""
        if self.followed is not _UNSET:
            return self.followed_name
        return LAUNCH_CONTROLLER if self.policy == LAUNCH else self.policy if self.policy not in KEYWORDS else None

    def _say_foreign(self, key, name: str, who: str) -> None:
        self._logged.add(key)
        if self.followed_name is not None and name == self.followed_name:
            self.alarm = f"two publishers named {name} on {self.topic}, one dropped"
            self.alarm_detail = f"following {self.followed_who}, dropping {who}"
            self.log.error(f"torque commands: ALARM: two publishers named {name} on {self.topic}: the bridge "
                           f"follows {self.followed_who}, {self.how}, and drops every command of {who} (counted "
                           "in commands_foreign, never applied; /diagnostics ERROR)")
            return
        follows = self.followed_who or f"command_source: {self.policy} (nobody yet)"
        self.log.warning(f"torque commands from {who} dropped: the bridge follows {follows}; they are "
                         "counted in commands_foreign (/bridge/diagnostics), this line is not repeated "
                         "for that publisher")
