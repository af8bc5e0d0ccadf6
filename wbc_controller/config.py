"""Whole-body-controller parameters (paper Table 1 defaults), validated on construction.

Loaded from ``config/wbc_controller.yaml`` (``wbc_controller: ros__parameters:``); every field is
also a ROS parameter of the ``wbc_controller`` node, declared from :func:`legged_wbc.params.schema`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pathlib import Path

from legged_wbc.params import from_flat, load_ros_params, param, validate
from legged_wbc.robot import share_path

MODES = ("none", "damping", "cbf")


@dataclass(frozen=True)
class WbcConfig:
    # --- relative-pitch handling (WBC-0 / WBC-D / WBC-CBF)
    relative_pitch_mode: str = param("cbf", desc="none = WBC-0, damping = WBC-D, cbf = WBC-CBF", choices=MODES)
    kp_b: float = param(3000.0, 0.0, 1e6, "CBF position gain k_p,b [1/s^2]")
    kd_b: float = param(110.0, 0.0, 1e4, "CBF velocity gain k_d,b [1/s]")
    k_dtheta: float = param(10.0, 0.0, 1e3, "relative-pitch rate damping k_dtheta [1/s]")
    theta_ddot_max: float = param(10.0, 0.0, 1e4, "saturation of the nominal pitch acceleration [rad/s^2]")
    theta_min: float = param(-0.3, -1.5, 0.0, "relative-pitch lower bound [rad]")
    theta_max: float = param(0.3, 0.0, 1.5, "relative-pitch upper bound [rad]")
    cbf_margin: float = param(0.0, 0.0, 0.2, "back-off of the CBF bounds inside [theta_min, theta_max] [rad] (paper: 0)")
    cbf_slack: bool = param(False, desc="soften the CBF rows with a slack (heavily weighted); paper: off")
    cbf_slack_weight: float = param(1e6, 1.0, 1e12, "weight of the CBF slack in the cost [-]")
    jdot_mode: str = param("exact", desc="J_theta_dot q_dot: exact (Pinocchio + analytic) or fd (paper's central difference)",
                           choices=("exact", "fd"))
    null_space_compensation: bool = param(False, desc="cancel the estimated external torque (touchdown Kalman "
                                          "filter) along each support leg's J_p null space; paper: off")
    compensation_limit: float = param(200.0, 0.0, 1e4, "bound on the compensated null-space torque per leg [N m]")
    # --- contact
    mu: float = param(0.6, 0.05, 2.0, "friction coefficient of the pyramid [-]")
    fz_max: float = param(5000.0, 1.0, 1e5, "normal-force upper bound of a support foot [N]")
    # --- cost weights
    w_body: float = param(1.0, 0.0, 1e6, "weight of the 6 body task rows [-]")
    w_support: float = param(1.0, 0.0, 1e6, "weight of support-foot position rows [-]")
    w_swing: float = param(0.05, 0.0, 1e6, "weight of swing-foot position rows [-]")
    w_pitch: float = param(1.0, 0.0, 1e6, "weight of relative-pitch rows (damping / cbf modes) [-]")
    w_pitch_none: float = param(1e-3, 0.0, 1.0, "weight of relative-pitch rows in WBC-0 [-]")
    w_lambda_t: float = param(1e-5, 0.0, 1.0, "contact-force regularization, tangential [-]")
    w_lambda_n: float = param(1e-6, 0.0, 1.0, "contact-force regularization, normal [-]")
    hessian_reg: float = param(1e-9, 0.0, 1e-3, "Hessian regularization relative to its max diagonal [-]")
    # --- torque limits
    torque_limit_mode: str = param("paper", desc="paper = +-tau_limit_paper on all joints; realistic = URDF effort limits",
                                   choices=("paper", "realistic"))
    tau_limit_paper: float = param(10000.0, 1.0, 1e6, "torque bound in paper mode [N m]")
    # --- solver and failure handling
    solver: str = param("daqp", desc="QP backend", choices=("daqp", "proxqp", "osqp"))
    solver_tol: float = param(1e-6, 1e-10, 1e-2, "solver primal/dual tolerance [-]")
    solver_max_iter: int = param(200, 5, 100000, "solver iteration limit [-]")
    residual_tol: float = param(5e-3, 1e-9, 1.0, "accepted normalized equality residual / inequality violation [-]")
    max_failures: int = param(10, 0, 10000, "consecutive rejected QPs held before the safe stop [-]")
    # --- body task gains
    kp_pos: tuple = param([400.0, 400.0, 900.0], 0.0, 1e5, "body position gains x,y,z [1/s^2]")
    kd_pos: tuple = param([40.0, 40.0, 60.0], 0.0, 1e4, "body velocity gains x,y,z [1/s]")
    kp_rot: tuple = param([900.0, 900.0, 400.0], 0.0, 1e5, "body attitude gains K_R roll,pitch,yaw [1/s^2]")
    kd_rot: tuple = param([60.0, 60.0, 40.0], 0.0, 1e4, "body angular-rate gains K_w [1/s]")
    # --- swing leg
    kp_swing: tuple = param([1500.0, 1500.0, 1500.0], 0.0, 1e6, "swing task-space PD stiffness x,y,z (base frame) [N/m]")
    kd_swing: tuple = param([60.0, 60.0, 60.0], 0.0, 1e5, "swing task-space PD damping [N s/m]")
    support_foot_acceleration: str = param("zero", desc="nominal body-relative acceleration of support feet: zero "
                                           "(paper) or consistent (that of a world-fixed foot under the desired base motion)",
                                           choices=("zero", "consistent"))
    swing_pitch_recenter: bool = param(True, desc="swing legs track the nominal relative pitch (PD below) instead of "
                                       "zero pitch acceleration; support legs unaffected; paper: off")
    kp_swing_pitch: float = param(100.0, 0.0, 1e5, "swing relative-pitch re-centering stiffness [1/s^2]")
    kd_swing_pitch: float = param(20.0, 0.0, 1e4, "swing relative-pitch re-centering damping [1/s]")
    swing_pitch_projection: bool = param(True, desc="project the swing PD torque so it does not accelerate the "
                                         "relative pitch (dynamically consistent, leg block); paper: off")
    lift_height: float = param(0.08, 0.0, 0.4, "swing apex above the stance height [m]")
    touchdown_depth: float = param(0.01, 0.0, 0.1, "swing target below the nominal ground height [m]")
    raibert_gain: float = param(0.5, 0.0, 2.0, "touchdown offset = gain * v_ref * support duration [-]")
    # --- body references
    stand_height: float = param(0.42, 0.1, 1.5, "standing / walking base height [m]")
    stand_up_start: float = param(0.0, 0.0, 1000.0, "start of the stand-up ramp [s]")
    stand_up_duration: float = param(2.0, 0.01, 100.0, "duration of the stand-up ramp [s]")
    forward_velocity: float = param(0.1, -1.0, 1.0, "forward walking speed (world x) [m/s]")
    velocity_ramp_end: float = param(6.0, 0.0, 1000.0, "time at which the forward speed is reached [s]")

    def __post_init__(self):
        validate(self)
        # gain vectors as arrays, once (frozen dataclass: set through object.__setattr__)
        for name in ("kp_pos", "kd_pos", "kp_rot", "kd_rot"):
            object.__setattr__(self, f"_{name}", np.asarray(getattr(self, name), dtype=float))
        if self.theta_min + self.cbf_margin >= self.theta_max - self.cbf_margin:
            raise ValueError("cbf_margin: leaves an empty relative-pitch range")


def load_wbc_config(path: str | Path | None = None, overrides: dict | None = None) -> WbcConfig:
    p = Path(path) if path else share_path("config", "wbc_controller.yaml")
    flat = {k: v for k, v in load_ros_params(p, "wbc_controller").items() if k in WbcConfig.__dataclass_fields__}
    flat.update(overrides or {})
    return from_flat(WbcConfig, flat)
