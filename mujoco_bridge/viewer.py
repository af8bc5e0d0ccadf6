"""Live view of a running simulation in MuJoCo's passive viewer, off the physics/control path.

    viewer = open_viewer(model)            # a Viewer; a no-op one when there is no display
    ...
    sim.step(2); viewer.update(sim.d.qpos) # cheap: at most one small copy under a lock per 1/rate_hz
    ...
    viewer.close()

The viewer has its own ``MjData``: the simulation's data is never touched by it. ``update(qpos)``
only copies ``qpos`` (MuJoCo order) into a buffer under a lock, and only when the last copy is
older than the display period, so calling it after every physics step costs well under a
microsecond most of the time. A daemon thread takes the latest buffer at ``rate_hz`` (default
50 Hz), runs ``mj_forward`` on the viewer's data and calls the viewer's ``sync``.
Alternatively, ``data_provider`` (a callable returning the current ``qpos``) is polled by that
thread, for callers that prefer pulling (it must be safe to call from another thread).

Without a display (neither ``DISPLAY`` nor ``WAYLAND_DISPLAY`` on Linux), or when the viewer
cannot start (no GLFW/OpenGL, window creation failure, macOS without ``mjpython``), a message says
so once per process on stderr and a no-op :class:`Viewer` is returned: the run goes on headless.

:func:`attach_viewer` hooks a :class:`~legged_wbc.closed_loop.ClosedLoop` (or anything with a
``sim`` that has ``m``, ``d`` and ``step``) without changing its code: it wraps ``sim.step``.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from typing import Callable

import numpy as np

DEFAULT_RATE_HZ = 50.0
START_TIMEOUT_S = 15.0
_warned: set[str] = set()


def _say_once(key: str, msg: str, stream=None) -> None:
    if key in _warned:
        return
    _warned.add(key)
    print(msg, file=stream or sys.stderr, flush=True)


def display_available() -> tuple[bool, str]:
    """Whether a window can be opened, and why not."""
    if sys.platform.startswith("linux") or sys.platform.startswith("freebsd"):
        if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
            return False, "no display (DISPLAY and WAYLAND_DISPLAY are not set)"
    return True, ""


class Viewer:
    """The interface the simulation uses; this base class does nothing (no display)."""

    active = False
    reason = ""

    def update(self, qpos) -> None:  # noqa: D401 - no-op
        pass

    def is_running(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class NullViewer(Viewer):
    def __init__(self, reason: str):
        self.reason = reason


class PassiveViewer(Viewer):
    """MuJoCo's passive viewer fed from a copy of the simulation state by a background thread."""

    active = True

    def __init__(self, model, data_provider: Callable[[], np.ndarray] | None = None,
                 rate_hz: float = DEFAULT_RATE_HZ, handle=None, launch=None):
        import mujoco

        self._mj = mujoco
        self.m = model
        self.d = mujoco.MjData(model)          # the viewer's own data
        self.period = 1.0 / max(1.0, min(float(rate_hz), 240.0))
        self._provider = data_provider
        self._lock = threading.Lock()
        self._buf = np.array(model.qpos0, dtype=float)
        self._fresh = False
        self._last_copy = -1.0
        self._stop = threading.Event()
        self.d.qpos[:] = self._buf
        mujoco.mj_forward(model, self.d)
        self.handle = handle if handle is not None else (launch or _launch_with_timeout)(model, self.d)
        self._track_base()
        self._thread = threading.Thread(target=self._loop, name="legged-wbc-viewer", daemon=True)
        self._thread.start()

    # -------------------------------------------------------------- caller side (physics thread)
    def update(self, qpos) -> None:
        now = time.perf_counter()
        if now - self._last_copy < self.period:
            return
        self._last_copy = now
        with self._lock:
            self._buf[:] = qpos
            self._fresh = True

    def _track_base(self) -> None:
        """Point the viewer's camera at the floating base and follow it."""
        mj, h = self._mj, self.handle
        cam = getattr(h, "cam", None)
        if cam is None or self.m.njnt == 0 or self.m.jnt_type[0] != mj.mjtJoint.mjJNT_FREE:
            return
        with h.lock():
            cam.type = mj.mjtCamera.mjCAMERA_TRACKING
            cam.trackbodyid = int(self.m.jnt_bodyid[0])
            cam.distance, cam.azimuth, cam.elevation = 3.0, 135.0, -20.0

    # -------------------------------------------------------------- viewer thread
    def _loop(self) -> None:
        mj, h = self._mj, self.handle
        next_t = time.perf_counter()
        try:
            while not self._stop.is_set() and h.is_running():
                q = None
                if self._provider is not None:
                    try:
                        q = np.array(self._provider(), dtype=float)
                    except Exception as exc:  # noqa: BLE001 - never let the view kill the run
                        _say_once("provider", f"viewer: data provider failed ({exc}); view frozen")
                        self._provider = None
                else:
                    with self._lock:
                        if self._fresh:
                            q = self._buf.copy()
                            self._fresh = False
                if q is not None:
                    with h.lock():
                        self.d.qpos[:] = q
                        mj.mj_forward(self.m, self.d)
                    h.sync()
                next_t += self.period
                delay = next_t - time.perf_counter()
                if delay > 0:
                    self._stop.wait(delay)
                else:
                    next_t = time.perf_counter()
        except Exception as exc:  # noqa: BLE001
            _say_once("loop", f"viewer: stopped ({type(exc).__name__}: {exc}); the run goes on")

    def is_running(self) -> bool:
        return not self._stop.is_set() and bool(self.handle.is_running())

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=2.0)
        try:
            self.handle.close()
        except Exception:  # noqa: BLE001
            pass


