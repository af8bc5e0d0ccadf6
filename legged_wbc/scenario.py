"""Experiment scenarios (``config/scenarios/*.yaml``) with dotted-key overrides.

``load_scenario("paper", ["disturbance.leg=rf", "disturbance.torque_nm=40"])`` reads the YAML,
applies each ``key=value`` (value parsed as YAML, key must exist unless it is under
``controller.`` / ``estimator.``, which take any parameter of those nodes) and validates.

Physical variations of the simulated world (the controller's model does not know them), with
defaults filled in for scenario files that do not have them, so ``--set`` works on any scenario:

* ``ground.friction``: foot-floor friction coefficient (``null``: the robot config's, 0.9);
* ``payload.mass_kg``: mass added to the body [kg] (negative: lighter), its inertia scaled with it;
* ``push``: a world-frame lateral force ``force_n`` [N] (signed, along world y) on the body's centre
  of mass from ``t_s + start_offset`` for ``duration`` s;
* ``terrain``: the ground, ``kind: flat | slope | steps | rough`` and its sizes
  (:mod:`legged_wbc.terrain`; e.g. ``--set terrain.kind=slope --set terrain.angle_deg=10``).

And the command path's latency: ``command_delay_ticks`` (int >= 0, default 0): the torque command
that answers control tick ``k`` is applied from control period ``k + 1 + N`` (the one from tick
``k + N`` to ``k + N + 1``) instead of ``k + 1``; the headless loop and the bridge honour it alike (see
:mod:`legged_wbc.closed_loop` and :mod:`mujoco_bridge.scheduler`).

The sensor path's latency: ``sensor_delay_ticks`` (int >= 0, default 0): every sensor sample
(joint states, IMU) reports the robot as it was ``N`` control ticks (``2 N`` physics steps) before
its time; the first ones, before that much time has passed, the state at the start. The simulation
applies it (:class:`mujoco_bridge.sim.MujocoSim`), so the headless loop and the bridge alike.

The settings preset: ``preset`` (``robust``, the default, or ``paper``; :data:`PRESETS`): controller
and estimator parameters applied under the scenario's own ``controller`` / ``estimator`` blocks (which
win). ``robust`` is what a sweep of randomized ``paper`` trials found best (``docs/actuators.md``): the
barrier bounds backed off by ``cbf_margin`` 0.01 rad, and per support leg by the barrier's steady
offset under the estimated external torque (``cbf_margin_mode: tau_ext``, the torque-aware boundary),
a touchdown filter trusting joint velocities less (``touchdown.sigma_dq_meas`` 0.15 rad/s), and the
leg-collision barrier on (``leg_collision_barrier``; its rows stay loose while the legs are far apart);
``paper`` keeps the parameter files' values, the paper's
method (``cbf_margin`` 0, ``sigma_dq_meas`` 0.05), which reproduces its Table 3.

The drives: ``actuators`` (``ideal``, the default: perfect torque sources up to the joint's effort
limit, no joint friction; ``realistic``: the robot YAML's torque-speed envelope at every physics
step and its Coulomb + viscous joint friction; see :mod:`mujoco_bridge.sim`).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import yaml

from legged_wbc import terrain as _terrain
from legged_wbc.robot import ConfigError, find_config, load_yaml_file


@dataclass(frozen=True)
class Disturbance:
    enabled: bool
    leg: str
    torque_nm: float
    sign: int
    start: float       # absolute start time [s]
    duration: float

    def active_window(self, t: float) -> bool:
        return self.enabled and self.start <= t < self.start + self.duration


@dataclass(frozen=True)
class Push:
    enabled: bool
    force_n: float     # along world y (lateral), signed [N]
    start: float       # absolute start time [s]
    duration: float

    def force_world(self) -> tuple[float, float, float]:
        return (0.0, self.force_n, 0.0)


@dataclass(frozen=True)
class Squeeze:
    """Hip-yaw torques that turn two neighbouring legs towards each other (``leg_squeeze``)."""

    enabled: bool
    legs: tuple        # (leg a, leg b) names
    torque_nm: float   # on each hip yaw joint, towards the other leg [N m]
    start: float       # absolute start time [s]
    duration: float

    def active_window(self, t: float) -> bool:
        return self.enabled and self.start <= t < self.start + self.duration


# Keys a scenario file may omit (older files): filled in before the overrides are applied.
PHYSICS_DEFAULTS = {
    "squeeze": {"enabled": False, "legs": ["lf", "lm"], "torque_nm": 0.0, "start_offset": 0.0, "duration": 0.0},
    "ground": {"friction": None},
    "payload": {"mass_kg": 0.0},
    "push": {"enabled": False, "force_n": 0.0, "start_offset": 0.0, "duration": 0.0},
    "terrain": dict(_terrain.DEFAULTS),
}
# Top-level keys a scenario file may omit, with their defaults.
SCALAR_DEFAULTS = {"command_delay_ticks": 0, "sensor_delay_ticks": 0, "actuators": "ideal", "preset": "robust"}
ACTUATOR_MODELS = ("ideal", "realistic")
# Settings presets (scenario key ``preset``): overrides under the scenario's controller / estimator blocks.
PRESETS = {
    "robust": {"controller": {"cbf_margin": 0.01, "cbf_margin_mode": "tau_ext", "leg_collision_barrier": True},
               "estimator": {"touchdown": {"sigma_dq_meas": 0.15}}},
    "paper": {"controller": {}, "estimator": {}},      # the parameter files as they are: the paper's method
}


def _merged(base: dict, top: dict) -> dict:
    """``base`` with ``top`` on it (nested dicts merged, ``top`` wins); new dicts."""
    out = copy.deepcopy(base)
    for k, v in top.items():
        out[k] = _merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


@dataclass(frozen=True)
class Scenario:
    name: str
    robot: str
    initial_height: float
    stand_up_start: float
    stand_up_duration: float
    stand_height: float
    gait_start: float
    t_s: float
    forward_velocity: float
    window: float
    duration: float
    disturbance: Disturbance
    fall_min_height: float
    fall_max_tilt_deg: float
    noise: dict
    controller: dict
    estimator: dict
    raw: dict
    friction: float | None             # foot-floor friction (None: the robot config's)
    payload_kg: float                  # mass added to the body [kg]
    push: Push
    command_delay_ticks: int = 0       # the command answering tick k acts from period k + 1 + N
    sensor_delay_ticks: int = 0        # the sample of tick k reports the state of tick k - N
    actuators: str = "ideal"           # ideal | realistic (mujoco_bridge.sim)
    preset: str = "robust"             # robust | paper (PRESETS; already in controller / estimator)
    terrain: _terrain.Terrain = _terrain.Terrain()   # the ground (legged_wbc.terrain)
    squeeze: Squeeze = Squeeze(False, ("lf", "lm"), 0.0, 0.0, 0.0)   # hip-yaw squeeze of two legs

    def physics(self) -> dict:
        """What :meth:`mujoco_bridge.sim.MujocoSim.set_physics` takes for this scenario."""
        p = self.push
        push = (p.force_world(), p.start, p.start + p.duration) if p.enabled and p.duration > 0 else None
        return {"friction": self.friction, "payload_kg": self.payload_kg, "push": push}

    @property
    def eval_window(self) -> tuple[float, float]:
        return self.t_s, self.t_s + self.window

    def controller_overrides(self, mode: str) -> dict:
        """WBC parameters implied by the scenario, then the scenario's explicit overrides."""
        d = {"relative_pitch_mode": mode, "stand_height": self.stand_height, "stand_up_start": self.stand_up_start,
             "stand_up_duration": self.stand_up_duration, "forward_velocity": self.forward_velocity,
             "velocity_ramp_end": self.t_s}
        d.update(self.controller)
        return d

    def gait_dict(self, robot_gait: dict) -> dict:
        g = dict(robot_gait)
        g["start_time"] = self.gait_start
        return g


