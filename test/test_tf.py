"""The robot in 3D from its bag: ``/robot_description``, ``/tf_static``, ``/tf`` (REP 105).

What must hold: the link transforms (robot_state_publisher's job, :class:`LinkTransforms`) composed from
the base equal Pinocchio's forward kinematics of the same URDF at any joint positions (1e-9 m / rad);
through the container, the recorded TF tree is complete (one tree rooted at ``world``: ``world -> odom``
static, ``odom -> base_link``, every URDF link exactly once) and at every recorded ``/tf`` state equals
Pinocchio's forward kinematics at the ``/joint_states`` and ``/estimator/odom`` of the same stamp (1e-9);
``/robot_description`` is the URDF the stack runs (transient local); ``/diagnostics`` holds an OK status of
each node; the estimator's odometry says ``frame_id: odom``.
"""

from __future__ import annotations

from domains import domain_id
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from legged_wbc.ros.nodekit.tf_publisher import LinkTransforms, quat_mul, quat_rotate

ROOT = Path(__file__).resolve().parents[1]
TOL = 1e-9


def _pin_model(urdf_text: str):
    import pinocchio as pin

    return pin.buildModelFromXML(urdf_text, pin.JointModelFreeFlyer())


def _compose(edges: dict, frame: str, root: str):
    """``(xyz, quat)`` of ``frame`` in ``root`` by composing ``edges`` (child -> (parent, xyz, quat))."""
    xyz, quat = np.zeros(3), np.array([0.0, 0.0, 0.0, 1.0])
    while frame != root:
        parent, x, q = edges[frame]
        xyz, quat = x + quat_rotate(q, xyz), quat_mul(q, quat)
        frame = parent
    return xyz, quat


def _same_rotation(qa, qb) -> float:
    """Largest entry of the difference of the two rotation matrices."""
    import pinocchio as pin

    Ra = pin.Quaternion(qa[3], *qa[:3]).toRotationMatrix()
    Rb = pin.Quaternion(qb[3], *qb[:3]).toRotationMatrix()
    return float(np.abs(Ra - Rb).max())


def _check_against_pinocchio(model, urdf_links, edges: dict, q_pin: np.ndarray, root: str) -> float:
    import pinocchio as pin

    data = model.createData()
    pin.framesForwardKinematics(model, data, q_pin)
    worst = 0.0
    for link in urdf_links:
        M = data.oMf[model.getFrameId(link, pin.BODY)]
        xyz, quat = _compose(edges, link, root)
        worst = max(worst, float(np.abs(xyz - M.translation).max()),
                    _same_rotation(quat, pin.Quaternion(M.rotation).coeffs()))
    return worst


@pytest.mark.parametrize("robot", ["hexapod", "quadruped"])
def test_link_transforms_equal_pinocchio_forward_kinematics(robot):
    import xml.etree.ElementTree as ET

    from legged_wbc.model import RobotModel

    rm = RobotModel(robot)
    urdf = rm.cfg.urdf_path().read_text()
    model = _pin_model(urdf)
    names = [model.names[j] for j in range(2, model.njoints)]
    lt = LinkTransforms(urdf, names)
    links = [link.get("name") for link in ET.fromstring(urdf).iter("link")]
    assert set(lt.children) | {rm.cfg.base_link} == set(links)
    rng = np.random.default_rng(1)
    for _ in range(20):
        q = np.r_[rng.normal(size=3), rng.normal(size=4), rng.uniform(-2.5, 2.5, len(names))]
        q[3:7] /= np.linalg.norm(q[3:7])
        xyz, quat = lt.moving(q[7:])
        edges = {c: (p, x, r) for p, c, x, r in zip(lt.parents, lt.children, xyz, quat)}
        edges[rm.cfg.base_link] = ("odom", q[:3], q[3:7])
        assert _check_against_pinocchio(model, links, edges, q, "odom") < TOL


