"""Settings a robot brings with it: controller, estimator and scenario defaults scaled from its model.

The parameter files (``config/wbc_controller.yaml``, ``config/estimator.yaml``) and the shipped
scenarios were tuned on the generated hexapod (95 kg, a 0.42 m stand). A robot described by its own
URDF (:mod:`legged_wbc.urdf_robot`) is another size: a Go2 weighs 16 kg and stands 0.33 m high. What
depends on its size is scaled here from three numbers of its model, and applied beneath what a
scenario or a parameter file says (so anything here can be overridden):

* mass ``m`` [kg] (every link's), hip-to-foot leg length ``L`` [m] (standing), standing height ``h``
  [m] (base origin above the ground, the standing pose's; :class:`~legged_wbc.urdf_robot.UrdfRobotConfig`).

Controller (``wbc_controller`` parameters):

* ``stand_height = 0.9 h`` (the knees bent a little more than the model's standing pose: room for the
  body task to move the base up and down);
* ``lift_height = 0.2 L``, ``stumble_lift = 0.12 L`` (swing apex and the stumble reflex's extra lift);
* swing PD ``kp_swing = 25 m`` [N/m], ``kd_swing = 0.75 m`` [N s/m] (the same foot acceleration per
  metre of error on every robot: the foot's effective mass scales with the robot's);
* body velocity gain ``kd_pos = [100, 100, 60]`` [1/s] (a trot's two-foot support surges at the step
  frequency; the parameter file's 40 leaves a 0.06 m/s velocity error, 100 halves it);
* ``torque_limit_mode: realistic``: the URDF's efforts are the drives' (placeholders are replaced by the
  loader, which says so), so the QP's torque rows are the drives' limits, not the paper's +-10 kN m;
* ``leg_collision_barrier: false``: the barrier needs the generated robots' capsule links.

Estimator (touchdown detector, its torque scale): the external-torque thresholds and noise levels are
the hexapod's times ``s = m L / (m_hex L_hex)`` (the torque a leg carries scales with the weight on it
times its lever): ``touchdown.gamma_land``, ``touchdown.sigma_tau_init``, ``touchdown.sigma_tau_process``.

Scenario geometry (when a scenario written for another robot is run on this one, see
:func:`legged_wbc.scenario.load_scenario`): ``initial_height = 0.6 h`` (crouched, feet down),
``stand_up.height = 0.9 h``, ``fall.min_height = 0.45 h``.

A generated robot (the hexapod, the quadruped) has none: its parameter files and scenarios are its own.
"""

from __future__ import annotations

import functools

HEX_MASS = 95.2            # [kg] the generated hexapod, on which the parameter files were tuned
HEX_LEG = 0.42             # [m] its stand height, the torque lever of its legs
HEX_TOUCHDOWN = {"gamma_land": 1200.0, "sigma_tau_init": 50.0, "sigma_tau_process": 1.0}   # config/estimator.yaml


def _round(x: float, digits: int = 3) -> float:
    return float(round(x, digits))


def controller_defaults(cfg) -> dict:
    """``wbc_controller`` parameters scaled from a URDF robot's model (module docstring); ``{}`` for a
    generated robot."""
    if getattr(cfg, "kind", "generated") == "generated":
        return {}
    m, L, h = float(cfg.robot_mass), float(cfg.leg_length), float(cfg.stance_height)
    kp, kd = _round(25.0 * m, 1), _round(0.75 * m, 2)
    return {"stand_height": _round(0.9 * h), "lift_height": _round(0.2 * L), "stumble_lift": _round(0.12 * L),
            "kp_swing": [kp, kp, kp], "kd_swing": [kd, kd, kd], "kd_pos": [100.0, 100.0, 60.0],
            "torque_limit_mode": "realistic", "leg_collision_barrier": False}


def estimator_defaults(cfg) -> dict:
    """``state_estimator`` parameters (nested by their dotted names) scaled from a URDF robot's model;
    ``{}`` for a generated robot."""
    if getattr(cfg, "kind", "generated") == "generated":
        return {}
    s = float(cfg.robot_mass) * float(cfg.leg_length) / (HEX_MASS * HEX_LEG)
    return {"touchdown": {k: _round(v * s, 4) for k, v in HEX_TOUCHDOWN.items()}}


def scenario_geometry(cfg) -> dict:
    """Scenario values (dotted keys) that depend on the robot's size, for a scenario retargeted to this
    robot; ``{}`` for a generated robot."""
    if getattr(cfg, "kind", "generated") == "generated":
        return {}
    h = float(cfg.stance_height)
    return {"initial_height": _round(0.6 * h), "stand_up.height": _round(0.9 * h), "fall.min_height": _round(0.45 * h)}


@functools.lru_cache(maxsize=16)
def defaults_of(robot: str) -> tuple[dict, dict, dict]:
    """``(controller, estimator, scenario geometry)`` defaults of a robot by name or path (loaded once)."""
    from legged_wbc.robot import load_robot_config

    cfg = load_robot_config(robot)
    return controller_defaults(cfg), estimator_defaults(cfg), scenario_geometry(cfg)
