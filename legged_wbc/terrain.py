"""Terrain of the simulated world: flat, a slope, a staircase or rough ground (``scenario.terrain``).

The robot always starts at the origin on level ground at height 0 and walks along +x; the terrain
begins ``start_x_m`` ahead of it. World frame, metres, heights along +z.

* ``flat``: the plane ``z = 0`` (what every scenario had before).
* ``slope``: level up to ``start_x_m``, then an incline of ``angle_deg`` (positive: up, negative:
  down) for ``length_m``, then level again. Built from boxes whose top faces are the surfaces, with
  the plane at the lowest level.
* ``steps``: ``count`` steps of ``height_m`` (positive: up, negative: down), each ``step_length_m``
  deep, from ``start_x_m`` on (a staircase; the last step continues as a plateau).
* ``rough``: a MuJoCo height field covering ``x`` in ``[-2, start_x_m + length_m]`` and ``y`` in
  ``[-2, 2]``: a random field from ``seed`` (white noise smoothed to features of ``wavelength_m``),
  faded to 0 within ``start_x_m`` of the origin so the robot stands up on level ground, and scaled to
  a peak ``|z|`` of ``amplitude_m``. The same seed gives the same field on every machine.

:func:`add_terrain` puts the geoms into a :class:`mujoco.MjSpec` (every terrain geom is named
``floor`` or ``terrain_*``: :func:`is_terrain_geom`), :meth:`Terrain.height` is the surface height at
``(x, y)`` (the true one: for evaluation and tests; the controller does not know it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from legged_wbc.robot import ConfigError

KINDS = ("flat", "slope", "steps", "rough")
HFIELD_CELL_M = 0.02          # rough: grid spacing of the height field [m]
HFIELD_HALF_WIDTH_M = 2.0     # rough: the field spans y in [-2, 2] [m]
HFIELD_BACK_M = 2.0           # rough: and x from -2 m
BOX_HALF_WIDTH_M = 3.0        # slope / steps: lateral half width of the boxes [m]
BACK_M = 3.0                  # how far behind the origin the start level extends (slope / steps down) [m]
FAR_M = 50.0                  # how far the top level extends beyond a slope or staircase up [m]

# Estimator settings off flat ground, over the settings preset's (a scenario's own estimator block goes
# over these): the robust preset's touchdown filter (sigma_dq_meas 0.15, for noisy flat ground) sees the
# touchdowns on an incline late (WBC-CBF 0.071 rad on slope_up against 0.0000 with 0.05; docs/terrain.md)
ESTIMATOR_OFF_FLAT = {"touchdown": {"sigma_dq_meas": 0.05}}

# scenario.terrain's keys and defaults (scenario files may omit the block or any key)
DEFAULTS = {"kind": "flat", "angle_deg": 0.0, "length_m": 6.0, "height_m": 0.0, "step_length_m": 0.35,
            "count": 5, "amplitude_m": 0.0, "wavelength_m": 0.3, "seed": 0, "start_x_m": 0.8}


@dataclass(frozen=True)
class Terrain:
    """A terrain as the scenario describes it (see the module docstring for the keys)."""

    kind: str = "flat"
    angle_deg: float = 0.0
    length_m: float = 6.0
    height_m: float = 0.0
    step_length_m: float = 0.35
    count: int = 5
    amplitude_m: float = 0.0
    wavelength_m: float = 0.3
    seed: int = 0
    start_x_m: float = 0.8

    @classmethod
    def from_dict(cls, d: dict | None) -> "Terrain":
        """From ``scenario.terrain`` (missing keys: :data:`DEFAULTS`); bad values: one :class:`ConfigError`."""
        d = dict(DEFAULTS, **(d or {}))
        unknown = sorted(set(d) - set(DEFAULTS))
        if unknown:
            raise ConfigError(f"scenario.terrain: unknown key(s) {unknown} (known: {sorted(DEFAULTS)})")
        try:
            t = cls(kind=str(d["kind"]), angle_deg=float(d["angle_deg"]), length_m=float(d["length_m"]),
                    height_m=float(d["height_m"]), step_length_m=float(d["step_length_m"]), count=int(d["count"]),
                    amplitude_m=float(d["amplitude_m"]), wavelength_m=float(d["wavelength_m"]), seed=int(d["seed"]),
                    start_x_m=float(d["start_x_m"]))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"scenario.terrain: bad value ({exc})") from None
        t.validate()
        return t

    def validate(self) -> None:
        def bad(key, why):
            raise ConfigError(f"scenario.terrain.{key}: {why}, got {getattr(self, key)!r}")

        if self.kind not in KINDS:
            bad("kind", f"must be one of {', '.join(KINDS)}")
        if not all(math.isfinite(v) for v in (self.angle_deg, self.length_m, self.height_m, self.step_length_m,
                                              self.amplitude_m, self.wavelength_m, self.start_x_m)):
            raise ConfigError("scenario.terrain: every number must be finite")
        if not -35.0 <= self.angle_deg <= 35.0:
            bad("angle_deg", "must be within +-35 deg")
        if not 0.5 <= self.length_m <= 50.0:
            bad("length_m", "must be in [0.5, 50] m")
        if not -0.3 <= self.height_m <= 0.3:
            bad("height_m", "must be within +-0.3 m")
        if not 0.1 <= self.step_length_m <= 5.0:
            bad("step_length_m", "must be in [0.1, 5] m")
        if not 1 <= self.count <= 100:
            bad("count", "must be in [1, 100]")
        if not 0.0 <= self.amplitude_m <= 0.2:
            bad("amplitude_m", "must be in [0, 0.2] m")
        if not 2 * HFIELD_CELL_M <= self.wavelength_m <= 5.0:
            bad("wavelength_m", f"must be in [{2 * HFIELD_CELL_M}, 5] m")
        if not 0.3 <= self.start_x_m <= 10.0:
            bad("start_x_m", "must be in [0.3, 10] m (the robot stands up on level ground at the origin)")

    def summary(self) -> dict:
        """The kind and the keys that shape it (``metrics.json``'s ``terrain``)."""
        keys = {"flat": (), "slope": ("angle_deg", "length_m", "start_x_m"),
                "steps": ("height_m", "step_length_m", "count", "start_x_m"),
                "rough": ("amplitude_m", "wavelength_m", "seed", "start_x_m", "length_m")}[self.kind]
        return {"kind": self.kind, **{k: getattr(self, k) for k in keys}}

    # ------------------------------------------------------------------ geometry
    def height(self, x, y=0.0):
        """True surface height [m] at world ``(x, y)`` (arrays broadcast)."""
        x = np.asarray(x, dtype=float)
        y = np.asarray(y, dtype=float)
        if self.kind == "slope":
            run = np.clip(x - self.start_x_m, 0.0, self.length_m)
            return run * math.tan(math.radians(self.angle_deg)) + 0.0 * y
        if self.kind == "steps":
            n = np.clip(np.floor((x - self.start_x_m) / self.step_length_m) + 1, 0, self.count)
            return n * self.height_m + 0.0 * y
        if self.kind == "rough":
            return self._rough_height(x, y)
        return np.zeros(np.broadcast(x, y).shape)

    def normal(self, x, y=0.0, eps: float = 1e-3) -> np.ndarray:
        """True surface normal (unit, z up) at world ``(x, y)`` (arrays broadcast; shape ``(..., 3)``):
        central differences of :meth:`height` over ``eps`` [m] (a step's edge within ``eps``
        counts as its riser; flat ground gives ``(0, 0, 1)`` exactly)."""
        x = np.asarray(x, dtype=float)
        y = np.asarray(y, dtype=float)
        if self.kind == "flat":
            shape = np.broadcast(x, y).shape
            return np.broadcast_to(np.array([0.0, 0.0, 1.0]), shape + (3,)).copy()
        gx = (self.height(x + eps, y) - self.height(x - eps, y)) / (2 * eps)
        gy = (self.height(x, y + eps) - self.height(x, y - eps)) / (2 * eps)
        n = np.stack([-gx, -gy, np.ones_like(gx)], axis=-1)
        return n / np.linalg.norm(n, axis=-1, keepdims=True)

    def lowest(self) -> float:
        """The lowest surface height [m] (where the ground plane goes)."""
        if self.kind == "slope":
            return min(0.0, self.length_m * math.tan(math.radians(self.angle_deg)))
        if self.kind == "steps":
            return min(0.0, self.count * self.height_m)
        if self.kind == "rough":
            return min(0.0, float(self._cached_grid()[2].min()))
        return 0.0

    # ------------------------------------------------------------------ rough ground
    def grid(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``rough``: ``(xs, ys, heights[len(ys), len(xs)])`` of the field [m]."""
        x_end = self.start_x_m + self.length_m
        nx = int(round((x_end + HFIELD_BACK_M) / HFIELD_CELL_M)) + 1
        ny = int(round(2 * HFIELD_HALF_WIDTH_M / HFIELD_CELL_M)) + 1
        xs = np.linspace(-HFIELD_BACK_M, x_end, nx)
        ys = np.linspace(-HFIELD_HALF_WIDTH_M, HFIELD_HALF_WIDTH_M, ny)
        noise = np.random.default_rng(self.seed).standard_normal((ny, nx))
        # white noise smoothed with a Gaussian of sigma = wavelength / 4 (FFT, periodic, no scipy)
        sigma = self.wavelength_m / 4.0
        kx = np.fft.rfftfreq(nx, d=HFIELD_CELL_M)
        ky = np.fft.fftfreq(ny, d=HFIELD_CELL_M)
        gain = np.exp(-2.0 * (math.pi * sigma) ** 2 * (ky[:, None] ** 2 + kx[None, :] ** 2))
        field = np.fft.irfft2(np.fft.rfft2(noise) * gain, s=(ny, nx))
        # faded to level ground around the start: 0 within |x| < start_x_m / 2, full height from start_x_m
        fade = np.clip((np.abs(xs) - 0.5 * self.start_x_m) / (0.5 * self.start_x_m), 0.0, 1.0)
        field = field * (fade * fade * (3 - 2 * fade))[None, :]
        peak = np.abs(field).max()
        return xs, ys, self.amplitude_m * (field / peak if peak > 0 else field)

    def _rough_height(self, x, y):
        """Bilinear in the grid; outside it, the ground plane at :meth:`lowest`."""
        xs, ys, h = self._cached_grid()
        inside = (x >= xs[0]) & (x <= xs[-1]) & (y >= ys[0]) & (y <= ys[-1])
        fx = np.clip((x - xs[0]) / HFIELD_CELL_M, 0, len(xs) - 1.000001)
        fy = np.clip((y - ys[0]) / HFIELD_CELL_M, 0, len(ys) - 1.000001)
        ix, iy = np.floor(fx).astype(int), np.floor(fy).astype(int)
        ax, ay = fx - ix, fy - iy
        z = ((1 - ax) * (1 - ay) * h[iy, ix] + ax * (1 - ay) * h[iy, ix + 1]
             + (1 - ax) * ay * h[iy + 1, ix] + ax * ay * h[iy + 1, ix + 1])
        return np.where(inside, z, self.lowest())

    def _cached_grid(self):
        cache = _GRIDS.get(self)
        if cache is None:
            cache = _GRIDS[self] = self.grid()
        return cache


_GRIDS: dict = {}


def is_terrain_geom(name: str | None) -> bool:
    return bool(name) and (name == "floor" or name.startswith("terrain_"))


def add_terrain(spec, terrain: Terrain | None, friction: float) -> None:
    """The ground of ``terrain`` (None: flat) as geoms of ``spec``'s world body."""
    import mujoco

    t = terrain or Terrain()
    world = spec.worldbody
    fr = [friction, 0.005, 0.0001]
    world.add_geom(name="floor", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[0, 0, 0.05], pos=[0, 0, t.lowest()],
                   friction=fr, rgba=[0.8, 0.8, 0.8, 1])
    box = dict(type=mujoco.mjtGeom.mjGEOM_BOX, friction=fr, rgba=[0.72, 0.72, 0.68, 1])
    if t.kind == "slope":
        _slope_boxes(world, t, box)
    elif t.kind == "steps":
        _step_boxes(world, t, box)
    elif t.kind == "rough":
        _height_field(spec, world, t, fr)


def _level_box(world, name, x0, x1, top, bottom, box) -> None:
    """A box spanning ``x`` in ``[x0, x1]`` with its top face at ``top`` and its bottom at ``bottom``."""
    half_h = max(0.5 * (top - bottom), 1e-3)
    world.add_geom(name=name, size=[0.5 * (x1 - x0), BOX_HALF_WIDTH_M, half_h],
                   pos=[0.5 * (x0 + x1), 0.0, top - half_h], **box)


def _slope_boxes(world, t: Terrain, box) -> None:
    a = math.radians(t.angle_deg)
    rise = t.length_m * math.tan(a)
    low = t.lowest()
    thick = 0.2
    if rise < 0:                                    # going down: the start level is a plateau
        _level_box(world, "terrain_start", -BACK_M, t.start_x_m, 0.0, low - thick, box)
    else:                                           # going up: the top level is a plateau
        _level_box(world, "terrain_top", t.start_x_m + t.length_m, t.start_x_m + t.length_m + FAR_M, rise,
                   low - thick, box)
    # the incline: a thin box rotated about y, its top face through (start_x_m, 0) and (end, rise)
    half_len = 0.5 * t.length_m / math.cos(a)
    cx, cz = t.start_x_m + 0.5 * t.length_m, 0.5 * rise
    nx, nz = -math.sin(a), math.cos(a)              # the top face's normal
    world.add_geom(name="terrain_incline", size=[half_len, BOX_HALF_WIDTH_M, 0.5 * thick],
                   pos=[cx - nx * 0.5 * thick, 0.0, cz - nz * 0.5 * thick],
                   quat=[math.cos(-a / 2), 0.0, math.sin(-a / 2), 0.0], **box)


def _step_boxes(world, t: Terrain, box) -> None:
    low = t.lowest()
    end = t.start_x_m + t.count * t.step_length_m + FAR_M
    if t.height_m < 0:                              # going down: the start level is a plateau
        _level_box(world, "terrain_start", -BACK_M, t.start_x_m, 0.0, low - 0.05, box)
    for i in range(t.count):
        top = (i + 1) * t.height_m
        x0 = t.start_x_m + i * t.step_length_m
        x1 = x0 + t.step_length_m if t.height_m < 0 else end   # down: one step deep each; up: stacked to the end
        if top > low + 1e-9:                                    # (the last step down is the ground plane)
            _level_box(world, f"terrain_step{i}", x0, x1, top, low - 0.05, box)


def _height_field(spec, world, t: Terrain, friction) -> None:
    import mujoco

    xs, ys, h = t._cached_grid()
    lo, hi = float(h.min()), float(h.max())
    span = max(hi - lo, 1e-6)
    nrow, ncol = h.shape                            # rows along y (first row at -y), columns along x
    hf = spec.add_hfield(name="terrain_rough", nrow=nrow, ncol=ncol,
                         size=[0.5 * (xs[-1] - xs[0]), 0.5 * (ys[-1] - ys[0]), span, 0.1])
    hf.userdata = ((h - lo) / span).ravel().tolist()   # MuJoCo rescales user data to [0, 1]: give it that
    world.add_geom(name="terrain_rough", type=mujoco.mjtGeom.mjGEOM_HFIELD, hfieldname="terrain_rough",
                   pos=[0.5 * (xs[0] + xs[-1]), 0.5 * (ys[0] + ys[-1]), lo], friction=friction,
                   rgba=[0.65, 0.6, 0.5, 1])
