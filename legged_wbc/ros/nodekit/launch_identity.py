"""Which publisher is this launch's controller (``layout:=processes``): handed over at start-up, by GID.

Node names are not authenticated in ROS 2: any node may call itself ``wbc_controller`` and publish
``/joint_torque_cmd``. A container knows its controller's publisher as an object (it composed it:
:meth:`mujoco_bridge.command_source.CommandSources.pin`); in ``layout:=processes`` the bridge and the
controller are two processes that share only the DDS graph and their parent, the launch. So the controller
hands its publisher's identity to the bridge through a file of that launch:

* the ``wbc_controller`` executable (:func:`legged_wbc.ros.stack.entry.wbc_controller_main`), once its node is constructed and before
  it spins (so before its first command), writes ``launch.<ROS_DOMAIN_ID>.<parent pid>.wbc_controller.json``
  in this user's private runtime directory (:func:`~legged_wbc.ros.transport.host_link.private_runtime_dir`,
  0700): its pid, its parent's pid, its node's name, the topic and the GID of its ``/joint_torque_cmd``
  publisher (:func:`~legged_wbc.ros.transport.endpoint_ids.publisher_gid`). Written atomically, mode 0600,
  never through a symlink; removed when the node ends.
* the bridge (``command_source: launch``) reads the file of *its own* parent (:func:`read_identity`) and
  takes it only if it is a regular file of this user with mode 0600 and names a live process whose parent is
  the bridge's parent, i.e. a sibling the same launch started (``/proc/<pid>/stat``). Then it applies the
  commands of that GID only.

The rule holds under both launchers: the project's (``legged-wbc launch``) and ``ros2 launch`` start every
node as a direct child, so both the bridge and the controller name the launch by their parent's pid. A node
started before the launch, or by another launch, has another parent: its file (if it writes one) is not the
bridge's, and its commands are dropped whatever its name. Where no handover arrives (a controller started by
a wrapper, an executable of an older version), the bridge falls back to the name after
:data:`~mujoco_bridge.command_source.HANDOVER_PATIENCE_S` (one warning line), and a second publisher under
that name is an alarm (:mod:`mujoco_bridge.command_source`).
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass

ROLE = "wbc_controller"
MAX_BYTES = 4096


@dataclass(frozen=True)
class Identity:
    """A controller's torque-command publisher as its process handed it over."""

    gid: bytes           # the publisher's GID, the 16 bytes of a MessageInfo's publisher_gid
    pid: int
    node: str            # fully qualified node name
    topic: str


def handover_path(parent_pid: int | None = None, role: str = ROLE) -> str:
    """The file a child of the launch ``parent_pid`` (default: this process's parent) hands ``role`` over in."""
    from legged_wbc.ros.transport.host_link import private_runtime_dir

    ppid = os.getppid() if parent_pid is None else parent_pid
    domain = os.environ.get("ROS_DOMAIN_ID", "0") or "0"
    return os.path.join(private_runtime_dir(), f"launch.{domain}.{ppid}.{role}.json")


def parent_of(pid: int) -> int | None:
    """The parent pid of the live process ``pid`` (``/proc/<pid>/stat``), None if there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()     # after the command name, which may hold spaces
    if len(fields) < 2 or fields[0] in ("Z", "X"):  # a zombie is not a controller
        return None
    return int(fields[1])


def hand_over(node, publisher, role: str = ROLE) -> str | None:
    """Write the handover file of ``node``'s ``publisher`` (module docstring); its path, or None when it
    cannot be written (one warning on the node's log: the bridge then falls back to the name)."""
    from legged_wbc.ros.transport.endpoint_ids import publisher_gid

    log = node.get_logger()
    gid = publisher_gid(getattr(publisher, "pub", publisher))    # an IntraPublisher's rclpy publisher
    if gid is None or os.getppid() == 1:
        log.warning("no identity handed over to the bridge (the rmw does not tell this publisher's GID, or "
                    "this process has no launch for a parent): the bridge follows it by name")
        return None
    body = {"pid": os.getpid(), "ppid": os.getppid(), "node": node.get_fully_qualified_name(),
            "topic": publisher.topic_name, "gid": gid.hex()}
    try:
        path = handover_path(role=role)
        tmp = f"{path}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(body, f)
        os.replace(tmp, path)                       # atomic: the bridge never reads half a file
    except Exception as exc:                       # (LinkError: the directory is not private)
        log.warning(f"no identity handed over to the bridge ({exc}): the bridge follows it by name")
        return None
    log.info(f"{publisher.topic_name}: publisher gid {gid.hex()} (pid {os.getpid()}) handed over to this "
             f"launch's bridge ({path})")
    return path


def withdraw(path: str | None) -> None:
    """Remove a handover file this process wrote (its node ends)."""
    if path is not None:
        try:
            os.unlink(path)
        except OSError:
            pass


def read_identity(role: str = ROLE) -> Identity | None:
    """The identity a sibling of this process (same parent: the same launch) handed over for ``role``;
    None if there is none (yet), or the file is not to be trusted (module docstring)."""
    ppid = os.getppid()
    if ppid == 1:
        return None
    try:
        fd = os.open(handover_path(ppid, role), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except Exception:                              # none yet; or the directory is not private (LinkError)
        return None
    with os.fdopen(fd) as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) != 0o600:
            return None
        try:
            body = json.loads(f.read(MAX_BYTES))
            ident = Identity(bytes.fromhex(body["gid"]), int(body["pid"]), str(body["node"]), str(body["topic"]))
        except (ValueError, KeyError, TypeError):
            return None
    if len(ident.gid) != 16 or ident.pid == os.getpid() or parent_of(ident.pid) != ppid:
        return None                                # a stale file, or a process of another launch
    return ident
