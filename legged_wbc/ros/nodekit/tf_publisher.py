"""``/robot_description``, ``/tf_static`` and ``/tf`` (REP 105): what RViz and Foxglove's 3D panel draw the
robot from.

Attached to the ``state_estimator`` node (:func:`attach`), which holds every tick's estimate and the joint
positions it used:

* ``/robot_description`` (``std_msgs/String``, transient local, published once): the URDF the stack runs
  (``urdf/<robot>.urdf``, the file Pinocchio and MuJoCo are built from); a robot described by its own URDF
  (``config/robots/``): that file as it is, ``package://`` meshes and all, for RViz and Foxglove to resolve.
* ``/tf_static`` (``tf2_msgs/TFMessage``, transient local, once): ``world -> odom`` (identity: the
  estimator starts at the simulation's initial pose, so its odometry frame coincides with the world at
  t = 0 and drifts from it afterwards, as odometry does) and the URDF's fixed joints, parent -> child.
* ``/tf`` (``tf2_msgs/TFMessage``) at ``tf_rate`` Hz (wall; a parameter of the estimator, 0 = off):
  ``odom -> base_link`` (the estimated base pose; ``/estimator/odom`` says ``frame_id: odom``) and, for
  every moving URDF joint, parent link -> child link at the joint positions of the same tick (what
  ``robot_state_publisher`` does), all stamped with that tick's sample stamp.

Off the control path: a job in the process's background thread (:mod:`legged_wbc.ros.nodekit.background`: no
executor wake-up; in a container the recorder takes the message in that thread) takes the newest tick's
output the node keeps anyway (``_last_out``: its odometry value, whose ``q`` views the tick's full
configuration ``EstimatedState.q``, fresh at every tick), skips the tick it already sent and builds nothing
while nobody subscribes. The frame
names are REP 105's (``world``, ``odom``, ``base_link``) and the URDF's link names.

The bridge adds ``world -> base_link_ground_truth`` (:func:`attach_ground_truth`, its own ``tf_rate``): the
simulation's true base pose, for comparing with the estimate in a viewer. MuJoCo's data is never read from
the background thread (a physics step may run meanwhile): the job raises a flag, the bridge's thread hands
over a copy of the base pose at its next ground-truth sample (every ``ground_truth_decimation`` steps: the
control ticks; :class:`GroundTruthTap`), and the job publishes it at its next run, stamped with that
sample's sim time: the stamp of a ``/ground_truth/odom`` and of an estimate. (Taken at any sample, a
lockstep bridge, which waits on the tick samples, handed it over almost always at the sample after one.)

``tf2_msgs`` has no wheel on PyPI; ``setup.sh`` builds its ``TFMessage`` (``tools/tf2_msgs``). Without it
the node logs one warning and publishes ``/robot_description`` only.
"""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import NamedTuple

import numpy as np

WORLD_FRAME, ODOM_FRAME = "world", "odom"
GROUND_TRUTH_SUFFIX = "_ground_truth"   # child frame of the true base pose: base_link_ground_truth
TOPIC_TF, TOPIC_TF_STATIC, TOPIC_DESCRIPTION = "/tf", "/tf_static", "/robot_description"


class UrdfJoint(NamedTuple):
    name: str
    type: str
    parent: str
    child: str
    xyz: np.ndarray          # (3,) origin translation in the parent link frame [m]
    quat: np.ndarray         # (4,) origin rotation, x y z w
    axis: np.ndarray         # (3,) joint axis in the joint (child) frame


def rpy_to_quat(r: float, p: float, y: float) -> np.ndarray:
    """URDF ``rpy`` (fixed-axis roll, pitch, yaw: R = Rz(y) Ry(p) Rx(r)) -> quaternion x y z w."""
    cr, sr, cp, sp, cy, sy = np.cos(r / 2), np.sin(r / 2), np.cos(p / 2), np.sin(p / 2), np.cos(y / 2), np.sin(y / 2)
    return np.array([sr * cp * cy - cr * sp * sy, cr * sp * cy + sr * cp * sy,
                     cr * cp * sy - sr * sp * cy, cr * cp * cy + sr * sp * sy])


def quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product of quaternions ``x y z w`` (row-wise for (n, 4) arrays)."""
    x1, y1, z1, w1 = np.moveaxis(np.asarray(a, dtype=float), -1, 0)
    x2, y2, z2, w2 = np.moveaxis(np.asarray(b, dtype=float), -1, 0)
    return np.stack([w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2, w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
                     w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2, w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2], axis=-1)


def quat_rotate(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Rotate ``v`` (n, 3) by the quaternions ``q`` (n, 4) x y z w."""
    u, w = q[..., :3], q[..., 3:4]
    t = 2.0 * np.cross(u, v)
    return v + w * t + np.cross(u, t)


