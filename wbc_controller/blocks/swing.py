"""Swing legs (paper sec. 4.2, our swing planner): body-relative swing paths (base frame; cubic
Hermite horizontally, quintic blend plus a lift bump vertically), the swings that begin at a
lift-off (Raibert touchdown target), and the swing PD torques (projected so they do not
accelerate the relative pitch). Positions [m], velocities [m/s], accelerations [m/s^2]."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit

from legged_wbc.jit import announce_compiles

from legged_wbc.gait import SUPPORT, SWING_UP

announce_compiles(__name__)          # one line on stderr if this process has to compile a kernel

SWING_WORK = 60         # scratch size (floats) of swing_torques
LATE_GAIN = 20.0        # velocity gain of a late leg's descent (its task acceleration) [1/s]
STEP_TOLERANCE = 0.03   # a swing starting this far above its target or less gets the plain lift height [m]
FOOTHOLD_TOLERANCE = 0.02   # a last foothold this far below the nominal target or less is ignored [m]
RISE_TOLERANCE = 0.01   # a foothold this much higher than the last one or less adds no lift [m]
STUMBLE_ERROR = 0.03    # a lifting swing foot this far (horizontally) behind its reference has met an obstacle [m]
STUMBLE_SWINGS = 6      # each leg's swings after a stumble (of any leg) that have the raised lift
STUMBLE_RETRACT = 0.02  # a stumbling foot's horizontal reference backs off this far from where it is held [m]
STUMBLE_DELAY = 0.5     # ... and holds there up to this swing progress (the apex), then goes on to the target


class SwingPlan(NamedTuple):
    """The swing plan of every leg (kernels update it in place): the gait cycle of the last
    planned swing, its start point and velocity, target point and end velocity (base frame),
    duration [s], whether a swing was planned, and its extra lift [m]."""

    cycle: np.ndarray       # (N,) int64
    start: np.ndarray       # (N, 3)
    target: np.ndarray      # (N, 3)
    v_start: np.ndarray     # (N, 3)
    v_end: np.ndarray       # (N, 3)
    duration: np.ndarray    # (N,)
    planned: np.ndarray     # (N,) bool
    lift: np.ndarray        # (N,) extra lift of the swing from the last footholds' rise [m] (:func:`start_swings`)
    stumble: np.ndarray     # (N,) swings left with the stumble lift (:func:`stumble_reflex`; > 0: this one has it)
    delay: np.ndarray       # (N,) swing progress up to which the horizontal path holds its start (0; a stumble's)


@njit(cache=True)
def swing_reference(start, target, v_start, v_end, T, u, lift, delay, P, V, A):
    """One foot's swing reference at progress ``u`` (clipped to [0, 1]) into ``P``, ``V``, ``A``
    (base frame; as :class:`SwingPlanner`, its numpy reference). The horizontal path holds
    ``start`` up to progress ``delay`` and runs in the rest of the swing (``delay`` 0: the whole)."""
    u = min(max(u, 0.0), 1.0)
    uh = 0.0 if u <= delay else (u - delay) / (1.0 - delay)
    Th = T * (1.0 - delay)
    u2, u3 = uh * uh, uh * uh * uh
    h0, h1, h2, h3 = 2 * u3 - 3 * u2 + 1, u3 - 2 * u2 + uh, -2 * u3 + 3 * u2, u3 - u2
    d0, d1 = (6 * u2 - 6 * uh) / Th, (3 * u2 - 4 * uh + 1) / Th
    d2, d3 = (-6 * u2 + 6 * uh) / Th, (3 * u2 - 2 * uh) / Th
    T2 = Th**2
    a0, a1, a2, a3 = (12 * uh - 6) / T2, (6 * uh - 4) / T2, (-12 * uh + 6) / T2, (6 * uh - 2) / T2
    for c in range(2):
        p0, m0, p1, m1 = start[c], v_start[c] * Th, target[c], v_end[c] * Th
        P[c] = 0.0 + h0 * p0 + h1 * m0 + h2 * p1 + h3 * m1
        V[c] = 0.0 + d0 * p0 + d1 * m0 + d2 * p1 + d3 * m1
        A[c] = 0.0 + a0 * p0 + a1 * m0 + a2 * p1 + a3 * m1
    u2, u3, T2 = u * u, u * u * u, T**2
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
def foothold_height(z_liftoff, z_touchdown, depth):
    """Target height [m, base frame] of a swing lifting off at height ``z_liftoff``: the nominal
    ``z_touchdown`` (the support plane's, the base being aligned with it), or, if the foot's own
    last foothold lies more than :data:`FOOTHOLD_TOLERANCE` below it (a hollow, a step down, the
    foot of a slope under the plane through the other feet), that foothold's height less ``depth``
    (the next foothold, one step ahead, is expected near the last one; higher ground is met by the
    early-touchdown detection)."""
    low = z_liftoff - depth
    return low if low < z_touchdown - FOOTHOLD_TOLERANCE else z_touchdown


@njit(cache=True)
def rise_lift(z_liftoff, z_last_liftoff, planned):
    """Extra lift [m] of a swing from the rise of the foot's footholds: how much higher (base frame)
    it lifts off now than at its previous swing, beyond :data:`RISE_TOLERANCE` (a foot that has
    just stepped up, onto a tread or after catching a riser, lifts the next step higher; 0 on flat
    ground and on an even slope, where the base follows the plane)."""
    return max(0.0, z_liftoff - z_last_liftoff - RISE_TOLERANCE) if planned else 0.0


@njit(cache=True)
def swing_lift(start, target, lift):
    """The lift height [m] of a swing from ``start`` to ``target`` (base frame): ``lift``, plus how far
    the foot starts above its target beyond :data:`STEP_TOLERANCE` (a foot that stands on higher
    ground than its nominal target, a step's tread or edge, a bump: the apex then clears its start
    by about ``lift``; on flat ground the start is ``touchdown_depth`` above the target and the lift
    is ``lift``)."""
    return lift + max(0.0, start[2] - target[2] - STEP_TOLERANCE)


@njit(cache=True)
def stumble_reflex(i, p, v_p, Pr, plan, stumble_lift):
    """The stumble reflex of leg ``i`` lifting its foot (swing-up): a foot ``p`` more than
    :data:`STUMBLE_ERROR` behind its reference ``Pr`` horizontally (base frame) is held by an
    obstacle (a riser, a bump's flank; on free swings the lag is a few mm). The foot backs off: its
    horizontal path restarts :data:`STUMBLE_RETRACT` behind where it is held (away from its target),
    holds there up to the swing's apex (:data:`STUMBLE_DELAY`) and then runs to the target (a foot
    pushed on against a riser wedges there by friction); the swing's lift grows by ``stumble_lift``
    unless it has it already (the apex rises, the foot climbs over the obstacle), and every leg's
    next :data:`STUMBLE_SWINGS` swings get it (the ground ahead is likely as high: the next riser,
    the same obstacle for the legs behind; :func:`start_swings`). Returns whether the plan changed
    (then the reference is to be recomputed)."""
    if stumble_lift <= 0.0:
        return False
    ex, ey = Pr[0] - p[0], Pr[1] - p[1]
    if ex * ex + ey * ey <= STUMBLE_ERROR * STUMBLE_ERROR or ex * v_p[0] + ey * v_p[1] > 0.0:
        return False
    for k in range(plan.stumble.shape[0]):
        plan.stumble[k] = STUMBLE_SWINGS + 1.0   # decremented as each swing starts: > 0 then, raised
    changed = False
    if STUMBLE_DELAY > 0.0 and plan.delay[i] <= 0.0:     # not backed off yet in this swing
        dx, dy = plan.target[i, 0] - p[0], plan.target[i, 1] - p[1]
        r = max((dx * dx + dy * dy) ** 0.5, 1e-9)
        plan.start[i, 0] = p[0] - STUMBLE_RETRACT * dx / r
        plan.start[i, 1] = p[1] - STUMBLE_RETRACT * dy / r
        plan.v_start[i, 0] = 0.0
        plan.v_start[i, 1] = 0.0
        plan.delay[i] = STUMBLE_DELAY
        changed = True
    if plan.lift[i] < stumble_lift:
        plan.lift[i] += stumble_lift
        changed = True
    return changed


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


@njit(cache=True, inline="always")
def swing_begins(i, phases, cycles, p, par, plan):
    """Whether leg ``i`` begins a swing this cycle (out of nominal support in a gait cycle other than
    the one last planned); if so, its bookkeeping: the cycle, the extra lift from the footholds' rise
    (:func:`rise_lift`) and the stumble lift (:func:`stumble_reflex`)."""
    if phases[i] == SUPPORT or cycles[i] == plan.cycle[i]:
        return False
    stumble, sw_lift = plan.stumble, plan.lift
    plan.cycle[i] = cycles[i]
    sw_lift[i] = rise_lift(p[i, 2], plan.start[i, 2], plan.planned[i])
    if stumble[i] > 0.0:        # a recent swing met an obstacle: raised lift
        if sw_lift[i] > 0.0:    # and this foot has stepped up since: every leg keeps it longer
            for k in range(stumble.shape[0]):
                stumble[k] = STUMBLE_SWINGS + 1.0
        stumble[i] -= 1.0
        if stumble[i] > 0.0:
            sw_lift[i] = max(sw_lift[i], par.stumble_lift)
    return True


@njit(cache=True, inline="always")
def swing_planned(i, p, par, plan):
    """The rest of leg ``i``'s new swing plan: target height (:func:`foothold_height`), vertical end
    velocities zero, no delay, ``swing_duration``."""
    plan.target[i, 2] = foothold_height(p[i, 2], par.z_touchdown, par.touchdown_depth)
    plan.v_start[i, 2] = 0.0
    plan.v_end[i, 2] = 0.0
    plan.delay[i] = 0.0
    plan.duration[i] = par.swing_duration
    plan.planned[i] = True


@njit(cache=True)
def start_swings(phases, cycles, legs, R, ref_v, par, plan):
    """Plan the swings that begin this cycle (a leg out of nominal support in a gait cycle other
    than the one last planned, ``swing_cycle``): from the foot point ``p`` and velocity ``v_p``
    (base frame) to the nominal stance point at height ``z_touchdown`` [m] (lower if the foot lifts off
    from lower ground: :func:`foothold_height`), moved by the Raibert
    offset ``raibert_gain * v_body * support_duration`` (``v_body = R^T v_ref``), reached at ground
    speed ``-v_body`` after ``swing_duration`` [s]; as :meth:`SwingPlanner.begin` (vertical
    end velocities zero). Returns the number of swings started. ``legs``: :class:`LegBatch`;
    ``plan``: :class:`SwingPlan` (updated); ``par`` fields: ``stance_p`` (N, 3), ``z_touchdown``, ``touchdown_depth``,
    ``raibert_gain``, ``support_duration``, ``swing_duration``."""
    p, v_p, stance_p = legs.p, legs.v_p, par.stance_p
    raibert_gain, support_duration = par.raibert_gain, par.support_duration
    sw_start, sw_target, sw_v_start, sw_v_end = plan.start, plan.target, plan.v_start, plan.v_end
    started = 0
    for i in range(phases.shape[0]):
        if not swing_begins(i, phases, cycles, p, par, plan):
            continue
        for r in range(3):
            vb = R[0, r] * ref_v[0] + R[1, r] * ref_v[1] + R[2, r] * ref_v[2]
            sw_target[i, r] = stance_p[i, r]
            if r < 2:
                sw_target[i, r] += raibert_gain * vb * support_duration
            sw_start[i, r] = p[i, r]
            sw_v_start[i, r] = v_p[i, r]
            sw_v_end[i, r] = -vb
        swing_planned(i, p, par, plan)
        started += 1
    return started


@njit(cache=True, inline="always")
def command_foothold(rx, ry, vx, vy, wz, k, T):
    """Touchdown point (base frame, horizontal) of a foot whose nominal stance point is ``(rx, ry)``
    under the base twist ``(vx, vy, wz)`` [m/s, rad/s] (base frame), for the Raibert gain ``k`` and
    the support duration ``T`` [s]: ``p = Rz(phi) r + k T (S v + C z x v)``, ``phi = k wz T``,
    ``S = sin(phi) / phi``, ``C = (1 - cos(phi)) / phi`` (1 and 0 at ``phi = 0``).

    Derivation: a world-fixed foot seen from a base moving at the constant twist turns about the
    instantaneous centre ``c = z x v / wz`` by ``-wz t``: ``p(t) = c + Rz(-wz t) (p_td - c)``. Asking it
    to pass the stance point ``r`` after ``k T`` (``k = 1/2``: the hip is over it at mid-stance) gives
    ``p_td = c + Rz(phi) (r - c)``, which is the form above (regular at ``wz = 0``, where it is the
    linear Raibert rule ``r + k T v``; to first order in ``phi`` it is ``r + k T (v + w x r)``, the
    hip's velocity). Returns ``(x, y)``."""
    phi = k * wz * T
    if phi != 0.0:
        sn, cs = math.sin(phi), math.cos(phi)
        S, C = sn / phi, (1.0 - cs) / phi
    else:
        sn, cs, S, C = 0.0, 1.0, 1.0, 0.0
    kT = k * T
    return (cs * rx - sn * ry + kT * (S * vx - C * vy), sn * rx + cs * ry + kT * (S * vy + C * vx))


@njit(cache=True)
def start_swings_command(phases, cycles, legs, R, ref_v, wz, v_base, par, plan):
    """:func:`start_swings` under a velocity command (base twist ``v_body = R^T v_ref`` and the yaw
    rate ``wz`` [rad/s]): the target is :func:`command_foothold` of the stance point plus the
    velocity-error correction ``foothold_velocity_gain (v_B - v_body)`` (``v_base``: the estimated
    base velocity, base frame [m/s]), reached at the ground speed there, ``-(v_body + wz z x
    p_target)``. Returns the number of swings started."""
    p, v_p, stance_p = legs.p, legs.v_p, par.stance_p
    k, T, kv = par.raibert_gain, par.support_duration, par.foothold_velocity_gain
    sw_start, sw_target, sw_v_start, sw_v_end = plan.start, plan.target, plan.v_start, plan.v_end
    vb0 = R[0, 0] * ref_v[0] + R[1, 0] * ref_v[1] + R[2, 0] * ref_v[2]
    vb1 = R[0, 1] * ref_v[0] + R[1, 1] * ref_v[1] + R[2, 1] * ref_v[2]
    started = 0
    for i in range(phases.shape[0]):
        if not swing_begins(i, phases, cycles, p, par, plan):
            continue
        x, y = command_foothold(stance_p[i, 0], stance_p[i, 1], vb0, vb1, wz, k, T)
        sw_target[i, 0] = x + kv * (v_base[0] - vb0)
        sw_target[i, 1] = y + kv * (v_base[1] - vb1)
        sw_v_end[i, 0] = -(vb0 - wz * sw_target[i, 1])
        sw_v_end[i, 1] = -(vb1 + wz * sw_target[i, 0])
        for r in range(3):
            sw_start[i, r] = p[i, r]
            sw_v_start[i, r] = v_p[i, r]
        swing_planned(i, p, par, plan)
        started += 1
    return started


@njit(cache=True, inline="always")
def is_late(planned, phase, late_descent):
    """A leg out of the support set is late (a late touchdown): its planned swing is over (its nominal
    ``phase`` back at ``SUPPORT``) and it is kept descending (``late_descent`` > 0 [m/s]). The one
    test of :func:`swing_torques`' late branch and of the CBF's landing legs (``cbf.barrier_legs``)."""
    return planned != 0 and phase == SUPPORT and late_descent > 0.0


@njit(cache=True, inline="always")
def late_descent_reference(i, p, v_p, v_end, late_descent, Pr, Vr, Ar):
    """Leg ``i`` after its nominal swing (a late touchdown; feet at ``p`` moving at ``v_p``, swing
    end velocities ``v_end``, (N, 3) each) keeps descending at ``late_descent`` [m/s]: velocity
    reference ``(v_end_x, v_end_y, -late_descent)`` reached through the task acceleration
    ``LATE_GAIN (v_ref - v_p)``, position reference where the foot is."""
    Vr[0], Vr[1], Vr[2] = v_end[i, 0], v_end[i, 1], -late_descent
    for c in range(3):
        Pr[c] = p[i, c]
        Ar[c] = LATE_GAIN * (Vr[c] - v_p[i, c])


@njit(cache=True, inline="always")
def hold_reference(i, p, Pr, Vr, Ar):
    """Leg ``i`` holds its foot where it is (``p``, (N, 3)): zero velocity and acceleration references."""
    for c in range(3):
        Pr[c] = p[i, c]
        Vr[c] = 0.0
        Ar[c] = 0.0


@njit(cache=True, inline="always")
def swing_pd_torque(i, p, v_p, J, Pr, Vr, kp, kd, f, t_sw):
    """Leg ``i``'s swing PD (feet at ``p`` moving at ``v_p``, leg Jacobians ``J``): the foot force
    ``f = K_p (Pr - p) + K_d (Vr - v_p)`` (base frame) and its joint torques ``t_sw = J_p^T f`` (k)."""
    for c in range(3):
        f[c] = kp[c] * (Pr[c] - p[i, c]) + kd[c] * (Vr[c] - v_p[i, c])
    for k in range(J.shape[2]):
        t_sw[k] = J[i, 0, k] * f[0] + J[i, 1, k] * f[1] + J[i, 2, k] * f[2]


@njit(cache=True, inline="always")
def pitch_projection(i, J, M, leg_v, t_sw, Jt, Minv_Jt, Mll, lu):
    """Remove from leg ``i``'s torques ``t_sw`` (4, in place) the part that would accelerate its
    relative pitch: ``t' = t - J_th (J_th M_ll^-1 t) / (J_th M_ll^-1 J_th)`` with the leg block
    ``M_ll`` of ``M`` (rows and columns ``leg_v[i]``); unchanged if ``J_th M_ll^-1 J_th`` <= 1e-12.
    ``Jt``, ``Minv_Jt`` (4), ``Mll`` (4, 4), ``lu`` (4, 5): scratch."""
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


@njit(cache=True)
def swing_torques(support, phases, progress, plan, legs, M, par, b, tau_sw, work):
    """Swing-leg PD torques ``tau_sw`` (n) of the legs outside the support set, and their swing
    feed-forward accelerations added to ``b[:, :3]``.

    A leg out of the support set in a nominal swing tracks its planned path (base frame,
    :func:`swing_reference`; evaluated again when the :func:`stumble_reflex` of a lifting foot
    changed the plan); after its nominal swing (a late touchdown: the estimator keeps it out of the
    support set until it sees the contact) it keeps descending at ``late_descent`` [m/s]
    (:func:`late_descent_reference`); with ``late_descent`` 0, or before any planned swing, it holds
    the foot where it is (:func:`hold_reference`). ``tau = J_p^T (K_p (p_ref - p) + K_d (v_ref -
    v_p))`` (:func:`swing_pd_torque`); with ``projection`` the part that would accelerate theta is
    removed with the leg block ``M_ll`` of the mass matrix: ``tau' = tau - J_th (J_th M_ll^-1 tau) /
    (J_th M_ll^-1 J_th)`` (:func:`pitch_projection`). ``work``: scratch of ``SWING_WORK`` floats (no
    allocation in the kernel). ``plan``: :class:`SwingPlan`; ``legs``: :class:`LegBatch`; ``par``
    fields: ``lift_height``, ``leg_v``, ``leg_j``, ``kp_swing``, ``kd_swing`` (3 each),
    ``projection``, ``late_descent``, ``stumble_lift``.

    The steps take the leg's index and arrays, not the :class:`LegBatch` / :class:`SwingPlan`
    tuples (handing a tuple of arrays to a kernel once per leg made this one 10-30 % slower), and
    are inlined (``inline="always"``: without, a few % slower than the kernel in one piece)."""
    p, v_p, J = legs.p, legs.v_p, legs.J
    planned, sw_start, sw_target, sw_v_start = plan.planned, plan.start, plan.target, plan.v_start
    sw_v_end, sw_duration = plan.v_end, plan.duration
    lift, leg_v, leg_j, kp, kd, projection = par.lift_height, par.leg_v, par.leg_j, par.kp_swing, par.kd_swing, par.projection
    late_descent, stumble_lift = par.late_descent, par.stumble_lift
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
                            swing_lift(sw_start[i], sw_target[i], lift) + plan.lift[i], plan.delay[i], Pr, Vr, Ar)
            if phases[i] == SWING_UP and stumble_reflex(i, p[i], v_p[i], Pr, plan, stumble_lift):
                swing_reference(sw_start[i], sw_target[i], sw_v_start[i], sw_v_end[i], sw_duration[i], progress[i],
                                swing_lift(sw_start[i], sw_target[i], lift) + plan.lift[i], plan.delay[i], Pr, Vr,
                                Ar)
        elif is_late(planned[i], phases[i], late_descent):   # late touchdown: keep descending at ground speed
            late_descent_reference(i, p, v_p, sw_v_end, late_descent, Pr, Vr, Ar)
        else:
            hold_reference(i, p, Pr, Vr, Ar)
        for c in range(3):
            b[i, c] += Ar[c]
        swing_pd_torque(i, p, v_p, J, Pr, Vr, kp, kd, f, t_sw)
        if projection and J.shape[2] == 4:      # legs with the foot pitch joint (a 3-joint leg has no pitch)
            pitch_projection(i, J, M, leg_v, t_sw, Jt, Minv_Jt, Mll, lu)
        for k in range(J.shape[2]):
            tau_sw[leg_j[i, k]] = t_sw[k]


class SwingPlanner:
    """Body-relative swing paths of all feet (base frame), evaluated together.

    A swing goes from the lift-off position/velocity to a touchdown target reached with the end
    velocity ``v_end`` (``-v_body``: the foot lands at ground speed, no tangential impact).
    Horizontal: cubic Hermite. Vertical: quintic blend plus a ``16 s^2 (1-s)^2`` bump of the lift
    height. Positions [m], velocities [m/s], accelerations [m/s^2]."""

    def __init__(self, n_legs: int):
        self.cycle = -np.ones(n_legs, dtype=np.int64)   # gait cycle of each leg's last planned swing
        self.start = np.zeros((n_legs, 3))
        self.target = np.zeros((n_legs, 3))
        self.v_start = np.zeros((n_legs, 3))
        self.v_end = np.zeros((n_legs, 3))
        self.duration = np.ones(n_legs)
        self.planned = np.zeros(n_legs, dtype=bool)
        self.lift = np.zeros(n_legs)                    # extra lift of each swing [m] (rise_lift)
        self.stumble = np.zeros(n_legs)                 # swings left with the stumble lift (stumble_reflex)
        self.delay = np.zeros(n_legs)                   # progress up to which the horizontal path holds its start

    def plan(self) -> SwingPlan:
        """The planner's arrays as the kernels take them (views: the kernels update this planner)."""
        return SwingPlan(self.cycle, self.start, self.target, self.v_start, self.v_end, self.duration, self.planned,
                         self.lift, self.stumble, self.delay)

    def begin(self, i: int, start, target, duration: float, v_start=None, v_end=None) -> None:
        self.start[i], self.target[i], self.duration[i] = start, target, duration
        self.v_start[i] = 0.0 if v_start is None else v_start
        self.v_end[i] = 0.0 if v_end is None else v_end
        self.v_start[i, 2] = self.v_end[i, 2] = 0.0
        self.planned[i] = True

    def __call__(self, legs: np.ndarray, s: np.ndarray, lift: float,
                 step_up: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """References of legs ``legs`` (indices) at swing progress ``s`` (same length), each (k, 3);
        with ``step_up`` the lift of each swing is :func:`swing_lift`'s.

        Plain floats per leg: at most a few swing legs, and numpy's per-call overhead dominates."""
        k = len(legs)
        P, V, A = np.empty((k, 3)), np.empty((k, 3)), np.empty((k, 3))
        for j, (i, sj) in enumerate(zip(np.asarray(legs).tolist(), np.asarray(s).tolist())):
            T, dl = float(self.duration[i]), float(self.delay[i])
            u = min(max(sj, 0.0), 1.0)
            uh, Th = (0.0 if u <= dl else (u - dl) / (1.0 - dl)), T * (1.0 - dl)   # horizontal: held up to dl
            u2, u3 = uh * uh, uh * uh * uh
            h = (2 * u3 - 3 * u2 + 1, u3 - 2 * u2 + uh, -2 * u3 + 3 * u2, u3 - u2)
            dh = ((6 * u2 - 6 * uh) / Th, (3 * u2 - 4 * uh + 1) / Th, (-6 * u2 + 6 * uh) / Th, (3 * u2 - 2 * uh) / Th)
            ddh = ((12 * uh - 6) / Th**2, (6 * uh - 4) / Th**2, (-12 * uh + 6) / Th**2, (6 * uh - 2) / Th**2)
            p0, p1 = self.start[i].tolist(), self.target[i].tolist()
            m0 = [x * Th for x in self.v_start[i].tolist()]
            m1 = [x * Th for x in self.v_end[i].tolist()]
            for c in (0, 1):
                pts = (p0[c], m0[c], p1[c], m1[c])
                P[j, c] = sum(a * b for a, b in zip(h, pts))
                V[j, c] = sum(a * b for a, b in zip(dh, pts))
                A[j, c] = sum(a * b for a, b in zip(ddh, pts))
            # vertical: quintic blend 0 -> 1 plus the lift bump 16 u^2 (1-u)^2
            u2, u3 = u * u, u * u * u
            f = 10 * u3 - 15 * u2 * u2 + 6 * u3 * u2
            df = 30 * u2 - 60 * u3 + 30 * u2 * u2
            ddf = 60 * u - 180 * u2 + 120 * u3
            w = 1.0 - u
            b, db, ddb = 16 * u2 * w * w, 32 * u * w * w - 32 * u2 * w, 32 * w * w - 128 * u * w + 32 * u2
            dz = p1[2] - p0[2]
            h = lift + max(0.0, -dz - STEP_TOLERANCE) + float(self.lift[i]) if step_up else lift
            P[j, 2] = p0[2] + dz * f + h * b
            V[j, 2] = (dz * df + h * db) / T
            A[j, 2] = (dz * ddf + h * ddb) / T**2
        return P, V, A


def command_foothold_reference(r, v, wz, k, T) -> np.ndarray:
    """:func:`command_foothold` in numpy: the stance point ``r`` (2,) turned about the instantaneous
    centre ``c = z x v / wz`` by ``phi = k wz T`` (``r + k T v`` at ``wz = 0``)."""
    r, v = np.asarray(r, dtype=float)[:2], np.asarray(v, dtype=float)[:2]
    if wz == 0.0:
        return r + k * T * v
    phi = k * wz * T
    c = np.array([-v[1], v[0]]) / wz
    Rz = np.array([[math.cos(phi), -math.sin(phi)], [math.sin(phi), math.cos(phi)]])
    return c + Rz @ (r - c)


def start_swings_reference(phases, cycles, legs, R, ref_v, stance, z_touchdown, cfg, gait, planner,
                           command=None) -> None:
    """:func:`start_swings` in numpy: plan the swings that begin this cycle, from where the foot is
    to the touchdown target (``stance``: the nominal stance points (N, 3); ``gait``: the
    :class:`GaitScheduler`; ``planner``: the :class:`SwingPlanner`, updated). ``command``: ``(wz,
    v_base)`` under a velocity command (:func:`start_swings_command`), else None."""
    for i in np.flatnonzero((phases != SUPPORT) & (cycles != planner.cycle)):
        planner.cycle[i] = cycles[i]
        rise = legs.p[i, 2] - planner.start[i, 2] - RISE_TOLERANCE
        planner.lift[i] = max(0.0, rise) if planner.planned[i] else 0.0
        if planner.stumble[i] > 0.0:
            if planner.lift[i] > 0.0:
                planner.stumble[:] = STUMBLE_SWINGS + 1.0
            planner.stumble[i] -= 1.0
            if planner.stumble[i] > 0.0:
                planner.lift[i] = max(planner.lift[i], cfg.stumble_lift)
        target = stance[i].copy()
        low = legs.p[i, 2] - cfg.touchdown_depth
        target[2] = low if low < z_touchdown - FOOTHOLD_TOLERANCE else z_touchdown
        v_body = R.T @ ref_v
        if command is None:
            target[:2] += cfg.raibert_gain * v_body[:2] * gait.support_duration
            v_end = -v_body
        else:
            wz, v_base = command
            target[:2] = command_foothold_reference(stance[i], v_body, wz, cfg.raibert_gain, gait.support_duration)
            target[:2] += cfg.foothold_velocity_gain * (np.asarray(v_base)[:2] - v_body[:2])
            v_end = -(v_body + np.cross([0.0, 0.0, wz], target))
        planner.begin(i, legs.p[i], target, gait.swing_duration, v_start=legs.v_p[i], v_end=v_end)
        planner.delay[i] = 0.0


def swing_torques_reference(legs, M, support, phases, progress, b, cfg, planner, leg_j, Mll_index) -> np.ndarray:
    """:func:`swing_torques` in numpy: returns ``tau_sw`` (n), adds the feed-forward to ``b``
    (``Mll_index``: rows and columns of each leg's block of ``M``, (N, k, k) each)."""
    tau_sw = np.zeros(M.shape[0] - 6)
    sw = np.flatnonzero(~support)
    if not sw.size:
        return tau_sw
    tracking = planner.planned[sw] & (phases[sw] != SUPPORT)
    p_ref, v_ref, a_ref = planner(sw, progress[sw], cfg.lift_height, step_up=True)
    e = p_ref[:, :2] - legs.p[sw, :2]
    held = (np.hypot(e[:, 0], e[:, 1]) > STUMBLE_ERROR) & (np.einsum("ki,ki->k", e, legs.v_p[sw, :2]) <= 0.0)
    stumbled = tracking & (phases[sw] == SWING_UP) & held & (cfg.stumble_lift > 0.0)
    if stumbled.any():             # stumble reflex (stumble_reflex): a foot held back backs off and lifts higher
        planner.stumble[:] = STUMBLE_SWINGS + 1.0
        back = sw[stumbled & (planner.delay[sw] <= 0.0)] if STUMBLE_DELAY > 0.0 else sw[:0]
        away = planner.target[back, :2] - legs.p[back, :2]
        away /= np.maximum(np.hypot(away[:, 0], away[:, 1]), 1e-9)[:, None]
        planner.start[back, :2] = legs.p[back, :2] - STUMBLE_RETRACT * away
        planner.v_start[back, :2] = 0.0
        planner.delay[back] = STUMBLE_DELAY
        up = sw[stumbled & (planner.lift[sw] < cfg.stumble_lift)]
        planner.lift[up] += cfg.stumble_lift
        new = np.union1d(back, up)
        k = np.searchsorted(sw, new)
        p_ref[k], v_ref[k], a_ref[k] = planner(new, progress[new], cfg.lift_height, step_up=True)
    late = planner.planned[sw] & ~tracking & (cfg.late_descent_velocity > 0.0)   # late touchdown: descend
    v_ref[late] = np.column_stack([planner.v_end[sw][late][:, :2], np.full(late.sum(), -cfg.late_descent_velocity)])
    p_ref[late], a_ref[late] = legs.p[sw][late], LATE_GAIN * (v_ref[late] - legs.v_p[sw][late])
    hold = ~tracking & ~late  # out of the support set outside a nominal swing: hold the foot where it is
    p_ref[hold], v_ref[hold], a_ref[hold] = legs.p[sw][hold], 0.0, 0.0
    b[sw, :3] += a_ref
    f_sw = np.asarray(cfg.kp_swing) * (p_ref - legs.p[sw]) + np.asarray(cfg.kd_swing) * (v_ref - legs.v_p[sw])
    t_sw = np.einsum("kij,ki->kj", legs.J[sw, :3], f_sw)           # J_p^T F
    if cfg.swing_pitch_projection and legs.J.shape[2] == 4:
        # remove the part of J_p^T F that would accelerate the relative pitch:
        # tau' = tau - J_th^T (J_th M^-1 tau) / (J_th M^-1 J_th^T)   (leg block of M)
        Jt = legs.J[sw, 3]
        Minv_Jt = np.linalg.solve(M[Mll_index[0][sw], Mll_index[1][sw]], Jt[:, :, None])[:, :, 0]
        den = np.einsum("ki,ki->k", Jt, Minv_Jt)
        coef = np.where(den > 1e-12, np.einsum("ki,ki->k", Minv_Jt, t_sw) / np.maximum(den, 1e-12), 0.0)
        t_sw = t_sw - Jt * coef[:, None]
    tau_sw[np.asarray(leg_j)[sw].reshape(-1)] = t_sw.reshape(-1)
    return tau_sw
