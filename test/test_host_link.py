"""The host link (``legged_wbc.ros.transport.host_link``) that joins the two containers of ``layout:=split``:
values cross bit for bit, batches arrive as one frame in order, late subscriptions are announced,
a peer that goes away ends the link and what could not be sent is counted."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import uuid

import numpy as np
import pytest

from legged_wbc.ros.io.adapters import ImuSample, JointSample, OdomSample
from legged_wbc.ros.transport.host_link import HostLink, LinkError, ValueCodec

NAMES = [f"j{i}" for i in range(18)]
RNG = np.random.default_rng(7)


def _values():
    return {
        "JointStateAdapter": JointSample(123_456_789_012, NAMES, RNG.normal(size=18), RNG.normal(size=18),
                                         RNG.normal(size=18)),
        "ImuAdapter": ImuSample(2_000_000, RNG.normal(size=4), RNG.normal(size=3), RNG.normal(size=3)),
        "OdometryAdapter": OdomSample(4_000_000, RNG.normal(size=7), RNG.normal(size=6)),
        "ArrayAdapter": RNG.normal(size=11),
        "ClockAdapter": 1_999_999_999_999,
    }


def _same(a, b) -> bool:
    if isinstance(a, tuple):
        return all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, list):
        return list(a) == list(b)
    if isinstance(a, np.ndarray):
        return a.tobytes() == np.asarray(b).tobytes()        # bit for bit (NaN and -0.0 included)
    return a == b


@pytest.mark.parametrize("kind", list(_values()))
def test_values_cross_bit_for_bit(kind):
    v = _values()[kind]
    codec = ValueCodec(kind, names=NAMES if kind == "JointStateAdapter" else None)
    data = codec.encode(v)
    back = codec.decode(memoryview(bytearray(b"xx" + data)), 2, 2 + len(data))
    assert _same(v, back)


def test_joint_names_other_than_the_templates_travel_with_the_value():
    codec = ValueCodec("JointStateAdapter", names=NAMES)
    v = JointSample(5, list(reversed(NAMES)), np.arange(18.0), np.zeros(18), np.full(18, np.nan))
    back = codec.decode(memoryview(bytearray(codec.encode(v))), 0, len(codec.encode(v)))
    assert back.names == list(reversed(NAMES)) and _same(v, back)
    same = JointSample(5, list(NAMES), np.arange(18.0), np.zeros(18), np.zeros(18))
    assert len(codec.encode(same)) < len(codec.encode(v))     # the template's names are not sent


def _pair(tmp_name: str, sim_pubs, ctl_pubs, sim_subs, ctl_subs):
    sim, ctl = HostLink(tmp_name, "sim", log=lambda m: None), HostLink(tmp_name, "control", log=lambda m: None)
    t = threading.Thread(target=ctl.handshake, args=(ctl_pubs, ctl_subs, 10.0))
    t.start()
    sim.handshake(sim_pubs, sim_subs, 10.0)
    t.join()
    return sim, ctl


def _pub(topic, adapter, names=None):
    return {"topic": topic, "type": "sensor_msgs/msg/JointState", "adapter": adapter, "template": None, "names": names}


def test_a_batch_arrives_as_one_frame_in_order_and_the_replies_come_back(monkeypatch):
    monkeypatch.setenv("ROS_DOMAIN_ID", str(200 + os.getpid() % 30))
    name = uuid.uuid4().hex
    sim, ctl = _pair(name, [_pub("/joint_states", "JointStateAdapter", NAMES), _pub("/clock", "ClockAdapter")],
                     [_pub("/cmd", "JointStateAdapter", NAMES)], {"/cmd": 1}, {"/joint_states": 2})
    try:
        assert sim.sends("/joint_states") and not sim.sends("/clock")      # the control part takes no /clock
        assert ctl.sends("/cmd") and [p["topic"] for p in ctl.peer_pubs] == ["/joint_states", "/clock"]
        got, replies = [], []
        done = threading.Event()

        def on_js(v):                   # the control part answers each sample, in its receiver thread
            got.append(v)
            ctl.send("/cmd", JointSample(v.stamp_ns, NAMES, v.effort, v.effort, -v.effort))

        ctl.bind_inputs({"/joint_states": on_js})
        sim.bind_inputs({"/cmd": lambda v: (replies.append(v), len(replies) == 6 and done.set())})
        ctl.start(batch_replies=True)
        sim.start()
        sim.batching()
        samples = [JointSample(k * 1_000_000, NAMES, RNG.normal(size=18), RNG.normal(size=18), RNG.normal(size=18))
                   for k in range(6)]
        for k, s in enumerate(samples):
            sim.send("/joint_states", s)
            if k % 2 == 1:
                sim.flush()             # two samples a frame, like the bridge's 1 kHz samples per tick
        assert done.wait(5.0)
        assert [v.stamp_ns for v in got] == [s.stamp_ns for s in samples] and all(map(_same, samples, got))
        assert ctl.received == 3 and sim.sent == 3
        assert ctl.sent == 3 and sim.received == 3               # the replies to a frame: one frame back
        assert [r.stamp_ns for r in replies] == [s.stamp_ns for s in samples]
        assert all(_same(-s.effort, r.effort) for s, r in zip(samples, replies))
        # a subscription made later is announced; the other side starts sending
        seen = threading.Event()
        sim.on_peer_subs = lambda subs: seen.set()
        ctl.announce_subs({"/joint_states": 2, "/clock": 1})
        assert seen.wait(5.0) and sim.sends("/clock")
        # RECORD (the split's recorder asks the control part to record its own topics) arrives before the
        # frames sent after it; after_frame runs after each data frame's deliveries and replies
        events, done2 = [], threading.Event()
        ctl.on_record = lambda info: events.append(("record", info))
        ctl.after_frame = lambda: (events.append(("after", len(got), ctl.sent)), len(events) == 3 and done2.set())
        ring = "legged_wbc_ring_" + "0" * 32
        sim.announce_record({"ring": ring, "topics": {"/cmd": "sensor_msgs/msg/JointState"}})
        for s in samples[:4]:
            sim.send("/joint_states", s)
            if len(sim._tls.batch) == 2:
                sim.flush()
        assert done2.wait(5.0)
        assert events == [("record", {"ring": ring, "topics": {"/cmd": "sensor_msgs/msg/JointState"}}),
                          ("after", 8, 4), ("after", 10, 5)]
        # the end: bye from the sim part, answered by the control part
        sim.bye()
        assert ctl.closed.wait(5.0) and sim.closed.wait(5.0)
    finally:
        sim.close()
        ctl.close()


def test_a_peer_that_dies_ends_the_link_and_sends_are_counted(monkeypatch):
    monkeypatch.setenv("ROS_DOMAIN_ID", str(200 + os.getpid() % 30))
    msgs = []
    sim, ctl = _pair(uuid.uuid4().hex, [_pub("/a", "ClockAdapter")], [_pub("/b", "ClockAdapter")],
                     {"/b": 1}, {"/a": 1})
    sim.log = msgs.append
    sim.bind_inputs({})
    sim.start()
    ctl.close()                                             # the control process dies
    assert sim.closed.wait(5.0)
    for _ in range(3):
        sim.send("/a", 1)
    assert sim.dropped == 3 and len(msgs) == 1 and "dropped" in msgs[0]
    sim.close()


def test_two_stacks_with_one_link_name_are_one_clear_error(monkeypatch):
    monkeypatch.setenv("ROS_DOMAIN_ID", str(200 + os.getpid() % 30))
    name = uuid.uuid4().hex
    a = HostLink(name, "sim")
    try:
        with pytest.raises(LinkError, match="address in use"):
            HostLink(name, "sim")
        with pytest.raises(LinkError, match="no sim part"):
            HostLink(name + "-nobody", "control").handshake([], {}, timeout=0.3)
    finally:
        a.close()
    with pytest.raises(LinkError, match="part must be one of"):
        HostLink(name, "bridge")


# ------------------------------------------------------------------------------------------------ trust
# The attacks of a local user on the link (reproduced as this user, who lacks the launch's secret): a
# forged peer that connects first and sends a pickle, a listener that takes the address first, a RECORD
# whose ring is a path, a peer that stays silent, a stop while waiting.
import pickle  # noqa: E402  (the attacker's tool, never the link's)
import socket  # noqa: E402
import struct  # noqa: E402
import time  # noqa: E402

from legged_wbc.ros.io import wire  # noqa: E402
from legged_wbc.ros.transport.host_link import (HELLO, SECRET_ENV, LinkStopped, key_file_path, link_address,  # noqa: E402
                                      parse_record)


class _Mkdir:
    """A pickle that makes a directory when unpickled: proof that code ran."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def _pickle_frame(marker) -> bytes:
    body = bytes([HELLO]) + pickle.dumps({"pubs": [], "subs": {"/joint_torque_cmd": 1}, "x": _Mkdir(marker)})
    return struct.pack("<I", len(body)) + body


