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
