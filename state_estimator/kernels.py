"""Compiled kernels of the fast estimator path (:class:`.estimator.StateEstimator`).

numba ``@njit(cache=True)`` versions of the per-cycle arithmetic of :mod:`.touchdown`,
:mod:`.velocity` and :mod:`.estimator`, of ``GaitScheduler.phases`` / ``cycle_index`` and of the
Pinocchio leg kinematics the estimator uses, written against the reference code (same equations,
same order of the decisions; only the floating-point summation order may differ, at the 1e-16
relative level). Every kernel writes into arrays the caller preallocated and allocates nothing.
The reference functions stay the specification; ``test/test_fast_estimator.py`` checks each
kernel against its reference and the whole fast estimator against the reference estimator.

Per cycle the estimator calls ``load_sample`` (pack + check the inputs), ``legged_wbc.gait.gait_state``,
``legged_wbc.kinematics.tree_foot_kinematics`` (compiled for the robot's tree by the estimator), ``estimator_tick`` (touchdown filters and landing test, support set, velocity
filter, height, outputs) and, after Pinocchio's ``crba`` / ``nonLinearEffects``, ``leg_blocks``.

Units and frames are those of the reference modules: joint velocities [rad/s], torques [N m],
``dt`` [s], base velocity [m/s] in the world frame, foot points [m] in the base frame, IMU in
the base frame. Array shapes: ``L`` legs, ``k`` joints per leg, ``n = 2 k`` touchdown states per leg.

Settings are read by name: ``estimator_tick`` works on one record (:func:`tick_dtype`: settings,
state, scratch and outputs as named fields), the landing test takes a :class:`LandingTest`.

The first call of each kernel compiles it (or loads it from numba's on-disk cache next to this
file, ``__pycache__``); :func:`warm_up` does that once for the argument types of the kernels called
with plain arrays, and the estimator compiles ``estimator_tick`` for its record when it is built,
so the first control cycle does not pay for it. A process that has to compile says so once on stderr
(:mod:`legged_wbc.jit`); ``setup.sh`` fills the cache.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np
from numba import njit

from legged_wbc.gait import SUPPORT, SWING_DOWN, gait_state
from legged_wbc.jit import announce_compiles

announce_compiles(__name__)          # one line on stderr if this process has to compile a kernel

# status codes of the kernels that can fail
OK = -1
SINGULAR = -2          # a matrix to invert was singular (the reference raises LinAlgError)
BAD_QUAT = 6           # check_sample: quaternion norm off by more than the tolerance
BAD_SHAPE = 7          # load_sample: an input is not a 1-D array of the expected length

# every kernel: compiled once and cached on disk; error_model="numpy" leaves out the per-division
# zero checks (every divisor here is nonzero by construction: validated inputs, checked counts)
kernel = njit(cache=True, error_model="numpy")

SAMPLE_FIELDS = ("joint_pos", "joint_vel", "joint_effort", "imu_quat_xyzw", "imu_gyro", "imu_accel")


def sample_layout(n: int) -> tuple[tuple[int, int], ...]:
    """``(offset, length)`` of each :data:`SAMPLE_FIELDS` entry in the packed sample buffer
    ``[q_j (n), dq_j (n), tau (n), quat_xyzw (4), gyro (3), accel (3)]`` (length ``3 n + 10``)."""
    return ((0, n), (n, n), (2 * n, n), (3 * n, 4), (3 * n + 4, 3), (3 * n + 7, 3))


# ---------------------------------------------------------------------------------- small algebra
@kernel
def inv_small(A, out, work):
    """``out = A^-1`` for a square ``(m, m)`` matrix by Gauss-Jordan with partial pivoting;
    ``work`` is ``(m, m)`` scratch. Returns False (``out`` undefined) if ``A`` is singular."""
    m = A.shape[0]
    for i in range(m):
        for j in range(m):
            work[i, j] = A[i, j]
            out[i, j] = 1.0 if i == j else 0.0
    for c in range(m):
        p = c
        best = abs(work[c, c])
        for i in range(c + 1, m):
            a = abs(work[i, c])
            if a > best:
                best, p = a, i
        if best == 0.0 or not math.isfinite(best):
            return False
        if p != c:
            for j in range(m):
                work[c, j], work[p, j] = work[p, j], work[c, j]
                out[c, j], out[p, j] = out[p, j], out[c, j]
        s = 1.0 / work[c, c]
        for j in range(m):
            work[c, j] *= s
            out[c, j] *= s
        for i in range(m):
            if i != c:
                f = work[i, c]
                if f != 0.0:
                    for j in range(m):
                        work[i, j] -= f * work[c, j]
                        out[i, j] -= f * out[c, j]
    return True


@kernel
def _inv3(a0, a1, a2, a3, a4, a5, a6, a7, a8):
    """Cofactor inverse of a row-major 3x3 matrix (as :func:`.velocity._inv3`); ``ok`` first."""
    c0, c3, c6 = a4 * a8 - a5 * a7, a5 * a6 - a3 * a8, a3 * a7 - a4 * a6
    det = a0 * c0 + a1 * c3 + a2 * c6
    if det == 0.0 or not math.isfinite(det):
        return False, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    s = 1.0 / det
    return (True, c0 * s, (a2 * a7 - a1 * a8) * s, (a1 * a5 - a2 * a4) * s,
            c3 * s, (a0 * a8 - a2 * a6) * s, (a2 * a3 - a0 * a5) * s,
            c6 * s, (a1 * a6 - a0 * a7) * s, (a0 * a4 - a1 * a3) * s)


# ---------------------------------------------------------------------------------- input sample
@kernel
def check_sample(buf, n, quat_tol):
    """Validate a packed sample (:func:`sample_layout`): returns ``OK`` (-1), the index in
    :data:`SAMPLE_FIELDS` of the first field with a NaN/inf, or ``BAD_QUAT`` if
    ``| ||quat|| - 1 | > quat_tol``. Reads only."""
    m = 3 * n + 10
    for i in range(m):
        if not math.isfinite(buf[i]):
            if i < 3 * n:
                return i // n
            if i < 3 * n + 4:
                return 3
            if i < 3 * n + 7:
                return 4
            return 5
    o = 3 * n
    qx, qy, qz, qw = buf[o], buf[o + 1], buf[o + 2], buf[o + 3]
    qn = math.sqrt(qx * qx + qy * qy + qz * qz + qw * qw)
    if abs(qn - 1.0) > quat_tol:
        return BAD_QUAT
    return OK


@kernel
def _put(buf, o, m, x):
    if x.ndim != 1 or x.shape[0] != m:
        return False
    for i in range(m):
        buf[o + i] = x[i]
    return True


@kernel
def load_sample(buf, joint_pos, joint_vel, joint_effort, quat, gyro, accel, quat_tol):
    """Pack one sample into ``buf`` (:func:`sample_layout`, ``n = (len(buf) - 10) / 3``) and check
    it: ``BAD_SHAPE`` if an input is not a 1-D array of its length (``buf`` partly written then),
    else :func:`check_sample`'s code. Inputs: numpy arrays of any real dtype (converted to float)."""
    n = (buf.shape[0] - 10) // 3
    if not (_put(buf, 0, n, joint_pos) and _put(buf, n, n, joint_vel) and _put(buf, 2 * n, n, joint_effort)
            and _put(buf, 3 * n, 4, quat) and _put(buf, 3 * n + 4, 3, gyro) and _put(buf, 3 * n + 7, 3, accel)):
        return BAD_SHAPE
    return check_sample(buf, n, quat_tol)


