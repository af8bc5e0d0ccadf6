"""ament_python package ``legged_wbc`` (also installable with ``pip install -e .``)."""

from glob import glob

from setuptools import setup

PACKAGE = "legged_wbc"

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=["legged_wbc", "wbc_controller", "state_estimator", "mujoco_bridge"],
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", glob("launch/*")),
        (f"share/{PACKAGE}/config", glob("config/*")),
        (f"share/{PACKAGE}/urdf", glob("urdf/*")),
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
            "mujoco_bridge = mujoco_bridge.node:main",
            "state_estimator = state_estimator.node:main",
            "wbc_controller = wbc_controller.node:main",
            "bag_recorder = legged_wbc.recorder:main",
            "walking_container = legged_wbc.container:main",
        ],
    },
)
