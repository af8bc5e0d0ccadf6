"""Host link: the intra-process bus of two processes on one machine, joined by a local socket.

Python runs one thread at a time per process (the GIL), so a container holding the simulation and
the controller is one core, however many the machine has. ``layout:=split`` runs the stack as two
containers instead: ``sim_container`` (the MuJoCo bridge and the recorder) and
``control_container`` (the state estimator and the whole-body controller: what a ros2_control robot
would talk to), each with its own :class:`~legged_wbc.ros.transport.intra_process.IntraProcessBus`. The buses
are joined by a :class:`HostLink`: a Unix stream socket in the abstract namespace (no file, no
network; ``\0legged_wbc.link.<ROS_DOMAIN_ID>.<link>``) that the sim part listens on and the control
part connects to. It carries frames (length, kind, body).

* **Handshake** (:meth:`HostLink.handshake`): each side sends a HELLO with the topics it publishes
  (topic, message type, adapter and the message template with its constant parts, so the peer can
  fill messages and record them) and the topics it subscribes without a publisher of its own. A
  topic the peer publishes is then fed by the link in this process (no DDS subscription: nothing is
  delivered twice); a publisher whose topic the peer subscribes also sends its values over the link.
  Subscriptions made later are announced with a SUBS frame. A topic whose every subscription in the
  peer is ``tick_samples_only`` (it ignores samples stamped between control ticks) is sent on the ticks only.
* **Recording** (``layout:=split`` with ``record``): the recorder lives in the sim part, but the control
  part's topics do not cross the link for it. The sim part sends a RECORD frame (the topics, the
  shared-memory ring its recorder process also drains, how to stamp): the control part records them
  into that ring itself (:class:`~legged_wbc.ros.recording.bag_process.PeerRecorder`, after each frame's replies:
  :attr:`HostLink.after_frame`), and the link carries the sim part's ``/clock`` for the stamps instead.
* **Data**: values (the adapters' named tuples, :mod:`legged_wbc.ros.io.adapters`) are packed as their
  numbers (:class:`ValueCodec`: ~1 us a value, ~3 us to unpack; pickle took 80 us a batch), several
  to a frame, with the frame's send time (``CLOCK_MONOTONIC``, one clock for the machine). A thread
  that called :meth:`HostLink.batching` (the bridge's; the control part's receiver while it delivers)
  collects its values and sends them in one frame at :meth:`HostLink.flush`; any other thread sends
  at once. A send never blocks for long: a frame the socket cannot take (the peer fell ~200 kB
  behind) or a peer that is gone is dropped and counted (:attr:`HostLink.dropped`, logged once).
* **Receiving**: one thread per process (``link_rx``) reads frames and delivers each value to the
  local subscriptions through the topic's :class:`~legged_wbc.ros.transport.intra_process.LinkPublisher`, as
  a co-located publisher would (depth-first, in the receiving thread). In the control part that
  thread runs the whole estimator -> controller -> command chain, on the newest frame only when it
  fell behind (``newest_only``: stale frames skipped and counted).
* **End**: the sim part sends BYE when it stops; the control part answers the last frame, says BYE
  and ends; a peer whose process died closes the stream, which ends the link on the other side.
* **Trust** (:meth:`HostLink._connect`): an abstract socket has no file permissions and its address is
  listed in ``/proc/net/unix``, so anyone on the machine can try it. The link admits its own peer only:
  the other end's credentials (``SO_PEERCRED``) must be this user's, and before a byte is read as data
  both ends prove the launch's secret (:func:`link_secret`) by HMAC-SHA256 over fresh nonces
  (challenge-response both ways, constant-time comparisons; :data:`AUTH_TIMEOUT_S` for a connected peer).
  The sim part refuses any other connection with one line and keeps listening for the real peer; the
  control part refuses a listener that fails and ends. The control frames (HELLO, SUBS, RECORD) are
  versioned plain JSON checked field by field (:mod:`legged_wbc.ros.io.wire`: topic names by ROS rules,
  message types of the stack's interface packages, ring names of :mod:`~legged_wbc.ros.recording.shm_ring`'s scheme):
  nothing is unpickled, and a malformed frame ends the link with one line. The DATA frames carry no
  per-frame MAC: the stream is a Unix socket between two processes of one user that proved the secret at
  its start, which no third process can write into; the data path costs what it did.

Lockstep stays bit-identical to the headless loop: the numbers cross as their float64 bytes.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import select
import socket
import stat
import struct
import threading
import time

import numpy as np

from legged_wbc.ros.io import wire

HELLO, SUBS, DATA, BYE, RECORD = 1, 2, 3, 4, 5
_DATA = bytes([DATA])
PARTS = ("sim", "control")
MAX_READ = 1 << 16
_ITEM = struct.Struct("<HI")        # topic id, item length [bytes]
_FRAME = struct.Struct("<I")        # frame length [bytes] (the stream carries frames: kind byte + body)
_SENT = struct.Struct("<q")         # DATA frames: when it was sent, CLOCK_MONOTONIC [ns] (one clock per machine)


SECRET_ENV = "LEGGED_WBC_LINK_SECRET"   # 64 hex digits: the launch's secret, handed to both parts by the launcher
AUTH_TIMEOUT_S = 5.0                    # a connected peer proves the secret (and says HELLO) within this [s]
CONTROL_VERSION = 0xC1                  # the encoding of HELLO / SUBS / RECORD (wire.pack); pickle starts 0x80
MAX_CONTROL_FRAME = 1 << 22             # bytes of a HELLO / SUBS / RECORD frame, at most
_MAGIC = b"LWBCLNK\x01"                 # what the control part says first (the link's protocol and version)
_NONCE = 32
_LINK_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")
# packages whose message types may cross the link (the stack's interfaces, package.xml)
LINK_MSG_PACKAGES = frozenset({"builtin_interfaces", "diagnostic_msgs", "geometry_msgs", "nav_msgs", "rosgraph_msgs",
                               "sensor_msgs", "std_msgs", "tf2_msgs"})


def link_address(name: str) -> bytes:
    """Abstract socket address of link ``name`` (per ROS domain: stacks on other domains never meet)."""
    domain = os.environ.get("ROS_DOMAIN_ID", "0") or "0"
    return f"\0legged_wbc.link.{domain}.{name}".encode()


def peer_part(part: str) -> str:
    return PARTS[1 - PARTS.index(part)]


class LinkError(RuntimeError):
    """The link could not be set up (address in use, no peer in time, a peer that is not ours), or a
    frame of the peer was malformed."""


class LinkStopped(LinkError):
    """A stop was asked for (SIGINT / SIGTERM) while the link waited for its peer."""


class _Refused(Exception):
    """One connection that is not our peer (said in one line; the sim part keeps listening)."""


# ----------------------------------------------------------------------------------------- the secret
def link_secret(name: str, part: str, timeout: float = AUTH_TIMEOUT_S, stop=None) -> tuple[bytes, str | None]:
    """The launch's secret for link ``name``: ``(32 bytes, key file this part created or None)``.

    From :data:`SECRET_ENV` (64 hex digits) when set: the project's launcher hands every child of one
    launch the same random one. Else (e.g. under ``ros2 launch``) through a key file
    (:func:`key_file_path`): the sim part (``part="sim"``) creates a random secret and writes it (mode
    0600, created exclusively, never through a symlink; it replaces a key a dead launch left); the
    control part reads it, waiting up to ``timeout`` s for it (``stop()``: give up). Raises
    :class:`LinkError` (a malformed variable, a key directory or file that is not this user's and private)."""
    env = os.environ.get(SECRET_ENV)
    if env is not None:
        if not re.fullmatch(r"[0-9a-fA-F]{64}", env):
            raise LinkError(f"{SECRET_ENV} must be 64 hex digits (a 256-bit secret), not {len(env)} characters")
        return bytes.fromhex(env), None
    path = key_file_path(name)
    if part == "sim":
        secret = os.urandom(32)
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secret.hex() + "\n")
        os.replace(tmp, path)                 # atomic: the control part never reads half a key
        return secret, path
    return _read_key(path, timeout, stop), None


