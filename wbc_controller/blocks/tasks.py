"""Tasks (paper sec. 4.1-4.2): the body reference and the body task (desired base acceleration),
the leg task targets (weights and desired accelerations of the rows ``[p_ddot; theta_ddot]`` of
each leg) and the cost ``1/2 ||J_T nu_dot - x_ddot_des||^2_W + 1/2 ||lambda||^2_{W_lambda}``.

Frames: body references in the world frame; the desired base acceleration as Pinocchio's
body-frame ``nu_dot[0:6]``; leg rows in the base frame.
"""

from __future__ import annotations

import math
from collections import namedtuple
from dataclasses import dataclass

import numpy as np
from numba import njit

from legged_wbc.jit import announce_compiles

from legged_wbc.model import cross3, cross_rows

from .command import CMD_AX, CMD_AY, CMD_DWZ, CMD_PX, CMD_PY, CMD_VX, CMD_VY, CMD_WZ, CMD_YAW

announce_compiles(__name__)          # one line on stderr if this process has to compile a kernel


@njit(cache=True)
def smoothstep5(s):
    """Quintic 0->1 on s in [0, 1] with zero end velocity/acceleration: (value, d/ds, d2/ds2)."""
    s = min(max(s, 0.0), 1.0)
    return (10 * s**3 - 15 * s**4 + 6 * s**5, 30 * s**2 - 60 * s**3 + 30 * s**4, 60 * s - 180 * s**2 + 120 * s**3)


@njit(cache=True)
def body_reference(t, p0, par, ref_p, ref_v, ref_a):
    """Stand-up height ramp (quintic from the initial height ``p0[2]`` to ``stand_height``), then
    forward walking (speed ramped linearly from 0 at ``gait_start`` to ``forward_velocity`` at
    ``velocity_ramp_end``), from ``p0`` (world frame, level, yaw 0) at ``t`` [s] into
    ``ref_p/v/a``. ``par`` fields: ``stand_up_start``, ``stand_up_duration``, ``stand_height``,
    ``gait_start``, ``velocity_ramp_end``, ``forward_velocity``. The one definition:
    :class:`BodyReferenceGenerator` runs it as plain Python."""
    stand_up_start, stand_up_duration, stand_height = par.stand_up_start, par.stand_up_duration, par.stand_height
    gait_start, velocity_ramp_end, forward_velocity = par.gait_start, par.velocity_ramp_end, par.forward_velocity
    s = (t - stand_up_start) / stand_up_duration
    f, df, ddf = smoothstep5(s)
    dz = stand_height - p0[2]
    z, vz, az = p0[2] + dz * f, dz * df / stand_up_duration, dz * ddf / stand_up_duration**2
    if s <= 0 or s >= 1:
        vz = az = 0.0
    t0, t1, vf = gait_start, max(velocity_ramp_end, gait_start + 1e-6), forward_velocity
    if t <= t0:
        x, vx, ax = 0.0, 0.0, 0.0
    elif t <= t1:
        k = vf / (t1 - t0)
        x, vx, ax = 0.5 * k * (t - t0) ** 2, k * (t - t0), k
    else:
        x, vx, ax = 0.5 * vf * (t1 - t0) + vf * (t - t1), vf, 0.0
    ref_p[0], ref_p[1], ref_p[2] = p0[0] + x, p0[1], z
    ref_v[0], ref_v[1], ref_v[2] = vx, 0.0, vz
    ref_a[0], ref_a[1], ref_a[2] = ax, 0.0, az


