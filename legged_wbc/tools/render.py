"""Offscreen replay of a recorded run: MP4 video, gait-cycle strip and side-by-side snapshots.

A *run* is either a headless run directory (``log.npz`` from :func:`legged_wbc.closed_loop.save_run`)
or a rosbag2 directory (MCAP or sqlite3) recorded by the ROS stack. Only recorded ground truth is
replayed, nothing is simulated: for every frame the base pose and the joint positions of the
sample at (or last before) the frame time are written into ``qpos`` through
:class:`~legged_wbc.conventions.StateConverter`, ``mj_forward`` places the bodies and
``mujoco.Renderer`` draws the scene offscreen.

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

Offscreen OpenGL: EGL (Mesa's software rasterizer when there is no GPU) unless ``MUJOCO_GL=osmesa``
is set. The backend is chosen here, for the renderer this module creates, whatever ``mujoco`` was
imported with; nothing is changed in the environment of other processes.
"""

from __future__ import annotations

import json
import math
import os
import struct
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

CONTROLLER_NAMES = {"none": "WBC-0", "damping": "WBC-D", "cbf": "WBC-CBF"}
SUPPORT_RGB = (46, 170, 80)
SWING_RGB = (240, 150, 40)
UNKNOWN_RGB = (150, 150, 150)
DISTURB_RGB = (220, 40, 40)

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
    import yaml

    try:
        info = yaml.safe_load((d / "metadata.yaml").read_text()) or {}
    except Exception:  # noqa: BLE001 - rosbags has parsed it already; custom data is optional
        return {}
    return _parse_custom_data((info.get("rosbag2_bagfile_information") or {}).get("custom_data"))


def _load_bag(d: Path, robot: str | None) -> Recording:
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
        robot = robot or custom.get("robot") or "hexapod"
        rm = _robot_model(robot)
        from legged_wbc.ros.io import JointOrder

        jorder, lorder = JointOrder(rm.joint_names), JointOrder(rm.cfg.leg_names)
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

    def decoder(tp: str):
        msgtype = types.get(tp)

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

    def series(tp):
        if not raws.get(tp):
            return None
        t = np.asarray(stamps[tp], dtype=np.int64) * 1e-9
        order = np.argsort(t, kind="stable")
        return LazySeries(t[order], [raws[tp][i] for i in order], decoder(tp))

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


# ============================================================================ offscreen OpenGL
_GL_LOCK = threading.Lock()


def gl_backend() -> str:
    """``egl`` (default) or ``osmesa`` (when ``MUJOCO_GL=osmesa``)."""
    want = os.environ.get("MUJOCO_GL", "").strip().lower()
    return want if want in ("egl", "osmesa") else "egl"


def _restore_env(name: str, value: str | None) -> None:
    """Put the environment variable ``name`` back to ``value`` (None: not set)."""
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _gl_context_class(backend: str):
    """MuJoCo's GLContext class of an offscreen backend, imported without touching other processes."""
    plat = os.environ.get("PYOPENGL_PLATFORM")
    if "OpenGL" in sys.modules and plat and plat.lower() != backend:
        raise RenderError(f"offscreen rendering needs PyOpenGL on the {backend!r} platform, but it was already "
                          f"imported for {plat!r} in this process; run `legged-wbc render` in its own process")
    hint = ("install the EGL/Mesa libraries (Debian: libegl1 libegl-mesa0 libgl1-mesa-dri; ./setup.sh does this "
            "when apt-get is available) or set MUJOCO_GL=osmesa with libosmesa6 installed"
            if backend == "egl" else
            "install libosmesa6 (Debian) or unset MUJOCO_GL to use EGL")
    try:
        if backend == "egl":
            from mujoco.egl import GLContext
        else:
            from mujoco.osmesa import GLContext
    except Exception as exc:  # noqa: BLE001 - ImportError, OSError (missing libEGL), AttributeError
        raise RenderError(f"offscreen OpenGL ({backend}) is not available: {type(exc).__name__}: {exc}; {hint}") from exc
    finally:
        # mujoco.egl / mujoco.osmesa set PYOPENGL_PLATFORM for PyOpenGL's import; it is fixed once
        # PyOpenGL is loaded, so the variable is put back to keep child processes unaffected.
        _restore_env("PYOPENGL_PLATFORM", plat)
    return GLContext, hint


