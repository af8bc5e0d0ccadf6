"""Fixed, versioned encodings of what one process of the stack tells another: nothing is unpickled.

Two kinds of structured messages cross a process boundary besides the numbers themselves: the host
link's control frames (HELLO / SUBS / RECORD, :mod:`legged_wbc.ros.host_link`) and the descriptive
records of a recorder ring (a topic's description, a second ring to drain,
:mod:`legged_wbc.ros.bag_process`). Each is one *document*: a version byte, a little-endian ``uint32``
length and that many bytes of UTF-8 JSON holding plain types only (objects, lists, strings, integers,
booleans, null; bytes as base64 strings; no NaN). :func:`pack` writes one, :func:`unpack` reads one and
refuses anything else (another version, a wrong length, bad UTF-8 or JSON, a document over its size
bound) with :class:`FormatError`. The readers of each document then check every field against a strict
schema (the helpers below: types, lengths, ROS topic and type names), so a peer can at worst be told
"malformed", never run code or reach a path: unlike pickle, decoding builds nothing but plain values.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import struct

_HEAD = struct.Struct("<BI")            # version, JSON length [bytes]
MAX_DOC_BYTES = 1 << 22                 # a document is at most 4 MiB (HELLO with templates: ~10 kB)
MAX_NAME = 255                          # a topic / type / joint name [characters]
# ROS 2 fully qualified topic names: tokens of letters, digits and underscores, not starting with a digit
_TOPIC = re.compile(r"(/[A-Za-z_][A-Za-z0-9_]*)+")
_MSGTYPE = re.compile(r"[A-Za-z][A-Za-z0-9_]*/msg/[A-Z][A-Za-z0-9_]*")


class FormatError(ValueError):
    """A document that is not what its reader expects (version, length, JSON, a field)."""


def pack(version: int, obj) -> bytes:
    """``obj`` (plain types only) as one document of ``version``."""
    body = json.dumps(obj, separators=(",", ":"), allow_nan=False, ensure_ascii=False).encode()
    if len(body) > MAX_DOC_BYTES:
        raise FormatError(f"a document of {len(body)} bytes (at most {MAX_DOC_BYTES})")
    return _HEAD.pack(version, len(body)) + body


def _no_constant(name):
    raise FormatError(f"{name} is not a number here")


def unpack(data, version: int, max_bytes: int = MAX_DOC_BYTES):
    """The plain value of one document (``data``: exactly the document) of ``version``; raises
    :class:`FormatError` for anything else."""
    data = bytes(data)
    if len(data) < _HEAD.size:
        raise FormatError(f"{len(data)} bytes, shorter than a document's header")
    v, n = _HEAD.unpack_from(data, 0)
    if v != version:
        raise FormatError(f"format version {v}, expected {version} (another encoding, or not one of ours)")
    if n != len(data) - _HEAD.size or n > max_bytes:
        raise FormatError(f"a document of {len(data) - _HEAD.size} bytes saying {n} (at most {max_bytes})")
    try:
        return json.loads(data[_HEAD.size:].decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise FormatError(f"not UTF-8 JSON ({type(exc).__name__})") from None


# ------------------------------------------------------------------------------- schema helpers
def fields(obj, what: str, required: dict, optional: dict | None = None) -> dict:
    """``obj`` checked to be an object with exactly the ``required`` keys (key -> type or tuple of
    types) and some of the ``optional`` ones; returns it (optional keys missing: None)."""
    optional = optional or {}
    if not isinstance(obj, dict):
        raise FormatError(f"{what}: an object expected, not {type(obj).__name__}")
    unknown = set(obj) - set(required) - set(optional)
    missing = set(required) - set(obj)
    if unknown or missing:
        raise FormatError(f"{what}: unknown keys {sorted(unknown)}, missing keys {sorted(missing)}")
    out = {}
    for key, types in {**required, **optional}.items():
        value = obj.get(key)
        if key in obj and not _is(value, types):
            raise FormatError(f"{what}.{key}: {type(value).__name__} is not allowed here")
        out[key] = value
    return out


def _is(value, types) -> bool:
    types = types if isinstance(types, tuple) else (types,)
    if isinstance(value, bool):                 # JSON true is not an integer here
        return bool in types
    return isinstance(value, types) or (value is None and type(None) in types)


def integer(value, what: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise FormatError(f"{what}: an integer in [{lo}, {hi}] expected, not {value!r:.40}")
    return value


def text(value, what: str, pattern: re.Pattern | None = None, max_len: int = MAX_NAME) -> str:
    if not isinstance(value, str) or not value or len(value) > max_len or "\0" in value:
        raise FormatError(f"{what}: a non-empty string of at most {max_len} characters expected")
    if pattern is not None and not pattern.fullmatch(value):
        raise FormatError(f"{what}: {value!r:.80} is not a valid name here")
    return value


def topic(value, what: str = "topic") -> str:
    """A fully qualified ROS 2 topic name (``/a/b_c``)."""
    return text(value, what, _TOPIC)


def msgtype(value, what: str = "type") -> str:
    """A ROS 2 message type name (``pkg/msg/Name``)."""
    return text(value, what, _MSGTYPE)


def sequence(value, what: str, max_items: int) -> list:
    if not isinstance(value, list) or len(value) > max_items:
        raise FormatError(f"{what}: a list of at most {max_items} items expected")
    return value


def blob(value, what: str, max_bytes: int) -> bytes:
    """Bytes sent as a base64 string."""
    if not isinstance(value, str) or len(value) > 4 * (max_bytes // 3 + 1):
        raise FormatError(f"{what}: base64 of at most {max_bytes} bytes expected")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise FormatError(f"{what}: not base64") from None


def b64(data) -> str:
    return base64.b64encode(bytes(data)).decode("ascii")


# ------------------------------------------------------------------------------- recorder ring records
RING_RECORD_VERSION = 0xB1              # a topic's description, a second ring (bag_process); pickle starts 0x80
MAX_SPLICER_BYTES = 1 << 22             # a layout's constant segments and payload, each [bytes]
_DIGEST = re.compile(r"RIHS01_[0-9a-f]{64}")
_QOS_TIMES = (4, 5, 7)                  # rosbags Qos fields that are QosTime (sec, nsec)


def pack_topic_info(topic: str, msgtype: str, splicer, qos: list, digest: str | None) -> bytes:
    """A recorder ring's topic record (:data:`~legged_wbc.ros.bag_process.KIND_TOPIC`): the topic, its type,
    its fixed layout (``splicer``: :class:`~legged_wbc.ros.cdr_layout.CdrSplicer`, None: recorded
    serialized), the publishers' QoS (``rosbags.interfaces.Qos``) and the RIHS01 type hash."""
    sp = None if splicer is None else {"consts": [b64(c) for c in splicer.consts],
                                       "slices": [list(s) for s in splicer.slices], "size": splicer.payload_size}
    return pack(RING_RECORD_VERSION, {"topic": topic, "msgtype": msgtype, "splicer": sp, "digest": digest,
                                      "qos": [[_plain(x) for x in q] for q in qos]})