def _read_key(path: str, timeout: float, stop) -> bytes:
    t_end = time.monotonic() + timeout
    while True:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            if time.monotonic() > t_end:
                raise LinkError(f"no key file {path} within {timeout:g} s (set {SECRET_ENV} for both parts, or "
                                "start the sim part as this user)") from None
            if stop is not None and stop():
                raise LinkStopped("stopped while waiting for the link's key file") from None
            time.sleep(0.05)
            continue
        with os.fdopen(fd) as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) != 0o600:
                raise LinkError(f"key file {path} is not this user's with mode 0600: refused")
            text = f.read(100).strip()
        if re.fullmatch(r"[0-9a-f]{64}", text):
            return bytes.fromhex(text)
        raise LinkError(f"key file {path} does not hold a key")


def key_file_path(name: str) -> str:
    """Where the sim part of link ``name`` leaves the launch's secret when :data:`SECRET_ENV` is not set:
    ``link.<ROS_DOMAIN_ID>.<name>.key`` in :func:`private_runtime_dir`."""
    domain = os.environ.get("ROS_DOMAIN_ID", "0") or "0"
    return os.path.join(private_runtime_dir(), f"link.{domain}.{name}.key")


def private_runtime_dir() -> str:
    """This user's private directory for the stack's per-launch files (the link's key, the controller's
    identity handed to the bridge: :mod:`legged_wbc.ros.nodekit.launch_identity`): ``$XDG_RUNTIME_DIR/legged_wbc``
    (if ``XDG_RUNTIME_DIR`` is this user's private directory) or ``/tmp/legged_wbc-<uid>``; the directory is
    made 0700 and must be this user's, private and not a symlink (else :class:`LinkError`)."""
    uid = os.geteuid()
    base = os.environ.get("XDG_RUNTIME_DIR") or ""
    d = os.path.join(base, "legged_wbc") if base and _private_dir(base, uid) else f"/tmp/legged_wbc-{uid}"
    try:
        os.mkdir(d, 0o700)
    except FileExistsError:
        pass
    if not _private_dir(d, uid):
        raise LinkError(f"{d} is not a private directory of this user (mode 0700, not a symlink): no key or identity file there")
    return d


def _private_dir(path: str, uid: int) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == uid and not st.st_mode & 0o077


def _mac(secret: bytes, label: bytes, addr: bytes, first: bytes, second: bytes) -> bytes:
    return hmac.new(secret, b"|".join((label, addr, first, second)), hashlib.sha256).digest()


def peer_credentials(sock) -> tuple[int, int, int]:
    """``(pid, uid, gid)`` of the process at the other end of a Unix socket (``SO_PEERCRED``)."""
    return struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))


