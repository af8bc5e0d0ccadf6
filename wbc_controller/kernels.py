"""The fast controller cycle as a few compiled stages over the QP blocks of :mod:`.blocks`.

The cycle's arrays and settings live in one structured array, the workspace
(:func:`workspace_dtype`): a stage is one compiled call with a handful of arguments (numba's
dispatch costs ~0.1 us per argument; a record costs as one), and inside the stages every block
kernel reads its settings from the workspace record by name (``par``). Outside the cycle the same
settings are a named tuple, :class:`Params` (:func:`make_params`, from the controller's
configuration), which every block kernel takes as well (tests, diagnostics).

Stages: :func:`model_stage` (``M``, ``h``, ``R``, leg kinematics), :func:`build_stage` (body
reference and task, gait, task targets, swings, swing and compensation torques
(:func:`cycle_targets`), then the least-distance form :func:`.ldp.ldp_direct`),
:func:`ldp_solution_stage` (the solution and its checks). :func:`qp_blocks` and
:func:`check_solution` are the stacked QP and its checks (another backend, ``ctl.problem``).

Frames and units as in the controller: leg quantities in the base frame (the fixed-base model's
world frame) [m, rad, s]; contact forces ``lambda_i = [f_x, f_y, f_z, m_theta]`` in the base frame
[N, N m]; torques [N m] in Pinocchio joint order. Array layout: the controller passes C-contiguous
float64 / int64 / bool arrays only (one compiled signature per kernel, see :func:`warmup`).
The kernels are cached on disk (``__pycache__``); a process that has to compile them says so once
on stderr (:mod:`legged_wbc.jit`); ``setup.sh`` fills the cache.
"""

from __future__ import annotations

import functools
import math
from collections import namedtuple
from typing import NamedTuple

import numpy as np
from numba import njit

from legged_wbc.gait import gait_state
from legged_wbc.jit import announce_compiles
from legged_wbc.kinematics import LEG_CHAIN_WORK, LegBatch, chain_legs, legs_dtype, legs_from_frames

from .blocks.cbf import barrier_legs, cbf_active, cbf_rows, disturbance_shift
from .blocks.compensation import null_space_compensation
from .blocks.contact import normal_force_bounds
from .blocks.floating_base import floating_base_rows, rotation_from_quat, symmetrize_mass
from .blocks.friction import contact_normals, friction_rows, pyramid_coefficients, pyramid_rows
from .blocks.joint_limits import joint_limit_rows
from .blocks.leg_collision import collision_geometry, leg_collision_rows, leg_collision_stage
from .blocks.command import CMD_PAUSED, CMD_SIZE, CMD_TAU, CMD_WZ, CMD_YAW
from .blocks.swing import SWING_WORK, SwingPlan, start_swings, start_swings_command, swing_torques
from .blocks.tasks import (attitude_task, attitude_task_command, body_reference, body_task, command_reference,
                           plane_attitude, task_cost, task_targets, yaw_attitude)
from .blocks.torque import command_torque, torque_envelope, torque_rows
from .ldp import all_finite, check_direct, ldp_direct, ldp_slack_on, qp_from_ldp
from .qp import INF

announce_compiles(__name__)          # one line on stderr if this process has to compile a kernel


