"""Base linear-velocity Kalman filter: IMU prediction, leg-kinematics correction, soft gating.

State: ``v`` = base linear velocity expressed in the **world** frame [m/s] (3 states; no
accelerometer-bias state: the simulated IMU is unbiased and the leg measurements correct any slow
drift; a bias would be observable only through the same leg measurements).

* **Predict:** ``v <- v + dt a_world`` with ``a_world = R f + g`` (``f`` accelerometer specific force in
  the base frame [m/s^2], ``R`` base->world, ``g = [0, 0, -9.81]``); ``P <- P + (sigma_accel dt)^2 I``.
* **Measure** (per reliable support foot ``i``, foot point assumed stationary in the world):
  ``z_i = R (-(w_B x p_i) - J_p,i q_dot_i)`` [m/s], ``p_i`` the foot point in the base frame, ``w_B``
  the gyro; ``z_i = v + noise``, noise ``N(0, c_i sigma_meas^2 I)``.
* **Exclusion:** a foot is ignored for ``exclusion_cycles`` control cycles after it enters the
  support set: on the cycle it enters, ``cycles_in_support = 0``; it is used once
  ``cycles_in_support >= exclusion_cycles`` (default 20 cycles = 40 ms at 500 Hz). Feet in support at
  ``reset`` count as settled.
* **Soft gating:** with ``S = P + sigma_meas^2 I`` (the predicted covariance, the same for every
  foot) and residual ``r_i = z_i - v``, ``d2_i = r_i^T S^-1 r_i``; the foot's covariance is
  multiplied by ``c_i = clip(d2_i / gate_d2, 1, max_inflation)``: exactly 1 at or below ``gate_d2``
  (7.81, chi-square 3 DoF 95 %), continuous, capped. ``gating = False`` forces ``c_i = 1``.
* **Update:** the feet are independent measurements of the same state (``H = I``), so the stacked
  update equals one update with the information-weighted mean ``z = sum(z_i / c_i) / sum(1 / c_i)``
  and covariance ``sigma_meas^2 / sum(1 / c_i) I``; it is done in Joseph form and symmetrized.
"""

from __future__ import annotations

import math

import numpy as np

from .config import VelocityConfig

GRAVITY_WORLD = np.array([0.0, 0.0, -9.81])  # [m/s^2]


def _inv3(a: tuple) -> tuple:
    """Inverse of a 3x3 matrix given as a row-major 9-tuple (cofactors; pure Python is much cheaper
    than ``np.linalg.inv`` at this size)."""
    a0, a1, a2, a3, a4, a5, a6, a7, a8 = a
    c0, c3, c6 = a4 * a8 - a5 * a7, a5 * a6 - a3 * a8, a3 * a7 - a4 * a6
    det = a0 * c0 + a1 * c3 + a2 * c6
    if det == 0.0 or not math.isfinite(det):
        raise np.linalg.LinAlgError("singular 3x3 matrix")
    s = 1.0 / det
    return (c0 * s, (a2 * a7 - a1 * a8) * s, (a1 * a5 - a2 * a4) * s,
            c3 * s, (a0 * a8 - a2 * a6) * s, (a2 * a3 - a0 * a5) * s,
            c6 * s, (a1 * a6 - a0 * a7) * s, (a0 * a4 - a1 * a3) * s)


def _mm(a: tuple, b: tuple) -> tuple:
    """Product of two 3x3 matrices given as row-major 9-tuples."""
    a0, a1, a2, a3, a4, a5, a6, a7, a8 = a
    b0, b1, b2, b3, b4, b5, b6, b7, b8 = b
    return (a0 * b0 + a1 * b3 + a2 * b6, a0 * b1 + a1 * b4 + a2 * b7, a0 * b2 + a1 * b5 + a2 * b8,
            a3 * b0 + a4 * b3 + a5 * b6, a3 * b1 + a4 * b4 + a5 * b7, a3 * b2 + a4 * b5 + a5 * b8,
            a6 * b0 + a7 * b3 + a8 * b6, a6 * b1 + a7 * b4 + a8 * b7, a6 * b2 + a7 * b5 + a8 * b8)


def _tr(a: tuple) -> tuple:
    return (a[0], a[3], a[6], a[1], a[4], a[7], a[2], a[5], a[8])


