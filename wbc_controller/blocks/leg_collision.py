"""Leg-collision barrier rows (``leg_collision_barrier``): capsule distances between the links of
neighbouring legs and from each foot to the body, kept above ``d_min`` by an acceleration-level
control barrier on the ``k`` closest pairs.

Geometry (base frame, from the leg chains; :func:`collision_geometry`): each leg's femur (hip-pitch
origin -> knee origin), tibia (knee -> ankle) and foot (ankle -> foot point) are capsules of
radius ``link_radius`` (femur, tibia) and ``foot_radius`` (foot: it holds the foot sphere and the
foot cylinder); they enclose the MuJoCo model's link cylinders and foot sphere, so a capsule
distance > 0 means no contact there. The coxa (hip yaw -> hip pitch, 8 cm next to the body) is
left out. Neighbouring legs: consecutive legs around the body (the ring of their mounts' angles);
each neighbouring pair gives 9 capsule pairs; each foot point (sphere of ``foot_radius``) and the
body box (``base.size``, centred at the base origin) give one more: ``10 N`` candidates.

Per candidate ``c``: the surface distance ``d = |x_a - x_b| - r_a - r_b`` (``x_a, x_b`` the closest
points of the two segments; for the body, the box point closest to the foot point), its unit
direction ``n = (x_a - x_b) / |x_a - x_b|`` and the Jacobian row on the two legs' joints
``J_d = n^T (J_a(x_a) - J_b(x_b))`` (``J(x)`` the joint columns ``z_m x (x - o_m)`` of the joints
that move the link; the body point does not move in the base frame). ``d`` depends on the joint
positions only, so ``d_ddot = J_d q_ddot + q_dot^T (d^2 d / d q^2) q_dot``; the drift term is the
directional central difference of ``d_dot = J_d q_dot`` along ``q_dot`` (step ``FD_STEP`` s, the
closest points solved again at each point, so it includes their sliding; as the paper's
``J_theta_dot`` in ``jdot_mode: fd``).

The barrier ``h = d - d_min`` with the relative pitch's exponential form ``h_ddot + k_d h_dot +
k_p h >= 0``; the swing and compensation torques ``tau_add`` act outside the QP's ``nu_dot``, so
their acceleration (through each leg's own mass block, ``M_ll^-1 tau_add``) enters the bound, and
with ``lc_tau_ext`` (``leg_collision_tau_ext``) a swing leg's estimated external torque
``tau_ext`` (opposing the motor; a support leg's holds the ground reaction the QP models)::

    J_d q_ddot >= -k_p (d - d_min) - k_d d_dot - drift - J_d M_ll^-1 (tau_add - tau_ext)

Rows: ``k`` (``leg_collision_rows``), after the other inequality rows, the ``k`` candidates of
smallest ``d`` among those with ``d < d_min + leg_collision_range`` (ties: the lower index), in
order of ``d``; a row without such a candidate is loose (``-INF <= 0 <= INF``). Far from ``d_min``
the bound is far below anything the QP asks (``-k_p range``), so a pair entering or leaving
changes nothing at that moment.

``par`` fields: ``lc_kp``, ``lc_kd``, ``lc_dmin``, ``lc_range``, ``lc_tau_ext``, ``lc_pairs`` (10N, 4) ``[leg_a,
seg_a, leg_b, seg_b]`` (seg 0 femur, 1 tibia, 2 foot capsule, 3 foot point; ``leg_b = -1``: the
body), ``lc_radius`` (4,), ``lc_body_half`` (3,), ``leg_j``, ``leg_v`` and the chain constants
(``chain_*``, :func:`legged_wbc.kinematics.chain_legs`). Work arrays: ``lc_O`` (N, 4, 3) joint
origins, ``lc_Z`` (N, 4, 3) joint axes, ``lc_P`` (N, 3) foot points, ``lc_dist`` (10N,), and the
rows: ``lc_coef`` (k, 8) (leg a's 4 joints, then leg b's), ``lc_leg`` (k, 2), ``lc_lo`` (k),
``lc_d`` (k) (the pair's ``d``; INF for a loose row), ``lc_cand`` (k) (candidate or -1),
``lc_dmin_all`` (1,) the smallest ``d`` of all candidates; scratch ``lc_q``, ``lc_tau`` (n,),
``lc_fO``, ``lc_fZ``, ``lc_fP`` (the frames at ``q -+ FD_STEP q_dot``), ``lc_fcoef`` (8,)."""