def _import_mujoco():
    """``import mujoco`` without its import-time GL backend selection (which fails hard on a broken
    ``MUJOCO_GL``): the offscreen context is chosen by :func:`_offscreen_gl` instead."""
    if "mujoco" in sys.modules:
        return sys.modules["mujoco"]
    prev = os.environ.get("MUJOCO_GL")
    os.environ["MUJOCO_GL"] = "disable"
    try:
        import mujoco
    except Exception as exc:  # noqa: BLE001
        raise RenderError(f"cannot import mujoco: {type(exc).__name__}: {exc}") from exc
    finally:
        _restore_env("MUJOCO_GL", prev)
    return mujoco


@contextmanager
def _offscreen_gl():
    """Make ``mujoco.Renderer`` create an offscreen (EGL/OSMesa) context while this is active."""
    backend = gl_backend()
    cls, hint = _gl_context_class(backend)
    try:
        from mujoco.rendering.classic import gl_context as glc
    except ImportError:  # older layout of the bindings
        from mujoco import gl_context as glc
    with _GL_LOCK:
        had, old = hasattr(glc, "GLContext"), getattr(glc, "GLContext", None)
        glc.GLContext = cls
        try:
            yield backend, hint
        finally:
            if had:
                glc.GLContext = old
            else:
                del glc.GLContext


# ============================================================================ scene
def _terrain_of(rec):
    """The terrain the recorded run walked on (its scenario's; flat when unknown)."""
    return getattr(rec.scenario, "terrain", None)


def build_render_model(cfg, width: int, height: int, shadows: bool = True, terrain=None):
    """The simulation scene (same URDF, same joints, the run's ``terrain``) dressed for pictures:
    checker floor, sky, offscreen buffer of at least ``width x height``, a smaller shadow map (software GL)."""
    import mujoco

    from legged_wbc.mujoco_model import build_spec

    spec = build_spec(cfg, terrain=terrain)
    spec.add_texture(name="lwbc_grid", type=mujoco.mjtTexture.mjTEXTURE_2D, builtin=mujoco.mjtBuiltin.mjBUILTIN_CHECKER,
                     rgb1=[0.72, 0.74, 0.77], rgb2=[0.58, 0.61, 0.65], mark=mujoco.mjtMark.mjMARK_EDGE,
                     markrgb=[0.5, 0.52, 0.56], width=512, height=512)
    mat = spec.add_material(name="lwbc_grid", texrepeat=[2, 2], texuniform=True, reflectance=0.0)
    mat.textures[mujoco.mjtTextureRole.mjTEXROLE_RGB] = "lwbc_grid"
    spec.add_texture(name="lwbc_sky", type=mujoco.mjtTexture.mjTEXTURE_SKYBOX, builtin=mujoco.mjtBuiltin.mjBUILTIN_GRADIENT,
                     rgb1=[0.55, 0.7, 0.88], rgb2=[0.97, 0.98, 1.0], width=64, height=384)
    for light in spec.lights:   # the scene's spot light stays above the robot wherever it walks
        if light.name == "sun":
            light.mode = mujoco.mjtCamLight.mjCAMLIGHT_TRACKCOM
    floor = spec.geom("floor")
    floor.material = "lwbc_grid"
    floor.rgba = [1, 1, 1, 1]
    floor.group = 2          # robot geoms are in groups 0/1: hiding those leaves an empty floor
    vis = spec.visual
    vis.global_.offwidth = max(int(width), 64)
    vis.global_.offheight = max(int(height), 64)
    vis.quality.shadowsize = 1024 if shadows else 0
    vis.headlight.ambient = [0.3, 0.3, 0.3]
    vis.headlight.diffuse = [0.35, 0.35, 0.35]
    return spec.compile()