# ---------------------------------------------------------------------------------- dynamics
@kernel
def leg_blocks(M, h, leg_v, M_inv, h_leg, M_lb, work):
    """Leg blocks of the floating-base ``M`` (only its upper triangle is read, as Pinocchio's
    ``crba`` fills it) and ``h``: ``M_inv[i] = M_ii^-1`` ``(L, k, k)`` [1/(kg m^2)],
    ``h_leg[i] = h[leg_v[i]]`` ``(L, k)`` [N m], ``M_lb[i] = M[leg_v[i], :6]`` ``(L, k, 6)``
    (leg-base coupling). ``leg_v`` ``(L, k)``: indices of the leg joints in ``v``; ``work`` is
    ``(2, k, k)`` scratch. Returns ``OK`` or ``SINGULAR``."""
    L, k = leg_v.shape
    blk = work[0]
    for i in range(L):
        for a in range(k):
            ia = leg_v[i, a]
            for b in range(k):
                ib = leg_v[i, b]
                blk[a, b] = M[ia, ib] if ia <= ib else M[ib, ia]
            h_leg[i, a] = h[ia]
            for c in range(6):
                M_lb[i, a, c] = M[c, ia]
        if not inv_small(blk, M_inv[i], work[1]):
            return SINGULAR
    return OK


@kernel
def coupled_bias(h_leg, M_lb, a_b, out):
    """``out[i] = h_leg[i] + M_lb[i] @ a_b`` ``(L, k)`` [N m]: the leg bias with the inertial
    coupling to the base acceleration ``a_b`` ``(6,)`` (Pinocchio base-frame spatial acceleration)."""
    L, k = h_leg.shape
    for i in range(L):
        for a in range(k):
            s = 0.0
            for c in range(6):
                s += M_lb[i, a, c] * a_b[c]
            out[i, a] = h_leg[i, a] + s


