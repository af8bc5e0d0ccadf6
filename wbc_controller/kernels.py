"""Compiled (numba ``@njit(cache=True)``) kernels of the fast controller cycle.

Every kernel writes into preallocated arrays and repeats, operation for operation where the
arithmetic allows, the numpy code of :class:`wbc_controller.oracle.ReferenceController` and
:meth:`legged_wbc.model.RobotModel.legs_batch`; the tests compare them entry by entry.

Frames and units as in the controller: leg quantities in the base frame (the fixed-base model's
world frame) [m, rad, s]; contact forces ``lambda_i = [f_x, f_y, f_z, m_theta]`` in the base frame
[N, N m]; torques [N m] in Pinocchio joint order. Array layout: the controller passes C-contiguous
float64 / int64 / bool arrays only (one compiled signature per kernel, see :func:`warmup`).
The kernels are cached on disk (``__pycache__``); a process that has to compile them says so once
on stderr (:mod:`legged_wbc.jit`); ``setup.sh`` fills the cache.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import njit

from legged_wbc.gait import SUPPORT, gait_state
from legged_wbc.jit import announce_compiles
from legged_wbc.kinematics import LEG_CHAIN_WORK, leg_chain_kinematics, legs_from_frames

announce_compiles(__name__)          # one line on stderr if this process has to compile a kernel

SWING_WORK = 60         # scratch size (floats) of swing_torques
INF = 1e20              # wbc_controller.qp.INF: loose bound


# ---------------------------------------------------------------------------- model
@njit(cache=True)
def symmetrize_mass(M_upper, h_in, M, h):
    """``M`` (nv x nv) from Pinocchio's crba output (upper triangle filled), ``h`` copied."""
    nv = M.shape[0]
    for i in range(nv):
        for j in range(i, nv):
            x = M_upper[i, j]
            M[i, j] = x
            M[j, i] = x
        h[i] = h_in[i]


@njit(cache=True)
def rotation_from_quat(q, R):
    """Rotation base -> world of the unit quaternion ``q[3:7] = [x, y, z, w]`` (into ``R``)."""
    x, y, z, w = q[3], q[4], q[5], q[6]
    R[0, 0] = 1 - 2 * (y * y + z * z)
    R[0, 1] = 2 * (x * y - z * w)
    R[0, 2] = 2 * (x * z + y * w)
    R[1, 0] = 2 * (x * y + z * w)
    R[1, 1] = 1 - 2 * (x * x + z * z)
    R[1, 2] = 2 * (y * z - x * w)
    R[2, 0] = 2 * (x * z - y * w)
    R[2, 1] = 2 * (y * z + x * w)
    R[2, 2] = 1 - 2 * (x * x + y * y)


# ---------------------------------------------------------------------------- references
@njit(cache=True)
def _smoothstep5(s):
    s = min(max(s, 0.0), 1.0)
    return (10 * s**3 - 15 * s**4 + 6 * s**5, 30 * s**2 - 60 * s**3 + 30 * s**4, 60 * s - 180 * s**2 + 120 * s**3)


@njit(cache=True)
def body_reference(t, p0, stand_up_start, stand_up_duration, stand_height, gait_start, velocity_ramp_end,
                   forward_velocity, ref_p, ref_v, ref_a):
    """Stand-up ramp + forward walking reference (world frame) at ``t`` [s] into ``ref_p/v/a``;
    as :class:`wbc_controller.references.BodyReferenceGenerator` (level, yaw 0)."""
    s = (t - stand_up_start) / stand_up_duration
    f, df, ddf = _smoothstep5(s)
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
def body_task(ref_p, ref_v, ref_a, q, R, v, kp_pos, kd_pos, kp_rot, kd_rot, acc_body, e_rpy):
    """Desired ``nu_dot[0:6]`` (base frame) of :func:`wbc_controller.references.body_task` for a
    level, non-rotating reference (``R_d = I``, ``w_d = w_dot_d = 0``), and the attitude error
    ``0.5 vee(R_d^T R - R^T R_d)`` of the diagnostics into ``e_rpy``."""
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
def swing_reference(start, target, v_start, v_end, T, u, lift, P, V, A):
    """One foot's swing reference at progress ``u`` (clipped to [0, 1]) into ``P``, ``V``, ``A``
    (base frame; as :class:`wbc_controller.references.SwingPlanner`)."""
    u = min(max(u, 0.0), 1.0)
    u2, u3 = u * u, u * u * u
    h0, h1, h2, h3 = 2 * u3 - 3 * u2 + 1, u3 - 2 * u2 + u, -2 * u3 + 3 * u2, u3 - u2
    d0, d1 = (6 * u2 - 6 * u) / T, (3 * u2 - 4 * u + 1) / T
    d2, d3 = (-6 * u2 + 6 * u) / T, (3 * u2 - 2 * u) / T
    T2 = T**2
    a0, a1, a2, a3 = (12 * u - 6) / T2, (6 * u - 4) / T2, (-12 * u + 6) / T2, (6 * u - 2) / T2
    for c in range(2):
        p0, m0, p1, m1 = start[c], v_start[c] * T, target[c], v_end[c] * T
        P[c] = 0.0 + h0 * p0 + h1 * m0 + h2 * p1 + h3 * m1
        V[c] = 0.0 + d0 * p0 + d1 * m0 + d2 * p1 + d3 * m1
        A[c] = 0.0 + a0 * p0 + a1 * m0 + a2 * p1 + a3 * m1
    f = 10 * u3 - 15 * u2 * u2 + 6 * u3 * u2
    df = 30 * u2 - 60 * u3 + 30 * u2 * u2
    ddf = 60 * u - 180 * u2 + 120 * u3
    w = 1.0 - u
    b, db, ddb = 16 * u2 * w * w, 32 * u * w * w - 32 * u2 * w, 32 * w * w - 128 * u * w + 32 * u2
    dz = target[2] - start[2]
    P[2] = start[2] + dz * f + lift * b
    V[2] = (dz * df + lift * db) / T
    A[2] = (dz * ddf + lift * ddb) / T2


@njit(cache=True)
def solve4(M, b, x, a):
    """``x = M^-1 b`` for a 4x4 ``M`` (LU with partial pivoting; ``M``, ``b`` untouched; ``a`` is a
    4x5 scratch)."""
    for i in range(4):
        for j in range(4):
            a[i, j] = M[i, j]
        a[i, 4] = b[i]
    for k in range(4):
        piv, best = k, abs(a[k, k])
        for i in range(k + 1, 4):
            if abs(a[i, k]) > best:
                piv, best = i, abs(a[i, k])
        if piv != k:
            for j in range(5):
                a[k, j], a[piv, j] = a[piv, j], a[k, j]
        for i in range(k + 1, 4):
            f = a[i, k] / a[k, k]
            for j in range(k, 5):
                a[i, j] -= f * a[k, j]
    for i in range(3, -1, -1):
        s = a[i, 4]
        for j in range(i + 1, 4):
            s -= a[i, j] * x[j]
        x[i] = s / a[i, i]


