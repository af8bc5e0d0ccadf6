"""Headless closed loop: MuJoCo at 1 kHz, estimator and whole-body controller at 500 Hz, no ROS.

The estimator sees only what the bridge node publishes (joint states, IMU); the controller sees
only the estimator's output. Ground truth is logged for evaluation, never fed back. The loop is
deterministic for a given scenario (MuJoCo and the QP solvers are deterministic; noise is seeded).

Per control tick ``k`` (t = 0.002 k): read sensors -> estimator -> controller -> hold the torque
for two physics steps, adding the scenario disturbance when its window is open and the disturbed
leg is in the *estimated* support set.

With the scenario's ``command_delay_ticks`` ``N`` > 0 the torque held from tick ``k`` is the one
computed at tick ``k - N`` (the command answering tick ``k`` acts from control period ``k + 1 + N``,
exactly as in the lockstep bridge); during the first ``N`` ticks, which no command reaches yet, the
joints are damped as by the bridge before its first command (its watchdog's ``-watchdog_damping * dq``,
``config/mujoco_bridge.yaml``, clipped to the effort limits, recomputed every physics step). The
logged ``tau`` stays the command computed at each tick.

The simulation is built as the bridge builds it (:func:`mujoco_bridge.scenario_setup.scenario_sim`):
the scenario's ``actuators`` and ``sensor_delay_ticks`` act inside it, so the estimator reads the
delayed samples the bridge would publish, while the disturbance (physics) uses the true joint
positions, as in the bridge (the logged ``joint_pos`` is the sample, delayed). ``tau_saturated`` logs per tick and joint whether the actuator clipped
the applied torque at one of the tick's physics steps (``torque_saturation_pct``).

The estimator's support-plane normal goes to the controller with the support set (``normal``); the
log keeps it (``normal_est``), the true one under the support feet (``normal_true``), the feet's
ground-truth positions (``foot_pos_gt``), the late legs and their events (``late``,
``late_event``), from which :func:`legged_wbc.terrain_metrics.terrain_metrics` adds the terrain
metrics to ``metrics.json`` (normal error, early / late touchdowns, foot slip).
"""

from __future__ import annotations

import gc
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mujoco_bridge.config import load_bridge_config
from mujoco_bridge.scheduler import damping_torque
from mujoco_bridge.scenario_setup import scenario_sim
from mujoco_bridge.sim import SensorNoise
from mujoco_bridge.timing import CommandDelayLine
from state_estimator.config import load_estimator_config
from state_estimator.estimator import StateEstimator
from wbc_controller.blocks.command import AXES, CMD_PX, CMD_PY, CMD_YAW, Commander, CommandLimits, CommandSchedule
from wbc_controller.config import load_wbc_config
from wbc_controller.controller import ControllerInput, WholeBodyController

from legged_wbc.gait import GaitConfig, GaitScheduler
from legged_wbc.metrics import (CONTROL_DT, CONTROL_PERIOD_NS, command_metrics, compute_metrics,
                                roll_pitch_from_quat_xyzw)
from legged_wbc.model import RobotModel
from legged_wbc.robot import ConfigError
from legged_wbc.scenario import DisturbanceModel, Scenario
from wbc_controller.blocks.leg_collision import LegDistance
from legged_wbc.terrain_metrics import terrain_metrics, true_normals

PHYSICS_PER_CONTROL = 2


@dataclass
class RunResult:
    scenario: Scenario
    mode: str
    series: dict
    metrics: dict
    fell: bool
    fall_reason: str = ""
    sim_time_s: float = 0.0
    wall_time_s: float = 0.0
    extra: dict = field(default_factory=dict)


IMPLS = ("fast", "reference")


def estimator_accepts_impl() -> bool:
    """Whether the estimator has a reference implementation the loop can run (its oracle,
    :class:`state_estimator.oracle.ReferenceEstimator`); kept for ``bench cycle``'s JSON."""
    return True


def _check_impl(impl: str) -> None:
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")