# ---------------------------------------------------------------------------------- touchdown
@kernel
def td_filter(x, P, M_inv, tau, h, dq_meas, dt, dt_nom, q_diag, r, score, work):
    """One predict + correct step of every leg's touchdown Kalman filter, in place
    (:meth:`.touchdown.TouchdownDetector.filter`).

    ``x`` ``(L, 2k)`` ``[q_dot (k) rad/s; tau_ext (k) N m]``, ``P`` ``(L, 2k, 2k)``; ``M_inv``
    ``(L, k, k)``, ``tau`` applied torques, ``h`` bias torques (``(L, k)``, N m), ``dq_meas``
    measured joint velocities ``(L, k)`` [rad/s]; ``dt`` step [s] (> 0), ``dt_nom`` nominal step
    (the process noise ``q_diag`` ``(2k,)``, the diagonal of ``Q``, is per nominal step and scaled
    by ``dt / dt_nom``), ``r`` = ``sigma_dq_meas^2``. Writes ``score`` ``(L,)`` =
    ``||tau_ext - tau_ext_prev|| / dt`` [N m/s]. ``work`` ``(6, 2k, 2k)`` scratch.
    Returns ``OK`` or ``SINGULAR``.

    The structure of the model is used instead of full ``2k x 2k`` products (same matrices; only
    the rounding differs): with ``B = dt M^-1``, ``F = [[I, -B], [0, I]]``, so
    ``F P F^T = [[P11 - B P21 - P12' B^T, P12'], [P12'^T, P22]]`` with ``P12' = P12 - B P22``;
    ``H = [I 0]``, so the Joseph update ``A Pn A^T + r K K^T`` (``A = I - K H``) is
    ``AP = Pn - K Pn[:k, :]``, ``AP - AP[:, :k] K^T + r K K^T``. Covariances are symmetric by
    construction (the upper triangle is computed and mirrored)."""
    L, n = x.shape
    k = n // 2
    qs = 1.0 if dt == dt_nom else dt / dt_nom
    B = work[0]                  # dt M^-1 (k, k) in the top-left corner
    Pn = work[1]                 # predicted covariance
    K = work[2]                  # Kalman gain (n, k) in the first k columns
    AP = work[3]                 # (I - K H) Pn
    S = work[4]                  # innovation covariance, then rows k..: scratch vectors
    Sinv = work[5]
    for i in range(L):
        xi = x[i]
        Pi = P[i]
        for a in range(k):
            for b in range(k):
                B[a, b] = dt * M_inv[i, a, b]
        # ---- predict: x <- F x + B u, u = tau - h (tau_ext before the step kept in S[k])
        for a in range(k):
            S[k, a] = xi[k + a]
            S[k + 1, a] = tau[i, a] - h[i, a] - xi[k + a]
        for a in range(k):
            s = 0.0
            for b in range(k):
                s += B[a, b] * S[k + 1, b]
            xi[a] += s
        # rows < k of F P: P[a, :] - B[a, :] P[k:, :]  (into Pn, first k rows)
        for a in range(k):
            for c in range(n):
                Pn[a, c] = Pi[a, c]
            for b in range(k):
                f = B[a, b]
                for c in range(n):
                    Pn[a, c] -= f * Pi[k + b, c]
        # top-left block of F P F^T: (F P)[:k, :k] - (F P)[:k, k:] B^T (upper triangle)
        for a in range(k):
            for c in range(a, k):
                s = 0.0
                for b in range(k):
                    s += Pn[a, k + b] * B[c, b]
                Pn[a, c] -= s
        for a in range(k):                       # mirror the first k rows (top-left upper, P12')
            for c in range(a + 1, n):
                Pn[c, a] = Pn[a, c]
        for a in range(k, n):                    # the bottom-right block is P22
            for c in range(a, n):
                Pn[a, c] = Pi[a, c]
                Pn[c, a] = Pi[a, c]
        for a in range(n):
            Pn[a, a] += q_diag[a] * qs if qs != 1.0 else q_diag[a]
        # ---- correct with y = q_dot (H = [I 0]): K = Pn[:, :k] (Pn[:k, :k] + r I)^-1
        for a in range(k):
            for b in range(k):
                S[a, b] = Pn[a, b]
            S[a, a] += r
        if not inv_small(S[:k, :k], Sinv[:k, :k], AP[:k, :k]):
            return SINGULAR
        for a in range(n):
            for b in range(k):
                s = 0.0
                for c in range(k):
                    s += Pn[a, c] * Sinv[c, b]
                K[a, b] = s
        for a in range(k):
            S[k + 1, a] = dq_meas[i, a] - xi[a]
        for a in range(n):
            s = 0.0
            for b in range(k):
                s += K[a, b] * S[k + 1, b]
            xi[a] += s
        # Joseph form: AP = Pn - K Pn[:k, :]; P = AP - AP[:, :k] K^T + r K K^T (upper, mirrored)
        for a in range(n):
            for c in range(n):
                AP[a, c] = Pn[a, c]
            for b in range(k):
                f = K[a, b]
                for c in range(n):
                    AP[a, c] -= f * Pn[b, c]
        for a in range(n):
            for c in range(a, n):
                s = 0.0
                t = 0.0
                for b in range(k):
                    s += AP[a, b] * K[c, b]
                    t += K[a, b] * K[c, b]
                m = (AP[a, c] - s) + r * t
                Pi[a, c] = m
                Pi[c, a] = m
        ss = 0.0
        for a in range(k):
            d = xi[k + a] - S[k, a]
            ss += d * d
        score[i] = math.sqrt(ss) / dt
    return OK


