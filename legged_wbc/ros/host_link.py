"""Host link: the intra-process bus of two processes on one machine, joined by a local socket.

Python runs one thread at a time per process (the GIL), so a container holding the simulation and
the controller is one core, however many the machine has. ``layout:=split`` runs the stack as two
containers instead: ``sim_container`` (the MuJoCo bridge and the recorder) and
``control_container`` (the state estimator and the whole-body controller: what a ros2_control robot
would talk to), each with its own :class:`~legged_wbc.ros.intra_process.IntraProcessBus`. The buses
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
  into that ring itself (:class:`~legged_wbc.ros.bag_process.PeerRecorder`, after each frame's replies:
  :attr:`HostLink.after_frame`), and the link carries the sim part's ``/clock`` for the stamps instead.
* **Data**: values (the adapters' named tuples, :mod:`legged_wbc.ros.adapters`) are packed as their
  numbers (:class:`ValueCodec`: ~1 us a value, ~3 us to unpack; pickle took 80 us a batch), several
  to a frame, with the frame's send time (``CLOCK_MONOTONIC``, one clock for the machine). A thread
  that called :meth:`HostLink.batching` (the bridge's; the control part's receiver while it delivers)
  collects its values and sends them in one frame at :meth:`HostLink.flush`; any other thread sends
  at once. A send never blocks for long: a frame the socket cannot take (the peer fell ~200 kB
  behind) or a peer that is gone is dropped and counted (:attr:`HostLink.dropped`, logged once).
* **Receiving**: one thread per process (``link_rx``) reads frames and delivers each value to the
  local subscriptions through the topic's :class:`~legged_wbc.ros.intra_process.LinkPublisher`, as
  a co-located publisher would (depth-first, in the receiving thread). In the control part that
  thread runs the whole estimator -> controller -> command chain, on the newest frame only when it
  fell behind (``newest_only``: stale frames skipped and counted).
* **End**: the sim part sends BYE when it stops; the control part answers the last frame, says BYE
  and ends; a peer whose process died closes the stream, which ends the link on the other side.

Lockstep stays bit-identical to the headless loop: the numbers cross as their float64 bytes.
"""

from __future__ import annotations

import os
import pickle
import select
import socket
import struct
import threading
import time

import numpy as np

HELLO, SUBS, DATA, BYE, RECORD = 1, 2, 3, 4, 5
_DATA = bytes([DATA])
PARTS = ("sim", "control")
MAX_READ = 1 << 16
_ITEM = struct.Struct("<HI")        # topic id, item length [bytes]
_FRAME = struct.Struct("<I")        # frame length [bytes] (the stream carries frames: kind byte + body)
_SENT = struct.Struct("<q")         # DATA frames: when it was sent, CLOCK_MONOTONIC [ns] (one clock per machine)


def link_address(name: str) -> bytes:
    """Abstract socket address of link ``name`` (per ROS domain: stacks on other domains never meet)."""
    domain = os.environ.get("ROS_DOMAIN_ID", "0") or "0"
    return f"\0legged_wbc.link.{domain}.{name}".encode()


def peer_part(part: str) -> str:
    return PARTS[1 - PARTS.index(part)]