def make_estimator(rm: RobotModel, gait_cfg: GaitConfig, ecfg, impl: str | None = None) -> StateEstimator:
    """The loop's estimator (500 Hz, ``dt = CONTROL_DT``): the compiled :class:`StateEstimator`
    (``impl="fast"``, default) or its numpy oracle (``"reference"``, tests and ``bench cycle``)."""
    impl = "fast" if impl is None else impl
    _check_impl(impl)
    cls = StateEstimator
    if impl == "reference":
        from state_estimator.oracle import ReferenceEstimator as cls
    return cls(rm, GaitScheduler(gait_cfg, rm.cfg.leg_names), ecfg, dt=CONTROL_DT)


def make_controller(rm: RobotModel, wcfg, gait_cfg: GaitConfig, impl: str = "fast") -> WholeBodyController:
    """The loop's controller: the compiled :class:`WholeBodyController` (``impl="fast"``) or its
    numpy oracle (``"reference"``)."""
    _check_impl(impl)
    cls = WholeBodyController
    if impl == "reference":
        from wbc_controller.oracle import ReferenceController as cls
    return cls(rm, wcfg, gait_cfg)


class _GcPause:
    """Keeps garbage-collector pauses out of the control ticks: the objects of the start-up are
    frozen (never scanned again), automatic collection is off during the loop, and the young
    generation is collected explicitly between ticks every ``every`` ticks (objects of the loop
    are freed by reference counting; only cycles wait for these collections). The previous
    state is restored at the end."""

    def __init__(self, every: int):
        self.every = every
        self.was_enabled = gc.isenabled()

    @classmethod
    def start(cls, every: int = 250) -> "_GcPause":
        self = cls(every)
        gc.collect()
        gc.freeze()
        gc.disable()
        return self

    def between_ticks(self, k: int) -> None:
        if k % self.every == self.every - 1:
            gc.collect(0)

    def stop(self) -> None:
        gc.unfreeze()
        if self.was_enabled:
            gc.enable()


