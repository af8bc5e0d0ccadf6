"""Builders, in-place refills and readers of the stack's messages (JointState, Imu, Odometry,
Float64MultiArray, the torque command): numpy in, message out and back."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from legged_wbc.ros.io.stamps import dvec, time_msg
from legged_wbc.ros.io.topics import COMMAND_LATENCY_LABEL, WORLD_FRAME, contacts_label


# ----------------------------------------------------------------------------- JointState
def joint_state_msg(t_ns: int, names: Sequence[str], position, velocity, effort):
    from sensor_msgs.msg import JointState

    m = JointState()
    m.header.stamp = time_msg(t_ns)
    m.name = list(names)
    m.position = dvec(position)
    m.velocity = dvec(velocity)
    m.effort = dvec(effort)
    return m


def fill_joint_state(m, stamp, position=None, velocity=None, effort=None) -> None:
    """Refill a JointState built by :func:`joint_state_msg` (same names) in place; ``stamp`` is a Time,
    a field given as None keeps its values. Publishers reuse their messages this way (rclpy
    serializes in ``publish``; in-process subscribers have parsed theirs by the next refill)."""
    m.header.stamp = stamp
    if position is not None:
        m.position = dvec(position)
    if velocity is not None:
        m.velocity = dvec(velocity)
    if effort is not None:
        m.effort = dvec(effort)


# ----------------------------------------------------------------------------- Imu
def imu_msg(t_ns: int, frame_id: str, quat_xyzw, gyro, accel,
            gyro_var: float = 0.0, accel_var: float = 0.0):
    """IMU sample. Orientation base->world as ROS ``x, y, z, w``; covariance diagonal from variances
    (0 = unknown, as ROS specifies); orientation covariance left 0 (unknown)."""
    from sensor_msgs.msg import Imu

    m = Imu()
    m.header.frame_id = frame_id
    fill_imu(m, time_msg(t_ns), quat_xyzw, gyro, accel)
    if gyro_var > 0:
        m.angular_velocity_covariance = dvec(np.diag([gyro_var] * 3).ravel())
    if accel_var > 0:
        m.linear_acceleration_covariance = dvec(np.diag([accel_var] * 3).ravel())
    return m


def fill_imu(m, stamp, quat_xyzw, gyro, accel) -> None:
    """Refill an Imu built by :func:`imu_msg` in place (frame and covariances kept)."""
    m.header.stamp = stamp
    q = m.orientation
    q.x, q.y, q.z, q.w = (float(v) for v in quat_xyzw)
    w = m.angular_velocity
    w.x, w.y, w.z = (float(v) for v in gyro)
    a = m.linear_acceleration
    a.x, a.y, a.z = (float(v) for v in accel)


def imu_arrays(msg) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(quat_xyzw, gyro, accel)`` of an Imu message (quaternion in ``x, y, z, w`` order)."""
    q, w, a = msg.orientation, msg.angular_velocity, msg.linear_acceleration
    return (np.array([q.x, q.y, q.z, q.w]), np.array([w.x, w.y, w.z]), np.array([a.x, a.y, a.z]))


# ----------------------------------------------------------------------------- Odometry
def odometry_msg(t_ns: int, q: np.ndarray, v: np.ndarray, child_frame_id: str,
                 frame_id: str = WORLD_FRAME):
    """Base odometry from Pinocchio ``q`` (``[p_world, quat_xyzw, ...]``) and ``v``
    (``[v_base_in_base, w_base_in_base, ...]``): pose in ``frame_id``, twist in ``child_frame_id``
    (the base frame), which is ROS's Odometry convention and Pinocchio's free-flyer convention."""
    from nav_msgs.msg import Odometry

    m = Odometry()
    m.header.frame_id = frame_id
    m.child_frame_id = child_frame_id
    fill_odometry(m, time_msg(t_ns), q, v)
    return m


