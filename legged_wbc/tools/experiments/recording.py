"""A recorded run as a render replays it (:class:`Recording`): the ground-truth base pose and joint
positions, and the support, theta and disturbance of the overlays, read from a headless run's
``log.npz`` or from a rosbag2 (a bag's samples are decoded on first use).

=================  ==========================================  ==================================
what               headless run (``log.npz``)                  rosbag2
=================  ==========================================  ==================================
base pose          ``base_pos``, ``base_quat`` (xyzw), ``t``   ``/ground_truth/odom`` (header stamp)
joint positions    ``joint_pos`` (Pinocchio joint order)       ``/joint_states`` (mapped by name)
support (overlay)  ``support`` (estimated)                     ``/estimator/support`` (by leg name)
theta (labels)     ``theta``                                   ``/wbc/relative_pitch``
disturbance        ``disturbance``                             ``/disturbance``
controller         ``meta.controller``                         metadata ``custom_data`` ``controller=``
scenario           ``meta.scenario`` (the full scenario)       ``custom_data`` ``scenario=`` (by name)
=================  ==========================================  ==================================
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from legged_wbc.tools.analysis.run_data import CONTROLLER_NAMES

TOPIC_ODOM = "/ground_truth/odom"
TOPIC_JOINTS = "/joint_states"
TOPIC_SUPPORT = "/estimator/support"
TOPIC_THETA = "/wbc/relative_pitch"
TOPIC_DISTURBANCE = "/disturbance"


class RenderError(RuntimeError):
    """A run that cannot be rendered (missing data, bad option, no offscreen OpenGL)."""


def controller_display_name(mode: str | None) -> str:
    if not mode:
        return "controller ?"
    return CONTROLLER_NAMES.get(mode, mode)


# ============================================================================ recorded data
@dataclass
class Series:
    """Samples ``v[k]`` at increasing times ``t[k]`` [s], read back sample-and-hold."""

    t: np.ndarray
    v: np.ndarray

    def index(self, t: float) -> int:
        i = int(np.searchsorted(self.t, t + 1e-9, side="right")) - 1
        return min(max(i, 0), len(self.t) - 1)

    def at(self, t: float) -> np.ndarray:
        return self.v[self.index(t)]

    @property
    def dt(self) -> float:
        return float(np.median(np.diff(self.t))) if len(self.t) > 1 else 0.0


class LazySeries(Series):
    """A :class:`Series` whose samples are decoded on first use (a bag's serialized messages: a
    render needs a few thousand of the ~100k samples of a long run)."""

    def __init__(self, t: np.ndarray, raws: list, decode: Callable[[object], np.ndarray]):
        self.t = t
        self._raws = raws
        self._decode = decode
        self._cache: dict[int, np.ndarray] = {}

    @property
    def v(self) -> np.ndarray:  # the whole series, decoded (tests, small bags)
        return np.stack([self._get(i) for i in range(len(self.t))])

    def _get(self, i: int) -> np.ndarray:
        val = self._cache.get(i)
        if val is None:
            val = self._cache[i] = self._decode(self._raws[i])
        return val

    def at(self, t: float) -> np.ndarray:
        return self._get(self.index(t))


@dataclass
class Recording:
    """What a render needs from one run, in Pinocchio conventions (base pose ``[p, quat_xyzw]``)."""

    path: Path
    kind: str                          # "log" or "bag"
    robot: str                         # robot config name or YAML path
    controller: str | None
    scenario_name: str | None
    scenario: object | None            # legged_wbc.scenario.Scenario when known
    joint_names: list[str]
    leg_names: list[str]
    base: Series                       # (T, 7): position (3) + quaternion xyzw (4)
    joints: Series                     # (T, n), joint_names order
    support: Series | None = None      # (T, N) bool
    theta: Series | None = None        # (T, N) [rad]
    disturbed: Series | None = None    # (T, N) bool: disturbance torque on the leg
    notes: list[str] = field(default_factory=list)

    @property
    def t_start(self) -> float:
        return max(float(self.base.t[0]), float(self.joints.t[0]))

    @property
    def t_end(self) -> float:
        """End of the data: last sample + one sample period (the run's duration for a log)."""
        return min(float(self.base.t[-1]) + self.base.dt, float(self.joints.t[-1]) + self.joints.dt)

    @property
    def label(self) -> str:
        return controller_display_name(self.controller)

    def q_at(self, t: float) -> np.ndarray:
        return np.concatenate([self.base.at(t), self.joints.at(t)])


def _robot_model(robot: str):
    from legged_wbc.model import RobotModel

    return RobotModel(robot)


def _scenario_from_raw(raw) -> object | None:
    from legged_wbc.scenario import scenario_from_dict

    if not isinstance(raw, dict):
        return None
    try:
        return scenario_from_dict(raw)
    except Exception:  # noqa: BLE001 - the scenario only refines defaults (gait start, push window)
        return None


def _scenario_by_name(name: str | None) -> object | None:
    from legged_wbc.scenario import load_scenario

    if not name:
        return None
    try:
        return load_scenario(name)
    except Exception:  # noqa: BLE001
        return None


def load_recording(path: str | Path, robot: str | None = None) -> Recording:
    """A headless run directory / ``log.npz`` or a rosbag2 directory, as a :class:`Recording`."""
    p = Path(path)
    if not p.exists():
        raise RenderError(f"{p}: no such file or directory")
    if p.is_file() and p.suffix == ".npz":
        return _load_log(p, robot)
    if p.is_file() and p.suffix in (".mcap", ".db3") and (p.parent / "metadata.yaml").exists():
        return _load_bag(p.parent, robot)
    if p.is_dir() and (p / "log.npz").exists():
        return _load_log(p / "log.npz", robot)
    if p.is_dir() and (p / "metadata.yaml").exists():
        return _load_bag(p, robot)
    raise RenderError(f"{p}: neither a headless run directory (no log.npz) nor a rosbag2 directory "
                      "(no metadata.yaml)")


def _load_log(p: Path, robot: str | None) -> Recording:
    try:
        with np.load(p, allow_pickle=False) as z:
            series = {k: z[k] for k in z.files if k != "meta"}
            meta = json.loads(str(z["meta"])) if "meta" in z.files else {}
    except Exception as exc:  # noqa: BLE001 - corrupt / not a log
        raise RenderError(f"{p}: cannot read the run log ({exc})") from exc
    need = ["t", "base_pos", "base_quat", "joint_pos"]
    missing = [k for k in need if k not in series]
    if missing:
        raise RenderError(f"{p}: the run log lacks {', '.join(missing)} (needed to replay the ground-truth "
                          "base pose and joint positions; have: " + (", ".join(sorted(series)) or "nothing") + ")")
    t = np.asarray(series["t"], float)
    if t.size == 0:
        raise RenderError(f"{p}: the run log holds no samples (t is empty)")
    raw = meta.get("scenario")
    scenario = _scenario_from_raw(raw)
    robot = robot or (raw.get("robot") if isinstance(raw, dict) else None) or "hexapod"
    rm = _robot_model(robot)
    n, N = rm.n, rm.n_legs
    base = np.hstack([np.asarray(series["base_pos"], float), np.asarray(series["base_quat"], float)])
    qj = np.asarray(series["joint_pos"], float)
    if base.shape != (t.size, 7):
        raise RenderError(f"{p}: base_pos/base_quat have shapes {series['base_pos'].shape}/{series['base_quat'].shape}, "
                          f"expected ({t.size}, 3)/({t.size}, 4)")
    if qj.shape != (t.size, n):
        raise RenderError(f"{p}: joint_pos has shape {qj.shape}, expected ({t.size}, {n}) for robot {rm.cfg.name!r}")
    _check_finite(p, "base pose", base)
    _check_finite(p, "joint positions", qj)
    rec = Recording(path=p.parent if p.name == "log.npz" else p, kind="log", robot=robot,
                    controller=meta.get("controller"), scenario_name=raw.get("name") if isinstance(raw, dict) else None,
                    scenario=scenario, joint_names=list(rm.joint_names), leg_names=list(rm.cfg.leg_names),
                    base=Series(t, base), joints=Series(t, qj))
    if "support" in series and np.shape(series["support"]) == (t.size, N):
        rec.support = Series(t, np.asarray(series["support"], bool))
    if "theta" in series and np.shape(series["theta"]) == (t.size, N):
        rec.theta = Series(t, np.asarray(series["theta"], float))
    if "disturbance" in series and np.shape(series["disturbance"]) == (t.size, n):
        rec.disturbed = Series(t, _legs_disturbed(np.asarray(series["disturbance"], float), rm))
    return rec


def _check_finite(p, what, a):
    bad = ~np.all(np.isfinite(a), axis=1)
    if bad.any():
        raise RenderError(f"{p}: {what} not finite in {int(bad.sum())} sample(s) (first at index {int(np.argmax(bad))})")


def _legs_disturbed(tau: np.ndarray, rm) -> np.ndarray:
    return np.stack([np.any(np.abs(tau[:, idx]) > 1e-9, axis=1) for idx in rm.leg_joints], axis=1)


def _parse_custom_data(custom) -> dict:
    out = {}
    for k, v in (custom or {}).items():
        out[str(k)] = str(v)
        for item in str(v).split(";"):  # tolerate a single "controller=...;scenario=..." value
            if "=" in item:
                a, _, b = item.partition("=")
                out.setdefault(a.strip(), b.strip())
    return out


def _cdr_header_stamp_ns(raw) -> int:
    """``header.stamp`` of a serialized message whose first field is a ``std_msgs/Header``: after the
    4-byte CDR encapsulation come ``sec`` (int32) and ``nanosec`` (uint32)."""
    endian = "<" if raw[1] & 1 else ">"
    sec, nsec = struct.unpack_from(endian + "iI", raw, 4)
    return sec * 1_000_000_000 + nsec


def _bag_custom_data(d: Path) -> dict:
    """``custom_data`` of the bag's ``metadata.yaml`` (the recorder stores its ``key=value;...`` there)."""
    from legged_wbc.robot import ConfigError, load_yaml_file

    try:
        info = load_yaml_file(d / "metadata.yaml") or {}
    except ConfigError:  # rosbags has parsed it already; custom data is optional
        return {}
    if not isinstance(info, dict):
        return {}
    return _parse_custom_data((info.get("rosbag2_bagfile_information") or {}).get("custom_data"))


def _load_bag(d: Path, robot: str | None) -> Recording:
    raws, stamps, types, typestore, custom = _read_bag(d)
    robot = robot or custom.get("robot") or "hexapod"
    rm = _robot_model(robot)
    from legged_wbc.ros.io import JointOrder

    jorder, lorder = JointOrder(rm.joint_names), JointOrder(rm.cfg.leg_names)

    def series(tp):
        if not raws.get(tp):
            return None
        t = np.asarray(stamps[tp], dtype=np.int64) * 1e-9
        order = np.argsort(t, kind="stable")
        decode = _bag_decoder(d, tp, types.get(tp), typestore, jorder, lorder, rm)
        return LazySeries(t[order], [raws[tp][i] for i in order], decode)

    base, joints = series(TOPIC_ODOM), series(TOPIC_JOINTS)
    empty = [tp for tp, x in ((TOPIC_ODOM, base), (TOPIC_JOINTS, joints)) if x is None]
    if empty:
        raise RenderError(f"{d}: the bag has no messages on {' and '.join(empty)} (needed to replay the run)")
    base.at(base.t[0])          # decode one sample of each now: name mismatches are reported up front
    joints.at(joints.t[0])
    name = custom.get("scenario")
    rec = Recording(path=d, kind="bag", robot=robot, controller=custom.get("controller"), scenario_name=name,
                    scenario=_scenario_by_name(name), joint_names=list(rm.joint_names),
                    leg_names=list(rm.cfg.leg_names), base=base, joints=joints,
                    support=series(TOPIC_SUPPORT), theta=series(TOPIC_THETA), disturbed=series(TOPIC_DISTURBANCE))
    if rec.controller is None:
        rec.notes.append("bag metadata has no custom_data controller=...; controller unknown")
    return rec


def _read_bag(d: Path) -> tuple[dict, dict, dict, object, dict]:
    """``(raws, stamps, types, typestore, custom_data)`` of the topics a render replays: each topic's
    serialized messages and their header stamps [ns] (``/disturbance``: receive stamps), its message
    type, the bag's type store and its ``custom_data``."""
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import Stores, get_typestore

    try:
        reader = AnyReader([d], default_typestore=get_typestore(Stores.ROS2_KILTED))
        reader.open()
    except Exception as exc:  # noqa: BLE001
        raise RenderError(f"{d}: cannot open the rosbag2 ({type(exc).__name__}: {exc})") from exc
    try:
        topics = dict(reader.topics)
        missing = [tp for tp in (TOPIC_ODOM, TOPIC_JOINTS) if tp not in topics]
        if missing:
            raise RenderError(f"{d}: the bag has no {' and no '.join(missing)} (needed: base pose from "
                              f"{TOPIC_ODOM}, joint positions from {TOPIC_JOINTS}; the bag has: "
                              + (", ".join(sorted(topics)) or "no topics") + ")")
        custom = _bag_custom_data(d)
        wanted = [tp for tp in (TOPIC_ODOM, TOPIC_JOINTS, TOPIC_SUPPORT, TOPIC_THETA, TOPIC_DISTURBANCE) if tp in topics]
        raws: dict[str, list] = {tp: [] for tp in wanted}
        stamps: dict[str, list] = {tp: [] for tp in wanted}
        types: dict[str, str] = {}
        conns = [c for c in reader.connections if c.topic in wanted]
        for conn, recv_ns, raw in reader.messages(connections=conns):
            tp = conn.topic
            types[tp] = conn.msgtype
            raws[tp].append(raw)
            stamps[tp].append(_cdr_header_stamp_ns(raw) if tp != TOPIC_DISTURBANCE else int(recv_ns))
        typestore = reader.typestore        # holds the bag's own message definitions too
    finally:
        reader.close()
    return raws, stamps, types, typestore, custom


def _bag_decoder(d: Path, tp: str, msgtype: str | None, typestore, jorder, lorder, rm) -> Callable[[object], np.ndarray]:
    """The sample of one serialized message of topic ``tp``: base pose, joint positions (joint order),
    support flags or theta (leg order), disturbed legs."""
    def decode(raw):
        try:
            msg = typestore.deserialize_cdr(raw, msgtype)
        except Exception as exc:  # noqa: BLE001 - rosbags SerdeError and friends
            raise RenderError(f"{d}: cannot decode a {tp} message ({msgtype}): {exc}") from exc
        try:
            if tp == TOPIC_ODOM:
                pp, o = msg.pose.pose.position, msg.pose.pose.orientation
                val = np.array([pp.x, pp.y, pp.z, o.x, o.y, o.z, o.w])
            elif tp == TOPIC_JOINTS:
                pos = np.asarray(msg.position, float)
                if pos.size != len(msg.name):
                    raise ValueError(f"position has {pos.size} values for {len(msg.name)} names")
                val = pos[jorder.index(list(msg.name))]
            elif tp in (TOPIC_SUPPORT, TOPIC_THETA):
                val = np.asarray(msg.position, float)[lorder.index(list(msg.name))]
                if tp == TOPIC_SUPPORT:
                    val = val > 0.5
            else:  # /disturbance: Float64MultiArray in joint_states.name order
                data = np.asarray(msg.data, float)[int(msg.layout.data_offset):]
                if data.size != rm.n:
                    raise ValueError(f"{data.size} values for {rm.n} joints")
                val = _legs_disturbed(data[None, :], rm)[0]
        except ValueError as exc:
            raise RenderError(f"{d}: {tp} message: {exc}") from exc
        if tp in (TOPIC_ODOM, TOPIC_JOINTS) and not np.all(np.isfinite(val)):
            raise RenderError(f"{d}: {tp} message with non-finite values")
        return val

    return decode
