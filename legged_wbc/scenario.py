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
import difflib
import math
from dataclasses import dataclass, field

import yaml

from legged_wbc import terrain as _terrain
from legged_wbc.params import FieldSpec, flatten
from legged_wbc.robot import ConfigError, find_config, load_yaml_file, load_yaml_text


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
    "noise": {"joint_velocity": 0.0, "gyro": 0.0, "accel": 0.0, "seed": 0},
    "gait": {"type": "", "period": None, "duty": None},
}
# Top-level keys a scenario file may omit, with their defaults.
SCALAR_DEFAULTS = {"command_delay_ticks": 0, "sensor_delay_ticks": 0, "actuators": "ideal", "preset": "robust",
                   "robot": "hexapod", "commands": None}
MAX_DELAY_TICKS = 500      # 1 s of 2 ms control ticks: the longest command / sensor delay a scenario may give
ACTUATOR_MODELS = ("ideal", "realistic")
# Settings presets (scenario key ``preset``): overrides under the scenario's controller / estimator blocks.
PRESETS = {
    "robust": {"controller": {"cbf_margin": 0.01, "cbf_margin_mode": "tau_ext", "leg_collision_barrier": True},
               "estimator": {"touchdown": {"sigma_dq_meas": 0.15}}},
    "paper": {"controller": {}, "estimator": {}},      # the parameter files as they are: the paper's method
}


# ------------------------------------------------------------------------------------ the scenario schema
# Every key of a scenario (file, ``--set``, a sweep's draws) is checked here, once: unknown keys (with the
# closest names), types (an integer key takes an integral number only), finiteness and ranges, as the
# node parameters are (legged_wbc.params.FieldSpec). ``controller`` / ``estimator`` hold node parameters,
# checked by the nodes' own schemas; ``terrain`` by legged_wbc.terrain.Terrain.
_DAY = 86400.0             # the longest time a scenario may give [s]


def _spec(name: str, default, lo=None, hi=None, unit: str = "s", desc: str = "", typ: str | None = None,
          choices=None) -> FieldSpec:
    typ = typ or {bool: "bool", int: "int", float: "float", str: "str"}[type(default)]
    return FieldSpec(name=f"scenario.{name}", type=typ, default=default, min=lo, max=hi, choices=choices,
                     description=desc + (f" [{unit}]" if unit else ""), unit=unit)


def _time(name: str, desc: str, lo: float = 0.0) -> FieldSpec:
    return _spec(name, 0.0, lo, _DAY, "s", desc)