class LandingTest(NamedTuple):
    """Settings of the landing test (:func:`td_detect`; :class:`.config.TouchdownConfig`)."""

    gamma: float         # score threshold [N m/s] (gamma_land)
    n_land: int          # consecutive samples over it (n_land)
    late_max: int        # cycles a late leg's swing-down is extended at most, 0: none (late_max_cycles)


@kernel
def td_detect(phase, cycle, score, test, touchdown, count, latched, prev_phase, prev_cycle, late, event):
    """Landing test of every leg, in place (:meth:`.touchdown.TouchdownDetector.detect`):
    ``phase`` / ``cycle`` ``(L,)`` nominal phase and gait-cycle index, ``score`` ``(L,)`` [N m/s],
    ``test`` its settings (:class:`LandingTest`); updates ``touchdown`` (bool), ``count``,
    ``latched`` (cycle of the latch), ``prev_phase``, ``prev_cycle``, ``late`` (cycles a late leg
    has been kept out of support, 0: not late) and ``event`` (this cycle: 0 none,
    :data:`.touchdown.LATE_LANDED`, :data:`.touchdown.LATE_FALLBACK`)."""
    gamma, n_land, late_max = test.gamma, test.n_land, test.late_max
    for i in range(phase.shape[0]):
        ph, cy = phase[i], cycle[i]
        event[i] = 0
        if ph != SWING_DOWN:                 # support / swing-up: filter only, latch cleared
            if (late_max > 0 and ph == SUPPORT and prev_phase[i] == SWING_DOWN and not touchdown[i]
                    and late[i] == 0):
                late[i] = 1                  # the swing-down ended without contact: extend it
            elif ph != SUPPORT:
                late[i] = 0                  # a new swing began
            touchdown[i] = False
            if late[i] > 0:
                count[i] = count[i] + 1 if score[i] > gamma else 0
                if count[i] >= n_land:
                    late[i] = 0
                    event[i] = 1
                elif late[i] > late_max:
                    late[i] = 0
                    event[i] = 2
                else:
                    late[i] += 1
            if late[i] == 0:
                count[i] = 0
        else:
            late[i] = 0
            if touchdown[i] and latched[i] != cy:
                touchdown[i] = False
            if prev_phase[i] != SWING_DOWN or prev_cycle[i] != cy:
                count[i] = 0
            if not touchdown[i]:
                count[i] = count[i] + 1 if score[i] > gamma else 0
                if count[i] >= n_land:
                    touchdown[i] = True
                    latched[i] = cy
        prev_phase[i] = ph
        prev_cycle[i] = cy


# ---------------------------------------------------------------------------------- velocity
@kernel
def vel_predict(v, P, a0, a1, a2, dt, dt_nom, q_nom):
    """``v += dt a_world`` [m/s, world], ``P += q I`` with ``q = q_nom (dt / dt_nom)^2``
    (:meth:`.velocity.BaseVelocityFilter.predict`)."""
    v[0] += dt * a0
    v[1] += dt * a1
    v[2] += dt * a2
    q = q_nom * (dt / dt_nom) ** 2 if dt != dt_nom else q_nom
    P[0, 0] += q
    P[1, 1] += q
    P[2, 2] += q


@kernel
def vel_reliable(support, prev_support, cycles_old, n_ex, cycles, usable, excluded):
    """Exclusion counters for one control cycle (:meth:`.velocity.BaseVelocityFilter.reliable`):
    ``cycles[i]`` = cycles since foot ``i`` entered ``support`` (0 on entry; from ``cycles_old``),
    ``usable = support & cycles >= n_ex``, ``excluded = support & ~usable``; then
    ``prev_support = support``. ``cycles`` may be ``cycles_old`` (in place)."""
    for i in range(support.shape[0]):
        s = support[i]
        c = (cycles_old[i] + 1 if prev_support[i] else 0) if s else 0
        cycles[i] = c
        u = s and c >= n_ex
        usable[i] = u
        excluded[i] = s and not u
        prev_support[i] = s


