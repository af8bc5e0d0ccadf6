"""Topic names and the labels of the stack's arrays (conventions: :mod:`legged_wbc.ros.io`)."""

from __future__ import annotations

from typing import Sequence


# ----------------------------------------------------------------------------- names and constants
TOPIC_JOINT_STATES = "joint_states"
TOPIC_IMU = "imu"
TOPIC_CLOCK = "/clock"
TOPIC_TORQUE_CMD = "joint_torque_cmd"
TOPIC_DISTURBANCE = "disturbance"
TOPIC_GT_ODOM = "ground_truth/odom"
TOPIC_GT_CONTACTS = "ground_truth/contacts"
TOPIC_BRIDGE_DIAGNOSTICS = "bridge/diagnostics"
TOPIC_EST_ODOM = "estimator/odom"         # state_estimator's outputs (see state_estimator/node.py)
TOPIC_EST_SUPPORT = "estimator/support"
TOPIC_EST_TAU_EXT = "estimator/tau_ext"
TOPIC_EST_DIAG = "estimator/diagnostics"
TOPIC_WBC_PITCH = "wbc/relative_pitch"    # wbc_controller's outputs (see wbc_controller/node.py)
TOPIC_WBC_DIAG = "wbc/diagnostics"
TOPIC_COMMAND_LATENCY = "bridge/command_latency"
COMMAND_LATENCY_LABEL = "tick_and_command_latency_us[pairs]"

WORLD_FRAME = "world"

JOINT_ORDER = "joint_states.name order"
DISTURBANCE_LABEL = f"disturbance_torque_Nm[{JOINT_ORDER}]"


def contacts_label(leg_names: Sequence[str]) -> str:
    return f"foot_contact_0or1[{','.join(leg_names)}]"