# ---------------------------------------------------------------------------- task targets
@njit(cache=True)
def task_targets(support, p, v_p, theta, theta_dot, dJ_p, dJ_theta, acc_body, w_base, theta_nominal,
                 w_support, w_swing, w_pitch, mode_none, consistent, k_dtheta, theta_ddot_max, recenter,
                 kp_swing_pitch, kd_swing_pitch, W, b):
    """Weights ``W`` (N, 4) and desired task accelerations ``b`` (N, 4) of the leg rows
    ``[p_ddot; theta_ddot]`` (base frame) minus their drift ``J_dot q_dot``, before the swing
    feed-forward: support / swing position weights; ``consistent`` support-foot acceleration of a
    world-fixed foot ``-(v_dot_B + w_dot_B x p) - w_B x v_rel``; support legs' pitch damping
    (saturated), swing legs' re-centering PD (or 0)."""
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
def swing_torques(support, phases, progress, planned, sw_start, sw_target, sw_v_start, sw_v_end, sw_duration,
                  lift, p, v_p, J, M, leg_v, leg_j, kp, kd, projection, b, tau_sw, work):
    """Swing-leg PD torques ``tau_sw`` (n) of the legs outside the support set, and their swing
    feed-forward accelerations added to ``b[:, :3]``.

    A leg out of the support set in a nominal swing tracks its planned path (base frame); outside
    a nominal swing it holds the foot where it is. ``tau = J_p^T (K_p (p_ref - p) + K_d (v_ref -
    v_p))``; with ``projection`` the part that would accelerate theta is removed with the leg
    block ``M_ll`` of the mass matrix: ``tau' = tau - J_th (J_th M_ll^-1 tau) / (J_th M_ll^-1 J_th)``.
    ``work``: scratch of ``SWING_WORK`` floats (no allocation in the kernel)."""
    N = p.shape[0]
    for k in range(tau_sw.shape[0]):
        tau_sw[k] = 0.0
    Pr, Vr, Ar, f = work[0:3], work[3:6], work[6:9], work[9:12]
    t_sw, Jt, Minv_Jt = work[12:16], work[16:20], work[20:24]
    Mll = work[24:40].reshape(4, 4)
    lu = work[40:60].reshape(4, 5)
    for i in range(N):
        if support[i]:
            continue
        if planned[i] and phases[i] != SUPPORT:
            swing_reference(sw_start[i], sw_target[i], sw_v_start[i], sw_v_end[i], sw_duration[i], progress[i],
                            lift, Pr, Vr, Ar)
        else:
            for c in range(3):
                Pr[c] = p[i, c]
                Vr[c] = 0.0
                Ar[c] = 0.0
        for c in range(3):
            b[i, c] += Ar[c]
            f[c] = kp[c] * (Pr[c] - p[i, c]) + kd[c] * (Vr[c] - v_p[i, c])
        for k in range(4):
            t_sw[k] = J[i, 0, k] * f[0] + J[i, 1, k] * f[1] + J[i, 2, k] * f[2]
        if projection:
            for r in range(4):
                Jt[r] = J[i, 3, r]
                for c in range(4):
                    Mll[r, c] = M[leg_v[i, r], leg_v[i, c]]
            solve4(Mll, Jt, Minv_Jt, lu)
            den = Jt[0] * Minv_Jt[0] + Jt[1] * Minv_Jt[1] + Jt[2] * Minv_Jt[2] + Jt[3] * Minv_Jt[3]
            if den > 1e-12:
                num = Minv_Jt[0] * t_sw[0] + Minv_Jt[1] * t_sw[1] + Minv_Jt[2] * t_sw[2] + Minv_Jt[3] * t_sw[3]
                coef = num / den
                for k in range(4):
                    t_sw[k] = t_sw[k] - Jt[k] * coef
        for k in range(4):
            tau_sw[leg_j[i, k]] = t_sw[k]


@njit(cache=True)
def null_space_compensation(support, J, leg_j, tau_ext, limit, tau_comp, nvec):
    """``tau_comp`` (n): minus nothing, plus ``n_i (n_i . tau_ext,i)`` clipped to ``+-limit`` [N m] per
    support leg, ``n_i`` the unit null-space vector of ``J_p,i`` with ``J_theta,i n_i >= 0``
    (signed 3x3 minors, as :func:`legged_wbc.model.null_vectors`); ``nvec`` is a scratch of 4."""
    N = J.shape[0]
    for k in range(tau_comp.shape[0]):
        tau_comp[k] = 0.0
    for i in range(N):
        if not support[i]:
            continue
        for k in range(4):
            # minor of J_p without column k, columns in order
            a0 = 1 if k == 0 else 0
            a1 = a0 + 1 + (1 if k == a0 + 1 else 0)
            a2 = a1 + 1 + (1 if k == a1 + 1 else 0)
            ax_, ay_, az_ = J[i, 0, a0], J[i, 1, a0], J[i, 2, a0]
            bx_, by_, bz_ = J[i, 0, a1], J[i, 1, a1], J[i, 2, a1]
            cx_, cy_, cz_ = J[i, 0, a2], J[i, 1, a2], J[i, 2, a2]
            det = (ax_ * (by_ * cz_ - bz_ * cy_) - bx_ * (ay_ * cz_ - az_ * cy_)
                   + cx_ * (ay_ * bz_ - az_ * by_))
            nvec[k] = det if k % 2 == 0 else -det
        nrm = math.sqrt(nvec[0] ** 2 + nvec[1] ** 2 + nvec[2] ** 2 + nvec[3] ** 2)
        nrm = max(nrm, 1e-300)
        s = 0.0
        for k in range(4):
            nvec[k] /= nrm
            s += J[i, 3, k] * nvec[k]
        sign = -1.0 if s < 0.0 else 1.0
        d = 0.0
        for k in range(4):
            nvec[k] *= sign
            d += nvec[k] * tau_ext[leg_j[i, k]]
        d = min(max(d, -limit), limit)
        for k in range(4):
            tau_comp[leg_j[i, k]] = nvec[k] * d


# ---------------------------------------------------------------------------- QP blocks
@njit(cache=True)
def task_cost(J, W, b, acc_body, w_body, lam_diag, n_slack, slack_weight, hessian_reg, leg_v, lam0, H, g):
    """Cost ``1/2 ||J_T nu_dot - x_ddot_des||^2_W + 1/2 ||lambda||^2_{W_lambda} (+ slack)``:
    ``H`` and ``g`` rewritten entirely (body rows ``w_body I_6``, leg blocks ``J_i^T W_i J_i`` and
    ``-J_i^T W_i b_i``, force weights ``lam_diag``), plus ``hessian_reg * max diag(H)`` on the
    diagonal."""
    n = H.shape[0]
    for r in range(n):
        g[r] = 0.0
        for c in range(n):
            H[r, c] = 0.0
    for r in range(6):
        H[r, r] = w_body
        g[r] = -w_body * acc_body[r]
    N = J.shape[0]
    for i in range(N):
        for r in range(4):
            for c in range(4):
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
    for k in range(n_slack):
        H[s0 + k, s0 + k] = slack_weight
    dmax = H[0, 0]
    for r in range(1, n):
        if H[r, r] > dmax:
            dmax = H[r, r]
    reg = hessian_reg * dmax
    for r in range(n):
        H[r, r] += reg


