"""MuJoCo simulation of the robot, with the interface the bridge node and the headless loop share.

All vectors in and out are in Pinocchio's joint order and conventions (see
:mod:`legged_wbc.conventions`); the conversion happens here and nowhere else on the simulation
side. Sensors are what a real robot gives: joint positions / velocities / applied torques and an
IMU (orientation quaternion ``xyzw`` base->world, gyro in the IMU (= base) frame [rad/s],
accelerometer specific force in the base frame [m/s^2]). Ground truth (``q``, ``v``, foot contact)
is available separately for evaluation only.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

from legged_wbc.conventions import StateConverter, quat_wxyz_to_xyzw
from legged_wbc.model import RobotModel
from legged_wbc.mujoco_model import TIMESTEP, actuator_joint_names, build_model, hinge_joint_names
from legged_wbc.terrain import Terrain, is_terrain_geom


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


class MujocoSim:
    """The robot in MuJoCo at 1 kHz with a zero-order-held joint torque command."""

    def __init__(self, robot: RobotModel | str | None = None, timestep: float = TIMESTEP,
                 noise: SensorNoise | None = None, terrain=None):
        self.robot = robot if isinstance(robot, RobotModel) else RobotModel(robot)
        self.terrain = terrain or Terrain()                  # the ground (legged_wbc.terrain)
        self.m = build_model(self.robot.cfg, timestep, self.terrain)
        self.d = mujoco.MjData(self.m)
        self.conv = StateConverter(self.robot.joint_names, hinge_joint_names(self.m), actuator_joint_names(self.m))
        self.dt = self.m.opt.timestep
        self.noise = noise or SensorNoise()
        self._rng = np.random.default_rng(self.noise.seed)
        self._sensor = {n: (self.m.sensor_adr[i], self.m.sensor_dim[i]) for i, n in
                        ((i, mujoco.mj_id2name(self.m, mujoco.mjtObj.mjOBJ_SENSOR, i)) for i in range(self.m.nsensor))}
        self.foot_geoms = [mujoco.mj_name2id(self.m, mujoco.mjtObj.mjOBJ_GEOM, f"{f}_sphere") for f in self.robot.cfg.foot_links]
        if min(self.foot_geoms) < 0:
            raise RuntimeError("foot sphere geoms missing from the MuJoCo model")
        self.terrain_geoms = [i for i in range(self.m.ngeom)
                              if is_terrain_geom(mujoco.mj_id2name(self.m, mujoco.mjtObj.mjOBJ_GEOM, i))]
        self._terrain_set = set(self.terrain_geoms)
        self._foot_geom_set = set(self.foot_geoms)
        self.tau = np.zeros(self.robot.n)
        self.disturbance = np.zeros(self.robot.n)  # extra joint torque [N m], Pinocchio order
        self.base_body = mujoco.mj_name2id(self.m, mujoco.mjtObj.mjOBJ_BODY, self.robot.cfg.base_link)
        self._nominal = {"friction": self.m.geom_friction[self.terrain_geoms + self.foot_geoms, 0].copy(),
                         "mass": float(self.m.body_mass[self.base_body]),
                         "inertia": self.m.body_inertia[self.base_body].copy()}
        self.physics = {"friction": None, "payload_kg": 0.0, "push": None}
        self._push = None

    # ------------------------------------------------------------------ state
    @property
    def time(self) -> float:
        return float(self.d.time)

    def reset(self, q: np.ndarray, v: np.ndarray | None = None) -> None:
        mujoco.mj_resetData(self.m, self.d)
        self.d.qpos[:] = self.conv.qpos_from_pin(q)
        self.d.qvel[:] = 0.0 if v is None else self.conv.qvel_from_pin(q, v)
        self.tau[:] = 0.0
        self.disturbance[:] = 0.0
        mujoco.mj_forward(self.m, self.d)

    def set_torque(self, tau: np.ndarray) -> None:
        """Joint torque command [N m], Pinocchio joint order; held until the next call."""
        if tau.shape != (self.robot.n,) or not np.all(np.isfinite(tau)):
            raise ValueError(f"torque command must be {self.robot.n} finite values")
        self.tau[:] = tau

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
        if not mass > 0:
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
        self.d.ctrl[:] = self.conv.ctrl_from_tau(self.tau)
        self.d.qfrc_applied[6:] = self.disturbance[self.conv.pin_to_mj]
        if self._push is None:
            for _ in range(n):
                mujoco.mj_step(self.m, self.d)
            return
        f, t0, t1 = self._push
        xfrc = self.d.xfrc_applied[self.base_body]
        for _ in range(n):
            xfrc[:3] = f if t0 <= self.d.time < t1 else 0.0
            mujoco.mj_step(self.m, self.d)

    # ------------------------------------------------------------------ outputs
    def sensors(self) -> SensorFrame:
        d, conv = self.d, self.conv
        qj = self.joint_positions()
        dqj = self.joint_velocities()
        a, n = self._sensor["imu_quat"]
        quat = quat_wxyz_to_xyzw(d.sensordata[a:a + n])
        a, n = self._sensor["imu_gyro"]
        gyro = d.sensordata[a:a + n].copy()
        a, n = self._sensor["imu_accel"]
        acc = d.sensordata[a:a + n].copy()
        if self.noise.enabled:
            dqj += self._rng.normal(0.0, self.noise.joint_velocity, dqj.shape) if self.noise.joint_velocity else 0.0
            gyro += self._rng.normal(0.0, self.noise.gyro, 3) if self.noise.gyro else 0.0
            acc += self._rng.normal(0.0, self.noise.accel, 3) if self.noise.accel else 0.0
        effort = d.actuator_force[conv.act_to_pin]
        return SensorFrame(t=float(d.time), joint_pos=qj, joint_vel=dqj, joint_effort=effort,
                           imu_quat_xyzw=quat / np.linalg.norm(quat), imu_gyro=gyro, imu_accel=acc)

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

    def _floor_contacts(self) -> list[int]:
        """Geoms touching the ground (any terrain geom; one entry per contact)."""
        n = self.d.ncon
        if n == 0:
            return []
        ground = self._terrain_set
        return [b if a in ground else a for a, b in self.d.contact.geom[:n].tolist() if a in ground or b in ground]

    def foot_contacts(self) -> np.ndarray:
        """True foot-floor contact per leg (bool, evaluation only)."""
        touching = set(self._floor_contacts())
        return np.array([g in touching for g in self.foot_geoms])

    def base_contact(self) -> bool:
        """Whether anything but a foot touches the floor (a fall)."""
        feet = self._foot_geom_set
        return any(g not in feet for g in self._floor_contacts())

    def warnings(self) -> dict:
        return {int(i): int(self.d.warning[i].number) for i in range(len(self.d.warning)) if self.d.warning[i].number}
