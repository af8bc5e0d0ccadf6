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

The longer kernels are written as steps named after the filters' concepts: the touchdown filter's
:func:`td_predict` / :func:`td_update` / :func:`td_score` (:func:`td_filter`), the velocity filter's
:func:`vel_soft_gating` / :func:`vel_update` (:func:`vel_correct`), the cycle's steps
(:func:`estimator_tick`). Each step is its own ``@njit`` function with ``inline="always"``: numba
inlines it into its caller, so the caller computes the same arithmetic in the same order as when it
was written in one piece (bit-identical outputs) and pays no call per step (a plain call per step and
leg made the cycle kernel ~1.9x slower).

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
# the named steps of the longer kernels: inlined into their caller by numba (its IR), so a step costs
# no call (array arguments, views); the arithmetic and its order are those of the step
INLINED = dict(cache=True, error_model="numpy", inline="always")

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


@njit(**INLINED)
def _mm3(a, b):
    """Product ``a b`` of two 3x3 matrices given as row-major 9-tuples (as :func:`.velocity._mm`)."""
    return (a[0] * b[0] + a[1] * b[3] + a[2] * b[6], a[0] * b[1] + a[1] * b[4] + a[2] * b[7],
            a[0] * b[2] + a[1] * b[5] + a[2] * b[8],
            a[3] * b[0] + a[4] * b[3] + a[5] * b[6], a[3] * b[1] + a[4] * b[4] + a[5] * b[7],
            a[3] * b[2] + a[4] * b[5] + a[5] * b[8],
            a[6] * b[0] + a[7] * b[3] + a[8] * b[6], a[6] * b[1] + a[7] * b[4] + a[8] * b[7],
            a[6] * b[2] + a[7] * b[5] + a[8] * b[8])


