"""Type adaptation for the stack's topics (the idea of ROS 2's REP 2007): values in-process, messages on the wire.

A node publishes a *value* (a small named tuple of numpy arrays and an integer stamp) through an
adapted publisher. Subscribers in the same process (the container) get the value itself: no message
is filled for them and none is parsed. The ROS message is filled (:meth:`Adapter.to_ros`) only when
somebody needs one: a subscriber outside the process (DDS), or a subscriber that asked for messages.
The recorder takes the value too and writes its fixed-layout record (:meth:`Adapter.payload`), the
bytes :class:`~legged_wbc.ros.recording.cdr_layout.MessageLayout` would pack from the filled message; the
recorder checks that equality on each topic's first message and falls back to filling the message
if it ever fails. In the container it takes the record as its parts (:meth:`Adapter.payload_parts`)
and joins a whole sample's records at once. A message that arrives from DDS is turned into the same value
(:meth:`Adapter.to_value`), so a subscriber has one callback whatever the transport.

This module is the one place where the stack's values and its messages meet: units and frames are
the messages' (``sensor_msgs/JointState`` [rad, rad/s, N m]; ``Imu`` orientation base->world
``x, y, z, w``, gyro [rad/s] and specific force [m/s^2] in the base frame; ``Odometry`` pose in the
world frame, twist in the base frame).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

from legged_wbc.ros import io as ros_io

_STAMP = struct.Struct("<iI")
_NS = 1_000_000_000
_F64 = np.dtype(np.float64)
_contiguous = np.ascontiguousarray


def _f64(x) -> np.ndarray:
    return _contiguous(x, dtype=_F64)


_last_stamp = (None, b"")               # the stamp packed last: a sample's topics share theirs


def _stamp_record(t_ns: int) -> bytes:
    """``builtin_interfaces/Time`` of ``t_ns`` as the record packs it (``sec`` i32, ``nanosec`` u32)."""
    global _last_stamp
    last = _last_stamp                  # one tuple, replaced whole: safe from any thread
    if last[0] == t_ns:
        return last[1]
    data = _STAMP.pack(*divmod(int(t_ns), _NS))
    _last_stamp = (t_ns, data)
    return data


class JointSample(NamedTuple):
    """A ``JointState`` as a value: ``names`` in the publisher's order, arrays in that order."""
    stamp_ns: int
    names: list
    position: np.ndarray
    velocity: np.ndarray
    effort: np.ndarray


class ImuSample(NamedTuple):
    stamp_ns: int
    quat_xyzw: np.ndarray
    gyro: np.ndarray
    accel: np.ndarray


class OdomSample(NamedTuple):
    """``q = [p_world(3), quat_xyzw(4)]``, ``v = [v_base_in_base(3), w_base_in_base(3)]``."""
    stamp_ns: int
    q: np.ndarray
    v: np.ndarray


class Adapter:
    """Value <-> message of one publisher's topic. ``msg`` is the publisher's message, built once with
    the constant parts (names, frames, labels, covariances) and refilled by :meth:`to_ros`."""

    def __init__(self, msg):
        self.msg = msg
        self.msg_type = type(msg)

    def to_ros(self, value):
        """Fill and return the publisher's message."""
        raise NotImplementedError

    @staticmethod
    def to_value(msg):
        """The value of a message that came from elsewhere (DDS)."""
        raise NotImplementedError

    def payload(self, value) -> bytes:
        """The fixed-layout record of ``value`` (== ``MessageLayout.pack(self.to_ros(value))``)."""
        return b"".join(self.payload_parts(value)[1])

    def payload_parts(self, value) -> tuple[int, tuple]:
        """``(size, parts)``: :meth:`payload` not joined (bytes and contiguous float64 arrays, in order)
        and its size in bytes; the recorder joins a whole sample's records at once
        (:meth:`~legged_wbc.ros.recording.bag_process.ShmBagSink.write_values`)."""
        raise NotImplementedError


class JointStateAdapter(Adapter):
    """``sensor_msgs/JointState`` with the names of ``msg`` (see :func:`legged_wbc.ros.io.joint_state_msg`)."""

    def to_ros(self, v: JointSample):
        ros_io.fill_joint_state(self.msg, ros_io.time_msg(v.stamp_ns), v.position, v.velocity, v.effort)
        return self.msg

    @staticmethod
    def to_value(msg) -> JointSample:
        return JointSample(ros_io.stamp_ns(msg.header.stamp), msg.name, np.asarray(msg.position, dtype=float),
                           np.asarray(msg.velocity, dtype=float), np.asarray(msg.effort, dtype=float))

    def payload_parts(self, v: JointSample) -> tuple[int, tuple]:
        p, dp, e = _contiguous(v.position, dtype=_F64), _contiguous(v.velocity, dtype=_F64), \
            _contiguous(v.effort, dtype=_F64)
        return 8 + p.nbytes + dp.nbytes + e.nbytes, (_stamp_record(v.stamp_ns), p, dp, e)