@pytest.fixture(scope="module")
def tf_bag(tmp_path_factory):
    import os

    bag = tmp_path_factory.mktemp("tf") / "bag"
    env = dict(os.environ, ROS_DOMAIN_ID=str(domain_id()), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    p = subprocess.run([str(Path(sys.executable).parent / "legged-wbc"), "launch", "walking_sim", "controller:=cbf",
                        "scenario:=nominal", "duration:=4", f"record:={bag}"], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    return bag


def _read(bag: Path, topics) -> dict:
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import Stores, get_typestore

    out: dict = {t: [] for t in topics}
    with AnyReader([bag], default_typestore=get_typestore(Stores.ROS2_KILTED)) as r:
        conns = [c for c in r.connections if c.topic in topics]
        out["__conns__"] = {c.topic: c for c in conns}
        for c, t, raw in r.messages(connections=conns):
            out[c.topic].append(r.deserialize(raw, c.msgtype))
    return out


def _ns(stamp) -> int:
    return stamp.sec * 1_000_000_000 + stamp.nanosec


def _xyz_quat(tr):
    t, r = tr.transform.translation, tr.transform.rotation
    return np.array([t.x, t.y, t.z]), np.array([r.x, r.y, r.z, r.w])


@pytest.mark.ros
def test_recorded_tf_tree_is_complete_and_equals_forward_kinematics(tf_bag):
    import xml.etree.ElementTree as ET

    from legged_wbc.model import RobotModel

    msgs = _read(tf_bag, ["/robot_description", "/tf_static", "/tf", "/joint_states", "/estimator/odom",
                          "/diagnostics", "/ground_truth/odom"])
    conns = msgs["__conns__"]
    rm = RobotModel("hexapod")
    (desc,) = msgs["/robot_description"]
    assert desc.data == rm.cfg.urdf_path().read_text()
    for topic in ("/robot_description", "/tf_static"):
        assert conns[topic].ext.offered_qos_profiles[0].durability.name == "TRANSIENT_LOCAL", topic
    urdf_links = [link.get("name") for link in ET.fromstring(desc.data).iter("link")]
    model = _pin_model(desc.data)
    pin_names = [model.names[j] for j in range(2, model.njoints)]

    static = {}
    for m in msgs["/tf_static"]:
        for tr in m.transforms:
            static[tr.child_frame_id] = (tr.header.frame_id, *_xyz_quat(tr))
    assert static["odom"][0] == "world"
    js = {_ns(m.header.stamp): m for m in msgs["/joint_states"]}
    odom = {_ns(m.header.stamp): m for m in msgs["/estimator/odom"]}
    assert all(m.header.frame_id == "odom" and m.child_frame_id == "base_link" for m in odom.values())
    assert len(msgs["/tf"]) >= 10
    checked = 0
    # the bridge's world -> base_link_ground_truth: the simulation's true base pose of that sample
    gt = [m for m in msgs["/tf"] if [tr.child_frame_id for tr in m.transforms] == ["base_link_ground_truth"]]
    truth = {_ns(m.header.stamp): m for m in msgs.get("/ground_truth/odom", [])}
    assert gt and truth
    for m in gt:
        tr = m.transforms[0]
        assert tr.header.frame_id == "world"
        o = truth[_ns(tr.header.stamp)]  # taken on a ground-truth sample: that stamp's /ground_truth/odom
        p, r = o.pose.pose.position, o.pose.pose.orientation
        assert np.allclose(_xyz_quat(tr)[0], [p.x, p.y, p.z], atol=1e-12, rtol=0)
        assert np.allclose(_xyz_quat(tr)[1], [r.x, r.y, r.z, r.w], atol=1e-12, rtol=0)
        checked += 1
    assert checked >= 1
    checked = 0
    msgs["/tf"] = [m for m in msgs["/tf"] if m not in gt]
    for m in msgs["/tf"]:
        stamps = {_ns(tr.header.stamp) for tr in m.transforms}
        assert len(stamps) == 1
        stamp = stamps.pop()
        edges = dict(static)
        for tr in m.transforms:
            assert tr.child_frame_id not in edges, f"{tr.child_frame_id} has two parents"
            edges[tr.child_frame_id] = (tr.header.frame_id, *_xyz_quat(tr))
        # complete: every URDF link once, one tree rooted at world
        assert set(edges) == set(urdf_links) | {"odom"}, sorted(set(urdf_links) ^ set(edges))
        for child in edges:
            frame, seen = child, set()
            while frame != "world":
                assert frame not in seen and frame in edges, f"{child}: no path to world"
                seen.add(frame)
                frame = edges[frame][0]
        # equal to Pinocchio's forward kinematics at the recorded state of the same stamp
        j, o = js[stamp], odom[stamp]
        pos = dict(zip(j.name, j.position))
        p, r = o.pose.pose.position, o.pose.pose.orientation
        q = np.r_[[p.x, p.y, p.z, r.x, r.y, r.z, r.w], [pos[n] for n in pin_names]]
        assert _check_against_pinocchio(model, urdf_links, edges, q, "world") < TOL, stamp
        checked += 1
    assert checked == len(msgs["/tf"])
    # /diagnostics: each node's status, OK on this nominal lockstep run
    seen = {}
    for m in msgs["/diagnostics"]:
        for s in m.status:
            seen[s.name] = s
    assert set(seen) == {"mujoco_bridge: command timing", "state_estimator: inputs and gating", "wbc_controller: QP"}
    assert all(s.level == 0 and s.hardware_id == "hexapod" for s in seen.values()), seen


@pytest.mark.parametrize("robot", ["hexapod", "quadruped"])
def test_tf_cdr_equals_what_rclpy_serializes(robot):
    """The in-place CDR of /tf decodes (rclpy) to the message filled field by field, on every field."""
    from geometry_msgs.msg import TransformStamped
    from rclpy.serialization import deserialize_message, serialize_message
    from tf2_msgs.msg import TFMessage

    from legged_wbc.model import RobotModel
    from legged_wbc.ros.io import time_msg
    from legged_wbc.ros.nodekit.tf_publisher import TfCdr, _transform

    rm = RobotModel(robot)
    lt = LinkTransforms(rm.cfg.urdf_path().read_text(), list(rm.joint_names))
    frames = [("odom", rm.cfg.base_link)] + list(zip(lt.parents, lt.children))
    stamp0 = time_msg(0)                 # one stamp object shared by every transform, as the node does
    cdr = TfCdr(TFMessage(transforms=[_transform(TransformStamped, stamp0, p, c, np.zeros(3), [0, 0, 0, 1.0])
                                      for p, c in frames]), serialize_message)
    rng = np.random.default_rng(3)
    for stamp in (0, 1_999_999_999, 52 * 10**9 + 123_456_789, 2**31 * 10**9 - 1):
        xyz, quat = rng.normal(size=(len(frames), 3)), rng.normal(size=(len(frames), 4))
        got = deserialize_message(cdr.fill(stamp, xyz, quat), TFMessage)
        want = TFMessage(transforms=[_transform(TransformStamped, time_msg(stamp), p, c, x, q)
                                     for (p, c), x, q in zip(frames, xyz, quat)])
        assert got == want