@njit(cache=True)
def body_task(ref_p, ref_v, ref_a, q, R, v, par, acc_body, e_rpy):
    """Desired ``nu_dot[0:6]`` (base frame) of :func:`body_task_reference` for a level,
    non-rotating reference (``R_d = I``, ``w_d = w_dot_d = 0``), and the attitude error
    ``0.5 vee(R_d^T R - R^T R_d)`` of the diagnostics into ``e_rpy``. ``par`` fields: ``kp_pos``,
    ``kd_pos``, ``kp_rot``, ``kd_rot`` (3 each)."""
    kp_pos, kd_pos, kp_rot, kd_rot = par.kp_pos, par.kd_pos, par.kp_rot, par.kd_rot
    vb0, vb1, vb2 = v[0], v[1], v[2]
    w0, w1, w2 = v[3], v[4], v[5]
    # v_world = R v_B; a_des = a + Kp (p_d - p) + Kd (v_d - v_world)
    vw0 = R[0, 0] * vb0 + R[0, 1] * vb1 + R[0, 2] * vb2
    vw1 = R[1, 0] * vb0 + R[1, 1] * vb1 + R[1, 2] * vb2
    vw2 = R[2, 0] * vb0 + R[2, 1] * vb1 + R[2, 2] * vb2
    a0 = ref_a[0] + kp_pos[0] * (ref_p[0] - q[0]) + kd_pos[0] * (ref_v[0] - vw0)
    a1 = ref_a[1] + kp_pos[1] * (ref_p[1] - q[1]) + kd_pos[1] * (ref_v[1] - vw1)
    a2 = ref_a[2] + kp_pos[2] * (ref_p[2] - q[2]) + kd_pos[2] * (ref_v[2] - vw2)
    cx, cy, cz = w1 * vb2 - w2 * vb1, w2 * vb0 - w0 * vb2, w0 * vb1 - w1 * vb0
    for r in range(3):
        acc_body[r] = R[0, r] * a0 + R[1, r] * a1 + R[2, r] * a2
    acc_body[0] -= cx
    acc_body[1] -= cy
    acc_body[2] -= cz
    # e_R = 0.5 vee(R - R^T) for R_d = I; e_w = w_B
    e0 = 0.5 * (R[2, 1] - R[1, 2])
    e1 = 0.5 * (R[0, 2] - R[2, 0])
    e2 = 0.5 * (R[1, 0] - R[0, 1])
    acc_body[3] = -kp_rot[0] * e0 - kd_rot[0] * w0
    acc_body[4] = -kp_rot[1] * e1 - kd_rot[1] * w1
    acc_body[5] = -kp_rot[2] * e2 - kd_rot[2] * w2
    e_rpy[0], e_rpy[1], e_rpy[2] = e0, e1, e2


@njit(cache=True)
def task_targets(support, legs, acc_body, w_base, theta_nominal, par, W, b):
    """Weights ``W`` (N, 4) and desired task accelerations ``b`` (N, 4) of the leg rows
    ``[p_ddot; theta_ddot]`` (base frame) minus their drift ``J_dot q_dot``, before the swing
    feed-forward: support / swing position weights; ``consistent`` support-foot acceleration of a
    world-fixed foot ``-(v_dot_B + w_dot_B x p) - w_B x v_rel``; support legs' pitch damping
    (saturated), swing legs' re-centering PD (or 0). ``legs``: :class:`LegBatch`; ``par`` fields:
    ``w_support``, ``w_swing``, ``w_pitch``, ``mode_none``, ``consistent``, ``k_dtheta``,
    ``theta_ddot_max``, ``recenter``, ``kp_swing_pitch``, ``kd_swing_pitch``."""
    p, v_p, theta, theta_dot, dJ_p, dJ_theta = legs.p, legs.v_p, legs.theta, legs.theta_dot, legs.dJ_p_dq, legs.dJ_theta_dq
    w_support, w_swing, w_pitch, mode_none = par.w_support, par.w_swing, par.w_pitch, par.mode_none
    consistent, k_dtheta, theta_ddot_max, recenter = par.consistent, par.k_dtheta, par.theta_ddot_max, par.recenter
    kp_swing_pitch, kd_swing_pitch = par.kp_swing_pitch, par.kd_swing_pitch
    N = p.shape[0]
    ax, ay, az = acc_body[0], acc_body[1], acc_body[2]
    bx, by, bz = acc_body[3], acc_body[4], acc_body[5]
    wx, wy, wz = w_base[0], w_base[1], w_base[2]
    for i in range(N):
        wp = w_support if support[i] else w_swing
        W[i, 0] = wp
        W[i, 1] = wp
        W[i, 2] = wp
        W[i, 3] = w_pitch
        b[i, 0] = -dJ_p[i, 0]
        b[i, 1] = -dJ_p[i, 1]
        b[i, 2] = -dJ_p[i, 2]
        b[i, 3] = -dJ_theta[i]
        if consistent and support[i]:
            px, py, pz = p[i, 0], p[i, 1], p[i, 2]
            vx, vy, vz = v_p[i, 0], v_p[i, 1], v_p[i, 2]
            b[i, 0] += -(ax + (by * pz - bz * py)) - (wy * vz - wz * vy)
            b[i, 1] += -(ay + (bz * px - bx * pz)) - (wz * vx - wx * vz)
            b[i, 2] += -(az + (bx * py - by * px)) - (wx * vy - wy * vx)
        if not mode_none:
            if support[i]:
                d = min(max(-k_dtheta * theta_dot[i], -theta_ddot_max), theta_ddot_max)
            elif recenter:
                d = kp_swing_pitch * (theta_nominal[i] - theta[i]) - kd_swing_pitch * theta_dot[i]
            else:
                d = 0.0
            b[i, 3] += d


