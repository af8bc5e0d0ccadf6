"""The estimator's specification: the estimator cycle in plain Python / numpy.

:class:`ReferenceEstimator` runs steps 1-5 of :mod:`state_estimator.estimator` with the
reference filters (:class:`.touchdown.TouchdownDetector`, :class:`.velocity.BaseVelocityFilter`),
the gait scheduler's numpy schedule and Pinocchio's frame quantities. It is not a production
path: the tests compare the compiled :class:`~state_estimator.estimator.StateEstimator` against it
(every output field to 1e-12 of its scale, flags exactly) and ``legged-wbc bench cycle`` times it
as its "reference" beside the compiled cycle. Same constructor, ``reset``, ``set_config``,
``update`` and outputs as the production class; the same state attributes (``_pos``,
``_M_inv``, ``_h_leg``, ``_M_lb``, ``_gyro_prev``, ``_vb_prev``), so the two can be compared
field by field.
"""

from __future__ import annotations

import math

import numpy as np
import pinocchio as pin

from legged_wbc.conventions import rotation_from_quat_xyzw
from legged_wbc.gait import GaitScheduler
from legged_wbc.model import RobotModel

from . import support_plane
from .config import EstimatorConfig
from .estimator import QUAT_NORM_TOL, EstimatedState, EstimatorCore
from .velocity import GRAVITY_WORLD


def _as_vector(name: str, x, n: int) -> np.ndarray:
    try:
        a = np.array(x, dtype=float)  # a copy: the caller's buffer may change later
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: expected {n} numbers, got {x!r}") from exc
    if a.shape != (n,):
        raise ValueError(f"{name}: expected {n} values, got shape {a.shape}")
    return a


