"""Robot description: config dataclasses, loading from YAML, and the URDF generator.

The robot YAML (``config/robot_*.yaml``) is the single place where masses, lengths and limits are
written; :func:`generate_urdf` turns it into the URDF in ``urdf/`` that Pinocchio and MuJoCo both
load. Leg names, joint names, foot links and the nominal stance all come from here, so a different
leg count is a config change.

Geometry of one leg (leg frame: x along the leg heading, z up, after the mount rotation):

* ``hip_yaw``   axis z, at the mount point;
* ``hip_pitch`` axis y, ``coxa_length`` along x;
* ``knee``      axis y, ``femur_length`` along x;
* ``ankle``     axis y, ``tibia_length`` along x;
* foot link: hangs along its own -z, the foot sphere centre ``foot_length`` below the ankle.

A positive pitch rotation about +y turns +x towards -z (down). With the mount not rolled, the foot
link's x-axis is horizontal when ``hip_pitch + knee + ankle = 0`` (relative pitch 0).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from legged_wbc.description import (MAX_YAML_BYTES, MAX_YAML_NODES, ConfigError, FootGeometry,  # noqa: F401
                                    JointTable, LegSpec, load_yaml_file, load_yaml_text)

PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def share_path(*parts: str) -> Path:
    """Path of a package data file (``config/``, ``urdf/``, ``launch/``).

    Looks in the source tree first, then in the ``share/legged_wbc`` (ament layout) of the prefix this
    package is installed in (``<prefix>/lib/pythonX.Y/site-packages``), then of ``AMENT_PREFIX_PATH``."""
    candidates = [PACKAGE_ROOT.joinpath(*parts)]
    if PACKAGE_ROOT.name in ("site-packages", "dist-packages") and len(PACKAGE_ROOT.parents) >= 3:
        candidates.append(PACKAGE_ROOT.parents[2].joinpath("share", "legged_wbc", *parts))
    prefix = os.environ.get("AMENT_PREFIX_PATH", "")
    for p in prefix.split(os.pathsep):
        if p:
            candidates.append(Path(p, "share", "legged_wbc", *parts))
    for c in candidates:
        if c.exists():
            return c
    return candidates[0]


def _vec(name: str, value, n: int) -> tuple[float, ...]:
    try:
        arr = [float(v) for v in value]
    except TypeError as exc:
        raise ConfigError(f"{name}: expected a list of {n} numbers, got {value!r}") from exc
    if len(arr) != n:
        raise ConfigError(f"{name}: expected {n} numbers, got {len(arr)}")
    if not all(math.isfinite(v) for v in arr):
        raise ConfigError(f"{name}: values must be finite, got {arr}")
    return tuple(arr)


def _pos(name: str, value, hi: float = 1e4) -> float:
    """A finite number in (0, ``hi``] (lengths [m] up to 10, masses [kg], limits)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}: must be a positive number, got {value!r}") from None
    if not (math.isfinite(v) and 0.0 < v <= hi):
        raise ConfigError(f"{name}: must be a positive number <= {hi:g}, got {value!r}")
    return v