def _connect_raw(name: str, timeout: float = 5.0) -> socket.socket:
    t_end = time.monotonic() + timeout
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(link_address(name))
            return s
        except ConnectionRefusedError:
            s.close()
            assert time.monotonic() < t_end, "the sim part never listened"
            time.sleep(0.02)


def _rest(sock) -> bytes:
    """What ``sock`` receives until the other end closes it (a close with unread data resets it)."""
    out = b""
    try:
        while chunk := sock.recv(4096):
            out += chunk
    except ConnectionResetError:
        pass
    return out


@pytest.fixture
def link_env(monkeypatch):
    monkeypatch.setenv("ROS_DOMAIN_ID", str(200 + os.getpid() % 30))
    monkeypatch.delenv(SECRET_ENV, raising=False)
    return uuid.uuid4().hex


def _in_thread(fn, *args, **kw):
    out = {}

    def run():
        try:
            out["ok"] = fn(*args, **kw)
        except BaseException as exc:     # noqa: BLE001  (handed to the test)
            out["exc"] = exc

    t = threading.Thread(target=run)
    t.start()
    return t, out


@pytest.mark.parametrize("secret_from", ["key file", "launcher"])
def test_a_forged_peer_without_the_secret_is_refused_and_the_real_pair_still_joins(link_env, tmp_path, monkeypatch,
                                                                                   secret_from):
    """A process that connects to the abstract address before the control part and sends a pickled HELLO
    (the issue's attack: code ran in the sim part) is refused at once with one line, before anything it sent
    is read as data: nothing is unpickled (no directory appears), it is given no nonce or MAC, and the real
    control part, connecting after it, joins and exchanges HELLOs. The secret comes from the key file the
    sim part writes (0600 in a 0700 directory of this user, gone after close) or from the launcher's variable."""
    name, said, marker = link_env, [], tmp_path / "code_ran"
    if secret_from == "launcher":
        monkeypatch.setenv(SECRET_ENV, os.urandom(32).hex())
    sim = HostLink(name, "sim", log=said.append)
    key = key_file_path(name)
    assert os.path.exists(key) == (secret_from == "key file")
    if secret_from == "key file":
        st, dst = os.stat(key), os.stat(os.path.dirname(key))
        assert (st.st_mode & 0o777, dst.st_mode & 0o777) == (0o600, 0o700) and st.st_uid == os.geteuid()
    ctl = HostLink(name, "control", log=lambda m: None)
    t_sim, res = _in_thread(sim.handshake, [_pub("/clock", "ClockAdapter")], {"/cmd": 1}, 10.0)
    try:
        forger = _connect_raw(name)
        forger.sendall(_pickle_frame(marker) + b"\0" * 64)
        forger.settimeout(5.0)
        assert _rest(forger) == b""                   # closed on it, nothing sent back
        ctl.handshake([_pub("/cmd", "ClockAdapter")], {"/clock": 1}, 10.0)
        t_sim.join(10.0)
        assert "exc" not in res, res
        assert not marker.exists()
        assert [p["topic"] for p in sim.peer_pubs] == ["/cmd"] and [p["topic"] for p in ctl.peer_pubs] == ["/clock"]
        assert len(said) == 1 and "refused a connection" in said[0] and "protocol" in said[0], said
    finally:
        sim.close()
        ctl.close()
    assert not os.path.exists(key)