def _wait_readable(sock, timeout: float) -> bool:
    """Does ``sock`` hold something to read (or a connection to accept) within ``timeout`` s? (``poll``:
    no limit on the descriptor's number, unlike ``select``.)"""
    p = select.poll()
    p.register(sock, select.POLLIN)
    return bool(p.poll(max(0, int(timeout * 1e3))))


def _recv_exact(sock, n: int, t_end: float, stop) -> bytes:
    """``n`` bytes from ``sock`` by ``t_end`` (monotonic), looking at ``stop()`` every 0.1 s; raises
    :class:`_Refused` (silent, or closed) or :class:`LinkStopped`."""
    buf = b""
    while len(buf) < n:
        left = t_end - time.monotonic()
        if stop is not None and stop():
            raise LinkStopped("stopped while waiting for the link's peer")
        if left <= 0:
            raise _Refused("said nothing valid in time")
        if _wait_readable(sock, min(0.1, left)):
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise _Refused("closed the connection")
            buf += chunk
    return buf


# ----------------------------------------------------------------------------------------- control frames
ADAPTERS = ("JointStateAdapter", "ImuAdapter", "OdometryAdapter", "ArrayAdapter", "ClockAdapter")   # ValueCodec's
MAX_TOPICS = 1024
MAX_TEMPLATE = 1 << 16                  # bytes of a message template (a JointState of 18 joints: ~600)


def link_msgtype(value, what: str = "type") -> str:
    """A message type that may cross the link: ``pkg/msg/Name`` of :data:`LINK_MSG_PACKAGES` whose class
    exists (raises :class:`~legged_wbc.ros.io.wire.FormatError`)."""
    wire.msgtype(value, what)
    if value.split("/")[0] not in LINK_MSG_PACKAGES:
        raise wire.FormatError(f"{what}: {value} is not a message type of the stack's interface packages")
    from legged_wbc.ros.recording.bag_writer import message_class

    try:
        message_class(value)
    except (ImportError, AttributeError, ValueError):
        raise wire.FormatError(f"{what}: no message type {value}") from None
    return value


def _topic_counts(obj, what: str) -> dict[str, int]:
    if not isinstance(obj, dict) or len(obj) > MAX_TOPICS:
        raise wire.FormatError(f"{what}: an object of at most {MAX_TOPICS} topics expected")
    return {wire.topic(t, what): wire.integer(n, f"{what}[{t}]", 0, 2**31 - 1) for t, n in obj.items()}


def _topics(obj, what: str) -> list[str]:
    return [wire.topic(t, what) for t in wire.sequence(obj, what, MAX_TOPICS)]


def _check_pub(p) -> dict:
    p = wire.fields(p, "HELLO.pubs[]", {"topic": str, "type": str, "adapter": (str, type(None)),
                                        "template": (str, type(None)), "names": (list, type(None))})
    wire.topic(p["topic"], "HELLO.pubs[].topic")
    link_msgtype(p["type"], "HELLO.pubs[].type")
    if p["adapter"] is not None and p["adapter"] not in ADAPTERS:
        raise wire.FormatError(f"HELLO.pubs[].adapter: {p['adapter']!r:.60} is not one of {ADAPTERS}")
    names = p["names"]
    if names is not None:
        names = [wire.text(n, "HELLO.pubs[].names[]") for n in wire.sequence(names, "HELLO.pubs[].names", 4096)]
    template = None
    if p["template"] is not None:
        template = wire.blob(p["template"], "HELLO.pubs[].template", MAX_TEMPLATE)
        from rclpy.serialization import deserialize_message

        from legged_wbc.ros.recording.bag_writer import message_class

        try:
            deserialize_message(template, message_class(p["type"]))
        except Exception as exc:              # rclpy's own check of the CDR bytes
            raise wire.FormatError(f"HELLO.pubs[].template: not a {p['type']} ({type(exc).__name__})") from None
    return {**p, "template": template, "names": names}


def parse_hello(body) -> dict:
    """A HELLO frame's body -> ``{pubs, subs, tick_only, pid}`` checked field by field (raises
    :class:`~legged_wbc.ros.io.wire.FormatError`)."""
    d = wire.fields(wire.unpack(body, CONTROL_VERSION, MAX_CONTROL_FRAME), "HELLO",
                    {"pubs": list, "subs": dict, "tick_only": list, "pid": int})
    return {"pubs": [_check_pub(p) for p in wire.sequence(d["pubs"], "HELLO.pubs", MAX_TOPICS)],
            "subs": _topic_counts(d["subs"], "HELLO.subs"), "tick_only": _topics(d["tick_only"], "HELLO.tick_only"),
            "pid": wire.integer(d["pid"], "HELLO.pid", 1, 2**31 - 1)}


MAX_GIDS = 4096


def parse_subs(body) -> dict:
    """A SUBS frame's body -> ``{subs, tick_only, pub_gids, shadows}``; the last two (the sender's publisher
    GIDs as bytes and topic -> its shadow subscriptions, :mod:`~legged_wbc.ros.transport.intra_process`) None
    when not said (raises :class:`~legged_wbc.ros.io.wire.FormatError`)."""
    d = wire.fields(wire.unpack(body, CONTROL_VERSION, MAX_CONTROL_FRAME), "SUBS", {"subs": dict, "tick_only": list},
                    {"pub_gids": list, "shadows": dict})
    out = {"subs": _topic_counts(d["subs"], "SUBS.subs"), "tick_only": _topics(d["tick_only"], "SUBS.tick_only"),
           "pub_gids": None, "shadows": None}
    if d["pub_gids"] is not None or d["shadows"] is not None:
        gids = wire.sequence(d["pub_gids"] or [], "SUBS.pub_gids", MAX_GIDS)
        out["pub_gids"] = {_gid(g) for g in gids}
        out["shadows"] = _topic_counts(d["shadows"] or {}, "SUBS.shadows")
    return out


