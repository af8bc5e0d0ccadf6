"""package.xml against the code: every module the package imports is declared with the rosdep key that
provides it (or named in package.xml as pip-only, no key existing), nothing declared goes unused, and
test-only imports are test dependencies.

The keys were checked against ros/rosdistro (``rosdep/python.yaml``, ``kilted/distribution.yaml``) at
commit 8468e88 (2026-08-22); rosdep's lists cannot be downloaded here at test time, so this test checks
the package against that table (update both when an import changes).
"""

from __future__ import annotations

import ast
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OWN = {"legged_wbc", "mujoco_bridge", "wbc_controller", "state_estimator"}

# imported top-level module -> rosdep key (None: no key exists; named in package.xml's pip-only comment)
RUNTIME_KEYS = {
    "rclpy": "rclpy", "ament_index_python": "ament_index_python", "builtin_interfaces": "builtin_interfaces",
    "rcl_interfaces": "rcl_interfaces", "rosgraph_msgs": "rosgraph_msgs", "std_msgs": "std_msgs",
    "sensor_msgs": "sensor_msgs", "nav_msgs": "nav_msgs", "geometry_msgs": "geometry_msgs",
    "diagnostic_msgs": "diagnostic_msgs", "tf2_msgs": "tf2_msgs",
    "pinocchio": "pinocchio", "proxsuite": "proxsuite",
    "numpy": "python3-numpy", "scipy": "python3-scipy", "yaml": "python3-yaml", "numba": "python3-numba",
    "matplotlib": "python3-matplotlib", "PIL": "python3-pil", "imageio": "python3-imageio",
    "mujoco": "python3-mujoco-pip", "glfw": "python3-mujoco-pip",      # glfw: a dependency of the mujoco wheel
    "qpsolvers": "python3-qpsolvers-pip", "rosbags": "python3-rosbags-pip",
    "daqp": None, "osqp": None, "distributed": None, "mcap": None, "foxglove": None, "mkdocs": None,
    "ruamel": "python3-ruamel.yaml",                                    # bag repair: metadata.yaml as rosbag2 writes it
}
OPTIONAL = {"threadpoolctl"}                      # imported under try/except ImportError
EXTRA_RUNTIME = {"launch", "launch_ros"}          # the launch file's, not imported
PIP_ONLY = {"daqp": "daqp", "osqp": "osqp", "distributed": "distributed", "imageio": "imageio-ffmpeg", "mcap": "mcap",
            "foxglove": "foxglove-sdk", "mkdocs": "mkdocs"}
TEST_KEYS = {"pytest": "python3-pytest", "mcap_ros2": "mcap-ros2-support", "launch_xml": "launch_xml",
             "markdown": "python3-markdown"}


def imports_of(paths) -> set[str]:
    """Top-level modules imported (anywhere in the file, absolute imports) by the Python files under ``paths``."""
    out: set[str] = set()
    for base in paths:
        for f in sorted(Path(base).rglob("*.py")):
            for node in ast.walk(ast.parse(f.read_text(), str(f))):
                if isinstance(node, ast.Import):
                    out |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    out.add(node.module.split(".")[0])
    return {m for m in out if m not in sys.stdlib_module_names and m not in OWN and m != "__future__"}


def _deps(kind: str) -> list[str]:
    root = ET.parse(ROOT / "package.xml").getroot()
    return [e.text.strip() for e in root.findall(kind)]


def test_every_runtime_import_is_declared_and_every_declaration_used():
    imported = imports_of(ROOT / p for p in OWN)
    unknown = imported - set(RUNTIME_KEYS) - OPTIONAL
    assert not unknown, f"new import(s) {sorted(unknown)}: declare them in package.xml and in RUNTIME_KEYS"
    declared = _deps("exec_depend") + _deps("depend")
    assert len(declared) == len(set(declared)), "a key declared twice"
    need = {RUNTIME_KEYS[m] for m in imported if RUNTIME_KEYS.get(m)}
    assert set(declared) - EXTRA_RUNTIME == need, (sorted(set(declared) - EXTRA_RUNTIME - need),
                                                    sorted(need - set(declared)))
    # the launch dependencies are what the launch file uses
    assert "<node " in (ROOT / "launch" / "walking_sim.launch.xml").read_text()
    # keys that do not exist are not declared (mujoco-pip was: rosdistro has python3-mujoco-pip)
    assert not [k for k in declared if k.endswith("-pip") and not k.startswith("python3-")]


def test_pip_only_modules_are_named_in_package_xml_and_pinned():
    xml = (ROOT / "package.xml").read_text()
    comment = xml[xml.index("no rosdep key exists"):]
    req = {re.split(r"[=<>]", line)[0].strip().lower() for line in (ROOT / "requirements.txt").read_text().splitlines()
           if line.strip() and not line.startswith("#")}
    for module, pip_name in PIP_ONLY.items():
        assert re.search(rf"\b{re.escape(pip_name)}\b", comment), pip_name
        assert pip_name in req, pip_name
    for module in OPTIONAL:
        assert module in comment, module


def test_test_dependencies_are_separate():
    runtime = imports_of(ROOT / p for p in OWN)
    own = {f.stem for f in (ROOT / "test").glob("*.py")}                              # the suite's own modules
    tested = imports_of([ROOT / "test"]) - runtime - own - EXTRA_RUNTIME     # launch, launch_ros: runtime keys already
    assert tested <= set(TEST_KEYS), sorted(tested - set(TEST_KEYS))
    test_deps = _deps("test_depend")
    assert set(test_deps) == {TEST_KEYS[m] for m in tested}, test_deps
    assert not set(test_deps) & set(_deps("exec_depend")), "a runtime dependency repeated as a test dependency"
