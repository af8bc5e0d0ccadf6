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


def inv3(A: np.ndarray) -> np.ndarray:
    """Inverse of a 3x3 matrix by cofactors (much cheaper than ``np.linalg.inv`` at this size)."""
    (a, b, c), (d, e, f), (g, h, i) = A.tolist()
    c00, c01, c02 = e * i - f * h, f * g - d * i, d * h - e * g
    det = a * c00 + b * c01 + c * c02
    if det == 0.0 or not math.isfinite(det):
        raise np.linalg.LinAlgError("singular 3x3 matrix")
    s = 1.0 / det
    return np.array([[c00 * s, (c * h - b * i) * s, (b * f - c * e) * s],
                     [c01 * s, (a * i - c * g) * s, (c * d - a * f) * s],
                     [c02 * s, (b * g - a * h) * s, (a * e - b * d) * s]])


def inflation_factor(d2: np.ndarray | float, threshold: float = 7.81, cap: float = 100.0) -> np.ndarray:
    """Covariance inflation ``clip(d2 / threshold, 1, cap)`` (1 at/below the threshold, continuous)."""
    return np.clip(np.asarray(d2, dtype=float) / threshold, 1.0, cap)


class BaseVelocityFilter:
    """Kalman filter on the base linear velocity in the world frame (see the module docstring)."""

    def __init__(self, cfg: VelocityConfig, n_feet: int, dt: float = 0.002):
        if n_feet < 1:
            raise ValueError(f"BaseVelocityFilter: need n_feet >= 1, got {n_feet}")
        if not dt > 0:
            raise ValueError(f"BaseVelocityFilter: dt must be > 0, got {dt}")
        self.cfg, self.n_feet, self.dt = cfg, n_feet, float(dt)
        self._r = cfg.sigma_meas ** 2
        self._rI = self._r * np.eye(3)
        self._eye3 = np.eye(3)
        self._ones = np.ones(n_feet)
        self._q = (cfg.sigma_accel * self.dt) ** 2  # per nominal step
        self.v = np.zeros(3)                        # base linear velocity, world frame [m/s]
        self.P = np.eye(3) * cfg.sigma_init ** 2
        self.prev_support = np.zeros(n_feet, dtype=bool)
        self.cycles_in_support = np.zeros(n_feet, dtype=np.int64)
        # diagnostics of the last correction
        self.d2 = np.full(n_feet, np.nan)           # NaN: not a support foot this cycle
        self.inflation = np.ones(n_feet)
        self.used = np.zeros(n_feet, dtype=bool)
        self.excluded = np.zeros(n_feet, dtype=bool)

    def reset(self, v_world: np.ndarray | None = None, support: np.ndarray | None = None) -> None:
        """Start at ``v_world`` [m/s] (default 0) with ``sigma_init`` covariance; feet in ``support``
        (default: all) count as settled (no exclusion)."""
        self.v[:] = 0.0 if v_world is None else v_world
        self.P[:] = np.eye(3) * self.cfg.sigma_init ** 2
        sup = np.ones(self.n_feet, dtype=bool) if support is None else np.asarray(support, dtype=bool)
        self.prev_support[:] = sup
        self.cycles_in_support[:] = np.where(sup, self.cfg.exclusion_cycles, 0)
        self.d2[:] = np.nan
        self.inflation[:] = 1.0
        self.used[:] = False
        self.excluded[:] = False

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
        entering = support & ~self.prev_support
        self.cycles_in_support += 1
        self.cycles_in_support[entering | ~support] = 0
        self.prev_support[:] = support
        usable = support & (self.cycles_in_support >= self.cfg.exclusion_cycles)
        self.excluded[:] = support & ~usable
        return usable

    def correct(self, z: np.ndarray, usable: np.ndarray, support: np.ndarray | None = None) -> None:
        """Correct with the per-foot velocity measurements ``z`` ``(n_feet, 3)`` [m/s, world] of the
        ``usable`` feet. ``d2`` is also computed (diagnostics only) for the other ``support`` feet."""
        cfg = self.cfg
        evaluate = usable if support is None else (usable | support)
        S_inv = inv3(self.P + self._rI)
        res = z - self.v
        d2 = ((res @ S_inv) * res).sum(axis=1)
        self.d2[:] = np.where(evaluate, d2, np.nan)
        c = np.clip(d2 * (1.0 / cfg.gate_d2), 1.0, cfg.max_inflation) if cfg.gating else self._ones
        self.inflation[:] = np.where(evaluate, c, 1.0)
        self.used[:] = usable
        if not usable.any():
            return
        w = 1.0 / c[usable]
        wsum = w.sum()
        z_bar = (w @ z[usable]) / wsum
        r_bar = self._r / wsum
        P = self.P
        K = P @ inv3(P + r_bar * self._eye3)
        self.v += K @ (z_bar - self.v)
        A = self._eye3 - K
        P = A @ P @ A.T + r_bar * (K @ K.T)
        self.P = 0.5 * (P + P.T)
