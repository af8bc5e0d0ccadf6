"""Fixed-layout records of ROS 2 messages: what the control process hands the recorder process.

A topic of our stack publishes messages whose *shape* never changes between ticks (the same joint
names, frame ids, array lengths); only numbers change. The CDR bytes of such a message are therefore
a fixed template with the numeric fields at fixed offsets. :class:`MessageLayout` walks one message
(rclpy object) once and splits its CDR serialization into constant segments (strings, names,
lengths, padding) and variable segments (numeric scalars and numeric arrays):

* the producer (control process, :meth:`MessageLayout.pack`) turns a message into the *payload*:
  the variable segments' bytes, concatenated (``attrgetter`` + ``struct`` + buffer copies, ~2 us
  against ~20 us for ``rclpy.serialization.serialize_message`` of a JointState, which converts every
  joint name again);
* the consumer (recorder process, :class:`CdrSplicer`, plain data, no rclpy) interleaves the constant
  segments with the payload's slices and gets the exact CDR bytes ``serialize_message`` would give.

:meth:`MessageLayout.pack` returns ``None`` when the message's shape differs from the template (a
string or a constant field changed, an array changed length): the caller then takes a new layout.
:meth:`MessageLayout.from_message` checks its own template against ``serialize_message`` once, so a
layout rule this module got wrong is an error at the first message, never a silently wrong bag.

CDR as ROS 2 writes it (Fast-CDR, XCDR1, little endian): a 4-byte encapsulation header
(``00 01 00 00``), then the fields in order, each primitive aligned to its size (at most 8) counted
from the end of the header (Fast-CDR leaves the padding bytes uninitialized; ours are zero); a string is a uint32 length (with the NUL), the bytes and a NUL; a
sequence a uint32 count then the elements; a fixed array the elements only. The elements of an empty
sequence are not aligned (no padding after a zero count).
"""

from __future__ import annotations

import copy
import struct
from dataclasses import dataclass
from operator import attrgetter

import numpy as np

CDR_LE_HEADER = b"\x00\x01\x00\x00"

# ROS 2 primitive type -> (struct code, size)
_PRIMITIVES = {
    "boolean": ("?", 1), "byte": ("B", 1), "octet": ("B", 1), "char": ("B", 1), "uint8": ("B", 1),
    "int8": ("b", 1), "int16": ("h", 2), "uint16": ("H", 2), "int32": ("i", 4), "uint32": ("I", 4),
    "float": ("f", 4), "int64": ("q", 8), "uint64": ("Q", 8), "double": ("d", 8),
}


class LayoutError(ValueError):
    """A message this module cannot lay out (e.g. a wide string), or whose template disagrees with rclpy."""


def _split_type(t: str) -> tuple[str, str, int | None]:
    """``(kind, element type, count)``: kind is scalar | sequence | array."""
    if t.startswith("sequence<"):
        inner = t[len("sequence<"):-1]
        return "sequence", inner.split(",")[0].strip(), None
    if t.endswith("]") and "[" in t:
        base, _, n = t[:-1].partition("[")
        return "array", base, int(n)
    return "scalar", t, None


def _strip_bound(t: str) -> str:
    return "string" if t.startswith("string<=") else t


