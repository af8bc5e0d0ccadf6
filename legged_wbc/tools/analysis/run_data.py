"""What a run is once loaded (:class:`RunData`), the topics a bag run is read from and which metric
needs which topic and series; shared by :mod:`.bag_metrics` and :mod:`.bag_series`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

T_PITCH = "/wbc/relative_pitch"
T_WBC_DIAG = "/wbc/diagnostics"
T_CMD = "/joint_torque_cmd"
T_SUPPORT = "/estimator/support"
T_EST_ODOM = "/estimator/odom"
T_GT_ODOM = "/ground_truth/odom"
T_GT_CONTACTS = "/ground_truth/contacts"
T_DIST = "/disturbance"
T_BRIDGE_DIAG = "/bridge/diagnostics"
T_JOINT_STATES = "/joint_states"
T_CMD_LATENCY = "/bridge/command_latency"
T_CMD_VEL = "/cmd_vel"
T_GAIT_CLOCK = "/wbc/gait_clock"
TOPICS = (T_PITCH, T_WBC_DIAG, T_CMD, T_SUPPORT, T_EST_ODOM, T_GT_ODOM, T_GT_CONTACTS, T_DIST, T_BRIDGE_DIAG,
          T_CMD_LATENCY)
# read when the bag has them, never reported missing: a live velocity command (Twist or TwistStamped) and
# the controller's gait clock under it
OPTIONAL_TOPICS = (T_CMD_VEL, T_GAIT_CLOCK)
# the command metrics (legged_wbc.metrics.command_metrics) and the topic each needs besides a command
COMMAND_METRIC_TOPICS = {"velocity_tracking_rmse_mps": (T_GT_ODOM,), "yaw_rate_tracking_rmse_radps": (T_GT_ODOM,),
                         "estimated_velocity_rmse_mps": (T_GT_ODOM, T_EST_ODOM), "standing_drift_m": (T_GT_ODOM,)}

# which topic each metric needs (for the "could not be computed" list)
METRIC_TOPICS = {
    "max_violation_rad": (T_PITCH, T_SUPPORT),
    "violation_rate_pct": (T_PITCH, T_SUPPORT),
    "first_violation_time_s": (T_PITCH, T_SUPPORT),
    "rp_rmse_deg": (T_GT_ODOM,),
    "torque_rms_nm": (T_CMD,),
    "torque_max_nm": (T_CMD,),
    "qp_p99_us": (T_WBC_DIAG,),
    "qp_over_2ms_pct": (T_WBC_DIAG,),
    "qp_failures": (T_WBC_DIAG,),
    "distance_m": (T_GT_ODOM,),
    "fell": (T_GT_ODOM,),
    "deadline_misses": (T_BRIDGE_DIAG,),
}
METRIC_SOURCE_TOPICS = (T_PITCH, T_SUPPORT, T_CMD, T_WBC_DIAG, T_GT_ODOM)
SERIES_FOR_METRIC = {
    "max_violation_rad": ("theta", "support"), "violation_rate_pct": ("theta", "support"),
    "first_violation_time_s": ("theta", "support"), "rp_rmse_deg": ("rp_err",), "torque_rms_nm": ("tau",),
    "torque_max_nm": ("tau",), "qp_p99_us": ("qp_time_us",), "qp_over_2ms_pct": ("qp_time_us",),
    "qp_failures": ("qp_accepted",), "distance_m": ("base_pos",),
}


CONTROLLER_NAMES = {"none": "WBC-0", "damping": "WBC-D", "cbf": "WBC-CBF"}   # controller mode -> the paper's name


def controller_title(c: str | None) -> str:
    """A run's controller as the report and figures name it (an unnamed mode as it is, ``?`` if unknown)."""
    return CONTROLLER_NAMES.get(c or "", c or "?")


class RunInputError(ValueError):
    """An input that is neither a rosbag2 directory nor a headless run directory, or unreadable."""


@dataclass
class RunData:
    """One run, from a bag or a headless run directory."""

    path: Path
    kind: str                      # "bag" | "headless"
    label: str                     # e.g. "cbf (bag)"
    controller: str | None         # none | damping | cbf
    scenario_name: str | None      # as recorded (name or YAML path)
    scenario: object | None        # legged_wbc.scenario.Scenario, if it could be loaded
    mode: str | None               # lockstep | realtime | headless
    series: dict
    theta_min: float = -0.3
    theta_max: float = 0.3
    fell: bool | None = False
    fall_reason: str | None = None
    fall_index: int | None = None  # series row of the fall (metrics stop there)
    sim_time_s: float | None = None
    wall_time_s: float | None = None
    bridge: dict = field(default_factory=dict)          # last /bridge/diagnostics sample
    custom_data: dict = field(default_factory=dict)
    missing_topics: list = field(default_factory=list)
    gaps: dict = field(default_factory=dict)            # topic -> ticks without a sample
    notes: list = field(default_factory=list)
    leg_names: list = field(default_factory=list)
    joint_names: list = field(default_factory=list)
    joint_effort: np.ndarray | None = None              # effort limit [N m] per joint_names entry
    headless_metrics: dict | None = None                # metrics.json of a headless run
    leg_joints: dict = field(default_factory=dict)      # leg name -> column indices of its joints in tau
    complete: np.ndarray | None = None                  # rows with every metric topic (None: all)
    command_latency_us: np.ndarray | None = None        # per closed tick (NaN: missed); bags of bridges that publish it
    command_latency_ticks: np.ndarray | None = None     # the tick of each (-1: a period dropped in a stall)
    command_source: str | None = None                   # where a bag's command series come from (None: no command)

    def joints_of_leg(self, leg: int | str) -> list[int]:
        name = self.leg_names[leg] if isinstance(leg, int) and leg < len(self.leg_names) else leg
        return list(self.leg_joints.get(name, []))

    @property
    def disturbed_leg(self) -> int | None:
        sc = self.scenario
        if sc is None or not sc.disturbance.enabled or sc.disturbance.leg not in self.leg_names:
            return None
        return self.leg_names.index(sc.disturbance.leg)