def _gid(value) -> bytes:
    if not isinstance(value, str) or not re.fullmatch(r"(?:[0-9a-f]{2}){1,32}", value):
        raise wire.FormatError("SUBS.pub_gids[]: a GID of 1 to 32 bytes in lower-case hex expected")
    return bytes.fromhex(value)


def parse_record(body) -> dict:
    """A RECORD frame's body -> ``{ring, topics, stamp_topic, clock_topic, sim_time}``: the ring's name of
    :mod:`~legged_wbc.ros.recording.shm_ring`'s naming scheme (no path), topic -> a type of the stack (raises
    :class:`~legged_wbc.ros.io.wire.FormatError`)."""
    from legged_wbc.ros.recording.shm_ring import RING_NAME

    d = wire.fields(wire.unpack(body, CONTROL_VERSION, MAX_CONTROL_FRAME), "RECORD", {"ring": str, "topics": dict},
                    {"stamp_topic": (str, type(None)), "clock_topic": bool, "sim_time": bool})
    wire.text(d["ring"], "RECORD.ring", RING_NAME)
    if len(d["topics"]) > MAX_TOPICS:
        raise wire.FormatError(f"RECORD.topics: more than {MAX_TOPICS}")
    topics = {wire.topic(t, "RECORD.topics"): link_msgtype(m, "RECORD.topics[]") for t, m in d["topics"].items()}
    if d["stamp_topic"] is not None:
        wire.topic(d["stamp_topic"], "RECORD.stamp_topic")
    out = {"ring": d["ring"], "topics": topics}
    out.update({k: d[k] for k in ("stamp_topic", "clock_topic", "sim_time") if d[k] is not None})
    return out


def _plain_pub(p: dict) -> dict:
    """A published topic's HELLO entry in plain types (the template's CDR bytes as base64)."""
    t = p.get("template")
    names = p.get("names")
    return {"topic": p["topic"], "type": p["type"], "adapter": p.get("adapter"),
            "template": None if t is None else wire.b64(t), "names": None if names is None else list(names)}