SCHEMA = {s.name[len("scenario."):]: s for s in (
    _spec("name", "", unit="", desc="scenario name"),
    _spec("robot", "hexapod", unit="", desc="robot config (config/robot_NAME.yaml)"),
    _spec("initial_height", 0.3, 0.05, 2.0, "m", "base height at t = 0"),
    _time("stand_up.start", "stand-up start"), _time("stand_up.duration", "stand-up duration"),
    _spec("stand_up.height", 0.42, 0.1, 1.5, "m", "standing / walking base height"),
    _time("walk.gait_start", "gait start"), _time("walk.t_s", "steady walking from"),
    _spec("walk.forward_velocity", 0.1, -2.0, 2.0, "m/s", "forward speed"),
    _time("evaluation.window", "metrics window length"), _spec("duration", 1.0, 0.0, _DAY, "s", "run length"),
    _spec("disturbance.enabled", False, unit=""), _spec("disturbance.leg", "lh", unit="", desc="disturbed leg"),
    _spec("disturbance.torque_nm", 0.0, 0.0, 1000.0, "N m", "null-space torque"),
    _spec("disturbance.sign", 1, unit="", desc="direction", choices=(-1, 1)),
    _time("disturbance.start_offset", "start after walk.t_s", -_DAY), _time("disturbance.duration", "length"),
    _spec("fall.min_height", 0.22, 0.0, 2.0, "m", "fall: base height below"),
    _spec("fall.max_tilt_deg", 35.0, 0.0, 180.0, "deg", "fall: base tilt above"),
    _spec("noise.joint_velocity", 0.0, 0.0, 100.0, "rad/s", "joint velocity noise std"),
    _spec("noise.gyro", 0.0, 0.0, 100.0, "rad/s", "gyro noise std"),
    _spec("noise.accel", 0.0, 0.0, 1000.0, "m/s^2", "accelerometer noise std"),
    _spec("noise.seed", 0, 0, 2**63 - 1, "", "noise seed"),
    _spec("ground.friction", 0.9, 0.0, 10.0, "", "foot-floor friction (null: the robot config's)"),
    _spec("payload.mass_kg", 0.0, -1000.0, 1000.0, "kg", "mass added to the body"),
    _spec("push.enabled", False, unit=""), _spec("push.force_n", 0.0, -1e4, 1e4, "N", "lateral force"),
    _time("push.start_offset", "start after walk.t_s", -_DAY), _time("push.duration", "length"),
    _spec("squeeze.enabled", False, unit=""), _spec("squeeze.legs", ("lf", "lm"), unit="", typ="str_array"),
    _spec("squeeze.torque_nm", 0.0, 0.0, 1000.0, "N m", "hip-yaw torque"),
    _time("squeeze.start_offset", "start after walk.t_s", -_DAY), _time("squeeze.duration", "length"),
    _spec("command_delay_ticks", 0, 0, MAX_DELAY_TICKS, "", "command delay in 2 ms ticks"),
    _spec("sensor_delay_ticks", 0, 0, MAX_DELAY_TICKS, "", "sensor delay in 2 ms ticks"),
    _spec("actuators", "ideal", unit="", choices=ACTUATOR_MODELS), _spec("preset", "robust", unit=""),
    _spec("gait.type", "", unit="", desc="gait: one of the robot's named gaits (robot YAML gait.gaits, e.g. trot, "
          "crawl); empty: the robot's default gait"),
    _spec("gait.period", 1.0, 0.05, 10.0, "s", "gait cycle period (null: the selected gait's)"),
    _spec("gait.duty", 0.6, 0.0, 1.0, "", "support duty factor of each leg (null: the selected gait's)"),
    _spec("commands", None, unit="", typ="float_array", desc="velocity command schedule [{t: s, vx: m/s, vy: m/s, "
          "wz: rad/s}, ...] (null: the walk's forward_velocity ramp)"),
)}
NODE_SECTIONS = ("controller", "estimator")   # node parameters (checked by the nodes' schemas)
LIST_KEYS = ("commands",)   # lists checked where they are used (the velocity command schedule: closed_loop)
NULLABLE = ("ground.friction", "commands", "gait.period", "gait.duty")
TERRAIN_KEYS = tuple(f"terrain.{k}" for k in _terrain.DEFAULTS)
SECTIONS = tuple(sorted({k.split(".")[0] for k in SCHEMA if "." in k} | {"terrain"}))


def _unknown(key: str, where: str) -> ConfigError:
    """The error of an unknown scenario key: the closest known names, else the names at its level."""
    known = list(SCHEMA) + list(TERRAIN_KEYS) + list(NODE_SECTIONS) + list(LIST_KEYS)
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.75)
    prefix = key.rsplit(".", 1)[0] + "." if "." in key else ""
    level = sorted({k[len(prefix):].split(".")[0] for k in known if k.startswith(prefix)}) or \
        sorted({k.split(".")[0] for k in known})
    hint = f"did you mean {' or '.join(close)}?" if close else f"known here: {', '.join(level)}"
    return ConfigError(f"{where}: no such scenario key ({hint})")


def known_key(key: str) -> bool:
    """A key ``--set`` may give: a schema key, a section, a terrain key, or under controller / estimator."""
    return (key in SCHEMA or key in TERRAIN_KEYS or key in SECTIONS or key in LIST_KEYS
            or key.split(".")[0] in NODE_SECTIONS)