def _plain(x):
    """A field of a rosbags ``Qos`` as a plain value: an enum as its number, a ``QosTime`` as ``[sec, nsec]``."""
    if isinstance(x, bool):
        return x
    if isinstance(x, tuple):
        return [int(x[0]), int(x[1])]
    return int(getattr(x, "value", x))


def unpack_topic_info(data) -> dict:
    """:func:`pack_topic_info`'s record as ``{topic, msgtype, splicer, qos, digest}``; raises
    :class:`~legged_wbc.ros.shm_ring.RingCorrupt` for anything else (a pickle of the old format included)."""
    from legged_wbc.ros.shm_ring import RingCorrupt

    try:
        d = fields(unpack(data, RING_RECORD_VERSION), "topic record",
                   {"topic": str, "msgtype": str, "splicer": (dict, type(None)), "qos": list,
                    "digest": (str, type(None))})
        topic(d["topic"])
        msgtype(d["msgtype"])
        if d["digest"] is not None:
            text(d["digest"], "digest", _DIGEST)
        return {"topic": d["topic"], "msgtype": d["msgtype"], "digest": d["digest"],
                "splicer": None if d["splicer"] is None else _splicer(d["splicer"]), "qos": _qos_list(d["qos"])}
    except FormatError as exc:
        raise RingCorrupt(f"a topic record that is not ours: {exc}") from None


