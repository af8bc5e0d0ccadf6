"""Dynamics core on Pinocchio: the one model the controller, the estimator and the checks share.

State convention (Pinocchio free-flyer, used everywhere inside this package):

* ``q = [p_base_in_world (3), quat_base_to_world_xyzw (4), q_joints (n)]``, ``nq = n + 7``;
* ``v = [v_base_in_base (3), w_base_in_base (3), dq_joints (n)]``, ``nv = n + 6``.

Joints are in Pinocchio's order (the URDF tree order); :class:`RobotModel` maps names to indices
and rejects configs that name joints the URDF does not have.

Leg quantities are body-relative (they do not depend on the base pose) and are computed on a second,
fixed-base Pinocchio model of the same URDF, whose world frame *is* the base frame. For leg ``i``:

* ``p``      foot-point (sphere centre) position in the base frame [m];
* ``J_p``    3xk Jacobian of ``p`` w.r.t. the leg's k joints (k = 3: a point-foot leg; 4: the paper's
  leg, whose foot pitch joint makes it redundant);
* ``a``      foot-link x-axis in the base frame; ``theta = atan2(-a_z, sqrt(a_x^2 + a_y^2))``
  is the relative pitch [rad];
* ``J_w``    3xk Jacobian of the foot link's angular velocity relative to the base (base axes);
* ``J_theta = (a x g)^T J_w``, ``g = [a_z a_x / r, a_z a_y / r, -r]``; zero when r^2 <= 1e-10;
* ``J = [J_p; J_theta]`` the 4xk extended Jacobian (4x4 on the paper's legs);

Relative pitch exists only on legs with the foot pitch joint (``LegSpec.has_pitch``); on a 3-DoF
point-foot leg ``theta``, ``theta_dot``, ``J_theta`` and its drift are 0 (its pitch row is empty), and
it has no null space (``n`` is not defined).
* ``dJ_p_dq`` and ``dJ_theta_dq``: the exact drift terms ``J_dot q_dot`` (Pinocchio classical
  acceleration at zero joint acceleration, plus the analytic second derivative of theta);
* ``n`` unit null-space vector of ``J_p``, signed so that ``J_theta n >= 0``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pinocchio as pin

from legged_wbc.kinematics import LegBatch, LegKinematicsWorkspace, relative_pitch
from legged_wbc.robot import ConfigError, RobotConfig, foot_geometry, load_robot_config
from legged_wbc.description import joint_arrays, joint_permutation  # noqa: F401  (joint_permutation: re-exported)



KNEE_BEND_MIN = 0.6    # [rad] the least knee bend of a foot placement the controller is asked to hold (0.3: a
#                        stand height of 0.74 m it allows fell walking, 0.6: 0.72 m walks; the hexapod)


def cross3(a, b) -> np.ndarray:
    """Cross product of two 3-vectors (much cheaper than ``np.cross`` for one pair)."""
    a0, a1, a2 = float(a[0]), float(a[1]), float(a[2])
    b0, b1, b2 = float(b[0]), float(b[1]), float(b[2])
    return np.array([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0])


def cross_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cross products of two (N, 3) arrays."""
    out = np.empty_like(a)
    out[:, 0] = a[:, 1] * b[:, 2] - a[:, 2] * b[:, 1]
    out[:, 1] = a[:, 2] * b[:, 0] - a[:, 0] * b[:, 2]
    out[:, 2] = a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0]
    return out


@dataclass
class LegState:
    """Body-relative kinematics of one leg at one instant (see the module docstring)."""

    p: np.ndarray
    J_p: np.ndarray
    a: np.ndarray
    theta: float
    theta_dot: float
    J_w: np.ndarray
    J_theta: np.ndarray
    J: np.ndarray
    dJ_p_dq: np.ndarray
    dJ_theta_dq: float
    v_p: np.ndarray

    @property
    def n(self) -> np.ndarray:
        """Unit null-space vector of ``J_p`` with ``J_theta n >= 0`` (computed on demand)."""
        return null_vector(self.J_p, self.J_theta)