@njit(cache=True)
def floating_base_rows(M, h, P, lam0, A_eq, b_eq):
    """Floating-base rows ``M_B nu_dot - [sum f_i; sum r_i x f_i] = -h_B``: ``A_eq[:6, :nv] = M[:6]``,
    ``b_eq[:6] = -h[:6]``, the moment rows ``-[r_i]x`` on each foot's ``(f_x, f_y, f_z)``
    (the force rows ``-I_3`` and ``m_theta = 0`` rows are constant, see ``contact_rows``)."""
    nv = M.shape[0]
    for r in range(6):
        for c in range(nv):
            A_eq[r, c] = M[r, c]
        b_eq[r] = -h[r]
    N = P.shape[0]
    for i in range(N):
        c = lam0 + 4 * i
        px, py, pz = P[i, 0], P[i, 1], P[i, 2]
        # -[r]x = [[0, z, -y], [-z, 0, x], [y, -x, 0]]
        A_eq[3, c + 0] = 0.0
        A_eq[3, c + 1] = pz
        A_eq[3, c + 2] = -py
        A_eq[4, c + 0] = -pz
        A_eq[4, c + 1] = 0.0
        A_eq[4, c + 2] = px
        A_eq[5, c + 0] = py
        A_eq[5, c + 1] = -px
        A_eq[5, c + 2] = 0.0


@njit(cache=True)
def normal_force_bounds(support, fz_max, row_fric, u):
    """Contact state: ``f_z <= fz_max`` for support feet, ``f_z <= 0`` (no force) otherwise."""
    for i in range(support.shape[0]):
        u[row_fric + 5 * i + 4] = fz_max if support[i] else 0.0


@njit(cache=True)
def torque_rows(M, h, J, leg_j, lam0, row_tau, tmin, tmax, tau_sw_total, C, l, u):
    """Final-torque rows ``tau_min <= S[M nu_dot + h - J_c^T lambda] + tau_sw <= tau_max``:
    ``C[tau] = [M[6:], -J_i^T on lambda_i]``, bounds ``tau_min/max - h[6:] - tau_sw``."""
    n = M.shape[0] - 6
    nv = M.shape[0]
    for j in range(n):
        for c in range(nv):
            C[row_tau + j, c] = M[6 + j, c]
        l[row_tau + j] = tmin[j] - h[6 + j] - tau_sw_total[j]
        u[row_tau + j] = tmax[j] - h[6 + j] - tau_sw_total[j]
    N = J.shape[0]
    for i in range(N):
        for r in range(4):
            row = row_tau + leg_j[i, r]
            for k in range(4):
                C[row, lam0 + 4 * i + k] = -J[i, k, r]


@njit(cache=True)
def cbf_rows(support, J, theta, theta_dot, dJ_theta, leg_v, row_cbf, cbf_on, kp_b, kd_b, th_lo, th_hi, C, l, u):
    """Relative-pitch CBF rows ``J_theta q_ddot`` in
    ``[-(k_p (theta - th_lo) + k_d theta_dot + Jdot q_dot), k_p (th_hi - theta) - k_d theta_dot - Jdot q_dot]``
    on support legs when ``cbf_on``; loose (``+-INF``) otherwise."""
    N = J.shape[0]
    for i in range(N):
        row = row_cbf + i
        for k in range(4):
            C[row, leg_v[i, k]] = J[i, 3, k]
        if cbf_on and support[i]:
            l[row] = -(kp_b * (theta[i] - th_lo) + kd_b * theta_dot[i] + dJ_theta[i])
            u[row] = kp_b * (th_hi - theta[i]) - kd_b * theta_dot[i] - dJ_theta[i]
        else:
            l[row] = -INF
            u[row] = INF


@njit(cache=True)
def friction_rows(n_legs, lam0, row_fric, mu, A_eq, C, l, u):
    """Constant contact rows: per foot ``m_theta = 0`` and the force rows ``-I_3`` of the base
    equations; the friction pyramid ``|f_x|, |f_y| <= mu f_z`` (body z as the normal) and
    ``0 <= f_z`` (its upper bound is the contact state, :func:`normal_force_bounds`)."""
    for i in range(n_legs):
        c = lam0 + 4 * i
        A_eq[6 + i, c + 3] = 1.0
        for r in range(3):
            for k in range(3):
                A_eq[r, c + k] = -1.0 if r == k else 0.0
        r = row_fric + 5 * i
        C[r + 0, c + 0], C[r + 0, c + 2] = 1.0, -mu
        C[r + 1, c + 0], C[r + 1, c + 2] = -1.0, -mu
        C[r + 2, c + 1], C[r + 2, c + 2] = 1.0, -mu
        C[r + 3, c + 1], C[r + 3, c + 2] = -1.0, -mu
        C[r + 4, c + 2] = 1.0
        for k in range(4):
            l[r + k] = -INF
            u[r + k] = 0.0
        l[r + 4] = 0.0


# ---------------------------------------------------------------------------- one call per cycle stage
# Each call of a compiled kernel from Python costs ~0.1 us per argument (numba's dispatch); the
# stages below call the kernels above from compiled code, once per stage.
@njit(cache=True)
def cycle_targets(t, q, v, support, tau_ext, compensate, P, v_p, J, theta, theta_dot, dJ_p, dJ_theta, M, R, p0,
                  gait_offset, gait_group, stance_p, theta_nom, gains, leg_j, leg_v, p_ref, p_gait, p_targets, p_start,
                  p_swing, comp_limit, swing_cycle, sw_start, sw_target, sw_v_start, sw_v_end, sw_duration, planned,
                  ref_p, ref_v, ref_a, acc_body, e_rpy, phases, progress, cycles, W, b, tau_sw, tau_comp,
                  tau_sw_total, swing_work, nvec_work):
    """What the QP of one cycle is made of, before its blocks: body reference and task, gait
    state, task targets ``W``, ``b``, the swings that begin, swing and compensation torques
    (``tau_sw_total = tau_sw + tau_comp``). Leg kinematics ``P`` ... ``dJ_theta`` as
    :class:`legged_wbc.model.LegBatch`; ``gains`` (6, 3): ``kp_pos, kd_pos, kp_rot, kd_rot,
    kp_swing, kd_swing``; the ``p_*`` tuples as the controller's ``_fill_config_blocks_fast`` sets them."""
    s0, s1, s2, s3, s4, s5 = p_ref
    body_reference(t, p0, s0, s1, s2, s3, s4, s5, ref_p, ref_v, ref_a)
    body_task(ref_p, ref_v, ref_a, q, R, v, gains[0], gains[1], gains[2], gains[3], acc_body, e_rpy)
    g0, g1, g2, g3 = p_gait
    gait_state(t, g0, g1, g2, g3, gait_offset, gait_group, phases, progress, cycles)
    w_sup, w_sw, w_pitch, mode_none, consistent, k_dth, thdd_max, recenter, kp_sp, kd_sp = p_targets
    task_targets(support, P, v_p, theta, theta_dot, dJ_p, dJ_theta, acc_body, v[3:6], theta_nom, w_sup, w_sw,
                 w_pitch, mode_none, consistent, k_dth, thdd_max, recenter, kp_sp, kd_sp, W, b)
    z_td, raibert, t_sup, t_sw = p_start
    start_swings(phases, cycles, swing_cycle, stance_p, z_td, raibert, t_sup, t_sw, R, ref_v, P, v_p, sw_start,
                 sw_target, sw_v_start, sw_v_end, sw_duration, planned)
    lift, projection = p_swing
    swing_torques(support, phases, progress, planned, sw_start, sw_target, sw_v_start, sw_v_end, sw_duration, lift,
                  P, v_p, J, M, leg_v, leg_j, gains[4], gains[5], projection, b, tau_sw, swing_work)
    if compensate:
        null_space_compensation(support, J, leg_j, tau_ext, comp_limit, tau_comp, nvec_work)
    else:
        for k in range(tau_comp.shape[0]):
            tau_comp[k] = 0.0
    for k in range(tau_sw_total.shape[0]):
        tau_sw_total[k] = tau_sw[k] + tau_comp[k]


