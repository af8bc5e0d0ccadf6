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
        "legged_wbc.mujoco_model", "legged_wbc.scenario", "legged_wbc.terrain", "legged_wbc.terrain_metrics",
        "legged_wbc.description", "legged_wbc.urdf_robot", "legged_wbc.robot_defaults", "legged_wbc.sim_robot"}
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
    assert layer("legged_wbc.tools.bench.bench_cycle") == layer("wbc_controller.node") == layer("legged_wbc.ros.io") == 4


@pytest.mark.parametrize("mod", CHECKED)
def test_no_import_runs_up_a_layer(mod):
    up = sorted(i for i in project_imports(mod, MODULES[mod]) if layer(i) > layer(mod))
    assert not up, f"{mod} (layer {layer(mod)}) imports {up} from a layer above"


# ----------------------------------------------------------------------------- rooms of ros/ and tools/
ROOMS_MAY_IMPORT = {      # room -> the rooms of ros/ and tools/ it may import (the package docstrings)
    "legged_wbc.ros.io": set(),
    "legged_wbc.ros.recording": {"legged_wbc.ros.io"},
    "legged_wbc.ros.transport": {"legged_wbc.ros.io", "legged_wbc.ros.recording"},
    "legged_wbc.ros.nodekit": {"legged_wbc.ros.io", "legged_wbc.ros.transport"},
    "legged_wbc.ros.tooling": {"legged_wbc.ros.io"},
    "legged_wbc.ros.stack": {"legged_wbc.ros.io", "legged_wbc.ros.recording", "legged_wbc.ros.transport",
                             "legged_wbc.ros.nodekit", "legged_wbc.ros.tooling"},
    "legged_wbc.tools.analysis": {"legged_wbc.ros.recording"},
    "legged_wbc.tools.experiments": {"legged_wbc.tools.analysis", "legged_wbc.ros.io", "legged_wbc.ros.nodekit",
                                     "legged_wbc.ros.tooling"},
    "legged_wbc.tools.bench": {"legged_wbc.tools.analysis", "legged_wbc.ros.tooling", "legged_wbc.ros.stack"},
    "legged_wbc.tools.pictures": {"legged_wbc.tools.analysis", "legged_wbc.tools.experiments"},
    "legged_wbc.tools.site": set(),
}


def room(mod: str) -> str | None:
    """The room (subpackage of ``legged_wbc.ros`` / ``legged_wbc.tools``) a module is in, else None."""
    parts = mod.split(".")
    if len(parts) >= 3 and parts[0] == "legged_wbc" and parts[1] in ("ros", "tools"):
        r = ".".join(parts[:3])
        return r if r in ROOMS_MAY_IMPORT else None
    return None


def test_ros_and_tools_hold_only_rooms():
    """No module lies flat in ``legged_wbc/ros`` or ``legged_wbc/tools``: each is in a room the rules name."""
    for pkg in ("ros", "tools"):
        flat = [p.name for p in (ROOT / "legged_wbc" / pkg).glob("*.py") if p.name != "__init__.py"]
        assert not flat, f"legged_wbc/{pkg}: modules outside a room: {flat}"
        rooms = {f"legged_wbc.{pkg}.{p.name}" for p in (ROOT / "legged_wbc" / pkg).iterdir()
                 if (p / "__init__.py").exists()}
        assert rooms == {r for r in ROOMS_MAY_IMPORT if r.startswith(f"legged_wbc.{pkg}.")}


@pytest.mark.parametrize("mod", sorted(m for m in MODULES if room(m)))
def test_rooms_import_only_the_rooms_they_may(mod):
    mine = room(mod)
    bad = sorted(i for i in project_imports(mod, MODULES[mod])
                 if room(i) not in (None, mine) and room(i) not in ROOMS_MAY_IMPORT[mine])
    assert not bad, f"{mod} (room {mine}) imports {bad}"


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (or a module importing itself):
    Tarjan's algorithm, iterative."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1 or v in graph.get(v, ()):
                    out.append(sorted(comp))
    return out


def test_the_cycle_finder_finds_cycles():
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"a"}}) == [["a"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles_in_the_package():
    """From every import of every module (module level or inside a function): no two modules need
    each other, however long the circle (a package's ``__init__`` re-exporting its modules counts)."""
    graph = {m: project_imports(m, p) - {m} for m, p in MODULES.items()}
    assert import_cycles(graph) == []


def test_old_module_paths_are_aliases_of_modules_that_exist():
    """The moved modules' old names (:mod:`legged_wbc.moved`) each load the module at its new name,
    and no project file imports an old name."""
    import importlib

    import legged_wbc.ros  # noqa: F401  (registers the tables)
    import legged_wbc.tools  # noqa: F401
    from legged_wbc.moved import table

    moved = table()
    assert len(moved) >= 40
    for old, new in moved.items():
        assert new in MODULES and old not in MODULES, (old, new)
        assert importlib.import_module(old) is importlib.import_module(new)
    users = {m: sorted(i for i in (project_imports(m, p) | _dotted_names(p)) if i in moved) for m, p in MODULES.items()}
    assert not {m: u for m, u in users.items() if u}


def _dotted_names(path: Path) -> set[str]:
    """``import a.b.c`` and ``from a.b import c`` names of a file, whether or not they are modules."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return out