# ----------------------------------------------------------------------------------------- values
class ValueCodec:
    """Pack / unpack the values of one topic (its adapter class; ``None``: plain messages, as CDR bytes).

    ``names`` (JointState topics): the publisher's names; a value with other names carries its own."""

    _JS = struct.Struct("<qIH")       # stamp [ns], joint count, length of explicit names (0: the template's)
    _Q = struct.Struct("<q")
    _N = struct.Struct("<I")

    def __init__(self, adapter_name: str | None, names=None):
        self.kind = adapter_name
        self.names = list(names) if names is not None else None
        self._names_key = tuple(self.names) if self.names is not None else None
        enc = {"JointStateAdapter": self._enc_js, "ImuAdapter": self._enc_imu, "OdometryAdapter": self._enc_odom,
               "ArrayAdapter": self._enc_array, "ClockAdapter": self._enc_clock, None: self._enc_msg}
        dec = {"JointStateAdapter": self._dec_js, "ImuAdapter": self._dec_imu, "OdometryAdapter": self._dec_odom,
               "ArrayAdapter": self._dec_array, "ClockAdapter": self._dec_clock, None: self._dec_msg}
        if adapter_name not in enc:
            raise LinkError(f"no link codec for adapter {adapter_name}")
        self.encode, self.decode = enc[adapter_name], dec[adapter_name]

    # JointSample: names of the template unless they differ
    def _enc_js(self, v) -> bytes:
        names = v.names
        extra = b""
        if names is not self.names and tuple(names) != self._names_key:
            extra = "\n".join(names).encode()
        n = len(v.position)
        return b"".join((self._JS.pack(int(v.stamp_ns), n, len(extra)), extra,
                         np.ascontiguousarray(v.position, dtype=np.float64).tobytes(),
                         np.ascontiguousarray(v.velocity, dtype=np.float64).tobytes(),
                         np.ascontiguousarray(v.effort, dtype=np.float64).tobytes()))

    def _dec_js(self, buf, off, end):
        from legged_wbc.ros.io.adapters import JointSample

        stamp, n, nx = self._JS.unpack_from(buf, off)
        off += self._JS.size
        names = self.names if not nx else bytes(buf[off:off + nx]).decode().split("\n")
        a = np.frombuffer(buf, np.float64, 3 * n, off + nx)
        return JointSample(stamp, names, a[:n], a[n:2 * n], a[2 * n:])

    @staticmethod
    def _enc_imu(v) -> bytes:
        return b"".join((ValueCodec._Q.pack(int(v.stamp_ns)), np.ascontiguousarray(v.quat_xyzw, np.float64).tobytes(),
                         np.ascontiguousarray(v.gyro, np.float64).tobytes(),
                         np.ascontiguousarray(v.accel, np.float64).tobytes()))

    def _dec_imu(self, buf, off, end):
        from legged_wbc.ros.io.adapters import ImuSample

        a = np.frombuffer(buf, np.float64, 10, off + 8)
        return ImuSample(self._Q.unpack_from(buf, off)[0], a[:4], a[4:7], a[7:])

    @staticmethod
    def _enc_odom(v) -> bytes:
        return b"".join((ValueCodec._Q.pack(int(v.stamp_ns)), np.ascontiguousarray(v.q[:7], np.float64).tobytes(),
                         np.ascontiguousarray(v.v[:6], np.float64).tobytes()))

    def _dec_odom(self, buf, off, end):
        from legged_wbc.ros.io.adapters import OdomSample

        a = np.frombuffer(buf, np.float64, 13, off + 8)
        return OdomSample(self._Q.unpack_from(buf, off)[0], a[:7], a[7:])

    @staticmethod
    def _enc_array(data) -> bytes:
        return np.ascontiguousarray(data, dtype=np.float64).tobytes()

    def _dec_array(self, buf, off, end):
        return np.frombuffer(buf, np.float64, (end - off) // 8, off)

    @staticmethod
    def _enc_clock(t_ns) -> bytes:
        return ValueCodec._Q.pack(int(t_ns))

    def _dec_clock(self, buf, off, end):
        return self._Q.unpack_from(buf, off)[0]

    @staticmethod
    def _enc_msg(msg) -> bytes:
        if isinstance(msg, (bytes, bytearray)):
            return bytes(msg)                        # already CDR
        from rclpy.serialization import serialize_message

        return serialize_message(msg)

    def _dec_msg(self, buf, off, end):
        return bytes(buf[off:end])                   # CDR: the receiver's publish_now hands it on as it is


# ----------------------------------------------------------------------------------------- the link
class HostLink:
    """One part's end of a link (see the module docstring). ``part``: ``sim`` (listens) or
    ``control`` (connects)."""

    def __init__(self, name: str, part: str, log=None):
        if part not in PARTS:
            raise LinkError(f"link part must be one of {PARTS}, not {part!r}")
        if not isinstance(name, str) or not _LINK_NAME.fullmatch(name):
            raise LinkError(f"link name {str(name)[:80]!r}: letters, digits, '_', '.', '-' (at most 100), "
                            "not starting with '.' or '-'")
        self.name, self.part = name, part
        self.log = log or (lambda msg: print(msg, flush=True))
        self.addr = link_address(name)
        self.sock = None
        self.peer_pid = None                          # the admitted peer's pid (SO_PEERCRED)
        self._listener = None
        self._secret, self._key_file = None, None     # the launch's secret (link_secret); the key file we wrote
        self.auth_timeout = AUTH_TIMEOUT_S
        if part == "sim":
            self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                self._listener.bind(self.addr)        # the address is ours; listen() once we accept (_connect)
            except OSError as exc:
                self._listener.close()
                raise LinkError(f"link {name!r}: address in use, is another stack with this link name and "
                                f"ROS_DOMAIN_ID running (or another process holding it)? ({exc})") from None
            try:
                self._secret, self._key_file = link_secret(name, part)
            except (LinkError, OSError) as exc:
                self._listener.close()
                raise LinkError(f"link {name!r}: {exc}") from None
        self._listening = False
        self._tls = threading.local()
        self._send_lock = threading.Lock()
        self._out_ids: dict[str, int] = {}           # our published topic -> id (HELLO order)
        self._out_codecs: list[ValueCodec] = []
        self.peer_subs: dict[str, int] = {}          # topic -> subscriptions in the peer (HELLO, SUBS)
        self.peer_tick_only: set[str] = set()         # ... of which it takes the control ticks' samples only
        self.peer_pubs: list[dict] = []               # the peer's published topics (HELLO)
        self._in: list = []                           # peer topic id -> (codec, deliver(value)) or None
        self.on_peer_subs = None                      # callback(peer_subs) when SUBS arrives
        self.on_peer_stack = None                     # callback(pub_gids, shadows) when SUBS says them
        self.on_record = None                         # callback(info) when RECORD arrives (the control part)
        self.after_frame = None                       # called after a data frame's deliveries (and replies)
        self.sent = self.received = self.dropped = self.skipped = 0
        self._drop_logged = False
        self.closed = threading.Event()               # BYE received, or the peer is gone
        self._rx = None
        self._rbuf = bytearray()
        self.frame_sent_ns = 0                        # send time of the frame being delivered (monotonic [ns])
        self.delivering = False

    # ------------------------------------------------------------ set-up
    def _connect(self, timeout: float, stop) -> None:
        """Wait for the peer (at most ``timeout`` s, 0: forever; ``stop()`` looked at every 0.1 s) and admit
        it only if it is this user's and proves the launch's secret (module docstring, *Trust*)."""
        t0 = time.monotonic()
        t_end, next_log = t0 + timeout if timeout else float("inf"), t0 + 2.0
        if self._listener is not None and not self._listening:
            self._listener.listen(8)
            self._listening = True
        while self.sock is None:
            now = time.monotonic()
            if stop is not None and stop():
                raise LinkStopped("stopped while waiting for the link's peer")
            if now > t_end:
                raise LinkError(f"link {self.name!r}: no {peer_part(self.part)} part within {timeout:g} s")
            if now > next_log:
                self.log(f"link {self.name!r}: waiting for the {peer_part(self.part)} part")
                next_log = now + 10.0
            if self._listener is not None:
                self._accept_one(min(0.1, t_end - now), stop)
            else:
                self._connect_once(t_end, stop)
        self.sock.setblocking(True)
        self._readable = select.poll()            # "is anything there?" without a failing recv
        self._readable.register(self.sock, select.POLLIN)

    def _accept_one(self, wait: float, stop) -> None:
        """The sim part: one connection, admitted (``self.sock``) or refused with one line."""
        if not _wait_readable(self._listener, max(wait, 0.0)):
            return
        try:
            conn, _ = self._listener.accept()
        except OSError:
            return
        pid = "?"
        try:
            pid, uid, _ = peer_credentials(conn)
            if uid != os.geteuid():
                raise _Refused(f"is user {uid}, not this one")
            conn.settimeout(None)
            t_end = time.monotonic() + self.auth_timeout
            if _recv_exact(conn, len(_MAGIC), t_end, stop) != _MAGIC:
                raise _Refused("does not speak this link's protocol")
            n_c, n_s = _recv_exact(conn, _NONCE, t_end, stop), os.urandom(_NONCE)
            conn.sendall(n_s + _mac(self._secret, b"sim", self.addr, n_c, n_s))
            proof = _recv_exact(conn, 32, t_end, stop)
            if not hmac.compare_digest(proof, _mac(self._secret, b"control", self.addr, n_s, n_c)):
                raise _Refused("does not know this launch's secret")
        except (_Refused, OSError) as exc:
            conn.close()
            self.log(f"link {self.name!r}: refused a connection (pid {pid}): it {exc}; "
                     f"still waiting for the {peer_part(self.part)} part")
            return
        except BaseException:
            conn.close()
            raise
        self.sock, self.peer_pid = conn, pid

    def _connect_once(self, t_end: float, stop) -> None:
        """The control part: one attempt; a listener that is not this launch's sim part ends the wait."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(self.addr)
        except (ConnectionRefusedError, FileNotFoundError):
            s.close()
            time.sleep(0.05)
            return
        pid = "?"
        try:
            pid, uid, _ = peer_credentials(s)
            if uid != os.geteuid():
                raise _Refused(f"is user {uid}, not this one")
            if self._secret is None:              # the key file is there once the sim part listens
                try:
                    self._secret = link_secret(self.name, self.part, self.auth_timeout, stop)[0]
                except OSError as exc:
                    raise LinkError(f"link {self.name!r}: cannot read the launch's key ({exc})") from None
            n_c = os.urandom(_NONCE)
            s.sendall(_MAGIC + n_c)
            # the sim part may be refusing another connection first: twice the time a connection has
            answer = _recv_exact(s, _NONCE + 32, min(t_end, time.monotonic() + 2 * self.auth_timeout + 1), stop)
            n_s = answer[:_NONCE]
            if not hmac.compare_digest(answer[_NONCE:], _mac(self._secret, b"sim", self.addr, n_c, n_s)):
                raise _Refused("does not know this launch's secret")
            s.sendall(_mac(self._secret, b"control", self.addr, n_s, n_c))
        except (_Refused, OSError) as exc:
            s.close()
            raise LinkError(f"link {self.name!r}: the process at its address (pid {pid}) "
                            f"is not this launch's sim part: it {exc}; refused") from None
        except BaseException:
            s.close()
            raise
        self.sock, self.peer_pid = s, pid

    def handshake(self, pubs: list[dict], subs: dict[str, int], timeout: float, stop=None,
                  tick_only=()) -> None:
        """Connect and exchange HELLOs (see the module docstring). ``pubs``: ``{topic, type, adapter,
        template, names}`` per published topic; ``subs``: topic -> local subscriptions wanting the
        peer's; ``tick_only``: those of them taken on the control ticks only (the peer sends nothing
        between ticks). Raises :class:`LinkError` after ``timeout`` s (0 = wait forever) without a peer
        that proves the launch's secret, when the peer's HELLO is missing or malformed, and
        :class:`LinkStopped` once ``stop()`` is true."""
        self._out_ids = {p["topic"]: i for i, p in enumerate(pubs)}
        self._out_codecs = [ValueCodec(p["adapter"], names=p.get("names")) for p in pubs]
        self._connect(timeout, stop)
        self._send_ctrl(HELLO, {"pubs": [_plain_pub(p) for p in pubs], "subs": dict(subs),
                                "tick_only": sorted(tick_only), "pid": os.getpid()})
        kind, body = self._read_control_frame(time.monotonic() + self.auth_timeout, stop)
        if kind != HELLO:
            raise LinkError(f"link {self.name!r}: the peer spoke first with frame kind {kind}, not HELLO")
        try:
            peer = parse_hello(body)
        except wire.FormatError as exc:
            raise LinkError(f"link {self.name!r}: a malformed HELLO from the {peer_part(self.part)} part ({exc})") \
                from None
        self.peer_pubs, self.peer_subs = peer["pubs"], peer["subs"]
        self.peer_tick_only = set(peer["tick_only"])

    def _read_control_frame(self, t_end: float, stop) -> tuple[int, bytearray]:
        """The handshake's next frame by ``t_end`` (monotonic), looking at ``stop()`` every 0.1 s."""
        while (frame := self._take_frame()) is None:
            if len(self._rbuf) >= _FRAME.size and _FRAME.unpack_from(self._rbuf, 0)[0] > MAX_CONTROL_FRAME:
                raise LinkError(f"link {self.name!r}: the {peer_part(self.part)} part sent a frame too long for HELLO")
            left = t_end - time.monotonic()
            if stop is not None and stop():
                raise LinkStopped("stopped while waiting for the link's peer")
            if left <= 0:
                raise LinkError(f"link {self.name!r}: no HELLO from the {peer_part(self.part)} part within "
                                f"{self.auth_timeout:g} s")
            if self._readable.poll(max(1, int(min(0.1, left) * 1e3))):
                chunk = self.sock.recv(MAX_READ)
                if not chunk:
                    raise LinkError(f"link {self.name!r}: the {peer_part(self.part)} part closed the link before HELLO")
                self._rbuf += chunk
        return frame

    def bind_inputs(self, deliver_for: dict[str, object]) -> None:
        """``topic -> deliver(value)`` for the peer's topics this process takes (None: not taken)."""
        self._in = []
        for p in self.peer_pubs:
            fn = deliver_for.get(p["topic"])
            self._in.append(None if fn is None else (ValueCodec(p["adapter"], p.get("names")), fn))

    def announce_subs(self, subs: dict[str, int], tick_only=(), stack: dict | None = None) -> None:
        """Tell the peer which of its topics we subscribe now (subscriptions made after the handshake),
        and which of them on the control ticks only; ``stack``: ``{pub_gids: [hex], shadows: {topic: n}}``,
        our publishers' GIDs and shadow subscriptions (publishers outside the stack, see
        :mod:`~legged_wbc.ros.transport.intra_process`)."""
        self._send_ctrl(SUBS, {"subs": dict(subs), "tick_only": sorted(tick_only), **(stack or {})})

    def announce_record(self, info: dict) -> None:
        """Ask the peer to record its own topics (``info``: the topics, the ring, the stamps; see
        :meth:`~legged_wbc.ros.transport.intra_process.IntraProcessBus.record_peer`)."""
        self._send_ctrl(RECORD, dict(info))

    def _send_ctrl(self, kind: int, obj) -> None:
        body = bytes([kind]) + (b"" if obj is None else wire.pack(CONTROL_VERSION, obj))
        try:
            with self._send_lock:
                self.sock.sendall(_FRAME.pack(len(body)) + body)
        except OSError:
            pass                                      # the peer is gone: the receiver sees it

    def _take_frame(self):
        """The next complete frame in the read buffer ``(kind, body)`` (a copy: delivered values may be
        kept), or None."""
        buf = self._rbuf
        if len(buf) >= _FRAME.size:
            (n,) = _FRAME.unpack_from(buf, 0)
            if len(buf) >= _FRAME.size + n:
                frame = buf[_FRAME.size:_FRAME.size + n]
                del buf[:_FRAME.size + n]
                return frame[0], frame[1:]
        return None

    def _read_frame(self) -> tuple[int, bytearray]:
        """One frame from the stream (blocking): ``(kind, body)``; raises EOFError at the end."""
        while (frame := self._take_frame()) is None:
            chunk = self.sock.recv(MAX_READ)
            if not chunk:
                raise EOFError
            self._rbuf += chunk
        return frame

    # ------------------------------------------------------------ sending
    def sends(self, topic: str) -> bool:
        return self.peer_subs.get(topic, 0) > 0 and topic in self._out_ids

    def batching(self) -> None:
        """Values published from the calling thread wait for :meth:`flush` (one frame a flush)."""
        self._tls.batch = []

    def send(self, topic: str, value) -> None:
        tid = self._out_ids[topic]
        body = self._out_codecs[tid].encode(value)
        item = _ITEM.pack(tid, len(body)) + body
        batch = getattr(self._tls, "batch", None)
        if batch is None:
            self._send_frame([item])
        else:
            batch.append(item)

    def flush(self) -> None:
        """Send what the calling thread collected since the last flush (if anything)."""
        batch = getattr(self._tls, "batch", None)
        if batch:
            self._send_frame(batch)
            batch.clear()

    def _send_frame(self, items: list) -> None:
        """One DATA frame (its send time, then the items), never blocking the caller for long: a frame
        the socket cannot take at once (the peer fell ~200 kB behind) or a peer that is gone: dropped
        and counted."""
        body = b"".join([_DATA, _SENT.pack(time.monotonic_ns())] + items)
        data = _FRAME.pack(len(body)) + body
        try:
            with self._send_lock:
                self.sent += 1                        # counted before the peer can see it
                n = self.sock.send(data, socket.MSG_DONTWAIT)
                if n < len(data):                     # rare: finish the frame (the stream must stay framed)
                    self.sock.sendall(memoryview(data)[n:])
        except OSError as exc:
            self.sent -= 1
            self.dropped += 1
            if not self._drop_logged:
                self._drop_logged = True
                why = "it fell behind" if isinstance(exc, BlockingIOError) else f"it is gone: {exc}"
                self.log(f"link {self.name!r}: a frame to the {peer_part(self.part)} part was dropped ({why}); "
                         f"drops are counted (the closing line)")

    def bye(self) -> None:
        if self.sock is not None:
            self._send_ctrl(BYE, None)

    # ------------------------------------------------------------ receiving
    def start(self, on_start=None, batch_replies: bool = False, newest_only: bool = False) -> None:
        """Start the receiver thread. ``on_start()`` runs in it first (scheduling); ``batch_replies``:
        what the deliveries of one frame publish goes back in one frame (the control part);
        ``newest_only``: a data frame is skipped (and counted, :attr:`skipped`) when a newer one is
        already waiting, so a receiver that fell behind works on the newest sample, never through a
        backlog (the control part: one frame is one control tick's samples)."""
        self._rx = threading.Thread(target=self._receive, args=(on_start, batch_replies, newest_only), name="link_rx",
                                    daemon=True)
        self._rx.start()

    def _receive(self, on_start, batch_replies: bool, newest_only: bool) -> None:
        if on_start is not None:
            on_start()
        if batch_replies:
            self.batching()
        try:
            while self._handle(*self._read_frame(), batch_replies, newest_only):
                pass
        except (EOFError, OSError):
            pass                                      # the peer is gone, or we closed
        except LinkError as exc:                      # a malformed control frame: the link ends here
            self.log(str(exc))
        finally:
            self.closed.set()

    def poll(self) -> None:
        """Take and deliver, in the calling thread, every frame that is there, without waiting (the
        sim part in realtime: the bridge's thread looks before each physics step, so no thread of the
        sim part wakes up for a command; its latency is taken from the frame's send time)."""
        if self.closed.is_set():
            return
        self._take_available()
        while (frame := self._take_frame()) is not None:
            try:
                more = self._handle(*frame, False, False)
            except LinkError as exc:                  # a malformed control frame: the link ends here
                self.log(str(exc))
                more = False
            if not more:
                self.closed.set()
                return

    def wait_readable(self, timeout: float) -> None:
        """Block at most ``timeout`` seconds until the socket holds something to read (then :meth:`poll`)."""
        if self.closed.is_set():
            time.sleep(timeout)
        else:
            self._readable.poll(max(1, int(timeout * 1e3)))

    def _take_available(self) -> None:
        """Append what the socket holds to the read buffer, without waiting. Asks ``poll(2)`` first:
        on our VMs a ``recv`` that finds nothing costs ~5 us (the call and Python's BlockingIOError),
        the question ~1 us, and the bridge asks twice per physics step. Sets ``closed`` at the end
        of the stream."""
        if not self._readable.poll(0):
            return
        try:
            while True:
                chunk = self.sock.recv(MAX_READ, socket.MSG_DONTWAIT)
                if not chunk:
                    self.closed.set()
                    break
                self._rbuf += chunk
                if len(chunk) < MAX_READ:             # all there was (the rest, if any: next time)
                    break
        except BlockingIOError:
            pass
        except OSError:
            self.closed.set()

    def _handle(self, kind: int, body, batch_replies: bool, newest_only: bool) -> bool:
        """Act on one frame; False at BYE."""
        if kind == DATA:
            self.received += 1
            if newest_only and self._newer_data_waiting():
                self.skipped += 1                     # a newer frame is already here: this one is stale
                return True
            self.frame_sent_ns = _SENT.unpack_from(body, 0)[0]
            self.delivering = True
            try:
                self._deliver(memoryview(body)[_SENT.size:])
            finally:
                self.delivering = False
            if batch_replies:
                self.flush()
            if self.after_frame is not None:
                self.after_frame()                    # the control part: this frame's records, after the replies
        elif kind == SUBS:
            announced = self._parse(parse_subs, body, "SUBS")
            self.peer_subs, self.peer_tick_only = announced["subs"], set(announced["tick_only"])
            if self.on_peer_subs is not None:
                self.on_peer_subs(self.peer_subs)
            if announced["pub_gids"] is not None and self.on_peer_stack is not None:
                self.on_peer_stack(announced["pub_gids"], announced["shadows"])
        elif kind == RECORD:
            info = self._parse(parse_record, body, "RECORD")
            if self.on_record is not None:
                self.on_record(info)
        elif kind == BYE:
            if self.part == "control":
                self.bye()                            # after our last replies: the sim part may close
            return False
        else:
            raise LinkError(f"link {self.name!r}: a frame of unknown kind {kind} from the {peer_part(self.part)} "
                            "part; the link ends")
        return True

    def _parse(self, parse, body, what: str) -> dict:
        try:
            return parse(body)
        except wire.FormatError as exc:
            raise LinkError(f"link {self.name!r}: a malformed {what} frame from the {peer_part(self.part)} part "
                            f"({exc}); the link ends") from None

    def frame_time(self) -> float | None:
        """The send time [s, ``time.monotonic``'s clock] of the frame being delivered, else None."""
        return self.frame_sent_ns * 1e-9 if self.delivering else None

    def _newer_data_waiting(self) -> bool:
        """Is a complete DATA frame waiting behind the one just read? (Takes what the socket holds.)"""
        self._take_available()
        buf, off = self._rbuf, 0
        while len(buf) - off >= _FRAME.size + 1:
            (n,) = _FRAME.unpack_from(buf, off)
            if len(buf) - off < _FRAME.size + n:
                return False
            if buf[off + _FRAME.size] == DATA:
                return True
            off += _FRAME.size + n
        return False

    def _deliver(self, buf) -> None:
        off, end = 0, len(buf)
        while off < end:
            tid, length = _ITEM.unpack_from(buf, off)
            off += _ITEM.size
            slot = self._in[tid] if tid < len(self._in) else None
            if slot is not None:
                codec, fn = slot
                fn(codec.decode(buf, off, off + length))
            off += length

    def close(self) -> None:
        if self._key_file is not None:                # ours (the sim part wrote it): gone with the link
            try:
                os.unlink(self._key_file)
            except OSError:
                pass
            self._key_file = None
        for s in (self.sock, self._listener):
            if s is not None:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
        if self._rx is not None and self._rx is not threading.current_thread():
            self._rx.join(timeout=1.0)
        self.closed.set()

    def stats(self) -> str:
        return (f"link: {self.sent} frames sent, {self.received} received ({self.skipped} stale ones skipped), "
                f"{self.dropped} dropped")