@njit(cache=True)
def qp_blocks(support, P, J, theta, theta_dot, dJ_theta, M, h, W, b, acc_body, tau_sw_total, lam_diag, tmin, tmax,
              leg_j, leg_v, p_cost, p_cbf, fz_max, rows, H, g, A_eq, b_eq, C, l, u, bl):
    """The blocks of the stacked QP that change every cycle: cost, floating-base rows,
    normal-force bounds, torque rows, CBF rows; the stacked lower bounds ``bl`` get the equality
    right-hand side. ``rows``: ``(lam0, row_fric, row_tau, row_cbf)``."""
    lam0, row_fric, row_tau, row_cbf = rows
    w_body, n_slack, slack_weight, hessian_reg = p_cost
    task_cost(J, W, b, acc_body, w_body, lam_diag, n_slack, slack_weight, hessian_reg, leg_v, lam0, H, g)
    floating_base_rows(M, h, P, lam0, A_eq, b_eq)
    normal_force_bounds(support, fz_max, row_fric, u)
    torque_rows(M, h, J, leg_j, lam0, row_tau, tmin, tmax, tau_sw_total, C, l, u)
    cbf_on, kp_b, kd_b, th_lo, th_hi = p_cbf
    cbf_rows(support, J, theta, theta_dot, dJ_theta, leg_v, row_cbf, cbf_on, kp_b, kd_b, th_lo, th_hi, C, l, u)
    for k in range(b_eq.shape[0]):
        bl[k] = b_eq[k]


@njit(cache=True)
def check_solution(A_eq, b_eq, C, l, u, x, M, h, J, leg_j, lam0, tau_sw_total, tmin, tmax, tau_tol, support, row_cbf,
                   cbf_on, tau_wbc, tau, cbf_act):
    """The checks of a solution ``x`` of the stacked QP: ``(finite, equality residual, inequality
    violation, torque in bounds)`` (:func:`residuals`, :func:`command_torque`), the command torque
    into ``tau_wbc``, ``tau``, and, with ``cbf_on``, the binding CBF rows into ``cbf_act``
    (:func:`cbf_active`; else all False)."""
    finite = all_finite(x)
    if finite:
        eq_res, viol = residuals(A_eq, b_eq, C, l, u, x)
    else:
        eq_res, viol = np.inf, np.inf
    in_bounds = command_torque(M, h, J, leg_j, x, lam0, tau_sw_total, tmin, tmax, tau_tol, tau_wbc, tau)
    if cbf_on:
        cbf_active(support, C, l, u, x, row_cbf, cbf_act)
    else:
        for i in range(cbf_act.shape[0]):
            cbf_act[i] = False
    return finite, eq_res, viol, in_bounds


# ---------------------------------------------------------------------------- the QP as DAQP solves it
# DAQP turns a QP ``min 1/2 x^T H x + g^T x, bl <= A x <= bu`` into a least-distance problem (LDP)
# through the Cholesky factor ``H = R^T R`` and ``y = R x``: ``min 1/2 ||y||^2 + (R^-T g)^T y`` over
# the rows ``A R^-1``. For a dense ``H`` it does so in O(n^3 + m n^2) on every update (most of its
# time here). Our ``H`` is block diagonal (base and force variables: diagonal; each leg's joint
# accelerations: a 4x4 block), so the LDP is formed here, from the blocks the QP is made of, in
# O(m n), and DAQP is given ``H = I``. Same problem, fewer variables and rows: the ``m_theta`` of
# every foot is fixed at 0 by its equality row, so it is not a variable of the LDP (its cost and
# rows vanish); the forces ``f_x, f_y, f_z`` of the feet are the first variables of ``y`` and
# their bounds are DAQP's simple bounds: ``0 <= f_z <= f_z,max`` of a support foot, and for a foot
# held at ``f_z = 0`` (outside the support set) all three forces at 0 (what its friction pyramid
# implies) with its pyramid rows made loose. General rows, in this order: the 6 floating-base
# equalities, the friction pyramids (4 per foot), the CBF rows (N), the torque rows (n) last, so
# that the problem without them is a prefix (the controller solves that one first, see
# ``WholeBodyController._solve_ldp``).
LDP_ZERO_TOL = 1e-11    # DAQP's zero_tol: a pivot <= zero_tol * (largest) means H is taken as singular


@njit(cache=True)
def _leg_cost(J, W, i, r, c):
    """Entry ``(r, c)`` of leg ``i``'s cost block ``J_i^T W_i J_i`` (as :func:`task_cost` sums it)."""
    s = 0.0
    for k in range(4):
        s += J[i, k, r] * W[i, k] * J[i, k, c]
    return s


@njit(cache=True)
def _ldp_row_nu(Ay, a, M, row, nf, leg_v, dinv, Rinv):
    """Row ``a`` of the LDP on the ``nu_dot`` part of ``y`` from the QP row's coefficients
    ``M[row, :]`` on ``nu_dot`` (base columns: scaled; leg columns: times the block's ``R^-1``)."""
    for c in range(6):
        Ay[a, nf + c] = M[row, c] * dinv[nf + c]
    for i in range(leg_v.shape[0]):
        for r in range(4):
            s = 0.0
            for k in range(r + 1):
                s += M[row, leg_v[i, k]] * Rinv[i, k, r]
            Ay[a, nf + leg_v[i, r]] = s


