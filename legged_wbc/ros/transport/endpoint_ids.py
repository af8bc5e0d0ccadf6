"""The GID of an rclpy publisher of this process (rclpy 9 has no call for it).

A message's ``MessageInfo`` names its publisher by GID (``publisher_gid``); the intra-process bus drops the
DDS copies of its own publications by comparing that GID with its publishers' (a DDS subscription on a
topic the process also publishes receives those too: :mod:`legged_wbc.ros.transport.intra_process`).
rclpy keeps the rcl handle's address (``handle.pointer``); rcl hands out the rmw handle, and the rmw
implementation the process loaded its GID (``rmw_get_gid_for_publisher``; the rmw API has no such call
for a subscription).
"""

from __future__ import annotations

import ctypes
import threading

_GID_BYTES = 24                      # >= RMW_GID_STORAGE_SIZE (16 since Jazzy, 24 before)
_lock = threading.Lock()
_api = None                          # (rcl_publisher_get_rmw_handle, rmw_get_gid_for_publisher), or False


class _Gid(ctypes.Structure):
    _fields_ = [("implementation_identifier", ctypes.c_char_p), ("data", ctypes.c_uint8 * _GID_BYTES)]


def _loaded(prefix: str) -> list[str]:
    """Paths of the shared libraries mapped into this process whose file name starts with ``prefix``."""
    paths = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rsplit(None, 1)[-1]
                if path.startswith("/") and path.rsplit("/", 1)[-1].startswith(prefix) and path not in paths:
                    paths.append(path)
    except OSError:
        pass
    return paths


def _load():
    global _api
    with _lock:
        if _api is not None:
            return _api
        _api = False
        rcl = next((ctypes.CDLL(p) for p in _loaded("librcl.so")), None)
        rmw = None
        for path in _loaded("librmw_implementation.so") + _loaded("librmw_"):
            lib = ctypes.CDLL(path)
            if hasattr(lib, "rmw_get_gid_for_publisher"):
                rmw = lib
                break
        if rcl is None or rmw is None:
            return _api
        handle_fn, gid_fn = rcl.rcl_publisher_get_rmw_handle, rmw.rmw_get_gid_for_publisher
        handle_fn.restype, handle_fn.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
        gid_fn.restype, gid_fn.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(_Gid)]
        _api = (handle_fn, gid_fn)
        return _api


def publisher_gid(pub, size: int = 16) -> bytes | None:
    """The first ``size`` bytes of the GID of ``pub`` (an rclpy ``Publisher``), as a ``MessageInfo``'s
    ``publisher_gid["data"]`` gives them; None if the rmw cannot tell."""
    api = _load()
    if not api:
        return None
    handle_fn, gid_fn = api
    try:
        with pub.handle:
            rmw_handle = handle_fn(pub.handle.pointer)
            gid = _Gid()
            if not rmw_handle or gid_fn(rmw_handle, ctypes.byref(gid)) != 0:
                return None
    except Exception:
        return None
    return bytes(gid.data[:size])
