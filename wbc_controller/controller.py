"""Whole-body controller: floating-base inverse-dynamics QP with relative-pitch CBFs.

The equations, frames and the choices beyond the paper: ``docs/design.md``, *Whole-body controller*.

Decision vector ``x = [nu_dot (nv); lambda_1..lambda_N (4 each); s (N, only with cbf_slack)]``,
``lambda_i = [f_x, f_y, f_z, m_theta]`` expressed in the **base frame**. Rows (fixed count):

* equalities: 6 floating-base rows ``S_B [M nu_dot + h - J_c^T lambda] = 0`` with
  ``S_B J_c^T lambda = [sum f_i; sum r_i x f_i]``; N rows ``m_theta,i = 0``;
* inequalities: per foot 4 friction-pyramid rows (about the foot's contact normal: the estimated
  support plane's or body z, ``contact_normal``; ``docs/terrain.md``) and ``0 <= f_z <= f_z,max``
  (``f_z,max = 0`` for feet outside the support set); n final-torque rows
  ``tau_min <= S[M nu_dot + h - J_c^T lambda] + tau_sw <= tau_max``; N relative-pitch CBF rows
  ``-(k_p (theta - theta_min) + k_d theta_dot + J_theta_dot q_dot) <= J_theta q_ddot
  <= k_p (theta_max - theta) - k_d theta_dot - J_theta_dot q_dot`` (support legs and landing legs,
  in the swing-down or late, in ``cbf`` mode: :func:`.blocks.cbf.barrier_legs`; loose otherwise, so
  every mode and contact state has the same problem size); with
  ``joint_limit_barrier`` n joint-limit rows, with ``leg_collision_barrier`` k leg-collision rows
  (:mod:`.blocks.leg_collision`; loose while the legs are apart).

Cost ``1/2 ||J_T nu_dot - (x_ddot_des - J_T_dot nu)||^2_W + 1/2 ||lambda||^2_{W_lambda}`` with
``J_T = blockdiag(I_6, J_1..J_N)``. Torque ``tau = S[M nu_dot* + h - J_c^T lambda*] + tau_sw``.

With ``cbf_slack`` each CBF row is ``lo <= J_theta q_ddot + s_i <= hi`` with cost ``1/2 w_s s_i^2``,
but the slacks enter only a second solve of the same problem: every cycle is first solved with
their columns at 0 (the hard barrier; the slacks are then exactly 0), and only if that has no
accepted solution (the barrier cannot be met within the torque bounds, or the solver failed) again
with them (``Diagnostics.cbf_slack``; docs/actuators.md).

A solution is accepted only if the backend reports it optimal, the normalized equality residual
and inequality violation are <= ``residual_tol``, and the torque is finite and within bounds.
Up to ``max_failures`` consecutive rejections hold the last accepted torque; more latch a safe
stop (zero torque) until :meth:`WholeBodyController.reset`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import pinocchio as pin

from legged_wbc.gait import GaitConfig, GaitScheduler
from legged_wbc.model import RobotModel
from legged_wbc.robot import ConfigError

from .config import WbcConfig
from .qp import DaqpLdpBackend, LdpProblem, QpProblem, QpResult, make_backend
from .blocks.command import CMD_SIZE, CommandReference, CommandState, yaw_of_quat_xyzw
from .blocks.swing import SwingPlanner
from .blocks.tasks import BodyReferenceGenerator


@dataclass
class ControllerInput:
    """What the controller sees each cycle (all from the estimator, Pinocchio conventions)."""

    t: float                 # [s]
    q: np.ndarray            # estimated configuration (nq)
    v: np.ndarray            # estimated velocity (nv), base part in the base frame
    support: np.ndarray      # estimated support set S_c (bool, per leg)
    tau_ext: np.ndarray | None = None  # estimated external joint torque (n), "opposes the motor"
    normal: np.ndarray | None = None   # estimated support-plane normal (3,), world frame (None: world z)
    command: CommandState | None = None  # velocity command and gait clock (blocks.command; None: the scenario's walk)


@dataclass
class Diagnostics:
    theta: np.ndarray
    theta_dot: np.ndarray
    cbf_active: np.ndarray          # per leg: a CBF bound is binding at the solution
    support: np.ndarray
    qp_status: str = ""
    qp_accepted: bool = False
    qp_iterations: int = 0
    qp_time_us: float = 0.0          # build + solve + residual check
    solve_time_us: float = 0.0       # solver call only
    cycle_time_us: float = 0.0       # whole cycle: model update + QP build + solve + torque
    eq_residual: float = 0.0
    ineq_violation: float = 0.0
    consecutive_failures: int = 0
    total_failures: int = 0
    safe_stop: bool = False
    forces: np.ndarray = field(default_factory=lambda: np.zeros(0))   # lambda* (4N), base frame
    tau_wbc: np.ndarray = field(default_factory=lambda: np.zeros(0))
    tau_sw: np.ndarray = field(default_factory=lambda: np.zeros(0))
    tau_comp: np.ndarray = field(default_factory=lambda: np.zeros(0))   # null-space disturbance compensation
    body_error_rpy: np.ndarray = field(default_factory=lambda: np.zeros(3))
    cbf_slack: np.ndarray = field(default_factory=lambda: np.zeros(0))   # s per leg (cbf_slack; 0: not used)
    leg_distance: float = math.nan   # smallest link distance within the barrier's range [m] (inf: none; nan: option off)


@dataclass
class ControllerOutput:
    tau: np.ndarray                  # joint torque command [N m], Pinocchio joint order
    diag: Diagnostics


class InputError(ValueError):
    """Controller input rejected (size or NaN); the message names the field."""


STAGES = ("input_check", "model", "qp_build", "qp_solve", "check_torque")


class ControllerCore:
    """What the production controller (:class:`WholeBodyController`) and its numpy oracle
    (:class:`wbc_controller.oracle.ReferenceController`, the tests' specification) share: the
    problem's layout, references, gait and swing state, configuration-derived bounds and the
    failure bookkeeping. Subclasses add their cycle (``update``) and fill what the configuration
    decides (``_fill_config``)."""

    def __init__(self, robot: RobotModel, cfg: WbcConfig, gait: GaitConfig | None = None):
        self.rm = robot
        self.cfg = cfg
        N, n, nv = robot.n_legs, robot.n, robot.nv
        self.N, self.n, self.nv = N, n, nv
        if gait is None:
            gait = GaitConfig.from_dict(robot.cfg.gait)
        self.gait = GaitScheduler(gait, robot.cfg.leg_names)
        # index helpers
        self.lam0 = nv
        self.row_fric = 0
        self.row_tau = 5 * N
        self.row_cbf = 5 * N + n
        self.leg_v = [robot.leg_slice_v(i) for i in range(N)]
        self.leg_j = robot.leg_joints
        self.stance = robot.stance_targets()
        self.theta_nominal = np.array([th for _, th in self.stance])
        self.refs = BodyReferenceGenerator(cfg, gait.start_time)
        self.command_ref = CommandReference()      # the body reference under a velocity command
        self.cmd_array = np.zeros(CMD_SIZE)         # its last output (blocks.command.CMD_FIELDS)
        self._build()
        self.reset()

    def _build(self) -> None:
        """What the QP's size and solver settings decide (``cbf_slack``, ``solver``): the stacked
        problem, the backend, a fresh swing plan; at construction and when :meth:`set_config`
        changes them."""
        cfg, N = self.cfg, self.N
        self.ns = N if cfg.cbf_slack else 0
        self.n_jl = self.n if cfg.joint_limit_barrier else 0
        self.row_jl = 5 * N + self.n + N
        self.n_lc = cfg.leg_collision_rows if cfg.leg_collision_barrier else 0
        self.row_lc = self.row_jl + self.n_jl
        self.nx = self.nv + 4 * N + self.ns
        self.n_eq = 6 + N
        self.n_in = 5 * N + self.n + N + self.n_jl + self.n_lc
        self._problem = QpProblem(self.nx, self.n_eq, self.n_in)
        self._qp_pending = False
        self.backend = make_backend(cfg.solver, self.nx, self.n_eq, self.n_in, cfg.solver_tol, cfg.solver_max_iter)
        self.swing = SwingPlanner(N)
        self._cache_config()

    def _fill_config(self) -> None:
        """Refill what depends on the configuration only (subclasses)."""

    @property
    def problem(self) -> QpProblem:
        return self._problem

    # ------------------------------------------------------------------ lifecycle
    def reset(self, q0: np.ndarray | None = None) -> None:
        self.consecutive_failures = 0
        self.total_failures = 0
        self.safe_stop = False
        self.last_tau = np.zeros(self.n)
        self.swing.cycle[:] = -1
        if q0 is not None:
            self.refs.reset(q0[:3])
            self.command_ref.reset(q0[:2], yaw_of_quat_xyzw(q0[3:7]))

    def set_config(self, cfg: WbcConfig) -> None:
        """Apply new gains (validated already); takes effect on the next cycle.

        Changing ``solver``, ``cbf_slack``, ``joint_limit_barrier`` or ``leg_collision_*`` (barrier, rows) rebuilds the QP workspace (:meth:`_build`; the failure
        bookkeeping and the reference's start point are kept, swings are planned anew). Every QP
        block filled outside the cycle is refilled: the friction pyramid (``mu``), the force
        weights (``w_lambda_t``, ``w_lambda_n``), bounds and gains."""
        rebuild = (cfg.solver != self.cfg.solver or cfg.cbf_slack != self.cfg.cbf_slack
                   or cfg.joint_limit_barrier != self.cfg.joint_limit_barrier
                   or cfg.leg_collision_barrier != self.cfg.leg_collision_barrier
                   or cfg.leg_collision_rows != self.cfg.leg_collision_rows)
        self.cfg = cfg
        self.refs.cfg = cfg
        if rebuild:
            self._build()
        else:
            self._cache_config()
        self._fill_config()

    def _cache_config(self) -> None:
        cfg = self.cfg
        self._kp_swing = np.asarray(cfg.kp_swing)
        self._kd_swing = np.asarray(cfg.kd_swing)
        self._lam_diag = np.tile([cfg.w_lambda_t, cfg.w_lambda_t, cfg.w_lambda_n, cfg.w_lambda_t], self.N)
        if cfg.torque_limit_mode == "realistic":     # the envelope's peak; refilled every cycle
            self._tmin, self._tmax = -self.rm.effort.copy(), self.rm.effort.copy()
        else:
            self._tmax = np.full(self.n, cfg.tau_limit_paper)
            self._tmin = -self._tmax
        self._tau_tol = 1e-6 * np.abs(self._tmax) + 1e-6

    def tau_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Final command-torque bounds [N m] of the last cycle (paper: +-tau_limit_paper; realistic:
        the drives' torque-speed envelope at the estimated joint velocity, peak = URDF effort;
        before the first cycle: +-effort)."""
        return self._tmin, self._tmax


    def _accept(self, res: QpResult, accepted: bool, eq_res: float, viol: float,
                tau: np.ndarray) -> tuple[np.ndarray, str]:
        """Failure bookkeeping of both cycles: the command torque (a copy of this cycle's ``tau``,
        the last accepted one, or zero in the safe stop) and the status."""
        cfg = self.cfg
        status = res.status
        if not accepted:
            self.consecutive_failures += 1
            self.total_failures += 1
            if res.optimal and (eq_res > cfg.residual_tol or viol > cfg.residual_tol):
                status += f" (rejected: residual {eq_res:.2e} / violation {viol:.2e})"
            elif res.optimal:
                status += " (rejected: torque not finite or out of bounds)"
            if self.consecutive_failures > cfg.max_failures:
                self.safe_stop = True
            out_tau = np.zeros(self.n) if self.safe_stop else self.last_tau.copy()
        elif self.safe_stop:
            out_tau = np.zeros(self.n)
        else:
            self.consecutive_failures = 0
            out_tau = tau.copy()
            self.last_tau = out_tau.copy()
        return out_tau, status

    def _command_of(self, inp: ControllerInput) -> bool:
        """Under a velocity command (``inp.command``): checked (finite; :class:`InputError`
        otherwise), then the command reference advanced to ``inp.t`` into :attr:`cmd_array`.
        Returns whether the cycle runs under a command."""
        cmd = inp.command
        if cmd is None:
            return False
        try:
            vals = [float(x) for x in cmd[:7]]
        except (TypeError, ValueError):
            raise InputError("controller input command: not numbers") from None
        if not all(math.isfinite(x) for x in vals):
            raise InputError("controller input command: contains NaN/inf")
        self.command_ref.advance(inp.t, cmd, self.cmd_array)
        return True

    @staticmethod
    def _normal_of(inp: ControllerInput) -> tuple[float, float, float]:
        """The input's support-plane normal (world z without one), checked: 3 finite numbers, unit
        within 1e-3, pointing up (``n_z >= 0.2``); :class:`InputError` otherwise."""
        n = inp.normal
        if n is None:
            return 0.0, 0.0, 1.0
        if getattr(n, "shape", None) != (3,):
            raise InputError(f"controller input normal: expected 3 values, got shape {np.shape(n)}")
        try:
            x, y, z = n.tolist() if type(n) is np.ndarray and n.dtype == np.float64 else (float(c) for c in n)
        except (TypeError, ValueError):
            raise InputError("controller input normal: not numbers") from None
        if not (math.isfinite(x) and math.isfinite(y) and math.isfinite(z)):
            raise InputError("controller input normal: contains NaN/inf")
        if abs(x * x + y * y + z * z - 1.0) > 1e-3 or z < 0.2:
            raise InputError(f"controller input normal: not a unit vector pointing up ({x:.4g}, {y:.4g}, {z:.4g})")
        return x, y, z

    def _fd_jdot(self, legs, qj, dqj) -> None:
        """The paper's J_theta_dot: directional central difference (step 1e-5), 0 if |q_dot_i| <= 1e-6."""
        eps = 1e-5
        lp = self.rm.legs_batch(qj + eps * dqj)
        lm = self.rm.legs_batch(qj - eps * dqj)
        for i in range(self.N):
            dq = dqj[self.leg_j[i]]
            if np.linalg.norm(dq) <= 1e-6:
                legs.dJ_theta_dq[i] = 0.0
            else:
                legs.dJ_theta_dq[i] = float((lp.J[i, 3] - lm.J[i, 3]) @ dq / (2 * eps))


class WholeBodyController(ControllerCore):
    """The WBC of the module docstring: the cycle as QP block functions over compiled kernels
    (:mod:`.kernels`) into preallocated arrays. Its specification, the original numpy cycle, is
    :class:`wbc_controller.oracle.ReferenceController` (the tests compare the two; ``legged-wbc
    bench cycle`` times both)."""

    def _build(self) -> None:
        super()._build()
        self._init_fast()

    def _fill_config(self) -> None:
        self._fill_config_blocks_fast()

    def tau_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`ControllerCore.tau_bounds` (copies of the workspace's, which the cycle refills)."""
        return self._tmin_f.copy(), self._tmax_f.copy()

    @property
    def problem(self) -> QpProblem:
        """The last cycle's QP in its stacked form (``H, g, A_eq, b_eq, C, l, u`` of the module
        docstring). The fast cycle hands DAQP the same QP in least-distance form built from the
        blocks directly (:func:`ldp.ldp_direct`) and fills these matrices only when they are
        asked for (tests, ``bench qp``, diagnostics), from the same blocks."""
        if self._qp_pending:
            self._qp_pending = False
            self._fill_qp_fast()
        return self._problem

    # ------------------------------------------------------------------ fast path
    def _init_fast(self) -> None:
        """Workspace and own Pinocchio data of the fast cycle; compiles (or loads from numba's
        cache) the kernels so the first cycle does not pay for it.

        The cycle's arrays and settings are fields of one structured array ``_ws``
        (:func:`kernels.workspace_dtype`); the attributes below (``_M``, ``_W``, ``_tau_sw_total``,
        ...) are views of its fields, and so are the swing planner's arrays and the references'
        start point (the compiled cycle updates them in place)."""
        from . import kernels as K

        K.warmup()
        self._K = K
        rm, N, n = self.rm, self.N, self.n
        self._legs_ws = rm.leg_workspace()
        self._pdata = rm.model.createData()
        if self.n_lc and (self._legs_ws.chain is None or rm.k != 4 or rm.cfg.kind != "generated"):
            raise ConfigError("leg_collision_barrier: needs a generated robot's legs (serial 4-joint chains on the "
                              "base, capsule links); this robot's legs are not")
        self._ws = ws = np.zeros(1, dtype=K.workspace_dtype(N, n, self.ns, self.n_jl, self.n_lc))
        for name in ws.dtype.names:
            if ws.dtype[name].shape:
                setattr(self, "_" + name, ws[name][0])
        # the leg kinematics compute into the workspace (by the chain kernel in the model stage when
        # the legs are serial chains on the base, else by the workspace's Pinocchio pass)
        self._legs_ws.bind(ws)
        self._chain_legs = self._legs_ws.chain is not None
        if self._chain_legs:
            for name, a in zip(("axes", "R_joint", "p_joint", "R_foot", "p_foot"), self._legs_ws.chain):
                ws["chain_" + name] = a
        sw = self.swing
        for name in ("cycle", "start", "target", "v_start", "v_end", "duration", "planned", "lift", "stumble", "delay"):
            view = getattr(self, "_sw_" + name)
            if name == "planned":
                view = view.view(np.bool_)                   # uint8 in the record
            view[...] = getattr(sw, name)
            setattr(sw, name, view)
        self._p0[:] = self.refs.p0
        self.refs.p0 = self._p0
        self._cmd_ref[:] = self.cmd_array
        self.cmd_array = self._cmd_ref                       # the command reference writes into the workspace
        self._normal_w[:] = (0.0, 0.0, 1.0)                  # world z until an input brings one
        self._normal_last = (0.0, 0.0, 1.0)
        self._qp = K.QpArrays(*(getattr(self._problem, k) for k in K.QpArrays._fields))
        self._no_tau_ext = np.zeros(n)                       # stands for a missing tau_ext (not read then)
        self._support = np.ones(N, dtype=bool)               # the last cycle's (for _fill_qp_fast)
        self._nq, self._f8, self._b1 = rm.nq, np.dtype(np.float64), np.dtype(np.bool_)
        self._cbf_act = np.zeros(N, dtype=bool)
        # stage times of the last cycle [us]: input check, model, QP build, QP solve (with the least-
        # distance form: including the solution's residual check and torque), check + torque
        self.stage_us = {k: 0.0 for k in STAGES}
        self._fill_config_blocks_fast()
        self._init_ldp()
        self._compile_stages()

    def _compile_stages(self) -> None:
        """Compile (or load from the cache) the stage kernels for this workspace's layout, on
        harmless data (all legs in support before the gait: no swing starts; what is written is
        overwritten by the first cycle; the swing plan and the references' start are kept)."""
        K, N, nv = self._K, self.N, self.nv
        q = np.zeros(self.rm.nq)
        q[6] = 1.0
        ws, saved = self._ws, self._ws.copy()
        support = np.ones(N, dtype=bool)
        if not self._chain_legs:                  # the Pinocchio-pass kernel, for this workspace's record
            self._legs_ws.update(np.zeros(self.n), np.zeros(self.n))
        K.model_stage(np.eye(nv), np.zeros(nv), q, np.zeros(nv), self._chain_legs, ws)
        K.build_stage(0.0, q, np.zeros(nv), support, self._no_tau_ext, False, False, ws)
        K.ldp_solution_stage(np.zeros(self.ldp.n), np.zeros(self.nx), support, self._cbf_act, ws)
        K.qp_blocks(support, ws, self._qp)
        K.check_solution(self._qp, np.zeros(self.nx), support, ws, self._cbf_act)
        K.ldp_slack_on(ws)
        ws[...] = saved

    def _init_ldp(self) -> None:
        """The QP in DAQP's least-distance form (:func:`ldp.ldp_direct`; its arrays are fields
        of the workspace): ``y`` = forces ``(f_x, f_y, f_z)`` of each foot, ``nu_dot``, slacks
        (scaled by the Cholesky factor of their cost block), with the forces' bounds as simple
        bounds; general rows: the 6 floating-base equalities, the friction pyramids, CBF rows,
        torque rows (the ``m_theta = 0`` rows are gone with ``m_theta``, the ``f_z`` rows are simple
        bounds); ``ldp_free`` is the same without the torque rows (:meth:`_solve_ldp`). For the DAQP
        backend and legs that hold every joint."""
        N, n, ws = self.N, self.n, self._ws
        nz, m_a = ws.dtype["A"].shape[1], ws.dtype["A"].shape[0]
        ms, m_free = 3 * N, m_a - n - self.n_jl - self.n_lc
        self.ldp = d = LdpProblem(nz, ms, m_a, 6)
        d.c, d.A, d.bu, d.bl = self._c, self._A, self._bu, self._bl
        # the same QP without the torque rows and the joint-limit rows (the last ones): views of the same storage
        self.ldp_free = f = LdpProblem(nz, ms, m_free, 6)
        f.c, f.A, f.bu, f.bl = self._c, self._A[:m_free], self._bu[:ms + m_free], self._bl[:ms + m_free]
        self._row_tau_ldp = m_free             # first torque row among the LDP's general rows
        self._ldp_dinv, self._ldp_Rinv = self._dinv, self._Rinv
        self._tau_rows_hold = 0                # cycles left that solve with the torque rows directly
        every_joint_in_a_leg = sorted(self._leg_j.reshape(-1).tolist()) == list(range(n))
        cfg = self.cfg
        use = cfg.solver == "daqp" and every_joint_in_a_leg
        self.ldp_backend = DaqpLdpBackend(nz, ms, m_a, 6, cfg.solver_tol, cfg.solver_max_iter) if use else None
        self.ldp_backend_free = DaqpLdpBackend(nz, ms, m_free, 6, cfg.solver_tol, cfg.solver_max_iter) if use else None

    def _fill_config_blocks_fast(self) -> None:
        """What depends on the configuration only (refilled by :meth:`set_config`): the stacked
        QP's friction pyramid, ``m_theta = 0`` and base force rows; the workspace's
        settings (:attr:`params`, :func:`kernels.make_params`)."""
        cfg, p, N, ws = self.cfg, self.problem, self.N, self._ws
        self._K.friction_rows(N, self.lam0, self.row_fric, float(cfg.mu), p.A_eq, p.C, p.l, p.u)
        self.params = par = self._K.make_params(self)
        for k, val in zip(par._fields, par):
            ws[k] = val

    def _check_input_fast(self, inp: ControllerInput):
        """:meth:`_check_input` (same errors). Inputs that are already what the kernels take
        (C-contiguous float64 vectors and a bool support of the right sizes) are checked in one
        compiled call (:func:`kernels.inputs_ok`: finite, t finite, unit quaternion); anything else,
        and any input that fails, goes through :meth:`_check_input_general` (which raises).

        Returns ``(q, v, support, tau_ext)`` as the kernels take them (C-contiguous float64, bool)."""
        q, v, sup, te = inp.q, inp.v, inp.support, inp.tau_ext
        nd, f8 = np.ndarray, self._f8
        if (type(q) is nd and type(v) is nd and type(sup) is nd and q.ndim == 1 and v.ndim == 1 and sup.ndim == 1
                and q.size == self._nq and v.size == self.nv and sup.size == self.N and q.dtype == f8
                and v.dtype == f8 and sup.dtype == self._b1 and q.flags.c_contiguous and v.flags.c_contiguous
                and sup.flags.c_contiguous
                and (te is None or (type(te) is nd and te.ndim == 1 and te.size == self.n and te.dtype == f8
                                    and te.flags.c_contiguous))
                and self._K.inputs_ok(q, v, self._no_tau_ext if te is None else te, inp.t)):
            return q, v, sup, te
        return self._check_input_general(inp)

    def _check_input_general(self, inp: ControllerInput):
        """:meth:`_check_input_fast` for any input: the same checks in the order of :meth:`_check_input`,
        converting vectors to C-contiguous float64 (one compiled finiteness test per vector)."""
        rm, K = self.rm, self._K
        for name, arr, size in (("q", inp.q, rm.nq), ("v", inp.v, rm.nv), ("support", inp.support, self.N),
                                ("tau_ext", inp.tau_ext, self.n)):
            if arr is None and name == "tau_ext":
                continue
            if getattr(arr, "shape", None) != (size,):
                raise InputError(f"controller input {name}: expected {size} values, got shape {np.shape(arr)}")
        out = []
        for name, arr in (("q", inp.q), ("v", inp.v), ("tau_ext", inp.tau_ext)):
            if arr is not None:
                tested = arr.dtype.kind == "f"          # as _check_input: integers are finite
                if arr.dtype != np.float64 or not arr.flags.c_contiguous:
                    arr = np.ascontiguousarray(arr, dtype=float)
                if tested and not K.all_finite(arr):
                    raise InputError(f"controller input {name}: contains NaN/inf")
            out.append(arr)
        q, v, tau_ext = out
        if not math.isfinite(inp.t):
            raise InputError("controller input t: not finite")
        x, y, z, w = q[3:7].tolist()
        if abs(x * x + y * y + z * z + w * w - 1.0) > 2e-3:
            raise InputError("controller input q: base quaternion is not unit")
        return q, v, np.ascontiguousarray(inp.support, dtype=bool), tau_ext

    def _model_fast(self, q: np.ndarray, v: np.ndarray):
        """Model update, each Pinocchio quantity once: leg kinematics (fixed-base model), ``M``
        (``crba``, symmetrized), ``h`` (``nonLinearEffects``), base rotation ``R`` (base -> world)."""
        model, d, legs = self.rm.model, self._pdata, self._legs_ws
        if not self._chain_legs:
            legs.update(q[7:], v[6:])
        self._K.model_stage(pin.crba(model, d, q), pin.nonLinearEffects(model, d, q, v), q, v, self._chain_legs,
                            self._ws)
        lb = legs.batch
        if self.cfg.jdot_mode == "fd":
            self._fd_jdot(lb, q[7:], v[6:])
        return lb

    def _build_qp_fast(self, t: float, q: np.ndarray, v: np.ndarray, support: np.ndarray, tau_ext) -> bool:
        """The QP of this cycle (paper sec. 4): references and task targets, swing and compensation
        torques (:func:`kernels.cycle_targets`), then its blocks in the form the solver takes, in
        one compiled call (:func:`kernels.build_stage`): DAQP's least-distance form
        (:func:`ldp.ldp_direct`; returns True), or, for another backend or a cost block too
        close to singular for the plain Cholesky factor, the stacked matrices (:meth:`_fill_qp_fast`;
        returns False)."""
        compensate = self.cfg.null_space_compensation and tau_ext is not None
        np.copyto(self._support, support)
        if self._K.build_stage(t, q, v, support, self._no_tau_ext if tau_ext is None else tau_ext, compensate,
                               self.ldp_backend is not None, self._ws):
            self._qp_pending = True
            return True
        self._qp_pending = False
        self._fill_qp_fast()
        return False

    def _fill_qp_fast(self) -> None:
        """The stacked QP's blocks of the last cycle (:func:`kernels.qp_blocks`), from the quantities
        the cycle kept (model, leg kinematics, task targets, swing and compensation torques)."""
        self._K.qp_blocks(self._support, self._ws, self._qp)

    def update(self, inp: ControllerInput) -> ControllerOutput:
        """One control cycle on the compiled QP blocks (the same result as the oracle's). Raises
        :class:`InputError` on bad input (nothing is updated then)."""
        clock = time.perf_counter
        t_in = clock()
        q, v, support, tau_ext = self._check_input_fast(inp)
        nw = self._normal_of(inp)
        if inp.command is not None or self._cmd_on[0]:
            self._cmd_on[0] = self._command_of(inp)
        if nw != self._normal_last:              # (one numpy write only when it changes)
            self._normal_w[:] = nw
            self._normal_last = nw
        K, cfg, N = self._K, self.cfg, self.N
        t_cycle = clock()
        lb = self._model_fast(q, v)
        t_start = clock()
        ldp = self._build_qp_fast(inp.t, q, v, support, tau_ext)
        t_solve = clock()
        x = np.empty(self.nx)
        if ldp:                # the solution mapped back (the same optimum) and checked from the blocks
            res, finite, eq_res, viol, in_bounds = self._solve_ldp(x, support)
        else:
            res = self._solve(self.backend, self._problem, self.nx)
            x[:] = res.x
            finite, eq_res, viol, in_bounds = K.check_solution(self._qp, x, support, self._ws, self._cbf_act)
        accepted = (res.optimal and finite and eq_res <= cfg.residual_tol and viol <= cfg.residual_tol and in_bounds)
        if not accepted and self.ns and cfg.relative_pitch_mode == "cbf":   # again, the CBF rows with slacks
            res, finite, eq_res, viol, in_bounds = self._solve_with_slack(x, support, ldp)
            accepted = (res.optimal and finite and eq_res <= cfg.residual_tol and viol <= cfg.residual_tol
                        and in_bounds)
        t_check = clock()
        t_done = clock()
        out_tau, status = self._accept(res, accepted, eq_res, viol, self._tau)
        cbf_active = self._cbf_act.copy() if accepted else np.zeros(N, dtype=bool)
        diag = Diagnostics(theta=lb.theta.copy(), theta_dot=lb.theta_dot.copy(), cbf_active=cbf_active,
                           support=support.copy(), qp_status=status, qp_accepted=bool(accepted),
                           qp_iterations=res.iterations, qp_time_us=(t_done - t_start) * 1e6,
                           solve_time_us=(t_check - t_solve) * 1e6, eq_residual=eq_res, ineq_violation=viol,
                           consecutive_failures=self.consecutive_failures, total_failures=self.total_failures,
                           safe_stop=self.safe_stop, forces=x[self.lam0:self.lam0 + 4 * N].copy(),
                           tau_wbc=self._tau_wbc.copy(), tau_sw=self._tau_sw.copy(), tau_comp=self._tau_comp.copy(),
                           body_error_rpy=self._e_rpy.copy(),
                           cbf_slack=x[self.lam0 + 4 * N:].copy() if accepted else np.zeros(self.ns))
        if self.n_lc:
            diag.leg_distance = float(self._lc_d[0])
        self.last_x = x
        self.last_legs = lb
        t_end = clock()
        diag.cycle_time_us = (t_end - t_cycle) * 1e6
        st = self.stage_us
        st["input_check"] = (t_cycle - t_in) * 1e6
        st["model"] = (t_start - t_cycle) * 1e6
        st["qp_build"] = (t_solve - t_start) * 1e6
        st["qp_solve"] = (t_check - t_solve) * 1e6
        st["check_torque"] = (t_end - t_check) * 1e6
        return ControllerOutput(tau=out_tau, diag=diag)

    @staticmethod
    def _solve(backend, problem, size: int) -> QpResult:
        """``backend.solve(problem)``; a backend error, or a solution that is not ``size`` floats,
        is a failed solve (not a crash)."""
        try:
            res = backend.solve(problem)
        except Exception as exc:
            return QpResult(np.zeros(size), False, f"solver error: {exc}", 0)
        y = res.x
        if type(y) is not np.ndarray or y.dtype != np.float64 or not y.flags.c_contiguous or y.ndim != 1:
            y = np.ascontiguousarray(y, dtype=float).reshape(-1)
            res = QpResult(y, res.optimal, res.status, res.iterations)
        if y.size != size:
            return QpResult(np.zeros(size), False, f"{res.status} (solution of size {y.size})", res.iterations)
        return res

    TAU_ROWS_HOLD = 50      # cycles the torque rows stay in the solved problem once one was needed

    def _solve_with_slack(self, x: np.ndarray, support: np.ndarray, ldp: bool):
        """The cycle's problem solved again with the CBF rows' slack columns (``cbf_slack``; the
        torque rows included); ``x`` filled. Returns as :meth:`_solve_ldp`."""
        K = self._K
        K.ldp_slack_on(self._ws)
        if ldp:
            self._tau_rows_hold = self.TAU_ROWS_HOLD
            res = self._solve(self.ldp_backend, self.ldp, self.ldp.n)
            finite, eq_res, viol, in_bounds, _ = K.ldp_solution_stage(res.x, x, support, self._cbf_act, self._ws)
            return res, finite, eq_res, viol, in_bounds
        self._fill_qp_fast()                     # the stacked C with the slack columns
        res = self._solve(self.backend, self._problem, self.nx)
        x[:] = res.x
        finite, eq_res, viol, in_bounds = K.check_solution(self._qp, x, support, self._ws, self._cbf_act)
        return res, finite, eq_res, viol, in_bounds

    def _solve_ldp(self, x: np.ndarray, support: np.ndarray):
        """Solve the least-distance QP and check its solution (``x`` filled; returns ``(result,
        finite, equality residual, inequality violation, torque in bounds)``).

        The torque rows are left out first (DAQP's work grows with the rows; with the paper's
        bounds they never bind): if the optimum without them satisfies every torque row, it is the
        optimum with them (feasible for the smaller feasible set, optimal for the larger one). If a
        torque row is violated (or the solve without them failed), the problem is solved again
        with them, and the next ``TAU_ROWS_HOLD`` cycles solve with them directly."""
        K, n = self._K, self.ldp.n
        if self._tau_rows_hold == 0:
            res = self._solve(self.ldp_backend_free, self.ldp_free, n)
            finite, eq_res, viol, in_bounds, tau_rows = K.ldp_solution_stage(res.x, x, support, self._cbf_act,
                                                                              self._ws)
            if tau_rows and res.optimal:
                return res, finite, eq_res, viol, in_bounds
            self._tau_rows_hold = self.TAU_ROWS_HOLD
        self._tau_rows_hold -= 1
        res = self._solve(self.ldp_backend, self.ldp, n)
        finite, eq_res, viol, in_bounds, _ = K.ldp_solution_stage(res.x, x, support, self._cbf_act, self._ws)
        return res, finite, eq_res, viol, in_bounds