def _num(name: str, value, lo: float, hi: float) -> float:
    """A finite number in [``lo``, ``hi``]."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}: must be a number, got {value!r}") from None
    if not (math.isfinite(v) and lo <= v <= hi):
        raise ConfigError(f"{name}: must be a finite number in [{lo:g}, {hi:g}], got {value!r}")
    return v


# The keys a robot YAML may hold (a nested dict: a section; ``LEG_KEYS``: each entry of ``legs``).
ROBOT_KEYS = {
    "name": None, "urdf": None, "base": {"link": None, "mass": None, "size": None, "imu_xyz": None},
    "leg_type": {"joint_suffixes": None, "foot_link_suffix": None, "coxa_length": None, "femur_length": None,
                 "tibia_length": None, "foot_length": None, "foot_radius": None, "link_masses": None,
                 "link_radius": None, "armature": None, "lower": None, "upper": None, "effort": None,
                 "velocity": None, "actuator": {"stall_torque": None, "no_load_speed": None,
                                                "coulomb_friction": None, "viscous_friction": None}},
    "legs": None, "stance": {"reach": None, "height": None, "relative_pitch": None},
    "contact": {"friction": None}, "gait": {"groups": None, "period": None, "duty": None, "start_time": None,
                                         "gaits": None},
}
LEG_KEYS = ("name", "mount_xyz", "mount_yaw_deg", "mount_roll_deg")


def check_robot_keys(d: dict, known: dict = ROBOT_KEYS, where: str = "robot") -> None:
    """A ConfigError naming the first key of ``d`` that ``known`` does not have (with the closest names)."""
    import difflib

    for k, v in d.items():
        if k not in known:
            close = difflib.get_close_matches(str(k), list(known), n=3, cutoff=0.75)
            hint = f"did you mean {' or '.join(close)}?" if close else f"known here: {', '.join(known)}"
            raise ConfigError(f"{where}.{k}: no such robot key ({hint})")
        if isinstance(known[k], dict):
            if not isinstance(v, dict):
                raise ConfigError(f"{where}.{k}: expected a mapping, got {v!r}")
            check_robot_keys(v, known[k], f"{where}.{k}")
    legs = d.get("legs") if where == "robot" else None
    for i, leg in enumerate(legs if isinstance(legs, list) else []):
        if not isinstance(leg, dict):
            raise ConfigError(f"robot.legs[{i}]: expected a mapping, got {leg!r}")
        check_robot_keys(leg, dict.fromkeys(LEG_KEYS), f"robot.legs[{i}]")


GAIT_KEYS = ("groups", "period", "duty")     # what a named gait of ``gait.gaits`` may set


def _checked_gait(gait) -> dict:
    """The robot YAML's ``gait`` section (a copy): the default gait (``groups``, ``period``, ``duty``,
    ``start_time``) and, optionally, ``gaits``: named alternatives a scenario selects with
    ``gait.type`` (each a mapping of :data:`GAIT_KEYS`, e.g. ``trot``, ``crawl``)."""
    g = dict(gait or {})
    named = g.get("gaits")
    if named is None:
        g.pop("gaits", None)
        return g
    if not isinstance(named, dict):
        raise ConfigError(f"robot.gait.gaits: expected a mapping of named gaits, got {named!r}")
    for name, spec in named.items():
        if not isinstance(spec, dict) or not set(spec) <= set(GAIT_KEYS):
            raise ConfigError(f"robot.gait.gaits.{name}: a mapping of {', '.join(GAIT_KEYS)}, got {spec!r}")
    g["gaits"] = {str(k): dict(v) for k, v in named.items()}
    return g


@dataclass(frozen=True)
class ActuatorSpec:
    """The joint drives of one leg type as the simulation's ``actuators: realistic`` models them
    (``leg_type.actuator`` of the robot YAML; per joint of the leg, like ``effort``).

    The peak torque is ``leg_type.effort`` (the current limit; also the controller's realistic
    torque bounds). ``stall_torque`` [N m] and ``no_load_speed`` [rad/s] give the voltage line of the
    torque-speed envelope (see :class:`mujoco_bridge.sim.ActuatorEnvelope`); ``coulomb_friction``
    [N m] and ``viscous_friction`` [N m s/rad] become MuJoCo's joint ``frictionloss`` and
    ``damping``. Missing keys: stall torque = effort, no-load speed = ``leg_type.velocity``, no
    friction."""

    stall_torque: tuple[float, ...]
    no_load_speed: tuple[float, ...]
    coulomb_friction: tuple[float, ...]
    viscous_friction: tuple[float, ...]

    @classmethod
    def from_dict(cls, d: dict | None, effort, velocity) -> "ActuatorSpec":
        d = d or {}
        if not isinstance(d, dict):
            raise ConfigError(f"leg_type.actuator: expected a mapping, got {d!r}")
        unknown = sorted(set(d) - {"stall_torque", "no_load_speed", "coulomb_friction", "viscous_friction"})
        if unknown:
            raise ConfigError(f"leg_type.actuator: unknown keys {unknown}")
        pos = {k: tuple(_pos(f"leg_type.actuator.{k}[{i}]", v) for i, v in
                        enumerate(_vec(f"leg_type.actuator.{k}", d.get(k, dflt), 4)))
               for k, dflt in (("stall_torque", effort), ("no_load_speed", velocity))}
        nonneg = {}
        for k in ("coulomb_friction", "viscous_friction"):
            v = _vec(f"leg_type.actuator.{k}", d.get(k, [0.0] * 4), 4)
            if min(v) < 0:
                raise ConfigError(f"leg_type.actuator.{k}: must be >= 0, got {list(v)}")
            nonneg[k] = v
        return cls(**pos, **nonneg)


@dataclass(frozen=True)
class LegType:
    """One leg type shared by all legs (lengths [m], masses [kg], limits [rad], [N m])."""

    joint_suffixes: tuple[str, ...]
    foot_link_suffix: str
    coxa_length: float
    femur_length: float
    tibia_length: float
    foot_length: float
    foot_radius: float
    link_masses: tuple[float, ...]
    link_radius: float
    armature: tuple[float, ...]
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    effort: tuple[float, ...]
    velocity: tuple[float, ...]
    actuator: ActuatorSpec | None = None   # None: stall = effort, no-load speed = velocity, no friction

    def __post_init__(self):
        if len(self.joint_suffixes) != 4:
            raise ConfigError(f"leg_type.joint_suffixes: expected 4 joints per leg, got {len(self.joint_suffixes)}")
        for i, (lo, hi) in enumerate(zip(self.lower, self.upper)):
            if not lo < hi:
                raise ConfigError(f"leg_type.lower/upper[{i}]: lower {lo} must be < upper {hi}")

    @classmethod
    def from_dict(cls, d: dict) -> "LegType":
        effort, velocity = (tuple(_pos(f"leg_type.{k}[{i}]", v) for i, v in
                                  enumerate(_vec(f"leg_type.{k}", d[k], 4))) for k in ("effort", "velocity"))
        return cls(
            joint_suffixes=tuple(str(s) for s in d["joint_suffixes"]),
            foot_link_suffix=str(d.get("foot_link_suffix", "foot")),
            coxa_length=_pos("leg_type.coxa_length", d["coxa_length"], 10.0),
            femur_length=_pos("leg_type.femur_length", d["femur_length"], 10.0),
            tibia_length=_pos("leg_type.tibia_length", d["tibia_length"], 10.0),
            foot_length=_pos("leg_type.foot_length", d["foot_length"], 10.0),
            foot_radius=_pos("leg_type.foot_radius", d["foot_radius"], 10.0),
            link_masses=tuple(_pos(f"leg_type.link_masses[{i}]", m) for i, m in enumerate(_vec("leg_type.link_masses", d["link_masses"], 4))),
            link_radius=_pos("leg_type.link_radius", d["link_radius"], 10.0),
            armature=_vec("leg_type.armature", d.get("armature", [0, 0, 0, 0]), 4),
            lower=_vec("leg_type.lower", d["lower"], 4),
            upper=_vec("leg_type.upper", d["upper"], 4),
            effort=effort,
            velocity=velocity,
            actuator=ActuatorSpec.from_dict(d.get("actuator"), effort, velocity),
        )

    @property
    def drive(self) -> ActuatorSpec:
        """The actuator spec (defaults filled in when the YAML has none)."""
        return self.actuator or ActuatorSpec.from_dict(None, self.effort, self.velocity)


@dataclass(frozen=True)
class LegConfig:
    """One leg: its name, mount point in the base frame [m] and mount orientation [deg]."""

    name: str
    mount_xyz: tuple[float, float, float]
    mount_yaw_deg: float
    mount_roll_deg: float = 0.0

    def joint_names(self, leg_type: LegType) -> list[str]:
        return [f"{self.name}_{s}" for s in leg_type.joint_suffixes]

    def foot_link(self, leg_type: LegType) -> str:
        return f"{self.name}_{leg_type.foot_link_suffix}"


@dataclass(frozen=True)
class RobotConfig:
    """Whole-robot description loaded from ``config/robot_*.yaml``."""

    name: str
    urdf: str
    base_link: str
    base_mass: float
    base_size: tuple[float, float, float]
    imu_xyz: tuple[float, float, float]
    leg_type: LegType
    legs: tuple[LegConfig, ...]
    stance_reach: float
    stance_height: float
    stance_relative_pitch: float
    friction: float
    gait: dict = field(default_factory=dict)
    source: str = ""

    def __post_init__(self):
        names = [leg.name for leg in self.legs]
        if len(names) < 2:
            raise ConfigError(f"robot.legs: need at least 2 legs, got {len(names)}")
        if len(set(names)) != len(names):
            raise ConfigError(f"robot.legs: duplicate leg names in {names}")
        if not 0.0 < self.friction:
            raise ConfigError(f"robot.contact.friction: must be > 0, got {self.friction}")

    @property
    def n_legs(self) -> int:
        return len(self.legs)

    @property
    def leg_names(self) -> list[str]:
        return [leg.name for leg in self.legs]

    @property
    def joint_names(self) -> list[str]:
        """All actuated joints, leg by leg in config order (the canonical joint order)."""
        return [j for leg in self.legs for j in leg.joint_names(self.leg_type)]

    @property
    def foot_links(self) -> list[str]:
        return [leg.foot_link(self.leg_type) for leg in self.legs]

    # -- the description every consumer reads (a URDF robot file, :mod:`legged_wbc.urdf_robot`, has the same)
    kind = "generated"
    standing_pose = None           # joint name -> [rad]: none; the stance comes from ``stance`` (IK)

    @property
    def leg_specs(self) -> tuple[LegSpec, ...]:
        lt = self.leg_type
        return tuple(LegSpec(name=leg.name, joints=tuple(leg.joint_names(lt)), foot_link=leg.foot_link(lt),
                             hip_xyz=tuple(leg.mount_xyz), has_pitch=len(lt.joint_suffixes) == 4)
                     for leg in self.legs)

    def joint_table(self) -> JointTable:
        """The leg type's per-joint values repeated for every leg."""
        lt, N = self.leg_type, self.n_legs
        d = lt.drive
        rep = lambda v: np.tile(np.asarray(v, dtype=float), N)  # noqa: E731
        return JointTable(names=tuple(self.joint_names), lower=rep(lt.lower), upper=rep(lt.upper),
                          effort=rep(lt.effort), velocity=rep(lt.velocity), armature=rep(lt.armature),
                          stall_torque=rep(d.stall_torque), no_load_speed=rep(d.no_load_speed),
                          coulomb_friction=rep(d.coulomb_friction), viscous_friction=rep(d.viscous_friction))

    @property
    def base_half_height(self) -> float:
        """Half the base's height [m] (the body box's; how far the body reaches below its origin)."""
        return 0.5 * float(self.base_size[2])

    def urdf_path(self) -> Path:
        p = Path(self.urdf)
        return p if p.is_absolute() else share_path(*p.parts)

    @classmethod
    def from_dict(cls, d: dict, source: str = "") -> "RobotConfig":
        if "robot" in d:
            if set(d) != {"robot"} or not isinstance(d["robot"], dict):
                raise ConfigError(f"robot config {source}: one top-level 'robot:' mapping expected")
            d = d["robot"]
        check_robot_keys(d)
        try:
            legs = tuple(
                LegConfig(
                    name=str(leg["name"]),
                    mount_xyz=_vec(f"legs[{i}].mount_xyz", leg["mount_xyz"], 3),
                    mount_yaw_deg=_num(f"legs[{i}].mount_yaw_deg", leg["mount_yaw_deg"], -360.0, 360.0),
                    mount_roll_deg=_num(f"legs[{i}].mount_roll_deg", leg.get("mount_roll_deg", 0.0), -90.0, 90.0),
                )
                for i, leg in enumerate(d["legs"])
            )
            base = d["base"]
            return cls(
                name=str(d["name"]),
                urdf=str(d["urdf"]),
                base_link=str(base.get("link", "base_link")),
                base_mass=_pos("base.mass", base["mass"]),
                base_size=tuple(_pos(f"base.size[{i}]", v, 10.0)
                                for i, v in enumerate(_vec("base.size", base["size"], 3))),
                imu_xyz=_vec("base.imu_xyz", base.get("imu_xyz", [0, 0, 0]), 3),
                leg_type=LegType.from_dict(d["leg_type"]),
                legs=legs,
                stance_reach=_pos("stance.reach", d["stance"]["reach"], 10.0),
                stance_height=_pos("stance.height", d["stance"]["height"], 10.0),
                stance_relative_pitch=_num("stance.relative_pitch", d["stance"].get("relative_pitch", 0.0),
                                           -math.pi, math.pi),
                friction=_pos("contact.friction", d.get("contact", {}).get("friction", 0.9), 10.0),
                gait=_checked_gait(d.get("gait", {})),
                source=source,
            )
        except KeyError as exc:
            raise ConfigError(f"robot config {source or ''}: missing key {exc}") from exc


