"""The manual as a site (``mkdocs.yml``, ``docs/``): it builds in strict mode (every link and anchor
resolves, every page is in the navigation, no warning) within a minute; the API reference covers every
public module of the controller, the estimator, the bridge and the scenarios; the parameter tables show
every parameter of the schema; ``legged-wbc --help`` and the manual's *Commands* list the same
commands, each with an example."""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

import pytest

from legged_wbc.cli import build_parser
from legged_wbc.params import schema
from legged_wbc.tools.site import api_pages, parameter_tables
from legged_wbc.tools.site.build import run

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("mkdocs")
pytest.importorskip("mkdocstrings_handlers.python")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    t0 = time.monotonic()
    res = run("build", repo=ROOT, out=out, capture=True)
    return out, res, time.monotonic() - t0


def test_the_site_builds_strict_without_a_warning_in_a_minute(site):
    out, res, seconds = site
    log = res.stdout + res.stderr
    assert res.returncode == 0, log[-4000:]
    warnings = [line for line in log.splitlines() if re.match(r"\s*(WARNING|ERROR)\b", line)]
    assert not warnings, warnings
    assert seconds <= 60, f"the site took {seconds:.1f} s to build"
    assert (out / "index.html").is_file() and (out / "api" / "wbc_controller.html").is_file()


def _public_modules(pkg: str) -> set[str]:
    out = set()
    for p in (ROOT / pkg).rglob("*.py"):
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        if not any(x.startswith("_") for x in parts):
            out.add(".".join(parts))
    return out


def test_the_api_reference_covers_every_public_module(site):
    out, _, _ = site
    wanted = set().union(*(_public_modules(p) for p in ("wbc_controller", "state_estimator", "mujoco_bridge")))
    wanted |= {"legged_wbc.scenario", "legged_wbc.robot", "legged_wbc.urdf_robot", "legged_wbc.cli"}
    assert {"wbc_controller.controller", "wbc_controller.blocks.cbf", "state_estimator.estimator",
            "mujoco_bridge.sim"} <= wanted
    assert wanted <= api_pages.covered(ROOT), sorted(wanted - api_pages.covered(ROOT))
    html = "".join(p.read_text() for p in (out / "api").glob("*.html"))
    missing = [m for m in sorted(wanted) if f'id="{m}"' not in html]
    assert not missing, f"modules without their section in the built API pages: {missing}"


def test_the_parameter_tables_come_from_the_schema(site):
    out, _, _ = site
    nodes = parameter_tables.node_classes(ROOT / "docs" / "parameters.md")
    assert [n for n, _, _ in nodes] == ["wbc_controller", "state_estimator", "mujoco_bridge", "bag_recorder",
                                        "walking_container"]
    html = (out / "parameter-reference.html").read_text()
    for node, dotted, _ in nodes:
        names = [s.name for s in schema(parameter_tables.load_class(dotted))]
        assert names, node
        missing = [n for n in names if f"<code>{n}</code>" not in html]
        assert not missing, f"{node}: parameters missing from the reference: {missing}"


def _commands() -> set[str]:
    for a in build_parser()._actions:
        if isinstance(a, argparse._SubParsersAction):
            return set(a.choices)
    return set()


def _manual_commands() -> dict[str, str]:
    """``{command: its section's text}`` of the manual's *Commands* page (``### `legged-wbc NAME` ``)."""
    text = (ROOT / "docs" / "commands.md").read_text()
    parts = re.split(r"^#{2,3} `legged-wbc ([a-z-]+)`\s*$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_help_and_the_manual_list_the_same_commands_each_with_an_example():
    manual = _manual_commands()
    assert set(manual) == _commands(), (sorted(set(manual) - _commands()), sorted(_commands() - set(manual)))
    for name, body in manual.items():
        examples = re.findall(r"```bash\n(.*?)```", body, flags=re.S)
        lines = [ln for ex in examples for ln in ex.splitlines()]
        assert any(re.match(rf"(\.venv/bin/)?legged-wbc {name}\b", ln) for ln in lines), f"{name}: no example"
