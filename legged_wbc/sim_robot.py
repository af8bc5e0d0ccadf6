"""The robot as the simulation side takes it, without Pinocchio or numba.

The MuJoCo bridge (and :class:`~mujoco_bridge.sim.MujocoSim`) needs of the robot model only its joint
order (Pinocchio's, the URDF tree order every topic uses), the per-joint limits and drive data in that
order, the legs' joint indices and the initial configuration (the nominal stance at a height, found by
IK on the Pinocchio model). :class:`SimRobot` holds those; :func:`stance` gets the joint order and the
initial configuration from :class:`legged_wbc.model.RobotModel` itself, so they are the same to the bit:

* in this process when it has loaded ``legged_wbc.model`` already (a container that hosts the estimator
  or the controller, the headless loop, the tests);
* else in a short-lived child process (``python -m legged_wbc.sim_robot ROBOT HEIGHT``, ~0.5 s at
  start-up) that prints them as JSON (floats round-trip exactly), so that the process that runs the
  simulation for the whole walk never maps numba's LLVM, Pinocchio or SciPy (~200 MB).

No Pinocchio, numba or SciPy import here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Sequence

import numpy as np

from legged_wbc.description import joint_arrays, joint_permutation  # noqa: F401  (joint_permutation: re-exported)
from legged_wbc.robot import ConfigError, load_robot_config


class SimRobot:
    """The attributes of :class:`~legged_wbc.model.RobotModel` the simulation side reads: ``cfg``, ``n``,
    ``joint_names`` / ``joint_index`` (Pinocchio order), ``leg_joints``, ``n_legs`` and the per-joint
    arrays of :func:`joint_arrays`."""

    def __init__(self, cfg, joint_names: Sequence[str]):
        self.cfg = cfg
        self.joint_names = list(joint_names)
        self.n = len(self.joint_names)
        self.joint_index = {name: k for k, name in enumerate(self.joint_names)}
        self.leg_joints = [np.array([self.joint_index[j] for j in leg.joints]) for leg in cfg.leg_specs]
        self.n_legs = cfg.n_legs
        for k, v in joint_arrays(cfg, self.joint_names).items():
            setattr(self, k, v)


def _in_process(robot: str, height: float | None) -> dict:
    from legged_wbc.model import RobotModel

    rm = RobotModel(robot)
    return {"joint_names": list(rm.joint_names), "q0": rm.stance_configuration(height).tolist()}


def stance(robot: str, height: float | None = None, in_process: bool | None = None) -> dict:
    """``{"joint_names": [...], "q0": [...]}`` of robot config ``robot`` (name or path): Pinocchio's joint
    order and :meth:`RobotModel.stance_configuration(height) <legged_wbc.model.RobotModel.stance_configuration>`.
    ``in_process``: None = here if ``legged_wbc.model`` is loaded already, else in a child process (see the
    module docstring). A bad config is a :class:`~legged_wbc.robot.ConfigError` either way."""
    if in_process is None:
        in_process = "legged_wbc.model" in sys.modules
    if in_process:
        return _in_process(robot, height)
    r = subprocess.run([sys.executable, "-m", "legged_wbc.sim_robot", str(robot), "none" if height is None
                        else repr(float(height))], capture_output=True, text=True)
    if r.returncode == 2:
        raise ConfigError(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"robot {robot}: invalid")
    if r.returncode != 0:
        raise RuntimeError(f"the robot's stance (python -m legged_wbc.sim_robot {robot}) failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def sim_robot(robot: str, height: float | None = None) -> tuple[SimRobot, np.ndarray]:
    """``(SimRobot, q0)``: the simulation side's robot and its initial configuration (:func:`stance`)."""
    cfg = load_robot_config(robot)
    d = stance(robot, height)
    return SimRobot(cfg, d["joint_names"]), np.array(d["q0"], dtype=float)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    robot, height = argv[0], None if argv[1] == "none" else float(argv[1])
    try:
        print(json.dumps(_in_process(robot, height)))
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