@njit(cache=True)
def ldp_direct(M, h, J, P, W, b, acc_body, theta, theta_dot, dJ_theta, support, tau_sw_total, lam_diag, tmin, tmax,
               leg_j, leg_v, p_cost, p_cbf, mu, fz_max, c, Ay, ubu, ubl, dinv, Rinv):
    """The cycle's QP (the blocks :func:`qp_blocks` fills, from the same quantities) in DAQP's
    least-distance form, in ``y = R z`` with ``z = [f_1 .. f_N (3 each), nu_dot, slacks]``: the
    linear term ``c = R^-T g_z``, the general rows ``Ay = A_z R^-1`` (in the order above; entries
    that are structurally zero are never written, ``Ay`` starts at zero) with their bounds
    ``ubl[3N:]``, ``ubu[3N:]`` (unscaled), the simple bounds of the forces ``ubl[:3N]``,
    ``ubu[:3N]`` (in ``y``), and the factors :func:`qp_from_ldp` maps ``y`` back with: ``dinv`` (the
    ``1/sqrt(H_jj)`` of the diagonal variables, by ``y`` index) and ``Rinv`` (N, 4, 4; the inverse
    upper Cholesky factor of each leg block). Every joint belongs to a leg (``leg_j`` covers 0..n-1).

    Returns False (nothing usable filled) if a pivot of the factorization is <= ``LDP_ZERO_TOL``
    times the largest diagonal entry of ``H``: then the QP is solved as it is (DAQP regularizes)."""
    N = J.shape[0]
    nv = M.shape[0]
    n = nv - 6
    nf = 3 * N
    w_body, n_slack, slack_weight, hessian_reg = p_cost
    cbf_on, kp_b, kd_b, th_lo, th_hi = p_cbf
    # regularization: hessian_reg * the largest diagonal entry of H (as task_cost)
    dmax = w_body
    for i in range(N):
        for r in range(4):
            dmax = max(dmax, _leg_cost(J, W, i, r, r))
    for k in range(lam_diag.shape[0]):
        dmax = max(dmax, lam_diag[k])
    if n_slack > 0:
        dmax = max(dmax, slack_weight)
    reg = hessian_reg * dmax
    tol = LDP_ZERO_TOL * (dmax + reg)
    # diagonal variables: forces (no linear term), base (body task), slacks
    for i in range(N):
        for k in range(3):
            hk = lam_diag[4 * i + k] + reg
            if not hk > tol:
                return False
            dinv[3 * i + k] = 1.0 / math.sqrt(hk)
            c[3 * i + k] = 0.0
    hk = w_body + reg
    if not hk > tol:
        return False
    d = math.sqrt(hk)
    for r in range(6):
        dinv[nf + r] = 1.0 / d
        c[nf + r] = (-w_body * acc_body[r]) / d
    for i in range(n_slack):
        hk = slack_weight + reg
        if not hk > tol:
            return False
        dinv[nf + nv + i] = 1.0 / math.sqrt(hk)
        c[nf + nv + i] = 0.0
    # leg blocks J^T W J + reg I: upper Cholesky factor R (in Rinv[i]), inverted in place
    for i in range(N):
        for r in range(4):
            for k in range(4):
                Rinv[i, r, k] = 0.0
        for r in range(4):
            s = _leg_cost(J, W, i, r, r) + reg
            for k in range(r):
                s -= Rinv[i, k, r] * Rinv[i, k, r]
            if not s > tol:
                return False
            d = math.sqrt(s)
            Rinv[i, r, r] = d
            for k in range(r + 1, 4):
                s = _leg_cost(J, W, i, r, k)
                for m in range(r):
                    s -= Rinv[i, m, r] * Rinv[i, m, k]
                Rinv[i, r, k] = s / d
        for k in range(3, -1, -1):
            Rinv[i, k, k] = 1.0 / Rinv[i, k, k]
            for r in range(k - 1, -1, -1):
                s = 0.0
                for m in range(r + 1, k + 1):
                    s += Rinv[i, r, m] * Rinv[i, m, k]
                Rinv[i, r, k] = -s / Rinv[i, r, r]
        # c = R^-T g on the block, g = -J^T W b
        for r in range(4):
            s = 0.0
            for k in range(r + 1):
                gk = 0.0
                for m in range(4):
                    gk += J[i, m, k] * W[i, m] * b[i, m]
                s += Rinv[i, k, r] * -gk
            c[nf + leg_v[i, r]] = s
    ms = nf
    # floating-base rows: M_B nu_dot - [sum f; sum p x f] = -h_B
    for r in range(6):
        _ldp_row_nu(Ay, r, M, r, nf, leg_v, dinv, Rinv)
        for i in range(N):
            px, py, pz = P[i, 0], P[i, 1], P[i, 2]
            if r < 3:
                c0, c1, c2 = -1.0 if r == 0 else 0.0, -1.0 if r == 1 else 0.0, -1.0 if r == 2 else 0.0
            elif r == 3:
                c0, c1, c2 = 0.0, pz, -py
            elif r == 4:
                c0, c1, c2 = -pz, 0.0, px
            else:
                c0, c1, c2 = py, -px, 0.0
            Ay[r, 3 * i] = c0 * dinv[3 * i]
            Ay[r, 3 * i + 1] = c1 * dinv[3 * i + 1]
            Ay[r, 3 * i + 2] = c2 * dinv[3 * i + 2]
        ubu[ms + r] = -h[r]
        ubl[ms + r] = -h[r]
    # friction pyramids and the forces' simple bounds
    for i in range(N):
        dx, dy, dz = dinv[3 * i], dinv[3 * i + 1], dinv[3 * i + 2]
        for k in range(4):
            a = 6 + 4 * i + k
            sx = (1.0 if k == 0 else -1.0) if k < 2 else 0.0
            sy = (1.0 if k == 2 else -1.0) if k >= 2 else 0.0
            Ay[a, 3 * i] = sx * dx
            Ay[a, 3 * i + 1] = sy * dy
            Ay[a, 3 * i + 2] = -mu * dz
            ubl[ms + a] = -INF
        hi = fz_max if support[i] else 0.0
        if hi == 0.0:                      # held at f_z = 0: no force, pyramid rows loose
            for k in range(3):
                ubl[3 * i + k] = 0.0
                ubu[3 * i + k] = 0.0
            for k in range(4):
                ubu[ms + 6 + 4 * i + k] = INF
        else:
            for k in range(2):
                ubl[3 * i + k] = -INF
                ubu[3 * i + k] = INF
            ubl[3 * i + 2] = 0.0
            ubu[3 * i + 2] = hi / dz
            for k in range(4):
                ubu[ms + 6 + 4 * i + k] = 0.0
    # torque rows (last): M[6 + j] nu_dot - J_i^T f_i in [tau_min, tau_max] - h - tau_sw
    row_cbf = 6 + 4 * N
    row_tau = row_cbf + N
    for i in range(N):
        for r in range(4):
            j = leg_j[i, r]
            a = row_tau + j
            _ldp_row_nu(Ay, a, M, 6 + j, nf, leg_v, dinv, Rinv)
            for k in range(3):
                Ay[a, 3 * i + k] = -J[i, k, r] * dinv[3 * i + k]
            ubl[ms + a] = tmin[j] - h[6 + j] - tau_sw_total[j]
            ubu[ms + a] = tmax[j] - h[6 + j] - tau_sw_total[j]
    # CBF rows: J_theta,i q_ddot_i (+ s_i)
    for i in range(N):
        a = row_cbf + i
        for r in range(4):
            s = 0.0
            for k in range(r + 1):
                s += J[i, 3, k] * Rinv[i, k, r]
            Ay[a, nf + leg_v[i, r]] = s
        if n_slack > 0:
            Ay[a, nf + nv + i] = dinv[nf + nv + i]
        if cbf_on and support[i]:
            ubl[ms + a] = -(kp_b * (theta[i] - th_lo) + kd_b * theta_dot[i] + dJ_theta[i])
            ubu[ms + a] = kp_b * (th_hi - theta[i]) - kd_b * theta_dot[i] - dJ_theta[i]
        else:
            ubl[ms + a] = -INF
            ubu[ms + a] = INF
    return True