class BaseVelocityFilter:
    """Kalman filter on the base linear velocity in the world frame (see the module docstring)."""

    def __init__(self, cfg: VelocityConfig, n_feet: int, dt: float = 0.002):
        if n_feet < 1:
            raise ValueError(f"BaseVelocityFilter: need n_feet >= 1, got {n_feet}")
        if not dt > 0:
            raise ValueError(f"BaseVelocityFilter: dt must be > 0, got {dt}")
        self.cfg, self.n_feet, self.dt = cfg, n_feet, float(dt)
        self._r = cfg.sigma_meas ** 2
        self._q = (cfg.sigma_accel * self.dt) ** 2  # per nominal step
        self.v = np.zeros(3)                        # base linear velocity, world frame [m/s]
        self.P = np.eye(3) * cfg.sigma_init ** 2
        self.prev_support = np.zeros(n_feet, dtype=bool)
        self.cycles_in_support = np.zeros(n_feet, dtype=np.int64)
        # diagnostics of the last cycle; these arrays are replaced, never modified in place, so
        # callers may keep references to them
        self.d2 = np.full(n_feet, np.nan)           # NaN: not a support foot this cycle
        self.inflation = np.ones(n_feet)
        self.used = np.zeros(n_feet, dtype=bool)
        self.excluded = np.zeros(n_feet, dtype=bool)

    def set_config(self, cfg: VelocityConfig) -> None:
        """New gains (live parameter update); the estimate and its covariance are kept."""
        self.cfg = cfg
        self._r = cfg.sigma_meas ** 2
        self._q = (cfg.sigma_accel * self.dt) ** 2

    def reset(self, v_world: np.ndarray | None = None, support: np.ndarray | None = None) -> None:
        """Start at ``v_world`` [m/s] (default 0) with ``sigma_init`` covariance; feet in ``support``
        (default: all) count as settled (no exclusion)."""
        self.v[:] = 0.0 if v_world is None else v_world
        self.P[:] = np.eye(3) * self.cfg.sigma_init ** 2
        sup = np.ones(self.n_feet, dtype=bool) if support is None else np.asarray(support, dtype=bool)
        self.prev_support[:] = sup
        self.cycles_in_support = np.where(sup, self.cfg.exclusion_cycles, 0)
        self.d2 = np.full(self.n_feet, np.nan)
        self.inflation = np.ones(self.n_feet)
        self.used = np.zeros(self.n_feet, dtype=bool)
        self.excluded = np.zeros(self.n_feet, dtype=bool)

    def predict(self, a_world: np.ndarray, dt: float | None = None) -> None:
        """Integrate the world-frame base acceleration ``a_world = R f + g`` [m/s^2] over ``dt`` [s]."""
        dt = self.dt if dt is None else float(dt)
        self.v += dt * a_world
        q = self._q * (dt / self.dt) ** 2 if dt != self.dt else self._q
        self.P[0, 0] += q
        self.P[1, 1] += q
        self.P[2, 2] += q

    def reliable(self, support: np.ndarray) -> np.ndarray:
        """Advance the exclusion counters by one control cycle for the support set ``support`` and
        return the feet usable as velocity measurements now."""
        sup = support.tolist()
        prev = self.prev_support.tolist()
        cyc = self.cycles_in_support.tolist()
        n_ex = self.cfg.exclusion_cycles
        usable = [False] * self.n_feet
        for i, s in enumerate(sup):
            cyc[i] = (cyc[i] + 1 if prev[i] else 0) if s else 0   # 0 on the cycle the foot enters
            usable[i] = s and cyc[i] >= n_ex
        self.cycles_in_support = np.array(cyc)
        self.prev_support[:] = sup
        usable = np.array(usable)
        self.excluded = support & ~usable
        return usable

    def correct(self, z: np.ndarray, usable: np.ndarray, support: np.ndarray | None = None) -> None:
        """Correct with the per-foot velocity measurements ``z`` ``(n_feet, 3)`` [m/s, world] of the
        ``usable`` feet. ``d2`` is also computed (diagnostics only) for the other ``support`` feet.

        (3x3 algebra in plain Python floats: at this size it is several times cheaper than numpy.)"""
        cfg = self.cfg
        r = self._r
        P = tuple(self.P.ravel().tolist())
        v0, v1, v2 = self.v.tolist()
        s0, s1, s2, s3, s4, s5, s6, s7, s8 = _inv3((P[0] + r, P[1], P[2], P[3], P[4] + r, P[5],
                                                    P[6], P[7], P[8] + r))
        use = usable.tolist()
        ev = use if support is None else (usable | support).tolist()
        gate, cap, gating = cfg.gate_d2, cfg.max_inflation, cfg.gating
        d2s = [math.nan] * self.n_feet
        cs = [1.0] * self.n_feet
        wsum = zb0 = zb1 = zb2 = 0.0
        for i, (za, zb, zc) in enumerate(z.tolist()):
            if not ev[i]:
                continue
            r0, r1, r2 = za - v0, zb - v1, zc - v2
            d2 = ((s0 * r0 + s1 * r1 + s2 * r2) * r0 + (s3 * r0 + s4 * r1 + s5 * r2) * r1
                  + (s6 * r0 + s7 * r1 + s8 * r2) * r2)
            c = min(max(d2 / gate, 1.0), cap) if gating else 1.0
            d2s[i], cs[i] = d2, c
            if use[i]:
                w = 1.0 / c
                wsum += w
                zb0 += w * za
                zb1 += w * zb
                zb2 += w * zc
        self.d2 = np.array(d2s)
        self.inflation = np.array(cs)
        self.used = np.array(use)
        if wsum == 0.0:
            return
        # all feet measure the same state (H = I): one update with the information-weighted mean
        rho = r / wsum
        e0, e1, e2 = zb0 / wsum - v0, zb1 / wsum - v1, zb2 / wsum - v2
        G = _inv3((P[0] + rho, P[1], P[2], P[3], P[4] + rho, P[5], P[6], P[7], P[8] + rho))
        K = _mm(P, G)                                         # K = P (P + rho I)^-1
        self.v[0] += K[0] * e0 + K[1] * e1 + K[2] * e2
        self.v[1] += K[3] * e0 + K[4] * e1 + K[5] * e2
        self.v[2] += K[6] * e0 + K[7] * e1 + K[8] * e2
        A = (1.0 - K[0], -K[1], -K[2], -K[3], 1.0 - K[4], -K[5], -K[6], -K[7], 1.0 - K[8])
        APA = _mm(_mm(A, P), _tr(A))                          # Joseph form
        KK = _mm(K, _tr(K))
        p = [a + rho * b for a, b in zip(APA, KK)]
        p01, p02, p12 = 0.5 * (p[1] + p[3]), 0.5 * (p[2] + p[6]), 0.5 * (p[5] + p[7])   # symmetrize
        self.P = np.array([[p[0], p01, p02], [p01, p[4], p12], [p02, p12, p[8]]])
