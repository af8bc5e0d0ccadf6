"""MuJoCo simulation of the robot, with the interface the bridge node and the headless loop share.

All vectors in and out are in Pinocchio's joint order and conventions (see
:mod:`legged_wbc.conventions`); the conversion happens here and nowhere else on the simulation
side. Sensors are what a real robot gives: joint positions / velocities / applied torques and an
IMU (orientation quaternion ``xyzw`` base->world, gyro in the IMU (= base) frame [rad/s],
accelerometer specific force in the base frame [m/s^2]). Ground truth (``q``, ``v``, foot contact)
is available separately for evaluation only.

Actuators (``actuators``, the scenario key of the same name): ``"ideal"`` applies the commanded
torque as it is, clamped to the joint's ``effort`` (:meth:`MujocoSim.set_torque` clamps it before MuJoCo,
which would clamp the force to the same value through the URDF's ``actuatorfrcrange``, as it always
did; the bridge counts those commands, ``commands_clamped``); ``"realistic"`` adds the robot YAML's joint friction to the
model (:func:`legged_wbc.mujoco_model.build_spec`) and clips the command at every physics step to
the torque-speed envelope at the joint velocity of that step (:class:`ActuatorEnvelope`). Either
way :meth:`MujocoSim.take_saturation` says which joints were clipped since it was last called.

Sensor delay (``sensor_delay_steps`` ``D``, the scenario's ``sensor_delay_ticks`` times 2): what
:meth:`MujocoSim.sensors` returns after ``s`` physics steps is what it would have returned after
``max(0, s - D)`` steps (joint positions, velocities, efforts and the IMU alike; noise is drawn
when read); before ``D`` steps have passed it is the state at the reset. Everything else
(ground truth, :meth:`joint_positions`, :meth:`joint_velocities`) stays undelayed: the physics side.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import mujoco
import numpy as np

from legged_wbc.conventions import CONTROL_PERIOD_NS, PHYSICS_DT_NS, StateConverter
from legged_wbc.mujoco_model import ACTUATOR_MODELS, TIMESTEP, actuator_joint_names, build_model, hinge_joint_names
from legged_wbc.terrain import Terrain, is_terrain_geom

STEPS_PER_TICK = CONTROL_PERIOD_NS // PHYSICS_DT_NS     # physics steps per control tick (2)


@dataclass
class SensorNoise:
    """Optional white sensor noise (standard deviations), seeded for reproducibility."""

    joint_velocity: float = 0.0   # [rad/s]
    gyro: float = 0.0             # [rad/s]
    accel: float = 0.0            # [m/s^2]
    seed: int = 0

    @property
    def enabled(self) -> bool:
        return self.joint_velocity > 0 or self.gyro > 0 or self.accel > 0


@dataclass
class SensorFrame:
    """One sample of the robot's sensors (what the bridge publishes)."""

    t: float
    joint_pos: np.ndarray        # [rad], Pinocchio joint order
    joint_vel: np.ndarray        # [rad/s]
    joint_effort: np.ndarray     # applied motor torque [N m]
    imu_quat_xyzw: np.ndarray    # base orientation, base -> world
    imu_gyro: np.ndarray         # angular velocity of the base in the base frame [rad/s]
    imu_accel: np.ndarray        # specific force in the base frame [m/s^2]