_AS_NOBODY = """
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(bytes.fromhex(sys.argv[1]))
try:
    s.sendall(bytes.fromhex(sys.argv[2]))
    print(len(s.recv(100)))
except (BrokenPipeError, ConnectionResetError):   # closed on it before it finished sending
    print(0)
"""


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/bin/python3"),
                    reason="needs root to run a process as another user (nobody)")
def test_another_users_process_is_refused_by_its_credentials(link_env, tmp_path, monkeypatch):
    """The issue's attack as it was run: user ``nobody`` connects to the (world-reachable) abstract address
    of a root launch before the control part and sends a pickled HELLO. The sim part refuses it by its
    credentials (``SO_PEERCRED``) in one line, reading nothing it sent; the real pair joins after it."""
    monkeypatch.setenv(SECRET_ENV, os.urandom(32).hex())
    name, said, marker = link_env, [], tmp_path / "code_ran"
    sim = HostLink(name, "sim", log=said.append)
    t_sim, res = _in_thread(sim.handshake, [], {}, 20.0)
    try:
        _connect_raw(name).close()                  # listening now (a same-user probe: refused, said)
        r = subprocess.run(["/usr/bin/python3", "-c", _AS_NOBODY, link_address(name).hex(),
                            (_pickle_frame(marker) + b"\0" * 64).hex()], user=65534, group=65534, extra_groups=[],
                           cwd="/", capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout.strip() == "0", r.stderr
        ctl = HostLink(name, "control", log=lambda m: None)
        ctl.handshake([], {}, 20.0)
        t_sim.join(10.0)
        ctl.close()
        assert "exc" not in res and not marker.exists()
        assert any("refused a connection" in m and "is user 65534, not this one" in m for m in said), said
    finally:
        sim.close()


def test_a_listener_that_takes_the_address_first_cannot_pass_for_the_sim_part(link_env, tmp_path, monkeypatch):
    """A process that binds the link's address before the sim part (the issue's attack: code ran in the
    control part) answers the control part's challenge without the secret, with a pickle: the control part
    refuses it in one line and ends, having sent nothing but its challenge and unpickled nothing; the real
    sim part cannot start on a taken address (one line)."""
    monkeypatch.setenv(SECRET_ENV, os.urandom(32).hex())
    name, marker = link_env, tmp_path / "code_ran"
    squatter = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    squatter.bind(link_address(name))
    squatter.listen(1)
    got = []

    def serve():
        conn, _ = squatter.accept()
        conn.settimeout(5.0)
        got.append(conn.recv(100))
        conn.sendall((_pickle_frame(marker) * 3)[:64])
        got.append(_rest(conn))                      # what the control part says next: nothing (it closes)
        conn.close()

    t = threading.Thread(target=serve)
    t.start()
    ctl = HostLink(name, "control", log=lambda m: None)
    try:
        with pytest.raises(LinkError, match=r"is not this launch's sim part: it does not know this launch's secret"):
            ctl.handshake([_pub("/cmd", "ClockAdapter")], {"/clock": 1}, 10.0)
        t.join(10.0)
        assert len(got[0]) == 40 and got[0].startswith(b"LWBCLNK") and got[1] == b""
        assert not marker.exists()
        with pytest.raises(LinkError, match="address in use"):
            HostLink(name, "sim")
    finally:
        ctl.close()
        squatter.close()


def test_a_record_whose_ring_is_a_path_is_refused_and_ends_the_link(link_env):
    """RECORD's ring must be a ring name of the stack's scheme: a path (the issue's ``../../<dir>/<file>``,
    which made the control part map a root-owned file and write into it) is refused in one line and the
    link ends, the recording callback never called; the other control frames are checked field by field."""
    good = {"ring": "legged_wbc_ring_" + "ab" * 16, "topics": {"/cmd": "sensor_msgs/msg/JointState"}}
    assert parse_record(wire.pack(0xC1, good)) == good
    for bad in ({**good, "ring": "../../tmp/x"}, {**good, "ring": "legged_wbc_ring_/../../x" + "0" * 16},
                {**good, "ring": "psm_1234abcd"}, {**good, "topics": {"/cmd": "os/msg/System"}},
                {**good, "topics": {"cmd//x": "sensor_msgs/msg/JointState"}}, {**good, "extra": 1}):
        with pytest.raises(wire.FormatError):
            parse_record(wire.pack(0xC1, bad))
    with pytest.raises(wire.FormatError, match="version 128"):
        parse_record(pickle.dumps(good))
    said, calls = [], []
    sim, ctl = _pair(link_env, [_pub("/a", "ClockAdapter")], [_pub("/b", "ClockAdapter")], {"/b": 1}, {"/a": 1})
    try:
        ctl.log, ctl.on_record = said.append, calls.append
        ctl.bind_inputs({})
        ctl.start()
        sim.announce_record({**good, "ring": "../../tmp/x"})
        assert ctl.closed.wait(5.0) and calls == []
        assert len(said) == 1 and "malformed RECORD" in said[0] and "not a valid name" in said[0], said
    finally:
        sim.close()
        ctl.close()


def test_a_silent_peer_ends_the_wait_within_its_bound(link_env, monkeypatch):
    """A connection that never proves the secret is dropped after ``auth_timeout`` (the sim part keeps
    listening, then gives up at its own timeout); a listener that never answers ends the control part's
    wait after twice that (plus 1 s) even with no timeout of its own (0: wait forever for a peer)."""
    name = link_env
    said = []
    sim = HostLink(name, "sim", log=said.append)
    sim.auth_timeout = 0.5
    t_sim, res = _in_thread(sim.handshake, [], {}, 2.0)
    silent = _connect_raw(name)
    t0 = time.monotonic()
    t_sim.join(10.0)
    took = time.monotonic() - t0
    sim.close()
    silent.close()
    assert isinstance(res.get("exc"), LinkError) and "no control part within 2 s" in str(res["exc"])
    assert took < 3.0 and len(said) == 1 and "said nothing valid in time" in said[0], (took, said)
    squatter = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    squatter.bind(link_address(name))
    squatter.listen(1)
    ctl = HostLink(name, "control", log=lambda m: None)
    ctl.auth_timeout = 0.5
    monkeypatch.setenv(SECRET_ENV, "0" * 64)
    t0 = time.monotonic()
    try:
        with pytest.raises(LinkError, match="said nothing valid in time"):
            ctl.handshake([], {}, 0.0)
        assert time.monotonic() - t0 < 3.0
    finally:
        ctl.close()
        squatter.close()


def test_a_stop_while_waiting_ends_the_wait(link_env):
    """A stop (the containers' SIGINT / SIGTERM handler sets it) ends a wait for the peer within ~0.1 s,
    whether no one connected or a connected peer stays silent."""
    name = link_env
    for with_silent_peer in (False, True):
        stop = threading.Event()
        sim = HostLink(name, "sim", log=lambda m: None)
        t_sim, res = _in_thread(sim.handshake, [], {}, 0.0, stop.is_set)
        silent = _connect_raw(name) if with_silent_peer else None
        time.sleep(0.3)
        t0 = time.monotonic()
        stop.set()
        t_sim.join(5.0)
        assert isinstance(res.get("exc"), LinkStopped) and time.monotonic() - t0 < 1.0
        sim.close()
        if silent is not None:
            silent.close()


# ------------------------------------------------------------------------------------ the containers
def _container(tmp_path, env, exe: str, link: str, *params: str):
    from test_ros_stack import BIN, Proc

    args = [str(BIN / exe), "--ros-args", "-p", f"link:={link}"]
    for p in params:
        args += ["-p", p]
    return Proc(exe, args, env, tmp_path)


@pytest.mark.ros
def test_control_container_refuses_a_listener_that_took_the_address_and_speaks_pickle(tmp_path, ros_env,
                                                                                     monkeypatch):
    """The issue's second attack end to end: a process holds the link's address before the sim part and
    answers the real ``control_container`` (given the launch's secret, as the launcher does) with a pickle:
    the container ends with rc 2 and one line, no traceback, and the pickle never ran."""
    env = {**ros_env, SECRET_ENV: os.urandom(32).hex()}
    marker, name = tmp_path / "code_ran", uuid.uuid4().hex
    monkeypatch.setenv("ROS_DOMAIN_ID", env["ROS_DOMAIN_ID"])      # link_address() of the container's domain
    squatter = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    squatter.bind(link_address(name))
    squatter.listen(1)
    p = _container(tmp_path, env, "control_container", name)
    try:
        squatter.settimeout(240.0)
        conn, _ = squatter.accept()
        conn.sendall(_pickle_frame(marker) * 2)
        assert p.wait(60) == 2
        conn.close()
    finally:
        p.stop()
        squatter.close()
    out = p.text()
    assert not marker.exists() and "Traceback" not in out, out
    assert re.search(r"^control_container: link '\w+': the process at its address \(pid \d+\) is not this launch's "
                     r"sim part: it does not know this launch's secret; refused$", out, re.M), out


@pytest.mark.ros
def test_sim_container_ends_on_sigint_while_a_silent_peer_holds_the_connection(tmp_path, ros_env, monkeypatch):
    """SIGINT ends a ``sim_container`` that waits in its handshake with a connected peer that says nothing
    (before: it waited forever, deaf to SIGINT): within seconds, one line, no traceback."""
    name = uuid.uuid4().hex
    p = _container(tmp_path, ros_env, "sim_container", name, "link_timeout:=0.0")
    silent = None
    try:
        p.wait_for(r"host link '\w+': joining the control part", timeout=240)
        monkeypatch.setenv("ROS_DOMAIN_ID", ros_env["ROS_DOMAIN_ID"])
        silent = _connect_raw(name, timeout=30)
        time.sleep(1.0)
        t0 = time.monotonic()
        p.p.send_signal(signal.SIGINT)
        rc = p.wait(15)
        took = time.monotonic() - t0
    finally:
        p.stop()
        if silent is not None:
            silent.close()
    out = p.text()
    assert rc == 130 and took < 10.0 and "Traceback" not in out, (rc, took, out)
    assert re.search(r"^sim_container: stopped while waiting for the link's peer$", out, re.M), out