def checked_raw(raw: dict) -> dict:
    """A copy of ``raw`` (defaults filled in) with every :data:`SCHEMA` key checked and coerced; an
    unknown key, a missing one, a bad type, a non-finite or out-of-range value is a ConfigError."""
    if not isinstance(raw, dict):
        raise ConfigError(f"scenario: expected a mapping, got {type(raw).__name__}")
    out = with_physics_defaults(raw)
    for sec in SECTIONS + NODE_SECTIONS:
        if out.get(sec) is not None and not isinstance(out[sec], dict):
            raise ConfigError(f"scenario.{sec}: expected a mapping, got {out[sec]!r}")
    for key in LIST_KEYS:
        if out.get(key) is not None and not isinstance(out[key], list):
            raise ConfigError(f"scenario.{key}: expected a list, got {out[key]!r}")
    own = {k: v for k, v in out.items() if k not in NODE_SECTIONS + LIST_KEYS + ("terrain",)}
    for key in flatten(own):
        if key not in SCHEMA:
            raise _unknown(key, f"scenario.{key}")
    for key in flatten(out.get("terrain") or {}, "terrain."):
        if key not in TERRAIN_KEYS:
            raise _unknown(key, f"scenario.{key}")
    for key, spec in SCHEMA.items():
        *path, leaf = key.split(".")
        cur = out
        for part in path:
            cur = cur.get(part)
            if not isinstance(cur, dict):
                raise ConfigError(f"scenario: missing key {part!r}")
        if leaf not in cur:
            raise ConfigError(f"scenario: missing key {key!r}")
        value = cur[leaf]
        if value is None and key in NULLABLE:
            continue
        value = _SPECIAL[key](value) if key in _SPECIAL else spec.coerce(value)
        cur[leaf] = list(value) if isinstance(value, tuple) else value
    return out


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
    robot_controller: dict = field(default_factory=dict)   # the robot's own defaults (legged_wbc.robot_defaults)
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
        """WBC parameters: the robot's defaults (:mod:`legged_wbc.robot_defaults`; none for a generated
        robot), those implied by the scenario, then the scenario's explicit overrides."""
        d = dict(self.robot_controller)
        d.update({"relative_pitch_mode": mode, "stand_height": self.stand_height, "stand_up_start": self.stand_up_start,
             "stand_up_duration": self.stand_up_duration, "forward_velocity": self.forward_velocity,
             "velocity_ramp_end": self.t_s})
        d.update(self.controller)
        return d

    def gait_dict(self, robot_gait: dict) -> dict:
        """The gait (:class:`legged_wbc.gait.GaitConfig`'s dict) of this scenario on a robot whose YAML
        ``gait`` section is ``robot_gait``: the robot's default gait, or with ``gait.type`` the named
        one of its ``gaits`` (groups, period, duty), then the scenario's ``gait.period`` / ``gait.duty``
        if given; ``start_time`` the walk's ``gait_start``."""
        return gait_dict_of(robot_gait, self.raw.get("gait") or {}, self.gait_start)


def gait_dict_of(robot_gait: dict, choice: dict, start_time: float | None = None) -> dict:
    """:meth:`Scenario.gait_dict` from the robot YAML's ``gait`` section and a scenario's ``gait``
    mapping (``type``, ``period``, ``duty``; each may be missing). An unknown ``type`` is a
    ConfigError naming the robot's gaits."""
    g = {k: v for k, v in robot_gait.items() if k != "gaits"}
    named = robot_gait.get("gaits") or {}
    kind = str(choice.get("type") or "")
    if kind:
        if kind not in named:
            raise ConfigError(f"scenario.gait.type: {kind!r} is not one of the robot's gaits "
                              f"({', '.join(named) or 'none: robot YAML gait.gaits'})")
        g.update(named[kind])
    for key in ("period", "duty"):
        if choice.get(key) is not None:
            g[key] = float(choice[key])
    if start_time is not None:
        g["start_time"] = start_time
    return g


def _set_dotted(d: dict, key: str, value) -> None:
    """``d[a][b]... = value`` for ``--set a.b...=value``; the key must be one :func:`known_key` names
    (the value is checked with the rest by :func:`checked_raw`)."""
    if not known_key(key):
        raise _unknown(key, f"--set {key}")
    parts = key.split(".")
    cur = d
    for p in parts[:-1]:
        if not isinstance(cur.get(p), dict):
            cur[p] = {}   # e.g. estimator.touchdown.gamma_land: nested parameter names
        cur = cur[p]
    cur[parts[-1]] = value


