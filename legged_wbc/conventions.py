"""The one place where MuJoCo's and Pinocchio's free-floating conventions are converted.

| quantity      | Pinocchio (internal)                         | MuJoCo free joint                      |
|---------------|----------------------------------------------|----------------------------------------|
| configuration | ``[p_world(3), quat_xyzw(4), q_j]``           | ``qpos = [p_world(3), quat_wxyz(4), q_j]`` |
| velocity      | ``[v_base_in_base(3), w_base_in_base(3), dq]`` | ``qvel = [v_world(3), w_base_in_base(3), dq]`` |

Joint blocks are permuted by name (MuJoCo's joint order, its actuator order and Pinocchio's order
may all differ). Pinocchio's velocity ``v`` and MuJoCo's ``qvel`` are related by
``qvel = T(q) v`` with ``T = blockdiag(R, I_3, P)``, so ``M_pin = T^T M_mj T`` and
``h_pin = T^T (h_mj + M_mj T_dot v)`` with ``T_dot = blockdiag(R [w]x, 0, 0)``.
"""

from __future__ import annotations

import numpy as np

# The stack's clock, defined once: physics at 1 kHz, control ticks at 500 Hz (tick k = sim time k * 2 ms)
PHYSICS_DT_NS = 1_000_000       # one physics step [ns]
CONTROL_PERIOD_NS = 2_000_000   # one control tick = 2 physics steps [ns]
CONTROL_DT = CONTROL_PERIOD_NS * 1e-9   # the same [s]
UNTIMED_TICK = -1               # a torque command that answers no particular tick


def quat_wxyz_to_xyzw(q: np.ndarray) -> np.ndarray:
    return np.array([q[1], q[2], q[3], q[0]])


def quat_xyzw_to_wxyz(q: np.ndarray) -> np.ndarray:
    return np.array([q[3], q[0], q[1], q[2]])


def rotation_from_quat_xyzw(q: np.ndarray) -> np.ndarray:
    """Rotation matrix (base -> world) of a unit quaternion stored ``[x, y, z, w]``."""
    x, y, z, w = q
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ])


class StateConverter:
    """Converts whole states between a MuJoCo model and a :class:`~legged_wbc.model.RobotModel`.

    ``pin_joint_names`` is Pinocchio's joint order; ``mj_joint_names`` the order of the hinge joints
    in MuJoCo's ``qpos[7:]`` / ``qvel[6:]``; ``mj_actuator_joints`` the joint each actuator drives.
    """

    def __init__(self, pin_joint_names, mj_joint_names, mj_actuator_joints):
        from legged_wbc.description import joint_permutation

        self.pin_joint_names = list(pin_joint_names)
        self.n = len(self.pin_joint_names)
        if len(mj_joint_names) != self.n:
            raise ValueError(f"MuJoCo model has {len(mj_joint_names)} hinge joints, Pinocchio {self.n}")
        # x_pin = x_mj[mj_to_pin]; x_mj = x_pin[pin_to_mj]
        self.mj_to_pin = joint_permutation(mj_joint_names, self.pin_joint_names)
        self.pin_to_mj = joint_permutation(self.pin_joint_names, mj_joint_names)
        # ctrl[k] = tau_pin[pin_to_act[k]]
        self.pin_to_act = joint_permutation(self.pin_joint_names, mj_actuator_joints)
        self.act_to_pin = np.argsort(self.pin_to_act)   # tau_pin[j] = actuator_force[act_to_pin[j]]

    # ---------------------------------------------------------------- configuration / velocity
    def q_from_mj(self, qpos: np.ndarray) -> np.ndarray:
        q = np.empty(self.n + 7)
        q[:3] = qpos[:3]
        q[3:7] = quat_wxyz_to_xyzw(qpos[3:7])
        q[7:] = qpos[7:][self.mj_to_pin]
        return q

    _BASE_Q_INDEX = np.array([0, 1, 2, 4, 5, 6, 3])   # MuJoCo base pose -> position, quaternion xyzw

    def base_from_mj(self, qpos: np.ndarray, qvel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The base part of :meth:`q_from_mj` and :meth:`v_from_mj`, the same numbers, cheaply (the
        simulation's ``/ground_truth/odom`` every 2 ms): ``(q[:7], v[:6])``, position and quaternion
        ``xyzw`` in the world frame, linear and angular velocity in the base frame. The rotation is built
        from Python floats (the same IEEE products and sums as numpy's scalars, ~3x cheaper)."""
        q = qpos[self._BASE_Q_INDEX]
        R = rotation_from_quat_xyzw(q[3:].tolist())
        v = np.empty(6)
        v[:3] = R.T @ qvel[:3]
        v[3:] = qvel[3:6]
        return q, v

    def v_from_mj(self, qpos: np.ndarray, qvel: np.ndarray) -> np.ndarray:
        R = rotation_from_quat_xyzw(quat_wxyz_to_xyzw(qpos[3:7]))
        v = np.empty(self.n + 6)
        v[:3] = R.T @ qvel[:3]
        v[3:6] = qvel[3:6]
        v[6:] = qvel[6:][self.mj_to_pin]
        return v

    def qpos_from_pin(self, q: np.ndarray) -> np.ndarray:
        qpos = np.empty(self.n + 7)
        qpos[:3] = q[:3]
        qpos[3:7] = quat_xyzw_to_wxyz(q[3:7])
        qpos[7:] = q[7:][self.pin_to_mj]
        return qpos

    def qvel_from_pin(self, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        R = rotation_from_quat_xyzw(q[3:7])
        qvel = np.empty(self.n + 6)
        qvel[:3] = R @ v[:3]
        qvel[3:6] = v[3:6]
        qvel[6:] = v[6:][self.pin_to_mj]
        return qvel

    # ---------------------------------------------------------------- dynamics quantities
    def T(self, q: np.ndarray) -> np.ndarray:
        """``qvel = T v``: MuJoCo velocity from Pinocchio velocity (joint permutation included)."""
        nv = self.n + 6
        T = np.zeros((nv, nv))
        T[:3, :3] = rotation_from_quat_xyzw(q[3:7])
        T[3:6, 3:6] = np.eye(3)
        T[6 + np.arange(self.n), 6 + self.mj_to_pin] = 1.0
        return T

    def mass_matrix_to_pin(self, q: np.ndarray, M_mj: np.ndarray) -> np.ndarray:
        T = self.T(q)
        return T.T @ M_mj @ T

    def bias_to_pin(self, q: np.ndarray, v: np.ndarray, M_mj: np.ndarray, h_mj: np.ndarray) -> np.ndarray:
        T = self.T(q)
        Tdot_v = np.zeros(self.n + 6)
        R = T[:3, :3]
        Tdot_v[:3] = R @ np.cross(v[3:6], v[:3])
        return T.T @ (h_mj + M_mj @ Tdot_v)

    def jacobian_to_pin(self, q: np.ndarray, J_mj: np.ndarray) -> np.ndarray:
        """A Jacobian w.r.t. ``qvel`` turned into one w.r.t. Pinocchio's ``v``."""
        return J_mj @ self.T(q)

    def ctrl_from_tau(self, tau_pin: np.ndarray) -> np.ndarray:
        return tau_pin[self.pin_to_act]