@njit(cache=True)
def task_cost(J, W, b, acc_body, par, H, g):
    """Cost ``1/2 ||J_T nu_dot - x_ddot_des||^2_W + 1/2 ||lambda||^2_{W_lambda} (+ slack)``:
    ``H`` and ``g`` rewritten entirely (body rows ``w_body I_6``, leg blocks ``J_i^T W_i J_i`` and
    ``-J_i^T W_i b_i``, force weights ``lam_diag``), plus ``hessian_reg * max diag(H)`` on the
    diagonal (the max over the task and force entries: the slacks' large weight, added after, does
    not scale the regularization of the rest). ``par`` fields: ``w_body``, ``lam_diag_f`` (4N), ``n_slack``, ``slack_weight``,
    ``hessian_reg``, ``leg_v``, ``lam0``."""
    w_body, lam_diag, n_slack, slack_weight = par.w_body, par.lam_diag_f, par.n_slack, par.slack_weight
    hessian_reg, leg_v, lam0 = par.hessian_reg, par.leg_v, par.lam0
    n = H.shape[0]
    for r in range(n):
        g[r] = 0.0
        for c in range(n):
            H[r, c] = 0.0
    for r in range(6):
        H[r, r] = w_body
        g[r] = -w_body * acc_body[r]
    N, K = J.shape[0], J.shape[2]          # K joints per leg; k: the 4 task rows [p; theta]
    for i in range(N):
        for r in range(K):
            for c in range(K):
                s = 0.0
                for k in range(4):
                    s += J[i, k, r] * W[i, k] * J[i, k, c]
                H[leg_v[i, r], leg_v[i, c]] = s
            s = 0.0
            for k in range(4):
                s += J[i, k, r] * W[i, k] * b[i, k]
            g[leg_v[i, r]] = -s
    for k in range(lam_diag.shape[0]):
        H[lam0 + k, lam0 + k] = lam_diag[k]
    s0 = lam0 + lam_diag.shape[0]
    dmax = H[0, 0]
    for r in range(1, s0):
        if H[r, r] > dmax:
            dmax = H[r, r]
    reg = hessian_reg * dmax
    for k in range(n_slack):
        H[s0 + k, s0 + k] = slack_weight
    for r in range(n):
        H[r, r] += reg


@njit(cache=True)
def plane_attitude(normal_w, R_d):
    """Desired base attitude on a support plane of unit normal ``normal_w`` (world): the smallest
    rotation taking world z to the normal (axis ``z x n``, angle the plane's tilt; no yaw added),
    into ``R_d`` (base -> world). World z gives ``I`` exactly. Returns the cosine of the tilt
    (``n_z``)."""
    nx, ny, nz = normal_w[0], normal_w[1], normal_w[2]
    s2 = nx * nx + ny * ny
    for r in range(3):
        for c in range(3):
            R_d[r, c] = 1.0 if r == c else 0.0
    if s2 == 0.0:
        return nz
    # Rodrigues with k = (-ny, nx, 0) / s, sin = s, cos = nz:  R = I + [k]x s + [k]x^2 (1 - cos)
    f = (1.0 - nz) / s2                       # (1 - cos) / s^2 (k unnormalized: k s)
    R_d[0, 0] = 1.0 - f * nx * nx
    R_d[0, 1] = -f * nx * ny
    R_d[0, 2] = nx
    R_d[1, 0] = -f * nx * ny
    R_d[1, 1] = 1.0 - f * ny * ny
    R_d[1, 2] = ny
    R_d[2, 0] = -nx
    R_d[2, 1] = -ny
    R_d[2, 2] = nz
    return nz