class LinkError(RuntimeError):
    """The link could not be set up (address in use, no peer in time)."""


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
        from legged_wbc.ros.adapters import JointSample

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
        from legged_wbc.ros.adapters import ImuSample

        a = np.frombuffer(buf, np.float64, 10, off + 8)
        return ImuSample(self._Q.unpack_from(buf, off)[0], a[:4], a[4:7], a[7:])

    @staticmethod
    def _enc_odom(v) -> bytes:
        return b"".join((ValueCodec._Q.pack(int(v.stamp_ns)), np.ascontiguousarray(v.q[:7], np.float64).tobytes(),
                         np.ascontiguousarray(v.v[:6], np.float64).tobytes()))

    def _dec_odom(self, buf, off, end):
        from legged_wbc.ros.adapters import OdomSample

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
        self.name, self.part = name, part
        self.log = log or (lambda msg: print(msg, flush=True))
        self.addr = link_address(name)
        self.sock = None
        self._listener = None
        if part == "sim":
            self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                self._listener.bind(self.addr)
            except OSError as exc:
                self._listener.close()
                raise LinkError(f"link {name!r}: address in use, is another stack with this link name and "
                                f"ROS_DOMAIN_ID running? ({exc})") from None
            self._listener.listen(1)
        self._tls = threading.local()
        self._send_lock = threading.Lock()
        self._out_ids: dict[str, int] = {}           # our published topic -> id (HELLO order)
        self._out_codecs: list[ValueCodec] = []
        self.peer_subs: dict[str, int] = {}          # topic -> subscriptions in the peer (HELLO, SUBS)
        self.peer_tick_only: set[str] = set()         # ... of which it takes the control ticks' samples only
        self.peer_pubs: list[dict] = []               # the peer's published topics (HELLO)
        self._in: list = []                           # peer topic id -> (codec, deliver(value)) or None
        self.on_peer_subs = None                      # callback(peer_subs) when SUBS arrives
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
        t0 = time.monotonic()
        next_log = t0 + 2.0
        while self.sock is None:
            if self._listener is not None:
                self._listener.settimeout(0.05)
                try:
                    self.sock, _ = self._listener.accept()
                except socket.timeout:
                    pass
            else:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    s.connect(self.addr)
                    self.sock = s
                except (ConnectionRefusedError, FileNotFoundError):
                    s.close()
                    time.sleep(0.05)
            now = time.monotonic()
            if stop is not None and stop():
                raise LinkError("stopped while waiting for the link's peer")
            if timeout and now - t0 > timeout:
                raise LinkError(f"link {self.name!r}: no {peer_part(self.part)} part within {timeout:g} s")
            if self.sock is None and now > next_log:
                self.log(f"link {self.name!r}: waiting for the {peer_part(self.part)} part")
                next_log = now + 10.0
        self.sock.setblocking(True)
        self._readable = select.poll()            # "is anything there?" without a failing recv
        self._readable.register(self.sock, select.POLLIN)

    def handshake(self, pubs: list[dict], subs: dict[str, int], timeout: float, stop=None,
                  tick_only=()) -> None:
        """Connect and exchange HELLOs (see the module docstring). ``pubs``: ``{topic, type, adapter,
        template, names}`` per published topic; ``subs``: topic -> local subscriptions wanting the
        peer's; ``tick_only``: those of them taken on the control ticks only (the peer sends nothing
        between ticks). Raises :class:`LinkError` after ``timeout`` s (0 = wait forever) without a peer."""
        self._out_ids = {p["topic"]: i for i, p in enumerate(pubs)}
        self._out_codecs = [ValueCodec(p["adapter"], names=p.get("names")) for p in pubs]
        self._connect(timeout, stop)
        self._send_ctrl(HELLO, {"pubs": pubs, "subs": dict(subs), "tick_only": sorted(tick_only), "pid": os.getpid()})
        self.sock.settimeout(timeout or None)
        try:
            kind, body = self._read_frame()
        except (socket.timeout, OSError) as exc:
            raise LinkError(f"link {self.name!r}: no HELLO from the {peer_part(self.part)} part ({exc})") from None
        if kind != HELLO:
            raise LinkError(f"link {self.name!r}: the peer spoke first with frame kind {kind}, not HELLO")
        peer = pickle.loads(body)
        self.peer_pubs, self.peer_subs = peer["pubs"], peer["subs"]
        self.peer_tick_only = set(peer.get("tick_only", ()))
        self.sock.settimeout(None)

    def bind_inputs(self, deliver_for: dict[str, object]) -> None:
        """``topic -> deliver(value)`` for the peer's topics this process takes (None: not taken)."""
        self._in = []
        for p in self.peer_pubs:
            fn = deliver_for.get(p["topic"])
            self._in.append(None if fn is None else (ValueCodec(p["adapter"], p.get("names")), fn))

    def announce_subs(self, subs: dict[str, int], tick_only=()) -> None:
        """Tell the peer which of its topics we subscribe now (subscriptions made after the handshake),
        and which of them on the control ticks only."""
        self._send_ctrl(SUBS, {"subs": dict(subs), "tick_only": sorted(tick_only)})

    def announce_record(self, info: dict) -> None:
        """Ask the peer to record its own topics (``info``: the topics, the ring, the stamps; see
        :meth:`~legged_wbc.ros.intra_process.IntraProcessBus.record_peer`)."""
        self._send_ctrl(RECORD, dict(info))

    def _send_ctrl(self, kind: int, obj) -> None:
        body = bytes([kind]) + pickle.dumps(obj)
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
            if not self._handle(*frame, False, False):
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
            announced = pickle.loads(body)
            self.peer_subs, self.peer_tick_only = announced["subs"], set(announced["tick_only"])
            if self.on_peer_subs is not None:
                self.on_peer_subs(self.peer_subs)
        elif kind == RECORD:
            if self.on_record is not None:
                self.on_record(pickle.loads(body))
        elif kind == BYE:
            if self.part == "control":
                self.bye()                            # after our last replies: the sim part may close
            return False
        return True

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