def parse_overrides(items: list[str] | None) -> list[tuple[str, object]]:
    """``["key=value", ...]`` -> ``[(key, value parsed as YAML), ...]``; a ConfigError names the item."""
    out = []
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected key=value")
        k, v = item.split("=", 1)
        out.append((k.strip(), load_yaml_text(v, f"--set {k.strip()}")))
    return out


def load_scenario(name_or_path: str, overrides: list[str] | None = None) -> Scenario:
    p = find_config("scenarios", name_or_path, "scenario")
    doc = load_yaml_file(p)
    if not isinstance(doc, dict) or not isinstance(doc.get("scenario"), dict):
        raise ConfigError(f"{p}: not a scenario file (no top-level 'scenario:' mapping)")
    if set(doc) != {"scenario"}:
        raise ConfigError(f"{p}: unknown top-level key(s) {sorted(str(k) for k in doc if k != 'scenario')} "
                          "(a scenario file holds one 'scenario:' mapping)")
    try:
        raw = checked_raw(doc["scenario"])   # the file itself, then the overrides; defaults filled in
    except ConfigError as exc:
        raise ConfigError(f"{p}: {exc}") from None
    pairs = parse_overrides(overrides)
    new_robot = dict(pairs).get("robot")
    if new_robot is not None and str(new_robot) != str(raw.get("robot")):
        # a scenario run on another robot than its own takes that robot's size (robot_defaults.scenario_geometry)
        from legged_wbc.robot_defaults import defaults_of

        for k, v in defaults_of(str(new_robot))[2].items():
            _set_dotted(raw, k, v)
    for k, v in pairs:
        _set_dotted(raw, k, v)
    return scenario_from_dict(raw)


def load_scenario_on(name_or_path: str, robot: str) -> Scenario:
    """The scenario as a node that runs ``robot`` (its ``robot`` parameter) loads it: on that robot
    (a scenario written for another takes this one's heights and settings, :func:`load_scenario`)."""
    return load_scenario(name_or_path, [f"robot={robot}"])


def node_overrides(scenario: str, robot: str, mode: str | None = None) -> dict:
    """What a node takes at start-up from its ``scenario`` and ``robot`` parameters, on top of its parameter
    file: with ``mode`` (the controller's ``relative_pitch_mode``) the controller's parameters
    (:meth:`Scenario.controller_overrides` without the mode), else the estimator's block; without a
    scenario (``""`` / ``none``) the robot's own defaults (:mod:`legged_wbc.robot_defaults`)."""
    from legged_wbc.robot_defaults import defaults_of

    if scenario in ("", "none"):
        return dict(defaults_of(robot)[0 if mode is not None else 1])
    sc = load_scenario_on(scenario, robot)
    if mode is None:
        return dict(sc.estimator)
    return {k: v for k, v in sc.controller_overrides(mode).items() if k != "relative_pitch_mode"}


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
    """A delay in ticks: an integer in [0, :data:`MAX_DELAY_TICKS`] (``2`` or ``2.0``; not ``2.5``,
    ``true``, ``-1`` or ``1e9``)."""
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or value != int(value) or not 0 <= value <= MAX_DELAY_TICKS):
        raise ConfigError(f"scenario.{key}: must be an integer >= 0 and <= {MAX_DELAY_TICKS}, got {value!r}")
    return int(value)


def _actuators(value) -> str:
    if value not in ACTUATOR_MODELS:
        raise ConfigError(f"scenario.actuators: must be one of {', '.join(ACTUATOR_MODELS)}, got {value!r}")
    return value


def _preset(value) -> str:
    if not isinstance(value, str) or value not in PRESETS:
        raise ConfigError(f"scenario.preset: must be one of {', '.join(PRESETS)}, got {value!r}")
    return value


COMMAND_RANGE = {"vx": 2.0, "vy": 2.0, "wz": 5.0}   # |value| bounds of a scheduled command [m/s, m/s, rad/s]