class ClosedLoop:
    """Headless closed loop of one scenario and controller mode; ``impl`` selects the fast
    (default) or reference implementation of the controller and, if it has one, the estimator."""

    def __init__(self, scenario: Scenario, mode: str, solver: str | None = None, impl: str = "fast"):
        self.sc = scenario
        self.mode = mode
        self.impl = impl
        self.rm = RobotModel(scenario.robot)
        rm = self.rm
        self.gait_cfg = GaitConfig.from_dict(scenario.gait_dict(rm.cfg.gait))
        noise = SensorNoise(**{k: scenario.noise[k] for k in ("joint_velocity", "gyro", "accel", "seed")
                               if k in scenario.noise})
        # ground friction, payload, push, actuators, sensor delay: as the bridge builds its simulation
        self.sim = scenario_sim(rm, scenario, noise)
        over = scenario.controller_overrides(mode)
        if solver:
            over["solver"] = solver
        self.wcfg = load_wbc_config(overrides=over, robot=scenario.robot)   # checked against its geometry
        self.ctl = make_controller(rm, self.wcfg, self.gait_cfg, impl)
        self.ecfg = load_estimator_config(overrides=scenario.estimator)
        self.est = make_estimator(rm, self.gait_cfg, self.ecfg, impl)
        self.commander = make_commander(scenario, self.wcfg, self.gait_cfg, rm)
        if self.commander is not None:       # a command before the gait is held: said once, on stderr
            self.commander.on_held = lambda msg: print(f"note: {msg}", file=sys.stderr)
        self.disturbance = DisturbanceModel(scenario, rm)
        self.dist_leg = self.disturbance.leg
        self.command_delay = CommandDelayLine(scenario.command_delay_ticks)
        # before the first delayed command arrives: the bridge's damping (as before its first command)
        self.no_command_damping = load_bridge_config().watchdog_damping if scenario.command_delay_ticks else 0.0
        self._leg_joint_flat = np.array(rm.leg_joints).reshape(-1)
        # evaluation: the leg-collision barrier's distances on ground truth (a generated robot's capsule links;
        # a URDF robot has none: nan, "not measured")
        self.leg_distance = LegDistance(rm) if rm.cfg.kind == "generated" else _no_leg_distance
        q0 = rm.stance_configuration(scenario.initial_height)
        self.q0 = q0
        self.sim.reset(q0)
        self.est.reset(q0)
        self.ctl.reset(q0)

    def run(self, duration: float | None = None, progress: bool = False, stop_on_fall: bool = True,
            on_tick=None) -> RunResult:
        """Run for ``duration`` sim seconds (default: the scenario's). ``on_tick(loop, t, sensors, est)``,
        if given, is called every control tick before the physics steps (evaluation hooks)."""
        sc, sim, n = self.sc, self.sim, self.rm.n
        duration = sc.duration if duration is None else duration
        steps = int(round(duration / CONTROL_DT))
        S = _series_buffers(steps, self.rm.n_legs, n)
        if self.commander is not None:
            S.update(_command_buffers(steps))
        control = _control_step(self, S)
        record, fall_check = _tick_recorder(S, sim, self.leg_distance), _fall_check(sc, sim)
        report = _ProgressLine(self.mode, duration, self.rm.leg_has_pitch) if progress else None
        fell, reason = False, ""
        s_saturated, take_saturation = S["tau_saturated"], sim.take_saturation
        q_from_mj, qpos, dist_leg = sim.conv.q_from_mj, sim.d.qpos, self.dist_leg
        delay_push, effort = self.command_delay.push, self.rm.effort
        gc_state = _GcPause.start()
        wall0 = time.perf_counter()
        cpu0 = time.process_time()
        k = 0
        try:
            for k in range(steps):
                # the tick clock, exactly as the ROS nodes read it off the stamps (k * 2 ms in integer ns);
                # MuJoCo's accumulated d.time drifts in the last bits and would shift tick-boundary events
                t = (k * CONTROL_PERIOD_NS) * 1e-9
                f = sim.sensors()
                est, out = control(k, t, f)
                tau_applied = delay_push(out.tau)      # command_delay_ticks = 0: out.tau itself
                if tau_applied is not None:
                    sim.set_torque(tau_applied)
                # at the true joint positions, as in the bridge (a delayed sensor sample lags them)
                tau_dist = self.disturbance.torque(t, sim.joint_positions(), bool(est.support[dist_leg]), est.support)
                sim.set_disturbance(tau_dist)
                if on_tick is not None:
                    on_tick(self, t, f, est)
                q_gt = q_from_mj(qpos)          # ground truth (evaluation only): q of sim.ground_truth()
                record(k, t, f, est, out, tau_dist, q_gt)
                if tau_applied is not None:
                    sim.step(PHYSICS_PER_CONTROL)
                else:                               # no (delayed) command yet: damping, every physics step
                    for _ in range(PHYSICS_PER_CONTROL):
                        sim.set_torque(damping_torque(sim.joint_velocities(), self.no_command_damping, effort))
                        sim.step(1)
                s_saturated[k] = take_saturation()      # clipped by the actuator at a step of this tick
                why, z = fall_check(q_gt, t)        # fall detection on ground truth (evaluation only)
                if why is not None:
                    fell, reason = True, why
                if report is not None:
                    report(t, q_gt, z, out.diag, fell)
                if fell and stop_on_fall:
                    break
                gc_state.between_ticks(k)
        finally:
            gc_state.stop()
        if report is not None:
            report.close()
        return self._result(S, k + 1, time.perf_counter() - wall0, time.process_time() - cpu0, fell, reason)

    def _result(self, S: dict, used: int, wall: float, cpu: float, fell: bool, reason: str) -> RunResult:
        """The run's result: its series cut to the ``used`` ticks, its metrics and timings."""
        sc, sim = self.sc, self.sim
        for key in S:
            S[key] = S[key][:used]
        S["rp_err"] = roll_pitch_from_quat_xyzw(S["base_quat"])  # desired attitude is level
        t0, t1 = sc.eval_window
        m = compute_metrics(S, t0, t1, self.wcfg.theta_min, self.wcfg.theta_max, fell=fell,
                            pitch_legs=self.rm.leg_has_pitch)
        S["normal_true"] = true_normals(sc.terrain, S["foot_pos_gt"], S["support"])   # evaluation only
        m.update(terrain_metrics(S, t0, t1))
        m.update(command_metrics(S))
        m.update(sim_time_s=float(sim.time), wall_time_s=float(wall),
                 realtime_factor=float(sim.time / wall) if wall > 0 else None,
                 controller=self.mode, scenario=sc.name, fall_reason=reason or None, terrain=sc.terrain.summary())
        # CPU time of this process over the loop: sim / CPU is what the loop itself allows, sim / wall
        # also counts the time other jobs on the machine held the cores (not in metrics.json, whose
        # keys are those of the bag metrics)
        extra = {"cpu_time_s": float(cpu), "realtime_factor_cpu": float(sim.time / cpu) if cpu > 0 else None}
        return RunResult(sc, self.mode, S, m, fell, reason, float(sim.time), wall, extra)


