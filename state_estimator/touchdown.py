"""Touchdown detection from a per-leg Kalman filter on joint velocity and external joint torque.

For every leg ``i`` (``k`` joints) the filter state is ``xi = [q_dot_i (k); tau_ext_i (k)]``:

    q_dot_{k+1}   = q_dot_k + dt M_i^-1 (tau_i - h_i - tau_ext_k) + w_q,    w_q   ~ N(0, sigma_dq_process^2 I)
    tau_ext_{k+1} = tau_ext_k + w_tau,                                     w_tau ~ N(0, sigma_tau_process^2 I)
    y_k           = q_dot_k + v,                                           v     ~ N(0, sigma_dq_meas^2 I)

* ``M_i`` [kg m^2] is leg ``i``'s diagonal block of the floating-base mass matrix (armature
  included), ``h_i = C_i + G_i`` [N m] its rows of the bias vector ``h = C(q, v) v + g(q)``; both are
  evaluated at the estimator's state (the caller passes them, computed once per cycle for all legs).
  The leg block alone ignores the coupling to the base acceleration (``M_iB a_B``); the estimator
  adds it to ``h_i`` from the IMU by default (``touchdown.base_coupling``), otherwise it is absorbed
  by ``tau_ext``.
* ``tau_i`` [N m] is the applied motor torque (measured joint effort) over the step.
* **Sign convention:** ``tau_ext`` [N m] is the external joint torque that *opposes* the motor in the
  model above: ``M q_ddot + h = tau - tau_ext``. A ground reaction force ``F`` on the foot (base frame)
  gives ``tau_ext = -J_p^T F``; a foot pressed down onto the ground by the motors shows a
  ``tau_ext`` close to the motor torque that holds the load.

Score: ``s_k = ||tau_ext_hat_k - tau_ext_hat_{k-1}|| / dt`` [N m/s] (0 on the first sample).

Phase logic (nominal phase from the gait scheduler): in support and swing-up the filter only runs;
in swing-down a touchdown is declared when ``s > gamma_land`` on ``n_land`` consecutive samples, and
stays latched until that swing-down ends. The consecutive count restarts at every swing-down, and
the latch is cleared when the phase leaves swing-down or the leg's gait-cycle index changes.

Late touchdowns (``late_max_cycles`` > 0): a swing-down that ends without a touchdown is extended:
the leg stays *late* (``late > 0``, out of the estimated support set; the controller keeps it
descending) and the landing test goes on, until it sees the contact (event ``LATE_LANDED``, the leg
joins the support set) or ``late_max_cycles`` have passed (event ``LATE_FALLBACK``: the leg joins
the support set as the gait says, as without the extension).

Numerics: the covariance update is Joseph-form and symmetrized every step, so ``P`` stays symmetric
positive definite. All legs are filtered together (arrays of shape ``(n_legs, ...)``) to keep the
500 Hz cost low; a single leg is ``n_legs = 1``.
"""

from __future__ import annotations

import numpy as np

from legged_wbc.gait import SUPPORT, SWING_DOWN

from .config import TouchdownConfig


LATE_LANDED, LATE_FALLBACK = 1, 2      # events of a late leg (``TouchdownDetector.event``)