from __future__ import annotations

import math

import numpy as np
import pinocchio as pin
from numba import njit

from legged_wbc.jit import announce_compiles
from legged_wbc.kinematics import _chain_walk
from legged_wbc.leg_neighbours import neighbour_pairs

from ..qp import INF

announce_compiles(__name__)          # one line on stderr if this process has to compile a kernel

FD_STEP = 1e-4          # [s] time step of the drift's central difference along q_dot
SEG_JOINTS = (2, 3, 4, 4)   # joints (from the hip yaw) that move segment 0 femur, 1 tibia, 2 foot, 3 foot point


# ---------------------------------------------------------------------------- geometry (once)
def collision_geometry(rm) -> dict:
    """``lc_pairs`` (10N, 4), ``lc_radius`` (4,), ``lc_body_half`` (3,) of a robot model
    (:class:`legged_wbc.model.RobotModel`), as the module docstring defines them. The capsules'
    radii are a generated robot's leg type's (the barrier's links); a URDF robot has none (0: the
    barrier is refused for it, :class:`wbc_controller.controller.WholeBodyController`)."""
    cfg = rm.cfg
    mounts = [leg.hip_xyz[:2] for leg in cfg.leg_specs]
    rows = []
    for a, b in neighbour_pairs(mounts):
        for sa in range(3):
            for sb in range(3):
                rows.append((a, sa, b, sb))
    for i in range(rm.n_legs):
        rows.append((i, 3, -1, 0))
    pairs = np.array(rows, dtype=np.int64).reshape(-1, 4)
    lt = getattr(cfg, "leg_type", None)
    radius = (np.array([lt.link_radius, lt.link_radius, lt.foot_radius, lt.foot_radius], dtype=float)
              if lt is not None else np.zeros(4))
    return {"lc_pairs": pairs, "lc_radius": radius, "lc_body_half": 0.5 * np.asarray(cfg.base_size, dtype=float)}


# ---------------------------------------------------------------------------- kernels
@njit(cache=True)
def leg_frames(i, qj, dqj, par, O, Z, P):
    """Leg ``i``'s joint origins ``O`` (4, 3), joint axes ``Z`` (4, 3) and foot point ``P`` (3,)
    in the base frame at ``qj`` (the chain walk of :func:`legged_wbc.kinematics.chain_legs`)."""
    px, py, pz, _, _, _, _, _, _ = _chain_walk(i, qj, dqj, par)
    work = par.leg_work
    for k in range(4):
        for r in range(3):
            Z[k, r] = work[27 + 3 * k + r]
            O[k, r] = work[39 + 3 * k + r]
    fx, fy, fz = par.chain_p_foot[i, 0], par.chain_p_foot[i, 1], par.chain_p_foot[i, 2]
    P[0] = px + work[0] * fx + work[1] * fy + work[2] * fz
    P[1] = py + work[3] * fx + work[4] * fy + work[5] * fz
    P[2] = pz + work[6] * fx + work[7] * fy + work[8] * fz


@njit(cache=True)
def _endpoints(O, P, seg):
    """Start and end point of segment ``seg`` of a leg (rows of ``O`` or ``P``) as 6 floats."""
    if seg == 0:
        return O[1, 0], O[1, 1], O[1, 2], O[2, 0], O[2, 1], O[2, 2]
    if seg == 1:
        return O[2, 0], O[2, 1], O[2, 2], O[3, 0], O[3, 1], O[3, 2]
    if seg == 2:
        return O[3, 0], O[3, 1], O[3, 2], P[0], P[1], P[2]
    return P[0], P[1], P[2], P[0], P[1], P[2]