def find_config(subdir: str, name_or_path: str, what: str) -> Path:
    """``config/<subdir>/<name>.yaml`` for a bare name, else the path given; a ConfigError listing
    the available names when it does not exist (scenarios, sweep ranges)."""
    p = Path(name_or_path)
    if not p.suffix:
        p = share_path("config", subdir, f"{name_or_path}.yaml")
    if not p.is_file():
        avail = sorted(x.stem for x in share_path("config", subdir).glob("*.yaml"))
        raise ConfigError(f"{what} {name_or_path!r} not found (available: {avail})")
    return p


def find_robot_file(path: str | Path | None = None) -> Path:
    """The robot YAML of a name or path: ``None`` or a bare name selects ``config/robot_<name>.yaml``
    (the generated robots: ``hexapod``, ``quadruped``), else ``config/robots/<name>.yaml`` (robots
    described by their own URDF: ``go2``, ``anymal_c``)."""
    if path is None:
        path = "hexapod"
    p = Path(path)
    if not p.suffix:
        p = share_path("config", f"robot_{path}.yaml")
        if not p.exists():
            alt = share_path("config", "robots", f"{path}.yaml")
            if alt.exists():
                return alt
            avail = sorted([x.stem[len("robot_"):] for x in share_path("config").glob("robot_*.yaml")]
                           + [x.stem for x in share_path("config", "robots").glob("*.yaml")])
            raise ConfigError(f"robot config not found: {path!r} (available: {avail})")
    if not p.exists():
        raise ConfigError(f"robot config not found: {p}")
    return p