class TouchdownDetector:
    """Bank of ``n_legs`` touchdown Kalman filters (``2k`` states each) with the landing test."""

    def __init__(self, cfg: TouchdownConfig, n_legs: int, k: int = 4, dt: float = 0.002):
        if n_legs < 1 or k < 1:
            raise ValueError(f"TouchdownDetector: need n_legs >= 1 and k >= 1, got {n_legs}, {k}")
        if not dt > 0:
            raise ValueError(f"TouchdownDetector: dt must be > 0, got {dt}")
        self.cfg, self.n_legs, self.k, self.dt = cfg, n_legs, k, float(dt)
        L, n = n_legs, 2 * k
        self._I = np.broadcast_to(np.eye(n), (L, n, n))
        self._Q = np.diag(np.concatenate([np.full(k, cfg.sigma_dq_process ** 2),
                                          np.full(k, cfg.sigma_tau_process ** 2)]))  # per nominal step
        self._r = cfg.sigma_dq_meas ** 2
        self._R = self._r * np.eye(k)
        self.x = np.zeros((L, n))            # [q_dot (k); tau_ext (k)] per leg
        self.P = np.zeros((L, n, n))
        self.score = np.zeros(L)             # [N m/s] (replaced each step, never modified in place)
        self.count = np.zeros(L, dtype=int)  # consecutive swing-down samples with s > gamma_land
        self.touchdown = np.zeros(L, dtype=bool)
        self.latched_cycle = np.full(L, -(2 ** 62), dtype=np.int64)
        self._prev_phase = np.zeros(L, dtype=int)
        self._prev_cycle = np.full(L, -1, dtype=np.int64)
        self.late = np.zeros(L, dtype=np.int64)   # cycles a late leg has been kept out of support (0: not late)
        self.event = np.zeros(L, dtype=np.int64)  # this cycle: 0, LATE_LANDED or LATE_FALLBACK
        self._F = np.zeros((L, n, n))
        self._F[:] = np.eye(n)
        self.initialized = False

    def set_config(self, cfg: TouchdownConfig) -> None:
        """New gains (live parameter update); the filter state is kept."""
        k = self.k
        self.cfg = cfg
        self._Q = np.diag(np.concatenate([np.full(k, cfg.sigma_dq_process ** 2),
                                          np.full(k, cfg.sigma_tau_process ** 2)]))
        self._r = cfg.sigma_dq_meas ** 2
        self._R = self._r * np.eye(k)

    # ------------------------------------------------------------------ state access
    @property
    def dq(self) -> np.ndarray:
        """Filtered joint velocities ``(n_legs, k)`` [rad/s]."""
        return self.x[:, : self.k]

    @property
    def tau_ext(self) -> np.ndarray:
        """Estimated external joint torques ``(n_legs, k)`` [N m] (opposing the motor, see module doc)."""
        return self.x[:, self.k:]

    def reset(self, dq0: np.ndarray, tau_ext0: np.ndarray | None = None) -> None:
        """Start every filter at ``q_dot = dq0`` and ``tau_ext = tau_ext0`` (0 if None), ``(n_legs, k)``."""
        k = self.k
        self.x[:, :k] = dq0
        self.x[:, k:] = 0.0 if tau_ext0 is None else tau_ext0
        P0 = np.concatenate([np.full(k, self._r), np.full(k, self.cfg.sigma_tau_init ** 2)])
        self.P[:] = np.diag(P0)
        self.score = np.zeros(self.n_legs)
        self.count[:] = 0
        self.touchdown[:] = False
        self.latched_cycle[:] = -(2 ** 62)
        self._prev_phase[:] = 0
        self._prev_cycle[:] = -1
        self.late[:] = 0
        self.event[:] = 0
        self.initialized = True

    # ------------------------------------------------------------------ Kalman filter
    def filter(self, M_inv: np.ndarray, tau: np.ndarray, h: np.ndarray, dq_meas: np.ndarray,
               dt: float | None = None) -> np.ndarray:
        """One predict + correct step for all legs; returns the scores ``(n_legs,)`` [N m/s].

        ``M_inv`` ``(n_legs, k, k)`` inverse leg mass-matrix blocks [1/(kg m^2)], ``tau`` applied motor
        torques over the step, ``h`` bias torques ``(n_legs, k)`` [N m], ``dq_meas`` measured joint
        velocities ``(n_legs, k)`` [rad/s]; ``dt`` [s] (default: the nominal step). Process noise is
        specified per nominal step and scaled by ``dt / dt_nominal``."""
        if not self.initialized:
            raise RuntimeError("TouchdownDetector: call reset() first")
        dt = self.dt if dt is None else float(dt)
        k, x = self.k, self.x
        tau_prev = x[:, k:].copy()
        # predict: x <- F x + B u, F = [[I, -dt M^-1], [0, I]], B u = dt M^-1 (tau - h)
        B = dt * M_inv
        F = self._F
        np.negative(B, out=F[:, :k, k:])
        x[:, :k] += (B @ (tau - h - x[:, k:])[:, :, None])[:, :, 0]
        P = F @ self.P @ F.transpose(0, 2, 1)
        P += self._Q if dt == self.dt else self._Q * (dt / self.dt)
        # correct with y = q_dot + v (H = [I 0]); Joseph form, symmetrized
        K = P[:, :, :k] @ np.linalg.inv(P[:, :k, :k] + self._R)     # (L, 2k, k)
        x += (K @ (dq_meas - x[:, :k])[:, :, None])[:, :, 0]
        A = self._I.copy()
        A[:, :, :k] -= K                                            # I - K H
        P = A @ P @ A.transpose(0, 2, 1)
        P += self._r * (K @ K.transpose(0, 2, 1))
        P += P.transpose(0, 2, 1)
        P *= 0.5
        self.P = P
        d = x[:, k:] - tau_prev
        self.score = np.sqrt((d * d).sum(axis=1)) / dt
        return self.score

    # ------------------------------------------------------------------ landing test
    def detect(self, phase: np.ndarray, cycle: np.ndarray) -> np.ndarray:
        """Apply the phase logic to the current scores; returns the touchdown flags ``(n_legs,)``.

        ``phase``: nominal phase per leg (``legged_wbc.gait`` SUPPORT / SWING_UP / SWING_DOWN),
        ``cycle``: gait-cycle index per leg."""
        # (a plain loop over the legs: several times cheaper than numpy for a handful of legs)
        gamma, n_land, late_max = self.cfg.gamma_land, self.cfg.n_land, self.cfg.late_max_cycles
        ph, cy, sc = phase.tolist(), cycle.tolist(), self.score.tolist()
        td, cnt, latched = self.touchdown.tolist(), self.count.tolist(), self.latched_cycle.tolist()
        prev_ph, prev_cy = self._prev_phase.tolist(), self._prev_cycle.tolist()
        late, event = self.late.tolist(), [0] * self.n_legs
        for i in range(self.n_legs):
            if ph[i] != SWING_DOWN:                 # support / swing-up: filter only, latch cleared
                if late_max > 0 and ph[i] == SUPPORT and prev_ph[i] == SWING_DOWN and not td[i] and late[i] == 0:
                    late[i] = 1                     # the swing-down ended without contact: extend it
                elif ph[i] != SUPPORT:
                    late[i] = 0                     # a new swing began
                td[i] = False
                if late[i] > 0:                     # a late leg: the landing test goes on
                    cnt[i] = cnt[i] + 1 if sc[i] > gamma else 0
                    if cnt[i] >= n_land:
                        late[i], event[i] = 0, LATE_LANDED
                    elif late[i] > late_max:
                        late[i], event[i] = 0, LATE_FALLBACK
                    else:
                        late[i] += 1
                if late[i] == 0:
                    cnt[i] = 0
                continue
            late[i] = 0
            if td[i] and latched[i] != cy[i]:       # the latch lives only within its cycle's swing-down
                td[i] = False
            if prev_ph[i] != SWING_DOWN or prev_cy[i] != cy[i]:
                cnt[i] = 0                          # a new swing-down restarts the count
            if td[i]:
                continue
            cnt[i] = cnt[i] + 1 if sc[i] > gamma else 0
            if cnt[i] >= n_land:
                td[i], latched[i] = True, cy[i]
        self.touchdown[:] = td
        self.count[:] = cnt
        self.latched_cycle[:] = latched
        self._prev_phase[:] = ph
        self._prev_cycle[:] = cy
        self.late[:] = late
        self.event[:] = event
        return self.touchdown

    def update(self, M_inv, tau, h, dq_meas, phase, cycle, dt=None) -> np.ndarray:
        """``filter`` then ``detect``; returns the touchdown flags."""
        self.filter(M_inv, tau, h, dq_meas, dt)
        return self.detect(np.asarray(phase), np.asarray(cycle))