def _series_buffers(steps: int, N: int, n: int) -> dict:
    """The headless log's series, one row per control tick (``N`` legs, ``n`` joints)."""
    return {
        "t": np.zeros(steps), "theta": np.zeros((steps, N)), "theta_dot": np.zeros((steps, N)),
        "support": np.zeros((steps, N), bool), "contact_gt": np.zeros((steps, N), bool),
        "touchdown": np.zeros((steps, N), bool), "cbf_active": np.zeros((steps, N), bool),
        "phase": np.zeros((steps, N), np.int8),
        "rp_err": np.zeros((steps, 2)), "tau": np.zeros((steps, n)), "disturbance": np.zeros((steps, n)),
        "qp_time_us": np.zeros(steps), "cycle_time_us": np.zeros(steps), "qp_accepted": np.zeros(steps, bool),
        "base_pos": np.zeros((steps, 3)), "base_quat": np.zeros((steps, 4)), "base_vel_world": np.zeros((steps, 3)),
        "est_pos": np.zeros((steps, 3)), "est_vel_world": np.zeros((steps, 3)),
        "joint_pos": np.zeros((steps, n)), "safe_stop": np.zeros(steps, bool),
        "tau_saturated": np.zeros((steps, n), bool), "cbf_slack": np.zeros((steps, N)),
        "normal_est": np.zeros((steps, 3)), "foot_pos_gt": np.zeros((steps, N, 3)),
        "late": np.zeros((steps, N), bool), "late_event": np.zeros((steps, N), np.int8),
        "leg_distance": np.zeros(steps), "leg_contacts": np.zeros(steps, np.int32),
    }


def make_commander(sc: Scenario, wcfg, gait_cfg: GaitConfig, rm: RobotModel) -> Commander | None:
    """The loop's command source under a scenario with ``commands`` (:class:`Commander`: the
    schedule through the controller's command filter, and the gait clock), else None (the scenario's
    forward walk). A scheduled value over the controller's limits is a :class:`ConfigError`."""
    entries = sc.raw.get("commands")
    if not entries:
        return None
    limits = CommandLimits.from_config(wcfg)
    for e in entries:
        for name, m in zip(AXES, limits.v_max):
            if abs(float(x := e[name])) > m:
                raise ConfigError(f"scenario.commands: {name} {x} at t={e['t']} over the controller's limit "
                                  f"cmd_max_{name} {m}")
    schedule = CommandSchedule([(float(e["t"]), float(e["vx"]), float(e["vy"]), float(e["wz"])) for e in entries])
    return Commander(limits, GaitScheduler(gait_cfg, rm.cfg.leg_names), schedule)


def _command_buffers(steps: int) -> dict:
    """The log's command series (under ``commands``): the clamped target and the filtered command
    ``(vx, vy, wz)`` [m/s, m/s, rad/s] (heading frame), the gait clock ``tau`` [s] and ``paused``, and
    the body reference's ``(x, y, yaw)`` [m, m, rad] (world)."""
    return {"cmd_target": np.zeros((steps, 3)), "cmd_filtered": np.zeros((steps, 3)), "gait_tau": np.zeros(steps),
            "gait_paused": np.zeros(steps, bool), "cmd_ref": np.zeros((steps, 3))}


