"""What the bridge takes from a scenario, and its physics step with the disturbance hook (no ROS).

Disturbance hook: ``disturbance_fn(t, sim) -> np.ndarray | None`` is called before every physics
step with the sim time [s] and the :class:`~mujoco_bridge.sim.MujocoSim`; it returns the extra
joint torque [N m] in joint_states order (``None`` = zero; a new array for a new torque, see
:class:`BridgePhysics`). For a scenario whose disturbance is
enabled (``config/scenarios/paper.yaml``) it is :class:`ScenarioDisturbance`: the scenario's
``DisturbanceModel`` (shared with the headless loop), gated by the estimated support set that the
bridge then subscribes to on ``/estimator/support`` (JointState-shaped, ``name`` = legs,
``position`` = 1/0); in lockstep the bridge also waits for that tick's support estimate. Otherwise
(and for ``scenario: none``) the disturbance is zero.

Initial state: ``RobotModel.stance_configuration(h)`` (by :func:`legged_wbc.sim_robot.stance`; level, at the origin, feet on the floor, at
rest) with ``h`` = ``initial_height`` if non-zero, else the scenario's ``initial_height`` (see
``config/scenarios/``), else the robot config's stance height. Sensor noise: the ``noise_*``
parameters, or the scenario's ``noise`` block when they are all zero. Ground friction, payload and
push: the scenario's (:func:`scenario_sim`), as in the headless loop; so are the actuator model
(``actuators``) and the sensor delay (``sensor_delay_ticks``), which the simulation itself applies
(:class:`~mujoco_bridge.sim.MujocoSim`: every sample the bridge publishes, at the ticks and between
them, reports the state ``2 N`` physics steps earlier). Command delay: the scenario's
``command_delay_ticks`` (:func:`delay_ticks`), which the node hands to
:class:`~mujoco_bridge.scheduler.BridgeScheduler`.
"""

from __future__ import annotations

import numpy as np

from legged_wbc.conventions import PHYSICS_DT_NS
from mujoco_bridge.sim import STEPS_PER_TICK, MujocoSim, SensorNoise


def load_scenario_config(name: str, robot: str = "hexapod"):
    """The scenario (``legged_wbc.scenario.load_scenario_on``: on the bridge's ``robot``) for its initial
    height, sensor noise and disturbance, or None (``none``, or no scenario module)."""
    if name in ("", "none"):
        return None
    try:
        from legged_wbc.scenario import load_scenario_on
    except ImportError:
        return None
    return load_scenario_on(name, robot)


def sensor_noise(scenario, joint_velocity: float, gyro: float, accel: float, seed: int) -> SensorNoise:
    """The ``noise_*`` parameters, or the scenario's ``noise`` block when they are all zero."""
    noise = SensorNoise(joint_velocity=joint_velocity, gyro=gyro, accel=accel, seed=seed)
    if scenario is not None and not noise.enabled and getattr(scenario, "noise", None):
        sn = scenario.noise
        noise = SensorNoise(joint_velocity=float(sn.get("joint_velocity", 0.0)), gyro=float(sn.get("gyro", 0.0)),
                            accel=float(sn.get("accel", 0.0)), seed=int(sn.get("seed", 0)))
    return noise


def scenario_sim(robot, scenario, noise: SensorNoise) -> MujocoSim:
    """The simulation of ``robot`` with the scenario's physical variations (``ground.friction``,
    ``payload.mass_kg``, ``push``; ``Scenario.physics()``), its ``terrain``, ``actuators`` and its
    ``sensor_delay_ticks`` (ticks of the stack's 2 ms control period); the headless loop builds its
    simulation with this function too."""
    sim = MujocoSim(robot, noise=noise, actuators=getattr(scenario, "actuators", "ideal"),
                    terrain=getattr(scenario, "terrain", None),
                    sensor_delay_steps=STEPS_PER_TICK * int(getattr(scenario, "sensor_delay_ticks", 0)))
    if scenario is not None:
        sim.set_physics(**scenario.physics())
    return sim


