"""MuJoCo model of a robot config: the same URDF Pinocchio loads, plus the scene.

``build_spec`` loads the URDF with ``mujoco.MjSpec`` and adds what a URDF cannot say: the free
joint of the base, the ground (the scenario's terrain, :mod:`legged_wbc.terrain`; friction from the robot config), torque motors on every joint, joint
armature (the same values Pinocchio uses), foot contact parameters, an IMU site with
orientation / gyro / accelerometer sensors, a light and a tracking camera. The foot spheres and
the base box collide with the ground and each other; the links of neighbouring legs (femur, tibia
and foot cylinders, foot sphere) with each other through explicit contact pairs
(:func:`add_leg_pairs`; ``MujocoSim.robot_contacts`` counts contacts between robot bodies). ``legged-wbc export-mjcf`` writes the result as MJCF for inspection.

``actuators``: ``"ideal"`` (default: the motors are perfect torque sources, the joints have no
friction) or ``"realistic"``: the joints also get the robot YAML's ``leg_type.actuator`` friction,
Coulomb as ``frictionloss`` [N m] and viscous as ``damping`` [N m s/rad] (MuJoCo integrates the
damping implicitly; ``frictionloss`` is a soft constraint of its solver, see docs/design.md,
*Actuator model*). The torque-speed envelope is not in the model: MuJoCo's ``forcerange`` is
constant, so :class:`mujoco_bridge.sim.MujocoSim` clips the torque at every physics step.
"""

from __future__ import annotations

from pathlib import Path

import mujoco
import numpy as np

from legged_wbc.leg_neighbours import neighbour_pairs
from legged_wbc.robot import RobotConfig, load_robot_config
from legged_wbc.terrain import add_terrain, is_terrain_geom

TIMESTEP = 0.001  # [s] physics step (1 kHz)
ACTUATOR_MODELS = ("ideal", "realistic")


def build_spec(cfg: RobotConfig | str | None = None, timestep: float = TIMESTEP, terrain=None,
               actuators: str = "ideal") -> mujoco.MjSpec:
    """The robot's spec; ``terrain`` (:class:`legged_wbc.terrain.Terrain`, None: flat) is its ground,
    ``actuators`` (``ideal`` | ``realistic``) its joints' friction."""
    if actuators not in ACTUATOR_MODELS:
        raise ValueError(f"actuators: must be one of {list(ACTUATOR_MODELS)}, got {actuators!r}")
    if cfg is None or isinstance(cfg, (str, Path)):
        cfg = load_robot_config(cfg)
    if getattr(cfg, "kind", "generated") == "urdf":
        return build_urdf_spec(cfg, timestep, terrain, actuators)
    spec = mujoco.MjSpec.from_file(str(cfg.urdf_path()))
    _scene(spec, cfg, timestep, terrain)
    lt = cfg.leg_type
    arm = dict(zip(lt.joint_suffixes, lt.armature))
    drive = lt.drive
    coulomb = dict(zip(lt.joint_suffixes, drive.coulomb_friction))
    viscous = dict(zip(lt.joint_suffixes, drive.viscous_friction))
    for leg in cfg.legs:
        for suffix, jname in zip(lt.joint_suffixes, leg.joint_names(lt)):
            j = spec.joint(jname)
            j.armature = arm[suffix]
            if actuators == "realistic":        # ideal: no joint friction (MuJoCo's defaults, 0)
                j.frictionloss = coulomb[suffix]
                j.damping = [viscous[suffix], 0.0, 0.0]   # linear coefficient (MuJoCo 4: polynomial)
            j.limited = mujoco.mjtLimited.mjLIMITED_FALSE  # limits are the controller's business
            spec.add_actuator(name=jname, target=jname, trntype=mujoco.mjtTrn.mjTRN_JOINT,
                              ctrllimited=mujoco.mjtLimited.mjLIMITED_FALSE, gainprm=[1.0] + [0.0] * 9)
    _geom_contacts(spec, cfg)
    add_leg_pairs(spec, cfg)
    return spec


