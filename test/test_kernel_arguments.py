"""Kernel settings are read by name (docs/design.md, code layout): no numba kernel of the stack takes
more than 12 parameters, and no call hands a kernel its arguments by unpacking a tuple (``*args``),
where a reordered or inserted field would shift every value after it silently."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("legged_wbc", "wbc_controller", "state_estimator", "mujoco_bridge")
MAX_PARAMS = 12


def _is_kernel(fn: ast.FunctionDef) -> bool:
    """Decorated with numba's ``njit`` / ``jit`` (called or not) or a module's alias of it (``kernel``)."""
    for d in fn.decorator_list:
        f = d.func if isinstance(d, ast.Call) else d
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        if name in ("njit", "jit", "kernel"):
            return True
    return False


def _trees():
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text())


def kernels() -> dict[str, int]:
    """``"path:name"`` -> parameter count of every numba kernel of the packages."""
    out = {}
    for rel, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and _is_kernel(node):
                a = node.args
                out[f"{rel}:{node.name}"] = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
    return out


def test_no_kernel_takes_more_than_12_parameters():
    found = kernels()
    assert len(found) > 80                                    # the walk found the kernels
    assert "state_estimator/kernels.py:estimator_tick" in found
    long = {k: n for k, n in found.items() if n > MAX_PARAMS}
    assert not long, f"kernels with more than {MAX_PARAMS} parameters (group settings by name): {long}"


def test_no_kernel_call_unpacks_a_tuple():
    plain = {n.name for _, tree in _trees() for n in ast.walk(tree)
             if isinstance(n, ast.FunctionDef) and not _is_kernel(n)}
    names = {k.split(":")[1] for k in kernels()} - plain      # a name that is a kernel only
    assert "estimator_tick" in names and "td_detect" in names
    bad = []
    for rel, tree in _trees():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not any(isinstance(a, ast.Starred) for a in node.args):
                continue
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name in names:
                bad.append(f"{rel}:{node.lineno} {ast.unparse(node)[:80]}")
    assert not bad, f"kernel calls with *args: {bad}"
