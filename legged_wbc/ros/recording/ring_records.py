"""The recorder rings' own records (:mod:`.bag_process`): a topic's description and a second ring's
name, in the checked, versioned encoding of :mod:`legged_wbc.ros.io.wire` (never pickle); anything
else read from a ring is :class:`~legged_wbc.ros.recording.shm_ring.RingCorrupt`."""

from __future__ import annotations

import re

from legged_wbc.ros.io.wire import FormatError, b64, blob, fields, integer, msgtype, pack, sequence, text, topic, unpack
from legged_wbc.ros.recording.cdr_layout import CdrSplicer
from legged_wbc.ros.recording.shm_ring import RING_NAME, RingCorrupt


# ------------------------------------------------------------------------------- recorder ring records
RING_RECORD_VERSION = 0xB1              # a topic's description, a second ring (bag_process); pickle starts 0x80
MAX_SPLICER_BYTES = 1 << 22             # a layout's constant segments and payload, each [bytes]
_DIGEST = re.compile(r"RIHS01_[0-9a-f]{64}")
_QOS_TIMES = (4, 5, 7)                  # rosbags Qos fields that are QosTime (sec, nsec)


def pack_topic_info(topic: str, msgtype: str, splicer, qos: list, digest: str | None) -> bytes:
    """A recorder ring's topic record (:data:`~legged_wbc.ros.recording.bag_process.KIND_TOPIC`): the topic, its type,
    its fixed layout (``splicer``: :class:`~legged_wbc.ros.recording.cdr_layout.CdrSplicer`, None: recorded
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
    :class:`~legged_wbc.ros.recording.shm_ring.RingCorrupt` for anything else (a pickle of the old format included)."""
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
    """A recorder ring's record (:data:`~legged_wbc.ros.recording.bag_process.KIND_PEER`) naming a second ring to drain."""
    return pack(RING_RECORD_VERSION, {"ring": name})


def unpack_peer_ring(data) -> str:
    """:func:`pack_peer_ring`'s ring name (of the ring naming scheme, :data:`~legged_wbc.ros.recording.shm_ring.RING_NAME`);
    raises :class:`~legged_wbc.ros.recording.shm_ring.RingCorrupt` for anything else."""
    try:
        return text(fields(unpack(data, RING_RECORD_VERSION, 4096), "peer ring record", {"ring": str})["ring"],
                    "ring", RING_NAME)
    except FormatError as exc:
        raise RingCorrupt(f"a peer ring record that is not ours: {exc}") from None
