"""The console entry points of the ROS executables (``setup.py``): each imports its node module only
when called, so a SIGINT that arrives while that module is still importing (a launch shutting down
right after another node failed, SIGINT to every node still running) ends the process with rc 130
and no KeyboardInterrupt traceback, also while ``main`` makes its own imports (rclpy) before it
installs its handling; once that is in place, the node's own handling applies."""

from __future__ import annotations

from importlib import import_module


def _run(target: str) -> int:
    """Import ``module:function`` and call it; 130 if interrupted before the node's own SIGINT handling
    is in place (its module, or the imports ``main`` itself makes first, e.g. rclpy, still loading)."""
    module, func = target.split(":")
    try:
        return getattr(import_module(module), func)()
    except KeyboardInterrupt:
        return 130


def mujoco_bridge() -> int:
    return _run("mujoco_bridge.node:main")


def state_estimator() -> int:
    return _run("state_estimator.node:main")


def wbc_controller() -> int:
    return _run("wbc_controller.node:main")


def bag_recorder() -> int:
    return _run("legged_wbc.ros.recorder:main")


def walking_container() -> int:
    return _run("legged_wbc.ros.container:main")


def sim_container() -> int:
    return _run("legged_wbc.ros.container:main_sim")


def control_container() -> int:
    return _run("legged_wbc.ros.container:main_control")