class RobotModel:
    """Pinocchio model (free-flyer + fixed-base) of a robot config, with leg bookkeeping."""

    def __init__(self, cfg: RobotConfig | str | None = None):
        if cfg is None or isinstance(cfg, (str, Path)):      # else a robot description (RobotConfig or a URDF robot's)
            cfg = load_robot_config(cfg)
        self.cfg = cfg
        urdf = str(cfg.urdf_path())
        self.model = pin.buildModelFromUrdf(urdf, pin.JointModelFreeFlyer())
        self.fixed = pin.buildModelFromUrdf(urdf)
        self.n = self.model.nv - 6
        if self.fixed.nv != self.n:
            raise ConfigError(f"{urdf}: fixed-base model has {self.fixed.nv} joints, floating {self.n}")
        # joint order: Pinocchio's (URDF tree order); names[k] is the joint of q[7+k] / v[6+k]
        self.joint_names: list[str] = [self.fixed.names[j] for j in range(1, self.fixed.njoints)]
        for j in range(1, self.fixed.njoints):
            if self.fixed.joints[j].nq != 1 or self.fixed.joints[j].nv != 1:
                raise ConfigError(f"joint {self.fixed.names[j]}: only 1-DoF joints are supported")
        self.joint_index = {name: k for k, name in enumerate(self.joint_names)}
        missing = [j for j in cfg.joint_names if j not in self.joint_index]
        if missing:
            raise ConfigError(f"robot config names joints not in {urdf}: {missing}")
        extra = [j for j in self.joint_names if j not in set(cfg.joint_names)]
        if extra:
            raise ConfigError(f"{urdf} has joints the robot config does not assign to a leg: {extra}")
        specs = cfg.leg_specs
        # leg_joints[i]: joint indices (0..n-1) of leg i, base to foot ([yaw, pitch, knee, ankle] on the paper's legs)
        self.leg_joints = [np.array([self.joint_index[j] for j in leg.joints]) for leg in specs]
        counts = sorted({len(leg.joints) for leg in specs})
        if len(counts) != 1 or counts[0] not in (3, 4):
            raise ConfigError(f"{cfg.source or cfg.name}: legs of {counts} joints; every leg must have 3 or 4 "
                              "joints, the same count (legs of different counts in one robot are not supported yet)")
        self.k = counts[0]                                   # joints per leg
        self.leg_has_pitch = np.array([leg.has_pitch and self.k == 4 for leg in specs])
        self._leg_joint_matrix = np.array(self.leg_joints)  # (N, k)
        self.n_legs = cfg.n_legs
        # per joint, Pinocchio order: armature (reflected rotor inertia, in both models as in MuJoCo), limits, drives
        # (velocity limit [rad/s] and the drives' voltage line [N m], [rad/s]: leg_type.actuator; the simulation
        # side's legged_wbc.sim_robot.SimRobot holds the same arrays)
        tab = joint_arrays(cfg, self.joint_names)
        self.armature, self.lower, self.upper, self.effort = tab["armature"], tab["lower"], tab["upper"], tab["effort"]
        self.velocity_limit, self.stall_torque = tab["velocity_limit"], tab["stall_torque"]
        self.no_load_speed = tab["no_load_speed"]
        self.model.armature[6:] = self.armature
        self.fixed.armature[:] = self.armature
        self._add_foot_frames(urdf)
        self.data = self.model.createData()
        self.fdata = self.fixed.createData()
        self.total_mass = float(sum(i.mass for i in self.model.inertias))
        self.nq, self.nv = self.model.nq, self.model.nv
        self._tril = np.tril_indices(self.nv, -1)
        self._zeros_n = np.zeros(self.n)

    def _add_foot_frames(self, urdf: str) -> None:
        """Foot-point frames (sphere centres) on the foot links, in both models."""
        cfg = self.cfg
        fg = foot_geometry(cfg)
        self.foot_offset = fg.offset
        self.foot_radius = fg.radius
        self.foot_frames_float: list[int] = []
        self.foot_frames_fixed: list[int] = []
        self.foot_link_frames_fixed: list[int] = []
        for leg in cfg.leg_specs:
            link = leg.foot_link
            for mdl, out in ((self.model, self.foot_frames_float), (self.fixed, self.foot_frames_fixed)):
                if not mdl.existFrame(link):
                    raise ConfigError(f"foot link {link!r} not in {urdf}")
                body_id = mdl.getFrameId(link)
                body = mdl.frames[body_id]
                fr = pin.Frame(f"{leg.name}_foot_point", body.parentJoint, body_id,
                               body.placement * pin.SE3(np.eye(3), fg.offset), pin.FrameType.OP_FRAME)
                out.append(mdl.addFrame(fr))
            self.foot_link_frames_fixed.append(self.fixed.getFrameId(link))

    # ------------------------------------------------------------------ state helpers
    def neutral(self) -> np.ndarray:
        return pin.neutral(self.model)

    def check_state(self, q: np.ndarray, v: np.ndarray | None = None) -> None:
        """Raise ``ValueError`` naming the problem if ``q``/``v`` have the wrong size or are not finite."""
        if q.shape != (self.nq,):
            raise ValueError(f"q: expected shape ({self.nq},) = [p(3), quat_xyzw(4), {self.n} joints], got {q.shape}")
        if not np.all(np.isfinite(q)):
            raise ValueError("q: contains NaN/inf")
        if abs(np.linalg.norm(q[3:7]) - 1.0) > 1e-6:
            raise ValueError(f"q: base quaternion must be unit, norm {np.linalg.norm(q[3:7]):.6g}")
        if v is not None:
            if v.shape != (self.nv,):
                raise ValueError(f"v: expected shape ({self.nv},) = [v_base(3), w_base(3), {self.n} joints], got {v.shape}")
            if not np.all(np.isfinite(v)):
                raise ValueError("v: contains NaN/inf")

    def integrate(self, q: np.ndarray, v: np.ndarray, dt: float) -> np.ndarray:
        """Configuration after moving with body velocity ``v`` for ``dt`` seconds (``pin.integrate``)."""
        return pin.integrate(self.model, q, v * dt)

    def leg_slice_v(self, i: int) -> np.ndarray:
        """Indices in ``v`` (nv) of leg ``i``'s joints."""
        return self.leg_joints[i] + 6

    # ------------------------------------------------------------------ floating-base dynamics
    def mass_matrix(self, q: np.ndarray) -> np.ndarray:
        """Joint-space inertia ``M(q)`` (nv x nv, symmetric; Pinocchio fills the upper triangle)."""
        M = pin.crba(self.model, self.data, q).copy()
        M[self._tril] = M.T[self._tril]
        return M

    def bias(self, q: np.ndarray, v: np.ndarray) -> np.ndarray:
        """``h = C(q, v) v + g(q)`` [N, N m] in Pinocchio coordinates."""
        return pin.nonLinearEffects(self.model, self.data, q, v).copy()

    def com(self, q: np.ndarray) -> np.ndarray:
        return pin.centerOfMass(self.model, self.data, q).copy()

    def foot_positions_world(self, q: np.ndarray) -> np.ndarray:
        pin.framesForwardKinematics(self.model, self.data, q)
        return np.array([self.data.oMf[f].translation for f in self.foot_frames_float])

    def foot_jacobians_world(self, q: np.ndarray) -> list[np.ndarray]:
        """Linear (3 x nv) Jacobians of the foot points, world axes, Pinocchio velocity coordinates."""
        pin.computeJointJacobians(self.model, self.data, q)
        pin.updateFramePlacements(self.model, self.data)
        return [pin.getFrameJacobian(self.model, self.data, f, pin.LOCAL_WORLD_ALIGNED)[:3].copy()
                for f in self.foot_frames_float]

    # ------------------------------------------------------------------ body-relative leg kinematics
    def legs_batch(self, qj: np.ndarray, dqj: np.ndarray | None = None) -> "LegBatch":
        """Leg kinematics of all legs as stacked arrays (leg index first), for the 500 Hz loop.

        ``qj`` [rad], ``dqj`` [rad/s] in Pinocchio joint order."""
        if qj.shape != (self.n,):
            raise ValueError(f"joint positions: expected {self.n} values, got {qj.shape}")
        if dqj is None:
            dqj = self._zeros_n
        elif dqj.shape != (self.n,):
            raise ValueError(f"joint velocities: expected {self.n} values, got {dqj.shape}")
        m, d, N = self.fixed, self.fdata, self.n_legs
        lwa = pin.LOCAL_WORLD_ALIGNED
        pin.forwardKinematics(m, d, qj, dqj, self._zeros_n)
        pin.computeJointJacobians(m, d, qj)
        pin.updateFramePlacements(m, d)
        P = np.empty((N, 3))
        J = np.empty((N, 4, self.k))
        A = np.empty((N, 3))
        dJp = np.empty((N, 3))
        Jw_all = np.empty((N, 3, self.k))
        theta = np.empty(N)
        theta_dot = np.empty(N)
        dJt = np.empty(N)
        v_p = np.empty((N, 3))
        # per leg in plain floats: for six 4-joint legs this beats stacked numpy (call overhead)
        for i in range(N):
            fp = self.foot_frames_fixed[i]
            cols = self.leg_joints[i]
            Jf = pin.getFrameJacobian(m, d, fp, lwa)[:, cols]
            J[i, :3] = Jf[:3]
            Jw = Jf[3:]
            Jw_all[i] = Jw
            oMf = d.oMf[fp]
            P[i] = oMf.translation
            ax, ay, az = oMf.rotation[:, 0].tolist()
            A[i] = (ax, ay, az)
            acc = pin.getFrameClassicalAcceleration(m, d, fp, lwa)
            dJp[i] = acc.linear
            dq = dqj[cols]
            v_p[i] = Jf[:3] @ dq
            if not self.leg_has_pitch[i]:      # a point-foot leg: no relative pitch
                J[i, 3] = 0.0
                theta[i] = theta_dot[i] = dJt[i] = 0.0
                continue
            wx, wy, wz = (Jw @ dq).tolist()
            awx, awy, awz = acc.angular.tolist()
            theta[i], ok, cx, cy, cz, dJt[i] = _pitch(ax, ay, az, wx, wy, wz, awx, awy, awz)
            if not ok:  # foot-link x-axis along the base z: theta's Jacobian row is zeroed
                J[i, 3] = 0.0
                theta_dot[i] = 0.0
                continue
            Jt = cx * Jw[0] + cy * Jw[1] + cz * Jw[2]                      # J_theta = (a x g)^T J_w
            J[i, 3] = Jt
            theta_dot[i] = float(Jt @ dq)
        return LegBatch(p=P, J=J, a=A, theta=theta, theta_dot=theta_dot, J_w=Jw_all, dJ_p_dq=dJp,
                        dJ_theta_dq=dJt, v_p=v_p)

    def leg_jacobians(self, qj: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        """``(J_p, J_theta)`` of leg ``i`` alone (body frame, 3x4 and 4), for joint positions ``qj``
        [rad]: the same Pinocchio calls and the same float arithmetic as :meth:`legs_batch`, so the
        values are bit-identical to ``legs(qj)[i]``, at a fraction of the cost (no velocities,
        accelerations or other legs). Used by the scenario disturbance on every pushed tick."""
        if qj.shape != (self.n,):
            raise ValueError(f"joint positions: expected {self.n} values, got {qj.shape}")
        m, d = self.fixed, self.fdata
        pin.computeJointJacobians(m, d, qj)
        pin.updateFramePlacements(m, d)
        fp = self.foot_frames_fixed[i]
        Jf = pin.getFrameJacobian(m, d, fp, pin.LOCAL_WORLD_ALIGNED)[:, self.leg_joints[i]]
        ax, ay, az = d.oMf[fp].rotation[:, 0].tolist()
        _, ok, cx, cy, cz, _ = _pitch(ax, ay, az, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        if not ok or not self.leg_has_pitch[i]:
            return Jf[:3].copy(), np.zeros(Jf.shape[1])
        Jw = Jf[3:]
        return Jf[:3].copy(), cx * Jw[0] + cy * Jw[1] + cz * Jw[2]

    def leg_workspace(self, use_chain: bool = True) -> LegKinematicsWorkspace:
        """Preallocated, compiled leg kinematics (the fast 500 Hz path), see
        :class:`legged_wbc.kinematics.LegKinematicsWorkspace`."""
        return LegKinematicsWorkspace(self, use_chain)

    def legs(self, qj: np.ndarray, dqj: np.ndarray | None = None) -> list[LegState]:
        """Leg kinematics for joint positions ``qj`` [rad] and velocities ``dqj`` [rad/s], one object per leg."""
        b = self.legs_batch(qj, dqj)
        return [LegState(p=b.p[i], J_p=b.J[i, :3], a=b.a[i], theta=float(b.theta[i]), theta_dot=float(b.theta_dot[i]),
                         J_w=b.J_w[i], J_theta=b.J[i, 3], J=b.J[i], dJ_p_dq=b.dJ_p_dq[i],
                         dJ_theta_dq=float(b.dJ_theta_dq[i]), v_p=b.v_p[i]) for i in range(self.n_legs)]

    # ------------------------------------------------------------------ nominal stance
    def stance_targets(self) -> list[tuple[np.ndarray, float]]:
        """Nominal ``(foot point in base frame [m], relative pitch [rad])`` of each leg: a generated
        robot's ``stance`` (reach along the mount yaw, height); a URDF robot's standing pose (its foot
        points, at ``stance_height``; no relative pitch on its point-foot legs)."""
        cfg = self.cfg
        z = -cfg.stance_height + self.foot_radius
        if cfg.standing_pose is not None:
            b = self.legs_batch(self._standing_qj())
            return [(np.array([b.p[i, 0], b.p[i, 1], z]), float(b.theta[i])) for i in range(self.n_legs)]
        out = []
        for leg in cfg.legs:
            yaw = np.radians(leg.mount_yaw_deg)
            p = np.array([leg.mount_xyz[0] + cfg.stance_reach * np.cos(yaw),
                          leg.mount_xyz[1] + cfg.stance_reach * np.sin(yaw), z])
            out.append((p, cfg.stance_relative_pitch))
        return out

    def leg_ik(self, i: int, p_target: np.ndarray, theta_target: float, qj0: np.ndarray,
               iters: int = 100, damping: float = 1e-6, tol: float = 1e-10) -> tuple[np.ndarray, bool]:
        """Damped least-squares IK of leg ``i`` on the extended task ``[p; theta]``.

        Returns the full joint vector (other legs as in ``qj0``) and whether it converged."""
        qj = qj0.copy()
        cols = self.leg_joints[i]
        for _ in range(iters):
            leg = self.legs(qj)[i]
            err = np.concatenate([p_target - leg.p, [theta_target - leg.theta]])
            if np.linalg.norm(err) < tol:
                return qj, True
            J = leg.J
            dq = J.T @ np.linalg.solve(J @ J.T + damping * np.eye(4), err)
            step = np.linalg.norm(dq)
            if step > 0.3:
                dq *= 0.3 / step
            qj[cols] += dq
        leg = self.legs(qj)[i]
        err = np.concatenate([p_target - leg.p, [theta_target - leg.theta]])
        return qj, bool(np.linalg.norm(err) < 1e-8)

    def _standing_qj(self) -> np.ndarray:
        """Joint positions [rad] of a URDF robot's standing pose (Pinocchio order; joints it omits: 0)."""
        qj = np.zeros(self.n)
        for name, val in self.cfg.standing_pose.items():
            qj[self.joint_index[name]] = val
        return qj

    def initial_leg_guess(self) -> np.ndarray:
        """The standing pose of a URDF robot; else a knee-up guess (hip pitch up, knee bent down) to start IK from."""
        if self.cfg.standing_pose is not None:
            return self._standing_qj()
        qj = np.zeros(self.n)
        for cols in self.leg_joints:
            qj[cols] = [0.0, -0.4, 1.4, -1.0]
        return qj

    def stance_joint_positions(self, height: float | None = None) -> np.ndarray:
        """Joint positions of the nominal stance (feet at their nominal points, theta nominal)."""
        qj = self.initial_leg_guess()
        for i, (p, th) in enumerate(self.stance_targets()):
            if height is not None:
                p = p.copy()
                p[2] = -height + self.foot_radius
            qj, ok = self.leg_ik(i, p, th, qj)
            if not ok:
                raise ConfigError(f"leg {self.cfg.leg_names[i]}: nominal stance {p} theta={th} is not reachable")
        return qj

    def foot_depth_range(self, knee_bend_min: float = KNEE_BEND_MIN, tol: float = 1e-3) -> tuple[float, float]:
        """``(d_min, d_max)`` [m]: how far below the base origin (base frame z, the base level) the foot-sphere
        centres of all legs can be held at their nominal horizontal placement (``stance.reach`` from the
        hip yaw axis, nominal relative pitch), with every joint inside its limits and every knee bent by at
        least ``knee_bend_min`` [rad] (a stretched knee makes the leg Jacobian singular: the controller
        cannot hold it). Bisection to ``tol`` on IK solutions continued from the nominal stance."""
        qj = self.stance_joint_positions()
        nominal = self.cfg.stance_height - self.foot_radius
        ends = []
        for step in (-2.0, 2.0):                     # towards the body, away from it
            ok, bad, q_ok = nominal, nominal + step, qj
            while abs(bad - ok) > tol:
                mid = 0.5 * (ok + bad)
                q = self._feet_at_depth(mid, q_ok, knee_bend_min)
                if q is None:
                    bad = mid
                else:
                    ok, q_ok = mid, q
            ends.append(ok)
        return ends[0], ends[1]

    def _feet_at_depth(self, depth: float, qj0: np.ndarray, knee_bend_min: float) -> np.ndarray | None:
        """Joint positions with every foot ``depth`` [m] below the base origin at its nominal horizontal
        placement (IK from ``qj0``), or None: not reached, a joint out of its limits or a knee bent less
        than ``knee_bend_min`` [rad]."""
        qj = qj0
        for i, (p, th) in enumerate(self.stance_targets()):
            qj, ok = self.leg_ik(i, np.array([p[0], p[1], -depth]), th, qj)
            knee = qj[self.leg_joints[i][2]]
            if not ok or abs(knee) < knee_bend_min:
                return None
        if np.any(qj < self.lower) or np.any(qj > self.upper):
            return None
        return qj

    def stance_configuration(self, height: float | None = None) -> np.ndarray:
        """Full ``q`` standing at ``height`` [m] (default: the config's stance height), level, at the origin."""
        h = self.cfg.stance_height if height is None else height
        q = self.neutral()
        q[2] = h
        q[7:] = self.stance_joint_positions(h)
        return q


_pitch = relative_pitch.py_func    # the kernel's own code, run as plain Python (one definition)


def _det3(x0, x1, x2, y0, y1, y2, z0, z1, z2) -> float:
    """Determinant of the 3x3 matrix with rows ``(x0, x1, x2)``, ``(y0, y1, y2)``, ``(z0, z1, z2)``."""
    return x0 * (y1 * z2 - y2 * z1) - x1 * (y0 * z2 - y2 * z0) + x2 * (y0 * z1 - y1 * z0)


def null_vector(J_p: np.ndarray, J_theta: np.ndarray | None = None) -> np.ndarray:
    """Unit null-space vector of a 3x4 ``J_p`` (signed 3x3 minors), oriented so ``J_theta n >= 0``.

    The minors are expanded in plain floats (a few us; ``np.linalg.det`` of four ``np.delete``
    copies took ~35 us on the disturbance's 500 Hz path)."""
    (a0, a1, a2, a3), (b0, b1, b2, b3), (c0, c1, c2, c3) = J_p.tolist()
    n = np.array([_det3(a1, a2, a3, b1, b2, b3, c1, c2, c3), -_det3(a0, a2, a3, b0, b2, b3, c0, c2, c3),
                  _det3(a0, a1, a3, b0, b1, b3, c0, c1, c3), -_det3(a0, a1, a2, b0, b1, b2, c0, c1, c2)])
    nrm = math.sqrt(float(n @ n))
    if nrm < 1e-12:
        # rank-deficient J_p: fall back to the smallest right singular vector
        n = np.linalg.svd(J_p)[2][-1]
        nrm = np.linalg.norm(n)
    n = n / nrm
    if J_theta is not None and float(J_theta @ n) < 0.0:
        n = -n
    return n


def null_vectors(Jp: np.ndarray, Jt: np.ndarray | None = None) -> np.ndarray:
    """Unit null-space vectors of stacked 3x4 Jacobians ``Jp`` (N, 3, 4), signed 3x3 minors,
    oriented so ``Jt[i] @ n[i] >= 0`` when ``Jt`` (N, 4) is given. Vectorized :func:`null_vector`."""
    def det3(a, b, c):  # columns a, b, c of shape (N, 3)
        return (a[:, 0] * (b[:, 1] * c[:, 2] - b[:, 2] * c[:, 1]) - b[:, 0] * (a[:, 1] * c[:, 2] - a[:, 2] * c[:, 1])
                + c[:, 0] * (a[:, 1] * b[:, 2] - a[:, 2] * b[:, 1]))
    c0, c1, c2, c3 = Jp[:, :, 0], Jp[:, :, 1], Jp[:, :, 2], Jp[:, :, 3]
    n = np.stack([det3(c1, c2, c3), -det3(c0, c2, c3), det3(c0, c1, c3), -det3(c0, c1, c2)], axis=1)
    n /= np.maximum(np.linalg.norm(n, axis=1, keepdims=True), 1e-300)
    if Jt is not None:
        n *= np.where(np.einsum("ni,ni->n", Jt, n) < 0.0, -1.0, 1.0)[:, None]
    return n