class SceneRenderer:
    """Offscreen frames of the robot at given Pinocchio configurations ``q = [p, quat_xyzw, q_j]``.

    ``camera``: ``track`` (the model's side camera following the base COM), ``iso`` (a 3/4 view
    following the base) or the name of another camera of the model."""

    def __init__(self, robot: str = "hexapod", width: int = 640, height: int = 480, camera: str = "track",
                 shadows: bool = True, terrain=None):
        mujoco = _import_mujoco()

        from legged_wbc.conventions import StateConverter
        from legged_wbc.mujoco_model import actuator_joint_names, hinge_joint_names

        self.rm = _robot_model(robot)
        self.width, self.height = int(width), int(height)
        self.m = build_render_model(self.rm.cfg, self.width, self.height, shadows, terrain)
        self.d = mujoco.MjData(self.m)
        self.conv = StateConverter(self.rm.joint_names, hinge_joint_names(self.m), actuator_joint_names(self.m))
        self._mj = mujoco
        self.camera = self._camera(camera)
        with _offscreen_gl() as (backend, hint):
            self.backend = backend
            try:
                self.renderer = mujoco.Renderer(self.m, self.height, self.width)
            except Exception as exc:  # noqa: BLE001 - context creation failures come as various types
                raise RenderError(f"offscreen OpenGL ({backend}) failed: {type(exc).__name__}: {exc}; {hint}") from exc
        self.renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = bool(shadows)
        self._opt_robot = mujoco.MjvOption()
        self._opt_empty = mujoco.MjvOption()
        self._opt_empty.geomgroup[0] = 0
        self._opt_empty.geomgroup[1] = 0

    def _camera(self, camera: str):
        mj = self._mj
        if camera == "iso":
            cam = mj.MjvCamera()
            cam.type = mj.mjtCamera.mjCAMERA_TRACKING
            cam.trackbodyid = mj.mj_name2id(self.m, mj.mjtObj.mjOBJ_BODY, self.rm.cfg.base_link)
            cam.distance, cam.azimuth, cam.elevation = 3.2, 135.0, -22.0
            return cam
        if mj.mj_name2id(self.m, mj.mjtObj.mjOBJ_CAMERA, camera) < 0:
            names = [mj.mj_id2name(self.m, mj.mjtObj.mjOBJ_CAMERA, i) for i in range(self.m.ncam)]
            raise RenderError(f"camera {camera!r} not in the model (choose iso or one of {names})")
        return camera

    def set_state(self, q: np.ndarray) -> None:
        self.d.qpos[:] = self.conv.qpos_from_pin(np.asarray(q, float))
        self.d.qvel[:] = 0.0
        self._mj.mj_forward(self.m, self.d)

    def render(self, q: np.ndarray, hide_robot: bool = False) -> np.ndarray:
        """``(height, width, 3)`` uint8 frame (a new array)."""
        self.set_state(q)
        self.renderer.update_scene(self.d, camera=self.camera,
                                   scene_option=self._opt_empty if hide_robot else self._opt_robot)
        return self.renderer.render()

    def close(self) -> None:
        r = getattr(self, "renderer", None)
        if r is not None:
            r.close()
            self.renderer = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ============================================================================ overlays
_FONTS: dict[int, object] = {}


def _font(size: int):
    from PIL import ImageFont

    size = int(size)
    if size not in _FONTS:
        try:
            _FONTS[size] = ImageFont.load_default(size=size)
        except TypeError:  # Pillow < 10.1: bitmap font of fixed size
            _FONTS[size] = ImageFont.load_default()
    return _FONTS[size]


def leg_layout(cfg) -> np.ndarray:
    """Nominal foot positions (x forward, y left) in the base frame, one row per leg [m]."""
    out = []
    for leg in cfg.legs:
        yaw = math.radians(leg.mount_yaw_deg)
        x, y = leg.mount_xyz[0], leg.mount_xyz[1]
        out.append((x + cfg.stance_reach * math.cos(yaw), y + cfg.stance_reach * math.sin(yaw)))
    return np.array(out)


