"""Support plane: the local terrain normal and the plane's offset estimated from the support feet.

Every cycle the foot points (sphere centres, base frame) of the feet in the estimated support set
are turned into the world-aligned frame at the base (``r_i = R p_i``; no base position is needed,
so the estimator's drift in x, y does not enter) and fitted by least squares with a plane
``z = a x + b y + c`` (centred sums, a 2x2 solve). The sphere centres of feet standing on a plane
lie on a parallel plane (offset by the foot radius along the normal), so the fitted normal is the
ground's. A fit needs at least 3 support feet spread over an area (``det >= MIN_SPREAD_M4``);
otherwise the previous estimate is kept (a tripod gait always has 3).

Measured normal ``n_m = (-a, -b, 1) / ||.||``, measured offset ``d_m = n_m . centroid`` (the plane
of the sphere centres is ``{r : n . r = d}`` in the world-aligned frame at the base; ``d < 0``,
``-d`` is the base's distance to it). History: both go through a first-order low-pass of
``plane.cutoff_hz`` (the normal re-normalized after each step), which averages the fits over the
tripods of the last steps and smooths the switch from one tripod to the next.

Output: the filtered normal with a soft dead band (``plane.deadband_deg``): its tilt from world z is
reduced by the dead band (a tilt below it gives world z exactly, and the output is continuous).
On flat ground the fitted tilt is the kinematic and IMU error (a few hundredths of a degree in
our runs), so there the output is exactly ``(0, 0, 1)``.

:func:`support_plane_step` is the compiled cycle (the estimator's); :func:`support_plane_reference`
its numpy specification (the oracle estimator's; tests compare them and the fit with known
answers).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from legged_wbc.jit import announce_compiles

announce_compiles(__name__)          # one line on stderr if this process has to compile a kernel

MIN_SPREAD_M4 = 1e-4     # least det(S_xy) of the centred support-foot positions for a fit [m^4]

# state layout: [n_f (3), d_f, initialized]
STATE_SIZE = 5
# the normal's entries appended to the legs of ``/estimator/support`` (JointState-shaped, ``position``)
ROS_NAMES = ("support_plane_normal_x", "support_plane_normal_y", "support_plane_normal_z")


@njit(cache=True, error_model="numpy")
def plane_fit(r, support):
    """Least-squares plane ``z = a x + b y + c`` through the points ``r[i]`` (world-aligned, (L, 3))
    with ``support[i]``: returns ``(ok, nx, ny, nz, d)``, the unit normal (``nz > 0``) and the offset
    ``d = n . centroid``; ``ok`` False (zeros) with fewer than 3 points or a spread below
    :data:`MIN_SPREAD_M4`."""
    m = 0
    cx = cy = cz = 0.0
    for i in range(r.shape[0]):
        if support[i]:
            m += 1
            cx += r[i, 0]
            cy += r[i, 1]
            cz += r[i, 2]
    if m < 3:
        return False, 0.0, 0.0, 0.0, 0.0
    cx /= m
    cy /= m
    cz /= m
    sxx = sxy = syy = sxz = syz = 0.0
    for i in range(r.shape[0]):
        if support[i]:
            x, y, z = r[i, 0] - cx, r[i, 1] - cy, r[i, 2] - cz
            sxx += x * x
            sxy += x * y
            syy += y * y
            sxz += x * z
            syz += y * z
    det = sxx * syy - sxy * sxy
    if not det >= MIN_SPREAD_M4:
        return False, 0.0, 0.0, 0.0, 0.0
    a = (syy * sxz - sxy * syz) / det
    b = (sxx * syz - sxy * sxz) / det
    s = 1.0 / math.sqrt(a * a + b * b + 1.0)
    nx, ny, nz = -a * s, -b * s, s
    return True, nx, ny, nz, nx * cx + ny * cy + nz * cz


@njit(cache=True, error_model="numpy")
def dead_band(nx, ny, nz, band):
    """The unit vector ``n`` with its tilt from world z reduced by ``band`` [rad] (azimuth kept; a
    tilt <= band gives ``(0, 0, 1)``)."""
    s = math.sqrt(nx * nx + ny * ny)
    tilt = math.atan2(s, nz)
    if tilt <= band or s == 0.0:
        return 0.0, 0.0, 1.0
    t = tilt - band
    k = math.sin(t) / s
    return nx * k, ny * k, math.cos(t)


@njit(cache=True, error_model="numpy")
def support_plane_step(foot_pos, support, q, alpha, band, state, r, out):
    """One cycle: fit, filter, dead band. ``foot_pos`` (L, 3) foot points in the base frame [m],
    ``support`` (L,) bool, ``q`` the estimate (base quaternion ``q[3:7]`` xyzw, base -> world),
    ``alpha`` the low-pass factor of this step, ``band`` the dead band [rad]; ``state``
    (:data:`STATE_SIZE`, updated), ``r`` (L, 3) scratch, ``out`` (5,) = ``[n (3), d, fitted (1/0)]``."""
    x, y, z, w = q[3], q[4], q[5], q[6]
    r00, r01, r02 = 1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)
    r10, r11, r12 = 2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)
    r20, r21, r22 = 2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)
    for i in range(foot_pos.shape[0]):
        px, py, pz = foot_pos[i, 0], foot_pos[i, 1], foot_pos[i, 2]
        r[i, 0] = r00 * px + r01 * py + r02 * pz
        r[i, 1] = r10 * px + r11 * py + r12 * pz
        r[i, 2] = r20 * px + r21 * py + r22 * pz
    ok, nx, ny, nz, d = plane_fit(r, support)
    if ok:
        if state[4] == 0.0:                 # first fit: the filter starts at it
            state[0], state[1], state[2], state[3] = nx, ny, nz, d
            state[4] = 1.0
        else:
            fx = state[0] + alpha * (nx - state[0])
            fy = state[1] + alpha * (ny - state[1])
            fz = state[2] + alpha * (nz - state[2])
            s = 1.0 / math.sqrt(fx * fx + fy * fy + fz * fz)
            state[0], state[1], state[2] = fx * s, fy * s, fz * s
            state[3] += alpha * (d - state[3])
    ox, oy, oz = dead_band(state[0], state[1], state[2], band)
    out[0], out[1], out[2], out[3] = ox, oy, oz, state[3]
    out[4] = 1.0 if ok else 0.0


def warm_up(L: int) -> None:
    """Compile (or load from the cache) :func:`support_plane_step` before the first cycle."""
    st = np.zeros(STATE_SIZE)
    reset_state(st)
    q = np.zeros(7)
    q[6] = 1.0
    support_plane_step(np.zeros((L, 3)), np.zeros(L, dtype=np.bool_), q, 0.5, 0.0, st, np.zeros((L, 3)), np.zeros(5))


def reset_state(state: np.ndarray) -> None:
    """Before any fit: the normal is world z, the offset 0 (flagged not initialized)."""
    state[:] = (0.0, 0.0, 1.0, 0.0, 0.0)


def plane_fit_reference(r: np.ndarray, support: np.ndarray):
    """:func:`plane_fit` in numpy (``lstsq`` on the centred points)."""
    pts = np.asarray(r, dtype=float)[np.asarray(support, dtype=bool)]
    if len(pts) < 3:
        return False, 0.0, 0.0, 0.0, 0.0
    c = pts.mean(axis=0)
    X = pts[:, :2] - c[:2]
    S = X.T @ X
    if not np.linalg.det(S) >= MIN_SPREAD_M4:
        return False, 0.0, 0.0, 0.0, 0.0
    a, b = np.linalg.solve(S, X.T @ (pts[:, 2] - c[2]))
    n = np.array([-a, -b, 1.0]) / math.sqrt(a * a + b * b + 1.0)
    return True, float(n[0]), float(n[1]), float(n[2]), float(n @ c)


def support_plane_reference(foot_pos, support, R, alpha, band, state) -> np.ndarray:
    """:func:`support_plane_step` in numpy (``R`` base -> world); returns ``out``."""
    r = np.asarray(foot_pos) @ np.asarray(R).T
    ok, nx, ny, nz, d = plane_fit_reference(r, support)
    if ok:
        if state[4] == 0.0:
            state[:] = (nx, ny, nz, d, 1.0)
        else:
            f = state[:3] + alpha * (np.array([nx, ny, nz]) - state[:3])
            state[:3] = f / np.linalg.norm(f)
            state[3] += alpha * (d - state[3])
    n = state[:3]
    s = math.hypot(n[0], n[1])
    tilt = math.atan2(s, n[2])
    if tilt <= band or s == 0.0:
        o = (0.0, 0.0, 1.0)
    else:
        k = math.sin(tilt - band) / s
        o = (n[0] * k, n[1] * k, math.cos(tilt - band))
    return np.array([*o, state[3], 1.0 if ok else 0.0])


def tilt_deg(n) -> float:
    """Angle [deg] between a unit normal and world z."""
    n = np.asarray(n, dtype=float)
    return math.degrees(math.atan2(math.hypot(n[0], n[1]), n[2]))