@kernel
def vel_correct(v, P, z, usable, evaluate, r, gate, cap, gating, d2, inflation, used):
    """Soft-gated, information-weighted leg-kinematics correction, in place
    (:meth:`.velocity.BaseVelocityFilter.correct`): ``z`` ``(L, 3)`` per-foot velocity
    measurements [m/s, world], ``usable`` feet corrected with, ``evaluate`` feet whose ``d2`` is
    computed (``usable | support``); ``r = sigma_meas^2``; writes ``d2`` (NaN when not evaluated),
    ``inflation`` (``clip(d2 / gate, 1, cap)`` if ``gating`` else 1) and ``used``.
    Returns ``OK`` or ``SINGULAR`` (``v``, ``P`` untouched then)."""
    p0, p1, p2 = P[0, 0], P[0, 1], P[0, 2]
    p3, p4, p5 = P[1, 0], P[1, 1], P[1, 2]
    p6, p7, p8 = P[2, 0], P[2, 1], P[2, 2]
    v0, v1, v2 = v[0], v[1], v[2]
    ok, s0, s1, s2, s3, s4, s5, s6, s7, s8 = _inv3(p0 + r, p1, p2, p3, p4 + r, p5, p6, p7, p8 + r)
    if not ok:
        return SINGULAR
    wsum = zb0 = zb1 = zb2 = 0.0
    for i in range(z.shape[0]):
        used[i] = usable[i]
        if not evaluate[i]:
            d2[i] = math.nan
            inflation[i] = 1.0
            continue
        za, zb, zc = z[i, 0], z[i, 1], z[i, 2]
        r0, r1, r2 = za - v0, zb - v1, zc - v2
        dd = ((s0 * r0 + s1 * r1 + s2 * r2) * r0 + (s3 * r0 + s4 * r1 + s5 * r2) * r1
              + (s6 * r0 + s7 * r1 + s8 * r2) * r2)
        c = min(max(dd / gate, 1.0), cap) if gating else 1.0
        d2[i] = dd
        inflation[i] = c
        if usable[i]:
            w = 1.0 / c
            wsum += w
            zb0 += w * za
            zb1 += w * zb
            zb2 += w * zc
    if wsum == 0.0:
        return OK
    rho = r / wsum
    e0, e1, e2 = zb0 / wsum - v0, zb1 / wsum - v1, zb2 / wsum - v2
    ok, g0, g1, g2, g3, g4, g5, g6, g7, g8 = _inv3(p0 + rho, p1, p2, p3, p4 + rho, p5, p6, p7, p8 + rho)
    if not ok:
        return SINGULAR
    # K = P G
    k0 = p0 * g0 + p1 * g3 + p2 * g6
    k1 = p0 * g1 + p1 * g4 + p2 * g7
    k2 = p0 * g2 + p1 * g5 + p2 * g8
    k3 = p3 * g0 + p4 * g3 + p5 * g6
    k4 = p3 * g1 + p4 * g4 + p5 * g7
    k5 = p3 * g2 + p4 * g5 + p5 * g8
    k6 = p6 * g0 + p7 * g3 + p8 * g6
    k7 = p6 * g1 + p7 * g4 + p8 * g7
    k8 = p6 * g2 + p7 * g5 + p8 * g8
    v[0] = v0 + (k0 * e0 + k1 * e1 + k2 * e2)
    v[1] = v1 + (k3 * e0 + k4 * e1 + k5 * e2)
    v[2] = v2 + (k6 * e0 + k7 * e1 + k8 * e2)
    # Joseph form: A P A^T + rho K K^T, A = I - K
    a0, a1, a2, a3, a4, a5, a6, a7, a8 = 1.0 - k0, -k1, -k2, -k3, 1.0 - k4, -k5, -k6, -k7, 1.0 - k8
    # AP = A P
    b0 = a0 * p0 + a1 * p3 + a2 * p6
    b1 = a0 * p1 + a1 * p4 + a2 * p7
    b2 = a0 * p2 + a1 * p5 + a2 * p8
    b3 = a3 * p0 + a4 * p3 + a5 * p6
    b4 = a3 * p1 + a4 * p4 + a5 * p7
    b5 = a3 * p2 + a4 * p5 + a5 * p8
    b6 = a6 * p0 + a7 * p3 + a8 * p6
    b7 = a6 * p1 + a7 * p4 + a8 * p7
    b8 = a6 * p2 + a7 * p5 + a8 * p8
    # (AP) A^T + rho K K^T
    q0 = (b0 * a0 + b1 * a1 + b2 * a2) + rho * (k0 * k0 + k1 * k1 + k2 * k2)
    q1 = (b0 * a3 + b1 * a4 + b2 * a5) + rho * (k0 * k3 + k1 * k4 + k2 * k5)
    q2 = (b0 * a6 + b1 * a7 + b2 * a8) + rho * (k0 * k6 + k1 * k7 + k2 * k8)
    q3 = (b3 * a0 + b4 * a1 + b5 * a2) + rho * (k3 * k0 + k4 * k1 + k5 * k2)
    q4 = (b3 * a3 + b4 * a4 + b5 * a5) + rho * (k3 * k3 + k4 * k4 + k5 * k5)
    q5 = (b3 * a6 + b4 * a7 + b5 * a8) + rho * (k3 * k6 + k4 * k7 + k5 * k8)
    q6 = (b6 * a0 + b7 * a1 + b8 * a2) + rho * (k6 * k0 + k7 * k1 + k8 * k2)
    q7 = (b6 * a3 + b7 * a4 + b8 * a5) + rho * (k6 * k3 + k7 * k4 + k8 * k5)
    q8 = (b6 * a6 + b7 * a7 + b8 * a8) + rho * (k6 * k6 + k7 * k7 + k8 * k8)
    q01, q02, q12 = 0.5 * (q1 + q3), 0.5 * (q2 + q6), 0.5 * (q5 + q7)
    P[0, 0], P[0, 1], P[0, 2] = q0, q01, q02
    P[1, 0], P[1, 1], P[1, 2] = q01, q4, q12
    P[2, 0], P[2, 1], P[2, 2] = q02, q12, q8
    return OK