class _Builder:
    """Walks a message, building the template CDR and the segment list."""

    def __init__(self):
        self.buf = bytearray(CDR_LE_HEADER)
        # segments: ("const", None) marks are implicit; var segments record their span and how to read them
        self.var: list[dict] = []
        self.const_checks: list[tuple[str, object]] = []   # (path, value): must stay equal
        self.padding: list[int] = []                       # byte positions of alignment padding

    @property
    def pos(self) -> int:
        return len(self.buf) - 4

    def align(self, n: int) -> None:
        pad = (-self.pos) % n
        self.padding.extend(range(len(self.buf), len(self.buf) + pad))
        self.buf += b"\x00" * pad

    def scalar(self, path: str, t: str, value) -> None:
        code, size = _PRIMITIVES[t]
        self.align(size)
        start = len(self.buf)
        try:
            self.buf += struct.pack("<" + code, value)
        except struct.error as exc:      # e.g. a ``byte`` field (bytes in rclpy): no fixed layout for it here
            raise LayoutError(f"field {path or '?'} ({t}): {exc}") from None
        self.var.append({"kind": "scalar", "path": path, "code": code, "start": start, "end": len(self.buf)})

    def string(self, value: str) -> None:
        data = value.encode("utf-8") + b"\x00"
        self.align(4)
        self.buf += struct.pack("<I", len(data)) + data

    def walk(self, msg, prefix: str = "") -> None:
        for name, t in msg.get_fields_and_field_types().items():
            value = getattr(msg, name)
            path = prefix + name
            kind, elem, n = _split_type(t)
            elem = _strip_bound(elem)
            if kind == "scalar":
                if elem in _PRIMITIVES:
                    self.scalar(path, elem, value)
                elif elem == "string":
                    self.string(value)
                    self.const_checks.append((path, value))
                elif "/" in elem:
                    self.walk(value, path + ".")
                else:
                    raise LayoutError(f"{path}: type {t} not supported")
                continue
            count = len(value)
            if kind == "sequence":
                self.align(4)
                self.buf += struct.pack("<I", count)
            elif count != n:
                raise LayoutError(f"{path}: fixed array of {n} holds {count}")
            if elem in _PRIMITIVES:
                code, size = _PRIMITIVES[elem]
                if count:
                    self.align(size)
                start = len(self.buf)
                self.buf += struct.pack(f"<{count}{code}", *value)
                self.var.append({"kind": "array", "path": path, "code": code, "count": count,
                                 "start": start, "end": len(self.buf), "sequence": kind == "sequence"})
            elif elem == "string":
                for s in value:
                    self.string(s)
                self.const_checks.append((path, list(value)))
            elif "/" in elem:
                nvar, nchecks = len(self.var), len(self.const_checks)
                for item in value:
                    self.walk(item, "")          # nested messages in a sequence: constant as a whole
                del self.var[nvar:], self.const_checks[nchecks:]
                self.const_checks.append((path, copy.deepcopy(list(value))))
            else:
                raise LayoutError(f"{path}: type {t} not supported")


@dataclass(frozen=True)
class CdrSplicer:
    """The consumer's half (plain data, no rclpy; sent as :func:`~legged_wbc.ros.recording.ring_records.pack_topic_info`):
    constant segments + the variable segments' slices of the payload -> CDR bytes."""

    consts: tuple[bytes, ...]            # len(slices) + 1 constant segments (possibly empty)
    slices: tuple[tuple[int, int], ...]  # (start, end) in the payload of each variable segment, CDR order
    payload_size: int

    def build_many(self, payloads: list) -> list:
        """:meth:`build` of many payloads at once (one numpy gather for all of them, ~1 us a message
        instead of ~3-10 us): the recorder process splices each batch of a topic's records this way."""
        k = len(payloads)
        if k == 0:
            return []
        gather = self.__dict__.get("_gather")
        if gather is None:                 # output byte j <- byte gather[j] of (consts | payload)
            parts, o = [], 0
            base = sum(len(c) for c in self.consts)
            for i, const in enumerate(self.consts):
                parts.append(np.arange(o, o + len(const)))
                o += len(const)
                if i < len(self.slices):
                    a, b = self.slices[i]
                    parts.append(np.arange(base + a, base + b))
            gather = np.concatenate(parts).astype(np.intp)
            object.__setattr__(self, "_gather", gather)
            object.__setattr__(self, "_consts", np.frombuffer(b"".join(self.consts), dtype=np.uint8))
        pay = np.frombuffer(b"".join(payloads), dtype=np.uint8)
        if pay.size != k * self.payload_size:
            raise LayoutError(f"payloads of {pay.size} bytes for {k} records, layout expects {self.payload_size} each")
        src = np.empty((k, self._consts.size + self.payload_size), dtype=np.uint8)
        src[:, :self._consts.size] = self._consts
        src[:, self._consts.size:] = pay.reshape(k, self.payload_size)
        out = src[:, gather]
        return [row.tobytes() for row in out]

    def build(self, payload) -> bytes:
        """The CDR bytes of the message whose variable segments are ``payload``."""
        mv = memoryview(payload)
        if len(mv) != self.payload_size:
            raise LayoutError(f"payload of {len(mv)} bytes, layout expects {self.payload_size}")
        parts = [self.consts[0]]
        for (a, b), const in zip(self.slices, self.consts[1:]):
            parts.append(mv[a:b])
            parts.append(const)
        return b"".join(parts)


