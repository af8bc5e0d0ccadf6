"""The package installs the ROS 2 way: ``setup.py install`` into a prefix, as colcon does for an
ament_python package, gives the ament layout, and an installed node finds its files in ``share/``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_setup_py_install_gives_the_ament_layout(tmp_path):
    src = tmp_path / "src"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    for f in files:                                  # a clean copy: no build/ or egg-info in the checkout
        p = ROOT / f
        if p.is_file():
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            (src / f).write_bytes(p.read_bytes())
    prefix, record = tmp_path / "install", tmp_path / "record.txt"
    r = subprocess.run([sys.executable, "setup.py", "install", "--prefix", str(prefix),
                        "--single-version-externally-managed", "--record", str(record)],
                       cwd=src, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    share = prefix / "share" / "legged_wbc"
    assert (prefix / "share/ament_index/resource_index/packages/legged_wbc").is_file()
    for rel in ("package.xml", "launch/walking_sim.launch.xml", "config/wbc_controller.yaml",
                "config/scenarios/paper.yaml", "config/scenarios/nominal.yaml", "urdf/hexapod.urdf"):
        assert (share / rel).is_file(), rel
    for exe in ("mujoco_bridge", "state_estimator", "wbc_controller", "bag_recorder", "walking_container",
                "sim_container", "control_container", "legged-wbc"):
        p = prefix / "lib" / "legged_wbc" / exe
        assert p.is_file() and os.access(p, os.X_OK), exe
    site = next(prefix.glob("lib/python*/site-packages"))
    # an installed node, run from elsewhere, resolves its configuration from share/
    code = ("from legged_wbc.robot import share_path; from legged_wbc.scenario import load_scenario; "
            "print(share_path('config', 'scenarios', 'paper.yaml')); print(load_scenario('paper').name)")
    env = {k: v for k, v in os.environ.items() if k not in ("AMENT_PREFIX_PATH",)}
    env["PYTHONPATH"] = str(site)
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    path, name = r.stdout.split()
    assert Path(path) == share / "config/scenarios/paper.yaml" and name == "paper"