def _launch_with_timeout(model, data, timeout: float = START_TIMEOUT_S):
    """``mujoco.viewer.launch_passive`` in a helper thread: it blocks forever if GLFW fails inside its
    own thread, so a start that takes longer than ``timeout`` counts as a failure."""
    import warnings

    import mujoco.viewer

    # launch_passive ends the whole process (exit status 1) when GLFW cannot initialize (e.g. DISPLAY
    # set but no X server reachable): try GLFW here first, where a failure is just False.
    try:
        import glfw
    except Exception as exc:  # noqa: BLE001 - missing libglfw
        raise RuntimeError(f"GLFW unavailable: {exc}") from exc
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ok = glfw.init()
    if not ok:
        detail = "; ".join(str(w.message) for w in caught) or "glfw.init() failed"
        raise RuntimeError(f"GLFW cannot open a window: {detail}")

    box: queue.Queue = queue.Queue(1)

    def run():
        try:
            box.put(("ok", mujoco.viewer.launch_passive(model, data, show_left_ui=False, show_right_ui=False)))
        except BaseException as exc:  # noqa: BLE001
            box.put(("error", exc))

    threading.Thread(target=run, name="legged-wbc-viewer-launch", daemon=True).start()
    try:
        kind, val = box.get(timeout=timeout)
    except queue.Empty:
        raise RuntimeError(f"the viewer window did not open within {timeout:g} s") from None
    if kind == "error":
        raise val
    return val


def open_viewer(model, data_provider: Callable[[], np.ndarray] | None = None,
                rate_hz: float = DEFAULT_RATE_HZ, *, launch=None) -> Viewer:
    """A live :class:`Viewer` of ``model`` (a ``mujoco.MjModel``), or a no-op one (message once) when
    no window can be opened. Feed it with ``viewer.update(qpos)`` (MuJoCo ``qpos``) or pass
    ``data_provider``. ``launch`` replaces ``mujoco.viewer.launch_passive`` (tests)."""
    ok, why = display_available()
    if not ok and launch is None:
        _say_once("nodisplay", f"viewer: {why}; running without the live view")
        return NullViewer(why)
    try:
        return PassiveViewer(model, data_provider, rate_hz, launch=launch)
    except BaseException as exc:  # noqa: BLE001 - GLFW/GL errors come in many types
        if isinstance(exc, KeyboardInterrupt):
            raise
        why = f"the viewer could not start ({type(exc).__name__}: {exc})"
        _say_once("launch", f"viewer: {why}; running without the live view")
        return NullViewer(why)


def attach_viewer(loop, rate_hz: float = DEFAULT_RATE_HZ, *, launch=None) -> Viewer:
    """Open a viewer on ``loop.sim`` (a :class:`mujoco_bridge.sim.MujocoSim`) and feed it after every
    ``sim.step`` by wrapping that method on the instance; ``viewer.close()`` removes the wrapper."""
    sim = loop.sim if hasattr(loop, "sim") else loop
    v = open_viewer(sim.m, rate_hz=rate_hz, launch=launch)
    if not v.active:
        return v
    v.update(sim.d.qpos)
    inner = sim.step
    qpos = sim.d.qpos
    upd = v.update

    def step(n: int = 1) -> None:
        inner(n)
        upd(qpos)

    sim.step = step
    close = v.close

    def close_and_detach() -> None:
        if sim.__dict__.get("step") is step:
            del sim.step
        close()

    v.close = close_and_detach
    return v