# ---------------------------------------------------------------------------------- one cycle
F8, I8, U1, B1 = np.float64, np.int64, np.uint8, np.bool_


@functools.lru_cache(maxsize=None)
def tick_dtype(L: int, k: int, n: int) -> np.dtype:
    """The record :func:`estimator_tick` works on, for ``L`` legs of ``k`` joints and ``n`` joints: the
    settings, the state carried from cycle to cycle, scratch and this cycle's outputs, each a field
    read by name (the estimator keeps one such record and views of its fields, see
    :class:`.estimator.StateEstimator`).

    Flags that are arrays are ``uint8`` fields (numba takes no ``bool`` arrays in records; the kernel
    and the estimator read them through ``bool`` views). One dtype object per size (cached): numba's
    dispatch recognizes a record's type quickly only by the dtype object it compiled for."""
    m = 2 * k
    return np.dtype([
        # settings: the estimator's and its filters' configs (refilled when one changes), the robot.
        # td_q_diag, td_r: the touchdown filters' Q diagonal and sigma_dq_meas^2; gamma, n_land,
        # late_max: the landing test (LandingTest); vf_q, vf_r: the velocity filter's process noise
        # per nominal step and sigma_meas^2; gate, cap, gating, n_ex: gate_d2, max_inflation, gating,
        # exclusion_cycles; imu_r: the IMU in the base frame (imu_offset: not at the origin);
        # base_coupling: add M_iB a_B to the leg bias; alpha_nom: the height low-pass at dt_nom
        ("leg_j", I8, (L, k)), ("td_q_diag", F8, (m,)), ("imu_r", F8, (3,)),
        ("dt_nom", F8), ("td_r", F8), ("gamma", F8), ("n_land", I8), ("late_max", I8), ("vf_q", F8),
        ("vf_r", F8), ("gate", F8), ("cap", F8), ("gating", B1), ("n_ex", I8), ("imu_offset", B1),
        ("base_coupling", B1), ("g_z", F8), ("alpha_nom", F8), ("cutoff_hz", F8), ("foot_radius", F8),
        # state: the packed sample (sample_layout), st = [p_world (3) m, gyro of the previous sample
        # (3) rad/s, base velocity of the previous sample in the base frame (3) m/s], the touchdown
        # filters, the leg blocks at the previous estimate, the velocity filter
        ("sample", F8, (3 * n + 10,)), ("st", F8, (9,)),
        ("td_x", F8, (L, m)), ("td_P", F8, (L, m, m)), ("td_count", I8, (L,)), ("td_touch", U1, (L,)),
        ("td_latched", I8, (L,)), ("td_prev_phase", I8, (L,)), ("td_prev_cycle", I8, (L,)),
        ("td_late", I8, (L,)), ("td_event", I8, (L,)),
        ("M_inv", F8, (L, k, k)), ("h_leg", F8, (L, k)), ("M_lb", F8, (L, k, 6)),
        ("vf_v", F8, (3,)), ("vf_P", F8, (3, 3)), ("vf_prev_support", U1, (L,)), ("vf_cycles", I8, (L,)),
        # scratch
        ("td_work", F8, (6, m, m)), ("a_b", F8, (6,)), ("h_cpl", F8, (L, k)), ("tau_leg", F8, (L, k)),
        ("dq_leg", F8, (L, k)), ("z", F8, (L, 3)),
        # outputs of the cycle (the others are state: td_touch, td_count, td_x[:, k:], vf_cycles, vf_P)
        ("q", F8, (7 + n,)), ("v", F8, (6 + n,)), ("v_world", F8, (3,)), ("support", U1, (L,)),
        ("nominal", U1, (L,)), ("td_score", F8, (L,)), ("d2", F8, (L,)), ("inflation", F8, (L,)),
        ("used", U1, (L,)), ("excluded", U1, (L,)),
    ], align=True)


