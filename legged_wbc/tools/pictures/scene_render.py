"""Offscreen frames of the robot: the simulation scene dressed for pictures, drawn by ``mujoco.Renderer``
in an offscreen OpenGL context.

Offscreen OpenGL: EGL (Mesa's software rasterizer when there is no GPU) unless ``MUJOCO_GL=osmesa``
is set. The backend is chosen here, for the renderer this module creates, whatever ``mujoco`` was
imported with; nothing is changed in the environment of other processes.
"""

from __future__ import annotations

import os
import sys
import threading
from contextlib import contextmanager

import numpy as np

from legged_wbc.tools.experiments.recording import RenderError, _robot_model


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
        self._first_frame()

    def _first_frame(self) -> None:
        """One frame drawn and dropped: Mesa's software GL shades the textured floor of the first frame of a
        context differently (up to 9 of 255 levels on ~60 % of its pixels) from every later one, so the
        first frame of a video would not equal the same state drawn again."""
        self._mj.mj_forward(self.m, self.d)
        self.renderer.update_scene(self.d, camera=self.camera, scene_option=self._opt_robot)
        self.renderer.render()

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