def _set_dotted(d: dict, key: str, value) -> None:
    parts = key.split(".")
    cur = d
    for k, p in enumerate(parts[:-1]):
        if p not in cur or not isinstance(cur[p], dict):
            if parts[0] in ("controller", "estimator") and (k == 0 or p not in cur):
                cur[p] = {}   # e.g. estimator.touchdown.gamma_land: nested parameter names
            else:
                raise ConfigError(f"--set {key}: no such scenario key {'.'.join(parts[:k + 1])!r}")
        cur = cur[p]
    leaf = parts[-1]
    if parts[0] in ("controller", "estimator") and len(parts) >= 2:
        cur[leaf] = value
        return
    if leaf not in cur:
        raise ConfigError(f"--set {key}: no such scenario key (known here: {sorted(cur)})")
    cur[leaf] = value


def parse_overrides(items: list[str] | None) -> list[tuple[str, object]]:
    out = []
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected key=value")
        k, v = item.split("=", 1)
        out.append((k.strip(), yaml.safe_load(v)))
    return out


def load_scenario(name_or_path: str, overrides: list[str] | None = None) -> Scenario:
    p = find_config("scenarios", name_or_path, "scenario")
    doc = load_yaml_file(p)
    if not isinstance(doc, dict) or "scenario" not in doc:
        raise ConfigError(f"{p}: not a scenario file (no top-level 'scenario:' mapping)")
    raw = with_physics_defaults(doc["scenario"])   # so --set push.* etc. works on older files
    for k, v in parse_overrides(overrides):
        _set_dotted(raw, k, v)
    return scenario_from_dict(raw)