@njit(cache=True)
def segment_closest(p1x, p1y, p1z, q1x, q1y, q1z, p2x, p2y, p2z, q2x, q2y, q2z):
    """Closest points of segments ``[p1, q1]`` and ``[p2, q2]`` (Ericson, *Real-Time Collision
    Detection* 5.1.9): their parameters ``(s, t)`` in [0, 1]."""
    d1x, d1y, d1z = q1x - p1x, q1y - p1y, q1z - p1z
    d2x, d2y, d2z = q2x - p2x, q2y - p2y, q2z - p2z
    rx, ry, rz = p1x - p2x, p1y - p2y, p1z - p2z
    a = d1x * d1x + d1y * d1y + d1z * d1z
    e = d2x * d2x + d2y * d2y + d2z * d2z
    f = d2x * rx + d2y * ry + d2z * rz
    eps = 1e-18
    if a <= eps and e <= eps:
        return 0.0, 0.0
    if a <= eps:
        return 0.0, min(max(f / e, 0.0), 1.0)
    c = d1x * rx + d1y * ry + d1z * rz
    if e <= eps:
        return min(max(-c / a, 0.0), 1.0), 0.0
    b = d1x * d2x + d1y * d2y + d1z * d2z
    den = a * e - b * b
    s = min(max((b * f - c * e) / den, 0.0), 1.0) if den > 1e-12 * a * e else 0.0
    t = (b * s + f) / e
    if t < 0.0:
        t = 0.0
        s = min(max(-c / a, 0.0), 1.0)
    elif t > 1.0:
        t = 1.0
        s = min(max((b - c) / a, 0.0), 1.0)
    return s, t


@njit(cache=True)
def pair_points(c, par, O, P):
    """Candidate ``c``'s closest points ``x_a``, ``x_b`` (6 floats) and surface distance ``d``,
    legs' frames from ``O`` (N, 4, 3), ``P`` (N, 3)."""
    la, sa, lb, sb = par.lc_pairs[c, 0], par.lc_pairs[c, 1], par.lc_pairs[c, 2], par.lc_pairs[c, 3]
    r = par.lc_radius
    p1x, p1y, p1z, q1x, q1y, q1z = _endpoints(O[la], P[la], sa)
    if lb < 0:                                    # the foot point against the body box
        h = par.lc_body_half
        bx, by, bz = min(max(p1x, -h[0]), h[0]), min(max(p1y, -h[1]), h[1]), min(max(p1z, -h[2]), h[2])
        dx, dy, dz = p1x - bx, p1y - by, p1z - bz
        dc = math.sqrt(dx * dx + dy * dy + dz * dz)
        if dc == 0.0:                             # inside the box: through the nearest face
            gx, gy, gz = h[0] - abs(p1x), h[1] - abs(p1y), h[2] - abs(p1z)
            if gz <= gx and gz <= gy:
                bz = h[2] if p1z >= 0.0 else -h[2]
                dc = -gz
            elif gy <= gx:
                by = h[1] if p1y >= 0.0 else -h[1]
                dc = -gy
            else:
                bx = h[0] if p1x >= 0.0 else -h[0]
                dc = -gx
        return p1x, p1y, p1z, bx, by, bz, dc - r[sa]
    p2x, p2y, p2z, q2x, q2y, q2z = _endpoints(O[lb], P[lb], sb)
    s, t = segment_closest(p1x, p1y, p1z, q1x, q1y, q1z, p2x, p2y, p2z, q2x, q2y, q2z)
    ax, ay, az = p1x + s * (q1x - p1x), p1y + s * (q1y - p1y), p1z + s * (q1z - p1z)
    bx, by, bz = p2x + t * (q2x - p2x), p2y + t * (q2y - p2y), p2z + t * (q2z - p2z)
    dx, dy, dz = ax - bx, ay - by, az - bz
    return ax, ay, az, bx, by, bz, math.sqrt(dx * dx + dy * dy + dz * dz) - r[sa] - r[sb]