@njit(cache=True)
def qp_from_ldp(y, leg_v, dinv, Rinv, n_slack, x):
    """The QP's solution ``x = [nu_dot; lambda; s]`` from the LDP's ``y`` (:func:`ldp_direct`):
    ``z = R^-1 y``, ``m_theta = 0``."""
    N = leg_v.shape[0]
    nf = 3 * N
    lam0 = x.shape[0] - 4 * N - n_slack
    nv = lam0
    for i in range(N):
        for k in range(3):
            x[lam0 + 4 * i + k] = y[3 * i + k] * dinv[3 * i + k]
        x[lam0 + 4 * i + 3] = 0.0
    for r in range(6):
        x[r] = y[nf + r] * dinv[nf + r]
    for i in range(N):
        for r in range(4):
            s = 0.0
            for k in range(r, 4):
                s += Rinv[i, r, k] * y[nf + leg_v[i, k]]
            x[leg_v[i, r]] = s
    for i in range(n_slack):
        x[lam0 + 4 * N + i] = y[nf + nv + i] * dinv[nf + nv + i]


@njit(cache=True)
def check_direct(x, M, h, J, P, leg_j, leg_v, support, tau_sw_total, tmin, tmax, tau_tol, mu, fz_max, n_slack, ubl,
                 ubu, cbf_on, tau_wbc, tau, cbf_act):
    """:func:`check_solution` for a cycle solved through :func:`ldp_direct`, without the stacked
    matrices: the same rows and bounds evaluated from the blocks they are made of (the torque rows'
    bounds and the CBF rows' from the LDP's general bounds ``ubl``, ``ubu``), normalized as
    :func:`residuals`; the command torque (:func:`command_torque`) and the binding CBF rows
    (:func:`cbf_active`). Returns ``(finite, equality residual, inequality violation, torque in bounds,
    torque rows satisfied)``, the last without tolerance (``tau_min <= tau <= tau_max`` exactly, as the
    rows' values)."""
    N = J.shape[0]
    nv = M.shape[0]
    n = nv - 6
    lam0 = nv
    ms = 3 * N
    finite = all_finite(x)
    in_bounds = command_torque(M, h, J, leg_j, x, lam0, tau_sw_total, tmin, tmax, tau_tol, tau_wbc, tau)
    row_cbf = ms + 6 + 4 * N
    row_tau = row_cbf + N
    for i in range(N):
        cbf_act[i] = False
    if not finite:
        return False, np.inf, np.inf, in_bounds, False
    r_eq = 0.0
    for r in range(6):
        s = 0.0
        for cc in range(nv):
            s += M[r, cc] * x[cc]
        for i in range(N):
            fx, fy, fz = x[lam0 + 4 * i], x[lam0 + 4 * i + 1], x[lam0 + 4 * i + 2]
            px, py, pz = P[i, 0], P[i, 1], P[i, 2]
            if r < 3:
                s -= x[lam0 + 4 * i + r]
            elif r == 3:
                s += pz * fy - py * fz
            elif r == 4:
                s += -pz * fx + px * fz
            else:
                s += py * fx - px * fy
        r_eq = max(r_eq, abs(s + h[r]) / max(1.0, abs(h[r])))
    for i in range(N):
        r_eq = max(r_eq, abs(x[lam0 + 4 * i + 3]))
    viol = 0.0
    for i in range(N):
        fx, fy, fz = x[lam0 + 4 * i], x[lam0 + 4 * i + 1], x[lam0 + 4 * i + 2]
        viol = max(viol, fx - mu * fz, -fx - mu * fz, fy - mu * fz, -fy - mu * fz, -fz)
        hi = fz_max if support[i] else 0.0
        viol = max(viol, (fz - hi) / max(1.0, hi))
    tau_rows = True
    for j in range(n):
        s = tau_wbc[j] - h[6 + j]          # the torque row's value
        lo, up = ubl[row_tau + j], ubu[row_tau + j]
        viol = max(viol, (lo - s) / max(1.0, abs(lo)), (s - up) / max(1.0, abs(up)))
        tau_rows = tau_rows and lo <= s <= up
    for i in range(N):
        s = 0.0
        for r in range(4):
            s += J[i, 3, r] * x[leg_v[i, r]]
        if n_slack > 0:
            s += x[lam0 + 4 * N + i]
        lo, up = ubl[row_cbf + i], ubu[row_cbf + i]
        if lo > -INF:
            viol = max(viol, (lo - s) / max(1.0, abs(lo)))
        if up < INF:
            viol = max(viol, (s - up) / max(1.0, abs(up)))
        if cbf_on:
            t = 1e-6 * max(1.0, abs(up))
            cbf_act[i] = support[i] and (s >= up - t or s <= lo + t)
    return True, r_eq, viol, in_bounds, tau_rows


# ---------------------------------------------------------------------------- the fast cycle's stages
# The fast cycle's arrays and parameters live in one structured array (``workspace_dtype``), so a
# stage is one compiled call with a handful of arguments (numba's dispatch costs ~0.1 us per
# argument; a record costs as one).
@functools.lru_cache(maxsize=None)
def workspace_dtype(N: int, n: int, ns: int) -> np.dtype:
    """The fast controller cycle's workspace for N legs of 4 joints, n joints, ns slacks: model,
    cycle quantities, constants, parameters (scalar fields, set by the controller's
    ``_fill_config_blocks_fast``), the least-distance QP (:func:`ldp_direct`) and the results.

    One dtype object per size (cached): numba's dispatch recognizes a structured array's type
    quickly only by the dtype object it compiled for (an equal but other object costs ~6 us a call)."""
    nv = n + 6
    nz, m_a, nx = 3 * N + nv + ns, 6 + 4 * N + n + N, nv + 4 * N + ns
    f, i, b = np.float64, np.int64, np.bool_
    arrays = [
        ("M", f, (nv, nv)), ("h", f, (nv,)), ("R", f, (3, 3)),                          # model
        ("ref_p", f, (3,)), ("ref_v", f, (3,)), ("ref_a", f, (3,)), ("acc_body", f, (6,)), ("e_rpy", f, (3,)),
        ("phases", i, (N,)), ("progress", f, (N,)), ("cycles", i, (N,)), ("W", f, (N, 4)), ("b", f, (N, 4)),
        ("tau_sw", f, (n,)), ("tau_comp", f, (n,)), ("tau_sw_total", f, (n,)), ("swing_work", f, (SWING_WORK,)),
        ("nvec_work", f, (4,)),                                                           # cycle quantities
        ("gait_offset", f, (N,)), ("gait_group", i, (N,)), ("stance_p", f, (N, 3)), ("theta_nom", f, (N,)),
        ("gains", f, (6, 3)), ("lam_diag_f", f, (4 * N,)), ("tmin_f", f, (n,)), ("tmax_f", f, (n,)), ("tau_tol_f", f, (n,)),
        ("leg_j", i, (N, 4)), ("leg_v", i, (N, 4)),                                      # constants
        ("c", f, (nz,)), ("A", f, (m_a, nz)), ("bu", f, (3 * N + m_a,)), ("bl", f, (3 * N + m_a,)),
        ("dinv", f, (nz,)), ("Rinv", f, (N, 4, 4)),                                     # least-distance QP
        ("tau_wbc", f, (n,)), ("tau", f, (n,)),                                          # results
        # leg kinematics (legged_wbc.model.LegBatch and the chain kernel's inputs and scratch)
        ("leg_p", f, (N, 3)), ("leg_a", f, (N, 3)), ("leg_acc", f, (N, 6)), ("leg_J", f, (N, 4, 4)),
        ("leg_theta", f, (N,)), ("leg_theta_dot", f, (N,)), ("leg_J_w", f, (N, 3, 4)), ("leg_dJ_p", f, (N, 3)),
        ("leg_dJ_theta", f, (N,)), ("leg_v_p", f, (N, 3)), ("leg_work", f, (LEG_CHAIN_WORK,)),
        ("chain_axes", f, (N, 4, 3)), ("chain_R_joint", f, (N, 4, 3, 3)), ("chain_p_joint", f, (N, 4, 3)),
        ("chain_R_foot", f, (N, 3, 3)), ("chain_p_foot", f, (N, 3)),
    ]
    scalars = [(k, f) for k in ("stand_up_start", "stand_up_duration", "stand_height", "gait_start",
                                "velocity_ramp_end", "forward_velocity", "gait_start_time", "gait_stop_time",
                                "gait_period", "swing_duration", "support_duration", "w_support", "w_swing",
                                "w_pitch", "k_dtheta", "theta_ddot_max", "kp_swing_pitch", "kd_swing_pitch",
                                "z_touchdown", "raibert_gain", "lift_height", "compensation_limit", "fz_max",
                                "w_body", "slack_weight", "hessian_reg", "kp_b", "kd_b", "th_lo", "th_hi", "mu")]
    scalars += [(k, b) for k in ("mode_none", "consistent", "recenter", "projection", "cbf_on")]
    scalars += [("n_slack", i)]
    return np.dtype([(k, t, sh) for k, t, sh in arrays] + scalars, align=True)