def fill_odometry(m, stamp, q: np.ndarray, v: np.ndarray) -> None:
    """Refill an Odometry built by :func:`odometry_msg` in place (frames kept)."""
    m.header.stamp = stamp
    p, o = m.pose.pose.position, m.pose.pose.orientation
    p.x, p.y, p.z = (float(x) for x in q[:3])
    o.x, o.y, o.z, o.w = (float(x) for x in q[3:7])
    lin, ang = m.twist.twist.linear, m.twist.twist.angular
    lin.x, lin.y, lin.z = (float(x) for x in v[:3])
    ang.x, ang.y, ang.z = (float(x) for x in v[3:6])


def odometry_arrays(msg) -> tuple[np.ndarray, np.ndarray]:
    """``(q_base, v_base)``: ``[p_world(3), quat_xyzw(4)]`` and ``[v_base(3), w_base(3)]`` (base frame)."""
    p, o = msg.pose.pose.position, msg.pose.pose.orientation
    lin, ang = msg.twist.twist.linear, msg.twist.twist.angular
    return (np.array([p.x, p.y, p.z, o.x, o.y, o.z, o.w]),
            np.array([lin.x, lin.y, lin.z, ang.x, ang.y, ang.z]))


# ----------------------------------------------------------------------------- Float64MultiArray
def float64_array_msg(data, label: str):
    """A 1-D ``Float64MultiArray`` whose single dimension's label documents the content."""
    from std_msgs.msg import Float64MultiArray, MultiArrayDimension

    m = Float64MultiArray()
    m.data = dvec(data)
    n = len(m.data)
    m.layout.dim = [MultiArrayDimension(label=label, size=n, stride=n)]
    m.layout.data_offset = 0
    return m


def array_label(msg) -> str:
    return msg.layout.dim[0].label if msg.layout.dim else ""


def array_data(msg) -> np.ndarray:
    """The values of a ``Float64MultiArray`` (honouring ``data_offset``)."""
    return np.asarray(msg.data, dtype=float)[int(msg.layout.data_offset):]


def command_latency_msg(ticks, latency_us):
    """``/bridge/command_latency``: ``[tick, latency_us, ...]`` pairs (NaN: no command by the deadline)."""
    data = np.empty(2 * len(ticks))
    data[0::2] = ticks
    data[1::2] = latency_us
    return float64_array_msg(data, COMMAND_LATENCY_LABEL)


def command_latency_arrays(msg) -> tuple[np.ndarray, np.ndarray]:
    """``(ticks, latency_us)`` of a ``/bridge/command_latency`` message."""
    d = array_data(msg)
    return d[0::2].astype(np.int64), d[1::2]


def contacts_msg(flags, leg_names: Sequence[str]):
    return float64_array_msg(np.asarray(flags, dtype=float), contacts_label(leg_names))


def diagnostics_msg(values: dict):
    """Named scalars as a Float64MultiArray; label ``bridge[name1,name2,...]``."""
    return float64_array_msg(list(values.values()), "bridge[" + ",".join(values) + "]")


def diagnostics_dict(msg) -> dict:
    label = array_label(msg)
    names = label[label.index("[") + 1: label.rindex("]")].split(",") if "[" in label else []
    return dict(zip(names, array_data(msg).tolist()))


# ----------------------------------------------------------------------------- torque command
def torque_command_msg(t_ns: int, names: Sequence[str], tau):
    """``/joint_torque_cmd``: a ``sensor_msgs/JointState`` with ``name`` (the joints), ``effort`` [N m]
    and ``header.stamp`` = the sim time of the control tick it answers (``tick * 2 ms``); ``position``
    and ``velocity`` are NaN ("not commanded"). They are filled rather than empty because the
    ``rosbags`` reader mis-aligns an empty float64 sequence followed by data (Fast-CDR does not pad
    an empty sequence; rosbags 0.11 does) and could not read the bags. The receiver pairs it with its tick by the stamp
    (:class:`TorqueCommandDecoder`)."""
    from sensor_msgs.msg import JointState

    m = JointState()
    m.header.stamp = time_msg(t_ns)
    m.name = list(names)
    m.effort = dvec(tau)
    m.position = m.velocity = dvec(np.full(len(m.name), np.nan))
    return m


def fill_torque_command(m, stamp, tau) -> None:
    """Refill a command built by :func:`torque_command_msg` (same joints) for another tick."""
    fill_joint_state(m, stamp, effort=tau)