@njit(cache=True)
def pair_row(c, par, O, Z, P, coef):
    """Candidate ``c``: its distance ``d`` (returned) and Jacobian row into ``coef`` (8,): leg a's
    4 joints, then leg b's (0 for the body). ``n`` is the unit vector from ``x_b`` to ``x_a``
    (zero if the centre distance is 0: no direction, no row)."""
    la, sa, lb, sb = par.lc_pairs[c, 0], par.lc_pairs[c, 1], par.lc_pairs[c, 2], par.lc_pairs[c, 3]
    ax, ay, az, bx, by, bz, d = pair_points(c, par, O, P)
    dx, dy, dz = ax - bx, ay - by, az - bz
    dc = math.sqrt(dx * dx + dy * dy + dz * dz)
    if dc > 0.0:
        nx, ny, nz = dx / dc, dy / dc, dz / dc
    else:
        nx, ny, nz = 0.0, 0.0, 0.0
    if lb < 0 and d + par.lc_radius[sa] < 0.0:    # inside the box: n points out of its face
        nx, ny, nz = -nx, -ny, -nz
    for m in range(8):
        coef[m] = 0.0
    nja = 4 if sa >= 2 else sa + 2
    for m in range(nja):
        ox, oy, oz = ax - O[la, m, 0], ay - O[la, m, 1], az - O[la, m, 2]
        zx, zy, zz = Z[la, m, 0], Z[la, m, 1], Z[la, m, 2]
        coef[m] = nx * (zy * oz - zz * oy) + ny * (zz * ox - zx * oz) + nz * (zx * oy - zy * ox)
    if lb >= 0:
        njb = 4 if sb >= 2 else sb + 2
        for m in range(njb):
            ox, oy, oz = bx - O[lb, m, 0], by - O[lb, m, 1], bz - O[lb, m, 2]
            zx, zy, zz = Z[lb, m, 0], Z[lb, m, 1], Z[lb, m, 2]
            coef[4 + m] = -(nx * (zy * oz - zz * oy) + ny * (zz * ox - zx * oz) + nz * (zx * oy - zy * ox))
    return d


@njit(cache=True)
def _rate(coef, la, lb, dqj, leg_j):
    """``coef . q_dot`` over the two legs' joints."""
    s = 0.0
    for m in range(4):
        s += coef[m] * dqj[leg_j[la, m]]
        if lb >= 0:
            s += coef[4 + m] * dqj[leg_j[lb, m]]
    return s


@njit(cache=True)
def _leg_block_solve(M, leg_v, i, tau, leg_j, out):
    """``out = M_ll^-1 tau_l`` (leg ``i``'s 4x4 block of ``M``, Cholesky; 0 if not positive definite)."""
    L = np.zeros((4, 4))
    for r in range(4):
        for c in range(r + 1):
            s = M[leg_v[i, r], leg_v[i, c]]
            for k in range(c):
                s -= L[r, k] * L[c, k]
            if r == c:
                if not s > 0.0:
                    for k in range(4):
                        out[k] = 0.0
                    return
                L[r, r] = math.sqrt(s)
            else:
                L[r, c] = s / L[c, c]
    y = np.zeros(4)
    for r in range(4):
        s = tau[leg_j[i, r]]
        for k in range(r):
            s -= L[r, k] * y[k]
        y[r] = s / L[r, r]
    for r in range(3, -1, -1):
        s = y[r]
        for k in range(r + 1, 4):
            s -= L[k, r] * out[k]
        out[r] = s / L[r, r]


@njit(cache=True)
def collision_frames(qj, dqj, par, O, Z, P):
    """Every leg's frames (:func:`leg_frames`) into ``O``, ``Z``, ``P``."""
    for i in range(O.shape[0]):
        leg_frames(i, qj, dqj, par, O[i], Z[i], P[i])


@njit(cache=True)
def candidate_distances(par, O, P, dist):
    """``d`` of every candidate into ``dist``; returns the smallest."""
    dmin = INF
    for c in range(dist.shape[0]):
        d = pair_points(c, par, O, P)[6]
        dist[c] = d
        dmin = min(dmin, d)
    return dmin