def _commands(value) -> list:
    """``commands``: a non-empty list of ``{t, vx, vy, wz}`` (each held from ``t`` [s] until the next;
    ``t`` >= 0, finite, strictly increasing; values finite within :data:`COMMAND_RANGE`; the
    controller's own limits are checked where it is built)."""
    if not isinstance(value, list) or not value:
        raise ConfigError(f"scenario.commands: a non-empty list of {{t, vx, vy, wz}}, got {value!r}")
    out, last = [], -math.inf
    for k, e in enumerate(value):
        if not isinstance(e, dict) or set(e) != {"t", "vx", "vy", "wz"}:
            raise ConfigError(f"scenario.commands[{k}]: a mapping with the keys t, vx, vy, wz, got {e!r}")
        try:
            d = {key: float(e[key]) for key in ("t", "vx", "vy", "wz")}
        except (TypeError, ValueError):
            raise ConfigError(f"scenario.commands[{k}]: not numbers ({e!r})") from None
        if any(isinstance(e[key], bool) or not math.isfinite(d[key]) for key in d):
            raise ConfigError(f"scenario.commands[{k}]: values must be finite numbers, got {e!r}")
        if not (last < d["t"] <= _DAY and d["t"] >= 0.0):
            raise ConfigError(f"scenario.commands[{k}].t: {d['t']} (times must be >= 0 and strictly increasing)")
        for key, m in COMMAND_RANGE.items():
            if abs(d[key]) > m:
                raise ConfigError(f"scenario.commands[{k}].{key}: {d[key]} out of range [-{m}, {m}]")
        out.append(d)
        last = d["t"]
    return out


# keys with a check of their own (and messages the README quotes), instead of FieldSpec.coerce
_SPECIAL = {"command_delay_ticks": _delay_ticks,
            "sensor_delay_ticks": lambda v: _delay_ticks(v, "sensor_delay_ticks"),
            "actuators": _actuators, "preset": _preset, "commands": _commands}


def _estimator_base(preset: str, terrain: dict | None) -> dict:
    """The estimator settings under a scenario's own ``estimator`` block: the preset's, and off flat
    ground (``terrain.kind`` other than flat) :data:`legged_wbc.terrain.ESTIMATOR_OFF_FLAT` over them
    (so a terrain drawn by a sweep or set with ``--set terrain.kind=...`` gets them too)."""
    base = PRESETS[preset]["estimator"]
    if str((terrain or {}).get("kind", "flat")) != "flat":
        base = _merged(base, _terrain.ESTIMATOR_OFF_FLAT)
    return base


def _robot_defaults(robot) -> tuple[dict, dict]:
    """``(controller, estimator)`` defaults of the scenario's robot (:mod:`legged_wbc.robot_defaults`)."""
    from legged_wbc.robot_defaults import defaults_of

    ctl, est, _ = defaults_of(str(robot))
    return ctl, est


def _preset_for_robot(preset: dict, robot_ctl: dict) -> dict:
    """A preset's controller settings, the robot's own defaults taking precedence on the keys both set
    (e.g. the robust preset's leg-collision barrier, which only the generated robots' links allow)."""
    return {k: robot_ctl.get(k, v) for k, v in preset.items()}


def scenario_from_dict(raw: dict) -> Scenario:
    """The scenario of a ``scenario:`` mapping, checked against :data:`SCHEMA` (:func:`checked_raw`)."""
    raw = checked_raw(raw)
    robot_ctl, robot_est = _robot_defaults(raw.get("robot", "hexapod"))
    delay, sensor_delay = raw["command_delay_ticks"], raw["sensor_delay_ticks"]
    actuators, preset = raw["actuators"], raw["preset"]
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
            controller=_merged(_preset_for_robot(PRESETS[preset]["controller"], robot_ctl),
                               dict(raw.get("controller") or {})),
            estimator=_merged(_merged(robot_est, _estimator_base(preset, raw["terrain"])),
                              dict(raw.get("estimator") or {})), raw=raw, robot_controller=robot_ctl,
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
        if self.dist.enabled and not robot.leg_has_pitch[names.index(self.dist.leg)]:
            raise ValueError(f"scenario.disturbance: a torque along the null space of J_p needs a leg with the foot "
                             f"pitch joint; {robot.cfg.name}'s leg {self.dist.leg!r} has {robot.k} joints and none "
                             "(disturbance.enabled=false)")
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
            hip = np.asarray(robot.cfg.leg_specs[i].hip_xyz, dtype=float)
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