class MessageLayout:
    """The producer's half: a message type's fixed layout as seen on one message (see the module doc).

    The payload is every numeric scalar of the message packed by one ``struct`` (in CDR order), then
    every numeric array's raw bytes (rclpy keeps ``sequence<double>`` as ``array.array('d')`` and
    ``double[N]`` as a float64 numpy array, so those bytes are already CDR's)."""

    def __init__(self, splicer: CdrSplicer, scalar_paths: list, scalar_codes: str, arrays: list,
                 const_checks: list):
        self.splicer = splicer
        paths = list(scalar_paths) + [a["path"] for a in arrays]
        self._n_scalars = len(scalar_paths)
        self._get = attrgetter(*paths) if len(paths) > 1 else (lambda m, g=attrgetter(*paths): (g(m),)) \
            if paths else (lambda m: ())
        self._struct = struct.Struct("<" + scalar_codes)
        # sequences must keep their length (fixed arrays cannot change it); bools have no buffer
        self._seq_counts = [(self._n_scalars + i, a["count"]) for i, a in enumerate(arrays) if a["sequence"]]
        self._slow = [(self._n_scalars + i, a["count"], a["code"]) for i, a in enumerate(arrays)
                      if a["code"] == "?"]
        check_paths = [p for p, _ in const_checks]
        self._check_get = attrgetter(*check_paths) if len(check_paths) > 1 else \
            (lambda m, g=attrgetter(*check_paths): (g(m),)) if check_paths else (lambda m: ())
        self._check_ref = tuple(v for _, v in const_checks)

    @classmethod
    def from_message(cls, msg, check: bool = True) -> "MessageLayout":
        """Lay out ``msg`` (an rclpy message). ``check``: compare the template with rclpy's own
        serialization (raises :class:`LayoutError` on any difference but padding)."""
        b = _Builder()
        b.walk(msg)
        template = bytes(b.buf)
        if check:
            from rclpy.serialization import serialize_message

            ref = bytearray(serialize_message(msg))
            for i in b.padding[:len(ref)]:    # Fast-CDR leaves padding bytes uninitialized: ours are 0
                ref[i] = 0
            if ref != template:
                raise LayoutError(f"{type(msg).__name__}: CDR template differs from rclpy's serialization "
                                  f"({len(template)} vs {len(ref)} bytes)")
        scalars = [v for v in b.var if v["kind"] == "scalar"]
        arrays = [v for v in b.var if v["kind"] == "array"]
        offsets, o = {}, 0
        for v in scalars + arrays:           # payload order
            offsets[v["start"]] = (o, o + v["end"] - v["start"])
            o += v["end"] - v["start"]
        consts, slices, pos = [], [], 0
        for v in b.var:                      # CDR order
            consts.append(template[pos:v["start"]])
            slices.append(offsets[v["start"]])
            pos = v["end"]
        consts.append(template[pos:])
        return cls(CdrSplicer(tuple(consts), tuple(slices), o), [v["path"] for v in scalars],
                   "".join(v["code"] for v in scalars), arrays, b.const_checks)

    def pack(self, msg) -> bytes | None:
        """The payload of ``msg`` (its variable segments' bytes), or None if its shape differs from the
        template (then take a new layout with :meth:`from_message`)."""
        if self._check_get(msg) != self._check_ref:   # str / list equality: identity first per element
            return None
        vals = self._get(msg)
        for i, n in self._seq_counts:
            if len(vals[i]) != n:
                return None
        ns = self._n_scalars
        if self._slow:
            vals = list(vals)
            for i, n, code in self._slow:
                vals[i] = struct.pack(f"<{n}{code}", *vals[i])
        return b"".join((self._struct.pack(*vals[:ns]), *vals[ns:]))


def message_type_name(msg) -> str:
    """``pkg/msg/Name`` of an rclpy message object."""
    return message_class_name(type(msg))


def message_class_name(cls) -> str:
    """``pkg/msg/Name`` of an rclpy message class."""
    return f"{cls.__module__.split('.')[0]}/msg/{cls.__name__}"
