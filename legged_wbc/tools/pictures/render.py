"""Offscreen replay of a recorded run: MP4 video, gait-cycle strip and side-by-side snapshots.

A *run* is either a headless run directory (``log.npz`` from :func:`legged_wbc.closed_loop.save_run`)
or a rosbag2 directory (MCAP or sqlite3) recorded by the ROS stack. Only recorded ground truth is
replayed, nothing is simulated: for every frame the base pose and the joint positions of the
sample at (or last before) the frame time are written into ``qpos`` through
:class:`~legged_wbc.conventions.StateConverter`, ``mj_forward`` places the bodies and
``mujoco.Renderer`` draws the scene offscreen.

The modules: :mod:`.recording` (what is read from a run), :mod:`.scene_render` (offscreen frames),
:mod:`.overlays` (text and support dots); this one: the render jobs (video, strip, side by side).
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from legged_wbc.tools.pictures.overlays import _label_panel, _overlay, leg_layout
from legged_wbc.tools.experiments.recording import Recording, RenderError, load_recording
from legged_wbc.tools.pictures.scene_render import SceneRenderer, _terrain_of


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