@njit(cache=True)
def model_stage(M_upper, h_in, q, v, legs, ws):
    """``M`` (symmetrized), ``h`` and the base rotation ``R`` into the workspace ``ws`` (one record),
    and with ``legs`` the leg kinematics from the chain constants (:func:`leg_chain_kinematics`)."""
    w = ws[0]
    if legs:
        leg_chain_kinematics(q[7:], v[6:], w.leg_j, w.chain_axes, w.chain_R_joint, w.chain_p_joint, w.chain_R_foot,
                             w.chain_p_foot, w.leg_p, w.leg_a, w.leg_acc, w.leg_J, w.leg_theta, w.leg_theta_dot,
                             w.leg_J_w, w.leg_dJ_p, w.leg_dJ_theta, w.leg_v_p, w.leg_work)
    symmetrize_mass(M_upper, h_in, w.M, w.h)
    rotation_from_quat(q, w.R)


@njit(cache=True)
def build_stage(t, q, v, support, tau_ext, compensate, P, v_p, J, theta, theta_dot, dJ_p, dJ_theta, p0, swing_cycle,
                sw_start, sw_target, sw_v_start, sw_v_end, sw_duration, planned, ldp, ws):
    """The cycle's QP: :func:`cycle_targets`, then (``ldp``) its least-distance form
    :func:`ldp_direct` into the workspace; returns whether that was formed."""
    w = ws[0]
    cycle_targets(t, q, v, support, tau_ext, compensate, P, v_p, J, theta, theta_dot, dJ_p, dJ_theta, w.M, w.R, p0,
                  w.gait_offset, w.gait_group, w.stance_p, w.theta_nom, w.gains, w.leg_j, w.leg_v,
                  (w.stand_up_start, w.stand_up_duration, w.stand_height, w.gait_start, w.velocity_ramp_end,
                   w.forward_velocity),
                  (w.gait_start_time, w.gait_stop_time, w.gait_period, w.swing_duration),
                  (w.w_support, w.w_swing, w.w_pitch, w.mode_none, w.consistent, w.k_dtheta, w.theta_ddot_max,
                   w.recenter, w.kp_swing_pitch, w.kd_swing_pitch),
                  (w.z_touchdown, w.raibert_gain, w.support_duration, w.swing_duration), (w.lift_height, w.projection),
                  w.compensation_limit, swing_cycle, sw_start, sw_target, sw_v_start, sw_v_end, sw_duration, planned,
                  w.ref_p, w.ref_v, w.ref_a, w.acc_body, w.e_rpy, w.phases, w.progress, w.cycles, w.W, w.b, w.tau_sw,
                  w.tau_comp, w.tau_sw_total, w.swing_work, w.nvec_work)
    if not ldp:
        return False
    return ldp_direct(w.M, w.h, J, P, w.W, w.b, w.acc_body, theta, theta_dot, dJ_theta, support, w.tau_sw_total,
                      w.lam_diag_f, w.tmin_f, w.tmax_f, w.leg_j, w.leg_v,
                      (w.w_body, w.n_slack, w.slack_weight, w.hessian_reg),
                      (w.cbf_on, w.kp_b, w.kd_b, w.th_lo, w.th_hi), w.mu, w.fz_max, w.c, w.A, w.bu, w.bl, w.dinv,
                      w.Rinv)


@njit(cache=True)
def ldp_solution_stage(y, x, J, P, support, cbf_act, ws):
    """The QP's solution ``x`` from the least-distance solution ``y`` (:func:`qp_from_ldp`) and its
    checks (:func:`check_direct`; torques into the workspace, binding CBF rows into ``cbf_act``)."""
    w = ws[0]
    qp_from_ldp(y, w.leg_v, w.dinv, w.Rinv, w.n_slack, x)
    return check_direct(x, w.M, w.h, J, P, w.leg_j, w.leg_v, support, w.tau_sw_total, w.tmin_f, w.tmax_f,
                        w.tau_tol_f, w.mu, w.fz_max, w.n_slack, w.bl, w.bu, w.cbf_on, w.tau_wbc, w.tau, cbf_act)


# ---------------------------------------------------------------------------- checks
@njit(cache=True)
def all_finite(x):
    for k in range(x.shape[0]):
        if not math.isfinite(x[k]):
            return False
    return True


@njit(cache=True)
def inputs_ok(q, v, tau_ext, t):
    """The controller's input checks on well-formed vectors: ``q``, ``v``, ``tau_ext`` and ``t``
    finite, the base quaternion ``q[3:7]`` unit within 2e-3 (as :meth:`WholeBodyController._check_input`)."""
    if not (all_finite(q) and all_finite(v) and all_finite(tau_ext) and math.isfinite(t)):
        return False
    x, y, z, w = q[3], q[4], q[5], q[6]
    return abs(x * x + y * y + z * z + w * w - 1.0) <= 2e-3


