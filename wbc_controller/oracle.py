"""The controller's specification: the whole-body-controller cycle in plain numpy.

:class:`ReferenceController` builds the QP of :mod:`wbc_controller.controller` (rows, cost and
acceptance as its module docstring states) with numpy and Pinocchio's frame quantities
(:meth:`legged_wbc.model.RobotModel.legs_batch`), one block per step, and solves it with the
configured backend. It is not a production path: the tests compare the compiled controller
(:class:`~wbc_controller.controller.WholeBodyController`) against it to a few ulps of each
quantity's scale, and ``legged-wbc bench cycle`` times it as its "reference" beside the compiled
cycle (its p50 is the machine's speed index). Same constructor, ``reset``, ``set_config``,
``update`` and outputs as the production class.
"""

from __future__ import annotations

import math
import time

import numpy as np

from legged_wbc.conventions import rotation_from_quat_xyzw
from legged_wbc.gait import SUPPORT
from legged_wbc.model import cross_rows, null_vectors

from .controller import ControllerCore, ControllerInput, ControllerOutput, Diagnostics, InputError
from .qp import INF, QpResult
from .references import body_task, vee


class ReferenceController(ControllerCore):
    """The original numpy cycle of the whole-body controller (the oracle of the compiled one)."""

    def _build(self) -> None:
        super()._build()
        self._build_index()
        self._fill_constant_rows()

    def _fill_config(self) -> None:
        self._fill_constant_rows()

    def _fill_constant_rows(self) -> None:
        """Friction pyramids, ``m_theta = 0`` and base force rows, slack columns (configuration only)."""
        p, N = self.problem, self.N
        for i in range(N):
            c = self.lam0 + 4 * i
            # m_theta,i = 0; sum of forces in the base force rows
            p.A_eq[6 + i, c + 3] = 1.0
            p.A_eq[0:3, c:c + 3] = -np.eye(3)
            r = self.row_fric + 5 * i
            p.C[r + 0, c + 0], p.C[r + 0, c + 2] = 1.0, -self.cfg.mu
            p.C[r + 1, c + 0], p.C[r + 1, c + 2] = -1.0, -self.cfg.mu
            p.C[r + 2, c + 1], p.C[r + 2, c + 2] = 1.0, -self.cfg.mu
            p.C[r + 3, c + 1], p.C[r + 3, c + 2] = -1.0, -self.cfg.mu
            p.C[r + 4, c + 2] = 1.0
            p.l[r:r + 4] = -INF
            p.u[r:r + 4] = 0.0
            p.l[r + 4] = 0.0
            if self.ns:
                p.C[self.row_cbf + i, self.nv + 4 * N + i] = 1.0

    def _build_index(self) -> None:
        """Flat index arrays so per-leg blocks are written with one fancy assignment each."""
        N = self.N
        legv = np.array(self.leg_v)                                   # (N, 4) columns in nu_dot
        self._legv = legv
        self._H_rows = np.repeat(legv, 4, axis=1).reshape(-1)         # (N*16,) row-major 4x4 blocks
        self._H_cols = np.tile(legv, (1, 4)).reshape(-1)
        lam = self.lam0 + 4 * np.arange(N)[:, None] + np.arange(4)[None, :]  # (N, 4)
        tau_rows = self.row_tau + np.array(self.leg_j)                # (N, 4)
        self._T_rows = np.repeat(tau_rows, 4, axis=1).reshape(-1)
        self._T_cols = np.tile(lam, (1, 4)).reshape(-1)
        self._cbf_rows = np.repeat(self.row_cbf + np.arange(N), 4)
        self._cbf_cols = legv.reshape(-1)
        # moment rows of the base equations: -[r_i]x on (f_x, f_y, f_z) of each foot
        f_cols = lam[:, :3]
        self._S_rows = np.tile(np.repeat(np.arange(3, 6), 3), N)
        self._S_cols = np.concatenate([np.tile(f_cols[i], 3) for i in range(N)])
        self._fz_rows = self.row_fric + 5 * np.arange(N) + 4
        self._lam_flat = lam.reshape(-1)
        self._leg_j_flat = np.array(self.leg_j).reshape(-1)
        self._neg_skew = np.zeros((N, 9))
        self._Mll_rows = legv[:, :, None].repeat(4, axis=2)              # (N, 4, 4) leg blocks of M
        self._Mll_cols = legv[:, None, :].repeat(4, axis=1)

    def _check_input(self, inp: ControllerInput) -> None:
        rm = self.rm
        checks = (("q", inp.q, rm.nq), ("v", inp.v, rm.nv), ("support", inp.support, self.N),
                  ("tau_ext", inp.tau_ext, self.n))
        for name, arr, size in checks:
            if arr is None and name == "tau_ext":
                continue
            shape = getattr(arr, "shape", None)
            if shape != (size,):
                raise InputError(f"controller input {name}: expected {size} values, got shape {np.shape(arr)}")
            if arr.dtype.kind == "f" and not np.isfinite(arr).all():
                raise InputError(f"controller input {name}: contains NaN/inf")
        if not math.isfinite(inp.t):
            raise InputError("controller input t: not finite")
        x, y, z, w = inp.q[3:7].tolist()
        if abs(x * x + y * y + z * z + w * w - 1.0) > 2e-3:
            raise InputError("controller input q: base quaternion is not unit")

    # ------------------------------------------------------------------ the cycle
    def update(self, inp: ControllerInput) -> ControllerOutput:
        """One control cycle. Raises :class:`InputError` on bad input (nothing is updated then)."""
        self._check_input(inp)
        cfg, rm = self.cfg, self.rm
        q, v = inp.q, inp.v
        support = np.asarray(inp.support, dtype=bool)
        qj, dqj = q[7:], v[6:]
        t_cycle = time.perf_counter()
        lb = rm.legs_batch(qj, dqj)
        if cfg.jdot_mode == "fd":
            self._fd_jdot(lb, qj, dqj)
        M = rm.mass_matrix(q)
        h = rm.bias(q, v)
        R = rotation_from_quat_xyzw(q[3:7])
        t_start = time.perf_counter()  # QP time = build + solve + residual check (as the paper)
        ref = self.refs(inp.t)
        acc_body = body_task(cfg, ref, q[:3], R, v[:3], v[3:6])
        phases, progress, cycles = self.gait.state(inp.t)
        W, b = self._task_targets(lb, support, acc_body, v[3:6])
        self._start_swings(lb, R, ref, phases, cycles)
        tau_sw = self._swing_torques(lb, M, support, phases, progress, b)
        tau_comp = self._compensation(lb, support, inp.tau_ext)
        tau_sw_total = tau_sw + tau_comp
        self._fill_cost(lb, W, b, acc_body)
        self._fill_rows(lb, M, h, support, tau_sw_total)
        res, solve_us, checks = self._solve_and_check(M, h, lb, tau_sw_total)
        x, finite, eq_res, viol, tau_wbc, tau, in_bounds = checks
        accepted = (res.optimal and finite and eq_res <= cfg.residual_tol and viol <= cfg.residual_tol
                    and bool(np.all(np.isfinite(tau))) and in_bounds)
        qp_us = (time.perf_counter() - t_start) * 1e6
        out_tau, status = self._accept(res, accepted, eq_res, viol, tau)
        E = ref.R.T @ R - R.T @ ref.R
        lam = x[self.lam0:self.lam0 + 4 * self.N]
        diag = Diagnostics(theta=lb.theta.copy(), theta_dot=lb.theta_dot.copy(),
                           cbf_active=self._cbf_active(x, support, accepted), support=support.copy(),
                           qp_status=status, qp_accepted=bool(accepted), qp_iterations=res.iterations,
                           qp_time_us=qp_us, solve_time_us=solve_us, eq_residual=eq_res, ineq_violation=viol,
                           consecutive_failures=self.consecutive_failures, total_failures=self.total_failures,
                           safe_stop=self.safe_stop, forces=lam.copy(), tau_wbc=tau_wbc, tau_sw=tau_sw,
                           tau_comp=tau_comp, body_error_rpy=0.5 * vee(E))
        self.last_x = x
        self.last_legs = lb
        diag.cycle_time_us = (time.perf_counter() - t_cycle) * 1e6
        return ControllerOutput(tau=out_tau, diag=diag)

    def _task_targets(self, lb, support, acc_body, w_b):
        """Weights ``W`` and desired accelerations ``b`` (N, 4) of the leg rows, before the swing
        feed-forward (docs/design.md, *Task targets*)."""
        cfg, N = self.cfg, self.N
        mode = cfg.relative_pitch_mode
        W = np.empty((N, 4))
        b = np.empty((N, 4))
        W[:, :3] = np.where(support, cfg.w_support, cfg.w_swing)[:, None]
        W[:, 3] = cfg.w_pitch_none if mode == "none" else cfg.w_pitch
        b[:, :3] = -lb.dJ_p_dq
        b[:, 3] = -lb.dJ_theta_dq
        if cfg.support_foot_acceleration == "consistent":
            # relative acceleration of a world-fixed foot under the desired base motion:
            # a_rel = -(v_dot_B + w_dot_B x p) - w_B x v_rel   (base frame)
            a_rel = -(acc_body[:3][None, :] + cross_rows(np.broadcast_to(acc_body[3:], lb.p.shape), lb.p)) \
                - cross_rows(np.broadcast_to(w_b, lb.p.shape), lb.v_p)
            b[:, :3] += np.where(support[:, None], a_rel, 0.0)
        if mode != "none":
            damp = np.clip(-cfg.k_dtheta * lb.theta_dot, -cfg.theta_ddot_max, cfg.theta_ddot_max)
            if cfg.swing_pitch_recenter:
                # swing legs are free to move in their null space: bring theta back to the nominal
                # stance value before touchdown (support legs still get no reference angle)
                swing_acc = cfg.kp_swing_pitch * (self.theta_nominal - lb.theta) - cfg.kd_swing_pitch * lb.theta_dot
            else:
                swing_acc = np.zeros(N)
            b[:, 3] += np.where(support, damp, swing_acc)
        return W, b

    def _start_swings(self, lb, R, ref, phases, cycles) -> None:
        """Plan the swings that begin this cycle: from where the foot is to the touchdown target."""
        cfg = self.cfg
        for i in np.flatnonzero((phases != SUPPORT) & (cycles != self._swing_cycle)):
            self._swing_cycle[i] = cycles[i]
            target = self.stance[i][0].copy()
            target[2] = -cfg.stand_height + self.rm.foot_radius - cfg.touchdown_depth
            v_body = R.T @ ref.v
            target[:2] += cfg.raibert_gain * v_body[:2] * self.gait.support_duration
            self.swing.begin(i, lb.p[i], target, self.gait.swing_duration, v_start=lb.v_p[i], v_end=-v_body)

    def _swing_torques(self, lb, M, support, phases, progress, b) -> np.ndarray:
        """Swing PD torque (task space, base frame) of the legs outside the support set; their
        feed-forward accelerations are added to ``b``."""
        cfg = self.cfg
        tau_sw = np.zeros(self.n)
        sw = np.flatnonzero(~support)
        if not sw.size:
            return tau_sw
        tracking = self.swing.planned[sw] & (phases[sw] != SUPPORT)
        p_ref, v_ref, a_ref = self.swing(sw, progress[sw], cfg.lift_height)
        hold = ~tracking  # out of the support set outside a nominal swing: hold the foot where it is
        p_ref[hold], v_ref[hold], a_ref[hold] = lb.p[sw][hold], 0.0, 0.0
        b[sw, :3] += a_ref
        f_sw = self._kp_swing * (p_ref - lb.p[sw]) + self._kd_swing * (v_ref - lb.v_p[sw])
        Jp = lb.J[sw, :3]
        t_sw = np.einsum("kij,ki->kj", Jp, f_sw)                     # J_p^T F
        if cfg.swing_pitch_projection:
            # remove the part of J_p^T F that would accelerate the relative pitch:
            # tau' = tau - J_th^T (J_th M^-1 tau) / (J_th M^-1 J_th^T)   (leg block of M)
            Jt = lb.J[sw, 3]
            Minv_Jt = np.linalg.solve(M[self._Mll_rows[sw], self._Mll_cols[sw]], Jt[:, :, None])[:, :, 0]
            den = np.einsum("ki,ki->k", Jt, Minv_Jt)
            coef = np.where(den > 1e-12, np.einsum("ki,ki->k", Minv_Jt, t_sw) / np.maximum(den, 1e-12), 0.0)
            t_sw = t_sw - Jt * coef[:, None]
        tau_sw[np.array(self.leg_j)[sw].reshape(-1)] = t_sw.reshape(-1)
        return tau_sw

    def _compensation(self, lb, support, tau_ext) -> np.ndarray:
        """Estimated disturbance along the support legs' null spaces, cancelled by the command
        (``J_p^T f`` has no component along ``n``, so ``n^T tau_ext`` is free of the contact forces)."""
        cfg = self.cfg
        tau_comp = np.zeros(self.n)
        if cfg.null_space_compensation and tau_ext is not None:
            sup = np.flatnonzero(support)
            if sup.size:
                n_vec = null_vectors(lb.J[sup, :3], lb.J[sup, 3])
                jidx = np.array(self.leg_j)[sup]
                d = np.einsum("ki,ki->k", n_vec, tau_ext[jidx])
                d = np.clip(d, -cfg.compensation_limit, cfg.compensation_limit)
                tau_comp[jidx.reshape(-1)] = (n_vec * d[:, None]).reshape(-1)
        return tau_comp

    def _fill_cost(self, lb, W, b, acc_body) -> None:
        """Cost: body rows, leg blocks ``J_i^T W_i J_i``, force regularization, slacks, regularization."""
        cfg, p, N, nv = self.cfg, self.problem, self.N, self.nv
        p.H[:] = 0.0
        p.g[:] = 0.0
        p.H[np.arange(6), np.arange(6)] = cfg.w_body
        p.g[:6] = -cfg.w_body * acc_body
        JtW = lb.J.transpose(0, 2, 1) * W[:, None, :]                 # (N, 4, 4)
        p.H[self._H_rows, self._H_cols] = (JtW @ lb.J).reshape(-1)
        p.g[self._legv.reshape(-1)] = -np.einsum("nij,nj->ni", JtW, b).reshape(-1)
        p.H[self._lam_flat, self._lam_flat] = self._lam_diag
        for k in range(self.ns):
            s = nv + 4 * N + k
            p.H[s, s] = cfg.cbf_slack_weight
        reg = cfg.hessian_reg * float(p.H.diagonal().max())
        p.H[np.diag_indices(self.nx)] += reg

    def _fill_rows(self, lb, M, h, support, tau_sw_total) -> None:
        """Floating-base rows, contact state (``f_z`` bounds), torque rows, CBF rows."""
        cfg, p, N, nv = self.cfg, self.problem, self.N, self.nv
        # floating-base rows: M_B nu_dot - [sum f; sum r x f] = -h_B
        p.A_eq[:6, :nv] = M[:6]
        p.b_eq[:6] = -h[:6]
        ns = self._neg_skew                                # -[r]x row-major per foot; zeros stay zero
        ns[:, 1], ns[:, 2], ns[:, 5] = lb.p[:, 2], -lb.p[:, 1], lb.p[:, 0]
        ns[:, 3], ns[:, 6], ns[:, 7] = -lb.p[:, 2], lb.p[:, 1], -lb.p[:, 0]
        p.A_eq[self._S_rows, self._S_cols] = ns.reshape(-1)
        p.u[self._fz_rows] = np.where(support, cfg.fz_max, 0.0)
        r_t = self.row_tau
        p.C[r_t:r_t + self.n, :nv] = M[6:]
        p.C[self._T_rows, self._T_cols] = (-lb.J.transpose(0, 2, 1)).reshape(-1)
        tmin, tmax = self.tau_bounds()
        p.l[r_t:r_t + self.n] = tmin - h[6:] - tau_sw_total
        p.u[r_t:r_t + self.n] = tmax - h[6:] - tau_sw_total
        # CBF rows (loose unless cbf mode and support)
        p.C[self._cbf_rows, self._cbf_cols] = lb.J[:, 3].reshape(-1)
        rc = slice(self.row_cbf, self.row_cbf + N)
        if cfg.relative_pitch_mode == "cbf":
            th_lo, th_hi = cfg.theta_min + cfg.cbf_margin, cfg.theta_max - cfg.cbf_margin
            lo = -(cfg.kp_b * (lb.theta - th_lo) + cfg.kd_b * lb.theta_dot + lb.dJ_theta_dq)
            hi = cfg.kp_b * (th_hi - lb.theta) - cfg.kd_b * lb.theta_dot - lb.dJ_theta_dq
            p.l[rc] = np.where(support, lo, -INF)
            p.u[rc] = np.where(support, hi, INF)
        else:
            p.l[rc], p.u[rc] = -INF, INF

    def _solve_and_check(self, M, h, lb, tau_sw_total):
        """Solve; the solution's residuals and its command torque. Returns ``(result, solve time
        [us], (x, finite, equality residual, inequality violation, tau_wbc, tau, in bounds))``."""
        p, N, nv = self.problem, self.N, self.nv
        t_solve = time.perf_counter()
        try:
            res = self.backend.solve(p)
        except Exception as exc:  # a backend error is a failed cycle, not a crash
            res = QpResult(np.zeros(self.nx), False, f"solver error: {exc}", 0)
        solve_us = (time.perf_counter() - t_solve) * 1e6
        x = res.x
        finite = bool(np.all(np.isfinite(x)))
        eq_res, viol = p.residuals(x) if finite else (np.inf, np.inf)
        nu_dot = x[:nv]
        lam = x[self.lam0:self.lam0 + 4 * N]
        tau_wbc = M[6:] @ nu_dot + h[6:]
        tau_wbc[self._leg_j_flat] -= np.einsum("nji,nj->ni", lb.J, lam.reshape(N, 4)).reshape(-1)
        tau = tau_wbc + tau_sw_total
        tmin, tmax = self.tau_bounds()
        in_bounds = bool(((tau >= tmin - self._tau_tol) & (tau <= tmax + self._tau_tol)).all())
        return res, solve_us, (x, finite, eq_res, viol, tau_wbc, tau, in_bounds)

    def _cbf_active(self, x, support, accepted) -> np.ndarray:
        """Per leg: a CBF bound binds at the accepted solution (support legs, ``cbf`` mode)."""
        if self.cfg.relative_pitch_mode != "cbf" or not accepted:
            return np.zeros(self.N, dtype=bool)
        p, rc = self.problem, slice(self.row_cbf, self.row_cbf + self.N)
        Cx = p.C[rc] @ x
        tol = 1e-6 * np.maximum(1.0, np.abs(p.u[rc]))
        return support & ((Cx >= p.u[rc] - tol) | (Cx <= p.l[rc] + tol))
