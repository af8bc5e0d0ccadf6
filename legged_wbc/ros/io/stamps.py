"""Time stamps as integer nanoseconds of sim time, control ticks of stamps, float64 field arrays."""

from __future__ import annotations

import array

import numpy as np

from legged_wbc.conventions import CONTROL_PERIOD_NS


# ----------------------------------------------------------------------------- time
def time_msg(t_ns: int):
    """``builtin_interfaces/Time`` of an integer nanosecond time."""
    from builtin_interfaces.msg import Time

    t_ns = int(t_ns)
    return Time(sec=t_ns // 1_000_000_000, nanosec=t_ns % 1_000_000_000)


def stamp_ns(stamp) -> int:
    """Integer nanoseconds of a ``builtin_interfaces/Time`` (or of a message with a header)."""
    if hasattr(stamp, "header"):
        stamp = stamp.header.stamp
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def tick_from_stamp(stamp, control_period_ns: int = CONTROL_PERIOD_NS) -> int | None:
    """Control tick of a sensor sample stamped exactly on a tick, else ``None`` (an in-between sample)."""
    ns = stamp if isinstance(stamp, int) else stamp_ns(stamp)
    k, rem = divmod(ns, control_period_ns)
    return k if rem == 0 else None


def clock_msg(t_ns: int):
    from rosgraph_msgs.msg import Clock

    return Clock(clock=time_msg(t_ns))


def dvec(x) -> array.array:
    """A float64 ``array.array`` (what rclpy stores for ``float64[]`` fields; assigning one is fast)."""
    return array.array("d", np.ascontiguousarray(x, dtype=np.float64).tobytes())
