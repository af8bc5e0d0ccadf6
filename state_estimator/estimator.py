"""The state estimator: touchdown detection, support set, base velocity, height and pose.

Plain Python (no ROS); the node wraps :class:`StateEstimator`. One :meth:`StateEstimator.update`
per control cycle (500 Hz, ``dt = 0.002 s``) from one sensor sample:

1. **Touchdown** (:mod:`.touchdown`): per-leg Kalman filter on ``[q_dot_i; tau_ext_i]`` driven by the
   measured joint effort, with the leg blocks of ``M`` and ``h`` evaluated at the previous cycle's
   estimated state (explicit Euler: the effort measured now is the torque applied over the step
   that just ended, zero-order hold). Touchdown flags from the swing-down landing test.
   With ``touchdown.base_coupling`` (default; our addition to the paper's model) the bias of leg
   ``i`` also carries the inertial coupling to the base, ``h_i + M_iB a_B``, with the base
   acceleration ``a_B = [f + R^T g - w x v_B; w_dot]`` (Pinocchio's base-frame spatial acceleration)
   from the accelerometer ``f`` and the gyro differenced over the step. Without it, a base jolt
   (typically another leg landing) shows up in every swinging leg's ``tau_ext`` and score; in our
   simulations (PD and whole-body-controlled walking, with and without sensor noise) the
   pre-contact score floor of swinging legs is 2.5-4x higher without the coupling.
2. **Support set** ``S_c = (S_nominal & ~S_late) | S_touchdown`` (nominal from the gait scheduler
   at ``t``; ``S_late``: legs whose swing-down ended without a touchdown, kept out until their contact
   is seen or ``touchdown.late_max_cycles`` have passed, :mod:`.touchdown`). This is the support mask
   the controller uses.
3. **Base velocity** (:mod:`.velocity`): world-frame velocity, IMU-predicted, corrected by the
   leg kinematics of the reliable support feet (soft gating, 20-cycle exclusion after entry).
4. **Base height**: ``z_raw = mean_{i in S_c}(foot_radius - (R p_i)_z)`` (foot points are the sphere
   centres, ground at ``z = 0``), first-order low-pass at ``height.cutoff_hz`` (25 Hz). With no
   support foot, ``z`` integrates the estimated vertical velocity.
5. **Base x, y**: integral of the estimated world velocity. **Orientation** and **angular rate**:
   straight from the IMU (quaternion ``xyzw`` base->world, gyro in the base frame). The IMU is at
   ``robot.base.imu_xyz`` in the base frame; its specific force is moved to the base origin
   (``f_B = f - w_dot x r - w x (w x r)``) before use.

Output (:class:`EstimatedState`) in Pinocchio conventions: ``q = [p_world, quat_xyzw, q_joints]``,
``v = [R^T v_world, gyro, q_dot_joints]`` (base linear velocity in the base frame); joint positions and
velocities are passed through as measured. Joint order everywhere: ``RobotModel.joint_names``.

Time: the filters integrate over the actual sample spacing ``t - t_prev``; ``update`` rejects a
non-increasing ``t`` and non-finite or wrongly sized inputs with ``ValueError`` before touching any
state, so a bad sample can simply be dropped.

The cycle runs in the compiled kernels of :mod:`.kernels` (numba), writing into preallocated
arrays; Pinocchio computes ``crba`` and ``nonLinearEffects`` once per cycle, the leg kinematics
are a compiled walk of the fixed-base tree (Pinocchio if the tree has joint types it does not
handle). Its specification is :class:`state_estimator.oracle.ReferenceEstimator`, the same cycle
in plain Python / numpy (:mod:`.touchdown`, :mod:`.velocity`), which the tests compare it against
(``test/test_fast_estimator.py``: every output field to 1e-12 of its scale, flags exactly) and
``legged-wbc bench cycle`` times beside it (about 5x slower; README, "Estimator speed").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pinocchio as pin

from legged_wbc.gait import GaitScheduler, gait_state
from legged_wbc.kinematics import kinematic_tree, tree_foot_kinematics
from legged_wbc.model import RobotModel

from . import kernels, support_plane
from .config import EstimatorConfig
from .touchdown import TouchdownDetector
from .velocity import GRAVITY_WORLD, BaseVelocityFilter

QUAT_NORM_TOL = 1e-2  # accepted |‖quat‖ - 1| of the IMU orientation (it is renormalized)


@dataclass
class EstimatedState:
    """Estimator output for one cycle (arrays are fresh copies the caller may keep).

    Per-leg arrays are in the robot config's leg order (``RobotModel.cfg.legs``)."""

    t: float                       # sample time [s]
    q: np.ndarray                  # (nq,) [p_world (m), quat_xyzw base->world, q_joints (rad)]
    v: np.ndarray                  # (nv,) [v_base_in_base (m/s), w_base_in_base (rad/s), dq (rad/s)]
    v_world: np.ndarray            # (3,) base linear velocity in the world frame [m/s]
    support: np.ndarray            # (L,) bool, S_c = nominal support | touchdown (the controller's mask)
    touchdown: np.ndarray          # (L,) bool, touchdown detected (latched within a swing-down)
    nominal_support: np.ndarray    # (L,) bool, nominal support from the gait
    phase: np.ndarray              # (L,) int, nominal phase (legged_wbc.gait SUPPORT/SWING_UP/SWING_DOWN)
    cycle: np.ndarray              # (L,) int, gait-cycle index (-1 before the gait starts)
    # touchdown-detector diagnostics
    td_score: np.ndarray           # (L,) score ||tau_ext_k - tau_ext_k-1|| / dt [N m/s]
    td_count: np.ndarray           # (L,) int, consecutive swing-down samples over gamma_land
    tau_ext: np.ndarray            # (L, k) estimated external joint torque [N m] (opposes the motor)
    # velocity-filter diagnostics
    vel_d2: np.ndarray             # (L,) squared Mahalanobis distance of each support foot (NaN otherwise)
    vel_inflation: np.ndarray      # (L,) covariance inflation factor (1 when not gated / not used)
    vel_used: np.ndarray           # (L,) bool, foot used as a velocity measurement this cycle
    vel_excluded: np.ndarray       # (L,) bool, support foot inside its post-touchdown exclusion window
    vel_cycles_in_support: np.ndarray  # (L,) int, cycles since the foot entered the support set
    vel_cov: np.ndarray            # (3, 3) covariance of v_world [(m/s)^2]
    # height / kinematics diagnostics
    height_raw: float              # unfiltered support-foot base height [m] (NaN: no support foot)
    foot_pos_base: np.ndarray      # (L, 3) foot points (sphere centres) in the base frame [m]
    dt: float                      # time since the previous sample [s] (0 on the first)
    # support plane (:mod:`.support_plane`)
    support_normal: np.ndarray = None  # (3,) estimated terrain normal, world frame (unit, z up)
    support_offset: float = math.nan   # plane of the foot centres {r: n . r = d}, r world-aligned at the base [m]
    # late touchdowns (:mod:`.touchdown`)
    late: np.ndarray = None            # (L,) bool, the leg's swing-down is extended (out of the support set)
    late_event: np.ndarray = None      # (L,) int, this cycle: 0, 1 late contact seen, 2 extension limit reached


