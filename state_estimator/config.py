"""State-estimator parameters: one schema, frozen validated dataclasses, and the YAML loader.

The schema (:func:`parameter_schema`) is the single source of names, types, defaults, ranges and
descriptions (with units); the dataclasses validate themselves against it in ``__post_init__`` and
raise :class:`legged_wbc.robot.ConfigError` naming the parameter. The ROS node can declare its
parameters straight from the schema (``ParameterDescriptor`` with ``FloatingPointRange`` /
``IntegerRange``).

The parameter file is the standard ROS 2 form (``config/estimator.yaml``)::

    state_estimator:
      ros__parameters:
        touchdown.gamma_land: 1500.0
        velocity.gating: true
        ...

Dotted (flat) names and nested mappings are both accepted (ROS reads nested mappings as dotted
names). Unknown names under the ``touchdown.``, ``velocity.`` and ``height.`` groups are errors
(typos must not be silently ignored); names outside those groups belong to the node (topics, robot
name, ...) and are ignored here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

import yaml

from legged_wbc.robot import ConfigError, share_path

NODE_NAME = "state_estimator"
GROUPS = ("touchdown", "velocity", "height")


@dataclass(frozen=True)
class ParamSpec:
    """One parameter: dotted name, Python type, default, inclusive range (None: unbounded / bool)."""

    name: str
    type: type
    default: Any
    min: float | None
    max: float | None
    description: str


_SCHEMA: tuple[ParamSpec, ...] = (
    # ---------------------------------------------------------------- touchdown detector (per leg KF)
    ParamSpec("touchdown.gamma_land", float, 1200.0, 1.0, 1.0e7,
              "touchdown threshold on the score s = ||tau_ext_k - tau_ext_k-1|| / dt [N m/s]"),
    ParamSpec("touchdown.n_land", int, 2, 1, 100,
              "consecutive swing-down samples with s > gamma_land that declare a touchdown [samples]"),
    ParamSpec("touchdown.sigma_dq_process", float, 0.02, 1.0e-6, 100.0,
              "process noise std of the joint-velocity model, per control step [rad/s]"),
    ParamSpec("touchdown.sigma_tau_process", float, 1.0, 1.0e-6, 1.0e4,
              "process noise std of the external-torque random walk, per control step [N m]"),
    ParamSpec("touchdown.sigma_dq_meas", float, 0.05, 1.0e-6, 100.0,
              "measurement noise std of the joint velocities, sensor noise plus model error [rad/s]"),
    ParamSpec("touchdown.sigma_tau_init", float, 50.0, 1.0e-3, 1.0e5,
              "initial std of the external-torque estimate [N m]"),
    ParamSpec("touchdown.base_coupling", bool, True, None, None,
              "add the leg-base inertia coupling M_ib a_B (base acceleration from the IMU: accelerometer "
              "and differentiated gyro) to the leg model; false = the paper's leg-block-only model"),
    # ---------------------------------------------------------------- base velocity filter
    ParamSpec("velocity.gating", bool, True, None, None,
              "soft Mahalanobis gating of the leg-kinematics velocity measurements (false: plain KF)"),
    ParamSpec("velocity.gate_d2", float, 7.81, 0.1, 1.0e4,
              "squared Mahalanobis distance above which a foot's covariance is inflated "
              "(chi-square 3 DoF 95% = 7.81) [-]"),
    ParamSpec("velocity.max_inflation", float, 100.0, 1.0, 1.0e6,
              "cap of the covariance inflation factor clip(d2 / gate_d2, 1, cap) [-]"),
    ParamSpec("velocity.exclusion_cycles", int, 20, 0, 10000,
              "control cycles a foot is ignored after it enters the support set [cycles]"),
    ParamSpec("velocity.sigma_accel", float, 0.2, 1.0e-4, 100.0,
              "process noise: std of the IMU acceleration error (accelerometer noise + model) [m/s^2]"),
    ParamSpec("velocity.sigma_meas", float, 0.05, 1.0e-5, 10.0,
              "std of one foot's leg-kinematics base-velocity measurement, per axis [m/s]"),
    ParamSpec("velocity.sigma_init", float, 0.05, 1.0e-5, 100.0,
              "initial std of the base velocity estimate at reset, per axis [m/s]"),
    # ---------------------------------------------------------------- base height
    ParamSpec("height.cutoff_hz", float, 25.0, 0.01, 1000.0,
              "cut-off of the first-order low-pass on the support-foot base height [Hz]"),
)
_BY_NAME = {p.name: p for p in _SCHEMA}


def parameter_schema() -> list[ParamSpec]:
    """All estimator parameters with type, default, range and description (units in the text)."""
    return list(_SCHEMA)


def _check(name: str, value: Any) -> Any:
    """Validate (and coerce int -> float) one value against the schema; raise ``ConfigError``."""
    spec = _BY_NAME.get(name)
    if spec is None:
        raise ConfigError(f"{name}: unknown estimator parameter (known: {sorted(_BY_NAME)})")
    if spec.type is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{name}: expected true/false, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name}: expected a number, got {value!r}")
    if spec.type is int:
        if isinstance(value, float):
            if not value.is_integer():
                raise ConfigError(f"{name}: expected an integer, got {value!r}")
            value = int(value)
    else:
        value = float(value)
        if not math.isfinite(value):
            raise ConfigError(f"{name}: must be finite, got {value!r}")
    if (spec.min is not None and value < spec.min) or (spec.max is not None and value > spec.max):
        raise ConfigError(f"{name}: {value!r} out of range [{spec.min:g}, {spec.max:g}] ({spec.description})")
    return value


class _Group:
    """Mixin: validate every field of a frozen group dataclass against ``<prefix>.<field>``."""

    _prefix = ""

    def __post_init__(self):
        for f in fields(self):
            object.__setattr__(self, f.name, _check(f"{self._prefix}.{f.name}", getattr(self, f.name)))


def _d(name: str):
    return _BY_NAME[name].default


@dataclass(frozen=True)
class TouchdownConfig(_Group):
    """Touchdown detector: KF noise (per control step) and the landing test (see ``touchdown.py``)."""

    _prefix = "touchdown"
    gamma_land: float = _d("touchdown.gamma_land")
    n_land: int = _d("touchdown.n_land")
    sigma_dq_process: float = _d("touchdown.sigma_dq_process")
    sigma_tau_process: float = _d("touchdown.sigma_tau_process")
    sigma_dq_meas: float = _d("touchdown.sigma_dq_meas")
    sigma_tau_init: float = _d("touchdown.sigma_tau_init")
    base_coupling: bool = _d("touchdown.base_coupling")


@dataclass(frozen=True)
class VelocityConfig(_Group):
    """Base-velocity filter: noise, soft gating and post-touchdown exclusion (see ``velocity.py``)."""

    _prefix = "velocity"
    gating: bool = _d("velocity.gating")
    gate_d2: float = _d("velocity.gate_d2")
    max_inflation: float = _d("velocity.max_inflation")
    exclusion_cycles: int = _d("velocity.exclusion_cycles")
    sigma_accel: float = _d("velocity.sigma_accel")
    sigma_meas: float = _d("velocity.sigma_meas")
    sigma_init: float = _d("velocity.sigma_init")


@dataclass(frozen=True)
class HeightConfig(_Group):
    """Base-height low-pass."""

    _prefix = "height"
    cutoff_hz: float = _d("height.cutoff_hz")


@dataclass(frozen=True)
class EstimatorConfig:
    """All estimator parameters (each group validates itself)."""

    touchdown: TouchdownConfig = field(default_factory=TouchdownConfig)
    velocity: VelocityConfig = field(default_factory=VelocityConfig)
    height: HeightConfig = field(default_factory=HeightConfig)

    def __post_init__(self):
        for name, cls in (("touchdown", TouchdownConfig), ("velocity", VelocityConfig), ("height", HeightConfig)):
            if not isinstance(getattr(self, name), cls):
                raise ConfigError(f"{name}: expected a {cls.__name__}, got {type(getattr(self, name)).__name__}")

    def to_flat(self) -> dict[str, Any]:
        """``{"touchdown.gamma_land": ..., ...}`` (the ROS parameter names)."""
        out = {}
        for g in GROUPS:
            grp = getattr(self, g)
            for f in fields(grp):
                out[f"{g}.{f.name}"] = getattr(grp, f.name)
        return out

    @classmethod
    def from_flat(cls, params: Mapping[str, Any]) -> "EstimatorConfig":
        """Build from dotted names (missing names take their defaults; unknown group names raise)."""
        per_group: dict[str, dict[str, Any]] = {g: {} for g in GROUPS}
        for name, value in params.items():
            group, _, key = name.partition(".")
            if group not in GROUPS:
                continue  # a node-level parameter, not ours
            if name not in _BY_NAME:
                raise ConfigError(f"{name}: unknown estimator parameter (known: {sorted(_BY_NAME)})")
            per_group[group][key] = value
        return cls(touchdown=TouchdownConfig(**per_group["touchdown"]),
                   velocity=VelocityConfig(**per_group["velocity"]),
                   height=HeightConfig(**per_group["height"]))

    def replace(self, **flat: Any) -> "EstimatorConfig":
        """A copy with some dotted parameters changed (``cfg.replace(**{"touchdown.n_land": 3})``)."""
        params = self.to_flat()
        params.update(flat)
        return EstimatorConfig.from_flat(params)


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, name + "."))
        else:
            out[name] = v
    return out


def default_config_path() -> Path:
    return share_path("config", "estimator.yaml")


def load_estimator_config(path: str | Path | None = None,
                          overrides: Mapping[str, Any] | None = None) -> EstimatorConfig:
    """Load ``state_estimator: ros__parameters: {...}`` from ``path`` (default ``config/estimator.yaml``),
    then apply ``overrides`` (dotted names or nested mappings). Raises ``ConfigError`` naming the
    parameter on unknown names or out-of-range values."""
    p = Path(path) if path is not None else default_config_path()
    try:
        doc = yaml.safe_load(p.read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"estimator config {p}: {exc}") from exc
    node = doc.get(NODE_NAME) if isinstance(doc, Mapping) else None
    if not isinstance(node, Mapping) or not isinstance(node.get("ros__parameters", {}), Mapping):
        raise ConfigError(f"estimator config {p}: expected '{NODE_NAME}: ros__parameters: {{...}}'")
    params = _flatten(node.get("ros__parameters") or {})
    if overrides:
        params.update(_flatten(overrides))
    return EstimatorConfig.from_flat(params)