def urdf_joints(urdf_text: str) -> list[UrdfJoint]:
    """The joints of a URDF in file order."""
    out = []
    for j in ET.fromstring(urdf_text).iter("joint"):
        o, a = j.find("origin"), j.find("axis")
        xyz = np.array([float(x) for x in (o.get("xyz", "0 0 0") if o is not None else "0 0 0").split()])
        rpy = [float(x) for x in (o.get("rpy", "0 0 0") if o is not None else "0 0 0").split()]
        axis = np.array([float(x) for x in (a.get("xyz", "1 0 0") if a is not None else "1 0 0").split()])
        norm = float(np.linalg.norm(axis))      # a fixed joint may give a zero axis (it is not used)
        out.append(UrdfJoint(j.get("name"), j.get("type"), j.find("parent").get("link"), j.find("child").get("link"),
                             xyz, rpy_to_quat(*rpy), axis / norm if norm > 0 else np.array([1.0, 0.0, 0.0])))
    return out


class LinkTransforms:
    """``robot_state_publisher``'s transforms without ROS: for every URDF joint, parent link -> child link
    (``origin`` then the joint's motion about / along its axis), from joint positions in ``joint_names``
    order (Pinocchio's). Fixed joints in :attr:`static`; revolute, continuous and prismatic ones from
    :meth:`moving`, vectorized over the joints."""

    def __init__(self, urdf_text: str, joint_names: list[str]):
        joints = urdf_joints(urdf_text)
        self.static = [(j.parent, j.child, j.xyz, j.quat) for j in joints if j.type == "fixed"]
        moving = [j for j in joints if j.type in ("revolute", "continuous", "prismatic")]
        unknown = [j.name for j in moving if j.name not in joint_names]
        if unknown:
            raise ValueError(f"URDF joints {unknown} are not among the model's joints")
        self.parents = [j.parent for j in moving]
        self.children = [j.child for j in moving]
        self.index = np.array([joint_names.index(j.name) for j in moving], dtype=int)
        self.prismatic = np.array([j.type == "prismatic" for j in moving])
        self.xyz = np.array([j.xyz for j in moving]).reshape(-1, 3)
        self.quat = np.array([j.quat for j in moving]).reshape(-1, 4)
        self.axis = np.array([j.axis for j in moving]).reshape(-1, 3)

    def moving(self, q_joints) -> tuple[np.ndarray, np.ndarray]:
        """``(xyz (m, 3), quat (m, 4))`` of the moving joints' parent -> child transforms."""
        a = np.asarray(q_joints, dtype=float)[self.index]
        rot = np.where(self.prismatic, 0.0, a)[:, None]
        motion = np.concatenate([self.axis * np.sin(rot / 2), np.cos(rot / 2)], axis=1)
        quat = quat_mul(self.quat, motion)
        slide = np.where(self.prismatic, a, 0.0)[:, None] * self.axis
        return self.xyz + quat_rotate(self.quat, slide), quat