def _control_step(loop, S: dict):
    """``control(k, t, sensors) -> (estimate, controller output)``: one tick of the estimator and the
    controller; under ``commands`` the loop's :class:`Commander` first (its command and gait clock,
    computed once, to both), logged in row ``k``."""
    est_update, ctl_update, n, leg_joint_flat = loop.est.update, loop.ctl.update, loop.rm.n, loop._leg_joint_flat
    cm = loop.commander
    if cm is not None:
        target, filtered, tau, paused, ref = (S[key] for key in ("cmd_target", "cmd_filtered", "gait_tau",
                                                                 "gait_paused", "cmd_ref"))
        ref_fields = np.array([CMD_PX, CMD_PY, CMD_YAW])

    def control(k, t, f):
        cmd = None if cm is None else cm.tick(t)
        est = est_update(t, f.joint_pos, f.joint_vel, f.joint_effort, f.imu_quat_xyzw, f.imu_gyro, f.imu_accel,
                         gait_clock=None if cmd is None else (cmd.tau, cmd.paused))
        tau_ext = np.empty(n)
        tau_ext[leg_joint_flat] = est.tau_ext.reshape(-1)
        out = ctl_update(ControllerInput(t=t, q=est.q, v=est.v, support=est.support, tau_ext=tau_ext,
                                         normal=est.support_normal, command=cmd))
        if cmd is not None:
            target[k] = cm.filter.effective_target(t)
            filtered[k] = (cmd.vx, cmd.vy, cmd.wz)
            tau[k], paused[k] = cmd.tau, cmd.paused
            ref[k] = loop.ctl.cmd_array[ref_fields]
        return est, out

    return control


def _no_leg_distance(qj) -> float:
    """The smallest leg-link distance of a robot without capsule links: not measured."""
    return math.nan


def _tick_recorder(S: dict, sim, leg_distance):
    """``record(k, t, sensors, est, out, tau_dist, q_gt)``: row ``k`` of the series (but ``tau_saturated``
    and ``rp_err``; ``leg_distance(q_j)`` the leg-collision candidates' smallest distance); the rows are
    written through closure names (no dict look-ups per tick)."""
    s_leg_distance, s_leg_contacts, robot_contacts = S["leg_distance"], S["leg_contacts"], sim.robot_contacts
    s_t, s_theta, s_theta_dot, s_support = S["t"], S["theta"], S["theta_dot"], S["support"]
    s_touchdown, s_phase, s_contact, s_cbf = S["touchdown"], S["phase"], S["contact_gt"], S["cbf_active"]
    s_tau, s_dist, s_qp_us, s_cycle_us = S["tau"], S["disturbance"], S["qp_time_us"], S["cycle_time_us"]
    s_accepted, s_safe_stop, s_base_pos, s_base_quat = S["qp_accepted"], S["safe_stop"], S["base_pos"], S["base_quat"]
    s_base_vel, s_est_pos, s_est_vel, s_joint_pos = (S["base_vel_world"], S["est_pos"], S["est_vel_world"],
                                                     S["joint_pos"])
    s_slack = S["cbf_slack"]
    s_normal, s_foot_gt, s_late, s_late_event = S["normal_est"], S["foot_pos_gt"], S["late"], S["late_event"]
    foot_contacts, base_velocity_world = sim.foot_contacts, sim.base_velocity_world
    foot_xpos, foot_geoms = sim.d.geom_xpos, np.array(sim.foot_geoms)

    def record(k, t, f, est, out, tau_dist, q_gt) -> None:
        d = out.diag
        s_leg_distance[k] = leg_distance(q_gt[7:])
        s_leg_contacts[k] = robot_contacts()
        s_t[k] = t
        s_theta[k] = d.theta
        s_theta_dot[k] = d.theta_dot
        s_support[k] = est.support
        s_touchdown[k] = est.touchdown
        s_phase[k] = est.phase
        s_contact[k] = foot_contacts()
        s_cbf[k] = d.cbf_active
        s_tau[k] = out.tau
        s_dist[k] = tau_dist
        s_qp_us[k] = d.qp_time_us
        s_cycle_us[k] = d.cycle_time_us
        s_accepted[k] = d.qp_accepted
        s_safe_stop[k] = d.safe_stop
        if d.cbf_slack.size:
            s_slack[k] = d.cbf_slack
        s_base_pos[k] = q_gt[:3]
        s_base_quat[k] = q_gt[3:7]
        s_base_vel[k] = base_velocity_world()
        s_est_pos[k] = est.q[:3]
        s_est_vel[k] = est.v_world
        s_joint_pos[k] = f.joint_pos
        s_normal[k] = est.support_normal
        s_late[k] = est.late
        s_late_event[k] = est.late_event
        s_foot_gt[k] = foot_xpos[foot_geoms]          # foot sphere centres, world (evaluation only)

    return record


