"""State-estimator parameters: frozen validated dataclasses (one schema) and the YAML loader.

The fields, declared with :func:`legged_wbc.params.param`, are the single source of names, types,
defaults, ranges, units, descriptions and live / read-only. :class:`EstimatorConfig` (groups
``touchdown``, ``velocity``, ``height``, ``plane``) is what :class:`state_estimator.estimator.StateEstimator`
takes; :class:`EstimatorNodeConfig` adds the node's own read-only parameters (``robot``,
``scenario``, ``qos_depth``) and is what the ``state_estimator`` node declares as ROS parameters.
Errors raise :class:`legged_wbc.robot.ConfigError` naming the (dotted) parameter.

The parameter file is the standard ROS 2 form (``config/estimator.yaml``)::

    state_estimator:
      ros__parameters:
        touchdown.gamma_land: 1500.0
        velocity.gating: true
        ...

Dotted names and nested mappings are both accepted (ROS reads nested mappings as dotted names).
Unknown names are errors (typos must not be silently ignored).

Live parameters reach the running filters at the next tick (``StateEstimator.set_config``); the two
initial standard deviations (``touchdown.sigma_tau_init``, ``velocity.sigma_init``) only set the
covariance at a reset, so they are read-only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from legged_wbc import params as P
from legged_wbc.params import group, param, validate
from legged_wbc.robot import share_path

NODE_NAME = "state_estimator"


@dataclass(frozen=True)
class TouchdownConfig:
    """Touchdown detector: KF noise (per control step) and the landing test (see ``touchdown.py``)."""

    _prefix = "touchdown"
    gamma_land: float = param(1200.0, 1.0, 1.0e7, "touchdown threshold on the score "
                              "s = ||tau_ext_k - tau_ext_k-1|| / dt", unit="N m/s")
    n_land: int = param(2, 1, 100, "consecutive swing-down samples with s > gamma_land that declare a touchdown",
                        unit="samples")
    late_max_cycles: int = param(50, 0, 1000, "a swing-down that ends without a touchdown is extended: the leg "
                                 "stays out of the support set until the landing test sees the contact, at most "
                                 "this many control cycles (then it joins the support set as the gait says); 0 = "
                                 "no extension", unit="cycles")
    sigma_dq_process: float = param(0.02, 1.0e-6, 100.0, "process noise std of the joint-velocity model, "
                                    "per control step", unit="rad/s")
    sigma_tau_process: float = param(1.0, 1.0e-6, 1.0e4, "process noise std of the external-torque random walk, "
                                     "per control step", unit="N m")
    sigma_dq_meas: float = param(0.05, 1.0e-6, 100.0, "measurement noise std of the joint velocities, sensor "
                                 "noise plus model error", unit="rad/s")
    sigma_tau_init: float = param(50.0, 1.0e-3, 1.0e5, "initial std of the external-torque estimate (used at a "
                                  "reset only, hence read-only)", unit="N m", live=False)
    base_coupling: bool = param(True, desc="add the leg-base inertia coupling M_ib a_B (base acceleration from "
                                "the IMU: accelerometer and differentiated gyro) to the leg model; false = the "
                                "paper's leg-block-only model")

    def __post_init__(self):
        validate(self)


@dataclass(frozen=True)
class VelocityConfig:
    """Base-velocity filter: noise, soft gating and post-touchdown exclusion (see ``velocity.py``)."""

    _prefix = "velocity"
    gating: bool = param(True, desc="soft Mahalanobis gating of the leg-kinematics velocity measurements "
                         "(false: plain KF)")
    gate_d2: float = param(7.81, 0.1, 1.0e4, "squared Mahalanobis distance above which a foot's covariance is "
                           "inflated (chi-square 3 DoF 95% = 7.81)", unit="-")
    max_inflation: float = param(100.0, 1.0, 1.0e6, "cap of the covariance inflation factor "
                                 "clip(d2 / gate_d2, 1, cap)", unit="-")
    exclusion_cycles: int = param(20, 0, 10000, "control cycles a foot is ignored after it enters the support set",
                                  unit="cycles")
    sigma_accel: float = param(0.2, 1.0e-4, 100.0, "process noise: std of the IMU acceleration error "
                               "(accelerometer noise + model)", unit="m/s^2")
    sigma_meas: float = param(0.05, 1.0e-5, 10.0, "std of one foot's leg-kinematics base-velocity measurement, "
                              "per axis", unit="m/s")
    sigma_init: float = param(0.05, 1.0e-5, 100.0, "initial std of the base velocity estimate at reset, per axis "
                              "(used at a reset only, hence read-only)", unit="m/s", live=False)

    def __post_init__(self):
        validate(self)


@dataclass(frozen=True)
class HeightConfig:
    """Base-height low-pass."""

    _prefix = "height"
    cutoff_hz: float = param(25.0, 0.01, 1000.0, "cut-off of the first-order low-pass on the support-foot "
                             "base height", unit="Hz")

    def __post_init__(self):
        validate(self)


@dataclass(frozen=True)
class PlaneConfig:
    """Support plane (terrain normal) from the support feet (see ``support_plane.py``)."""

    _prefix = "plane"
    cutoff_hz: float = param(2.0, 0.01, 100.0, "cut-off of the first-order low-pass on the fitted support-plane "
                             "normal and offset", unit="Hz")
    deadband_deg: float = param(1.0, 0.0, 10.0, "soft dead band on the normal's tilt from world z (a tilt "
                                "below it gives world z exactly; above, the tilt is reduced by it)", unit="deg")

    def __post_init__(self):
        validate(self)


@dataclass(frozen=True)
class EstimatorConfig:
    """All estimator parameters (what ``StateEstimator`` takes)."""

    touchdown: TouchdownConfig = group(TouchdownConfig)
    velocity: VelocityConfig = group(VelocityConfig)
    height: HeightConfig = group(HeightConfig)
    plane: PlaneConfig = group(PlaneConfig)

    def __post_init__(self):
        validate(self)

    def to_flat(self) -> dict[str, Any]:
        """``{"touchdown.gamma_land": ..., ...}`` (the ROS parameter names)."""
        return P.to_flat(self)

    @classmethod
    def from_flat(cls, params: Mapping[str, Any]) -> "EstimatorConfig":
        """Build from dotted names or nested mappings (missing names take their defaults; unknown
        names raise ``ConfigError``)."""
        return P.from_flat(cls, params)

    def replace(self, **flat: Any) -> "EstimatorConfig":
        """A validated copy with some dotted parameters changed (``cfg.replace(**{"touchdown.n_land": 3})``)."""
        return P.replace(self, **flat)


@dataclass(frozen=True)
class EstimatorNodeConfig(EstimatorConfig):
    """The ``state_estimator`` node's parameters: the estimator's plus its own read-only ones."""

    robot: str = param("hexapod", desc="robot config name or YAML path", live=False)
    scenario: str = param("nominal", desc="scenario (gait start time, initial pose, estimator overrides)",
                          live=False)
    qos_depth: int = param(200, 1, 100000, "history depth of the reliable topics", unit="messages", live=False)
    input_timing: str = param("tick_grid", desc="tick_grid = one update per /joint_states + /imu pair stamped "
                              "k * 2 ms (the bridge's sim time); sample = hardware stamps (wall clock, off the "
                              "grid): a /joint_states sample at least 1.5 ms after the last tick's is a tick, "
                              "paired with the newest /imu; outputs carry its stamp, the filters integrate "
                              "over the measured intervals", choices=("tick_grid", "sample"), live=False)
    tf_rate: float = param(10.0, 0.0, 500.0, "rate of /tf (odom -> base_link and every link at a tick's joint "
                           "positions, computed off the control tick); 0 = none (/tf_static and "
                           "/robot_description are published once either way)", unit="Hz wall", live=False)

    @property
    def estimator(self) -> EstimatorConfig:
        """The estimator's part (a plain :class:`EstimatorConfig`)."""
        return P.subset(self, EstimatorConfig)


def parameter_schema() -> list[P.FieldSpec]:
    """All estimator parameters (dotted names) with type, default, range, unit and description."""
    return P.schema(EstimatorConfig)


def default_config_path() -> Path:
    return share_path("config", "estimator.yaml")


def load_estimator_node_config(path: str | Path | None = None,
                               overrides: Mapping[str, Any] | None = None) -> EstimatorNodeConfig:
    """The node's config from ``state_estimator: ros__parameters:`` in ``path`` (default
    ``config/estimator.yaml``), then ``overrides`` (dotted names or nested mappings)."""
    p = Path(path) if path is not None else default_config_path()
    return P.load_node_config(EstimatorNodeConfig, p, NODE_NAME, overrides)


def load_estimator_config(path: str | Path | None = None,
                          overrides: Mapping[str, Any] | None = None) -> EstimatorConfig:
    """:class:`EstimatorConfig` from the parameter file (default ``config/estimator.yaml``) plus
    ``overrides``. Raises ``ConfigError`` naming the parameter on unknown names or bad values."""
    return load_estimator_node_config(path, overrides).estimator
