"""ament_python package ``legged_wbc`` (also installable with ``pip install -e .``)."""

from pathlib import Path

from setuptools import setup

PACKAGE = "legged_wbc"


def data_tree(src: str) -> list[tuple[str, list[str]]]:
    """``(share/legged_wbc/<dir>, [files])`` for every directory under ``src`` that holds files:
    ``data_files`` takes files only (a directory makes ``setup.py install``, i.e. colcon, fail)."""
    groups: dict[str, list[str]] = {}
    for f in sorted(Path(src).rglob("*")):
        if f.is_file() and "__pycache__" not in f.parts:
            groups.setdefault(f"share/{PACKAGE}/{f.parent.as_posix()}", []).append(f.as_posix())
    return list(groups.items())


setup(
    name=PACKAGE,
    version="0.1.0",
    packages=["legged_wbc", "legged_wbc.cli",
              "legged_wbc.ros", "legged_wbc.ros.io", "legged_wbc.ros.recording", "legged_wbc.ros.transport",
              "legged_wbc.ros.nodekit", "legged_wbc.ros.tooling", "legged_wbc.ros.stack",
              "legged_wbc.tools", "legged_wbc.tools.analysis", "legged_wbc.tools.experiments", "legged_wbc.tools.bench",
              "legged_wbc.tools.pictures", "legged_wbc.tools.site",
              "wbc_controller", "wbc_controller.blocks", "state_estimator", "mujoco_bridge"],
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        *data_tree("launch"),
        *data_tree("config"),
        *data_tree("urdf"),
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="legged_wbc developers",
    maintainer_email="dev@legged-wbc.invalid",
    description="Whole-body controller stack for multi-legged robots with relative-pitch CBFs",
    license="BSD-3-Clause",
    entry_points={
        "console_scripts": [
            "legged-wbc = legged_wbc.cli:main",
            "mujoco_bridge = legged_wbc.ros.stack.entry:mujoco_bridge",
            "state_estimator = legged_wbc.ros.stack.entry:state_estimator",
            "wbc_controller = legged_wbc.ros.stack.entry:wbc_controller",
            "bag_recorder = legged_wbc.ros.stack.entry:bag_recorder",
            "walking_container = legged_wbc.ros.stack.entry:walking_container",
            "sim_container = legged_wbc.ros.stack.entry:sim_container",
            "control_container = legged_wbc.ros.stack.entry:control_container",
            "example_controller = legged_wbc.ros.stack.example_controller:main",
        ],
    },
)