def bridge_simulation(cfg) -> tuple[object, object, MujocoSim, np.ndarray]:
    """The bridge's robot, scenario (:func:`load_scenario_config`, or None), simulation
    (:func:`scenario_sim` with :func:`sensor_noise`; its physics step must be 1 ms) and initial
    configuration (:func:`initial_height`), the simulation reset to it: ``(robot, scenario, sim,
    q0)``. ``cfg``: the bridge's parameters (:class:`~mujoco_bridge.config.BridgeConfig`).

    The robot is a :class:`~legged_wbc.sim_robot.SimRobot` (joint order, limits, the stance from
    :func:`legged_wbc.sim_robot.stance`: the process loads no Pinocchio or numba), unless the scenario
    enables a disturbance: its torque is computed on the leg Jacobian every pushed tick
    (:class:`~legged_wbc.scenario.DisturbanceModel`), so then a :class:`~legged_wbc.model.RobotModel`."""
    scenario = load_scenario_config(cfg.scenario, cfg.robot)
    height = initial_height(cfg.initial_height, scenario)
    if disturbance_enabled(scenario):
        from legged_wbc.model import RobotModel

        robot = RobotModel(cfg.robot)
        q0 = robot.stance_configuration(height)
    else:
        from legged_wbc.sim_robot import sim_robot

        robot, q0 = sim_robot(cfg.robot, height)
    sim = scenario_sim(robot, scenario, sensor_noise(scenario, cfg.noise_joint_velocity, cfg.noise_gyro,
                                                     cfg.noise_accel, cfg.noise_seed))
    if abs(sim.dt * 1e9 - PHYSICS_DT_NS) > 1e-3:
        raise RuntimeError(f"physics step {sim.dt} s, the bridge expects 0.001 s")
    sim.reset(q0)
    return robot, scenario, sim, q0


def delay_ticks(scenario) -> int:
    """The scenario's ``command_delay_ticks`` (0 without a scenario)."""
    return int(getattr(scenario, "command_delay_ticks", 0))


def initial_height(param: float, scenario) -> float | None:
    """``initial_height`` if non-zero, else the scenario's, else None (the robot config's)."""
    return param or getattr(scenario, "initial_height", None) or None