class ActuatorEnvelope:
    """The torque-speed envelope of the realistic actuators, per joint (any joint order, as given).

    A drive limited by its supply voltage and its current: with stall torque ``S``, no-load speed
    ``W`` and peak torque ``P`` (the current limit), at joint velocity ``w`` the applied torque is
    clipped to ``[lo, hi]``::

        hi(w) =  clip(S * (1 - w / W), 0, P)     # torque along +w: S at rest, 0 at w = W, linear
        lo(w) = -clip(S * (1 + w / W), 0, P)     # the mirror image for negative torques

    Driving the joint in its direction of motion (motoring) the torque falls linearly from ``S`` at
    rest to zero at the no-load speed (and stays zero beyond it); braking (torque against the motion)
    the back EMF helps the supply, the voltage line rises to ``S (1 + |w| / W)``, and the current
    limit ``P`` caps it: with ``S = P`` (our robot YAMLs) a joint can brake with its full peak torque
    at any speed. ``S`` and ``W`` are the robot YAML's ``leg_type.actuator.stall_torque`` /
    ``no_load_speed``, ``P`` its ``effort``."""

    def __init__(self, stall, no_load_speed, peak):
        self.stall = np.asarray(stall, dtype=float).copy()
        self.no_load_speed = np.asarray(no_load_speed, dtype=float).copy()
        self.peak = np.asarray(peak, dtype=float).copy()
        if not (self.stall.shape == self.no_load_speed.shape == self.peak.shape and np.all(self.stall > 0)
                and np.all(self.no_load_speed > 0) and np.all(self.peak > 0)):
            raise ValueError("actuator envelope: stall torque, no-load speed and peak torque must be positive, "
                             "one per joint")
        self._slope = self.stall / self.no_load_speed

    def limits(self, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(lo, hi)`` [N m] at joint velocities ``w`` [rad/s]."""
        # ufuncs with out= (np.clip costs several times more on arrays this small: every physics step)
        sw = self._slope * w
        hi = self.stall - sw
        np.minimum(np.maximum(hi, 0.0, out=hi), self.peak, out=hi)
        lo = self.stall + sw
        np.negative(np.minimum(np.maximum(lo, 0.0, out=lo), self.peak, out=lo), out=lo)
        return lo, hi

    def clip(self, tau: np.ndarray, w: np.ndarray) -> np.ndarray:
        """``tau`` clipped to the envelope at ``w`` (a new array)."""
        lo, hi = self.limits(w)
        return np.minimum(np.maximum(tau, lo, out=lo), hi, out=hi)


class MujocoSim:
    """The robot in MuJoCo at 1 kHz with a zero-order-held joint torque command.

    ``actuators``: ``"ideal"`` | ``"realistic"``; ``sensor_delay_steps``: physics steps by which
    :meth:`sensors` lags (see the module docstring)."""

    def __init__(self, robot=None, timestep: float = TIMESTEP,
                 noise: SensorNoise | None = None, actuators: str = "ideal", sensor_delay_steps: int = 0,
                 terrain=None):
        if not hasattr(robot, "leg_joints"):   # a config or its name; else a RobotModel or the bridge's SimRobot
            from legged_wbc.model import RobotModel

            robot = RobotModel(robot)
        self.robot = robot
        if actuators not in ACTUATOR_MODELS:
            raise ValueError(f"actuators: must be one of {list(ACTUATOR_MODELS)}, got {actuators!r}")
        if int(sensor_delay_steps) != sensor_delay_steps or sensor_delay_steps < 0:
            raise ValueError(f"sensor delay must be an integer >= 0 physics steps, got {sensor_delay_steps!r}")
        self.actuators = actuators
        self.terrain = terrain or Terrain()                  # the ground (legged_wbc.terrain)
        self.m = build_model(self.robot.cfg, timestep, terrain=self.terrain, actuators=actuators)
        self.d = mujoco.MjData(self.m)
        self.conv = StateConverter(self.robot.joint_names, hinge_joint_names(self.m), actuator_joint_names(self.m))
        conv, m = self.conv, self.m
        # per actuator (MuJoCo's actuator order): its joint's velocity address and effort limit
        act_joint = m.actuator_trnid[:, 0]
        self._act_dof = m.jnt_dofadr[act_joint].copy()
        self._act_effort = np.where(m.jnt_actfrclimited[act_joint], m.jnt_actfrcrange[act_joint, 1], np.inf)
        self.envelope = None
        if actuators == "realistic":
            rm = self.robot                              # per joint, Pinocchio order; then the actuators'
            per_joint = [np.asarray(x, dtype=float)[conv.pin_to_act]
                         for x in (rm.stall_torque, rm.no_load_speed, rm.effort)]
            self.envelope = ActuatorEnvelope(*per_joint)     # actuator order
        self._saturated = np.zeros(m.nu, dtype=bool)         # clipped since take_saturation(), actuator order
        self._init_limits()
        # ideal actuators: flag the clamped joints at each step (off where nobody takes the flags, the
        # bridge: its bags derive them from the commands; the envelope's clipping flags it anyway)
        self.track_saturation = True
        self.sensor_delay_steps = int(sensor_delay_steps)
        self._history: deque = deque(maxlen=self.sensor_delay_steps + 1)
        self._plain = self.envelope is None and self.sensor_delay_steps == 0
        self.dt = self.m.opt.timestep
        self.noise = noise or SensorNoise()
        self._rng = np.random.default_rng(self.noise.seed)
        self._init_outputs()
        self.foot_geoms = [mujoco.mj_name2id(self.m, mujoco.mjtObj.mjOBJ_GEOM, f"{f}_sphere") for f in self.robot.cfg.foot_links]
        if min(self.foot_geoms) < 0:
            raise RuntimeError("foot sphere geoms missing from the MuJoCo model")
        self.terrain_geoms = [i for i in range(self.m.ngeom)
                              if is_terrain_geom(mujoco.mj_id2name(self.m, mujoco.mjtObj.mjOBJ_GEOM, i))]
        self._terrain_set = set(self.terrain_geoms)
        self._foot_geom_set = set(self.foot_geoms)
        self._leg_of_foot = {g: k for k, g in enumerate(self.foot_geoms)}
        self.tau = np.zeros(self.robot.n)
        self.disturbance = np.zeros(self.robot.n)  # extra joint torque [N m], Pinocchio order
        self.base_body = mujoco.mj_name2id(self.m, mujoco.mjtObj.mjOBJ_BODY, self.robot.cfg.base_link)
        self._nominal = {"friction": self.m.geom_friction[self.terrain_geoms + self.foot_geoms, 0].copy(),
                         "mass": float(self.m.body_mass[self.base_body]),
                         "inertia": self.m.body_inertia[self.base_body].copy()}
        self.physics = {"friction": None, "payload_kg": 0.0, "push": None}
        self._push = None

    def _init_limits(self) -> None:
        """What :meth:`set_torque` clamps to: the effort limits [N m] in Pinocchio order (MuJoCo's own,
        inf where a joint has none), with its preallocated scratch."""
        self.effort_limit = self._act_effort[self.conv.act_to_pin]
        self._tau_lo = -self.effort_limit
        self._over = np.zeros(self.robot.n, dtype=bool)      # joints beyond the limit (scratch)
        self._held_clamped = None     # actuator order: the joints the held torque was clamped at (None: none)
        self.commands_clamped = 0     # set_torque calls that clamped a joint since the construction

    def _init_outputs(self) -> None:
        """Index arrays of :meth:`sensors`: one gather each (the IMU's
        quaternion wxyz -> xyzw, gyro and accelerometer from ``sensordata``; the joints in Pinocchio
        order straight from ``qpos`` / ``qvel``)."""
        m = self.m
        self._sensor = {n: (int(m.sensor_adr[i]), int(m.sensor_dim[i])) for i, n in
                        ((i, mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_SENSOR, i)) for i in range(m.nsensor))}
        (qa, _), (ga, gn), (aa, an) = (self._sensor[k] for k in ("imu_quat", "imu_gyro", "imu_accel"))
        self._imu_index = np.array([qa + 1, qa + 2, qa + 3, qa, *range(ga, ga + gn), *range(aa, aa + an)])
        self._imu_split = (4, 4 + gn)
        self._qj_index = 7 + self.conv.mj_to_pin
        self._vj_index = 6 + self.conv.mj_to_pin

    # ------------------------------------------------------------------ state
    @property
    def time(self) -> float:
        return float(self.d.time)

    def reset(self, q: np.ndarray, v: np.ndarray | None = None) -> None:
        mujoco.mj_resetData(self.m, self.d)
        self.d.qpos[:] = self.conv.qpos_from_pin(q)
        self.d.qvel[:] = 0.0 if v is None else self.conv.qvel_from_pin(q, v)
        self.tau[:] = 0.0
        self._held_clamped = None
        self.disturbance[:] = 0.0
        self._saturated[:] = False
        self._history.clear()
        mujoco.mj_forward(self.m, self.d)

    def set_torque(self, tau: np.ndarray) -> bool:
        """Joint torque command [N m], Pinocchio joint order; held until the next call. A torque beyond
        a joint's effort limit (:attr:`effort_limit`, the URDF's ``effort``) is clamped to it here, the one
        place the bridge and the headless loop both go through, before it reaches MuJoCo (which clamps the
        actuator force to the same value: the physics is the same to the bit); while the torque is held
        the joint counts as saturated (:meth:`take_saturation`). Returns True if a joint was clamped
        (:attr:`commands_clamped` counts those calls)."""
        held, over = self.tau, self._over
        if tau.shape != (self.robot.n,) or not np.isfinite(tau, out=over).all():
            raise ValueError(f"torque command must be {self.robot.n} finite values")
        np.minimum(np.maximum(tau, self._tau_lo, out=held), self.effort_limit, out=held)
        np.not_equal(held, tau, out=over)
        if not over.any():
            self._held_clamped = None
            return False
        self._held_clamped = over[self.conv.pin_to_act]
        self.commands_clamped += 1
        return True

    def set_disturbance(self, tau_dist: np.ndarray) -> None:
        self.disturbance[:] = tau_dist

    def set_foot_force(self, leg: int, force_world: np.ndarray | None) -> None:
        """Extra force [N] on leg ``leg``'s foot link (world frame, at its centre of mass), e.g. to
        make a support foot slip; ``None`` removes it. Evaluation scenarios only."""
        body = self.m.geom_bodyid[self.foot_geoms[leg]]
        self.d.xfrc_applied[body, :3] = 0.0 if force_world is None else force_world

    def set_physics(self, friction: float | None = None, payload_kg: float = 0.0, push=None) -> None:
        """Physical variations of the world (evaluation scenarios; the controller's model does not
        know them), each set absolutely (calling again with the same values changes nothing):

        ``friction``: foot-ground sliding friction, set on the terrain and the foot spheres (MuJoCo
        combines a contact's friction as the max of its geoms'); None: the robot config's.
        ``payload_kg``: mass added to the body (negative: lighter), the body's inertia scaled by
        the same factor (a payload spread like the body). ``push``: ``(force_world[3], t_start,
        t_end)``: a force [N] on the body's centre of mass while ``t_start <= t < t_end`` (sim
        time of each physics step); None: no push. Derived model constants are recomputed
        (``mj_setConst``) and the current state re-evaluated (``mj_forward``)."""
        m, nom = self.m, self._nominal
        geoms = self.terrain_geoms + self.foot_geoms
        mu = nom["friction"] if friction is None else np.full(len(geoms), float(friction))
        mass = nom["mass"] + float(payload_kg)
        if float(payload_kg) != 0.0 and not nom["mass"] > 0:
            raise ValueError(f"payload {payload_kg} kg: the base body has no mass of its own (its URDF link has no "
                             "<inertial>); a payload scales the body's inertia and needs one")
        if float(payload_kg) != 0.0 and not mass > 0:
            raise ValueError(f"payload {payload_kg} kg leaves a body mass of {mass} kg")
        changed = not np.array_equal(m.geom_friction[geoms, 0], mu) or float(m.body_mass[self.base_body]) != mass
        # the nominal world is left untouched (bit-identical to a simulation without this call)
        m.geom_friction[geoms, 0] = mu
        if float(m.body_mass[self.base_body]) != mass:
            m.body_mass[self.base_body] = mass
            m.body_inertia[self.base_body] = nom["inertia"] * (mass / nom["mass"])
            mujoco.mj_setConst(m, mujoco.MjData(m))   # scratch data: mj_setConst moves it to qpos0
        self._push = None
        if push is not None:
            f, t0, t1 = push
            self._push = (np.asarray(f, dtype=float).reshape(3).copy(), float(t0), float(t1))
        self.physics = {"friction": friction, "payload_kg": float(payload_kg), "push": push}
        self.d.xfrc_applied[self.base_body, :3] = 0.0
        if changed:
            mujoco.mj_forward(m, self.d)

    def step(self, n: int = 1) -> None:
        """``n`` physics steps with the held torque and disturbance."""
        self.d.ctrl[:] = self.conv.ctrl_from_tau(self.tau)
        self.d.qfrc_applied[6:] = self.disturbance[self.conv.pin_to_mj]
        if not self._plain:
            self._step_modelled(n)
            return
        # ideal actuators, no sensor delay: the torque was clamped to the effort limits (set_torque)
        if self.track_saturation and self._held_clamped is not None:
            self._saturated |= self._held_clamped
        if self._push is None:
            for _ in range(n):
                mujoco.mj_step(self.m, self.d)
            return
        f, t0, t1 = self._push
        xfrc = self.d.xfrc_applied[self.base_body]
        for _ in range(n):
            xfrc[:3] = f if t0 <= self.d.time < t1 else 0.0
            mujoco.mj_step(self.m, self.d)

    def _step_modelled(self, n: int) -> None:
        """:meth:`step` with the actuator envelope and / or the sensor history, step by step."""
        m, d, env, hist = self.m, self.d, self.envelope, self._history
        cmd = d.ctrl.copy()
        push = self._push
        if self._held_clamped is not None:             # clamped to the effort limit (set_torque)
            self._saturated |= self._held_clamped
        if self.sensor_delay_steps and not hist:
            hist.append(self._snapshot())           # the state after 0 steps
        for _ in range(n):
            if env is not None:                     # the envelope at this step's joint velocity
                applied = env.clip(cmd, d.qvel[self._act_dof])
                self._saturated |= applied != cmd
                d.ctrl[:] = applied
            if push is not None:
                f, t0, t1 = push
                d.xfrc_applied[self.base_body, :3] = f if t0 <= d.time < t1 else 0.0
            mujoco.mj_step(m, d)
            if self.sensor_delay_steps:
                hist.append(self._snapshot())

    def take_saturation(self) -> np.ndarray:
        """Per joint (Pinocchio order): whether the applied torque was clipped by the actuator's
        limit (realistic: the envelope; ideal: the effort limit) at some physics step since the last
        call (or the reset); the flags are cleared."""
        out = self._saturated[self.conv.act_to_pin]
        self._saturated[:] = False
        return out

    def _snapshot(self) -> tuple:
        d = self.d
        return d.qpos[7:].copy(), d.qvel[6:].copy(), d.sensordata.copy(), d.actuator_force.copy(), float(d.time)

    # ------------------------------------------------------------------ outputs
    def sensors(self) -> SensorFrame:
        """The sensors now (with ``sensor_delay_steps``: as measured that many steps ago)."""
        d, conv = self.d, self.conv
        if self._history:
            qpos_j, qvel_j, sensordata, actuator_force, t = self._history[0]
            qj, dqj = qpos_j[conv.mj_to_pin], qvel_j[conv.mj_to_pin]
        else:
            sensordata, actuator_force, t = d.sensordata, d.actuator_force, float(d.time)
            qj, dqj = d.qpos[self._qj_index], d.qvel[self._vj_index]   # joint_positions(), joint_velocities()
        imu = sensordata[self._imu_index]       # a new array: quaternion xyzw, gyro, accelerometer
        i, j = self._imu_split
        quat, gyro, acc = imu[:i], imu[i:j], imu[j:]
        if self.noise.enabled:
            dqj += self._rng.normal(0.0, self.noise.joint_velocity, dqj.shape) if self.noise.joint_velocity else 0.0
            gyro += self._rng.normal(0.0, self.noise.gyro, 3) if self.noise.gyro else 0.0
            acc += self._rng.normal(0.0, self.noise.accel, 3) if self.noise.accel else 0.0
        quat /= math.sqrt(quat.dot(quat))       # / np.linalg.norm(quat): the same sqrt of the same dot
        return SensorFrame(t=t, joint_pos=qj, joint_vel=dqj, joint_effort=actuator_force[conv.act_to_pin],
                           imu_quat_xyzw=quat, imu_gyro=gyro, imu_accel=acc)

    def joint_positions(self) -> np.ndarray:
        """Joint positions [rad], Pinocchio joint order (noise-free)."""
        return self.d.qpos[7:][self.conv.mj_to_pin]

    def joint_velocities(self) -> np.ndarray:
        """Joint velocities [rad/s], Pinocchio joint order (noise-free)."""
        return self.d.qvel[6:][self.conv.mj_to_pin]

    def base_velocity_world(self) -> np.ndarray:
        """True base linear velocity in the world frame [m/s] (evaluation only)."""
        return self.d.qvel[:3].copy()

    def ground_truth(self) -> tuple[np.ndarray, np.ndarray]:
        """True ``(q, v)`` in Pinocchio conventions (evaluation only)."""
        return self.conv.q_from_mj(self.d.qpos), self.conv.v_from_mj(self.d.qpos, self.d.qvel)

    def base_ground_truth(self) -> tuple[np.ndarray, np.ndarray]:
        """``(q[:7], v[:6])`` of :meth:`ground_truth`, the same numbers (``StateConverter.base_from_mj``)."""
        return self.conv.base_from_mj(self.d.qpos, self.d.qvel)

    def _floor_contacts(self) -> list[int]:
        """Geoms touching the ground (any terrain geom; one entry per contact)."""
        n = self.d.ncon
        if n == 0:
            return []
        ground = self._terrain_set
        return [b if a in ground else a for a, b in self.d.contact.geom[:n].tolist() if a in ground or b in ground]

    def foot_contacts(self) -> np.ndarray:
        """True foot-floor contact per leg (bool, evaluation only)."""
        return np.array(self._feet_touching(), dtype=bool)

    def foot_contact_values(self) -> np.ndarray:
        """:meth:`foot_contacts` as floats (1.0: in contact, 0.0: not), as ``/ground_truth/contacts`` carries them."""
        return np.array(self._feet_touching())

    def _feet_touching(self) -> list[float]:
        """Per leg 1.0 if its foot touches the ground (any terrain geom), else 0.0."""
        out = [0.0] * len(self.foot_geoms)
        n = self.d.ncon
        if n:
            ground, leg_of = self._terrain_set, self._leg_of_foot
            for a, b in self.d.contact.geom[:n].tolist():
                k = leg_of.get(b) if a in ground else leg_of.get(a) if b in ground else None
                if k is not None:
                    out[k] = 1.0
        return out

    def robot_contacts(self) -> int:
        """Contacts between two robot bodies now (links of neighbouring legs, a foot and the body;
        evaluation only)."""
        n = self.d.ncon
        if n == 0:
            return 0
        body = self.m.geom_bodyid
        g = self.d.contact.geom[:n]
        return int(np.count_nonzero((body[g[:, 0]] != 0) & (body[g[:, 1]] != 0)))

    def base_contact(self) -> bool:
        """Whether anything but a foot touches the floor (a fall)."""
        feet = self._foot_geom_set
        return any(g not in feet for g in self._floor_contacts())

    def warnings(self) -> dict:
        return {int(i): int(self.d.warning[i].number) for i in range(len(self.d.warning)) if self.d.warning[i].number}