class TickViews(NamedTuple):
    """Where :class:`StateEstimator` reads one cycle's outputs after :func:`.kernels.estimator_tick`:
    views of its record's fields (flags as bool) and of the filters' state; each is handed out as a
    copy, under the :class:`EstimatedState` field of the same meaning."""

    q: np.ndarray
    v: np.ndarray
    v_world: np.ndarray
    support: np.ndarray
    touchdown: np.ndarray        # the detector's latched flags
    nominal: np.ndarray
    score: np.ndarray
    count: np.ndarray            # the detector's counters
    tau_ext: np.ndarray          # the touchdown filters' tau_ext half of the state
    d2: np.ndarray
    inflation: np.ndarray
    used: np.ndarray
    excluded: np.ndarray
    cycles: np.ndarray           # the velocity filter's support counters
    cov: np.ndarray              # the velocity filter's covariance
    foot_pos: np.ndarray         # the foot points the kinematics wrote


class EstimatorCore:
    """What the production estimator (:class:`StateEstimator`) and its numpy oracle
    (:class:`state_estimator.oracle.ReferenceEstimator`) share: checks, filter objects (their
    state), configuration, reset and the sample-time rule. Subclasses add ``update``."""

    def __init__(self, rm: RobotModel, gait: GaitScheduler, cfg: EstimatorConfig | None = None,
                 dt: float = 0.002):
        if not (math.isfinite(dt) and dt > 0):
            raise ValueError(f"dt must be a positive number of seconds, got {dt}")
        if gait.n_legs != rm.n_legs:
            raise ValueError(f"gait has {gait.n_legs} legs, robot {rm.n_legs}")
        self.rm, self.gait, self.dt = rm, gait, float(dt)
        self.cfg = cfg if cfg is not None else EstimatorConfig()
        self.n, self.L = rm.n, rm.n_legs
        self.k = len(rm.leg_joints[0])
        if any(len(j) != self.k for j in rm.leg_joints):
            raise ValueError("all legs must have the same number of joints")
        self.leg_j = np.array(rm.leg_joints)                  # (L, k) joint indices
        self._M_lb = np.zeros((self.L, self.k, 6))            # leg-base coupling blocks
        self._gyro_prev = (0.0, 0.0, 0.0)                     # last gyro sample [rad/s]
        self._vb_prev = (0.0, 0.0, 0.0)                       # last base velocity, base frame [m/s]
        self.base_coupling = self.cfg.touchdown.base_coupling
        self._imu_r = np.array(rm.cfg.imu_xyz, dtype=float)  # IMU position in the base frame [m]
        self._imu_offset = bool(np.any(self._imu_r != 0.0))
        self._pdata = rm.model.createData()                   # own Pinocchio data (not shared)
        self._fdata = rm.fixed.createData()
        self._feet = list(rm.foot_frames_fixed)
        self._lwa = pin.ReferenceFrame.LOCAL_WORLD_ALIGNED
        self.foot_radius = float(rm.foot_radius)
        self.touchdown = TouchdownDetector(self.cfg.touchdown, self.L, self.k, self.dt)
        self.velocity = BaseVelocityFilter(self.cfg.velocity, self.L, self.dt)
        self._alpha_nom = self._alpha(self.dt)
        self._plane = np.zeros(support_plane.STATE_SIZE)     # support-plane filter state
        support_plane.reset_state(self._plane)
        self._plane_r = np.zeros((self.L, 3))                 # scratch
        self._p_foot = np.zeros((self.L, 3))                  # foot points, base frame
        self._v_rel = np.zeros((self.L, 3))                   # J_p dq, base frame
        self._M_inv = np.zeros((self.L, self.k, self.k))      # leg blocks at the last estimate
        self._h_leg = np.zeros((self.L, self.k))
        self._pos = np.zeros(3)                               # base position, world [m]
        self._t: float | None = None
        self._started = False                                 # first sample processed
        self._height_init: float | None = None
        self._is_reset = False

    def _reset_history(self) -> None:
        """Forget the previous sample's gyro and base velocity (``reset``)."""
        self._gyro_prev = (0.0, 0.0, 0.0)
        self._vb_prev = (0.0, 0.0, 0.0)

    # ------------------------------------------------------------------ setup
    def _alpha(self, dt: float) -> float:
        return 1.0 - math.exp(-2.0 * math.pi * self.cfg.height.cutoff_hz * dt)

    def _plane_params(self, step: float) -> tuple[float, float]:
        """The support-plane low-pass factor over ``step`` [s] and the dead band [rad]."""
        pc = self.cfg.plane
        return 1.0 - math.exp(-2.0 * math.pi * pc.cutoff_hz * step), math.radians(pc.deadband_deg)

    def set_config(self, cfg: EstimatorConfig) -> None:
        """Apply new (validated) parameters from the next update on; filter states are kept."""
        self.cfg = cfg
        self.base_coupling = cfg.touchdown.base_coupling
        self.touchdown.set_config(cfg.touchdown)
        self.velocity.set_config(cfg.velocity)
        self._alpha_nom = self._alpha(self.dt)

    def reset(self, q0: np.ndarray | None = None, t0: float | None = None) -> None:
        """Start over with the robot at rest (all feet settled). ``q0`` (Pinocchio ``q``) gives the
        initial base position; without it, x = y = 0 and z comes from the first sample's feet.
        ``t0``: time of the previous sample, if any (the first ``update`` must be later)."""
        if q0 is not None:
            q0 = np.asarray(q0, dtype=float)
            self.rm.check_state(q0)
        if t0 is not None and not math.isfinite(t0):
            raise ValueError(f"t0 must be finite, got {t0}")
        self._pos[:] = 0.0 if q0 is None else q0[:3]
        self._height_init = None if q0 is None else float(q0[2])
        self._t = None if t0 is None else float(t0)
        self.velocity.reset(np.zeros(3))
        self.touchdown.initialized = False
        support_plane.reset_state(self._plane)
        self._reset_history()
        self._started = False
        self._is_reset = True

    def _checked_time(self, t) -> float:
        """The sample time ``t`` [s] as a float, checked as ``update`` requires: after ``reset``,
        finite, later than the previous sample (``RuntimeError`` / ``ValueError`` otherwise)."""
        if not self._is_reset:
            raise RuntimeError("StateEstimator: call reset() before update()")
        try:
            t = float(t)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"t: expected a time in seconds, got {t!r}") from exc
        if not math.isfinite(t):
            raise ValueError(f"t: must be finite, got {t}")
        if self._t is not None and not t > self._t:
            raise ValueError(f"t: samples must be strictly increasing in time, got t={t!r} after {self._t!r}")
        return t

    def update_sensors(self, frame) -> EstimatedState:
        """``update`` from an object with the fields of ``mujoco_bridge.sim.SensorFrame``."""
        return self.update(frame.t, frame.joint_pos, frame.joint_vel, frame.joint_effort,
                           frame.imu_quat_xyzw, frame.imu_gyro, frame.imu_accel)

    def _kinematics(self, qj: np.ndarray, dqj: np.ndarray) -> None:
        """Foot points ``p_i`` and velocities ``J_p,i dq_i`` relative to the base, base frame (Pinocchio)."""
        m, d = self.rm.fixed, self._fdata
        pin.forwardKinematics(m, d, qj, dqj)
        for i, f in enumerate(self._feet):
            pin.updateFramePlacement(m, d, f)
            self._p_foot[i] = d.oMf[f].translation
            self._v_rel[i] = pin.getFrameVelocity(m, d, f, self._lwa).linear