class ReferenceEstimator(EstimatorCore):
    """The estimator cycle in plain Python / numpy (the oracle of the compiled one)."""

    def __init__(self, rm: RobotModel, gait: GaitScheduler, cfg: EstimatorConfig | None = None,
                 dt: float = 0.002):
        super().__init__(rm, gait, cfg, dt)
        lv = self.leg_j + 6                                   # (L, k) indices in v
        r, c = lv[:, :, None], lv[:, None, :]
        self._m_rows = np.broadcast_to(np.minimum(r, c), (self.L, self.k, self.k)).copy()  # upper triangle
        self._m_cols = np.broadcast_to(np.maximum(r, c), (self.L, self.k, self.k)).copy()
        self._h_idx = lv
        self._mb_rows = np.broadcast_to(lv[:, :, None], (self.L, self.k, 6)).copy()
        self._mb_cols = np.broadcast_to(np.arange(6)[None, None, :], (self.L, self.k, 6)).copy()

    def _checked_sample(self, joint_pos, joint_vel, joint_effort, imu_quat_xyzw, imu_gyro, imu_accel):
        """The inputs as float vectors, checked (``ValueError`` naming the field); the quaternion
        normalized."""
        n = self.n
        qj = _as_vector("joint_pos", joint_pos, n)
        dqj = _as_vector("joint_vel", joint_vel, n)
        tau = _as_vector("joint_effort", joint_effort, n)
        quat = _as_vector("imu_quat_xyzw", imu_quat_xyzw, 4)
        gyro = _as_vector("imu_gyro", imu_gyro, 3)
        acc = _as_vector("imu_accel", imu_accel, 3)
        if not np.isfinite(np.concatenate((qj, dqj, tau, quat, gyro, acc))).all():
            for name, a in (("joint_pos", qj), ("joint_vel", dqj), ("joint_effort", tau),
                            ("imu_quat_xyzw", quat), ("imu_gyro", gyro), ("imu_accel", acc)):
                if not np.isfinite(a).all():
                    raise ValueError(f"{name}: contains NaN/inf: {a}")
        qx, qy, qz, qw = quat.tolist()
        qn = math.sqrt(qx * qx + qy * qy + qz * qz + qw * qw)
        if abs(qn - 1.0) > QUAT_NORM_TOL:
            raise ValueError(f"imu_quat_xyzw: not a unit quaternion (norm {qn:.6g})")
        return qj, dqj, tau, (qx / qn, qy / qn, qz / qn, qw / qn), gyro, acc

    def update(self, t: float, joint_pos, joint_vel, joint_effort, imu_quat_xyzw, imu_gyro,
               imu_accel, gait_clock=None) -> EstimatedState:
        """Process one sensor sample (as :meth:`StateEstimator.update`, ``gait_clock`` too). Raises
        ``ValueError`` (state untouched) on bad input."""
        t = self._checked_time(t)
        qj, dqj, tau, quat, gyro, acc = self._checked_sample(joint_pos, joint_vel, joint_effort, imu_quat_xyzw,
                                                             imu_gyro, imu_accel)
        # ---- all inputs valid: advance (3-vector algebra in plain floats: cheaper than numpy here)
        first = not self._started
        dt = 0.0 if self._t is None else t - self._t
        step = dt if dt > 0 else self.dt                     # integration step of the filters
        R = rotation_from_quat_xyzw(quat)                    # base -> world
        w = tuple(gyro.tolist())
        f = self._specific_force(first, step, w, acc)
        if gait_clock is None:
            phase = self.gait.phases(t)
            cycle = self.gait.cycle_index(t)
        else:
            phase, _, cycle = self.gait.state(float(gait_clock[0]), paused=bool(gait_clock[1]))
        nominal = phase == 0
        touchdown = self._touchdown(first, step, qj, dqj, tau, quat, w, f, R, phase, cycle)
        support = (nominal & (self.touchdown.late == 0)) | touchdown   # 2. support set
        self._kinematics(qj, dqj)                            # 3. leg kinematics and base velocity
        vw = self._velocity(first, dt, step, w, f, R, support)
        h_raw, pos = self._position(first, step, R, support, vw)
        Rl = R.tolist()
        vb = tuple(Rl[0][c] * vw[0] + Rl[1][c] * vw[1] + Rl[2][c] * vw[2] for c in range(3))   # R^T v_world
        q = np.concatenate((pos, quat, qj))
        v = np.concatenate((vb, w, dqj))
        self._dynamics(q, v)                                  # for the next cycle's prediction
        alpha, band = self._plane_params(step)
        plane = support_plane.support_plane_reference(self._p_foot, support, R, alpha, band, self._plane)
        self._gyro_prev = w
        self._vb_prev = vb
        self._t = t
        self._started = True
        td, vf = self.touchdown, self.velocity
        return EstimatedState(
            t=t, q=q, v=v, v_world=np.array(vw), support=support, touchdown=touchdown.copy(),
            nominal_support=nominal, phase=phase, cycle=cycle,
            td_score=td.score, td_count=td.count.copy(), tau_ext=td.tau_ext.copy(),
            vel_d2=vf.d2, vel_inflation=vf.inflation, vel_used=vf.used,            # replaced each cycle
            vel_excluded=vf.excluded, vel_cycles_in_support=vf.cycles_in_support,  # (no copy needed)
            vel_cov=vf.P.copy(), height_raw=h_raw, foot_pos_base=self._p_foot.copy(), dt=dt,
            support_normal=plane[:3], support_offset=float(plane[3]), late=td.late > 0, late_event=td.event.copy())

    def _specific_force(self, first, step, w, acc):
        """Base angular acceleration (gyro differenced over the step) and the specific force at
        the base origin (the accelerometer sits at ``imu_xyz = r``: ``f_B = f_imu - w_dot x r - w x
        (w x r)``). Returns ``(f_x, f_y, f_z, a_x, a_y, a_z)``."""
        wx, wy, wz = w
        fx, fy, fz = acc.tolist()
        if first:
            ax_, ay_, az_ = 0.0, 0.0, 0.0
        else:
            gx0, gy0, gz0 = self._gyro_prev
            ax_, ay_, az_ = (wx - gx0) / step, (wy - gy0) / step, (wz - gz0) / step
        if self._imu_offset:
            rx, ry, rz = self._imu_r.tolist()
            cx, cy, cz = wy * rz - wz * ry, wz * rx - wx * rz, wx * ry - wy * rx          # w x r
            fx -= ay_ * rz - az_ * ry + wy * cz - wz * cy
            fy -= az_ * rx - ax_ * rz + wz * cx - wx * cz
            fz -= ax_ * ry - ay_ * rx + wx * cy - wy * cx
        return fx, fy, fz, ax_, ay_, az_

    def _touchdown(self, first, step, qj, dqj, tau, quat, w, f, R, phase, cycle):
        """1. Touchdown filters (``M``, ``h`` from the previous estimate; on the first sample, from
        this one) and the landing test: the touchdown flags."""
        lj, td = self.leg_j, self.touchdown
        if first:
            self._dynamics(np.concatenate((self._pos, quat, qj)), np.concatenate(((0.0, 0.0, 0.0), w, dqj)))
            td.reset(dqj[lj], tau[lj] - self._h_leg)        # at rest: tau_ext = tau - h
            return td.detect(phase, cycle)
        h_leg = self._h_leg
        if self.base_coupling:
            # Pinocchio base acceleration (base frame): [R^T a_world - w x v_B; w_dot],
            # R^T a_world = f + R^T g
            (_, _, _), (_, _, _), (r20, r21, r22) = R.tolist()
            wx, wy, wz = w
            fx, fy, fz, ax_, ay_, az_ = f
            gz = GRAVITY_WORLD[2]
            vx, vy, vz = self._vb_prev
            a_b = np.array((fx + gz * r20 - (wy * vz - wz * vy), fy + gz * r21 - (wz * vx - wx * vz),
                            fz + gz * r22 - (wx * vy - wy * vx), ax_, ay_, az_))
            h_leg = h_leg + self._M_lb @ a_b
        return td.update(self._M_inv, tau[lj], h_leg, dqj[lj], phase, cycle, step)

    def _velocity(self, first, dt, step, w, f, R, support):
        """3. Base velocity (world): IMU prediction, support-foot correction. Returns ``v_world``."""
        (r00, r01, r02), (r10, r11, r12), (r20, r21, r22) = R.tolist()
        wx, wy, wz = w
        fx, fy, fz = f[:3]
        vf = self.velocity
        if not first and dt > 0:
            vf.predict(np.array((r00 * fx + r01 * fy + r02 * fz, r10 * fx + r11 * fy + r12 * fz,
                                 r20 * fx + r21 * fy + r22 * fz + GRAVITY_WORLD[2])), step)     # R f + g
        usable = vf.reliable(support)
        W = np.array(((0.0, -wz, wy), (wz, 0.0, -wx), (-wy, wx, 0.0)))   # [w]x; rows: p [w]x = p x w
        z_feet = (self._p_foot @ W - self._v_rel) @ R.T        # R (-(w x p) - J_p dq), world
        vf.correct(z_feet, usable, support)
        return tuple(vf.v.tolist())

    def _position(self, first, step, R, support, vw):
        """4. Height: mean over the support feet of ``foot_radius - (R p_i)_z``, low-passed; 5. x, y:
        the integral of the world velocity. Returns ``(height_raw, (x, y, z))``."""
        vwx, vwy, vwz = vw
        px, py, pz = self._pos.tolist()
        sup = support.tolist()
        n_sup = sum(sup)
        if n_sup:
            zs = (self._p_foot @ R[2]).tolist()
            h_raw = self.foot_radius - sum(z for z, s_ in zip(zs, sup) if s_) / n_sup
        else:
            h_raw = math.nan
        if first:
            pz = self._height_init if self._height_init is not None else (h_raw if n_sup else 0.0)
        elif n_sup:
            pz += (self._alpha_nom if step == self.dt else self._alpha(step)) * (h_raw - pz)
        else:
            pz += step * vwz
        if not first:
            px += step * vwx
            py += step * vwy
        self._pos[:] = (px, py, pz)
        return h_raw, (px, py, pz)

    def _dynamics(self, q: np.ndarray, v: np.ndarray) -> None:
        """Leg blocks of ``M`` (inverted) and ``h`` at ``(q, v)``, for all legs at once."""
        model, data = self.rm.model, self._pdata
        M = pin.crba(model, data, q)                          # upper triangle is always filled
        self._M_inv = np.linalg.inv(M[self._m_rows, self._m_cols])
        h = pin.nonLinearEffects(model, data, q, v)
        self._h_leg = h[self._h_idx]
        self._M_lb = M[self._mb_cols, self._mb_rows]