@njit(cache=True, inline="always")
def attitude_error(R_d, R):
    """The attitude error ``e_R = 0.5 vee(R_d^T R - R^T R_d)`` [rad, small angles] of the base
    attitude ``R`` against the desired ``R_d`` (both base -> world), from the entries of ``E = R_d^T R``."""
    E01 = R_d[0, 0] * R[0, 1] + R_d[1, 0] * R[1, 1] + R_d[2, 0] * R[2, 1]
    E02 = R_d[0, 0] * R[0, 2] + R_d[1, 0] * R[1, 2] + R_d[2, 0] * R[2, 2]
    E10 = R_d[0, 1] * R[0, 0] + R_d[1, 1] * R[1, 0] + R_d[2, 1] * R[2, 0]
    E12 = R_d[0, 1] * R[0, 2] + R_d[1, 1] * R[1, 2] + R_d[2, 1] * R[2, 2]
    E20 = R_d[0, 2] * R[0, 0] + R_d[1, 2] * R[1, 0] + R_d[2, 2] * R[2, 0]
    E21 = R_d[0, 2] * R[0, 1] + R_d[1, 2] * R[1, 1] + R_d[2, 2] * R[2, 1]
    return 0.5 * (E21 - E12), 0.5 * (E02 - E20), 0.5 * (E10 - E01)


@njit(cache=True)
def attitude_task(R_d, R, v, par, acc_body, e_rpy):
    """The rotational rows of :func:`body_task` for a desired attitude ``R_d`` (constant: ``w_d =
    w_dot_d = 0``): ``w_dot_des = -K_R e_R - K_w w_B``, ``e_R = 0.5 vee(R_d^T R - R^T R_d)``, into
    ``acc_body[3:6]`` and ``e_rpy`` (as :func:`body_task_reference` with ``ref.R = R_d``)."""
    kp_rot, kd_rot = par.kp_rot, par.kd_rot
    e0, e1, e2 = attitude_error(R_d, R)
    acc_body[3] = -kp_rot[0] * e0 - kd_rot[0] * v[3]
    acc_body[4] = -kp_rot[1] * e1 - kd_rot[1] * v[4]
    acc_body[5] = -kp_rot[2] * e2 - kd_rot[2] * v[5]
    e_rpy[0], e_rpy[1], e_rpy[2] = e0, e1, e2


@njit(cache=True)
def command_reference(cmd, ref_p, ref_v, ref_a):
    """Under a velocity command: the horizontal body reference (world x, y: position [m], velocity
    [m/s], acceleration [m/s^2]) from the command reference ``cmd``
    (:data:`.command.CMD_FIELDS`) into ``ref_p/v/a[0:2]`` (the height stays :func:`body_reference`'s)."""
    ref_p[0], ref_p[1] = cmd[CMD_PX], cmd[CMD_PY]
    ref_v[0], ref_v[1] = cmd[CMD_VX], cmd[CMD_VY]
    ref_a[0], ref_a[1] = cmd[CMD_AX], cmd[CMD_AY]


@njit(cache=True)
def yaw_attitude(yaw, R_d):
    """``R_d <- R_d Rz(yaw)`` (the desired attitude yawed by ``yaw`` [rad] about its own z axis)."""
    c, s = math.cos(yaw), math.sin(yaw)
    for r in range(3):
        a, b = R_d[r, 0], R_d[r, 1]
        R_d[r, 0] = a * c + b * s
        R_d[r, 1] = b * c - a * s