class ImuAdapter(Adapter):
    """``sensor_msgs/Imu`` with the frame and covariances of ``msg``."""

    def __init__(self, msg):
        super().__init__(msg)
        self._cov = b"".join(_f64(c).tobytes() for c in (msg.orientation_covariance, msg.angular_velocity_covariance,
                                                         msg.linear_acceleration_covariance))

    def to_ros(self, v: ImuSample):
        ros_io.fill_imu(self.msg, ros_io.time_msg(v.stamp_ns), v.quat_xyzw, v.gyro, v.accel)
        return self.msg

    @staticmethod
    def to_value(msg) -> ImuSample:
        return ImuSample(ros_io.stamp_ns(msg.header.stamp), *ros_io.imu_arrays(msg))

    def payload_parts(self, v: ImuSample) -> tuple[int, tuple]:
        # the arrays' float64 bytes (struct's "d" of their elements one by one made the same, at ~3x the cost)
        q, w, a = _contiguous(v.quat_xyzw, dtype=_F64), _contiguous(v.gyro, dtype=_F64), \
            _contiguous(v.accel, dtype=_F64)
        return 8 + q.nbytes + w.nbytes + a.nbytes + len(self._cov), (_stamp_record(v.stamp_ns), q, w, a, self._cov)


class OdometryAdapter(Adapter):
    """``nav_msgs/Odometry`` with the frames and covariances of ``msg``."""

    def __init__(self, msg):
        super().__init__(msg)
        self._cov = _f64(msg.pose.covariance).tobytes() + _f64(msg.twist.covariance).tobytes()

    def to_ros(self, v: OdomSample):
        ros_io.fill_odometry(self.msg, ros_io.time_msg(v.stamp_ns), v.q, v.v)
        return self.msg

    @staticmethod
    def to_value(msg) -> OdomSample:
        return OdomSample(ros_io.stamp_ns(msg.header.stamp), *ros_io.odometry_arrays(msg))

    def payload_parts(self, v: OdomSample) -> tuple[int, tuple]:
        q, w = _contiguous(v.q[:7], dtype=_F64), _contiguous(v.v[:6], dtype=_F64)
        return 8 + q.nbytes + w.nbytes + len(self._cov), (_stamp_record(v.stamp_ns), q, w, self._cov)


class ArrayAdapter(Adapter):
    """``std_msgs/Float64MultiArray`` with the layout (label) of ``msg``; the value is the data."""

    _OFFSET = struct.Struct("<I")
    _offset = (None, b"")               # the layout's data_offset, packed

    def to_ros(self, data):
        self.msg.data = ros_io.dvec(data)
        return self.msg

    @staticmethod
    def to_value(msg) -> np.ndarray:
        return ros_io.array_data(msg)

    def payload_parts(self, data) -> tuple[int, tuple]:
        x = _contiguous(data, dtype=_F64)
        off = self._offset
        if off[0] != self.msg.layout.data_offset:
            off = self._offset = (self.msg.layout.data_offset, self._OFFSET.pack(self.msg.layout.data_offset))
        return 4 + x.nbytes, (off[1], x)


class ClockAdapter(Adapter):
    """``rosgraph_msgs/Clock``; the value is the time [ns]."""

    def to_ros(self, t_ns: int):
        self.msg.clock = ros_io.time_msg(t_ns)
        return self.msg

    @staticmethod
    def to_value(msg) -> int:
        return ros_io.stamp_ns(msg.clock)

    def payload_parts(self, t_ns: int) -> tuple[int, tuple]:
        return 8, (_stamp_record(t_ns),)


class AdaptedValue(NamedTuple):
    """What a recorder tap gets from an adapted publisher: the value and the publisher's adapter."""
    value: object
    adapter: object


class AdaptedPublisher:
    """An rclpy publisher with :meth:`publish_value` (outside a container: fill, then publish)."""

    def __init__(self, pub, adapter: Adapter):
        self.pub = pub
        self.adapter = adapter
        self.topic_name = pub.topic_name

    def publish_value(self, value) -> None:
        self.pub.publish(self.adapter.to_ros(value))

    def has_subscribers(self) -> bool:
        return self.pub.get_subscription_count() > 0

    def __getattr__(self, name):
        return getattr(self.pub, name)
