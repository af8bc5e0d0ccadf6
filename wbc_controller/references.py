"""Task references: body stand-up / walking references, SO(3) attitude law, swing trajectories.

Frames: body references are in the world frame; the controller converts the desired world
acceleration of the base to Pinocchio's body-frame ``nu_dot`` (one place: :func:`body_task`).
Swing trajectories are body-relative (base frame), like the foot tasks of the QP.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from legged_wbc.model import cross3

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
    a_des = ref.a + cfg._kp_pos * (ref.p - p) + cfg._kd_pos * (ref.v - v_world)
    out = np.empty(6)
    out[:3] = R.T @ a_des - cross3(w_base, v_base)
    RtRd = R.T @ ref.R
    e_R = 0.5 * vee(ref.R.T @ R - R.T @ ref.R)
    w_d_in_b = RtRd @ ref.w
    e_w = w_base - w_d_in_b
    out[3:] = -cfg._kp_rot * e_R - cfg._kd_rot * e_w - cross3(w_base, w_d_in_b) + RtRd @ ref.w_dot
    return out


class SwingPlanner:
    """Body-relative swing paths of all feet (base frame), evaluated together.

    A swing goes from the lift-off position/velocity to a touchdown target reached with the end
    velocity ``v_end`` (``-v_body``: the foot lands at ground speed, no tangential impact).
    Horizontal: cubic Hermite. Vertical: quintic blend plus a ``16 s^2 (1-s)^2`` bump of the lift
    height. Positions [m], velocities [m/s], accelerations [m/s^2]."""

    def __init__(self, n_legs: int):
        self.start = np.zeros((n_legs, 3))
        self.target = np.zeros((n_legs, 3))
        self.v_start = np.zeros((n_legs, 3))
        self.v_end = np.zeros((n_legs, 3))
        self.duration = np.ones(n_legs)
        self.planned = np.zeros(n_legs, dtype=bool)

    def begin(self, i: int, start, target, duration: float, v_start=None, v_end=None) -> None:
        self.start[i], self.target[i], self.duration[i] = start, target, duration
        self.v_start[i] = 0.0 if v_start is None else v_start
        self.v_end[i] = 0.0 if v_end is None else v_end
        self.v_start[i, 2] = self.v_end[i, 2] = 0.0
        self.planned[i] = True

    def __call__(self, legs: np.ndarray, s: np.ndarray, lift: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """References of legs ``legs`` (indices) at swing progress ``s`` (same length), each (k, 3).

        Plain floats per leg: at most a few swing legs, and numpy's per-call overhead dominates."""
        k = len(legs)
        P, V, A = np.empty((k, 3)), np.empty((k, 3)), np.empty((k, 3))
        for j, (i, sj) in enumerate(zip(np.asarray(legs).tolist(), np.asarray(s).tolist())):
            T = float(self.duration[i])
            u = min(max(sj, 0.0), 1.0)
            u2, u3 = u * u, u * u * u
            h = (2 * u3 - 3 * u2 + 1, u3 - 2 * u2 + u, -2 * u3 + 3 * u2, u3 - u2)
            dh = ((6 * u2 - 6 * u) / T, (3 * u2 - 4 * u + 1) / T, (-6 * u2 + 6 * u) / T, (3 * u2 - 2 * u) / T)
            ddh = ((12 * u - 6) / T**2, (6 * u - 4) / T**2, (-12 * u + 6) / T**2, (6 * u - 2) / T**2)
            p0, p1 = self.start[i].tolist(), self.target[i].tolist()
            m0 = [x * T for x in self.v_start[i].tolist()]
            m1 = [x * T for x in self.v_end[i].tolist()]
            for c in (0, 1):
                pts = (p0[c], m0[c], p1[c], m1[c])
                P[j, c] = sum(a * b for a, b in zip(h, pts))
                V[j, c] = sum(a * b for a, b in zip(dh, pts))
                A[j, c] = sum(a * b for a, b in zip(ddh, pts))
            # vertical: quintic blend 0 -> 1 plus the lift bump 16 u^2 (1-u)^2
            f = 10 * u3 - 15 * u2 * u2 + 6 * u3 * u2
            df = 30 * u2 - 60 * u3 + 30 * u2 * u2
            ddf = 60 * u - 180 * u2 + 120 * u3
            w = 1.0 - u
            b, db, ddb = 16 * u2 * w * w, 32 * u * w * w - 32 * u2 * w, 32 * w * w - 128 * u * w + 32 * u2
            dz = p1[2] - p0[2]
            P[j, 2] = p0[2] + dz * f + lift * b
            V[j, 2] = (dz * df + lift * db) / T
            A[j, 2] = (dz * ddf + lift * ddb) / T**2
        return P, V, A


__all__ = ["BodyReference", "BodyReferenceGenerator", "SwingPlanner", "body_task", "smoothstep5", "vee"]