class StateEstimator(EstimatorCore):
    """Floating-base state estimator of a legged robot (see the module docstring): the cycle in
    the compiled kernels of :mod:`.kernels`, into preallocated arrays."""

    def __init__(self, rm: RobotModel, gait: GaitScheduler, cfg: EstimatorConfig | None = None,
                 dt: float = 0.002):
        super().__init__(rm, gait, cfg, dt)
        self._init_fast()

    def _reset_history(self) -> None:
        self._st[3:] = 0.0                                    # _gyro_prev, _vb_prev (views)

    def reset(self, q0: np.ndarray | None = None, t0: float | None = None) -> None:
        super().reset(q0, t0)
        self._cycles[:] = self.velocity.cycles_in_support     # the filter's reset counters, to the record

    def _init_fast(self) -> None:
        """The compiled path's record (:func:`.kernels.tick_dtype`): settings, state, scratch and
        outputs of :func:`.kernels.estimator_tick` as named fields. The filters' state arrays, the
        sample buffer, the leg blocks and ``_st`` become views of its fields (one copy of the state,
        read by name on both sides); the outputs are read through views and handed out as copies."""
        L, k, n = self.L, self.k, self.n
        self._ws = np.zeros(1, kernels.tick_dtype(L, k, n))
        self._layout = kernels.sample_layout(n)
        self._leg_v64 = np.ascontiguousarray(self.leg_j + 6, dtype=np.int64)
        self._blk_work = np.zeros((2, k, k))
        self._progress = np.zeros(L)                          # swing progress (not an output)
        td, vf = self.touchdown, self.velocity
        for owner, attr, name in ((td, "x", "td_x"), (td, "P", "td_P"), (td, "count", "td_count"),
                                  (td, "touchdown", "td_touch"), (td, "latched_cycle", "td_latched"),
                                  (td, "_prev_phase", "td_prev_phase"), (td, "_prev_cycle", "td_prev_cycle"),
                                  (td, "late", "td_late"), (td, "event", "td_event"), (vf, "v", "vf_v"),
                                  (vf, "P", "vf_P"), (vf, "prev_support", "vf_prev_support"),
                                  (self, "_M_inv", "M_inv"), (self, "_h_leg", "h_leg"), (self, "_M_lb", "M_lb")):
            view = self._field(name, getattr(owner, attr).dtype == bool)
            view[...] = getattr(owner, attr)
            setattr(owner, attr, view)
        self._in = self._field("sample")                      # packed sample, kernels.sample_layout
        # estimator state [p_world (3), previous gyro (3), previous base velocity (3)]; _pos,
        # _gyro_prev and _vb_prev are views of it on this path
        self._st = self._field("st")
        self._st[:3] = self._pos
        self._pos, self._gyro_prev, self._vb_prev = self._st[0:3], self._st[3:6], self._st[6:9]
        self._cycles = self._field("vf_cycles")               # the velocity filter's support counters
        self._cycles[:] = vf.cycles_in_support
        # the fixed-base tree for the compiled leg kinematics (None: a joint type it does not
        # handle, then Pinocchio computes them)
        self._tree = tree = kinematic_tree(self.rm.fixed, self._feet)
        if tree is not None:          # the foot points and velocities live in the tree record
            self._p_foot, self._v_rel = tree["p_foot"][0], tree["v_rel"][0]
            tree_foot_kinematics(np.zeros(n), np.zeros(n), tree)      # compiled for this record's layout
        f = self._field
        self._out = TickViews(f("q"), f("v"), f("v_world"), f("support", True), td.touchdown, f("nominal", True),
                              f("td_score"), td.count, td.x[:, k:], f("d2"), f("inflation"), f("used", True),
                              f("excluded", True), self._cycles, vf.P, self._p_foot)
        self._params_of = None                                # configs the settings are for
        self._refresh_fast_params()
        kernels.warm_up()
        self._compile_tick()
        support_plane.warm_up(L)

    def _field(self, name: str, flags: bool = False) -> np.ndarray:
        """The record's field ``name`` as an array view (``flags``: a ``uint8`` field seen as bool)."""
        a = self._ws[name][0]
        return a.view(np.bool_) if flags else a

    def _compile_tick(self) -> None:
        """Compile (or load from the cache) :func:`.kernels.estimator_tick` for this record's type,
        on a copy of the record (a first sample at rest; nothing of the estimator changes)."""
        ws = self._ws.copy()
        ws["sample"][0, 3 * self.n + 3] = 1.0                 # a unit quaternion
        e = np.zeros
        kernels.estimator_tick(ws, e(self.L, np.int64), e(self.L, np.int64), e((self.L, 3)), e((self.L, 3)),
                               True, 0.0, self.dt, math.nan)

    def _refresh_fast_params(self) -> None:
        """The record's settings from the filters' current configs (refilled when any config object
        changes, so ``set_config`` on the estimator or a filter takes effect on the next update)."""
        td, vf = self.touchdown, self.velocity
        tc, vc = td.cfg, vf.cfg
        w = self._ws
        w["leg_j"], w["dt_nom"], w["td_q_diag"], w["td_r"] = self.leg_j, self.dt, np.diag(td._Q), td._r
        w["gamma"], w["n_land"], w["late_max"] = tc.gamma_land, tc.n_land, tc.late_max_cycles
        w["vf_q"], w["vf_r"], w["gate"], w["cap"] = vf._q, vf._r, vc.gate_d2, vc.max_inflation
        w["gating"], w["n_ex"] = vc.gating, vc.exclusion_cycles
        w["imu_r"], w["imu_offset"], w["g_z"] = self._imu_r, self._imu_offset, float(GRAVITY_WORLD[2])
        w["alpha_nom"], w["cutoff_hz"], w["foot_radius"] = self._alpha_nom, self.cfg.height.cutoff_hz, self.foot_radius
        w["base_coupling"] = self.base_coupling
        self._params_of = (self.cfg, tc, vc)

    def _load(self, name: str, x, field: int) -> None:
        """Copy one input into the packed sample buffer, checking type and shape (not finiteness)."""
        o, m = self._layout[field]
        try:
            a = np.asarray(x, dtype=float)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name}: expected {m} numbers, got {x!r}") from exc
        if a.shape != (m,):
            raise ValueError(f"{name}: expected {m} values, got shape {a.shape}")
        self._in[o:o + m] = a

    def update(self, t: float, joint_pos, joint_vel, joint_effort, imu_quat_xyzw, imu_gyro,
               imu_accel, gait_clock=None) -> EstimatedState:
        """Process one sensor sample (Pinocchio joint order; IMU quaternion ``xyzw`` base->world,
        gyro [rad/s] and accelerometer specific force [m/s^2] in the base frame; effort = applied
        motor torque [N m]). ``gait_clock``: ``(tau, paused)`` of the controller's gait clock
        (``wbc_controller.blocks.command.GaitClock``; the nominal gait is evaluated at ``tau``, every
        leg in support while paused), None: at ``t``. Raises ``ValueError`` (state untouched) on bad input."""
        # ---- validate everything before touching any state (the sample buffer is scratch)
        t = self._checked_time(t)
        t_prev = self._t
        buf = self._in
        self._load_sample(joint_pos, joint_vel, joint_effort, imu_quat_xyzw, imu_gyro, imu_accel)

        # ---- all inputs valid: advance
        td, vf = self.touchdown, self.velocity
        if self._params_of[0] is not self.cfg or self._params_of[1] is not td.cfg \
                or self._params_of[2] is not vf.cfg:
            self._refresh_fast_params()
        first = not self._started
        dt = 0.0 if t_prev is None else t - t_prev
        step = dt if dt > 0 else self.dt
        phase, cycle = self._gait_phases(t) if gait_clock is None else self._clock_phases(gait_clock)
        if first:
            self._first_sample_fast()
        self._kinematics_fast(buf[:self.n], buf[self.n:2 * self.n])
        h_init = self._height_init
        status, h_raw = kernels.estimator_tick(self._ws, phase, cycle, self._p_foot, self._v_rel, first, dt, step,
                                               math.nan if h_init is None else h_init)
        o = self._out                                         # this cycle's outputs: fresh copies
        q, v, v_world = o.q.copy(), o.v.copy(), o.v_world.copy()
        support, touchdown, nominal = o.support.copy(), o.touchdown.copy(), o.nominal.copy()
        score, count, tau_ext = o.score.copy(), o.count.copy(), o.tau_ext.copy()
        d2, inflation, used, excluded = o.d2.copy(), o.inflation.copy(), o.used.copy(), o.excluded.copy()
        cycles, cov, foot_pos = o.cycles.copy(), o.cov.copy(), o.foot_pos.copy()
        # the filters' per-cycle diagnostics are replaced (never modified in place), as on the
        # reference path, so the arrays handed out below stay valid
        td.score = score
        vf.cycles_in_support, vf.d2, vf.inflation, vf.used, vf.excluded = cycles, d2, inflation, used, excluded
        if status != kernels.OK:
            raise np.linalg.LinAlgError("singular matrix in the estimator filters")
        self._dynamics_fast(q, v)                             # for the next cycle's prediction
        plane = np.empty(5)
        alpha, band = self._plane_params(step)
        support_plane.support_plane_step(foot_pos, support, q, alpha, band, self._plane, self._plane_r, plane)
        self._t = t
        self._started = True
        return EstimatedState(
            t=t, q=q, v=v, v_world=v_world, support=support, touchdown=touchdown,
            nominal_support=nominal, phase=phase, cycle=cycle,
            td_score=score, td_count=count, tau_ext=tau_ext,
            vel_d2=d2, vel_inflation=inflation, vel_used=used, vel_excluded=excluded,
            vel_cycles_in_support=cycles, vel_cov=cov, height_raw=h_raw, foot_pos_base=foot_pos, dt=dt,
            support_normal=plane[:3], support_offset=float(plane[3]), late=td.late > 0, late_event=td.event.copy())

    def _gait_phases(self, t: float, paused: bool = False):
        """Nominal phase and gait-cycle index per leg at the gait's time ``t`` (``GaitScheduler.state``,
        compiled; ``paused``: every leg in support)."""
        gait = self.gait
        if type(gait) is GaitScheduler:
            g = gait.cfg
            phase, cycle = np.empty(self.L, np.int64), np.empty(self.L, np.int64)
            gait_state(t, g.start_time, -math.inf if paused else g.stop_time, g.period, gait.swing_duration,
                       gait.offset, gait.group, phase, self._progress, cycle)
            return phase, cycle
        phase, _, cycle = gait.state(t, paused=paused)
        return phase, cycle

    def _clock_phases(self, gait_clock):
        """:meth:`_gait_phases` at a gait clock ``(tau, paused)``, checked (``ValueError``: tau not finite)."""
        tau, paused = float(gait_clock[0]), bool(gait_clock[1])
        if not math.isfinite(tau):
            raise ValueError(f"gait_clock: tau not finite ({tau})")
        return self._gait_phases(tau, paused)

    def _load_sample(self, joint_pos, joint_vel, joint_effort, imu_quat_xyzw, imu_gyro, imu_accel) -> None:
        """Pack the inputs into the sample buffer and check them (compiled for arrays); raises
        ``ValueError`` naming the first bad field (nothing else is touched)."""
        buf = self._in
        nd = np.ndarray
        bad = kernels.BAD_SHAPE
        if (type(joint_pos) is nd and type(joint_vel) is nd and type(joint_effort) is nd
                and type(imu_quat_xyzw) is nd and type(imu_gyro) is nd and type(imu_accel) is nd):
            try:                                              # arrays: packed and checked compiled
                bad = kernels.load_sample(buf, joint_pos, joint_vel, joint_effort, imu_quat_xyzw,
                                          imu_gyro, imu_accel, QUAT_NORM_TOL)
            except Exception:                                 # a dtype numba cannot take (object, complex)
                bad = kernels.BAD_SHAPE
        if bad == kernels.BAD_SHAPE:                          # other inputs, or the error message
            load = self._load
            load("joint_pos", joint_pos, 0)
            load("joint_vel", joint_vel, 1)
            load("joint_effort", joint_effort, 2)
            load("imu_quat_xyzw", imu_quat_xyzw, 3)
            load("imu_gyro", imu_gyro, 4)
            load("imu_accel", imu_accel, 5)
            bad = kernels.check_sample(buf, self.n, QUAT_NORM_TOL)
        if bad != kernels.OK:
            self._raise_bad_sample(bad)

    def _raise_bad_sample(self, bad: int):
        """The ``ValueError`` for a ``kernels.check_sample`` failure code."""
        if bad == kernels.BAD_QUAT:
            o = self._layout[3][0]
            qn = math.sqrt(float(np.dot(self._in[o:o + 4], self._in[o:o + 4])))
            raise ValueError(f"imu_quat_xyzw: not a unit quaternion (norm {qn:.6g})")
        o, m = self._layout[bad]
        raise ValueError(f"{kernels.SAMPLE_FIELDS[bad]}: contains NaN/inf: {self._in[o:o + m]}")

    def _first_sample_fast(self) -> None:
        """First sample after ``reset``: leg dynamics at this sample (base at rest) and the touchdown
        filters started at ``tau_ext = tau - h`` (as the reference path)."""
        n, buf = self.n, self._in
        qx, qy, qz, qw = buf[3 * n:3 * n + 4].tolist()
        qn = math.sqrt(qx * qx + qy * qy + qz * qz + qw * qw)
        q = np.concatenate((self._pos, (qx / qn, qy / qn, qz / qn, qw / qn), buf[:n]))
        v = np.concatenate((np.zeros(3), buf[3 * n + 4:3 * n + 7], buf[n:2 * n]))
        self._dynamics_fast(q, v)
        lj = self.leg_j
        self.touchdown.reset(buf[n:2 * n][lj], buf[2 * n:3 * n][lj] - self._h_leg)

    def _kinematics_fast(self, qj: np.ndarray, dqj: np.ndarray) -> None:
        """``_kinematics`` (foot points and ``J_p dq`` in the base frame, into ``_p_foot`` and
        ``_v_rel``) by the compiled tree walk, or by Pinocchio if the tree has other joint types."""
        tree = self._tree
        if tree is None:
            self._kinematics(qj, dqj)
            return
        tree_foot_kinematics(qj, dqj, tree)

    def _dynamics_fast(self, q: np.ndarray, v: np.ndarray) -> None:
        """``_dynamics`` into the preallocated leg blocks (one crba + one nonLinearEffects)."""
        model, data = self.rm.model, self._pdata
        M = pin.crba(model, data, q)                          # upper triangle is always filled
        h = pin.nonLinearEffects(model, data, q, v)
        if kernels.leg_blocks(M, h, self._leg_v64, self._M_inv, self._h_leg, self._M_lb,
                              self._blk_work) != kernels.OK:
            raise np.linalg.LinAlgError("singular leg block of the mass matrix")