class TfCdr:
    """The CDR bytes of a ``tf2_msgs/TFMessage`` whose frames never change: the template is serialized
    once (by ``serialize``, rclpy's), the stamps and the 7 numbers of each transform are written into it in
    place (one numpy assignment each) -- ~10 us instead of ~0.5 ms of filling and serializing message
    objects in Python, which would hold the GIL the control thread needs."""

    def __init__(self, msg, serialize):
        import struct

        n = len(msg.transforms)
        for i, t in enumerate(msg.transforms):          # sentinels, unique in the buffer
            t.header.stamp = type(t.header.stamp)(sec=0x3A000000 + (i + 1) * 0x10101,   # own objects (a
                                                  nanosec=0x3B000000 + (i + 1) * 0x10101)  # shared stamp...)
            _fill(t, 1e9 + 16.0 * i + np.arange(3), 1e9 + 16.0 * i + np.arange(3, 7))
        raw = bytearray(serialize(msg))

        def where(packed: bytes) -> int:
            at = raw.find(packed)
            if at < 0 or raw.find(packed, at + 1) >= 0:
                raise ValueError("TFMessage template: a sentinel is not unique")
            return at

        sec = np.array([where(struct.pack("<i", 0x3A000000 + (i + 1) * 0x10101)) for i in range(n)])
        nsec = np.array([where(struct.pack("<I", 0x3B000000 + (i + 1) * 0x10101)) for i in range(n)])
        val = np.array([[where(struct.pack("<d", 1e9 + 16.0 * i + k)) for k in range(7)] for i in range(n)])
        if np.any(sec % 4) or np.any(nsec % 4) or np.any((val - 4) % 8):
            raise ValueError("TFMessage template: unaligned fields")
        self.buf = raw
        self._u32 = np.frombuffer(self.buf, dtype="<u4", count=len(raw) // 4)
        self._f64 = np.frombuffer(self.buf, dtype="<f8", offset=4, count=(len(raw) - 4) // 8)
        self._sec, self._nsec, self._val = sec // 4, nsec // 4, ((val - 4) // 8).reshape(-1)

    def fill(self, stamp_ns: int, xyz: np.ndarray, quat: np.ndarray) -> bytes:
        """The message with every transform stamped ``stamp_ns`` at ``xyz`` (n, 3), ``quat`` (n, 4) x y z w."""
        self._u32[self._sec] = stamp_ns // 1_000_000_000
        self._u32[self._nsec] = stamp_ns % 1_000_000_000
        self._f64[self._val] = np.concatenate([xyz, quat], axis=1).reshape(-1)
        return bytes(self.buf)


# ------------------------------------------------------------------------------------ ROS side
def _transform(msg_cls, stamp, parent: str, child: str, xyz, quat):
    t = msg_cls()
    t.header.stamp = stamp
    t.header.frame_id = parent
    t.child_frame_id = child
    _fill(t, xyz, quat)
    return t


def _fill(t, xyz, quat) -> None:
    tr, r = t.transform.translation, t.transform.rotation
    tr.x, tr.y, tr.z = float(xyz[0]), float(xyz[1]), float(xyz[2])
    r.x, r.y, r.z, r.w = float(quat[0]), float(quat[1]), float(quat[2]), float(quat[3])


def attach(node, rate_hz: float):
    """``/robot_description``, ``/tf_static`` and ``/tf`` for the estimator ``node`` (see the module
    docstring); ``rate_hz`` 0: no ``/tf``. Returns the ``/tf`` job (:mod:`legged_wbc.ros.nodekit.background`) or None."""
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
    from std_msgs.msg import String

    from legged_wbc.ros import io as ros_io
    from legged_wbc.ros.transport import endpoints

    latched = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)
    urdf_text = node.rm.cfg.urdf_path().read_text()
    # published once, latched: plain DDS publishers (a late subscriber, the recorder too, gets the message).
    # A URDF robot's own file (its package:// meshes and Collada visuals, as RViz and Foxglove resolve them),
    # not the copy prepared for the simulation (absolute paths, visuals MuJoCo cannot read dropped)
    source = getattr(node.rm.cfg, "source_urdf", None)
    node.pub_description = node.create_publisher(String, TOPIC_DESCRIPTION, latched)
    node.pub_description.publish(String(data=Path(source).read_text() if source else urdf_text))
    try:
        from geometry_msgs.msg import TransformStamped
        from tf2_msgs.msg import TFMessage
    except ImportError as exc:
        node.get_logger().warning(f"no /tf, /tf_static: tf2_msgs is not installed ({exc}; setup.sh builds it)")
        return None
    links = LinkTransforms(urdf_text, list(node.rm.joint_names))
    stamp0 = ros_io.time_msg(0)
    static = [_transform(TransformStamped, stamp0, WORLD_FRAME, ODOM_FRAME, np.zeros(3), [0.0, 0.0, 0.0, 1.0])]
    static += [_transform(TransformStamped, stamp0, p, c, x, q) for p, c, x, q in links.static]
    node.pub_tf_static = node.create_publisher(TFMessage, TOPIC_TF_STATIC, latched)
    node.pub_tf_static.publish(TFMessage(transforms=static))
    if rate_hz <= 0:
        return None
    return _tf_job(node, links, rate_hz, TransformStamped, TFMessage)


def _tf_job(node, links: "LinkTransforms", rate_hz: float, TransformStamped, TFMessage):
    """The ``/tf`` job of :func:`attach`: at ``rate_hz``, the newest estimated base pose and the leg links
    moved by its joint positions, serialized into reused CDR buffers and published off the tick."""
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

    from legged_wbc.ros.nodekit import background
    from legged_wbc.ros import io as ros_io
    from legged_wbc.ros.transport import endpoints

    stamp0 = ros_io.time_msg(0)
    qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=100, reliability=ReliabilityPolicy.RELIABLE,
                     durability=DurabilityPolicy.VOLATILE)
    node.pub_tf = pub = endpoints.create_publisher(node, TFMessage, TOPIC_TF, qos)   # container: recorder in-process
    from rclpy.serialization import serialize_message

    nq = node.rm.nq
    base = node.rm.cfg.base_link
    frames = [(ODOM_FRAME, base)] + list(zip(links.parents, links.children))
    cdr_base = TfCdr(TFMessage(transforms=[_transform(TransformStamped, stamp0, *frames[0], np.zeros(3),
                                                      [0, 0, 0, 1.0])]), serialize_message)
    cdr_all = TfCdr(TFMessage(transforms=[_transform(TransformStamped, stamp0, p, c, np.zeros(3), [0, 0, 0, 1.0])
                                          for p, c in frames]), serialize_message)
    sent = {"stamp": None}

    def publish_tf():
        odom = None
        for p, value in list(getattr(node, "_last_out", None) or ()):
            if p is node.pub_odom:
                odom = value
        if odom is None or odom.stamp_ns == sent["stamp"] or not background.subscribed(pub):
            return                      # no tick yet, no new one since the last /tf, or nobody listens
        sent["stamp"] = odom.stamp_ns
        q7 = np.asarray(odom.q)
        full = q7.base if isinstance(q7.base, np.ndarray) else None
        if full is None or full.shape != (nq,) or not np.shares_memory(full, q7):
            background.publish(pub, cdr_base.fill(odom.stamp_ns, q7[None, :3], q7[None, 3:7]))
            return
        xyz, quat = links.moving(full[7:])
        raw = cdr_all.fill(odom.stamp_ns, np.vstack([q7[:3], xyz]), np.vstack([q7[3:7], quat]))
        time.sleep(0)                   # hand the GIL over (a control thread waiting gets it now, not in 0.5 ms)
        background.publish(pub, raw)

    return background.for_node(node, 1.0 / rate_hz, publish_tf, name="state_estimator /tf")


