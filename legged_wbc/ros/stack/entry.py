"""The console entry points of the ROS executables (``setup.py``): each imports its node module only
when called, so a SIGINT that arrives while that module is still importing (a launch shutting down
right after another node failed, SIGINT to every node still running) ends the process with rc 130
and no KeyboardInterrupt traceback, also while ``main`` makes its own imports (rclpy) before it
installs its handling (SIGTERM then: rc 143); once that is in place, the node's own handling applies.

Exit status (:func:`legged_wbc.ros.tooling.lifetime.exit_status`): ``main``'s; a node that ``main`` ended cleanly
after a SIGINT / SIGTERM exits ``128 + signum`` (130 / 143), whatever handlers it installed: the
launcher counts that as clean only for a node it asked to stop, so a node stopped from outside fails
the launch."""

from __future__ import annotations

import signal
from importlib import import_module

from legged_wbc.ros.tooling.lifetime import StopSignals, exit_status


def _terminated(signum, frame):
    raise SystemExit(128 + signum)


def _stopped_while_importing(exc: ImportError) -> int | None:
    """130 / 143 if ``exc`` was a stop signal during an extension module's initialization (pybind11 turns
    the KeyboardInterrupt or our SystemExit raised there into ``ImportError: initialization failed``), else
    None: a real import error."""
    seen = exc.__cause__ or exc.__context__
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            return 130
        if isinstance(seen, SystemExit) and seen.code in (130, 143):
            return int(seen.code)
        seen = seen.__cause__ or seen.__context__
    return None


def _run(target: str) -> int:
    """Import ``module:function`` and call it; 130 / 143 if interrupted before the node's own handling is
    in place (its module, or the imports ``main`` itself makes first, e.g. rclpy, still loading), else
    ``main``'s status, ``128 + signum`` if it ended cleanly after a stop signal."""
    from legged_wbc.ros.io.executors import set_node_init
    from legged_wbc.ros.nodekit.params import init_node_process

    set_node_init(init_node_process)       # a command line rcl refuses: one line, exit 2
    module, func = target.split(":")
    stops = StopSignals()
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminated)
    try:
        rc = getattr(import_module(module), func)()
    except KeyboardInterrupt:
        return 130
    except ImportError as exc:
        rc = _stopped_while_importing(exc)
        if rc is None:
            raise
        return rc
    finally:
        first = stops.first()
        stops.close()
    return exit_status(rc, first)


def mujoco_bridge() -> int:
    return _run("mujoco_bridge.node:main")


def state_estimator() -> int:
    return _run("state_estimator.node:main")


def wbc_controller() -> int:
    return _run("legged_wbc.ros.stack.entry:wbc_controller_main")


def wbc_controller_main(argv: list[str] | None = None) -> int:
    """The ``wbc_controller`` executable: the node as :func:`wbc_controller.node.main` runs it, with its
    torque-command publisher handed over to the launch's bridge while it runs
    (:mod:`legged_wbc.ros.nodekit.launch_identity`)."""
    from legged_wbc.ros.io import spin_node
    from legged_wbc.ros.io.executors import set_node_init
    from legged_wbc.ros.nodekit.launch_identity import hand_over, withdraw
    from legged_wbc.ros.nodekit.params import init_node_process
    from wbc_controller.node import WbcNode

    written: list[str] = []

    def make():
        node = WbcNode()
        path = hand_over(node, node.pub_cmd)
        if path is not None:
            written.append(path)
        return node

    set_node_init(init_node_process)
    try:
        return spin_node(make, argv)
    finally:
        for path in written:
            withdraw(path)


def bag_recorder() -> int:
    return _run("legged_wbc.ros.stack.recorder:main")


def walking_container() -> int:
    return _run("legged_wbc.ros.stack.container:main")


def sim_container() -> int:
    return _run("legged_wbc.ros.stack.container:main_sim")


def control_container() -> int:
    return _run("legged_wbc.ros.stack.container:main_control")
