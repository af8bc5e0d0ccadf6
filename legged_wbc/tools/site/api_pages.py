"""The API reference pages: one page per part of the stack, one mkdocstrings directive per public module.

A module is public when no part of its dotted name starts with ``_`` (a package's ``__init__`` is the
package itself). The modules are found on disk at build time, so a new module is in the reference at
the next build; the docstrings are read statically (griffe), nothing is imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ApiPage:
    path: str                      # under docs/, e.g. "api/wbc_controller.md"
    title: str
    intro: str
    roots: tuple[str, ...]         # packages (every public module under them) or single modules


PAGES = (
    ApiPage("api/wbc_controller.md", "wbc_controller",
            "The whole-body controller: the cycle, one module per QP block with its kernel and numpy reference, "
            "the least-distance form, the solver backends, the parameters and the ROS 2 node.",
            ("wbc_controller",)),
    ApiPage("api/state_estimator.md", "state_estimator",
            "The state estimator: touchdown detector, base-velocity filter, support plane, the compiled cycle "
            "and its numpy oracle, the parameters and the ROS 2 node.",
            ("state_estimator",)),
    ApiPage("api/mujoco_bridge.md", "mujoco_bridge",
            "The simulation: MuJoCo core, command timing and source, the scheduler, scenario set-up, the viewer, "
            "the parameters and the ROS 2 node.",
            ("mujoco_bridge",)),
    ApiPage("api/scenario.md", "legged_wbc.scenario",
            "Scenarios: the schema of a scenario file (every key, its range), the presets and the `--set` overrides.",
            ("legged_wbc.scenario",)),
    ApiPage("api/robots.md", "Robot schemas",
            "A robot file: the generated robots' YAML (`legged_wbc.robot`) and a published robot from its own "
            "URDF and SRDF (`legged_wbc.urdf_robot`).",
            ("legged_wbc.robot", "legged_wbc.urdf_robot")),
    ApiPage("api/params.md", "legged_wbc.params",
            "The one parameter schema every node's config class is declared with (the tables of "
            "[Parameter reference](../parameter-reference.md) are generated from it).",
            ("legged_wbc.params",)),
    ApiPage("api/cli.md", "legged_wbc.cli",
            "The command line, one module per command group ([Commands](../commands.md) lists every command "
            "with an example).",
            ("legged_wbc.cli",)),
)


def _is_public(dotted: str) -> bool:
    return not any(part.startswith("_") for part in dotted.split("."))


def modules(root: str, repo: Path) -> list[str]:
    """``root`` and every public module under it (when it is a package), sorted, the package first."""
    base = repo.joinpath(*root.split("."))
    if not base.is_dir():
        return [root]
    out = []
    for p in sorted(base.rglob("*.py")):
        parts = list(p.relative_to(repo).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        dotted = ".".join(parts)
        if _is_public(dotted) and "__pycache__" not in p.parts:
            out.append(dotted)
    return sorted(out, key=lambda m: (m != root, m))


def markdown(page: ApiPage, repo: Path) -> str:
    """The page: its title, what it covers, then each module (heading, docstring, public members)."""
    lines = [f"# {page.title}", "", page.intro, ""]
    for root in page.roots:
        for mod in modules(root, repo):
            lines += [f"::: {mod}", ""]
    return "\n".join(lines)


def covered(repo: Path) -> set[str]:
    """Every module the reference documents."""
    return {m for page in PAGES for root in page.roots for m in modules(root, repo)}