def _scene(spec: mujoco.MjSpec, cfg, timestep: float, terrain) -> None:
    """What every robot's spec gets: options, the base's free joint, the ground, light, camera and
    the IMU site with its sensors (in the base frame, at ``cfg.imu_xyz``)."""
    spec.option.timestep = timestep
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    spec.option.cone = mujoco.mjtCone.mjCONE_PYRAMIDAL
    base = spec.body(cfg.base_link)
    base.add_freejoint(name="floating_base")
    # floor and scene
    world = spec.worldbody
    add_terrain(spec, terrain, cfg.friction)
    world.add_light(name="sun", pos=[0, 0, 4], dir=[0, 0, -1])
    k = _camera_scale(cfg)
    base.add_camera(name="track", mode=mujoco.mjtCamLight.mjCAMLIGHT_TRACKCOM,
                    pos=[0.0, -2.8 * k, 1.2 * k], xyaxes=[1, 0, 0, 0, 0.4, 0.92])
    site = base.add_site(name="imu", pos=list(cfg.imu_xyz), size=[0.01, 0.01, 0.01])
    spec.add_sensor(name="imu_quat", type=mujoco.mjtSensor.mjSENS_FRAMEQUAT,
                    objtype=mujoco.mjtObj.mjOBJ_SITE, objname=site.name)
    spec.add_sensor(name="imu_gyro", type=mujoco.mjtSensor.mjSENS_GYRO,
                    objtype=mujoco.mjtObj.mjOBJ_SITE, objname=site.name)
    spec.add_sensor(name="imu_accel", type=mujoco.mjtSensor.mjSENS_ACCELEROMETER,
                    objtype=mujoco.mjtObj.mjOBJ_SITE, objname=site.name)


def _camera_scale(cfg) -> float:
    """How far the tracking camera stands, relative to the generated robots' view (1: 2.8 m aside, 1.2 m
    up): a URDF robot's standing height over the hexapod's 0.42 m, at least 0.4 (a Go2: 0.8)."""
    if getattr(cfg, "kind", "generated") == "generated":
        return 1.0
    return max(0.4, float(cfg.stance_height) / 0.42)


def build_urdf_spec(cfg, timestep: float = TIMESTEP, terrain=None, actuators: str = "ideal") -> mujoco.MjSpec:
    """The spec of a robot described by its own URDF (:class:`legged_wbc.urdf_robot.UrdfRobotConfig`):
    its prepared URDF (the file Pinocchio loads: same masses, no inertia from geoms), the scene, a
    torque motor per leg joint (canonical order), the foot spheres ``<foot_link>_sphere`` at the
    found foot point, the collision geoms of the base and the links welded to it; every other geom
    does not collide. No leg-leg
    contact pairs."""
    spec = mujoco.MjSpec.from_file(str(cfg.urdf_path()))
    spec.compiler.inertiafromgeom = mujoco.mjtInertiaFromGeom.mjINERTIAFROMGEOM_FALSE
    spec.compiler.balanceinertia = False
    _scene(spec, cfg, timestep, terrain)
    table = cfg.joint_table()
    for k, jname in enumerate(table.names):
        j = spec.joint(jname)
        j.armature = float(table.armature[k])
        if actuators == "realistic":
            j.frictionloss = float(table.coulomb_friction[k])
            j.damping = [float(table.viscous_friction[k]), 0.0, 0.0]
        j.limited = mujoco.mjtLimited.mjLIMITED_FALSE
        spec.add_actuator(name=jname, target=jname, trntype=mujoco.mjtTrn.mjTRN_JOINT,
                          ctrllimited=mujoco.mjtLimited.mjLIMITED_FALSE, gainprm=[1.0] + [0.0] * 9)
    base = set(cfg.base_links)
    for g in spec.geoms:
        if is_terrain_geom(g.name):
            continue
        if g.parent.name in base:   # the body's shell meets the ground and the feet, not itself (2 & 1 = 0)
            g.contype, g.conaffinity = 2, 1
            g.rgba = [0.3, 0.45, 0.7, 1]
        else:
            g.contype, g.conaffinity = 0, 0
            g.rgba = [0.7, 0.5, 0.2, 1]
    for foot in cfg.foot_links:
        spec.body(foot).add_geom(name=f"{foot}_sphere", type=mujoco.mjtGeom.mjGEOM_SPHERE,
                                 size=[cfg.foot.radius, 0, 0], pos=[float(x) for x in cfg.foot.offset],
                                 contype=1, conaffinity=1, condim=3, friction=[cfg.friction, 0.005, 0.0001],
                                 rgba=[0.2, 0.2, 0.2, 1])
    return spec