def load_robot_config(path: str | Path | None = None) -> "RobotConfig | UrdfRobotConfig":  # noqa: F821
    """Load a robot YAML (see :func:`find_robot_file` for names); one whose ``robot.kind`` is ``urdf``
    gives a :class:`legged_wbc.urdf_robot.UrdfRobotConfig` (the robot's own URDF + SRDF)."""
    p = find_robot_file(path)
    d = load_yaml_file(p)
    if not isinstance(d, dict):
        raise ConfigError(f"{p}: a robot config must be a mapping, got {type(d).__name__}")
    body = d.get("robot") if isinstance(d.get("robot"), dict) else d
    if body.get("kind", "generated") == "urdf":
        from legged_wbc.urdf_robot import load_urdf_robot

        return load_urdf_robot(p, data=d)
    if body.get("kind", "generated") != "generated":
        raise ConfigError(f"{p}: robot.kind: must be generated or urdf, got {body.get('kind')!r}")
    body.pop("kind", None)
    try:
        return RobotConfig.from_dict(d, source=str(p))
    except ConfigError as exc:
        raise ConfigError(str(exc) if str(exc).startswith("robot config") else f"{p}: {exc}") from None


# ---------------------------------------------------------------------------------------------
# URDF generation


def _fmt(x: float) -> str:
    return repr(float(x))