@njit(cache=True)
def attitude_task_command(R_d, cmd, R, v, par, acc_body, e_rpy):
    """The rotational rows of :func:`body_task` for a desired attitude ``R_d`` turning at the yaw
    rate ``w_d = [0, 0, wz]`` (desired body frame) with ``w_dot_d = [0, 0, dwz]`` (``cmd``:
    :data:`.command.CMD_FIELDS`): the full geometric law of :func:`body_task_reference`,
    ``w_dot_des = -K_R e_R - K_w (w_B - m wz) - wz w_B x m + m dwz`` with ``m = R^T R_d z``, into
    ``acc_body[3:6]`` and ``e_rpy``."""
    kp_rot, kd_rot = par.kp_rot, par.kd_rot
    wz, dwz = cmd[CMD_WZ], cmd[CMD_DWZ]
    e0, e1, e2 = attitude_error(R_d, R)
    m0 = R[0, 0] * R_d[0, 2] + R[1, 0] * R_d[1, 2] + R[2, 0] * R_d[2, 2]
    m1 = R[0, 1] * R_d[0, 2] + R[1, 1] * R_d[1, 2] + R[2, 1] * R_d[2, 2]
    m2 = R[0, 2] * R_d[0, 2] + R[1, 2] * R_d[1, 2] + R[2, 2] * R_d[2, 2]
    w0, w1, w2 = v[3], v[4], v[5]
    acc_body[3] = -kp_rot[0] * e0 - kd_rot[0] * (w0 - m0 * wz) - wz * (w1 * m2 - w2 * m1) + m0 * dwz
    acc_body[4] = -kp_rot[1] * e1 - kd_rot[1] * (w1 - m1 * wz) - wz * (w2 * m0 - w0 * m2) + m1 * dwz
    acc_body[5] = -kp_rot[2] * e2 - kd_rot[2] * (w2 - m2 * wz) - wz * (w0 * m1 - w1 * m0) + m2 * dwz
    e_rpy[0], e_rpy[1], e_rpy[2] = e0, e1, e2


def yaw_rotation(yaw: float) -> np.ndarray:
    """``Rz(yaw)`` (3, 3)."""
    c, s = math.cos(yaw), math.sin(yaw)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def plane_attitude_reference(normal_w) -> np.ndarray:
    """:func:`plane_attitude` in numpy (Rodrigues from the axis and angle)."""
    n = np.asarray(normal_w, dtype=float)
    s = math.hypot(n[0], n[1])
    if s == 0.0:
        return np.eye(3)
    k = np.array([-n[1], n[0], 0.0]) / s
    Kx = np.array([[0.0, -k[2], k[1]], [k[2], 0.0, -k[0]], [-k[1], k[0], 0.0]])
    return np.eye(3) + s * Kx + (1.0 - n[2]) * Kx @ Kx


_body_reference_py = body_reference.py_func       # the kernel's own code, run as plain Python
_RefPar = namedtuple("_RefPar", "stand_up_start stand_up_duration stand_height gait_start velocity_ramp_end "
                     "forward_velocity")


def vee(S: np.ndarray) -> np.ndarray:
    return np.array([S[2, 1], S[0, 2], S[1, 0]])


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

    def __init__(self, cfg, gait_start: float):
        self.cfg = cfg
        self.gait_start = gait_start
        self.p0 = np.zeros(3)

    def reset(self, p0: np.ndarray) -> None:
        self.p0[:] = p0           # in place: the compiled cycle reads this array

    def __call__(self, t: float, cmd: np.ndarray | None = None) -> BodyReference:
        """The reference at ``t`` [s]; under a velocity command (``cmd``: the command reference,
        :data:`.command.CMD_FIELDS`) its horizontal part, yaw and yaw rate are the command's."""
        p, v, a = np.empty(3), np.empty(3), np.empty(3)
        _body_reference_py(t, self.p0, _RefPar(self.cfg.stand_up_start, self.cfg.stand_up_duration, self.cfg.stand_height,
                                               self.gait_start, self.cfg.velocity_ramp_end,
                                               self.cfg.forward_velocity), p, v, a)
        if cmd is None:
            return BodyReference(p=p, v=v, a=a, R=np.eye(3), w=np.zeros(3), w_dot=np.zeros(3))
        p[:2], v[:2], a[:2] = cmd[[CMD_PX, CMD_PY]], cmd[[CMD_VX, CMD_VY]], cmd[[CMD_AX, CMD_AY]]
        return BodyReference(p=p, v=v, a=a, R=yaw_rotation(cmd[CMD_YAW]), w=np.array([0.0, 0.0, cmd[CMD_WZ]]),
                             w_dot=np.array([0.0, 0.0, cmd[CMD_DWZ]]))