class ScenarioDisturbance:
    """``disturbance_fn`` of a scenario: ``DisturbanceModel.torque(t, q_j, leg_in_estimated_support)``
    evaluated at each control tick (with the true joint positions and the estimator's support set of
    that tick, from ``/estimator/support``) and held for the tick's physics steps, as in the headless
    loop. ``sched`` (the :class:`~mujoco_bridge.scheduler.BridgeScheduler`) gives the step count and
    the support estimates; in lockstep it waits for the tick's estimate before stepping, so the
    result is deterministic."""

    def __init__(self, model, sched):
        self.model = model
        self.sched = sched      # anything with step_count, steps_per_tick and support_estimate(tick)
        self.held = np.zeros(model.robot.n)

    def __call__(self, t: float, sim):
        sched = self.sched
        if sched.step_count % sched.steps_per_tick == 0:
            sup = sched.support_estimate(sched.step_count // sched.steps_per_tick)
            in_support = bool(sup[self.model.leg]) if sup is not None else False
            qj = sim.joint_positions()
            self.held = self.model.torque(t, qj, in_support, sup)
        return self.held


def disturbance_enabled(scenario) -> bool:
    """Whether the scenario enables a disturbance or a squeeze (see :func:`scenario_disturbance`)."""
    squeeze = getattr(getattr(scenario, "squeeze", None), "enabled", False)
    return scenario is not None and bool(getattr(getattr(scenario, "disturbance", None), "enabled", False) or squeeze)


def scenario_disturbance(scenario, robot, sched, log):
    """The disturbance hook of the scenario: a :class:`ScenarioDisturbance` (its ``DisturbanceModel``,
    the one the headless loop uses) when the scenario enables a disturbance, else None (zero)."""
    if not disturbance_enabled(scenario):
        return None
    squeeze = getattr(getattr(scenario, "squeeze", None), "enabled", False)
    try:
        from legged_wbc.scenario import DisturbanceModel
    except ImportError:
        log.warning("the scenario enables a disturbance but legged_wbc.scenario has no DisturbanceModel; "
                    "the disturbance stays zero")
        return None
    d = scenario.disturbance
    log.info(f"disturbance: {d.torque_nm:g} N m on leg {d.leg} from t = {d.start:g} s for {d.duration:g} s, "
             "while the leg is in the estimated support set")
    if squeeze:
        sq = scenario.squeeze
        log.info(f"squeeze: {sq.torque_nm:g} N m on the hip yaw of legs {sq.legs[0]}, {sq.legs[1]} towards each "
                 f"other from t = {sq.start:g} s for {sq.duration:g} s")
    return ScenarioDisturbance(DisturbanceModel(scenario, robot), sched)


class BridgePhysics:
    """One 1 ms physics step of the bridge: the commanded torque plus ``disturbance_fn``'s torque
    (checked: a wrong shape or a non-finite value is logged and replaced by zero); the applied
    disturbance is kept in :attr:`dist_applied` for ``/disturbance``. A torque array returned again
    (the same object: :class:`ScenarioDisturbance` holds a tick's torque over its steps) was checked
    and set when it first came: ``disturbance_fn`` returns a new array for a new torque.

    A command torque beyond a joint's effort limit is clamped by the simulation
    (:meth:`~mujoco_bridge.sim.MujocoSim.set_torque`, as ros2_control's joint limiters saturate a command)
    and counted in ``counters["commands_clamped"]`` (the scheduler's counters: ``/bridge/diagnostics``);
    the first one of a run is logged with its joint."""

    def __init__(self, sim, n: int, log, disturbance_fn=None, counters: dict | None = None):
        self.sim = sim
        sim.track_saturation = False   # nothing here reads the flags: no per-step work for them
        self.n = n
        self.log = log
        self.disturbance_fn = disturbance_fn
        self.counters = counters if counters is not None else {}
        self.counters.setdefault("commands_clamped", 0)
        self.dist_applied = np.zeros(n)
        self._tau_set = None            # the torque array last handed to the simulation (never mutated)
        self._dist_set = 0              # disturbance_fn's array last handed to it (0: none yet; None: zero)

    def step(self, tau: np.ndarray, step: int) -> None:
        sim = self.sim
        if tau is not self._tau_set:    # a command's torque drives several steps: checked and set once
            if sim.set_torque(tau):     # clamped to the effort limits
                self._clamped(tau)
            self._tau_set = tau
        dist = None
        if self.disturbance_fn is not None:
            dist = self.disturbance_fn(step * 1_000_000 * 1e-9, sim)
        if dist is not self._dist_set:  # a torque held over several steps (a tick's): checked and set once
            self._set_disturbance(dist)
        sim.step(1)

    def _clamped(self, tau: np.ndarray) -> None:
        """Count a command the simulation clamped to the effort limits; log the first of the run."""
        c = self.counters
        c["commands_clamped"] += 1
        if c["commands_clamped"] == 1:
            limit = self.sim.effort_limit
            j = int(np.argmax(np.abs(tau) - limit))
            name = self.sim.robot.joint_names[j]
            self.log.warning(f"torque command beyond the effort limit: {tau[j]:.6g} N m for {name} (limit "
                             f"{limit[j]:g} N m): clamped to the limit; such commands are counted in "
                             "commands_clamped (/bridge/diagnostics), this line is not repeated")

    def _set_disturbance(self, dist) -> None:
        """Check ``disturbance_fn``'s new torque (None: zero) and hand it to the simulation."""
        self._dist_set = dist
        if dist is None:
            self.dist_applied[:] = 0.0
        else:
            dist = np.asarray(dist, dtype=float)
            if dist.shape != (self.n,) or not np.isfinite(dist).all():
                self.log.error(f"disturbance_fn returned {dist!r}; using zero", throttle_duration_sec=1.0)
                dist = np.zeros(self.n)
            self.dist_applied[:] = dist
        self.sim.set_disturbance(self.dist_applied)