def _geom_contacts(spec: mujoco.MjSpec, cfg: RobotConfig) -> None:
    """Foot spheres (named ``<foot>_sphere``, friction) and the base box collide; every other robot
    geom not (``contype`` 0), the leg cylinders named ``<link>_link`` for :func:`add_leg_pairs`."""
    foot_links = set(cfg.foot_links)
    for g in spec.geoms:
        if is_terrain_geom(g.name):
            continue
        body = g.parent
        if g.type == mujoco.mjtGeom.mjGEOM_SPHERE and body.name in foot_links:
            g.name = f"{body.name}_sphere"
            g.contype, g.conaffinity, g.condim = 1, 1, 3
            g.friction = [cfg.friction, 0.005, 0.0001]
            g.rgba = [0.2, 0.2, 0.2, 1]
        elif body.name == cfg.base_link and g.type == mujoco.mjtGeom.mjGEOM_BOX and g.contype != 0:
            g.contype, g.conaffinity = 1, 1
            g.rgba = [0.3, 0.45, 0.7, 1]
        else:
            g.contype, g.conaffinity = 0, 0
            g.rgba = [0.7, 0.5, 0.2, 1]
            if g.type == mujoco.mjtGeom.mjGEOM_CYLINDER and body.name != cfg.base_link:
                g.name = f"{body.name}_link"


LEG_LINK_SUFFIXES = ("femur", "tibia")      # with the foot link: the links of the leg-collision pairs


def leg_collision_geoms(cfg: RobotConfig, leg) -> list[str]:
    """The geoms of a leg that meet a neighbouring leg's (explicit contact pairs): the femur,
    tibia and foot cylinders and the foot sphere (the coxa, 8 cm next to the body, is left out)."""
    foot = leg.foot_link(cfg.leg_type)
    return [f"{leg.name}_{s}_link" for s in LEG_LINK_SUFFIXES] + [f"{foot}_link", f"{foot}_sphere"]


def add_leg_pairs(spec: mujoco.MjSpec, cfg: RobotConfig) -> None:
    """Contacts between neighbouring legs (consecutive around the body, as the controller's
    leg-collision barrier sees them): an explicit ``<pair>`` for every geom of
    :func:`leg_collision_geoms` of one leg with every one of the other's. MuJoCo checks explicit
    pairs whatever the geoms' ``contype`` / ``conaffinity`` (which keep the links out of every
    other contact); the foot spheres and the base box collide through those already."""
    legs = cfg.legs
    for a, b in neighbour_pairs([leg.mount_xyz[:2] for leg in legs]):
        for ga in leg_collision_geoms(cfg, legs[a]):
            for gb in leg_collision_geoms(cfg, legs[b]):
                spec.add_pair(name=f"{ga}__{gb}", geomname1=ga, geomname2=gb, condim=3,
                              friction=[0.5, 0.5, 0.005, 0.0001, 0.0001])


def build_model(cfg: RobotConfig | str | None = None, timestep: float = TIMESTEP, terrain=None,
                actuators: str = "ideal") -> mujoco.MjModel:
    return build_spec(cfg, timestep, terrain=terrain, actuators=actuators).compile()


def hinge_joint_names(m: mujoco.MjModel) -> list[str]:
    """Names of the 1-DoF joints in ``qpos[7:]`` order (the free joint must come first)."""
    if m.jnt_type[0] != mujoco.mjtJoint.mjJNT_FREE or m.jnt_qposadr[0] != 0:
        raise ValueError("MuJoCo model: the first joint must be the base free joint")
    names = []
    for j in range(1, m.njnt):
        if m.jnt_type[j] != mujoco.mjtJoint.mjJNT_HINGE:
            raise ValueError(f"MuJoCo joint {mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, j)}: only hinges supported")
        names.append(mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, j))
    order = np.argsort([m.jnt_qposadr[j] for j in range(1, m.njnt)])
    return [names[k] for k in order]


def actuator_joint_names(m: mujoco.MjModel) -> list[str]:
    return [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, int(m.actuator_trnid[a, 0])) for a in range(m.nu)]
