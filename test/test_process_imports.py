"""Each process loads what it runs: the command line, the launcher, the simulation side and the
recorder process never import the heavy modules they do not use (numba and its LLVM, Pinocchio, SciPy:
~100 MB and ~1 s each a process). Checked on ``sys.modules`` of a fresh interpreter after start-up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("numba", "llvmlite", "pinocchio", "scipy")


def loaded_after(code: str, env: dict | None = None) -> set[str]:
    """The top-level packages of :data:`HEAVY` (and mujoco, rclpy) that ``code`` left loaded in a fresh interpreter."""
    probe = (code + "\nimport json, sys\nprint('\\nLOADED ' + json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env=env or dict(os.environ))
    assert r.returncode == 0, r.stderr[-3000:]
    line = [x for x in r.stdout.splitlines() if x.startswith("LOADED ")][-1]
    return set(json.loads(line[len("LOADED "):]))


def test_cli_parser_loads_no_command():
    """``legged-wbc --help``: the parser of every command, none of their modules."""
    loaded = loaded_after("from legged_wbc.cli import build_parser\nbuild_parser().format_help()")
    assert not loaded & {*HEAVY, "mujoco", "rclpy", "matplotlib"}, loaded


def test_bench_backends_named_once():
    from legged_wbc.cli.bench import BENCH_BACKENDS
    from legged_wbc.tools.bench.bench_cycle import BENCH_BACKENDS as used

    assert BENCH_BACKENDS == used


def test_launcher_loads_no_node(tmp_path):
    """``legged-wbc launch`` itself (argument checks, the plan, the parameter check): no node's modules."""
    loaded = loaded_after(f"from legged_wbc.cli import main\n"
                          f"assert main(['launch', 'walking_sim', 'layout:=split', 'mode:=realtime', "
                          f"'scenario:=paper', 'record:={tmp_path / 'bag'}', '--dry-run']) == 0")
    assert not loaded & {*HEAVY, "mujoco", "rclpy"}, loaded


def test_sim_part_loads_no_numba_pinocchio_scipy():
    """The simulation side (the bridge's and the recorder's modules, the bridge's robot and simulation on a
    scenario without a disturbance): MuJoCo and rclpy, no numba, Pinocchio or SciPy."""
    loaded = loaded_after("import mujoco_bridge.node, legged_wbc.ros.stack.container, legged_wbc.ros.stack.recorder\n"
                          "import legged_wbc.ros.recording.bag_process, legged_wbc.ros.recording.bag_writer\n"
                          "from mujoco_bridge.config import BridgeConfig\n"
                          "from mujoco_bridge.scenario_setup import bridge_simulation\n"
                          "for robot in ('hexapod', 'quadruped'):\n"
                          "    robot, scenario, sim, q0 = bridge_simulation(BridgeConfig(robot=robot))\n"
                          "    sim.step(2)\n")
    assert "mujoco" in loaded and not loaded & set(HEAVY), loaded


def test_sim_robot_is_the_model_to_the_bit():
    """The bridge's robot (:class:`legged_wbc.sim_robot.SimRobot`, its stance from a child process) holds what
    :class:`legged_wbc.model.RobotModel` holds, bit for bit."""
    import numpy as np

    from legged_wbc.model import RobotModel
    from legged_wbc.sim_robot import SimRobot, stance

    for name, height in (("hexapod", None), ("quadruped", 0.4)):
        rm = RobotModel(name)
        child = stance(name, height, in_process=False)
        assert child == stance(name, height, in_process=True)
        q0 = np.array(child["q0"])
        assert q0.tobytes() == rm.stance_configuration(height).tobytes()
        sr = SimRobot(rm.cfg, child["joint_names"])
        assert sr.joint_names == rm.joint_names and sr.n == rm.n and sr.n_legs == rm.n_legs
        for k in ("armature", "lower", "upper", "effort", "velocity_limit", "stall_torque", "no_load_speed"):
            assert getattr(sr, k).tobytes() == getattr(rm, k).tobytes(), k
        assert all(np.array_equal(a, b) for a, b in zip(sr.leg_joints, rm.leg_joints))


def test_sim_robot_bad_config_is_one_line(tmp_path):
    import pytest

    from legged_wbc.robot import ConfigError
    from legged_wbc.sim_robot import stance

    with pytest.raises(ConfigError):
        stance(str(tmp_path / "missing.yaml"), in_process=False)


def test_recorder_process_maps_only_what_writing_needs(tmp_path):
    """The recorder process (spawned by the container's sink) writes the bag with rosbags: no rclpy, numba,
    Pinocchio or SciPy in its address space (what it maps, after it opened the bag and wrote a message)."""
    code = ("import sys, time\n"
            "from legged_wbc.ros.recording.bag_process import ShmBagSink\n"
            f"sink = ShmBagSink({str(tmp_path / 'bag')!r}, 'mcap', '', ring_bytes=1 << 20)\n"
            "sink.add_topic('/x', 'std_msgs/msg/Float64MultiArray')\n"
            "sink.write('/x', 0, bytes(28))\n"
            "sink.flush()\n"
            "time.sleep(0.5)\n"
            "maps = open(f'/proc/{sink.proc.pid}/maps').read()\n"
            "sink.close()\n"
            "bad = sorted({w for w in ('/llvmlite/', '/pinocchio/', '/site-packages/scipy/', '/rclpy/', 'librcl.so',\n"
            "                           '/mujoco/') if w in maps})\n"
            "print('MAPPED', bad)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "MAPPED []" in r.stdout, r.stdout + r.stderr[-2000:]