@kernel
def estimator_tick(ws, phase, cycle, p_foot, v_rel, first, dt, step, height_init):
    """Steps 1-5 of :meth:`.estimator.StateEstimator.update` for one validated sample, in place on
    the record ``ws`` (a ``(1,)`` array of :func:`tick_dtype`).

    Per cycle: ``phase``, ``cycle`` nominal gait phase and cycle index ``(L,)``; ``p_foot``,
    ``v_rel`` ``(L, 3)`` foot points and ``J_p dq`` in the base frame (read); ``first``: first
    sample since ``reset`` (the touchdown filters were just reset by the caller, at the dynamics of
    this sample); ``dt`` time since the previous sample [s] (0 if none), ``step`` the filters'
    integration step [s]; ``height_init``: base height [m] from ``reset(q0)`` (NaN: from the feet).

    Reads the settings and ``sample`` (already checked by :func:`check_sample`); updates the state
    in place: the touchdown filters (``td_*``, as :class:`.touchdown.TouchdownDetector`, with the
    late-touchdown counters ``td_late`` and this cycle's events ``td_event``), the velocity filter
    (``vf_v`` world [m/s], ``vf_P``, ``vf_prev_support``, the support counters ``vf_cycles``) and
    ``st``. ``M_inv``, ``h_leg``, ``M_lb`` are the leg blocks at the previous estimate (read).
    Writes the outputs ``q`` ``(7 + n,)``, ``v`` ``(6 + n,)`` (Pinocchio conventions, base velocity
    in the base frame), ``v_world`` (3,), ``support``, ``nominal``, ``td_score`` [N m/s], ``d2``,
    ``inflation``, ``used``, ``excluded``. Returns ``(status, height_raw)``: ``OK`` or ``SINGULAR``;
    the unfiltered support-foot base height [m] (NaN with no support foot)."""
    w = ws[0]
    leg_j, buf, st = w.leg_j, w.sample, w.st
    td_x, td_score, td_touch, td_late = w.td_x, w.td_score, w.td_touch.view(np.bool_), w.td_late
    tau_leg, dq_leg, z = w.tau_leg, w.dq_leg, w.z
    support, nominal, used = w.support.view(np.bool_), w.nominal.view(np.bool_), w.used.view(np.bool_)
    vf_v, vf_P, q_out, v_out = w.vf_v, w.vf_P, w.q, w.v
    dt_nom, g_z = w.dt_nom, w.g_z
    L, k = leg_j.shape
    n = q_out.shape[0] - 7
    # ---- orientation (normalized) and rotation base -> world
    o = 3 * n
    qx, qy, qz, qw = buf[o], buf[o + 1], buf[o + 2], buf[o + 3]
    qn = math.sqrt(qx * qx + qy * qy + qz * qz + qw * qw)
    qx, qy, qz, qw = qx / qn, qy / qn, qz / qn, qw / qn
    r00, r01, r02 = 1 - 2 * (qy * qy + qz * qz), 2 * (qx * qy - qz * qw), 2 * (qx * qz + qy * qw)
    r10, r11, r12 = 2 * (qx * qy + qz * qw), 1 - 2 * (qx * qx + qz * qz), 2 * (qy * qz - qx * qw)
    r20, r21, r22 = 2 * (qx * qz - qy * qw), 2 * (qy * qz + qx * qw), 1 - 2 * (qx * qx + qy * qy)
    wx, wy, wz = buf[o + 4], buf[o + 5], buf[o + 6]
    fx, fy, fz = buf[o + 7], buf[o + 8], buf[o + 9]
    # ---- base angular acceleration, specific force at the base origin
    if first:
        ax_, ay_, az_ = 0.0, 0.0, 0.0
    else:
        ax_, ay_, az_ = (wx - st[3]) / step, (wy - st[4]) / step, (wz - st[5]) / step
    if w.imu_offset:
        imu_r = w.imu_r
        rx, ry, rz = imu_r[0], imu_r[1], imu_r[2]
        cx, cy, cz = wy * rz - wz * ry, wz * rx - wx * rz, wx * ry - wy * rx          # w x r
        fx -= ay_ * rz - az_ * ry + wy * cz - wz * cy
        fy -= az_ * rx - ax_ * rz + wz * cx - wx * cz
        fz -= ax_ * ry - ay_ * rx + wx * cy - wy * cx
    # ---- 1. touchdown filters
    for i in range(L):
        for a in range(k):
            j = leg_j[i, a]
            tau_leg[i, a] = buf[2 * n + j]
            dq_leg[i, a] = buf[n + j]
    if first:
        for i in range(L):
            td_score[i] = 0.0
    else:
        h = w.h_leg
        if w.base_coupling:
            vx, vy, vz = st[6], st[7], st[8]
            a_b = w.a_b
            a_b[0] = fx + g_z * r20 - (wy * vz - wz * vy)
            a_b[1] = fy + g_z * r21 - (wz * vx - wx * vz)
            a_b[2] = fz + g_z * r22 - (wx * vy - wy * vx)
            a_b[3], a_b[4], a_b[5] = ax_, ay_, az_
            coupled_bias(w.h_leg, w.M_lb, a_b, w.h_cpl)
            h = w.h_cpl
        if td_filter(td_x, w.td_P, w.M_inv, tau_leg, h, dq_leg, step, dt_nom, w.td_q_diag, w.td_r, td_score,
                     w.td_work) != OK:
            return SINGULAR, math.nan
    td_detect(phase, cycle, td_score, LandingTest(w.gamma, w.n_land, w.late_max), td_touch, w.td_count,
              w.td_latched, w.td_prev_phase, w.td_prev_cycle, td_late, w.td_event)
    # ---- 2. support set (a late leg stays out of it until its contact is seen)
    for i in range(L):
        nominal[i] = phase[i] == SUPPORT
        support[i] = (nominal[i] and td_late[i] == 0) or td_touch[i]
    # ---- 3. base velocity
    if not first and dt > 0:
        vel_predict(vf_v, vf_P, r00 * fx + r01 * fy + r02 * fz, r10 * fx + r11 * fy + r12 * fz,
                    r20 * fx + r21 * fy + r22 * fz + g_z, step, dt_nom, w.vf_q)
    vf_cycles = w.vf_cycles
    vel_reliable(support, w.vf_prev_support.view(np.bool_), vf_cycles, w.n_ex, vf_cycles, used,
                 w.excluded.view(np.bool_))
    for i in range(L):
        px, py, pz = p_foot[i, 0], p_foot[i, 1], p_foot[i, 2]
        # p x w - J_p dq (base frame), then to the world: R (-(w x p) - J_p dq)
        bx = (py * wz - pz * wy) - v_rel[i, 0]
        by = (pz * wx - px * wz) - v_rel[i, 1]
        bz = (px * wy - py * wx) - v_rel[i, 2]
        z[i, 0] = bx * r00 + by * r01 + bz * r02
        z[i, 1] = bx * r10 + by * r11 + bz * r12
        z[i, 2] = bx * r20 + by * r21 + bz * r22
    if vel_correct(vf_v, vf_P, z, used, support, w.vf_r, w.gate, w.cap, w.gating, w.d2, w.inflation, used) != OK:
        return SINGULAR, math.nan
    vwx, vwy, vwz = vf_v[0], vf_v[1], vf_v[2]
    # ---- 4. height: mean over the support feet of foot_radius - (R p_i)_z, low-passed
    px, py, pz = st[0], st[1], st[2]
    n_sup = 0
    zsum = 0.0
    for i in range(L):
        if support[i]:
            n_sup += 1
            zsum += p_foot[i, 0] * r20 + p_foot[i, 1] * r21 + p_foot[i, 2] * r22
    h_raw = w.foot_radius - zsum / n_sup if n_sup else math.nan
    if first:
        if not math.isnan(height_init):
            pz = height_init
        else:
            pz = h_raw if n_sup else 0.0
    elif n_sup:
        alpha = w.alpha_nom if step == dt_nom else 1.0 - math.exp(-2.0 * math.pi * w.cutoff_hz * step)
        pz += alpha * (h_raw - pz)
    else:
        pz += step * vwz
    # ---- 5. x, y
    if not first:
        px += step * vwx
        py += step * vwy
    vbx = r00 * vwx + r10 * vwy + r20 * vwz
    vby = r01 * vwx + r11 * vwy + r21 * vwz
    vbz = r02 * vwx + r12 * vwy + r22 * vwz
    # ---- outputs and the state carried to the next cycle
    q_out[0], q_out[1], q_out[2] = px, py, pz
    q_out[3], q_out[4], q_out[5], q_out[6] = qx, qy, qz, qw
    v_out[0], v_out[1], v_out[2] = vbx, vby, vbz
    v_out[3], v_out[4], v_out[5] = wx, wy, wz
    for j in range(n):
        q_out[7 + j] = buf[j]
        v_out[6 + j] = buf[n + j]
    v_world = w.v_world
    v_world[0], v_world[1], v_world[2] = vwx, vwy, vwz
    st[0], st[1], st[2] = px, py, pz
    st[3], st[4], st[5] = wx, wy, wz
    st[6], st[7], st[8] = vbx, vby, vbz
    return OK, h_raw


_warm = False


def warm_up() -> None:
    """Compile (or load from the cache) the kernels the estimator calls with plain arrays, once per
    process, on tiny dummy data. :func:`estimator_tick` takes the record of :func:`tick_dtype`, whose
    type depends on the robot's size: an estimator compiles it for its record when it is built
    (``StateEstimator._compile_tick``)."""
    global _warm
    if _warm:
        return
    L, k, n = 1, 2, 2
    f = np.zeros
    buf = f(3 * n + 10)
    buf[3 * n + 3] = 1.0
    check_sample(buf, n, 1e-2)
    for lay in (f(n), f(2 * n)[::2]):                     # contiguous and strided inputs
        load_sample(buf, lay, lay, lay, f(4), f(3), f(3), 1e-2)
    gait_state(1.0, 0.0, math.inf, 1.0, 0.4, f(L), f(L, np.int64), f(L, np.int64), f(L), f(L, np.int64))
    M = np.eye(6 + n)
    leg_v = np.arange(n, dtype=np.int64).reshape(L, k) + 6
    leg_blocks(M, f(6 + n), leg_v, f((L, k, k)), f((L, k)), f((L, k, 6)), f((2, k, k)))
    _warm = True