def with_physics_defaults(raw: dict) -> dict:
    """A deep copy of ``raw`` with the keys of :data:`PHYSICS_DEFAULTS` and :data:`SCALAR_DEFAULTS`
    it lacks."""
    raw = copy.deepcopy(raw)
    for k, v in SCALAR_DEFAULTS.items():
        raw.setdefault(k, v)
    for sec, vals in PHYSICS_DEFAULTS.items():
        cur = raw.get(sec)
        if not isinstance(cur, dict):
            cur = raw[sec] = {}
        for k, v in vals.items():
            cur.setdefault(k, v)
    return raw


def _delay_ticks(value, key: str = "command_delay_ticks") -> int:
    """A delay in ticks: an integer >= 0 (``2`` or ``2.0``; not ``2.5``, ``true`` or ``-1``)."""
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or value != int(value) or value < 0):
        raise ConfigError(f"scenario.{key}: must be an integer >= 0, got {value!r}")
    return int(value)


def _actuators(value) -> str:
    if value not in ACTUATOR_MODELS:
        raise ConfigError(f"scenario.actuators: must be one of {', '.join(ACTUATOR_MODELS)}, got {value!r}")
    return value


def _estimator_base(preset: str, terrain: dict | None) -> dict:
    """The estimator settings under a scenario's own ``estimator`` block: the preset's, and off flat
    ground (``terrain.kind`` other than flat) :data:`legged_wbc.terrain.ESTIMATOR_OFF_FLAT` over them
    (so a terrain drawn by a sweep or set with ``--set terrain.kind=...`` gets them too)."""
    base = PRESETS[preset]["estimator"]
    if str((terrain or {}).get("kind", "flat")) != "flat":
        base = _merged(base, _terrain.ESTIMATOR_OFF_FLAT)
    return base


def scenario_from_dict(raw: dict) -> Scenario:
    raw = with_physics_defaults(raw)
    delay = _delay_ticks(raw["command_delay_ticks"])
    sensor_delay = _delay_ticks(raw["sensor_delay_ticks"], "sensor_delay_ticks")
    actuators = _actuators(raw["actuators"])
    preset = raw["preset"]
    if preset not in PRESETS:
        raise ConfigError(f"scenario.preset: must be one of {', '.join(PRESETS)}, got {preset!r}")
    try:
        walk, su, dist = raw["walk"], raw["stand_up"], raw["disturbance"]
        t_s = float(walk["t_s"])
        sc = Scenario(
            name=str(raw["name"]), robot=str(raw.get("robot", "hexapod")),
            initial_height=float(raw["initial_height"]),
            stand_up_start=float(su["start"]), stand_up_duration=float(su["duration"]),
            stand_height=float(su["height"]),
            gait_start=float(walk["gait_start"]), t_s=t_s, forward_velocity=float(walk["forward_velocity"]),
            window=float(raw["evaluation"]["window"]), duration=float(raw["duration"]),
            disturbance=Disturbance(enabled=bool(dist["enabled"]), leg=str(dist["leg"]),
                                    torque_nm=float(dist["torque_nm"]), sign=int(dist["sign"]),
                                    start=t_s + float(dist["start_offset"]), duration=float(dist["duration"])),
            fall_min_height=float(raw["fall"]["min_height"]), fall_max_tilt_deg=float(raw["fall"]["max_tilt_deg"]),
            noise=dict(raw.get("noise", {})),
            controller=_merged(PRESETS[preset]["controller"], dict(raw.get("controller") or {})),
            estimator=_merged(_estimator_base(preset, raw["terrain"]), dict(raw.get("estimator") or {})), raw=raw,
            friction=None if raw["ground"]["friction"] is None else float(raw["ground"]["friction"]),
            payload_kg=float(raw["payload"]["mass_kg"]),
            push=Push(enabled=bool(raw["push"]["enabled"]), force_n=float(raw["push"]["force_n"]),
                      start=t_s + float(raw["push"]["start_offset"]), duration=float(raw["push"]["duration"])),
            command_delay_ticks=delay, sensor_delay_ticks=sensor_delay, actuators=actuators, preset=preset,
            terrain=_terrain.Terrain.from_dict(raw["terrain"]),
            squeeze=Squeeze(enabled=bool(raw["squeeze"]["enabled"]),
                            legs=tuple(str(x) for x in raw["squeeze"]["legs"]),
                            torque_nm=float(raw["squeeze"]["torque_nm"]),
                            start=t_s + float(raw["squeeze"]["start_offset"]),
                            duration=float(raw["squeeze"]["duration"])))
    except KeyError as exc:
        raise ConfigError(f"scenario: missing key {exc}") from exc
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"scenario: bad value ({exc})") from exc
    if sc.duration <= 0:
        raise ConfigError(f"scenario.duration: must be > 0, got {sc.duration}")
    if sc.disturbance.sign not in (-1, 1):
        raise ConfigError(f"scenario.disturbance.sign: must be +1 or -1, got {sc.disturbance.sign}")
    if sc.disturbance.torque_nm < 0:
        raise ConfigError(f"scenario.disturbance.torque_nm: must be >= 0, got {sc.disturbance.torque_nm}")
    if sc.friction is not None and not sc.friction > 0:
        raise ConfigError(f"scenario.ground.friction: must be > 0 (or null), got {sc.friction}")
    if len(sc.squeeze.legs) != 2 or sc.squeeze.legs[0] == sc.squeeze.legs[1]:
        raise ConfigError(f"scenario.squeeze.legs: two different legs, got {list(sc.squeeze.legs)}")
    if sc.squeeze.torque_nm < 0 or sc.squeeze.duration < 0:
        raise ConfigError("scenario.squeeze: torque_nm and duration must be >= 0")
    if sc.push.duration < 0:
        raise ConfigError(f"scenario.push.duration: must be >= 0, got {sc.push.duration}")
    if not sc.gait_start <= sc.t_s:
        raise ConfigError(f"scenario.walk.t_s ({sc.t_s}) must be >= walk.gait_start ({sc.gait_start})")
    return sc