def _splicer(d):
    from legged_wbc.ros.cdr_layout import CdrSplicer

    d = fields(d, "splicer", {"consts": list, "slices": list, "size": int})
    size = integer(d["size"], "splicer.size", 0, MAX_SPLICER_BYTES)
    consts = tuple(blob(c, "splicer.consts[]", MAX_SPLICER_BYTES) for c in sequence(d["consts"], "splicer.consts",
                                                                                   1 << 16))
    slices = []
    for s in sequence(d["slices"], "splicer.slices", 1 << 16):
        s = sequence(s, "splicer.slices[]", 2)
        if len(s) != 2:
            raise FormatError("splicer.slices[]: a pair expected")
        a, b = integer(s[0], "slice start", 0, size), integer(s[1], "slice end", 0, size)
        if a > b:
            raise FormatError(f"splicer.slices[]: ({a}, {b}) is not a slice")
        slices.append((a, b))
    if len(consts) != len(slices) + 1 or sum(map(len, consts)) > MAX_SPLICER_BYTES:
        raise FormatError(f"splicer: {len(consts)} constant segments around {len(slices)} slices")
    return CdrSplicer(consts, tuple(slices), size)


def _qos_list(items) -> list:
    from rosbags.interfaces import Qos, QosDurability, QosHistory, QosLiveliness, QosReliability, QosTime

    enums = {0: QosHistory, 2: QosReliability, 3: QosDurability, 6: QosLiveliness}
    out = []
    for q in sequence(items, "qos", 256):
        q = sequence(q, "qos[]", 9)
        if len(q) != 9:
            raise FormatError("qos[]: 9 fields expected")
        vals = []
        try:
            for i, x in enumerate(q):
                if i in enums:
                    vals.append(enums[i](integer(x, "qos enum", 0, 255)))
                elif i in _QOS_TIMES:
                    t = sequence(x, "qos time", 2)
                    vals.append(QosTime(integer(t[0], "qos sec", 0, 2**32 - 1), integer(t[1], "qos nsec", 0, 2**32 - 1)))
                elif i == 8:
                    vals.append(_bool(x, "qos avoid_ros_namespace_conventions"))
                else:
                    vals.append(integer(x, "qos depth", 0, 2**31 - 1))
        except (ValueError, IndexError) as exc:
            raise FormatError(f"qos[]: {exc}") from None
        out.append(Qos(*vals))
    return out


def _bool(value, what: str) -> bool:
    if not isinstance(value, bool):
        raise FormatError(f"{what}: true or false expected")
    return value


def pack_peer_ring(name: str) -> bytes:
    """A recorder ring's record (:data:`~legged_wbc.ros.bag_process.KIND_PEER`) naming a second ring to drain."""
    return pack(RING_RECORD_VERSION, {"ring": name})


def unpack_peer_ring(data) -> str:
    """:func:`pack_peer_ring`'s ring name (of the ring naming scheme, :data:`~legged_wbc.ros.shm_ring.RING_NAME`);
    raises :class:`~legged_wbc.ros.shm_ring.RingCorrupt` for anything else."""
    from legged_wbc.ros.shm_ring import RING_NAME, RingCorrupt

    try:
        return text(fields(unpack(data, RING_RECORD_VERSION, 4096), "peer ring record", {"ring": str})["ring"],
                    "ring", RING_NAME)
    except FormatError as exc:
        raise RingCorrupt(f"a peer ring record that is not ours: {exc}") from None