@njit(**INLINED)
def _tr3(a):
    """Transpose of a 3x3 matrix given as a row-major 9-tuple."""
    return (a[0], a[3], a[6], a[1], a[4], a[7], a[2], a[5], a[8])


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
    """One predict + update step of every leg's touchdown Kalman filter, in place
    (:meth:`.touchdown.TouchdownDetector.filter`): per leg :func:`td_predict`, :func:`td_update`,
    :func:`td_score`.

    ``x`` ``(L, 2k)`` ``[q_dot (k) rad/s; tau_ext (k) N m]``, ``P`` ``(L, 2k, 2k)``; ``M_inv``
    ``(L, k, k)``, ``tau`` applied torques, ``h`` bias torques (``(L, k)``, N m), ``dq_meas``
    measured joint velocities ``(L, k)`` [rad/s]; ``dt`` step [s] (> 0), ``dt_nom`` nominal step
    (the process noise ``q_diag`` ``(2k,)``, the diagonal of ``Q``, is per nominal step and scaled
    by ``dt / dt_nom``), ``r`` = ``sigma_dq_meas^2``. Writes ``score`` ``(L,)`` =
    ``||tau_ext - tau_ext_prev|| / dt`` [N m/s]. ``work`` ``(6, 2k, 2k)`` scratch shared by the
    steps: ``[0]`` ``B = dt M^-1`` (top-left ``(k, k)``), ``[1]`` the predicted covariance ``Pn``,
    ``[2]`` the gain ``K`` (first ``k`` columns), ``[3]`` ``(I - K H) Pn``, ``[4]`` the innovation
    covariance (top-left ``(k, k)``; row ``k``: ``tau_ext`` before the step, row ``k + 1``: a
    scratch vector), ``[5]`` its inverse. Returns ``OK`` or ``SINGULAR`` (the legs before the
    singular one are updated then).

    The structure of the model is used instead of full ``2k x 2k`` products (same matrices; only
    the rounding differs); covariances are symmetric by construction (the upper triangle is
    computed and mirrored)."""
    n = x.shape[1]
    qs = 1.0 if dt == dt_nom else dt / dt_nom
    for i in range(x.shape[0]):
        td_predict(x[i], P[i], M_inv[i], tau[i], h[i], dt, qs, q_diag, work)
        if not td_update(x[i], P[i], dq_meas[i], r, work):
            return SINGULAR
        score[i] = td_score(x[i], work[4, n // 2], dt)
    return OK


@njit(**INLINED)
def td_predict(x, P, M_inv, tau, h, dt, qs, q_diag, work):
    """Kalman predict of one leg's touchdown filter: ``x <- F x + B u`` in place and
    ``Pn = F P F^T + qs Q`` into ``work[1]`` (:func:`td_predict_covariance`; ``P`` is read), with
    ``B = dt M^-1`` (into ``work[0]``), ``u = tau - h`` and ``F = [[I, -B], [0, I]]``: ``q_dot``
    [rad/s] integrates the joint acceleration ``M^-1 (tau - h - tau_ext)``, ``tau_ext`` [N m] is a
    random walk. ``x`` ``(2k,)``, ``P`` ``(2k, 2k)``; ``M_inv`` ``(k, k)`` [1/(kg m^2)]; ``tau``,
    ``h`` ``(k,)`` [N m]; ``dt`` [s]; ``qs`` the process-noise scale ``dt / dt_nom`` (exactly 1.0
    at the nominal step); ``q_diag`` ``(2k,)`` the diagonal of ``Q``. Keeps ``tau_ext`` before the
    step in ``work[4, k]`` (for :func:`td_score`)."""
    k = M_inv.shape[0]
    B = work[0]
    S = work[4]
    for a in range(k):
        for b in range(k):
            B[a, b] = dt * M_inv[a, b]
    for a in range(k):
        S[k, a] = x[k + a]
        S[k + 1, a] = tau[a] - h[a] - x[k + a]
    for a in range(k):
        s = 0.0
        for b in range(k):
            s += B[a, b] * S[k + 1, b]
        x[a] += s
    td_predict_covariance(P, B, qs, q_diag, work[1])


@njit(**INLINED)
def td_predict_covariance(P, B, qs, q_diag, Pn):
    """``Pn = F P F^T + qs diag(q_diag)`` for ``F = [[I, -B], [0, I]]`` (``B`` the top-left
    ``(k, k)`` of its array; ``P``, ``Pn`` ``(2k, 2k)``, units of ``[q_dot; tau_ext]`` squared), on
    the blocks: ``F P F^T = [[P11 - B P21 - P12' B^T, P12'], [P12'^T, P22]]`` with
    ``P12' = P12 - B P22``. The upper triangle is computed and mirrored."""
    n = P.shape[0]
    k = n // 2
    # rows < k of F P: P[a, :] - B[a, :] P[k:, :]  (into Pn, first k rows)
    for a in range(k):
        for c in range(n):
            Pn[a, c] = P[a, c]
        for b in range(k):
            f = B[a, b]
            for c in range(n):
                Pn[a, c] -= f * P[k + b, c]
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
            Pn[a, c] = P[a, c]
            Pn[c, a] = P[a, c]
    for a in range(n):
        Pn[a, a] += q_diag[a] * qs if qs != 1.0 else q_diag[a]


@njit(**INLINED)
def td_update(x, P, dq_meas, r, work):
    """Kalman update of one leg's touchdown filter after :func:`td_predict` (``Pn`` in ``work[1]``)
    with the measured joint velocities ``dq_meas`` ``(k,)`` [rad/s]: ``y = q_dot + v``,
    ``H = [I 0]``, ``r = sigma_dq_meas^2`` [(rad/s)^2]. Gain ``K = Pn[:, :k] (Pn[:k, :k] + r I)^-1``
    (into ``work[2]``), ``x += K (y - q_dot)`` in place, ``P`` = the Joseph form
    (:func:`td_joseph_covariance`). Returns False (``P`` not written) if the innovation covariance
    is singular."""
    n = x.shape[0]
    k = n // 2
    Pn, K, AP, S, Sinv = work[1], work[2], work[3], work[4], work[5]
    for a in range(k):
        for b in range(k):
            S[a, b] = Pn[a, b]
        S[a, a] += r
    if not inv_small(S[:k, :k], Sinv[:k, :k], AP[:k, :k]):
        return False
    for a in range(n):
        for b in range(k):
            s = 0.0
            for c in range(k):
                s += Pn[a, c] * Sinv[c, b]
            K[a, b] = s
    for a in range(k):
        S[k + 1, a] = dq_meas[a] - x[a]
    for a in range(n):
        s = 0.0
        for b in range(k):
            s += K[a, b] * S[k + 1, b]
        x[a] += s
    td_joseph_covariance(Pn, K, r, AP, P)
    return True


@njit(**INLINED)
def td_joseph_covariance(Pn, K, r, AP, P):
    """``P = A Pn A^T + r K K^T`` with ``A = I - K H``, ``H = [I 0]`` (Joseph form; ``Pn``, ``P``
    ``(2k, 2k)``, ``K`` the first ``k`` columns of its array, ``r`` [(rad/s)^2]): with
    ``AP = Pn - K Pn[:k, :]`` (into ``AP``), ``P = AP - AP[:, :k] K^T + r K K^T``, the upper
    triangle computed and mirrored."""
    n = Pn.shape[0]
    k = n // 2
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
            P[a, c] = m
            P[c, a] = m


@njit(**INLINED)
def td_score(x, tau_prev, dt):
    """The touchdown score of one leg: ``||tau_ext - tau_prev|| / dt`` [N m/s], ``x`` ``(2k,)`` the
    filter state after the step, ``tau_prev`` (first ``k`` entries) ``tau_ext`` before it [N m],
    ``dt`` [s]."""
    k = x.shape[0] // 2
    ss = 0.0
    for a in range(k):
        d = x[k + a] - tau_prev[a]
        ss += d * d
    return math.sqrt(ss) / dt


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
    (:meth:`.velocity.BaseVelocityFilter.correct`): :func:`vel_soft_gating` of the feet, then one
    :func:`vel_update` with their weighted mean. ``v`` (3,) base velocity [m/s, world], ``P``
    (3, 3) its covariance [(m/s)^2]; ``z`` ``(L, 3)`` per-foot velocity measurements [m/s, world],
    ``usable`` feet corrected with, ``evaluate`` feet whose ``d2`` is computed
    (``usable | support``); ``r = sigma_meas^2`` [(m/s)^2]; writes ``d2`` (NaN when not
    evaluated), ``inflation`` (``clip(d2 / gate, 1, cap)`` if ``gating`` else 1) and ``used``.
    Returns ``OK`` or ``SINGULAR`` (``v``, ``P`` untouched then)."""
    ok, wsum, zb0, zb1, zb2 = vel_soft_gating(v, P, z, usable, evaluate, r, gate, cap, gating, d2, inflation,
                                              used)
    if not ok:
        return SINGULAR
    if wsum == 0.0:
        return OK
    # all feet measure the same state (H = I): one update with the information-weighted mean
    if not vel_update(v, P, r / wsum, zb0 / wsum, zb1 / wsum, zb2 / wsum):
        return SINGULAR
    return OK


@njit(**INLINED)
def vel_soft_gating(v, P, z, usable, evaluate, r, gate, cap, gating, d2, inflation, used):
    """Chi-square soft gating of the feet's velocity measurements (arguments as :func:`vel_correct`):
    with ``S = P + r I`` and the residual ``e_i = z_i - v``, ``d2_i = e_i^T S^-1 e_i`` (Mahalanobis
    distance squared, chi-square with 3 DoF) for the ``evaluate`` feet, the measurement noise of
    foot ``i`` inflated by ``c_i = clip(d2_i / gate, 1, cap)`` (1 without ``gating``). Writes
    ``d2``, ``inflation``, ``used = usable``; returns ``(ok, sum of 1 / c_i, sum of z_i / c_i)``
    over the usable feet (the latter as 3 floats [m/s]). ``ok`` False: ``S`` singular, nothing
    written."""
    p0, p1, p2 = P[0, 0], P[0, 1], P[0, 2]
    p3, p4, p5 = P[1, 0], P[1, 1], P[1, 2]
    p6, p7, p8 = P[2, 0], P[2, 1], P[2, 2]
    v0, v1, v2 = v[0], v[1], v[2]
    ok, s0, s1, s2, s3, s4, s5, s6, s7, s8 = _inv3(p0 + r, p1, p2, p3, p4 + r, p5, p6, p7, p8 + r)
    if not ok:
        return False, 0.0, 0.0, 0.0, 0.0
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
    return True, wsum, zb0, zb1, zb2


@njit(**INLINED)
def vel_update(v, P, rho, m0, m1, m2):
    """Kalman update of the base velocity ``v`` (3,) [m/s, world] and its covariance ``P`` (3, 3)
    [(m/s)^2], in place, with one measurement ``m = (m0, m1, m2)`` [m/s, world] of ``v`` itself
    (``H = I``) of noise ``rho I`` [(m/s)^2]: ``K = P (P + rho I)^-1``, ``v += K (m - v)``,
    ``P = (I - K) P (I - K)^T + rho K K^T`` (Joseph form), symmetrized. Returns False (``v``,
    ``P`` untouched) if ``P + rho I`` is singular."""
    p = (P[0, 0], P[0, 1], P[0, 2], P[1, 0], P[1, 1], P[1, 2], P[2, 0], P[2, 1], P[2, 2])
    v0, v1, v2 = v[0], v[1], v[2]
    e0, e1, e2 = m0 - v0, m1 - v1, m2 - v2
    ok, g0, g1, g2, g3, g4, g5, g6, g7, g8 = _inv3(p[0] + rho, p[1], p[2], p[3], p[4] + rho, p[5], p[6], p[7],
                                                   p[8] + rho)
    if not ok:
        return False
    K = _mm3(p, (g0, g1, g2, g3, g4, g5, g6, g7, g8))
    v[0] = v0 + (K[0] * e0 + K[1] * e1 + K[2] * e2)
    v[1] = v1 + (K[3] * e0 + K[4] * e1 + K[5] * e2)
    v[2] = v2 + (K[6] * e0 + K[7] * e1 + K[8] * e2)
    A = (1.0 - K[0], -K[1], -K[2], -K[3], 1.0 - K[4], -K[5], -K[6], -K[7], 1.0 - K[8])     # I - K
    APA = _mm3(_mm3(A, p), _tr3(A))
    KK = _mm3(K, _tr3(K))
    q0, q1, q2 = APA[0] + rho * KK[0], APA[1] + rho * KK[1], APA[2] + rho * KK[2]
    q3, q4, q5 = APA[3] + rho * KK[3], APA[4] + rho * KK[4], APA[5] + rho * KK[5]
    q6, q7, q8 = APA[6] + rho * KK[6], APA[7] + rho * KK[7], APA[8] + rho * KK[8]
    q01, q02, q12 = 0.5 * (q1 + q3), 0.5 * (q2 + q6), 0.5 * (q5 + q7)
    P[0, 0], P[0, 1], P[0, 2] = q0, q01, q02
    P[1, 0], P[1, 1], P[1, 2] = q01, q4, q12
    P[2, 0], P[2, 1], P[2, 2] = q02, q12, q8
    return True


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
    the unfiltered support-foot base height [m] (NaN with no support foot).

    The steps: :func:`base_orientation`, :func:`imu_at_base`, 1. :func:`touchdown_step`,
    2. :func:`support_set`, 3. :func:`velocity_step`, 4. :func:`base_height`, 5. :func:`tick_outputs`."""
    w = ws[0]
    n = w.q.shape[0] - 7
    quat, R = base_orientation(w.sample, 3 * n)
    om, acc, f = imu_at_base(w, first, step)
    if not touchdown_step(w, phase, cycle, om, acc, f, R, first, step):
        return SINGULAR, math.nan
    support = w.support.view(np.bool_)
    support_set(phase, w.td_late, w.td_touch.view(np.bool_), w.nominal.view(np.bool_), support)
    if velocity_step(w, support, p_foot, v_rel, om, f, R, first, dt, step) != OK:
        return SINGULAR, math.nan
    pz, h_raw = base_height(w, support, p_foot, R, first, step, height_init)
    tick_outputs(w, quat, om, R, pz, first, step)
    return OK, h_raw


@njit(**INLINED)
def base_orientation(buf, o):
    """The IMU quaternion ``buf[o:o + 4]`` (``xyzw``, base -> world) normalized, and the rotation
    matrix base -> world ``R`` as a row-major 9-tuple: ``((qx, qy, qz, qw), R)``."""
    qx, qy, qz, qw = buf[o], buf[o + 1], buf[o + 2], buf[o + 3]
    qn = math.sqrt(qx * qx + qy * qy + qz * qz + qw * qw)
    qx, qy, qz, qw = qx / qn, qy / qn, qz / qn, qw / qn
    R = (1 - 2 * (qy * qy + qz * qz), 2 * (qx * qy - qz * qw), 2 * (qx * qz + qy * qw),
         2 * (qx * qy + qz * qw), 1 - 2 * (qx * qx + qz * qz), 2 * (qy * qz - qx * qw),
         2 * (qx * qz - qy * qw), 2 * (qy * qz + qx * qw), 1 - 2 * (qx * qx + qy * qy))
    return (qx, qy, qz, qw), R


@njit(**INLINED)
def imu_at_base(w, first, step):
    """The IMU sample of the record ``w`` moved to the base origin, base frame: ``(gyro [rad/s],
    angular acceleration [rad/s^2], specific force [m/s^2])``, each a 3-tuple. The angular
    acceleration is the gyro's difference to the previous sample (``st[3:6]``) over ``step`` [s], 0
    on the first sample; with the IMU at ``imu_r`` [m] off the origin (``imu_offset``) the specific
    force loses the lever arm's ``alpha x r + w x (w x r)``."""
    buf, st = w.sample, w.st
    o = 3 * (w.q.shape[0] - 7) + 4                  # the gyro's offset in the sample (sample_layout)
    wx, wy, wz = buf[o], buf[o + 1], buf[o + 2]
    fx, fy, fz = buf[o + 3], buf[o + 4], buf[o + 5]
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
    return (wx, wy, wz), (ax_, ay_, az_), (fx, fy, fz)


@njit(**INLINED)
def touchdown_step(w, phase, cycle, om, acc, f, R, first, step):
    """1. The touchdown detector of every leg on the record ``w``: the legs' applied torques [N m]
    and joint velocities [rad/s] from the sample, the leg bias (plus ``M_iB a_B`` from the IMU,
    :func:`base_acceleration`, with ``base_coupling``), the Kalman filters (:func:`td_filter`; on
    the first sample only the scores, 0) and the touchdown decision (:func:`td_detect`). ``om``,
    ``acc``, ``f``, ``R`` from :func:`imu_at_base` and :func:`base_orientation`; ``step`` [s].
    Returns False if a filter's matrix was singular (the landing test not run then)."""
    leg_j, buf, td_score = w.leg_j, w.sample, w.td_score
    tau_leg, dq_leg = w.tau_leg, w.dq_leg
    L, k = leg_j.shape
    n = w.q.shape[0] - 7
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
            base_acceleration(w, om, acc, f, R)
            coupled_bias(w.h_leg, w.M_lb, w.a_b, w.h_cpl)
            h = w.h_cpl
        if td_filter(w.td_x, w.td_P, w.M_inv, tau_leg, h, dq_leg, step, w.dt_nom, w.td_q_diag, w.td_r, td_score,
                     w.td_work) != OK:
            return False
    td_detect(phase, cycle, td_score, LandingTest(w.gamma, w.n_land, w.late_max), w.td_touch.view(np.bool_),
              w.td_count, w.td_latched, w.td_prev_phase, w.td_prev_cycle, w.td_late, w.td_event)
    return True


@njit(**INLINED)
def base_acceleration(w, om, acc, f, R):
    """The base's spatial acceleration ``a_B`` into ``w.a_b`` (Pinocchio's base-frame convention,
    linear [m/s^2] then angular [rad/s^2]): the specific force plus gravity in the base frame
    ``f + R^T g`` less ``w x v_B`` (``v_B`` the previous sample's base velocity, ``st[6:9]``),
    and the angular acceleration ``acc``. ``om`` the gyro [rad/s]; ``R`` base -> world."""
    st, a_b, g_z = w.st, w.a_b, w.g_z
    wx, wy, wz = om
    vx, vy, vz = st[6], st[7], st[8]
    a_b[0] = f[0] + g_z * R[6] - (wy * vz - wz * vy)
    a_b[1] = f[1] + g_z * R[7] - (wz * vx - wx * vz)
    a_b[2] = f[2] + g_z * R[8] - (wx * vy - wy * vx)
    a_b[3], a_b[4], a_b[5] = acc


@njit(**INLINED)
def support_set(phase, late, touchdown, nominal, support):
    """2. The estimated support set ``(L,)``: ``nominal`` the gait's support phase, ``support`` a
    nominal support leg that is not late (``late`` > 0: kept out until its contact is seen) or a
    leg whose touchdown was detected."""
    for i in range(phase.shape[0]):
        nominal[i] = phase[i] == SUPPORT
        support[i] = (nominal[i] and late[i] == 0) or touchdown[i]


@njit(**INLINED)
def velocity_step(w, support, p_foot, v_rel, om, f, R, first, dt, step):
    """3. The base-velocity filter on the record ``w``: prediction with the IMU
    (``a_world = R f + g``, skipped on the first sample or with ``dt`` = 0), the support feet's
    exclusion counters (:func:`vel_reliable`), the feet's velocity measurements
    (:func:`leg_velocity_measurements`) and the soft-gated correction (:func:`vel_correct`).
    ``support`` ``(L,)``; ``p_foot``, ``v_rel``, ``om``, ``f``, ``R`` as :func:`estimator_tick`,
    :func:`imu_at_base`, :func:`base_orientation`; ``dt``, ``step`` [s]. Returns ``OK`` or
    ``SINGULAR``."""
    if not first and dt > 0:
        vel_predict(w.vf_v, w.vf_P, R[0] * f[0] + R[1] * f[1] + R[2] * f[2],
                    R[3] * f[0] + R[4] * f[1] + R[5] * f[2], R[6] * f[0] + R[7] * f[1] + R[8] * f[2] + w.g_z,
                    step, w.dt_nom, w.vf_q)
    used, vf_cycles = w.used.view(np.bool_), w.vf_cycles
    vel_reliable(support, w.vf_prev_support.view(np.bool_), vf_cycles, w.n_ex, vf_cycles, used,
                 w.excluded.view(np.bool_))
    leg_velocity_measurements(p_foot, v_rel, om, R, w.z)
    return vel_correct(w.vf_v, w.vf_P, w.z, used, support, w.vf_r, w.gate, w.cap, w.gating, w.d2, w.inflation,
                       used)


@njit(**INLINED)
def leg_velocity_measurements(p_foot, v_rel, om, R, z):
    """Each foot's measurement of the base velocity, assuming the foot at rest in the world:
    ``z_i = R (-(w x p_i) - J_p,i dq_i)`` ``(L, 3)`` [m/s, world] from the foot points ``p_foot``
    [m] and ``v_rel = J_p dq`` [m/s] in the base frame, the gyro ``om`` [rad/s], ``R`` base -> world."""
    wx, wy, wz = om
    for i in range(p_foot.shape[0]):
        px, py, pz = p_foot[i, 0], p_foot[i, 1], p_foot[i, 2]
        # p x w - J_p dq (base frame), then to the world
        bx = (py * wz - pz * wy) - v_rel[i, 0]
        by = (pz * wx - px * wz) - v_rel[i, 1]
        bz = (px * wy - py * wx) - v_rel[i, 2]
        z[i, 0] = bx * R[0] + by * R[1] + bz * R[2]
        z[i, 1] = bx * R[3] + by * R[4] + bz * R[5]
        z[i, 2] = bx * R[6] + by * R[7] + bz * R[8]


@njit(**INLINED)
def base_height(w, support, p_foot, R, first, step, height_init):
    """4. The base height [m]: the raw height ``foot_radius - mean_i (R p_i)_z`` over the support
    feet (NaN with none), low-passed (``alpha_nom`` at the nominal step, else from ``cutoff_hz``
    and ``step`` [s]), integrated from the velocity filter's ``v_z`` with no support foot; on the
    first sample ``height_init`` (NaN: the raw height, 0 with no support foot). Returns
    ``(height, raw height)``; the previous height is ``st[2]``."""
    pz = w.st[2]
    n_sup = 0
    zsum = 0.0
    for i in range(support.shape[0]):
        if support[i]:
            n_sup += 1
            zsum += p_foot[i, 0] * R[6] + p_foot[i, 1] * R[7] + p_foot[i, 2] * R[8]
    h_raw = w.foot_radius - zsum / n_sup if n_sup else math.nan
    if first:
        if not math.isnan(height_init):
            pz = height_init
        else:
            pz = h_raw if n_sup else 0.0
    elif n_sup:
        alpha = w.alpha_nom if step == w.dt_nom else 1.0 - math.exp(-2.0 * math.pi * w.cutoff_hz * step)
        pz += alpha * (h_raw - pz)
    else:
        pz += step * w.vf_v[2]
    return pz, h_raw


@njit(**INLINED)
def tick_outputs(w, quat, om, R, pz, first, step):
    """5. The base position ``x``, ``y`` [m] integrated from the filtered world velocity over
    ``step`` [s] (not on the first sample), the height ``pz`` [m]; writes the outputs ``q``, ``v``
    (base velocity ``R^T v_world`` in the base frame [m/s], gyro ``om`` [rad/s], the joints from the
    sample), ``v_world`` and the state carried to the next cycle ``st`` (position, gyro, base
    velocity in the base frame)."""
    st, buf, q_out, v_out, vf_v = w.st, w.sample, w.q, w.v, w.vf_v
    n = q_out.shape[0] - 7
    vwx, vwy, vwz = vf_v[0], vf_v[1], vf_v[2]
    px, py = st[0], st[1]
    if not first:
        px += step * vwx
        py += step * vwy
    vbx = R[0] * vwx + R[3] * vwy + R[6] * vwz
    vby = R[1] * vwx + R[4] * vwy + R[7] * vwz
    vbz = R[2] * vwx + R[5] * vwy + R[8] * vwz
    q_out[0], q_out[1], q_out[2] = px, py, pz
    q_out[3], q_out[4], q_out[5], q_out[6] = quat
    v_out[0], v_out[1], v_out[2] = vbx, vby, vbz
    v_out[3], v_out[4], v_out[5] = om
    for j in range(n):
        q_out[7 + j] = buf[j]
        v_out[6 + j] = buf[n + j]
    v_world = w.v_world
    v_world[0], v_world[1], v_world[2] = vwx, vwy, vwz
    st[0], st[1], st[2] = px, py, pz
    st[3], st[4], st[5] = om
    st[6], st[7], st[8] = vbx, vby, vbz


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