class DisturbanceModel:
    """The scenario's disturbance as the simulation applies it (headless loop and bridge node).

    ``torque(t, joint_pos, leg_in_support)`` [N m, Pinocchio joint order]: ``torque_nm`` along
    the unit null-space vector of the disturbed leg's ``J_p`` (sign +1 increases the relative
    pitch), while the window is open and the leg is in the *estimated* support set; plus the
    squeeze (:class:`Squeeze`): ``torque_nm`` on the hip yaw of each of its two legs, towards the
    other, while its window is open and that leg is outside the estimated support set ``support``
    (all legs, bool; None: applied) - a stance foot would slip under it instead."""

    def __init__(self, sc: Scenario, robot):
        self.dist = sc.disturbance
        self.squeeze = sc.squeeze
        self.robot = robot
        names = robot.cfg.leg_names
        if self.dist.enabled and self.dist.leg not in names:
            raise ValueError(f"scenario.disturbance.leg: unknown leg {self.dist.leg!r} (legs: {names})")
        self.leg = names.index(self.dist.leg) if self.dist.leg in names else 0
        self._squeeze_tau = self._squeeze_torque(sc.squeeze, robot) if sc.squeeze.enabled else None
        self._squeeze_legs = [names.index(x) for x in sc.squeeze.legs] if sc.squeeze.enabled else []

    @staticmethod
    def _squeeze_torque(sq: Squeeze, robot):
        """The squeeze's joint torque: ``torque_nm`` on each of the two legs' first joint (the hip
        yaw), with the sign that turns its nominal foot towards the other leg's (the sign of
        ``z . ((p_a - o_a) x (p_b - o_a))``, ``o_a`` the hip, ``p`` the nominal feet, base frame)."""
        import numpy as np

        names = robot.cfg.leg_names
        for leg in sq.legs:
            if leg not in names:
                raise ValueError(f"scenario.squeeze.legs: unknown leg {leg!r} (legs: {names})")
        a, b = (names.index(x) for x in sq.legs)
        feet = [p for p, _ in robot.stance_targets()]
        tau = np.zeros(robot.n)
        for i, o in ((a, b), (b, a)):
            hip = np.asarray(robot.cfg.legs[i].mount_xyz, dtype=float)
            u, w = feet[i] - hip, feet[o] - hip
            tau[robot.leg_joints[i][0]] = sq.torque_nm * np.sign(u[0] * w[1] - u[1] * w[0])
        return tau

    def active(self, t: float) -> bool:
        return self.dist.active_window(t) or self.squeeze.active_window(t)

    def torque(self, t: float, joint_pos, leg_in_support: bool, support=None):
        import numpy as np

        from legged_wbc.model import null_vector

        tau = np.zeros(self.robot.n)
        if self.dist.active_window(t) and leg_in_support:
            J_p, J_theta = self.robot.leg_jacobians(np.asarray(joint_pos, dtype=float), self.leg)
            tau[self.robot.leg_joints[self.leg]] = self.dist.sign * self.dist.torque_nm * null_vector(J_p, J_theta)
        if self._squeeze_tau is not None and self.squeeze.active_window(t):
            for i in self._squeeze_legs:          # a leg while it is outside the estimated support set
                if support is None or not support[i]:
                    lj = self.robot.leg_joints[i]
                    tau[lj] += self._squeeze_tau[lj]
        return tau


def dump_scenario(sc: Scenario) -> str:
    return yaml.safe_dump({"scenario": sc.raw}, sort_keys=False)