@njit(cache=True)
def leg_collision_stage(qj, dqj, M, tau_add, support, tau_ext, w):
    """The cycle's collision rows into the workspace record ``w`` (module docstring): frames,
    candidate distances, the ``k`` closest candidates within range, and for each its row
    (``lc_coef``, ``lc_leg``) and lower bound ``lc_lo``; loose rows ``lc_cand = -1``,
    ``lc_lo = -INF``, ``lc_coef = 0``."""
    O, Z, P, dist = w.lc_O, w.lc_Z, w.lc_P, w.lc_dist
    collision_frames(qj, dqj, w, O, Z, P)
    w.lc_dmin_all[0] = candidate_distances(w, O, P, dist)
    k = w.lc_cand.shape[0]
    cut = w.lc_dmin + w.lc_range
    for r in range(k):                            # the k smallest within range, in order
        best, bd = -1, cut
        for c in range(dist.shape[0]):
            if dist[c] < bd:
                taken = False
                for s in range(r):
                    if w.lc_cand[s] == c:
                        taken = True
                if not taken:
                    best, bd = c, dist[c]
        w.lc_cand[r] = best
    for r in range(k):
        c = w.lc_cand[r]
        coef = w.lc_coef[r]
        if c < 0:
            for m in range(8):
                coef[m] = 0.0
            w.lc_leg[r, 0], w.lc_leg[r, 1] = 0, -1
            w.lc_lo[r] = -INF
            w.lc_d[r] = INF
            continue
        w.lc_lo[r] = collision_bound(c, qj, dqj, M, tau_add, support, tau_ext, w, coef)
        w.lc_d[r] = dist[c]
        w.lc_leg[r, 0], w.lc_leg[r, 1] = w.lc_pairs[c, 0], w.lc_pairs[c, 2]


@njit(cache=True)
def collision_bound(c, qj, dqj, M, tau_add, support, tau_ext, w, coef):
    """Candidate ``c``'s row ``coef`` (8,) and its lower bound (module docstring), from the frames
    in ``w.lc_O``, ``lc_Z``, ``lc_P``; the drift at ``q -+ FD_STEP q_dot`` (the two legs' frames
    in the scratch ``lc_fk``)."""
    la, lb = w.lc_pairs[c, 0], w.lc_pairs[c, 2]
    leg_j = w.leg_j
    d = pair_row(c, w, w.lc_O, w.lc_Z, w.lc_P, coef)
    d_dot = _rate(coef, la, lb, dqj, leg_j)
    qs, cf = w.lc_q, w.lc_fcoef
    rates = np.zeros(2)
    for side in range(2):
        h = FD_STEP if side == 0 else -FD_STEP
        for m in range(4):
            qs[leg_j[la, m]] = qj[leg_j[la, m]] + h * dqj[leg_j[la, m]]
            if lb >= 0:
                qs[leg_j[lb, m]] = qj[leg_j[lb, m]] + h * dqj[leg_j[lb, m]]
        leg_frames(la, qs, dqj, w, w.lc_fO[la], w.lc_fZ[la], w.lc_fP[la])
        if lb >= 0:
            leg_frames(lb, qs, dqj, w, w.lc_fO[lb], w.lc_fZ[lb], w.lc_fP[lb])
        pair_row(c, w, w.lc_fO, w.lc_fZ, w.lc_fP, cf)
        rates[side] = _rate(cf, la, lb, dqj, leg_j)
    drift = (rates[0] - rates[1]) / (2.0 * FD_STEP)
    acc = np.zeros(4)
    add = 0.0
    for side in range(2):
        i = la if side == 0 else lb
        if i < 0:
            continue
        tau = w.lc_tau
        for m in range(4):                    # tau_add, and for a swing leg - tau_ext (opposes the motor)
            j = leg_j[i, m]
            tau[j] = tau_add[j] if support[i] or not w.lc_tau_ext else tau_add[j] - tau_ext[j]
        _leg_block_solve(M, w.leg_v, i, tau, leg_j, acc)
        for m in range(4):
            add += coef[4 * side + m] * acc[m]
    return -w.lc_kp * (d - w.lc_dmin) - w.lc_kd * d_dot - drift - add


@njit(cache=True)
def leg_collision_rows(par, C, l, u):
    """The stacked QP's collision rows ``row_lc + r`` (after the :func:`leg_collision_stage`):
    ``coef`` on the two legs' ``nu_dot`` columns, ``lc_lo <= . <= INF``."""
    for r in range(par.lc_cand.shape[0]):
        row = par.row_lc + r
        for c in range(C.shape[1]):
            C[row, c] = 0.0
        la, lb = par.lc_leg[r, 0], par.lc_leg[r, 1]
        for m in range(4):
            C[row, par.leg_v[la, m]] = par.lc_coef[r, m]
            if lb >= 0:
                C[row, par.leg_v[lb, m]] = par.lc_coef[r, 4 + m]
        l[row] = par.lc_lo[r]
        u[row] = INF


