"""Fixed, versioned encodings of what one process of the stack tells another: nothing is unpickled.

Two kinds of structured messages cross a process boundary besides the numbers themselves: the host
link's control frames (HELLO / SUBS / RECORD, :mod:`legged_wbc.ros.transport.host_link`) and the descriptive
records of a recorder ring (a topic's description, a second ring to drain,
:mod:`legged_wbc.ros.recording.bag_process`). Each is one *document*: a version byte, a little-endian ``uint32``
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
