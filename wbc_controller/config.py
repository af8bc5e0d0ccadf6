"""Whole-body-controller parameters (paper Table 1 defaults), validated on construction.

:class:`WbcConfig` is what :class:`wbc_controller.controller.WholeBodyController` takes (and the
headless loop builds); :class:`WbcNodeConfig` adds the ``wbc_controller`` node's own read-only
parameters (robot, scenario, QoS, the ros2_control forward command). Both are loaded from
``config/wbc_controller.yaml`` (``wbc_controller: ros__parameters:``, flat names) with
:func:`legged_wbc.params.load_node_config`; the node declares every field as a ROS parameter
(:class:`legged_wbc.ros.nodekit.params.NodeParameters`). Fields declared ``live`` take effect at the next
tick (``WholeBodyController.set_config``); the solver backend, its settings and the CBF slack
(which change the QP size) are read-only.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from pathlib import Path

from legged_wbc.params import load_node_config, param, subset, validate
from legged_wbc.robot import ConfigError, share_path

MODES = ("none", "damping", "cbf")
NODE_NAME = "wbc_controller"


@dataclass(frozen=True)
class WbcConfig:
    # --- relative-pitch handling (WBC-0 / WBC-D / WBC-CBF)
    relative_pitch_mode: str = param("cbf", desc="none = WBC-0, damping = WBC-D, cbf = WBC-CBF", choices=MODES)
    kp_b: float = param(3000.0, 0.0, 1e6, "CBF position gain k_p,b", unit="1/s^2")
    kd_b: float = param(110.0, 0.0, 1e4, "CBF velocity gain k_d,b", unit="1/s")
    k_dtheta: float = param(10.0, 0.0, 1e3, "relative-pitch rate damping k_dtheta", unit="1/s")
    theta_ddot_max: float = param(10.0, 0.0, 1e4, "saturation of the nominal pitch acceleration", unit="rad/s^2")
    theta_min: float = param(-0.3, -1.5, 0.0, "relative-pitch lower bound", unit="rad")
    theta_max: float = param(0.3, 0.0, 1.5, "relative-pitch upper bound", unit="rad")
    cbf_margin: float = param(0.0, 0.0, 0.2, "back-off of the CBF bounds inside [theta_min, theta_max] (paper: 0)", unit="rad")
    cbf_margin_mode: str = param("fixed", desc="fixed = the bounds backed off by cbf_margin; tau_ext = also, per "
                                 "support leg, by the barrier's steady offset d / k_p,b under the estimated external "
                                 "torque (a torque-aware boundary, capped at cbf_margin_max); paper: fixed",
                                 choices=("fixed", "tau_ext"))
    cbf_margin_max: float = param(0.1, 0.0, 0.5, "cap of the tau_ext boundary move", unit="rad")
    cbf_slack: bool = param(False, desc="keep the QP feasible when the CBF rows cannot be met (torque limits): "
                            "a cycle whose hard-barrier QP has no accepted solution is solved again with a "
                            "heavily weighted slack in each CBF row; paper: off (read-only: changes the QP size, "
                            "i.e. rebuilds the solver workspace)", live=False)
    cbf_slack_weight: float = param(1e4, 1.0, 1e12, "weight of the CBF slack in the cost (1e4 x the task "
                                    "weights; above ~1e5 the dense solvers see the Hessian as singular)", unit="-")
    jdot_mode: str = param("exact", desc="J_theta_dot q_dot: exact (Pinocchio + analytic) or fd (paper's central difference)",
                           choices=("exact", "fd"))
    null_space_compensation: bool = param(False, desc="cancel the estimated external torque (touchdown Kalman "
                                          "filter) along each support leg's J_p null space; paper: off")
    compensation_limit: float = param(200.0, 0.0, 1e4, "bound on the compensated null-space torque per leg", unit="N m")
    # --- contact
    mu: float = param(0.6, 0.05, 2.0, "friction coefficient of the pyramid", unit="-")
    contact_normal: str = param("estimated", desc="normal of the friction pyramids: estimated = the estimator's "
                                "support-plane normal (world z on flat ground), body_z = the base's z axis (the "
                                "paper's)", choices=("estimated", "body_z"))
    body_attitude: str = param("plane", desc="desired base attitude: plane = aligned with the estimator's support "
                               "plane (level on flat ground; the height reference then holds stand_height along "
                               "its normal), level = always level (the paper's)", choices=("plane", "level"))
    late_descent_velocity: float = param(0.4, 0.0, 2.0, "a leg whose touchdown is late (out of the support set "
                                         "after its nominal swing) keeps descending at this speed until the "
                                         "estimator sees contact (read-only)", unit="m/s", live=False)
    stumble_lift: float = param(0.08, 0.0, 0.3, "stumble reflex: a lifting swing foot held back by an obstacle "
                                "(3 cm behind its reference) lifts this much higher, in this swing and the leg's "
                                "next 3 (0 = off; read-only)", unit="m", live=False)
    fz_max: float = param(5000.0, 1.0, 1e5, "normal-force upper bound of a support foot", unit="N")
    # --- cost weights
    w_body: float = param(1.0, 0.0, 1e6, "weight of the 6 body task rows", unit="-")
    w_support: float = param(1.0, 0.0, 1e6, "weight of support-foot position rows", unit="-")
    w_swing: float = param(0.05, 0.0, 1e6, "weight of swing-foot position rows", unit="-")
    w_pitch: float = param(1.0, 0.0, 1e6, "weight of relative-pitch rows (damping / cbf modes)", unit="-")
    w_pitch_none: float = param(1e-3, 0.0, 1.0, "weight of relative-pitch rows in WBC-0", unit="-")
    w_lambda_t: float = param(1e-5, 0.0, 1.0, "contact-force regularization, tangential", unit="-")
    w_lambda_n: float = param(1e-6, 0.0, 1.0, "contact-force regularization, normal", unit="-")
    hessian_reg: float = param(1e-9, 0.0, 1e-3, "Hessian regularization relative to its max diagonal", unit="-")
    # --- torque limits
    torque_limit_mode: str = param("paper", desc="paper = +-tau_limit_paper on all joints; realistic = the drives' "
                                   "torque-speed envelope at the estimated joint velocity (peak = URDF effort; robot "
                                   "YAML leg_type.actuator)",
                                   choices=("paper", "realistic"))
    tau_limit_paper: float = param(10000.0, 1.0, 1e6, "torque bound in paper mode", unit="N m")
    # --- joint limits as barriers (blocks/joint_limits.py)
    joint_limit_barrier: bool = param(False, desc="joint position and velocity limits (URDF) as acceleration-level "
                                      "barrier rows, one per joint; paper: off (read-only: changes the QP size)",
                                      live=False)
    joint_limit_kp: float = param(400.0, 0.0, 1e6, "joint position barrier gain k_p", unit="1/s^2")
    joint_limit_kd: float = param(40.0, 0.0, 1e4, "joint position barrier gain k_d", unit="1/s")
    joint_velocity_gain: float = param(200.0, 1.0, 1e4, "joint velocity barrier gain k_v (small: conservative, "
                                       "the barrier then forbids accelerating well below the limit)", unit="1/s")
    # --- leg collisions (blocks/leg_collision.py)
    leg_collision_barrier: bool = param(False, desc="capsule distances between neighbouring legs' links and from "
                                        "each foot to the body kept above leg_collision_d_min by barrier rows on the "
                                        "closest pairs; paper: off (read-only: changes the QP size)", live=False)
    leg_collision_rows: int = param(4, 1, 60, "barrier rows: the closest candidate pairs within range (read-only: "
                                    "the QP size)", unit="-", live=False)
    leg_collision_d_min: float = param(0.02, 0.0, 0.2, "smallest allowed surface distance between two links", unit="m")
    leg_collision_margin: float = param(0.002, 0.0, 0.05, "back-off of the barrier's boundary above leg_collision_d_min "
                                        "(the rows keep d >= d_min + margin: the discrete 500 Hz barrier undershoots its "
                                        "boundary by ~1 mm on leg_squeeze; docs/actuators.md)", unit="m")
    leg_collision_range: float = param(0.10, 0.0, 1.0, "a pair gets a row when its distance is below d_min + range",
                                       unit="m")
    leg_collision_kp: float = param(50000.0, 0.0, 1e6, "leg-collision barrier gain k_p (poles -200, -250 1/s)",
                                    unit="1/s^2")
    leg_collision_kd: float = param(450.0, 0.0, 1e4, "leg-collision barrier gain k_d", unit="1/s")
    leg_collision_tau_ext: bool = param(True, desc="the barrier's bound also counts the estimated external torque "
                                        "of swing legs (touchdown filter; its acceleration through the leg's mass block)")
    # --- solver and failure handling
    solver: str = param("daqp", desc="QP backend (read-only: swapping it rebuilds the solver workspace inside a tick)",
                       choices=("daqp", "proxqp", "osqp"), live=False)
    solver_tol: float = param(1e-6, 1e-10, 1e-2, "solver primal/dual tolerance (read-only: the backend is set up with it)",
                               unit="-", live=False)
    solver_max_iter: int = param(200, 5, 100000, "solver iteration limit (read-only: the backend is set up with it)", unit="-",
                                 live=False)
    residual_tol: float = param(5e-3, 0.0, 1.0, "accepted normalized equality residual / inequality violation", unit="-")
    max_failures: int = param(10, 0, 10000, "consecutive rejected QPs held before the safe stop", unit="-")
    # --- body task gains
    kp_pos: tuple = param([400.0, 400.0, 900.0], 0.0, 1e5, "body position gains x,y,z", unit="1/s^2")
    kd_pos: tuple = param([40.0, 40.0, 60.0], 0.0, 1e4, "body velocity gains x,y,z", unit="1/s")
    kp_rot: tuple = param([900.0, 900.0, 400.0], 0.0, 1e5, "body attitude gains K_R roll,pitch,yaw", unit="1/s^2")
    kd_rot: tuple = param([60.0, 60.0, 40.0], 0.0, 1e4, "body angular-rate gains K_w", unit="1/s")
    # --- swing leg
    kp_swing: tuple = param([1500.0, 1500.0, 1500.0], 0.0, 1e6, "swing task-space PD stiffness x,y,z (base frame)", unit="N/m")
    kd_swing: tuple = param([60.0, 60.0, 60.0], 0.0, 1e5, "swing task-space PD damping", unit="N s/m")
    support_foot_acceleration: str = param("zero", desc="nominal body-relative acceleration of support feet: zero "
                                           "(paper) or consistent (that of a world-fixed foot under the desired base motion)",
                                           choices=("zero", "consistent"))
    swing_pitch_recenter: bool = param(True, desc="swing legs track the nominal relative pitch (PD below) instead of "
                                       "zero pitch acceleration; support legs unaffected; paper: off")
    kp_swing_pitch: float = param(100.0, 0.0, 1e5, "swing relative-pitch re-centering stiffness", unit="1/s^2")
    kd_swing_pitch: float = param(20.0, 0.0, 1e4, "swing relative-pitch re-centering damping", unit="1/s")
    swing_pitch_projection: bool = param(True, desc="project the swing PD torque so it does not accelerate the "
                                         "relative pitch (dynamically consistent, leg block); paper: off")
    lift_height: float = param(0.08, 0.0, 0.4, "swing apex above the stance height", unit="m")
    touchdown_depth: float = param(0.01, 0.0, 0.1, "swing target below the nominal ground height", unit="m")
    raibert_gain: float = param(0.5, 0.0, 2.0, "touchdown offset = gain * v_ref * support duration", unit="-")
    # --- body references
    stand_height: float = param(0.42, 0.1, 1.5, "standing / walking base height", unit="m")
    stand_up_start: float = param(0.0, 0.0, 1000.0, "start of the stand-up ramp", unit="s")
    stand_up_duration: float = param(2.0, 0.01, 100.0, "duration of the stand-up ramp", unit="s")
    forward_velocity: float = param(0.1, -1.0, 1.0, "forward walking speed (world x)", unit="m/s")
    velocity_ramp_end: float = param(6.0, 0.0, 1000.0, "time at which the forward speed is reached", unit="s")
    # --- velocity commands (blocks/command.py; a scenario's `commands`, the node's /cmd_vel): limits, acceleration
    # limits and timeout live (the next /cmd_vel message is clamped to the new limits, the next tick filtered)
    cmd_max_vx: float = param(0.3, 0.0, 2.0, "command limit, forward speed |vx| (heading frame)", unit="m/s")
    cmd_max_vy: float = param(0.15, 0.0, 2.0, "command limit, sideways speed |vy| (heading frame)", unit="m/s")
    cmd_max_wz: float = param(0.5, 0.0, 5.0, "command limit, yaw rate |wz|", unit="rad/s")
    cmd_accel_x: float = param(0.3, 0.001, 10.0, "acceleration limit of the commanded vx", unit="m/s^2")
    cmd_accel_y: float = param(0.3, 0.001, 10.0, "acceleration limit of the commanded vy", unit="m/s^2")
    cmd_accel_wz: float = param(1.0, 0.001, 50.0, "acceleration limit of the commanded wz", unit="rad/s^2")
    cmd_vel_timeout: float = param(0.5, 0.01, 100.0, "a command older than this counts as zero", unit="s")
    stand_delay: float = param(1.0, 0.0, 100.0, "the gait stops (every leg in support) after the filtered "
                               "command has been zero this long", unit="s", live=False)
    foothold_velocity_gain: float = param(0.0, 0.0, 1.0, "under a command: touchdown moved by this gain times "
                                          "the base velocity error (estimate - command, base frame)", unit="s", live=False)

    def __post_init__(self):
        validate(self)
        # gain vectors as arrays, once (frozen dataclass: set through object.__setattr__)
        for name in ("kp_pos", "kd_pos", "kp_rot", "kd_rot"):
            object.__setattr__(self, f"_{name}", np.asarray(getattr(self, name), dtype=float))
        if self.theta_min + self.cbf_margin >= self.theta_max - self.cbf_margin:
            raise ConfigError("cbf_margin: leaves an empty relative-pitch range")
        if (self.cbf_margin_mode == "tau_ext"
                and self.theta_min + self.cbf_margin + self.cbf_margin_max >= self.theta_max - self.cbf_margin):
            raise ConfigError("cbf_margin_max: the tau_ext boundary move can leave an empty relative-pitch range")

    @property
    def leg_collision_boundary(self) -> float:
        """Where the leg-collision barrier puts its boundary: ``d_min + margin`` [m] (surface distance)."""
        return self.leg_collision_d_min + self.leg_collision_margin


@dataclass(frozen=True)
class WbcNodeConfig(WbcConfig):
    """The ``wbc_controller`` node's parameters: every :class:`WbcConfig` field plus its own read-only ones."""

    robot: str = param("hexapod", desc="robot config name or YAML path", live=False)
    scenario: str = param("nominal", desc="scenario whose references (stand-up, speed, gait start) are used",
                          live=False)
    qos_depth: int = param(200, 1, 100000, "history depth of the reliable topics", unit="messages", live=False)
    input_timing: str = param("tick_grid", desc="tick_grid = inputs paired by control tick (stamps k * 2 ms), "
                              "t = k * 2 ms; sample = hardware stamps: inputs paired by equal stamps (the "
                              "estimator's outputs carry its joint-state sample's), t = stamp - first tick's "
                              "stamp, commands carry the sample's stamp (bridge: command_timing untimed)",
                              choices=("tick_grid", "sample"), live=False)
    forward_command_topic: str = param("", desc="also publish the efforts as a ros2_control "
                                       "forward_command_controller command (std_msgs/Float64MultiArray, efforts "
                                       "only) on this topic, e.g. /effort_controller/commands; empty = off",
                                       live=False)
    cmd_vel_stamped: bool = param(False, desc="/cmd_vel is geometry_msgs/msg/TwistStamped (as Nav2 publishes it); "
                                  "false: geometry_msgs/msg/Twist", live=False)
    forward_command_joints: tuple = param((), desc="joint order of forward_command_topic (the controller's "
                                          "`joints` parameter); empty = joint_states order", type="str_array",
                                          live=False)

    def __post_init__(self):
        super().__post_init__()
        check_reach(self, self.robot)

    @property
    def wbc(self) -> WbcConfig:
        """The controller's part (a plain :class:`WbcConfig`)."""
        return subset(self, WbcConfig)