class LegDistance:
    """The smallest distance of all candidates at given joint positions (compiled; evaluation:
    ``min_leg_distance_m`` on the simulation's ground truth, whatever the controller's options)."""

    def __init__(self, rm):
        from legged_wbc.kinematics import LEG_CHAIN_WORK

        ws = rm.leg_workspace()
        if ws.chain is None:
            raise ValueError("LegDistance: needs legs that are serial 4-joint chains on the base")
        g = collision_geometry(rm)
        N, f = rm.n_legs, np.float64
        dt = np.dtype([("leg_j", np.int64, (N, 4)), ("chain_axes", f, (N, 4, 3)), ("chain_R_joint", f, (N, 4, 3, 3)),
                       ("chain_p_joint", f, (N, 4, 3)), ("chain_R_foot", f, (N, 3, 3)), ("chain_p_foot", f, (N, 3)),
                       ("leg_work", f, (LEG_CHAIN_WORK,)), ("lc_pairs", np.int64, g["lc_pairs"].shape),
                       ("lc_radius", f, (4,)), ("lc_body_half", f, (3,)), ("lc_O", f, (N, 4, 3)),
                       ("lc_Z", f, (N, 4, 3)), ("lc_P", f, (N, 3)), ("lc_dist", f, (g["lc_pairs"].shape[0],))],
                      align=True)
        self.rec = rec = np.zeros(1, dtype=dt)
        rec["leg_j"] = ws.leg_cols
        for name, a in zip(("axes", "R_joint", "p_joint", "R_foot", "p_foot"), ws.chain):
            rec["chain_" + name] = a
        for k, v in g.items():
            rec[k] = v
        self._zeros = np.zeros(rm.n)
        self.distances = rec["lc_dist"][0]

    def __call__(self, qj: np.ndarray) -> float:
        return float(_record_distance(np.ascontiguousarray(qj, dtype=float), self._zeros, self.rec))


@njit(cache=True)
def _record_distance(qj, dqj, rec):
    w = rec[0]
    collision_frames(qj, dqj, w, w.lc_O, w.lc_Z, w.lc_P)
    return candidate_distances(w, w.lc_O, w.lc_P, w.lc_dist)