def _xyz(v: Sequence[float]) -> str:
    return " ".join(_fmt(x) for x in v)


def _cyl_inertia(m: float, r: float, length: float, axis: int) -> tuple[float, float, float]:
    """Solid cylinder principal inertia (ixx, iyy, izz) [kg m^2], long axis ``axis``."""
    ia = 0.5 * m * r * r
    ip = m * (3 * r * r + length * length) / 12.0
    out = [ip, ip, ip]
    out[axis] = ia
    return tuple(out)


def _inertial(m: float, com: Sequence[float], inertia: Sequence[float]) -> str:
    ixx, iyy, izz = inertia
    return (
        f'    <inertial>\n      <origin xyz="{_xyz(com)}" rpy="0 0 0"/>\n      <mass value="{_fmt(m)}"/>\n'
        f'      <inertia ixx="{_fmt(ixx)}" ixy="0" ixz="0" iyy="{_fmt(iyy)}" iyz="0" izz="{_fmt(izz)}"/>\n'
        "    </inertial>\n"
    )


def generate_urdf(cfg: RobotConfig) -> str:
    """URDF text of the robot (deterministic: the same config gives the same bytes)."""
    sx, sy, sz = cfg.base_size
    mb = cfg.base_mass
    out = [
        '<?xml version="1.0"?>\n',
        f"<!-- Generated by `legged-wbc generate-urdf {Path(cfg.source).name or ''}`: edit the YAML, not this file. -->\n",
        f'<robot name="{cfg.name}">\n',
        "  <mujoco>\n    <compiler discardvisual=\"false\" fusestatic=\"false\" balanceinertia=\"false\" angle=\"radian\"/>\n  </mujoco>\n",
        f'  <link name="{cfg.base_link}">\n',
        _inertial(mb, (0, 0, 0), (mb * (sy**2 + sz**2) / 12, mb * (sx**2 + sz**2) / 12, mb * (sx**2 + sy**2) / 12)),
        f'    <visual><geometry><box size="{_xyz(cfg.base_size)}"/></geometry></visual>\n',
        f'    <collision><geometry><box size="{_xyz(cfg.base_size)}"/></geometry></collision>\n',
        "  </link>\n",
    ]
    for leg in cfg.legs:
        out += _leg_urdf(cfg, leg)
    out.append("</robot>\n")
    return "".join(out)


