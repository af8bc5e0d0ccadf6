"""Imports only look down: the core, the math packages and the headless loop never import a module
of a layer above them (anywhere in the file: module level or inside a function).

Layers, bottom up (docs/design.md, *Code layout*):

1. core: ``legged_wbc`` robot, parameters, conventions, the jit notice, gait, kinematics, leg neighbours, model,
   metrics (and the terrain metrics), the MuJoCo model, scenarios, terrain;
2. math: ``wbc_controller`` and ``state_estimator`` (but their ``node`` modules), ``mujoco_bridge``
   (but ``node``);
3. the headless loop: ``legged_wbc.closed_loop``;
4. applications: ``legged_wbc.tools``, ``legged_wbc.cli``, ``legged_wbc.ros`` and the nodes.

Layer 4 is not checked here (the applications may use each other); within a layer any import is
allowed."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("legged_wbc", "wbc_controller", "state_estimator", "mujoco_bridge")
CORE = {"legged_wbc", "legged_wbc.robot", "legged_wbc.params", "legged_wbc.conventions", "legged_wbc.jit",
        "legged_wbc.gait", "legged_wbc.kinematics", "legged_wbc.leg_neighbours", "legged_wbc.model", "legged_wbc.metrics",
        "legged_wbc.mujoco_model", "legged_wbc.scenario", "legged_wbc.terrain", "legged_wbc.terrain_metrics"}
LOOP = {"legged_wbc.closed_loop"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(mod: str) -> int:
    """1 core, 2 math, 3 loop, 4 applications."""
    if mod in CORE:
        return 1
    if mod in LOOP:
        return 3
    if mod.startswith(("legged_wbc.", "legged_wbc")) or mod.rsplit(".", 1)[-1] == "node":
        return 4
    return 2


MODULES = {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def project_imports(mod: str, path: Path) -> set[str]:
    """The project modules ``mod`` imports (``from pkg import name`` counts ``pkg.name`` when that
    is a module)."""
    out = set()
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.split(".")[: len(mod.split(".")) - node.level + (1 if is_pkg else 0)]
                src = ".".join(base + ([node.module] if node.module else []))
            else:
                src = node.module
            names = [src] + [f"{src}.{a.name}" for a in node.names]
        else:
            continue
        out |= {n for n in names if n in MODULES}
    return out


CHECKED = sorted(m for m in MODULES if layer(m) < 4)


def test_the_layers_are_what_they_say():
    assert {"wbc_controller.controller", "wbc_controller.blocks.cbf", "state_estimator.estimator",
            "legged_wbc.model", "legged_wbc.kinematics"} <= set(CHECKED)
    assert layer("legged_wbc.tools.bench_cycle") == layer("wbc_controller.node") == layer("legged_wbc.ros.io") == 4


@pytest.mark.parametrize("mod", CHECKED)
def test_no_import_runs_up_a_layer(mod):
    up = sorted(i for i in project_imports(mod, MODULES[mod]) if layer(i) > layer(mod))
    assert not up, f"{mod} (layer {layer(mod)}) imports {up} from a layer above"