def _fall_check(sc: Scenario, sim):
    """``check(q_gt, t) -> (reason or None, z)``: the headless loop's fall criteria on the ground truth
    ``q_gt`` at tick time ``t`` (base height above the terrain after the stand-up, tilt, base-floor
    contact); ``z`` [m] is the base height above the terrain under it."""
    min_height, max_tilt = sc.fall_min_height, sc.fall_max_tilt_deg
    ground = None if sc.terrain.kind == "flat" else sc.terrain.height   # flat: the height is 0
    t_standing = sc.stand_up_start + sc.stand_up_duration
    base_contact = sim.base_contact

    def check(q_gt, t):
        qx, qy = float(q_gt[3]), float(q_gt[4])
        z = float(q_gt[2])                  # above the terrain under the base
        if ground is not None:
            z -= float(ground(q_gt[0], q_gt[1]))
        tilt = math.degrees(math.acos(max(-1.0, min(1.0, 1 - 2 * (qx ** 2 + qy ** 2)))))
        if z < min_height and t > t_standing:
            return f"base height {z:.3f} m < {min_height} m at t={t:.3f} s", z
        if tilt > max_tilt:
            return f"base tilt {tilt:.1f} deg > {max_tilt} deg at t={t:.3f} s", z
        if base_contact():
            return f"base touched the floor at t={t:.3f} s", z
        return None, z

    return check


class _ProgressLine:
    """The run's progress: a terminal gets one line rewritten in place (every sim second); a file or
    pipe gets plain lines, every 5 sim seconds (and at a fall)."""

    def __init__(self, mode: str, duration: float, pitch_legs=None):
        self.mode, self.duration = mode, duration
        self.pitch_legs = None if pitch_legs is None or all(pitch_legs) else list(pitch_legs)
        self.tty = sys.stdout.isatty()
        self.lead, self.end, self.every = ("\r", "", 1.0) if self.tty else ("", "\n", 5.0)
        self.last = -1e9

    def __call__(self, t: float, q_gt, z: float, d, fell: bool) -> None:
        if t - self.last >= self.every or fell:
            self.last = t
            pl = self.pitch_legs
            theta = ", ".join(f"{x:+.2f}" if pl is None or pl[i] else "-" for i, x in enumerate(d.theta))
            print(f"{self.lead}[{self.mode}] t={t:6.2f}/{self.duration:.1f} s  x={q_gt[0]:6.3f} m  z={z:.3f} m  "
                  f"theta[{theta}]  qp={d.qp_time_us:5.0f} us  "
                  f"fail={d.total_failures}", end=self.end, flush=True)

    def close(self) -> None:
        if self.tty:
            print()


def save_run(res: RunResult, out: str | Path) -> Path:
    """``out/log.npz`` and ``out/metrics.json``, each written under a temporary name and renamed,
    ``metrics.json`` last (an earlier one removed first): a failed write never leaves a
    ``metrics.json`` without its ``log.npz``; the temporary files are removed on failure."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"scenario": res.scenario.raw, "controller": res.mode, "control_dt": CONTROL_DT}
    tmp_log, tmp_metrics = out / ".log.npz.partial", out / ".metrics.json.partial"
    try:
        with open(tmp_log, "wb") as fh:
            np.savez_compressed(fh, meta=json.dumps(meta), **res.series)
        tmp_metrics.write_text(json.dumps(res.metrics, indent=2) + "\n")
        (out / "metrics.json").unlink(missing_ok=True)
        os.replace(tmp_log, out / "log.npz")
        os.replace(tmp_metrics, out / "metrics.json")
    finally:
        tmp_log.unlink(missing_ok=True)
        tmp_metrics.unlink(missing_ok=True)
    return out


def load_log(path: str | Path) -> tuple[dict, dict]:
    p = Path(path)
    if p.is_dir():
        p = p / "log.npz"
    with np.load(p, allow_pickle=False) as z:
        series = {k: z[k] for k in z.files if k != "meta"}
        meta = json.loads(str(z["meta"]))
    return series, meta
