"""Leg kinematics, once: the body-relative quantities of every leg the controller, the estimator,
the disturbance and the checks use.

Frames and symbols as in :mod:`legged_wbc.model` (its docstring defines them): foot point ``p``,
``J_p``, foot-link x-axis ``a``, relative pitch ``theta = atan2(-a_z, sqrt(a_x^2 + a_y^2))``,
``J_theta = (a x g)^T J_w``, the drifts ``J_dot q_dot``; base frame [m, rad, s].

* :func:`relative_pitch`: ``theta``, ``a x g`` and the pitch drift from the foot-link axis and its
  angular velocity / acceleration; the one definition, compiled inside the kernels below and run
  as plain Python (``relative_pitch.py_func``) by Pinocchio's reference path
  (:meth:`legged_wbc.model.RobotModel.legs_batch`, ``leg_jacobians``).
* :func:`leg_chain_kinematics`: every leg quantity of serial 4-joint legs on the base, from the
  fixed-base model's constants (the controller's 500 Hz path); :func:`legs_from_frames`: the same
  outputs from one Pinocchio pass (legs that are not such chains); :class:`LegKinematicsWorkspace`
  runs one of them into preallocated arrays.
* :func:`tree_foot_kinematics` (with :func:`kinematic_tree`): foot points and ``J_p dq`` only, for
  any fixed-base tree of 1-DoF joints (the estimator's per-cycle need, a fraction of the cost).

The numpy reference of all of them is Pinocchio's frame quantities (``legs_batch``); the tests
compare them (``test/test_fast_controller.py``, ``test/test_fast_estimator.py``). Compiled with
numba (``cache=True``; a process that has to compile says so once, :mod:`legged_wbc.jit`).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np
import pinocchio as pin
from numba import njit

from legged_wbc.jit import announce_compiles

announce_compiles(__name__)          # one line on stderr if this process has to compile a kernel

R2_EPS = 1e-10          # foot-link x-axis along base z: theta's Jacobian row is zeroed
MAX_LEG_JOINTS = 4      # joints per leg the kernels take: 3 (a point-foot leg) or 4 (the paper's, with foot pitch)
LEG_CHAIN_WORK = 27 + 12 * MAX_LEG_JOINTS   # scratch size (floats) of leg_chain_kinematics


class LegBatch(NamedTuple):
    """Body-relative kinematics of all legs, stacked (leg index first); fields as in
    :class:`legged_wbc.model.LegState`. A named tuple: the compiled kernels take it as it is."""

    p: np.ndarray            # (N, 3)
    J: np.ndarray            # (N, 4, k): rows [J_p; J_theta], k joints per leg (J_theta = 0 without foot pitch)
    a: np.ndarray            # (N, 3)
    theta: np.ndarray        # (N,)
    theta_dot: np.ndarray    # (N,)
    J_w: np.ndarray          # (N, 3, k)
    dJ_p_dq: np.ndarray      # (N, 3)
    dJ_theta_dq: np.ndarray  # (N,)
    v_p: np.ndarray          # (N, 3)


@njit(cache=True)
def relative_pitch(ax, ay, az, wx, wy, wz, awx, awy, awz):
    """Relative pitch of a foot link with x-axis ``a`` (base frame), angular velocity ``w`` and
    classical angular acceleration ``aw`` (base frame, at zero joint acceleration): returns
    ``(theta, ok, c_x, c_y, c_z, drift)`` with ``theta = atan2(-a_z, r)``, ``r = |a_xy|``; ``ok``
    False (and zeros) when ``r^2 <= R2_EPS`` (theta's Jacobian row is zeroed there); ``c = a x g``
    with ``g = d theta / d a = [a_z a_x / r, a_z a_y / r, -r]`` (so ``J_theta = c^T J_w``); the
    drift ``J_theta_dot q_dot = g.a_ddot + (dg/dt).a_dot`` (``a_dot = w x a``, ``a_ddot = aw x a +
    w x a_dot``)."""
    r = math.sqrt(ax * ax + ay * ay)
    theta = math.atan2(-az, r)
    if r * r <= R2_EPS:
        return theta, False, 0.0, 0.0, 0.0, 0.0
    gx, gy, gz = az * ax / r, az * ay / r, -r                      # g = d theta / d a
    cx, cy, cz = ay * gz - az * gy, az * gx - ax * gz, ax * gy - ay * gx   # a x g
    adx, ady, adz = wy * az - wz * ay, wz * ax - wx * az, wx * ay - wy * ax
    r_dot = (ax * adx + ay * ady) / r
    gdx = (adz * ax + az * adx) / r - az * ax * r_dot / (r * r)
    gdy = (adz * ay + az * ady) / r - az * ay * r_dot / (r * r)
    gdz = -r_dot
    wadx, wady, wadz = wy * adz - wz * ady, wz * adx - wx * adz, wx * ady - wy * adx
    drift = (cx * awx + cy * awy + cz * awz + gx * wadx + gy * wady + gz * wadz
             + gdx * adx + gdy * ady + gdz * adz)
    return theta, True, cx, cy, cz, drift


@functools.lru_cache(maxsize=None)
def legs_dtype(N: int, k: int = 4) -> np.dtype:
    """The leg kinematics of ``N`` legs of ``k`` joints (3 or 4) as one record (what the kernels below
    read and write, by field name): ``leg_j`` (N, k) joint indices, ``leg_no_pitch`` (N,) 1 for a
    point-foot leg without the foot pitch joint (its pitch row, ``theta``, ``theta_dot`` and drift
    are 0), 0 for a leg with it (the default of a zeroed record), the chain constants ``chain_*``
    (:func:`leg_chain_kinematics`), the outputs ``leg_*`` of :class:`LegBatch` (``leg_p`` = ``p``,
    ``leg_J`` = ``J``, ``leg_a``, ``leg_acc`` the classical foot accelerations ``[linear;
    angular]``, ``leg_theta``, ``leg_theta_dot``, ``leg_J_w``, ``leg_dJ_p``, ``leg_dJ_theta``,
    ``leg_v_p``) and ``leg_work`` (scratch). The controller's workspace has the same fields."""
    f = np.float64
    return np.dtype([("leg_j", np.int64, (N, k)), ("leg_no_pitch", np.int64, (N,)), ("chain_axes", f, (N, k, 3)),
                     ("chain_R_joint", f, (N, k, 3, 3)),
                     ("chain_p_joint", f, (N, k, 3)), ("chain_R_foot", f, (N, 3, 3)), ("chain_p_foot", f, (N, 3)),
                     ("leg_p", f, (N, 3)), ("leg_a", f, (N, 3)), ("leg_acc", f, (N, 6)), ("leg_J", f, (N, 4, k)),
                     ("leg_theta", f, (N,)), ("leg_theta_dot", f, (N,)), ("leg_J_w", f, (N, 3, k)),
                     ("leg_dJ_p", f, (N, 3)), ("leg_dJ_theta", f, (N,)), ("leg_v_p", f, (N, 3)),
                     ("leg_work", f, (LEG_CHAIN_WORK,))], align=True)


def record_legs(rec) -> LegBatch:
    """The outputs of a leg record (:func:`legs_dtype` fields; a 1-element record array) as a
    :class:`LegBatch` of views."""
    return LegBatch(p=rec["leg_p"][0], J=rec["leg_J"][0], a=rec["leg_a"][0], theta=rec["leg_theta"][0],
                    theta_dot=rec["leg_theta_dot"][0], J_w=rec["leg_J_w"][0], dJ_p_dq=rec["leg_dJ_p"][0],
                    dJ_theta_dq=rec["leg_dJ_theta"][0], v_p=rec["leg_v_p"][0])


@njit(cache=True)
def legs_from_frames(J_world, dqj, legs):
    """Leg kinematics of all legs from one Pinocchio pass on the fixed-base model, into the leg
    record ``legs[0]`` (:func:`legs_dtype`).

    Inputs: ``J_world`` (6, n) joint Jacobian of the fixed model (``data.J``: spatial velocity at
    the base origin, base axes; ``[linear; angular]``), ``dqj`` (n); the record's ``leg_j`` (N, k)
    joint indices, ``leg_p`` (N, 3) foot points, ``leg_a`` (N, 3) foot-link x-axes, ``leg_acc`` (N,
    6) classical foot-point accelerations at zero joint acceleration (all base frame, filled by
    the caller). Outputs: the record's :class:`LegBatch` fields. ``J_p`` is the local-world-aligned
    frame Jacobian ``v - p x w`` of each joint column."""
    w = legs[0]
    leg_cols, P, acc, J, J_w, dJ_p = w.leg_j, w.leg_p, w.leg_acc, w.leg_J, w.leg_J_w, w.leg_dJ_p
    N, K = leg_cols.shape[0], leg_cols.shape[1]
    for i in range(N):
        px, py, pz = P[i, 0], P[i, 1], P[i, 2]
        for k in range(K):
            c = leg_cols[i, k]
            wx, wy, wz = J_world[3, c], J_world[4, c], J_world[5, c]
            J[i, 0, k] = J_world[0, c] - (py * wz - pz * wy)
            J[i, 1, k] = J_world[1, c] - (pz * wx - px * wz)
            J[i, 2, k] = J_world[2, c] - (px * wy - py * wx)
            J_w[i, 0, k] = wx
            J_w[i, 1, k] = wy
            J_w[i, 2, k] = wz
        for r in range(3):
            dJ_p[i, r] = acc[i, r]
        foot_velocity_and_pitch(i, dqj, w)


@njit(cache=True)
def foot_velocity_and_pitch(i, dqj, w):
    """Leg ``i`` of the leg record ``w`` from its ``J_p`` (rows 0-2 of ``leg_J``), ``leg_J_w``,
    foot-link x-axis ``leg_a[i]`` and the foot's classical angular acceleration ``leg_acc[i, 3:]``:
    ``v_p = J_p dq``, relative pitch ``theta = atan2(-a_z, r)``, ``J_theta = (a x g)^T J_w`` (row 3
    of ``J``; zero when ``r^2 <= R2_EPS``), ``theta_dot`` and the drift ``dJ_theta = g.a_ddot +
    (dg/dt).a_dot`` (:func:`relative_pitch`). A leg without the foot pitch joint (``leg_no_pitch[i]``
    1) has no relative pitch: its row 3, ``theta``, ``theta_dot`` and drift are 0."""
    leg_cols, A, acc, J, J_w, v_p = w.leg_j, w.leg_a, w.leg_acc, w.leg_J, w.leg_J_w, w.leg_v_p
    K = leg_cols.shape[1]
    c0 = leg_cols[i, 0]
    for r in range(3):          # summed joint by joint from the first (the order of the 4-joint expression)
        s = J[i, r, 0] * dqj[c0]
        for k in range(1, K):
            s += J[i, r, k] * dqj[leg_cols[i, k]]
        v_p[i, r] = s
    if w.leg_no_pitch[i] != 0:
        for k in range(K):
            J[i, 3, k] = 0.0
        w.leg_theta[i] = 0.0
        w.leg_theta_dot[i] = 0.0
        w.leg_dJ_theta[i] = 0.0
        return
    wx = J_w[i, 0, 0] * dqj[c0]
    wy = J_w[i, 1, 0] * dqj[c0]
    wz = J_w[i, 2, 0] * dqj[c0]
    for k in range(1, K):
        dq = dqj[leg_cols[i, k]]
        wx += J_w[i, 0, k] * dq
        wy += J_w[i, 1, k] * dq
        wz += J_w[i, 2, k] * dq
    th, ok, cx, cy, cz, dJt = relative_pitch(A[i, 0], A[i, 1], A[i, 2], wx, wy, wz, acc[i, 3], acc[i, 4], acc[i, 5])
    w.leg_theta[i] = th
    if not ok:
        for k in range(K):
            J[i, 3, k] = 0.0
        w.leg_theta_dot[i] = 0.0
        w.leg_dJ_theta[i] = 0.0
        return
    for k in range(K):
        J[i, 3, k] = cx * J_w[i, 0, k] + cy * J_w[i, 1, k] + cz * J_w[i, 2, k]
    td = J[i, 3, 0] * dqj[c0]
    for k in range(1, K):
        td += J[i, 3, k] * dqj[leg_cols[i, k]]
    w.leg_theta_dot[i] = td
    w.leg_dJ_theta[i] = dJt


@njit(cache=True)
def leg_chain_kinematics(qj, dqj, legs):
    """:func:`chain_legs` on the leg record ``legs[0]`` (the entry from Python)."""
    chain_legs(qj, dqj, legs[0])


@njit(cache=True)
def chain_legs(qj, dqj, w):
    """Leg kinematics of serial 3- or 4-joint legs mounted on the base, without Pinocchio, into the leg
    record ``w`` (:func:`legs_dtype`; the controller's workspace record has the same fields): the
    outputs of :func:`legs_from_frames` plus ``leg_p``, ``leg_a``, ``leg_acc``, from the fixed-base
    model's constants: per leg and joint ``k`` the unit axis ``chain_axes[i, k]`` (joint frame), the
    joint placement in its parent ``(chain_R_joint, chain_p_joint)[i, k]``, and the foot-point
    frame in the last joint's frame ``(chain_R_foot, chain_p_foot)[i]`` (base frame = the fixed
    model's world).

    Joint ``k``: origin ``p_k``, world axis ``z_k``, angular velocity of its parent link ``w_{k-1}``,
    origin velocity ``v_k``. ``J_p`` column ``z_k x (P - p_k)``, ``J_w`` column ``z_k``; classical
    accelerations at zero joint acceleration: ``a_P = sum_k dq_k [(w_{k-1} x z_k) x (P - p_k) +
    z_k x (v_P - v_k)]``, ``alpha = sum_k dq_k w_{k-1} x z_k``. ``leg_work``: scratch of
    ``LEG_CHAIN_WORK`` floats (no allocation in the kernel)."""
    for i in range(w.leg_j.shape[0]):
        px, py, pz, vx, vy, vz, wx, wy, wz = _chain_walk(i, qj, dqj, w)
        _chain_foot(i, dqj, w, px, py, pz, vx, vy, vz, wx, wy, wz)
        foot_velocity_and_pitch(i, dqj, w)


@njit(cache=True)
def _chain_walk(i, qj, dqj, w):
    """Leg ``i``'s joints from the base out: per joint its origin ``o``, origin velocity ``vo``,
    world axis ``z`` and parent angular velocity ``wp`` into the scratch; returns the last joint's
    origin, its velocity and the last link's angular velocity (its rotation is left in the
    scratch's ``R``)."""
    leg_cols, axes, R_joint, p_joint, work = w.leg_j, w.chain_axes, w.chain_R_joint, w.chain_p_joint, w.leg_work
    K = leg_cols.shape[1]
    R = work[0:9].reshape(3, 3)
    Rk = work[9:18].reshape(3, 3)
    Rq = work[18:27].reshape(3, 3)
    z = work[27:27 + 3 * K].reshape(K, 3)
    o = work[27 + 3 * K:27 + 6 * K].reshape(K, 3)
    vo = work[27 + 6 * K:27 + 9 * K].reshape(K, 3)
    wp = work[27 + 9 * K:27 + 12 * K].reshape(K, 3)
    for r in range(3):
        for c in range(3):
            R[r, c] = 1.0 if r == c else 0.0
    px, py, pz = 0.0, 0.0, 0.0          # parent origin, world
    vx, vy, vz = 0.0, 0.0, 0.0          # parent origin velocity
    wx, wy, wz = 0.0, 0.0, 0.0          # parent link angular velocity
    for k in range(K):
        # origin of joint k and its velocity (rigid parent link)
        ox = px + R[0, 0] * p_joint[i, k, 0] + R[0, 1] * p_joint[i, k, 1] + R[0, 2] * p_joint[i, k, 2]
        oy = py + R[1, 0] * p_joint[i, k, 0] + R[1, 1] * p_joint[i, k, 1] + R[1, 2] * p_joint[i, k, 2]
        oz = pz + R[2, 0] * p_joint[i, k, 0] + R[2, 1] * p_joint[i, k, 1] + R[2, 2] * p_joint[i, k, 2]
        dx, dy, dz = ox - px, oy - py, oz - pz
        vx, vy, vz = vx + (wy * dz - wz * dy), vy + (wz * dx - wx * dz), vz + (wx * dy - wy * dx)
        for r in range(3):
            for c in range(3):
                Rk[r, c] = R[r, 0] * R_joint[i, k, 0, c] + R[r, 1] * R_joint[i, k, 1, c] + R[r, 2] * R_joint[i, k, 2, c]
        ux, uy, uz = axes[i, k, 0], axes[i, k, 1], axes[i, k, 2]
        zx = Rk[0, 0] * ux + Rk[0, 1] * uy + Rk[0, 2] * uz
        zy = Rk[1, 0] * ux + Rk[1, 1] * uy + Rk[1, 2] * uz
        zz = Rk[2, 0] * ux + Rk[2, 1] * uy + Rk[2, 2] * uz
        z[k, 0], z[k, 1], z[k, 2] = zx, zy, zz
        o[k, 0], o[k, 1], o[k, 2] = ox, oy, oz
        vo[k, 0], vo[k, 1], vo[k, 2] = vx, vy, vz
        wp[k, 0], wp[k, 1], wp[k, 2] = wx, wy, wz
        # rotation about the joint axis (Rodrigues), then the child link's angular velocity
        qk, dqk = qj[leg_cols[i, k]], dqj[leg_cols[i, k]]
        sn, cs = math.sin(qk), math.cos(qk)
        t = 1.0 - cs
        Rq[0, 0], Rq[0, 1], Rq[0, 2] = cs + t * ux * ux, t * ux * uy - sn * uz, t * ux * uz + sn * uy
        Rq[1, 0], Rq[1, 1], Rq[1, 2] = t * ux * uy + sn * uz, cs + t * uy * uy, t * uy * uz - sn * ux
        Rq[2, 0], Rq[2, 1], Rq[2, 2] = t * ux * uz - sn * uy, t * uy * uz + sn * ux, cs + t * uz * uz
        for r in range(3):
            for c in range(3):
                R[r, c] = Rk[r, 0] * Rq[0, c] + Rk[r, 1] * Rq[1, c] + Rk[r, 2] * Rq[2, c]
        px, py, pz = ox, oy, oz
        wx, wy, wz = wx + zx * dqk, wy + zy * dqk, wz + zz * dqk
    return px, py, pz, vx, vy, vz, wx, wy, wz


@njit(cache=True)
def _chain_foot(i, dqj, w, px, py, pz, vx, vy, vz, wx, wy, wz):
    """Leg ``i``'s foot point ``P``, foot-link x-axis ``A``, ``J_p``, ``J_w`` and the classical
    accelerations at zero joint acceleration, from :func:`_chain_walk`'s joints."""
    leg_cols, R_foot, p_foot, work = w.leg_j, w.chain_R_foot, w.chain_p_foot, w.leg_work
    P, A, acc, J, J_w, dJ_p = w.leg_p, w.leg_a, w.leg_acc, w.leg_J, w.leg_J_w, w.leg_dJ_p
    K = leg_cols.shape[1]
    R = work[0:9].reshape(3, 3)
    z = work[27:27 + 3 * K].reshape(K, 3)
    o = work[27 + 3 * K:27 + 6 * K].reshape(K, 3)
    vo = work[27 + 6 * K:27 + 9 * K].reshape(K, 3)
    wp = work[27 + 9 * K:27 + 12 * K].reshape(K, 3)
    # foot point and foot-link x-axis
    fx, fy, fz = p_foot[i, 0], p_foot[i, 1], p_foot[i, 2]
    Px = px + R[0, 0] * fx + R[0, 1] * fy + R[0, 2] * fz
    Py = py + R[1, 0] * fx + R[1, 1] * fy + R[1, 2] * fz
    Pz = pz + R[2, 0] * fx + R[2, 1] * fy + R[2, 2] * fz
    P[i, 0], P[i, 1], P[i, 2] = Px, Py, Pz
    for r in range(3):
        A[i, r] = R[r, 0] * R_foot[i, 0, 0] + R[r, 1] * R_foot[i, 1, 0] + R[r, 2] * R_foot[i, 2, 0]
    dx, dy, dz = Px - px, Py - py, Pz - pz
    vPx, vPy, vPz = vx + (wy * dz - wz * dy), vy + (wz * dx - wx * dz), vz + (wx * dy - wy * dx)
    ax_, ay_, az_, bx_, by_, bz_ = 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    for k in range(K):
        zx, zy, zz = z[k, 0], z[k, 1], z[k, 2]
        rx, ry, rz = Px - o[k, 0], Py - o[k, 1], Pz - o[k, 2]
        J[i, 0, k] = zy * rz - zz * ry
        J[i, 1, k] = zz * rx - zx * rz
        J[i, 2, k] = zx * ry - zy * rx
        J_w[i, 0, k], J_w[i, 1, k], J_w[i, 2, k] = zx, zy, zz
        dqk = dqj[leg_cols[i, k]]
        # d z_k / dt = w_{k-1} x z_k
        gx = wp[k, 1] * zz - wp[k, 2] * zy
        gy = wp[k, 2] * zx - wp[k, 0] * zz
        gz = wp[k, 0] * zy - wp[k, 1] * zx
        ex, ey, ez = vPx - vo[k, 0], vPy - vo[k, 1], vPz - vo[k, 2]
        ax_ += dqk * ((gy * rz - gz * ry) + (zy * ez - zz * ey))
        ay_ += dqk * ((gz * rx - gx * rz) + (zz * ex - zx * ez))
        az_ += dqk * ((gx * ry - gy * rx) + (zx * ey - zy * ex))
        bx_ += dqk * gx
        by_ += dqk * gy
        bz_ += dqk * gz
    acc[i, 0], acc[i, 1], acc[i, 2], acc[i, 3], acc[i, 4], acc[i, 5] = ax_, ay_, az_, bx_, by_, bz_
    for r in range(3):
        dJ_p[i, r] = acc[i, r]


# joint types of the fixed-base kinematic tree (:func:`kinematic_tree` maps Pinocchio's joint models)
REV_X, REV_Y, REV_Z, REV_AXIS, PRI_AXIS = 0, 1, 2, 3, 4


@njit(cache=True, error_model="numpy")
def tree_foot_kinematics(qj, dqj, tree):
    """Foot points and their velocities relative to the base from the joint positions ``qj``
    [rad or m] and velocities ``dqj``, for a fixed-base tree of 1-DoF joints (what
    ``pin.forwardKinematics`` + ``updateFramePlacement`` + ``getFrameVelocity(LOCAL_WORLD_ALIGNED)``
    give on ``RobotModel.fixed``; the tree comes from :func:`kinematic_tree`).

    Joint ``j`` (1..nj-1; 0 is the base): ``parent[j]``, placement in its parent ``(j_rot[j],
    j_pos[j])``, type ``j_type[j]`` (``REV_X/Y/Z``, ``REV_AXIS``, ``PRI_AXIS``) with unit axis
    ``j_axis[j]`` in the joint frame, coordinate ``j_idx[j]`` in ``qj``. Foot ``i`` is the point
    ``foot_p[i]`` of joint ``foot_joint[i]``'s frame. ``o_rot`` ``(nj, 3, 3)``, ``o_pos`` ``(nj, 3)``:
    scratch (joint placements in the base frame). Writes ``p_foot`` [m] and ``v_rel = J_p dq``
    [m/s], ``(L, 3)``, base frame. All of these are fields of the tree record ``tree[0]``
    (:func:`kinematic_tree`); the steps (:func:`_joint_motion`, :func:`_place_joint`,
    :func:`_foot_velocity`) are inlined into this kernel."""
    tr = tree[0]
    parent, j_idx, o_rot, o_pos = tr.parent, tr.j_idx, tr.o_rot, tr.o_pos
    foot_joint, foot_p, p_foot, v_rel = tr.foot_joint, tr.foot_p, tr.p_foot, tr.v_rel

    nj = parent.shape[0]
    for a in range(3):
        o_pos[0, a] = 0.0
        for b in range(3):
            o_rot[0, a, b] = 1.0 if a == b else 0.0
    for j in range(1, nj):
        rq, tq = _joint_motion(tr.j_type[j], qj[j_idx[j]], tr.j_axis, j)
        _place_joint(j, parent[j], rq, tq, tr.j_rot, tr.j_pos, o_rot, o_pos)
    for i in range(foot_joint.shape[0]):
        j = foot_joint[i]
        fx, fy, fz = foot_p[i, 0], foot_p[i, 1], foot_p[i, 2]
        px = o_pos[j, 0] + o_rot[j, 0, 0] * fx + o_rot[j, 0, 1] * fy + o_rot[j, 0, 2] * fz
        py = o_pos[j, 1] + o_rot[j, 1, 0] * fx + o_rot[j, 1, 1] * fy + o_rot[j, 1, 2] * fz
        pz = o_pos[j, 2] + o_rot[j, 2, 0] * fx + o_rot[j, 2, 1] * fy + o_rot[j, 2, 2] * fz
        p_foot[i, 0], p_foot[i, 1], p_foot[i, 2] = px, py, pz
        v_rel[i, 0], v_rel[i, 1], v_rel[i, 2] = _foot_velocity(j, px, py, pz, tr, dqj)


@njit(cache=True, error_model="numpy", inline="always")
def _joint_motion(t, q, j_axis, j):
    """The motion of joint ``j`` of type ``t`` at coordinate ``q`` in its own frame: ``(R_q, p_q)`` as a
    row-major 9-tuple and a 3-tuple."""
    rq00, rq01, rq02, rq10, rq11, rq12, rq20, rq21, rq22 = 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0
    tq0, tq1, tq2 = 0.0, 0.0, 0.0
    if t == PRI_AXIS:
        tq0, tq1, tq2 = j_axis[j, 0] * q, j_axis[j, 1] * q, j_axis[j, 2] * q
    else:
        c, s = math.cos(q), math.sin(q)
        if t == REV_X:
            rq11, rq12, rq21, rq22 = c, -s, s, c
        elif t == REV_Y:
            rq00, rq02, rq20, rq22 = c, s, -s, c
        elif t == REV_Z:
            rq00, rq01, rq10, rq11 = c, -s, s, c
        else:                                   # R = c I + s [a]x + (1 - c) a a^T
            ux, uy, uz = j_axis[j, 0], j_axis[j, 1], j_axis[j, 2]
            cc = 1.0 - c
            rq00, rq01, rq02 = c + cc * ux * ux, cc * ux * uy - s * uz, cc * ux * uz + s * uy
            rq10, rq11, rq12 = cc * ux * uy + s * uz, c + cc * uy * uy, cc * uy * uz - s * ux
            rq20, rq21, rq22 = cc * ux * uz - s * uy, cc * uy * uz + s * ux, c + cc * uz * uz
    return (rq00, rq01, rq02, rq10, rq11, rq12, rq20, rq21, rq22), (tq0, tq1, tq2)


@njit(cache=True, error_model="numpy", inline="always")
def _place_joint(j, pa, rq, tq, j_rot, j_pos, o_rot, o_pos):
    """Joint ``j``'s placement in the base frame ``(o_rot[j], o_pos[j])`` from its parent ``pa``'s, its
    placement in the parent ``(j_rot[j], j_pos[j])`` and its motion ``(rq, tq)``."""
    rq00, rq01, rq02, rq10, rq11, rq12, rq20, rq21, rq22 = rq
    tq0, tq1, tq2 = tq
    # placement in the parent: (j_rot R_q, j_pos + j_rot p_q); then in the base frame
    for a in range(3):
        l0 = j_rot[j, a, 0] * rq00 + j_rot[j, a, 1] * rq10 + j_rot[j, a, 2] * rq20
        l1 = j_rot[j, a, 0] * rq01 + j_rot[j, a, 1] * rq11 + j_rot[j, a, 2] * rq21
        l2 = j_rot[j, a, 0] * rq02 + j_rot[j, a, 1] * rq12 + j_rot[j, a, 2] * rq22
        o_pos[j, a] = j_pos[j, a] + j_rot[j, a, 0] * tq0 + j_rot[j, a, 1] * tq1 + j_rot[j, a, 2] * tq2
        o_rot[j, a, 0], o_rot[j, a, 1], o_rot[j, a, 2] = l0, l1, l2     # liMi for now
    # base frame: p = o_pos[pa] + o_rot[pa] p_l, R = o_rot[pa] R_l
    p0 = o_pos[pa, 0] + o_rot[pa, 0, 0] * o_pos[j, 0] + o_rot[pa, 0, 1] * o_pos[j, 1] + o_rot[pa, 0, 2] * o_pos[j, 2]
    p1 = o_pos[pa, 1] + o_rot[pa, 1, 0] * o_pos[j, 0] + o_rot[pa, 1, 1] * o_pos[j, 1] + o_rot[pa, 1, 2] * o_pos[j, 2]
    p2 = o_pos[pa, 2] + o_rot[pa, 2, 0] * o_pos[j, 0] + o_rot[pa, 2, 1] * o_pos[j, 1] + o_rot[pa, 2, 2] * o_pos[j, 2]
    o_pos[j, 0], o_pos[j, 1], o_pos[j, 2] = p0, p1, p2
    for b in range(3):
        l0, l1, l2 = o_rot[j, 0, b], o_rot[j, 1, b], o_rot[j, 2, b]
        for a in range(3):
            o_rot[j, a, b] = o_rot[pa, a, 0] * l0 + o_rot[pa, a, 1] * l1 + o_rot[pa, a, 2] * l2


@njit(cache=True, error_model="numpy", inline="always")
def _foot_velocity(j, px, py, pz, tr, dqj):
    """``J_p dq`` of the foot point ``(px, py, pz)`` (base frame) carried by joint ``j``: the sum over the
    joints between the foot and the base."""
    parent, j_type, j_axis, j_idx, o_rot, o_pos = tr.parent, tr.j_type, tr.j_axis, tr.j_idx, tr.o_rot, tr.o_pos
    vx = vy = vz = 0.0
    while j > 0:
        ux, uy, uz = j_axis[j, 0], j_axis[j, 1], j_axis[j, 2]
        ax = o_rot[j, 0, 0] * ux + o_rot[j, 0, 1] * uy + o_rot[j, 0, 2] * uz
        ay = o_rot[j, 1, 0] * ux + o_rot[j, 1, 1] * uy + o_rot[j, 1, 2] * uz
        az = o_rot[j, 2, 0] * ux + o_rot[j, 2, 1] * uy + o_rot[j, 2, 2] * uz
        dq = dqj[j_idx[j]]
        if j_type[j] == PRI_AXIS:
            vx += ax * dq
            vy += ay * dq
            vz += az * dq
        else:                                   # (axis x (p_foot - p_joint)) dq
            rx, ry, rz = px - o_pos[j, 0], py - o_pos[j, 1], pz - o_pos[j, 2]
            vx += (ay * rz - az * ry) * dq
            vy += (az * rx - ax * rz) * dq
            vz += (ax * ry - ay * rx) * dq
        j = parent[j]
    return vx, vy, vz


def kinematic_tree(model, foot_frames) -> np.ndarray | None:
    """The tree record :func:`tree_foot_kinematics` takes (:func:`tree_dtype`, one element), from a
    fixed-base Pinocchio ``model`` and its foot point frames. ``None`` if a joint is not a 1-DoF
    revolute / prismatic joint (then use Pinocchio)."""
    nj = model.njoints
    parent = np.zeros(nj, dtype=np.int64)
    j_rot = np.zeros((nj, 3, 3))
    j_rot[0] = np.eye(3)
    j_pos = np.zeros((nj, 3))
    j_type = np.zeros(nj, dtype=np.int64)
    j_axis = np.zeros((nj, 3))
    j_idx = np.zeros(nj, dtype=np.int64)
    for j in range(1, nj):
        jm = model.joints[j]
        name = jm.shortname()
        if jm.nq != 1 or jm.nv != 1 or jm.idx_q != jm.idx_v:
            return None
        if name in ("JointModelRX", "JointModelRY", "JointModelRZ"):
            a = "XYZ".index(name[-1])
            j_type[j] = (REV_X, REV_Y, REV_Z)[a]
            j_axis[j, a] = 1.0
        elif name == "JointModelRevoluteUnaligned":
            j_type[j] = REV_AXIS
            j_axis[j] = np.asarray(jm.extract().axis, dtype=float)
        elif name in ("JointModelPX", "JointModelPY", "JointModelPZ"):
            j_type[j] = PRI_AXIS
            j_axis[j, "XYZ".index(name[-1])] = 1.0
        elif name == "JointModelPrismaticUnaligned":
            j_type[j] = PRI_AXIS
            j_axis[j] = np.asarray(jm.extract().axis, dtype=float)
        else:
            return None
        parent[j] = model.parents[j]
        j_rot[j] = model.jointPlacements[j].rotation
        j_pos[j] = model.jointPlacements[j].translation
        j_idx[j] = jm.idx_q
    L = len(foot_frames)
    tree = np.zeros(1, dtype=tree_dtype(nj, L))
    for k, val in (("parent", parent), ("j_rot", j_rot), ("j_pos", j_pos), ("j_type", j_type), ("j_axis", j_axis),
                   ("j_idx", j_idx), ("foot_joint", [model.frames[f].parentJoint for f in foot_frames]),
                   ("foot_p", [model.frames[f].placement.translation for f in foot_frames])):
        tree[k] = val
    return tree


@functools.lru_cache(maxsize=None)
def tree_dtype(nj: int, L: int) -> np.dtype:
    """The record :func:`tree_foot_kinematics` works on, for ``nj`` joints (the base included) and
    ``L`` feet: the tree (``parent``, ``j_rot``, ``j_pos``, ``j_type``, ``j_axis``, ``j_idx``,
    ``foot_joint``, ``foot_p``), scratch (``o_rot``, ``o_pos``) and the outputs (``p_foot``,
    ``v_rel``). One dtype object per size (numba's dispatch is fast for the dtype it compiled for)."""
    f, i = np.float64, np.int64
    return np.dtype([("parent", i, (nj,)), ("j_rot", f, (nj, 3, 3)), ("j_pos", f, (nj, 3)), ("j_type", i, (nj,)),
                     ("j_axis", f, (nj, 3)), ("j_idx", i, (nj,)), ("foot_joint", i, (L,)), ("foot_p", f, (L, 3)),
                     ("o_rot", f, (nj, 3, 3)), ("o_pos", f, (nj, 3)), ("p_foot", f, (L, 3)), ("v_rel", f, (L, 3))],
                    align=True)


class LegKinematicsWorkspace:
    """:meth:`legged_wbc.model.RobotModel.legs_batch` into preallocated arrays, compiled (the 500 Hz path).

    Legs that are serial chains of revolute joints mounted on the base (our robots) are computed by
    one kernel from the fixed-base model's constants (joint placements, axes, foot frames):
    :func:`leg_chain_kinematics`. Otherwise one Pinocchio pass on the
    workspace's own fixed-base data (``forwardKinematics`` with ``q, q_dot, 0``,
    ``computeJointJacobians``, ``updateFramePlacements``; foot placements and classical
    accelerations read per leg) feeds :func:`legs_from_frames`.
    ``batch`` is a :class:`LegBatch` over the workspace arrays (overwritten by every :meth:`update`;
    base frame, [m, rad, s])."""

    def __init__(self, rm, use_chain: bool = True):
        N, n = rm.n_legs, rm.n
        self.rm = rm
        self.model = rm.fixed
        self.data = rm.fixed.createData()
        self.frames = list(rm.foot_frames_fixed)
        self.leg_cols = np.ascontiguousarray(np.array(rm.leg_joints, dtype=np.int64))
        self._zeros_n = np.zeros(n)
        self._lwa = pin.LOCAL_WORLD_ALIGNED
        self._get_acc = pin.getFrameClassicalAcceleration
        self.chain = self._chain_constants() if use_chain else None
        rec = np.zeros(1, dtype=legs_dtype(N, self.leg_cols.shape[1]))
        rec["leg_j"] = self.leg_cols
        rec["leg_no_pitch"] = np.asarray(~rm.leg_has_pitch, dtype=np.int64)
        if self.chain is not None:
            for name, val in zip(("axes", "R_joint", "p_joint", "R_foot", "p_foot"), self.chain):
                rec["chain_" + name] = val
        self.bind(rec)

    _AXES = {"JointModelRX": (1.0, 0.0, 0.0), "JointModelRY": (0.0, 1.0, 0.0), "JointModelRZ": (0.0, 0.0, 1.0)}

    def _chain_constants(self):
        """``(axes, R_joint, p_joint, R_foot, p_foot)`` of serial 4-joint legs on the base, or None
        if a leg is not such a chain (then the Pinocchio pass is used)."""
        m, N = self.model, self.leg_cols.shape[0]
        k_joints = self.leg_cols.shape[1]
        axes, Rj, pj = np.zeros((N, k_joints, 3)), np.zeros((N, k_joints, 3, 3)), np.zeros((N, k_joints, 3))
        Rf, pf = np.zeros((N, 3, 3)), np.zeros((N, 3))
        for i in range(N):
            parent = 0
            for k in range(k_joints):
                jid = int(self.leg_cols[i, k]) + 1          # fixed model: joint of q[j] is joint id j + 1
                jm = m.joints[jid]
                if m.parents[jid] != parent or jm.idx_q != jid - 1:
                    return None
                name = jm.shortname()
                if name in self._AXES:
                    axes[i, k] = self._AXES[name]
                elif name == "JointModelRevoluteUnaligned":
                    axes[i, k] = np.asarray(jm.extract().axis, dtype=float)
                else:
                    return None
                Rj[i, k] = m.jointPlacements[jid].rotation
                pj[i, k] = m.jointPlacements[jid].translation
                parent = jid
            fr = m.frames[self.frames[i]]
            if fr.parentJoint != parent:
                return None
            Rf[i], pf[i] = fr.placement.rotation, fr.placement.translation
        return tuple(np.ascontiguousarray(a) for a in (axes, Rj, pj, Rf, pf))

    def bind(self, rec: np.ndarray) -> None:
        """Compute into the leg record ``rec`` from now on (a 1-element array with the fields of
        :func:`legs_dtype`, ``leg_j`` and ``chain_*`` filled): the controller keeps the legs in its
        compiled workspace, where its own model stage may fill them with the chain constants
        instead of :meth:`update`. ``batch``, ``P``, ``A``, ``acc`` are views of it."""
        self.rec = rec
        self.batch = record_legs(rec)
        self.P, self.A, self.acc = self.batch.p, self.batch.a, rec["leg_acc"][0]

    def update(self, qj: np.ndarray, dqj: np.ndarray) -> LegBatch:
        """Leg kinematics at joint positions ``qj`` [rad] and velocities ``dqj`` [rad/s] (Pinocchio
        order, C-contiguous float64 vectors of length n; not checked here: the controller checks
        its input)."""
        b = self.batch
        if self.chain is not None:
            leg_chain_kinematics(qj, dqj, self.rec)
            return b
        m, d = self.model, self.data
        pin.forwardKinematics(m, d, qj, dqj, self._zeros_n)
        pin.computeJointJacobians(m, d, qj)
        pin.updateFramePlacements(m, d)
        oMf, P, A, acc, lwa, get_acc = d.oMf, self.P, self.A, self.acc, self._lwa, self._get_acc
        for i, f in enumerate(self.frames):
            X = oMf[f]
            P[i] = X.translation
            A[i] = X.rotation[:, 0]
            acc[i] = get_acc(m, d, f, lwa).vector
        legs_from_frames(d.J, dqj, self.rec)
        return b