# ---------------------------------------------------------------------------- settings
F8, I8, B1 = np.float64, np.int64, np.bool_
PARAM_SCALARS = (
    # body reference (blocks.tasks.body_reference)
    ("stand_up_start", F8), ("stand_up_duration", F8), ("stand_height", F8), ("gait_start", F8),
    ("velocity_ramp_end", F8), ("forward_velocity", F8),
    # gait (legged_wbc.gait.gait_state) and swings (blocks.swing)
    ("gait_start_time", F8), ("gait_stop_time", F8), ("gait_period", F8), ("swing_duration", F8),
    ("support_duration", F8), ("z_touchdown", F8), ("touchdown_depth", F8), ("raibert_gain", F8), ("lift_height", F8), ("projection", B1),
    ("foothold_velocity_gain", F8),
    # task targets (blocks.tasks.task_targets)
    ("w_support", F8), ("w_swing", F8), ("w_pitch", F8), ("mode_none", B1), ("consistent", B1), ("k_dtheta", F8),
    ("theta_ddot_max", F8), ("recenter", B1), ("kp_swing_pitch", F8), ("kd_swing_pitch", F8),
    # compensation, contact, friction, cost, CBF
    ("compensation_limit", F8), ("fz_max", F8), ("mu", F8), ("w_body", F8), ("n_slack", I8), ("slack_weight", F8),
    ("hessian_reg", F8), ("cbf_on", B1), ("kp_b", F8), ("kd_b", F8), ("th_lo", F8), ("th_hi", F8),
    # torque bounds: the drives' torque-speed envelope at the joint velocity (blocks.torque.torque_envelope)
    ("tau_envelope", B1),
    # joint-limit barrier rows (blocks.joint_limits): gains, count (0 or n), first row
    ("jl_kp", F8), ("jl_kd", F8), ("jl_kv", F8), ("n_jl", I8), ("row_jl", I8),
    # leg-collision barrier rows (blocks.leg_collision): gains, d_min, range, count (0 or k), first row
    ("lc_kp", F8), ("lc_kd", F8), ("lc_dmin", F8), ("lc_range", F8), ("n_lc", I8), ("row_lc", I8), ("lc_tau_ext", B1),
    # torque-aware barrier boundary (blocks.cbf.disturbance_shift)
    ("margin_tau_ext", B1), ("cbf_margin_max", F8),
    # terrain: contact normal, attitude on the support plane, late touchdowns (docs/terrain.md)
    ("normal_estimated", B1), ("attitude_plane", B1), ("late_descent", F8), ("stumble_lift", F8),
    # the problem's layout: first force column, first friction / torque / CBF row
    ("lam0", I8), ("row_fric", I8), ("row_tau", I8), ("row_cbf", I8),
)
PARAM_ARRAYS = (      # name, dtype, shape from (N, n); every joint is a leg's, n // N joints per leg
    ("kp_pos", F8, lambda N, n: (3,)), ("kd_pos", F8, lambda N, n: (3,)), ("kp_rot", F8, lambda N, n: (3,)),
    ("kd_rot", F8, lambda N, n: (3,)), ("kp_swing", F8, lambda N, n: (3,)), ("kd_swing", F8, lambda N, n: (3,)),
    ("lam_diag_f", F8, lambda N, n: (4 * N,)), ("tmin_f", F8, lambda N, n: (n,)), ("tmax_f", F8, lambda N, n: (n,)),
    ("tau_tol_f", F8, lambda N, n: (n,)), ("tau_stall", F8, lambda N, n: (n,)), ("tau_slope", F8, lambda N, n: (n,)),
    ("tau_peak", F8, lambda N, n: (n,)), ("q_lower", F8, lambda N, n: (n,)), ("q_upper", F8, lambda N, n: (n,)),
    ("v_limit", F8, lambda N, n: (n,)), ("cbf_shift", F8, lambda N, n: (N, 2)), ("leg_j", I8, lambda N, n: (N, n // N)),
    ("leg_v", I8, lambda N, n: (N, n // N)), ("leg_no_pitch", I8, lambda N, n: (N,)),
    ("stance_p", F8, lambda N, n: (N, 3)), ("theta_nom", F8, lambda N, n: (N,)), ("gait_offset", F8, lambda N, n: (N,)),
    ("gait_group", I8, lambda N, n: (N,)),
    # leg-collision candidates (blocks.leg_collision.collision_geometry): N neighbouring pairs x 9 + N feet
    ("lc_pairs", I8, lambda N, n: (10 * N, 4)), ("lc_radius", F8, lambda N, n: (4,)),
    ("lc_body_half", F8, lambda N, n: (3,)),
)
Params = namedtuple("Params", [k for k, _ in PARAM_SCALARS] + [k for k, _, _ in PARAM_ARRAYS])
Params.__doc__ = """The controller's settings as the kernels read them (by name): every field of the
workspace's settings part. Built by :func:`make_params`; its fields are copied into the workspace."""


class QpArrays(NamedTuple):
    """The stacked QP's arrays (:class:`wbc_controller.qp.QpProblem`) as the kernels take them."""

    H: np.ndarray
    g: np.ndarray
    A_eq: np.ndarray
    b_eq: np.ndarray
    C: np.ndarray
    l: np.ndarray
    u: np.ndarray
    bl: np.ndarray


def make_params(ctl) -> Params:
    """:class:`Params` of a controller (:class:`wbc_controller.controller.ControllerCore`): its
    configuration, gait, references' start, stance, layout and torque bounds."""
    c, g, N = ctl.cfg, ctl.gait, ctl.N
    mode = c.relative_pitch_mode
    leg_j = np.array(ctl.leg_j, dtype=np.int64).reshape(N, ctl.rm.k)
    geo = collision_geometry(ctl.rm)
    if geo["lc_pairs"].shape[0] != 10 * N:       # the workspace's size: a ring of N neighbouring pairs (N >= 3)
        raise ValueError(f"leg-collision candidates: {geo['lc_pairs'].shape[0]} for {N} legs, the workspace "
                         f"holds {10 * N} (a ring of neighbouring legs needs N >= 3)")
    return Params(
        lc_kp=c.leg_collision_kp, lc_kd=c.leg_collision_kd, lc_dmin=c.leg_collision_boundary,
        lc_range=c.leg_collision_range, n_lc=int(ctl.n_lc), row_lc=int(ctl.row_lc),
        lc_tau_ext=c.leg_collision_tau_ext, **geo,
        stand_up_start=c.stand_up_start, stand_up_duration=c.stand_up_duration, stand_height=c.stand_height,
        gait_start=ctl.refs.gait_start, velocity_ramp_end=c.velocity_ramp_end, forward_velocity=c.forward_velocity,
        gait_start_time=g.cfg.start_time, gait_stop_time=g.cfg.stop_time, gait_period=g.cfg.period,
        swing_duration=g.swing_duration, support_duration=g.support_duration,
        z_touchdown=-c.stand_height + ctl.rm.foot_radius - c.touchdown_depth, touchdown_depth=c.touchdown_depth,
        raibert_gain=c.raibert_gain, foothold_velocity_gain=c.foothold_velocity_gain,
        lift_height=c.lift_height, projection=c.swing_pitch_projection, w_support=c.w_support, w_swing=c.w_swing,
        w_pitch=c.w_pitch_none if mode == "none" else c.w_pitch, mode_none=mode == "none",
        consistent=c.support_foot_acceleration == "consistent", k_dtheta=c.k_dtheta,
        theta_ddot_max=c.theta_ddot_max, recenter=c.swing_pitch_recenter, kp_swing_pitch=c.kp_swing_pitch,
        kd_swing_pitch=c.kd_swing_pitch, compensation_limit=c.compensation_limit, fz_max=c.fz_max, mu=c.mu,
        w_body=c.w_body, n_slack=int(ctl.ns), slack_weight=c.cbf_slack_weight, hessian_reg=c.hessian_reg,
        cbf_on=mode == "cbf", kp_b=c.kp_b, kd_b=c.kd_b, th_lo=c.theta_min + c.cbf_margin,
        th_hi=c.theta_max - c.cbf_margin, lam0=int(ctl.lam0), row_fric=int(ctl.row_fric), row_tau=int(ctl.row_tau),
        row_cbf=int(ctl.row_cbf), tau_envelope=c.torque_limit_mode == "realistic",
        tau_stall=np.asarray(ctl.rm.stall_torque, dtype=float),
        tau_slope=np.asarray(ctl.rm.stall_torque / ctl.rm.no_load_speed, dtype=float),
        tau_peak=np.asarray(ctl.rm.effort, dtype=float),
        margin_tau_ext=c.cbf_margin_mode == "tau_ext", cbf_margin_max=c.cbf_margin_max,
        cbf_shift=np.zeros((N, 2)), jl_kp=c.joint_limit_kp, jl_kd=c.joint_limit_kd, jl_kv=c.joint_velocity_gain, n_jl=int(ctl.n_jl),
        row_jl=int(ctl.row_jl), q_lower=np.asarray(ctl.rm.lower, dtype=float),
        q_upper=np.asarray(ctl.rm.upper, dtype=float), v_limit=np.asarray(ctl.rm.velocity_limit, dtype=float),
        normal_estimated=c.contact_normal == "estimated", attitude_plane=c.body_attitude == "plane",
        late_descent=c.late_descent_velocity, stumble_lift=c.stumble_lift,
        **{k: np.asarray(getattr(c, k), dtype=float) for k in ("kp_pos", "kd_pos", "kp_rot", "kd_rot", "kp_swing",
                                                               "kd_swing")},
        lam_diag_f=np.asarray(ctl._lam_diag, dtype=float), tmin_f=np.asarray(ctl._tmin, dtype=float),
        tmax_f=np.asarray(ctl._tmax, dtype=float), tau_tol_f=np.asarray(ctl._tau_tol, dtype=float), leg_j=leg_j,
        leg_v=leg_j + 6, leg_no_pitch=np.asarray(~ctl.rm.leg_has_pitch, dtype=np.int64), stance_p=np.array([p for p, _ in ctl.stance], dtype=float),
        theta_nom=np.asarray(ctl.theta_nominal, dtype=float), gait_offset=np.asarray(g.offset, dtype=float),
        gait_group=np.asarray(g.group, dtype=np.int64))


# ---------------------------------------------------------------------------- the workspace
@functools.lru_cache(maxsize=None)
def workspace_dtype(N: int, n: int, ns: int, n_jl: int = 0, n_lc: int = 0) -> np.dtype:
    """The fast controller cycle's workspace for N legs of k = n / N joints (3 or 4), n joints, ns slacks, n_jl
    joint-limit rows (0 or n), n_lc leg-collision rows (0 or k): model,
    cycle quantities, swing plan and references' start, leg kinematics, the least-distance QP
    (:func:`.ldp.ldp_direct`), results, and the settings (:class:`Params`' fields).

    One dtype object per size (cached): numba's dispatch recognizes a structured array's type
    quickly only by the dtype object it compiled for (an equal but other object costs ~6 us a call)."""
    nv, k = n + 6, n // N
    nz, m_a = 3 * N + nv + ns, 6 + 4 * N + n + N + n_jl + n_lc
    f, i = F8, I8
    arrays = [
        ("M", f, (nv, nv)), ("h", f, (nv,)), ("R", f, (3, 3)),                          # model
        ("ref_p", f, (3,)), ("ref_v", f, (3,)), ("ref_a", f, (3,)), ("acc_body", f, (6,)), ("e_rpy", f, (3,)),
        ("phases", i, (N,)), ("progress", f, (N,)), ("cycles", i, (N,)), ("W", f, (N, 4)), ("b", f, (N, 4)),
        ("tau_sw", f, (n,)), ("tau_comp", f, (n,)), ("tau_sw_total", f, (n,)), ("swing_work", f, (SWING_WORK,)),
        ("nvec_work", f, (4,)),                                                           # cycle quantities
        ("normal_w", f, (3,)), ("normals_b", f, (N, 3)), ("fric_coef", f, (N, 4, 3)), ("R_d", f, (3, 3)),
        ("p0", f, (3,)), ("sw_cycle", i, (N,)), ("sw_start", f, (N, 3)), ("sw_target", f, (N, 3)),
        ("sw_v_start", f, (N, 3)), ("sw_v_end", f, (N, 3)), ("sw_duration", f, (N,)),
        ("sw_planned", np.uint8, (N,)),           # bool (numba takes no bool arrays in records)
        ("sw_lift", f, (N,)), ("sw_stumble", f, (N,)), ("sw_delay", f, (N,)),
        ("cbf_leg", np.uint8, (N,)),              # the legs with a CBF row this cycle (blocks.cbf.barrier_legs)
        ("cmd_on", np.uint8, (1,)),               # this cycle runs under a velocity command (cmd_ref)
        ("cmd_ref", f, (CMD_SIZE,)),              # the command reference (blocks.command.CMD_FIELDS)
        ("c", f, (nz,)), ("A", f, (m_a, nz)), ("bu", f, (3 * N + m_a,)), ("bl", f, (3 * N + m_a,)),
        ("dinv", f, (nz,)), ("Rinv", f, (N, k, k)),                                     # least-distance QP
        ("tau_wbc", f, (n,)), ("tau", f, (n,)),                                          # results
        ("slack_on", np.uint8, (1,)),         # the CBF rows have their slacks in this cycle's solve
        ("qj", f, (n,)), ("dqj", f, (n,)),    # the cycle's joint positions and velocities (joint-limit rows)
        # leg kinematics (legged_wbc.kinematics.LegBatch and the chain kernel's inputs and scratch)
        ("leg_p", f, (N, 3)), ("leg_a", f, (N, 3)), ("leg_acc", f, (N, 6)), ("leg_J", f, (N, 4, k)),
        ("leg_theta", f, (N,)), ("leg_theta_dot", f, (N,)), ("leg_J_w", f, (N, 3, k)), ("leg_dJ_p", f, (N, 3)),
        ("leg_dJ_theta", f, (N,)), ("leg_v_p", f, (N, 3)), ("leg_work", f, (LEG_CHAIN_WORK,)),
        ("chain_axes", f, (N, k, 3)), ("chain_R_joint", f, (N, k, 3, 3)), ("chain_p_joint", f, (N, k, 3)),
        ("chain_R_foot", f, (N, 3, 3)), ("chain_p_foot", f, (N, 3)),
        # leg-collision rows and their work arrays (blocks.leg_collision.leg_collision_stage)
        ("lc_O", f, (N, 4, 3)), ("lc_Z", f, (N, 4, 3)), ("lc_P", f, (N, 3)), ("lc_fO", f, (N, 4, 3)),
        ("lc_fZ", f, (N, 4, 3)), ("lc_fP", f, (N, 3)), ("lc_dist", f, (10 * N,)), ("lc_q", f, (n,)),
        ("lc_fcoef", f, (8,)), ("lc_dmin_all", f, (1,)), ("lc_coef", f, (n_lc, 8)), ("lc_leg", i, (n_lc, 2)),
        ("lc_lo", f, (n_lc,)), ("lc_d", f, (n_lc,)), ("lc_cand", i, (n_lc,)), ("lc_tau", f, (n,)),
    ]
    arrays += [(k, t, shape(N, n)) for k, t, shape in PARAM_ARRAYS]
    return np.dtype([(k, t, sh) for k, t, sh in arrays] + list(PARAM_SCALARS), align=True)


@njit(cache=True)
def workspace_legs(w):
    """The workspace's leg kinematics as a :class:`LegBatch` (views)."""
    return LegBatch(w.leg_p, w.leg_J, w.leg_a, w.leg_theta, w.leg_theta_dot, w.leg_J_w, w.leg_dJ_p, w.leg_dJ_theta,
                    w.leg_v_p)


@njit(cache=True)
def workspace_plan(w):
    """The workspace's swing plan as a :class:`.blocks.swing.SwingPlan` (views)."""
    return SwingPlan(w.sw_cycle, w.sw_start, w.sw_target, w.sw_v_start, w.sw_v_end, w.sw_duration, w.sw_planned,
                     w.sw_lift, w.sw_stumble, w.sw_delay)


# ---------------------------------------------------------------------------- the stages
@njit(cache=True)
def model_stage(M_upper, h_in, q, v, chain, ws):
    """``M`` (symmetrized), ``h`` and the base rotation ``R`` into the workspace ``ws`` (one record),
    and with ``chain`` the leg kinematics from the chain constants (:func:`legged_wbc.kinematics.chain_legs`)."""
    w = ws[0]
    if chain:
        chain_legs(q[7:], v[6:], w)
    symmetrize_mass(M_upper, h_in, w.M, w.h)
    rotation_from_quat(q, w.R)


@njit(cache=True)
def cycle_targets(t, q, v, support, tau_ext, compensate, w):
    """What the QP of one cycle is made of, before its blocks (into the workspace record ``w``):
    body reference and task (on the support plane of ``w.normal_w`` with ``attitude_plane``; under a
    velocity command, ``cmd_on``, the command reference's horizontal part, yaw and yaw rate:
    :func:`command_targets`), the feet's contact normals and pyramid coefficients, gait state (at the
    command's gait clock), task targets ``W``, ``b``, the swings that begin, swing and compensation
    torques (``tau_sw_total = tau_sw + tau_comp``)."""
    legs, plan = workspace_legs(w), workspace_plan(w)
    cmd_on = w.cmd_on[0] != 0
    body_reference(t, w.p0, w, w.ref_p, w.ref_v, w.ref_a)
    if cmd_on:
        command_reference(w.cmd_ref, w.ref_p, w.ref_v, w.ref_a)
    if w.attitude_plane:          # on the support plane: height along its normal, attitude aligned with it
        nz = plane_attitude(w.normal_w, w.R_d)
        if nz != 1.0:             # the estimator's z is the base's height over the feet's centroid, which
            w.ref_p[2] *= nz      # lies at stand_height along the normal below it: stand_height n_z vertically
            w.ref_v[2] *= nz
            w.ref_a[2] *= nz
    body_task(w.ref_p, w.ref_v, w.ref_a, q, w.R, v, w, w.acc_body, w.e_rpy)
    if cmd_on:
        command_targets(t, v, legs, plan, w)
    else:
        if w.attitude_plane and w.R_d[2, 2] != 1.0:
            attitude_task(w.R_d, w.R, v, w, w.acc_body, w.e_rpy)
        gait_state(t, w.gait_start_time, w.gait_stop_time, w.gait_period, w.swing_duration, w.gait_offset,
                   w.gait_group, w.phases, w.progress, w.cycles)
    contact_normals(w.R, w.normal_w, w.normal_estimated, w.normals_b)
    pyramid_coefficients(w.normals_b, w.mu, w.fric_coef)
    task_targets(support, legs, w.acc_body, v[3:6], w.theta_nom, w, w.W, w.b)
    if cmd_on:
        start_swings_command(w.phases, w.cycles, legs, w.R, w.ref_v, w.cmd_ref[CMD_WZ], v[0:3], w, plan)
    else:
        start_swings(w.phases, w.cycles, legs, w.R, w.ref_v, w, plan)
    swing_torques(support, w.phases, w.progress, plan, legs, w.M, w, w.b, w.tau_sw, w.swing_work)
    barrier_legs(support, w.phases, plan.planned, w.late_descent, w.leg_no_pitch, w.cbf_leg)
    tau_comp, tau_sw_total = w.tau_comp, w.tau_sw_total
    if w.margin_tau_ext:
        disturbance_shift(support, legs.J, w.M, w.leg_v, w.leg_j, tau_ext, w, w.cbf_shift, w.nvec_work)
    if compensate:
        null_space_compensation(support, legs.J, w.leg_j, tau_ext, w.compensation_limit, tau_comp, w.nvec_work)
    else:
        for k in range(tau_comp.shape[0]):
            tau_comp[k] = 0.0
    for k in range(tau_sw_total.shape[0]):
        tau_sw_total[k] = w.tau_sw[k] + tau_comp[k]


@njit(cache=True)
def command_targets(t, v, legs, plan, w):
    """The parts of :func:`cycle_targets` a velocity command changes: the desired attitude yawed by
    the command's yaw (``R_d = R_plane Rz(yaw)``, level: ``Rz(yaw)``) tracked with its yaw rate
    (:func:`.blocks.tasks.attitude_task_command`), and the gait state at the command's gait clock
    (``tau``; paused: every leg in support)."""
    if not w.attitude_plane:
        for r in range(3):
            for c in range(3):
                w.R_d[r, c] = 1.0 if r == c else 0.0
    yaw_attitude(w.cmd_ref[CMD_YAW], w.R_d)
    attitude_task_command(w.R_d, w.cmd_ref, w.R, v, w, w.acc_body, w.e_rpy)
    stop = -math.inf if w.cmd_ref[CMD_PAUSED] != 0.0 else w.gait_stop_time
    gait_state(w.cmd_ref[CMD_TAU], w.gait_start_time, stop, w.gait_period, w.swing_duration, w.gait_offset,
               w.gait_group, w.phases, w.progress, w.cycles)


@njit(cache=True)
def build_stage(t, q, v, support, tau_ext, compensate, ldp, ws):
    """The cycle's QP: the torque bounds at the joint velocity (``tau_envelope``,
    :func:`.blocks.torque.torque_envelope`), :func:`cycle_targets`, then (``ldp``) its least-distance form
    :func:`.ldp.ldp_direct` into the workspace; returns whether that was formed."""
    w = ws[0]
    w.slack_on[0] = 0
    for j in range(w.qj.shape[0]):
        w.qj[j] = q[7 + j]
        w.dqj[j] = v[6 + j]
    if w.tau_envelope:
        torque_envelope(v[6:], w, w.tmin_f, w.tmax_f)
    cycle_targets(t, q, v, support, tau_ext, compensate, w)
    if w.n_lc > 0:
        leg_collision_stage(w.qj, w.dqj, w.M, w.tau_sw_total, support, tau_ext, w)
    if not ldp:
        return False
    return ldp_direct(support, workspace_legs(w), w)


@njit(cache=True)
def ldp_solution_stage(y, x, support, cbf_act, ws):
    """The QP's solution ``x`` from the least-distance solution ``y`` (:func:`.ldp.qp_from_ldp`) and
    its checks (:func:`.ldp.check_direct`; torques into the workspace, binding CBF rows into
    ``cbf_act``)."""
    w = ws[0]
    qp_from_ldp(y, w.leg_v, w.dinv, w.Rinv, w.n_slack, x)
    return check_direct(x, support, workspace_legs(w), w, cbf_act)


# ---------------------------------------------------------------------------- the stacked QP
@njit(cache=True)
def qp_blocks(support, ws, qp):
    """The blocks of the stacked QP (:class:`QpArrays`) that change every cycle, from the
    quantities the cycle kept in the workspace: cost, friction pyramids, floating-base rows, normal-force bounds,
    torque rows, CBF rows (with their slack columns when ``slack_on``); the stacked lower bounds ``bl`` get the equality right-hand side."""
    w = ws[0]
    legs = workspace_legs(w)
    task_cost(legs.J, w.W, w.b, w.acc_body, w, qp.H, qp.g)
    pyramid_rows(w.fric_coef, w.lam0, w.row_fric, qp.C)
    floating_base_rows(w.M, w.h, legs.p, w.lam0, qp.A_eq, qp.b_eq)
    normal_force_bounds(support, w.fz_max, w.row_fric, qp.u)
    torque_rows(w.M, w.h, legs.J, w.tau_sw_total, w, qp.C, qp.l, qp.u)
    cbf_rows(w.cbf_leg, legs, w, qp.C, qp.l, qp.u)
    if w.n_jl > 0:
        joint_limit_rows(w.qj, w.dqj, w, qp.C, qp.l, qp.u)
    if w.n_lc > 0:
        leg_collision_rows(w, qp.C, qp.l, qp.u)
    s0 = w.lam0 + 4 * legs.J.shape[0]
    for i in range(w.n_slack):                # the slack columns of the CBF rows (as ldp.ldp_slack_on)
        qp.C[w.row_cbf + i, s0 + i] = 1.0 if w.slack_on[0] else 0.0
    for k in range(qp.b_eq.shape[0]):
        qp.bl[k] = qp.b_eq[k]


@njit(cache=True)
def check_solution(qp, x, support, ws, cbf_act):
    """The checks of a solution ``x`` of the stacked QP: ``(finite, equality residual, inequality
    violation, torque in bounds)`` (:func:`residuals`, :func:`.blocks.torque.command_torque`), the
    command torque into the workspace's ``tau_wbc``, ``tau``, and, in ``cbf`` mode, the binding CBF
    rows into ``cbf_act`` (:func:`.blocks.cbf.cbf_active`; else all False)."""
    w = ws[0]
    finite = all_finite(x)
    if finite:
        eq_res, viol = residuals(qp.A_eq, qp.b_eq, qp.C, qp.l, qp.u, x)
    else:
        eq_res, viol = np.inf, np.inf
    in_bounds = command_torque(w.M, w.h, w.leg_J, x, w.tau_sw_total, w, w.tau_wbc, w.tau)
    if w.cbf_on:
        cbf_active(w.cbf_leg, qp.C, qp.l, qp.u, x, w.row_cbf, cbf_act)
    else:
        for i in range(cbf_act.shape[0]):
            cbf_act[i] = False
    return finite, eq_res, viol, in_bounds


@njit(cache=True)
def residuals(A_eq, b_eq, C, l, u, x):
    """(normalized equality residual, normalized inequality violation) at ``x``, as
    :meth:`wbc_controller.qp.QpProblem.residuals` (loose rows ignored)."""
    n = x.shape[0]
    r_eq = 0.0
    for r in range(A_eq.shape[0]):
        s = 0.0
        for c in range(n):
            s += A_eq[r, c] * x[c]
        e = abs(s - b_eq[r]) / max(1.0, abs(b_eq[r]))
        if e > r_eq or e != e:
            r_eq = e
    viol = 0.0
    for r in range(C.shape[0]):
        s = 0.0
        for c in range(n):
            s += C[r, c] * x[c]
        if l[r] > -INF:
            e = (l[r] - s) / max(1.0, abs(l[r]))
            if e > viol or e != e:
                viol = e
        if u[r] < INF:
            e = (s - u[r]) / max(1.0, abs(u[r]))
            if e > viol or e != e:
                viol = e
    return r_eq, viol


@njit(cache=True)
def inputs_ok(q, v, tau_ext, t):
    """The controller's input checks on well-formed vectors: ``q``, ``v``, ``tau_ext`` and ``t``
    finite, the base quaternion ``q[3:7]`` unit within 2e-3 (as :meth:`wbc_controller.oracle.ReferenceController._check_input`)."""
    if not (all_finite(q) and all_finite(v) and all_finite(tau_ext) and math.isfinite(t)):
        return False
    x, y, z, w = q[3], q[4], q[5], q[6]
    return abs(x * x + y * y + z * z + w * w - 1.0) <= 2e-3


def warmup() -> None:
    """Compile (or load from the cache) the kernels the controller calls with plain arrays: the
    Pinocchio-pass leg kinematics, the constant contact and friction rows (``set_config``), the
    input checks. The stage kernels and the stacked QP's (:data:`STAGE_KERNELS`) take the
    workspace record; they are compiled for its layout when a controller is built
    (``WholeBodyController._compile_stages``)."""
    N, n = 2, 8
    nv, nx, ne, ni = n + 6, n + 6 + 8, 6 + N, 5 * N + n + N
    f1 = lambda k: np.zeros(k)  # noqa: E731
    leg_cols = np.arange(8, dtype=np.int64).reshape(N, 4)
    q = np.zeros(n + 7)
    q[6] = 1.0
    legs = np.zeros(1, dtype=legs_dtype(N))
    legs["leg_j"] = leg_cols
    legs["leg_a"][0][:, 0] = 1.0
    J_world = np.asfortranarray(np.ones((6, n)))  # Pinocchio's data.J: F order
    legs_from_frames(J_world, f1(n), legs)
    A_eq, C, lo, up = np.zeros((ne, nx)), np.zeros((ni, nx)), f1(ni), f1(ni)
    friction_rows(N, nv, 0, 0.6, A_eq, C, lo, up)
    all_finite(f1(nx))
    inputs_ok(q, f1(nv), f1(n), 1.0)


KERNELS = (legs_from_frames, friction_rows, all_finite, inputs_ok)   # see warmup
STAGE_KERNELS = (model_stage, build_stage, ldp_solution_stage, qp_blocks, check_solution, ldp_slack_on)   # per workspace layout