# ---------------------------------------------------------------------------- numpy reference
class LegCollisionReference:
    """The module's rows in numpy from Pinocchio's forward kinematics on the fixed-base model (the
    specification of the kernels above; another closest-point method: the interior stationary
    point of the two segments or the best of the four edge cases)."""

    def __init__(self, rm, cfg):
        self.rm, self.cfg = rm, cfg
        g = collision_geometry(rm)
        self.pairs, self.radius, self.half = g["lc_pairs"], g["lc_radius"], g["lc_body_half"]
        self.model, self.data = rm.fixed, rm.fixed.createData()
        self.leg_j = np.array(rm.leg_joints, dtype=np.int64)
        self.foot_frames = list(rm.foot_frames_fixed)

    def frames(self, qj):
        """``(O, Z, P)``: joint origins (N, 4, 3), axes (N, 4, 3), foot points (N, 3)."""
        m, d = self.model, self.data
        pin.forwardKinematics(m, d, qj)
        pin.updateFramePlacements(m, d)
        N = self.leg_j.shape[0]
        O, Z, P = np.zeros((N, 4, 3)), np.zeros((N, 4, 3)), np.zeros((N, 3))
        for i in range(N):
            for k in range(4):
                jid = int(self.leg_j[i, k]) + 1
                X = d.oMi[jid]
                O[i, k] = X.translation
                Z[i, k] = X.rotation @ _joint_axis(m.joints[jid])
            P[i] = d.oMf[self.foot_frames[i]].translation
        return O, Z, P

    @staticmethod
    def segment(O, P, seg):
        return {0: (O[1], O[2]), 1: (O[2], O[3]), 2: (O[3], P), 3: (P, P)}[seg]

    @staticmethod
    def closest(p1, q1, p2, q2):
        """Closest points of two segments: the interior stationary point if it is inside, else the
        best of the four edges (each a point-segment projection)."""
        d1, d2, r = q1 - p1, q2 - p2, p1 - p2

        def on(p, a, b):
            e = b - a
            ee = e @ e
            return a if ee <= 1e-18 else a + np.clip((p - a) @ e / ee, 0.0, 1.0) * e

        A = np.array([[d1 @ d1, -d1 @ d2], [-d1 @ d2, d2 @ d2]])
        if abs(np.linalg.det(A)) > 1e-12 * max(A[0, 0] * A[1, 1], 1e-300):
            s, t = np.linalg.solve(A, [-d1 @ r, d2 @ r])
            if 0.0 <= s <= 1.0 and 0.0 <= t <= 1.0:
                return p1 + s * d1, p2 + t * d2
        cands = [(p1, on(p1, p2, q2)), (q1, on(q1, p2, q2)), (on(p2, p1, q1), p2), (on(q2, p1, q1), q2)]
        return min(cands, key=lambda ab: float(np.linalg.norm(ab[0] - ab[1])))

    def pair(self, c, O, P):
        """Candidate ``c``: ``(x_a, x_b, d, n)`` (``n`` from ``x_b`` to ``x_a``)."""
        la, sa, lb, sb = (int(v) for v in self.pairs[c])
        p1, q1 = self.segment(O[la], P[la], sa)
        if lb < 0:
            x = p1
            b = np.clip(x, -self.half, self.half)
            if np.linalg.norm(x - b) > 0.0:
                n = (x - b) / np.linalg.norm(x - b)
                return x, b, float(np.linalg.norm(x - b)) - self.radius[sa], n
            gap = self.half - np.abs(x)
            k = int(np.argmin(gap[::-1]))            # ties as the kernel: z, then y, then x
            k = 2 - k
            b = x.copy()
            b[k] = np.copysign(self.half[k], x[k]) if x[k] != 0.0 else self.half[k]
            n = np.zeros(3)
            n[k] = np.sign(b[k])
            return x, b, -float(gap[k]) - self.radius[sa], n
        p2, q2 = self.segment(O[lb], P[lb], sb)
        xa, xb = self.closest(p1, q1, p2, q2)
        dc = float(np.linalg.norm(xa - xb))
        n = (xa - xb) / dc if dc > 0 else np.zeros(3)
        return xa, xb, dc - self.radius[sa] - self.radius[sb], n

    def distances(self, qj):
        O, Z, P = self.frames(qj)
        return np.array([self.pair(c, O, P)[2] for c in range(self.pairs.shape[0])])

    def lower_bounds(self, O, P):
        """Per candidate a value below its ``d`` or below any range (vectorized): two segments'
        midpoint distance minus their half lengths and radii; a foot point's distance to the box
        outside it minus the radius (``-r`` inside: always computed exactly)."""
        ends = np.stack([np.stack([O[:, 1], O[:, 2]], 1), np.stack([O[:, 2], O[:, 3]], 1),
                         np.stack([O[:, 3], P], 1), np.stack([P, P], 1)], 1)          # (N, 4 segs, 2, 3)
        la, sa, lb, sb = self.pairs.T
        A = ends[la, sa]
        mid_a, half_a = A.mean(axis=1), 0.5 * np.linalg.norm(A[:, 1] - A[:, 0], axis=1)
        out = np.empty(self.pairs.shape[0])
        leg = lb >= 0
        B = ends[lb[leg], sb[leg]]
        mid_b, half_b = B.mean(axis=1), 0.5 * np.linalg.norm(B[:, 1] - B[:, 0], axis=1)
        out[leg] = (np.linalg.norm(mid_a[leg] - mid_b, axis=1) - half_a[leg] - half_b
                    - self.radius[sa[leg]] - self.radius[sb[leg]])
        x = mid_a[~leg]
        out[~leg] = np.linalg.norm(x - np.clip(x, -self.half, self.half), axis=1) - self.radius[sa[~leg]]
        return out

    def jacobian(self, c, qj):
        """``(d, J_d (n,))`` of candidate ``c`` (Pinocchio joint Jacobians: ``v(x) = v_o + w x (x - o)``
        of the link's joint)."""
        m, d = self.model, self.data
        O, Z, P = self.frames(qj)
        xa, xb, dist, n = self.pair(c, O, P)
        pin.computeJointJacobians(m, d, qj)
        la, sa, lb, sb = (int(v) for v in self.pairs[c])
        Jd = n @ self._point_jacobian(la, sa, xa)
        if lb >= 0:
            Jd = Jd - n @ self._point_jacobian(lb, sb, xb)
        return dist, Jd

    def _point_jacobian(self, leg, seg, x):
        m, d = self.model, self.data
        jid = int(self.leg_j[leg, SEG_JOINTS[seg] - 1]) + 1
        Jo = pin.getJointJacobian(m, d, jid, pin.LOCAL_WORLD_ALIGNED)
        o = d.oMi[jid].translation
        return Jo[:3] + np.cross(Jo[3:].T, x - o).T

    def rows(self, qj, dqj, M, tau_add, support, tau_ext):
        """``(cand (k,), coef (k, n) on the joints, lo (k,), d (k,) (INF: loose), d_all (10N,))``;
        ``d_all``: exact for the candidates whose lower bound (:meth:`lower_bounds`) is within range,
        INF for the others; ``tau_ext`` (n) the estimated external torque (opposing the motor), used on
        swing legs."""
        cfg = self.cfg
        k, n = cfg.leg_collision_rows, qj.shape[0]
        O, Z, P = self.frames(qj)
        cut = cfg.leg_collision_boundary + cfg.leg_collision_range
        d_all = np.full(self.pairs.shape[0], INF)        # exact where the lower bound is within range
        for c in np.flatnonzero(self.lower_bounds(O, P) < cut):
            d_all[c] = self.pair(int(c), O, P)[2]
        order = np.argsort(d_all, kind="stable")
        sel = [int(c) for c in order if d_all[c] < cut][:k]
        cand = np.full(k, -1, dtype=np.int64)
        coef = np.zeros((k, n))
        lo = np.full(k, -INF)
        dk = np.full(k, INF)
        for r, c in enumerate(sel):
            dist, Jd = self.jacobian(c, qj)
            d_dot = float(Jd @ dqj)
            rate = [float(self.jacobian(c, qj + h * dqj)[1] @ dqj) for h in (FD_STEP, -FD_STEP)]
            drift = (rate[0] - rate[1]) / (2 * FD_STEP)
            la, lb = int(self.pairs[c, 0]), int(self.pairs[c, 2])
            acc = np.zeros(n)
            for leg in (la, lb):
                if leg >= 0:
                    lj = self.leg_j[leg]
                    Mll = M[np.ix_(lj + 6, lj + 6)]
                    tau = tau_add[lj] if support[leg] or not cfg.leg_collision_tau_ext else tau_add[lj] - tau_ext[lj]
                    acc[lj] = np.linalg.solve(Mll, tau)
            cand[r], coef[r], dk[r] = c, Jd, dist
            lo[r] = (-cfg.leg_collision_kp * (dist - cfg.leg_collision_boundary) - cfg.leg_collision_kd * d_dot
                     - drift - float(Jd @ acc))
        return cand, coef, lo, dk, d_all

    def fill(self, qj, dqj, M, tau_add, support, tau_ext, row_lc, C, l, u):
        """The stacked QP's rows (as :func:`leg_collision_rows`); returns :meth:`rows`."""
        out = self.rows(qj, dqj, M, tau_add, support, tau_ext)
        cand, coef, lo = out[:3]
        for r in range(cand.shape[0]):
            C[row_lc + r] = 0.0
            C[row_lc + r, 6:6 + qj.shape[0]] = coef[r]
            l[row_lc + r] = lo[r]
            u[row_lc + r] = INF
        return out


def _joint_axis(jm) -> np.ndarray:
    name = jm.shortname()
    axes = {"JointModelRX": (1.0, 0.0, 0.0), "JointModelRY": (0.0, 1.0, 0.0), "JointModelRZ": (0.0, 0.0, 1.0)}
    if name in axes:
        return np.array(axes[name])
    return np.asarray(jm.extract().axis, dtype=float)