class GroundTruthTap:
    """The bridge's hand-over of its true base pose to the ``/tf`` job (see the module docstring):
    :attr:`wanted` is raised by the job, :meth:`offer` (the bridge's thread) copies MuJoCo's base
    ``qpos`` (7 numbers) and lowers it."""

    __slots__ = ("wanted", "sample")

    def __init__(self):
        self.wanted = False
        self.sample = None          # (stamp [ns], qpos[:7]: position, quaternion w x y z)

    def offer(self, stamp_ns: int, qpos) -> None:
        self.sample = (int(stamp_ns), np.array(qpos[:7], dtype=float))
        self.wanted = False


def attach_ground_truth(node, rate_hz: float) -> GroundTruthTap | None:
    """``/tf`` ``world -> <base_link>_ground_truth`` for the bridge ``node`` at ``rate_hz`` (0: none); the
    tap the node feeds (None without tf2_msgs or with rate 0)."""
    if rate_hz <= 0:
        return None
    try:
        from geometry_msgs.msg import TransformStamped
        from tf2_msgs.msg import TFMessage
    except ImportError:
        return None                 # said once by the estimator's attach
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
    from rclpy.serialization import serialize_message

    from legged_wbc.conventions import quat_wxyz_to_xyzw
    from legged_wbc.ros.nodekit import background
    from legged_wbc.ros import io as ros_io
    from legged_wbc.ros.transport import endpoints

    qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=100, reliability=ReliabilityPolicy.RELIABLE,
                     durability=DurabilityPolicy.VOLATILE)
    node.pub_tf_gt = pub = endpoints.create_publisher(node, TFMessage, TOPIC_TF, qos)
    child = node.robot.cfg.base_link + GROUND_TRUTH_SUFFIX
    cdr = TfCdr(TFMessage(transforms=[_transform(TransformStamped, ros_io.time_msg(0), WORLD_FRAME, child,
                                                 np.zeros(3), [0, 0, 0, 1.0])]), serialize_message)
    tap, sent = GroundTruthTap(), {"stamp": None}

    def publish_gt():
        sample = tap.sample
        if not background.subscribed(pub):
            return
        tap.wanted = True                                   # the next sample hands over a copy
        if sample is None or sample[0] == sent["stamp"]:
            return
        sent["stamp"] = sample[0]
        qpos = sample[1]
        background.publish(pub, cdr.fill(sample[0], qpos[None, :3], quat_wxyz_to_xyzw(qpos[3:7])[None, :]))

    background.for_node(node, 1.0 / rate_hz, publish_gt, name="mujoco_bridge /tf")
    return tap
