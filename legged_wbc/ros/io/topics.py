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


# ----------------------------------------------------------------------------- what a recording carries
# The stack's recorded topics per simulated second, by process part (legged_wbc.ros.stack.composition): each
# topic's rate [Hz] and a bound on the numbers (8-byte values) in one message, by the robot's joint count n and
# leg count L. The recording's shared-memory rings (legged_wbc.ros.recording.bag_process) are sized from it.
RECORDED_TOPICS = {
    TOPIC_CLOCK: ("sim", 1000, lambda n, L: 1),
    TOPIC_JOINT_STATES: ("sim", 1000, lambda n, L: 3 * n),
    TOPIC_IMU: ("sim", 1000, lambda n, L: 37),                 # orientation, rates, accelerations, covariances
    TOPIC_GT_ODOM: ("sim", 500, lambda n, L: 85),              # pose, twist, covariances
    TOPIC_GT_CONTACTS: ("sim", 500, lambda n, L: L),
    TOPIC_DISTURBANCE: ("sim", 500, lambda n, L: n),
    TOPIC_EST_ODOM: ("control", 500, lambda n, L: 85),
    TOPIC_EST_SUPPORT: ("control", 500, lambda n, L: 3 * L),
    TOPIC_EST_TAU_EXT: ("control", 500, lambda n, L: 3 * n),
    TOPIC_EST_DIAG: ("control", 500, lambda n, L: 64),
    TOPIC_TORQUE_CMD: ("control", 500, lambda n, L: 3 * n),
    TOPIC_WBC_PITCH: ("control", 500, lambda n, L: L + 8),
    TOPIC_WBC_DIAG: ("control", 500, lambda n, L: 64),
}
RECORD_OVERHEAD_BYTES = 64          # per message: the ring's record header, stamps, array lengths, padding
OTHER_TOPICS_BYTES_S = 64 << 10     # per part and simulated second: the rest (diagnostics, /tf, latency windows, ...)


def recorded_bytes_per_s(parts, n: int, legs: int) -> int:
    """A bound on the bytes the recording's ring takes per simulated second for the topics of ``parts``
    (``"sim"``, ``"control"``) of a robot with ``n`` joints and ``legs`` legs (:data:`RECORDED_TOPICS`)."""
    total = OTHER_TOPICS_BYTES_S * len(parts)
    for part, hz, numbers in RECORDED_TOPICS.values():
        if part in parts:
            total += hz * (8 * numbers(n, legs) + RECORD_OVERHEAD_BYTES)
    return int(total)