def draw_overlay(frame: np.ndarray, lines: list[str], layout: np.ndarray | None = None,
                 leg_names: list[str] | None = None, support: np.ndarray | None = None,
                 disturbed: np.ndarray | None = None) -> np.ndarray:
    """Text lines at the top left and the support pattern as coloured dots (top view of the robot,
    front up; green = support, orange = swing, grey = unknown, red ring = disturbed leg)."""
    from PIL import Image, ImageDraw

    h, w = frame.shape[:2]
    img = Image.fromarray(frame)
    dr = ImageDraw.Draw(img, "RGBA")
    fs = max(10, h // 26)
    font = _font(fs)
    if lines:
        pad = max(3, fs // 3)
        widths = [dr.textlength(s, font=font) for s in lines]
        box_h = len(lines) * (fs + pad) + pad
        dr.rectangle([0, 0, max(widths) + 2 * pad, box_h], fill=(0, 0, 0, 120))
        for k, s in enumerate(lines):
            dr.text((pad, pad + k * (fs + pad)), s, fill=(255, 255, 255, 255), font=font)
    if layout is not None and leg_names:
        side = max(48, min(w, h) // 4)
        m = side * 0.18
        x0, y0 = w - side - 6, 6
        dr.rectangle([x0, y0, x0 + side, y0 + side], fill=(0, 0, 0, 110))
        # top view, front up: screen x = -y, screen y = -x
        ext = np.max(np.abs(layout)) or 1.0
        sc = (side / 2 - m) / ext
        cx, cy = x0 + side / 2, y0 + side / 2
        dr.rectangle([cx - 0.22 * side, cy - 0.32 * side, cx + 0.22 * side, cy + 0.32 * side],
             outline=(220, 220, 220, 200), width=1)
        r = max(4, side // 14)
        sfont = _font(max(8, int(r * 1.5)))
        for i, name in enumerate(leg_names):
            px, py = cx - layout[i, 1] * sc, cy - layout[i, 0] * sc
            if support is None:
                col = UNKNOWN_RGB
            else:
                col = SUPPORT_RGB if bool(support[i]) else SWING_RGB
            dr.ellipse([px - r, py - r, px + r, py + r], fill=col + (255,), outline=(255, 255, 255, 255))
            if disturbed is not None and bool(disturbed[i]):
                dr.ellipse([px - r - 3, py - r - 3, px + r + 3, py + r + 3], outline=DISTURB_RGB + (255,), width=2)
            tx = px - r - dr.textlength(name, font=sfont) - 2 if layout[i, 1] > 0 else px + r + 2
            dr.text((tx, py - r), name, fill=(255, 255, 255, 230), font=sfont)
    return np.asarray(img)


def _frame_lines(rec: Recording, t: float, extra: str | None = None) -> list[str]:
    sc = f" · {rec.scenario_name}" if rec.scenario_name else ""
    lines = [f"{rec.label}{sc}", f"t = {t:6.2f} s"]
    if extra:
        lines.append(extra)
    return lines


def _overlay(rec: Recording, frame: np.ndarray, t: float, layout: np.ndarray, extra: str | None = None) -> np.ndarray:
    sup = rec.support.at(t) if rec.support is not None else None
    dis = rec.disturbed.at(t) if rec.disturbed is not None else None
    return draw_overlay(frame, _frame_lines(rec, t, extra), layout, rec.leg_names, sup, dis)


def _label_panel(frame: np.ndarray, text: str) -> np.ndarray:
    from PIL import Image, ImageDraw

    img = Image.fromarray(frame)
    dr = ImageDraw.Draw(img, "RGBA")
    h = frame.shape[0]
    fs = max(10, h // 24)
    font = _font(fs)
    tw = dr.textlength(text, font=font)
    dr.rectangle([0, h - fs - 10, tw + 12, h], fill=(0, 0, 0, 140))
    dr.text((6, h - fs - 6), text, fill=(255, 255, 255, 255), font=font)
    return np.asarray(img)


# ============================================================================ render jobs
@dataclass
class RenderOptions:
    fps: float = 30.0
    width: int = 640
    height: int = 480
    start: float | None = None
    end: float | None = None
    video: bool = True
    strip: bool = True
    strip_frames: int = 6
    strip_time: float | None = None
    compare_time: float | None = None
    overlay: bool = True
    camera: str = "track"
    shadows: bool = True
    robot: str | None = None
    progress: bool = True


def parse_size(text: str) -> tuple[int, int]:
    try:
        w, h = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise RenderError(f"--size {text!r}: expected WIDTHxHEIGHT, e.g. 640x480") from None
    if not (16 <= w <= 4096 and 16 <= h <= 4096) or w % 2 or h % 2:
        raise RenderError(f"--size {text!r}: width and height must be even numbers in [16, 4096] (H.264 4:2:0)")
    return w, h


def time_window(rec: Recording, start: float | None, end: float | None) -> tuple[float, float]:
    t0, t1 = rec.t_start, rec.t_end
    s = t0 if start is None else float(start)
    e = t1 if end is None else float(end)
    if not (t0 - 1e-9 <= s < t1):
        raise RenderError(f"--start {s:g} s is outside the run's data [{t0:.3f}, {t1:.3f}] s")
    if e <= s:
        raise RenderError(f"--end {e:g} s must be after --start {s:g} s")
    if e > t1 + 1e-9:
        rec.notes.append(f"--end {e:g} s is past the end of the data; clipped to {t1:.3f} s")
        e = t1
    return s, e


def frame_times(start: float, end: float, fps: float) -> np.ndarray:
    """Frame ``k`` shows time ``start + k / fps``; ``round((end - start) * fps)`` frames (at least 1)."""
    if not fps > 0:
        raise RenderError(f"--fps {fps:g}: must be > 0")
    n = max(1, int(round((end - start) * fps)))
    return start + np.arange(n) / fps


def gait_info(rec: Recording) -> tuple[float, float]:
    """``(period, start_time)`` of the gait: robot YAML ``gait.period`` (default 1 s), scenario gait start."""
    from legged_wbc.robot import load_robot_config

    g = load_robot_config(rec.robot).gait or {}
    period = float(g.get("period", 1.0))
    start = float(getattr(rec.scenario, "gait_start", g.get("start_time", 3.0)))
    return period, start


def strip_times(rec: Recording, start: float, end: float, k: int, at: float | None = None) -> tuple[np.ndarray, float]:
    """``k`` instants spread over one gait cycle: the cycle starting at ``at`` if given, else the
    middle one of the complete gait cycles inside ``[start, end]`` (the whole window when the gait
    has not started, or the window is shorter than a cycle)."""
    period, g0 = gait_info(rec)
    if k < 1:
        raise RenderError("--strip-frames must be >= 1")
    if at is not None:
        c = float(at)
        if not (rec.t_start - 1e-9 <= c < rec.t_end):
            raise RenderError(f"--strip-time {c:g} s is outside the run's data [{rec.t_start:.3f}, {rec.t_end:.3f}] s")
        span = period
    else:
        n_first = math.ceil((max(start, g0) - g0) / period - 1e-9)
        cycles = [g0 + i * period for i in range(n_first, n_first + 100000) if g0 + (i + 1) * period <= end + 1e-9]
        if cycles:
            c, span = cycles[len(cycles) // 2], period
        else:
            c, span = start, min(period, end - start)
    return c + np.arange(k) * span / k, span


def default_compare_time(a: Recording, b: Recording) -> float:
    """End of the scenario's push (the largest effect of the disturbance) when both runs cover it,
    else the middle of the common time range."""
    lo, hi = max(a.t_start, b.t_start), min(a.t_end, b.t_end)
    if hi <= lo:
        raise RenderError(f"{a.path} and {b.path} share no time range ([{a.t_start:.2f}, {a.t_end:.2f}] vs "
                          f"[{b.t_start:.2f}, {b.t_end:.2f}] s)")
    for rec in (a, b):
        dist = getattr(rec.scenario, "disturbance", None)
        if dist is not None and dist.enabled:
            t = dist.start + dist.duration - 1e-3
            if lo <= t < hi:
                return t
    return 0.5 * (lo + hi)


class Progress:
    def __init__(self, total: int, label: str, enabled: bool = True, stream=None):
        self.total, self.label, self.enabled = total, label, enabled
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.t0 = time.perf_counter()
        self._last = -1.0
        self._last_pct = -1

    def update(self, done: int) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        el = now - self.t0
        rate = done / el if el > 0 else 0.0
        eta = (self.total - done) / rate if rate > 0 else float("nan")
        msg = f"{self.label}: frame {done}/{self.total}  {rate:5.1f} frames/s  eta {eta:5.0f} s"
        if self.tty:
            if now - self._last >= 0.25 or done == self.total:
                self._last = now
                print("\r" + msg, end="\n" if done == self.total else "", file=self.stream, flush=True)
        else:
            pct = int(100 * done / max(self.total, 1)) // 10 * 10
            if pct != self._last_pct:
                self._last_pct = pct
                print(msg, file=self.stream, flush=True)


def _open_video_writer(path: Path, fps: float):
    try:
        import imageio.v2 as iio
    except ImportError as exc:
        raise RenderError(f"writing MP4 needs imageio and imageio-ffmpeg ({exc}); run ./setup.sh") from exc
    try:
        return iio.get_writer(str(path), format="FFMPEG", mode="I", fps=fps, codec="libx264",
                              pixelformat="yuv420p", macro_block_size=2, ffmpeg_log_level="error",
                              quality=None, output_params=["-crf", "20", "-preset", "veryfast"])
    except Exception as exc:  # noqa: BLE001
        raise RenderError(f"cannot start the video encoder: {type(exc).__name__}: {exc}") from exc


def render_video(rec: Recording, sr: SceneRenderer, path: Path, times: np.ndarray, fps: float,
                 overlay: bool = True, progress: bool = True,
                 on_frame: Callable[[int, np.ndarray], None] | None = None) -> dict:
    layout = leg_layout(sr.rm.cfg)
    writer = _open_video_writer(path, fps)
    pr = Progress(len(times), f"render {path.name}", progress)
    t_render = 0.0
    wall0 = time.perf_counter()
    try:
        for k, t in enumerate(times):
            r0 = time.perf_counter()
            img = sr.render(rec.q_at(float(t)))
            t_render += time.perf_counter() - r0
            if overlay:
                img = _overlay(rec, img, float(t), layout)
            writer.append_data(img)
            if on_frame is not None:
                on_frame(k, img)
            pr.update(k + 1)
    finally:
        writer.close()
    wall = time.perf_counter() - wall0
    return {"file": str(path), "frames": int(len(times)), "fps": fps, "start_s": float(times[0]),
            "end_s": float(times[-1] + 1.0 / fps), "wall_s": wall, "frames_per_s": len(times) / wall if wall else None,
            "render_ms_per_frame": 1000.0 * t_render / len(times)}


def render_strip(rec: Recording, sr: SceneRenderer, path: Path, times: np.ndarray, span: float,
                 overlay: bool = True) -> dict:
    from PIL import Image

    layout = leg_layout(sr.rm.cfg)
    period, _ = gait_info(rec)
    panels = []
    for i, t in enumerate(times):
        img = sr.render(rec.q_at(float(t)))
        if overlay:
            img = _overlay(rec, img, float(t), layout)
        panels.append(_label_panel(img, f"{i + 1}/{len(times)}  t = {t:.2f} s  (phase {(t - times[0]) / period:.2f})"))
    strip = np.concatenate(panels, axis=1)
    Image.fromarray(strip).save(path)
    return {"file": str(path), "times_s": [float(x) for x in times], "cycle_s": span, "gait_period_s": period,
            "width": int(strip.shape[1]), "height": int(strip.shape[0])}


def _theta_text(rec: Recording, t: float) -> str | None:
    if rec.theta is None:
        return None
    th = rec.theta.at(t)
    dist = getattr(rec.scenario, "disturbance", None)
    if dist is not None and dist.enabled and dist.leg in rec.leg_names:
        i = rec.leg_names.index(dist.leg)
    else:
        i = int(np.argmax(np.abs(th)))
    return f"theta_{rec.leg_names[i]} = {th[i]:+.3f} rad"


def render_compare(a: Recording, b: Recording, sa: SceneRenderer, sb: SceneRenderer, path: Path, t: float,
                   overlay: bool = True) -> dict:
    from PIL import Image

    panels = []
    for rec, sr in ((a, sa), (b, sb)):
        img = sr.render(rec.q_at(t))
        if overlay:
            img = _overlay(rec, img, t, leg_layout(sr.rm.cfg), _theta_text(rec, t))
        panels.append(_label_panel(img, f"{rec.label}  ({rec.path.name})"))
    out = np.concatenate(panels, axis=1)
    Image.fromarray(out).save(path)
    return {"file": str(path), "time_s": float(t), "left": str(a.path), "right": str(b.path),
            "width": int(out.shape[1]), "height": int(out.shape[0])}


def render_run(run: str | Path, out: str | Path, compare: str | Path | None = None,
               opts: RenderOptions | None = None) -> dict:
    """Render ``run`` into ``out``: ``video.mp4``, ``gait_strip.png``, ``compare.png`` (with
    ``compare``) and ``render.json`` (what was rendered, timings). Raises :class:`RenderError`."""
    o = opts or RenderOptions()
    rec = load_recording(run, o.robot)
    other = load_recording(compare, o.robot) if compare is not None else None
    start, end = time_window(rec, o.start, o.end)
    out = Path(out)
    summary: dict = {"run": str(rec.path), "kind": rec.kind, "controller": rec.controller,
                     "scenario": rec.scenario_name, "robot": rec.robot, "size": [o.width, o.height],
                     "camera": o.camera, "start_s": start, "end_s": end}
    if rec.support is None:
        rec.notes.append("no support data in the run: support dots drawn grey")
    # every option is checked before the (slow) rendering starts
    times = frame_times(start, end, o.fps) if o.video else None
    st, span = strip_times(rec, start, end, o.strip_frames, o.strip_time) if o.strip else (None, None)
    tc = None
    if other is not None:
        tc = default_compare_time(rec, other) if o.compare_time is None else float(o.compare_time)
        for r in (rec, other):
            if not (r.t_start - 1e-9 <= tc < r.t_end):
                raise RenderError(f"--compare-time {tc:g} s is outside {r.path}'s data [{r.t_start:.3f}, {r.t_end:.3f}] s")
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    sr = SceneRenderer(rec.robot, o.width, o.height, o.camera, o.shadows, _terrain_of(rec))
    summary["gl_backend"] = sr.backend
    summary["setup_s"] = time.perf_counter() - t0
    sb = None
    try:
        if times is not None:
            summary["video"] = render_video(rec, sr, out / "video.mp4", times, o.fps, o.overlay, o.progress)
        if st is not None:
            summary["strip"] = render_strip(rec, sr, out / "gait_strip.png", st, span, o.overlay)
        if other is not None:
            sb = (sr if other.robot == rec.robot and _terrain_of(other) == _terrain_of(rec) else
                  SceneRenderer(other.robot, o.width, o.height, o.camera, o.shadows, _terrain_of(other)))
            summary["compare"] = render_compare(rec, other, sr, sb, out / "compare.png", tc, o.overlay)
    finally:
        if sb is not None and sb is not sr:
            sb.close()
        sr.close()
    summary["notes"] = rec.notes + (other.notes if other is not None else [])
    summary["total_s"] = time.perf_counter() - t0
    (out / "render.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