def _leg_urdf(cfg: RobotConfig, leg) -> list[str]:
    """The joints and links of one leg, base to foot, as URDF text pieces."""
    lt = cfg.leg_type
    out: list[str] = []
    r = lt.link_radius
    lengths = (lt.coxa_length, lt.femur_length, lt.tibia_length)
    link_names = ("coxa", "femur", "tibia")
    jn = leg.joint_names(lt)
    parent = cfg.base_link
    origins = [
        (leg.mount_xyz, (math.radians(leg.mount_roll_deg), 0.0, math.radians(leg.mount_yaw_deg))),
        ((lt.coxa_length, 0.0, 0.0), (0.0, 0.0, 0.0)),
        ((lt.femur_length, 0.0, 0.0), (0.0, 0.0, 0.0)),
        ((lt.tibia_length, 0.0, 0.0), (0.0, 0.0, 0.0)),
    ]
    axes = ((0, 0, 1), (0, 1, 0), (0, 1, 0), (0, 1, 0))
    for k in range(4):
        if k < 3:
            child = f"{leg.name}_{link_names[k]}"
            L = lengths[k]
            com, inertia = (L / 2, 0, 0), _cyl_inertia(lt.link_masses[k], r, L, 0)
            geom = (
                f'    <visual><origin xyz="{_xyz((L / 2, 0, 0))}" rpy="0 1.5707963267948966 0"/>'
                f'<geometry><cylinder radius="{_fmt(r)}" length="{_fmt(L)}"/></geometry></visual>\n'
            )
        else:
            child = leg.foot_link(lt)
            L = lt.foot_length
            com, inertia = (0, 0, -L / 2), _cyl_inertia(lt.link_masses[k], r * 0.8, L, 2)
            geom = (
                f'    <visual><origin xyz="{_xyz((0, 0, -L / 2))}" rpy="0 0 0"/>'
                f'<geometry><cylinder radius="{_fmt(r * 0.8)}" length="{_fmt(L)}"/></geometry></visual>\n'
                f'    <collision><origin xyz="{_xyz((0, 0, -L))}" rpy="0 0 0"/>'
                f'<geometry><sphere radius="{_fmt(lt.foot_radius)}"/></geometry></collision>\n'
            )
        xyz, rpy = origins[k]
        out.append(
            f'  <joint name="{jn[k]}" type="revolute">\n'
            f'    <parent link="{parent}"/>\n    <child link="{child}"/>\n'
            f'    <origin xyz="{_xyz(xyz)}" rpy="{_xyz(rpy)}"/>\n'
            f'    <axis xyz="{_xyz(axes[k])}"/>\n'
            f'    <limit lower="{_fmt(lt.lower[k])}" upper="{_fmt(lt.upper[k])}" effort="{_fmt(lt.effort[k])}" velocity="{_fmt(lt.velocity[k])}"/>\n'
            "  </joint>\n"
        )
        out.append(f'  <link name="{child}">\n' + _inertial(lt.link_masses[k], com, inertia) + geom + "  </link>\n")
        parent = child
    return out


def robot_total_mass(cfg: RobotConfig) -> float:
    return cfg.base_mass + cfg.n_legs * sum(cfg.leg_type.link_masses)


def foot_geometry(cfg) -> FootGeometry:
    """The foot point on the foot link: a URDF robot's found foot (its ``foot`` attribute), or the
    generated leg type's sphere at ``foot_length`` below the ankle."""
    found = getattr(cfg, "foot", None)
    if found is not None:
        return found
    return FootGeometry(offset=np.array([0.0, 0.0, -cfg.leg_type.foot_length]), radius=cfg.leg_type.foot_radius)