@njit(cache=True)
def residuals(A_eq, b_eq, C, l, u, x):
    """(normalized equality residual, normalized inequality violation) at ``x``, as
    :meth:`wbc_controller.qp.QpProblem.residuals` (loose rows ignored)."""
    n = x.shape[0]
    r_eq = 0.0
    for r in range(A_eq.shape[0]):
        s = 0.0
        for c in range(n):
            s += A_eq[r, c] * x[c]
        e = abs(s - b_eq[r]) / max(1.0, abs(b_eq[r]))
        if e > r_eq or e != e:
            r_eq = e
    viol = 0.0
    for r in range(C.shape[0]):
        s = 0.0
        for c in range(n):
            s += C[r, c] * x[c]
        if l[r] > -INF:
            e = (l[r] - s) / max(1.0, abs(l[r]))
            if e > viol or e != e:
                viol = e
        if u[r] < INF:
            e = (s - u[r]) / max(1.0, abs(u[r]))
            if e > viol or e != e:
                viol = e
    return r_eq, viol


@njit(cache=True)
def command_torque(M, h, J, leg_j, x, lam0, tau_sw_total, tmin, tmax, tau_tol, tau_wbc, tau):
    """``tau_wbc = S[M nu_dot + h - J_c^T lambda]`` and ``tau = tau_wbc + tau_sw_total`` at the
    solution ``x``; returns whether every ``tau`` is finite and within the bounds (+ tolerance)."""
    nv = M.shape[0]
    n = nv - 6
    for j in range(n):
        s = 0.0
        for c in range(nv):
            s += M[6 + j, c] * x[c]
        tau_wbc[j] = s + h[6 + j]
    N = J.shape[0]
    for i in range(N):
        c = lam0 + 4 * i
        for r in range(4):
            tau_wbc[leg_j[i, r]] -= (J[i, 0, r] * x[c] + J[i, 1, r] * x[c + 1] + J[i, 2, r] * x[c + 2]
                                     + J[i, 3, r] * x[c + 3])
    ok = True
    for j in range(n):
        tau[j] = tau_wbc[j] + tau_sw_total[j]
        if not (tau[j] >= tmin[j] - tau_tol[j] and tau[j] <= tmax[j] + tau_tol[j]):
            ok = False
    return ok


@njit(cache=True)
def cbf_active(support, C, l, u, x, row_cbf, active):
    """Per leg: a CBF bound is binding at ``x`` (within ``1e-6 max(1, |u|)``), support legs only."""
    n = x.shape[0]
    for i in range(support.shape[0]):
        row = row_cbf + i
        s = 0.0
        for c in range(n):
            s += C[row, c] * x[c]
        tol = 1e-6 * max(1.0, abs(u[row]))
        active[i] = support[i] and (s >= u[row] - tol or s <= l[row] + tol)


@njit(cache=True)
def start_swings(phases, cycles, swing_cycle, stance_p, z_touchdown, raibert_gain, support_duration, swing_duration,
                 R, ref_v, p, v_p, sw_start, sw_target, sw_v_start, sw_v_end, sw_duration, planned):
    """Plan the swings that begin this cycle (a leg out of nominal support in a gait cycle other
    than the one last planned, ``swing_cycle``): from the foot point ``p`` and velocity ``v_p``
    (base frame) to the nominal stance point at height ``z_touchdown`` [m], moved by the Raibert
    offset ``raibert_gain * v_body * support_duration`` (``v_body = R^T v_ref``), reached at ground
    speed ``-v_body`` after ``swing_duration`` [s]; as :meth:`SwingPlanner.begin` (vertical
    end velocities zero). Returns the number of swings started."""
    started = 0
    for i in range(phases.shape[0]):
        if phases[i] == SUPPORT or cycles[i] == swing_cycle[i]:
            continue
        swing_cycle[i] = cycles[i]
        for r in range(3):
            vb = R[0, r] * ref_v[0] + R[1, r] * ref_v[1] + R[2, r] * ref_v[2]
            sw_target[i, r] = stance_p[i, r]
            if r < 2:
                sw_target[i, r] += raibert_gain * vb * support_duration
            sw_start[i, r] = p[i, r]
            sw_v_start[i, r] = v_p[i, r]
            sw_v_end[i, r] = -vb
        sw_target[i, 2] = z_touchdown
        sw_v_start[i, 2] = 0.0
        sw_v_end[i, 2] = 0.0
        sw_duration[i] = swing_duration
        planned[i] = True
        started += 1
    return started


def warmup() -> None:
    """Compile (or load from the cache) the kernels the controller calls with plain arrays: the
    Pinocchio-pass leg kinematics, the stacked QP's blocks and checks (``set_config``, the path
    without the least-distance form, ``ctl.problem``), the input check. The kernels of the cycle's
    stages are compiled with the stages (:data:`STAGE_KERNELS`, for the controller's workspace by
    ``WholeBodyController._compile_stages``)."""
    N, n = 2, 8
    nv, nx, ne, ni = n + 6, n + 6 + 8, 6 + N, 5 * N + n + N
    f1 = lambda k: np.zeros(k)  # noqa: E731
    leg_cols = np.arange(8, dtype=np.int64).reshape(N, 4)
    leg_v = leg_cols + 6
    b1 = np.ones(N, dtype=np.bool_)
    M = np.eye(nv)
    q = np.zeros(n + 7)
    q[6] = 1.0
    J = np.zeros((N, 4, 4))
    P, A3, v_p, dJp = (np.zeros((N, 3)) for _ in range(4))
    A3[:, 0] = 1.0
    th, thd, dJt = f1(N), f1(N), f1(N)
    J_world = np.asfortranarray(np.ones((6, n)))  # Pinocchio's data.J: F order
    legs_from_frames(J_world, leg_cols, P, A3, np.zeros((N, 6)), f1(n), J, th, thd, np.zeros((N, 3, 4)), dJp, dJt, v_p)
    acc_body = f1(6)
    W, b = np.zeros((N, 4)), np.zeros((N, 4))
    H, g = np.zeros((nx, nx)), f1(nx)
    A_eq, b_eq, C, lo, up = np.zeros((ne, nx)), f1(ne), np.zeros((ni, nx)), f1(ni), f1(ni)
    friction_rows(N, nv, 0, 0.6, A_eq, C, lo, up)
    x = f1(nx)
    all_finite(x)
    p_cost, p_cbf = (1.0, 0, 1e6, 1e-9), (True, 1.0, 1.0, -0.3, 0.3)
    qp_blocks(b1, P, J, th, thd, dJt, M, f1(nv), W, b, acc_body, f1(n), f1(4 * N), f1(n) - 1.0, f1(n) + 1.0, leg_cols,
              leg_v, p_cost, p_cbf, 5000.0, (nv, 0, 5 * N, 5 * N + n), H, g, A_eq, b_eq, C, lo, up, f1(ne + ni))
    inputs_ok(q, f1(nv), f1(n), 1.0)
    check_solution(A_eq, b_eq, C, lo, up, x, M, f1(nv), J, leg_cols, nv, f1(n), f1(n), f1(n), f1(n), b1, 5 * N + n,
                   True, f1(n), f1(n), np.zeros(N, dtype=np.bool_))


KERNELS = (legs_from_frames, friction_rows, all_finite, qp_blocks, check_solution, inputs_ok)   # see warmup
STAGE_KERNELS = (model_stage, build_stage, ldp_solution_stage)   # compiled per workspace layout by the controller
