"""No function of the stack's packages (``legged_wbc``, ``state_estimator``, ``wbc_controller``,
``mujoco_bridge``) is longer than 60 lines (from its ``def`` line to its last
line; decorators and the functions nested in it count with it), so each reads as one step with a
name. Longer ones are split into named steps; an exception would be listed below with its reason
(none today), and the list is checked too (an entry that got short, or went away, leaves the list)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = [ROOT / p for p in ("legged_wbc", "state_estimator", "wbc_controller", "mujoco_bridge")]
MAX_LINES = 60

# "path:qualified name" -> why it stays longer; empty since every function was split into named steps
ALLOWED: dict[str, str] = {}


def function_lengths() -> dict[str, int]:
    out = {}
    for path in sorted(f for pkg in PACKAGES for f in pkg.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()

        def walk(node, prefix: str) -> None:
            for ch in ast.iter_child_nodes(node):
                if isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    out[f"{rel}:{prefix}{ch.name}"] = ch.end_lineno - ch.lineno + 1
                    walk(ch, f"{prefix}{ch.name}.")
                elif isinstance(ch, ast.ClassDef):
                    walk(ch, f"{prefix}{ch.name}.")
                else:
                    walk(ch, prefix)

        walk(ast.parse(path.read_text()), "")
    return out


def test_no_function_over_60_lines():
    lengths = function_lengths()
    assert len(lengths) > 800                      # the walk found the packages' functions
    long = {name: n for name, n in lengths.items() if n > MAX_LINES and name not in ALLOWED}
    assert not long, f"functions over {MAX_LINES} lines (split them into named steps): {long}"


def test_the_exceptions_are_still_exceptions():
    lengths = function_lengths()
    stale = [name for name in ALLOWED if lengths.get(name, 0) <= MAX_LINES]
    assert not stale, f"no longer over {MAX_LINES} lines (or gone): remove from ALLOWED: {stale}"