def body_task_reference(cfg, ref: BodyReference, p: np.ndarray, R: np.ndarray, v_base: np.ndarray,
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


def task_targets_reference(support, legs, acc_body, w_b, theta_nominal, cfg):
    """:func:`task_targets` in numpy, from the configuration ``cfg``: returns ``(W, b)``."""
    N = support.shape[0]
    mode = cfg.relative_pitch_mode
    W = np.empty((N, 4))
    b = np.empty((N, 4))
    W[:, :3] = np.where(support, cfg.w_support, cfg.w_swing)[:, None]
    W[:, 3] = cfg.w_pitch_none if mode == "none" else cfg.w_pitch
    b[:, :3] = -legs.dJ_p_dq
    b[:, 3] = -legs.dJ_theta_dq
    if cfg.support_foot_acceleration == "consistent":
        # relative acceleration of a world-fixed foot under the desired base motion:
        # a_rel = -(v_dot_B + w_dot_B x p) - w_B x v_rel   (base frame)
        a_rel = -(acc_body[:3][None, :] + cross_rows(np.broadcast_to(acc_body[3:], legs.p.shape), legs.p)) \
            - cross_rows(np.broadcast_to(w_b, legs.p.shape), legs.v_p)
        b[:, :3] += np.where(support[:, None], a_rel, 0.0)
    if mode != "none":
        damp = np.clip(-cfg.k_dtheta * legs.theta_dot, -cfg.theta_ddot_max, cfg.theta_ddot_max)
        if cfg.swing_pitch_recenter:
            # swing legs are free to move in their null space: bring theta back to the nominal
            # stance value before touchdown (support legs still get no reference angle)
            swing_acc = cfg.kp_swing_pitch * (theta_nominal - legs.theta) - cfg.kd_swing_pitch * legs.theta_dot
        else:
            swing_acc = np.zeros(N)
        b[:, 3] += np.where(support, damp, swing_acc)
    return W, b


def cost_index(leg_v, lam0):
    """Index arrays of :func:`task_cost_reference`: ``(H_rows, H_cols, g_rows, lam)`` (the leg
    blocks' entries, row-major, the legs' columns, the force columns)."""
    legv = np.asarray(leg_v)                                      # (N, k) columns in nu_dot
    lam = lam0 + 4 * np.arange(legv.shape[0])[:, None] + np.arange(4)[None, :]
    k = legv.shape[1]
    return (np.repeat(legv, k, axis=1).reshape(-1), np.tile(legv, (1, k)).reshape(-1), legv.reshape(-1),
            lam.reshape(-1))


def task_cost_reference(J, W, b, acc_body, cfg, lam_diag, ns, index, H, g) -> None:
    """:func:`task_cost` in numpy (``ns`` slacks after the forces; ``index``: :func:`cost_index`)."""
    H_rows, H_cols, g_rows, lam = index
    H[:] = 0.0
    g[:] = 0.0
    H[np.arange(6), np.arange(6)] = cfg.w_body
    g[:6] = -cfg.w_body * acc_body
    JtW = J.transpose(0, 2, 1) * W[:, None, :]                    # (N, k, 4)
    H[H_rows, H_cols] = (JtW @ J).reshape(-1)
    g[g_rows] = -np.einsum("nij,nj->ni", JtW, b).reshape(-1)
    H[lam, lam] = lam_diag
    reg = cfg.hessian_reg * float(H.diagonal().max())       # before the slacks (see task_cost)
    for k in range(ns):
        s = lam[-1] + 1 + k
        H[s, s] = cfg.cbf_slack_weight
    H[np.diag_indices(H.shape[0])] += reg