@lru_cache(maxsize=8)
def _reach(robot: str) -> tuple[float, float, float, float]:
    """``(d_min, d_max, foot_radius, base half-height)`` [m] of ``robot`` (its legs' foot depth range,
    :meth:`legged_wbc.model.RobotModel.foot_depth_range`; computed once per robot, ~0.3 s)."""
    from legged_wbc.model import RobotModel

    rm = RobotModel(robot)
    d_min, d_max = rm.foot_depth_range()
    return d_min, d_max, float(rm.foot_radius), 0.5 * float(rm.cfg.base_size[2])


def check_reach(cfg, robot: str) -> None:
    """The controller parameters against the robot's geometry: a ``ConfigError`` naming the parameter and
    the reason when the legs cannot hold them. The one check every path goes through (the node's
    parameter file and live updates, the headless loop's config and ``--set``: :class:`WbcNodeConfig`).

    With the feet at their nominal placement (``stance.reach``), every joint inside its limits and every
    knee bent by at least ``KNEE_BEND_MIN`` (:meth:`~legged_wbc.model.RobotModel.foot_depth_range`):

    * ``stand_height`` + ``touchdown_depth`` (a swing target below the ground) within the legs' reach;
    * a swing foot at its highest (``lift_height`` + ``stumble_lift`` above the ground) still reachable;
    * the body's underside (half its height below the base origin) at least a foot radius above the ground."""
    from legged_wbc.model import KNEE_BEND_MIN

    d_min, d_max, r, half = _reach(robot)
    h = float(cfg.stand_height)
    top = d_max + r - cfg.touchdown_depth
    if h > top + 1e-9:
        raise ConfigError(f"stand_height: {h:g} m is beyond the legs' reach ({robot}): with the feet at their "
                          f"nominal placement, a touchdown target {cfg.touchdown_depth:g} m below the ground and "
                          f"the knees bent at least {KNEE_BEND_MIN:g} rad, the base stands at most {top:.3f} m high")
    apex = cfg.lift_height + cfg.stumble_lift
    if h - r - apex < d_min - 1e-9:
        raise ConfigError(f"lift_height: a swing apex of {apex:g} m (lift_height + stumble_lift) at stand_height "
                          f"{h:g} m is above the legs' reach ({robot}): at most {h - r - d_min:.3f} m")
    if h < half + r - 1e-9:
        raise ConfigError(f"stand_height: {h:g} m leaves the body ({2 * half:g} m high) less than a foot radius "
                          f"({r:g} m) above the ground ({robot}): at least {half + r:.3f} m")


def default_config_path() -> Path:
    return share_path("config", "wbc_controller.yaml")


def load_wbc_node_config(path: str | Path | None = None, overrides: dict | None = None) -> WbcNodeConfig:
    p = Path(path) if path else default_config_path()
    return load_node_config(WbcNodeConfig, p, NODE_NAME, overrides)


def load_wbc_config(path: str | Path | None = None, overrides: dict | None = None,
                    robot: str | None = None) -> WbcConfig:
    """:class:`WbcConfig` from the parameter file (default ``config/wbc_controller.yaml``) plus ``overrides``,
    checked against ``robot``'s geometry (:func:`check_reach`; default: the file's ``robot``)."""
    if robot is not None:
        overrides = {**(overrides or {}), "robot": robot}
    return load_wbc_node_config(path, overrides).wbc
