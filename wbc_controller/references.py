"""Task references: body stand-up / walking references, SO(3) attitude law, swing trajectories.

Frames: body references are in the world frame; the controller converts the desired world
acceleration of the base to Pinocchio's body-frame ``nu_dot`` (one place: :func:`body_task`).
Swing trajectories are body-relative (base frame), like the foot tasks of the QP.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from legged_wbc.model import cross3, skew

from .config import WbcConfig


def vee(S: np.ndarray) -> np.ndarray:
    return np.array([S[2, 1], S[0, 2], S[1, 0]])


def smoothstep5(s: float) -> tuple[float, float, float]:
    """Quintic 0->1 on s in [0, 1] with zero end velocity/acceleration: (value, d/ds, d2/ds2)."""
    s = min(max(s, 0.0), 1.0)
    return (10 * s**3 - 15 * s**4 + 6 * s**5, 30 * s**2 - 60 * s**3 + 30 * s**4, 60 * s - 180 * s**2 + 120 * s**3)


@dataclass
class BodyReference:
    """Desired base pose and its derivatives, world frame."""

    p: np.ndarray
    v: np.ndarray
    a: np.ndarray
    R: np.ndarray
    w: np.ndarray       # desired angular velocity, expressed in the desired body frame
    w_dot: np.ndarray


class BodyReferenceGenerator:
    """Stand-up height ramp, then forward walking at ``forward_velocity`` ramped up from gait start.

    The horizontal reference starts where the robot is when :meth:`reset` is called; yaw 0, level.
    """

    def __init__(self, cfg: WbcConfig, gait_start: float):
        self.cfg = cfg
        self.gait_start = gait_start
        self.p0 = np.zeros(3)

    def reset(self, p0: np.ndarray) -> None:
        self.p0 = np.array(p0, dtype=float)

    def __call__(self, t: float) -> BodyReference:
        c = self.cfg
        # height: quintic ramp from the initial height to stand_height
        s = (t - c.stand_up_start) / c.stand_up_duration
        f, df, ddf = smoothstep5(s)
        dz = c.stand_height - self.p0[2]
        z, vz, az = self.p0[2] + dz * f, dz * df / c.stand_up_duration, dz * ddf / c.stand_up_duration**2
        if s <= 0 or s >= 1:
            vz = az = 0.0
        # forward: speed ramps linearly from 0 at gait start to forward_velocity at velocity_ramp_end
        t0, t1, vf = self.gait_start, max(c.velocity_ramp_end, self.gait_start + 1e-6), c.forward_velocity
        if t <= t0:
            x, vx, ax = 0.0, 0.0, 0.0
        elif t <= t1:
            k = vf / (t1 - t0)
            x, vx, ax = 0.5 * k * (t - t0) ** 2, k * (t - t0), k
        else:
            x, vx, ax = 0.5 * vf * (t1 - t0) + vf * (t - t1), vf, 0.0
        return BodyReference(p=np.array([self.p0[0] + x, self.p0[1], z]), v=np.array([vx, 0.0, vz]),
                             a=np.array([ax, 0.0, az]), R=np.eye(3), w=np.zeros(3), w_dot=np.zeros(3))


def body_task(cfg: WbcConfig, ref: BodyReference, p: np.ndarray, R: np.ndarray, v_base: np.ndarray,
              w_base: np.ndarray) -> np.ndarray:
    """Desired ``nu_dot[0:6] = [v_dot_base_in_base, w_dot_base_in_base]``.

    Translation: PD + feedforward in the world frame, ``a_des``; since ``p_dot = R v_B``,
    ``v_dot_B = R^T a_des - w_B x v_B``. Rotation: geometric SO(3) law
    ``w_dot_des = -K_R e_R - K_w e_w - w_B x (R^T R_d w_d) + R^T R_d w_dot_d``.
    ``v_base``/``w_base`` are expressed in the base frame (Pinocchio's convention)."""
    v_world = R @ v_base
    a_des = ref.a + np.asarray(cfg.kp_pos) * (ref.p - p) + np.asarray(cfg.kd_pos) * (ref.v - v_world)
    out = np.empty(6)
    out[:3] = R.T @ a_des - cross3(w_base, v_base)
    RtRd = R.T @ ref.R
    e_R = 0.5 * vee(ref.R.T @ R - R.T @ ref.R)
    w_d_in_b = RtRd @ ref.w
    e_w = w_base - w_d_in_b
    out[3:] = (-np.asarray(cfg.kp_rot) * e_R - np.asarray(cfg.kd_rot) * e_w - cross3(w_base, w_d_in_b)
               + RtRd @ ref.w_dot)
    return out


class SwingTrajectory:
    """Body-relative swing path of one foot: from its lift-off point to a touchdown target.

    Horizontal: cubic Hermite from the lift-off position/velocity to the target with the end
    velocity ``v_end`` (``-v_body``: the foot lands at ground speed, no tangential impact).
    Vertical: quintic blend plus a ``16 s^2 (1-s)^2`` bump of ``lift_height``.
    Returns position [m], velocity [m/s] and acceleration [m/s^2] in the base frame."""

    def __init__(self):
        self.start = None
        self.target = None
        self.v_start = np.zeros(3)
        self.v_end = np.zeros(3)
        self.duration = 1.0

    def begin(self, start: np.ndarray, target: np.ndarray, duration: float,
              v_start: np.ndarray | None = None, v_end: np.ndarray | None = None) -> None:
        self.start, self.target, self.duration = np.array(start, dtype=float), np.array(target, dtype=float), duration
        self.v_start = np.zeros(3) if v_start is None else np.array(v_start, dtype=float)
        self.v_end = np.zeros(3) if v_end is None else np.array(v_end, dtype=float)
        self.v_start[2] = self.v_end[2] = 0.0

    def __call__(self, s: float, lift: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        T = self.duration
        sc = min(max(s, 0.0), 1.0)
        s2, s3 = sc * sc, sc * sc * sc
        h = (2 * s3 - 3 * s2 + 1, s3 - 2 * s2 + sc, -2 * s3 + 3 * s2, s3 - s2)
        dh = (6 * s2 - 6 * sc, 3 * s2 - 4 * sc + 1, -6 * s2 + 6 * sc, 3 * s2 - 2 * sc)
        ddh = (12 * sc - 6, 6 * sc - 4, -12 * sc + 6, 6 * sc - 2)
        p0, p1, m0, m1 = self.start, self.target, self.v_start * T, self.v_end * T
        p = h[0] * p0 + h[1] * m0 + h[2] * p1 + h[3] * m1
        v = (dh[0] * p0 + dh[1] * m0 + dh[2] * p1 + dh[3] * m1) / T
        a = (ddh[0] * p0 + ddh[1] * m0 + ddh[2] * p1 + ddh[3] * m1) / T**2
        f, df, ddf = smoothstep5(sc)
        dz = p1[2] - p0[2]
        b = 16 * s2 * (1 - sc) ** 2
        db = 32 * sc * (1 - sc) ** 2 - 32 * s2 * (1 - sc)
        ddb = 32 * (1 - sc) ** 2 - 128 * sc * (1 - sc) + 32 * s2
        p[2] = p0[2] + dz * f + lift * b
        v[2] = (dz * df + lift * db) / T
        a[2] = (dz * ddf + lift * ddb) / T**2
        return p, v, a


__all__ = ["BodyReference", "BodyReferenceGenerator", "SwingTrajectory", "body_task", "skew", "smoothstep5", "vee"]
