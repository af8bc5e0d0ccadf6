"""The controller's specification: the whole-body-controller cycle in plain numpy.

:class:`ReferenceController` builds the QP of :mod:`wbc_controller.controller` (rows, cost and
acceptance as its module docstring states) with numpy and Pinocchio's frame quantities
(:meth:`legged_wbc.model.RobotModel.legs_batch`), one block per step from the numpy references
of :mod:`wbc_controller.blocks`, and solves it with the configured backend. It is not a production path: the tests compare the compiled controller
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

from .blocks.cbf import (barrier_legs_reference, cbf_active_reference, cbf_index, cbf_rows_reference,
                         disturbance_shift_reference)
from .blocks.command import CMD_PAUSED, CMD_TAU, CMD_WZ
from .blocks.compensation import null_space_compensation_reference
from .blocks.contact import contact_rows_reference, normal_force_bounds_reference
from .blocks.floating_base import floating_base_index, floating_base_rows_reference
from .blocks.friction import contact_normals_reference, pyramid_coefficients_reference, pyramid_rows_reference
from .blocks.joint_limits import joint_limit_rows_reference
from .blocks.leg_collision import LegCollisionReference
from .blocks.swing import start_swings_reference, swing_torques_reference
from .blocks.tasks import (body_task_reference, cost_index, plane_attitude_reference, task_cost_reference,
                           task_targets_reference, vee)
from .blocks.torque import command_torque_reference, torque_envelope_reference, torque_index, torque_rows_reference
from .controller import ControllerCore, ControllerInput, ControllerOutput, Diagnostics, InputError
from .qp import QpResult


class ReferenceController(ControllerCore):
    """The original numpy cycle of the whole-body controller (the oracle of the compiled one)."""

    def _build(self) -> None:
        super()._build()
        N, legv = self.N, np.array(self.leg_v)
        self._cost_index = cost_index(legv, self.lam0)
        self._torque_index = torque_index(self.leg_j, self.lam0, self.row_tau)
        self._cbf_index = cbf_index(legv, self.row_cbf)
        self._fb_index = floating_base_index(N, self.lam0)
        self._fz_rows = self.row_fric + 5 * np.arange(N) + 4
        k = legv.shape[1]
        self._Mll_index = (legv[:, :, None].repeat(k, axis=2), legv[:, None, :].repeat(k, axis=1))  # leg blocks of M
        self._stance_p = np.array([p for p, _ in self.stance])
        self._lc_ref = LegCollisionReference(self.rm, self.cfg) if self.n_lc else None
        self._fill_constant_rows()

    def _fill_config(self) -> None:
        if self._lc_ref is not None:
            self._lc_ref.cfg = self.cfg
        self._fill_constant_rows()

    def _fill_constant_rows(self) -> None:
        """Contact rows, friction pyramids (configuration only)."""
        p, N = self.problem, self.N
        contact_rows_reference(N, self.lam0, p.A_eq)
        pyramid_rows_reference(N, self.lam0, self.row_fric, self.cfg.mu, p.C, p.l, p.u)

    def _slack_columns(self, on: bool) -> None:
        """The CBF rows' slack columns (``cbf_slack``): 1 in a solve with the slacks, else 0."""
        for i in range(self.ns):
            self.problem.C[self.row_cbf + i, self.nv + 4 * self.N + i] = 1.0 if on else 0.0

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
        """One control cycle. Raises :class:`InputError` on bad input (nothing is updated then).
        Stages: model, cycle targets (references, tasks, swing and compensation torques), QP rows,
        solve (again with the CBF slacks if refused), diagnostics."""
        self._check_input(inp)
        normal = np.array(self._normal_of(inp))
        cmd = self.cmd_array if self._command_of(inp) else None
        support = np.asarray(inp.support, dtype=bool)
        t_cycle = time.perf_counter()
        lb, M, h, R = self._model(inp.q, inp.v)
        t_start = time.perf_counter()  # QP time = build + solve + residual check (as the paper)
        ref, tau_sw, tau_comp = self._cycle_targets(inp, normal, support, lb, M, R, cmd)
        tau_sw_total = tau_sw + tau_comp
        lc_dmin = self._qp_rows(inp, support, lb, M, h, tau_sw_total)
        res, solve_us, checks, accepted = self._solve_accepted(M, h, lb, tau_sw_total)
        x, _, eq_res, viol, tau_wbc, tau, _ = checks
        qp_us = (time.perf_counter() - t_start) * 1e6
        out_tau, status = self._accept(res, accepted, eq_res, viol, tau)
        E = ref.R.T @ R - R.T @ ref.R
        lam = x[self.lam0:self.lam0 + 4 * self.N]
        diag = Diagnostics(theta=lb.theta.copy(), theta_dot=lb.theta_dot.copy(),
                           cbf_active=self._cbf_active(x, accepted), support=support.copy(),
                           qp_status=status, qp_accepted=bool(accepted), qp_iterations=res.iterations,
                           qp_time_us=qp_us, solve_time_us=solve_us, eq_residual=eq_res, ineq_violation=viol,
                           consecutive_failures=self.consecutive_failures, total_failures=self.total_failures,
                           safe_stop=self.safe_stop, forces=lam.copy(), tau_wbc=tau_wbc, tau_sw=tau_sw,
                           tau_comp=tau_comp, body_error_rpy=0.5 * vee(E),
                           cbf_slack=x[self.lam0 + 4 * self.N:].copy() if accepted else np.zeros(self.ns),
                           leg_distance=lc_dmin)
        self.last_x = x
        self.last_legs = lb
        diag.cycle_time_us = (time.perf_counter() - t_cycle) * 1e6
        return ControllerOutput(tau=out_tau, diag=diag)

    def _model(self, q, v):
        """Torque envelope (``realistic``), leg kinematics (finite-difference ``J_dot`` with
        ``jdot_mode: fd``), mass matrix ``M``, bias ``h`` and base rotation ``R`` (base -> world)."""
        cfg, rm = self.cfg, self.rm
        qj, dqj = q[7:], v[6:]
        if cfg.torque_limit_mode == "realistic":     # the torque-speed envelope at the joint velocity
            self._tmin, self._tmax = torque_envelope_reference(dqj, rm.stall_torque, rm.no_load_speed, rm.effort)
        lb = rm.legs_batch(qj, dqj)
        if cfg.jdot_mode == "fd":
            self._fd_jdot(lb, qj, dqj)
        return lb, rm.mass_matrix(q), rm.bias(q, v), rotation_from_quat_xyzw(q[3:7])

    def _cycle_targets(self, inp, normal, support, lb, M, R, cmd=None):
        """Body reference and task (on the support plane with ``body_attitude: plane``; under a
        velocity command, ``cmd``: its command reference, yawed and turning), friction pyramids,
        gait state (at the command's gait clock), task targets, the swings that begin, swing and
        compensation torques, the legs with a CBF row (support and landing legs), the task cost.
        Returns ``(ref, tau_sw, tau_comp)``."""
        cfg, q, v = self.cfg, inp.q, inp.v
        ref = self.refs(inp.t, cmd)
        if cfg.body_attitude == "plane":        # on the support plane: height along its normal, aligned with it
            ref.R = plane_attitude_reference(normal) if cmd is None else plane_attitude_reference(normal) @ ref.R
            ref.p[2] *= normal[2]
            ref.v[2] *= normal[2]
            ref.a[2] *= normal[2]
        acc_body = body_task_reference(cfg, ref, q[:3], R, v[:3], v[3:6])
        self._pyramids(R, normal)
        phases, progress, cycles = (self.gait.state(inp.t) if cmd is None
                                    else self.gait.state(cmd[CMD_TAU], paused=cmd[CMD_PAUSED] != 0.0))
        W, b = task_targets_reference(support, lb, acc_body, v[3:6], self.theta_nominal, cfg)
        z_td = -cfg.stand_height + self.rm.foot_radius - cfg.touchdown_depth
        start_swings_reference(phases, cycles, lb, R, ref.v, self._stance_p, z_td, cfg, self.gait, self.swing,
                               None if cmd is None else (cmd[CMD_WZ], v[:3]))
        tau_sw = swing_torques_reference(lb, M, support, phases, progress, b, cfg, self.swing, self.leg_j,
                                         self._Mll_index)
        self._barrier = barrier_legs_reference(support, phases, self.swing.planned, cfg.late_descent_velocity,
                                               self.rm.leg_has_pitch)
        tau_comp = np.zeros(self.n)
        if cfg.null_space_compensation and inp.tau_ext is not None:
            tau_comp = null_space_compensation_reference(support, lb.J, self.leg_j, inp.tau_ext, cfg.compensation_limit)
        task_cost_reference(lb.J, W, b, acc_body, cfg, self._lam_diag, self.ns, self._cost_index, self.problem.H,
                            self.problem.g)
        return ref, tau_sw, tau_comp

    def _qp_rows(self, inp, support, lb, M, h, tau_sw_total) -> float:
        """The cycle's constraint rows: the CBF boundary's disturbance shift (``cbf_margin_mode:
        tau_ext``), floating-base, contact, torque and CBF rows, joint-limit and leg-collision rows.
        Returns the smallest leg distance [m] (NaN without leg-collision rows)."""
        cfg, qj, dqj = self.cfg, inp.q[7:], inp.v[6:]
        self._cbf_shift = None
        if cfg.cbf_margin_mode == "tau_ext":            # the torque-aware boundary
            te = np.zeros(self.n) if inp.tau_ext is None else inp.tau_ext
            self._cbf_shift = disturbance_shift_reference(support, lb.J, M, self.leg_v, self.leg_j, te, cfg.kp_b,
                                                          cfg.cbf_margin_max)
        self._fill_rows(lb, M, h, support, tau_sw_total)
        if self.n_jl:
            joint_limit_rows_reference(qj, dqj, cfg, self.rm, self.row_jl, self.problem.C, self.problem.l,
                                       self.problem.u)
        if not self.n_lc:
            return math.nan
        te = np.zeros(self.n) if inp.tau_ext is None else inp.tau_ext
        return float(self._lc_ref.fill(qj, dqj, M, tau_sw_total, support, te, self.row_lc, self.problem.C,
                                       self.problem.l, self.problem.u)[3][0])

    def _solve_accepted(self, M, h, lb, tau_sw_total):
        """Solve with the hard barrier; if that solution is refused (``cbf`` mode with CBF rows), again
        with the slacks. Returns ``(result, solve time [us], checks, accepted)``, ``checks`` as
        :meth:`_solve_and_check`'s."""
        self._slack_columns(False)          # the hard barrier first
        res, solve_us, checks = self._solve_and_check(M, h, lb, tau_sw_total)
        accepted = self._acceptable(res, checks)
        if not accepted and self.ns and self.cfg.relative_pitch_mode == "cbf":   # again, with the slacks
            self._slack_columns(True)
            res, solve_us2, checks = self._solve_and_check(M, h, lb, tau_sw_total)
            solve_us += solve_us2
            accepted = self._acceptable(res, checks)
        return res, solve_us, checks, accepted

    def _acceptable(self, res, checks) -> bool:
        """The solution is accepted: optimal, finite, residuals within ``residual_tol``, a finite
        command torque within its bounds."""
        _, finite, eq_res, viol, _, tau, in_bounds = checks
        tol = self.cfg.residual_tol
        return (res.optimal and finite and eq_res <= tol and viol <= tol and bool(np.all(np.isfinite(tau)))
                and in_bounds)

    def _pyramids(self, R, normal) -> None:
        """The friction pyramids about the feet's contact normals (``contact_normal``)."""
        N, p = self.N, self.problem
        nb = contact_normals_reference(R, normal, self.cfg.contact_normal == "estimated", N)
        coef = pyramid_coefficients_reference(nb, self.cfg.mu)
        for i in range(N):
            c, r = self.lam0 + 4 * i, self.row_fric + 5 * i
            p.C[r:r + 4, c:c + 3] = coef[i]

    def _fill_rows(self, lb, M, h, support, tau_sw_total) -> None:
        """Floating-base rows, contact state (``f_z`` bounds), torque rows, CBF rows."""
        cfg, p = self.cfg, self.problem
        floating_base_rows_reference(M, h, lb.p, self._fb_index, p.A_eq, p.b_eq)
        normal_force_bounds_reference(support, cfg.fz_max, self._fz_rows, p.u)
        tmin, tmax = self.tau_bounds()
        torque_rows_reference(M, h, lb.J, tau_sw_total, self._torque_index, self.row_tau, tmin, tmax, p.C, p.l, p.u)
        cbf_rows_reference(self._barrier, lb, cfg, self._cbf_index, self.row_cbf, p.C, p.l, p.u, self._cbf_shift)

    def _solve_and_check(self, M, h, lb, tau_sw_total):
        """Solve; the solution's residuals and its command torque. Returns ``(result, solve time
        [us], (x, finite, equality residual, inequality violation, tau_wbc, tau, in bounds))``."""
        p = self.problem
        t_solve = time.perf_counter()
        try:
            res = self.backend.solve(p)
        except Exception as exc:  # a backend error is a failed cycle, not a crash
            res = QpResult(np.zeros(self.nx), False, f"solver error: {exc}", 0)
        solve_us = (time.perf_counter() - t_solve) * 1e6
        x = res.x
        finite = bool(np.all(np.isfinite(x)))
        eq_res, viol = p.residuals(x) if finite else (np.inf, np.inf)
        tau_wbc, tau = command_torque_reference(M, h, lb.J, x, tau_sw_total, self.leg_j, self.lam0)
        tmin, tmax = self.tau_bounds()
        in_bounds = bool(((tau >= tmin - self._tau_tol) & (tau <= tmax + self._tau_tol)).all())
        return res, solve_us, (x, finite, eq_res, viol, tau_wbc, tau, in_bounds)

    def _cbf_active(self, x, accepted) -> np.ndarray:
        """Per leg: a CBF bound binds at the accepted solution (legs with a row, ``cbf`` mode)."""
        if self.cfg.relative_pitch_mode != "cbf" or not accepted:
            return np.zeros(self.N, dtype=bool)
        p = self.problem
        return cbf_active_reference(self._barrier, p.C, p.l, p.u, x, self.row_cbf)
