"""The README as a newcomer reads it: short (<= 200 lines), the things a ROS user looks for within its
first 100 lines, every link resolving, and every command in it (and in the manual's *Getting started*)
run here, as itself or in a short version (``--duration 1``, ``--dry-run``, ``--help``), so a statement
cannot drift from what the code does."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SOURCES = (README, ROOT / "docs" / "getting-started.md")
# commands that need a running stack, a long run or a server: their --help (the options still parse)
HELP_ONLY = {"teleop-example", "example-controller", "param", "bench", "docs"}
# what the suite itself is: run_tests.sh runs setup.sh, then these tests
NOT_RUN = {"./setup.sh", "./run_tests.sh"}


def commands(path: Path) -> list[str]:
    """The commands of the ``bash`` blocks of ``path``: comments dropped, ``a && b`` as two commands."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", path.read_text(), flags=re.S):
        for line in block.splitlines():
            line = re.split(r"(?:^|\s)#\s", line, maxsplit=1)[0].strip()
            out += [c.strip() for c in line.split("&&") if c.strip() and not c.strip().startswith("export ")]
    return out


def test_the_readme_is_short_and_names_what_a_ros_user_looks_for_early():
    lines = README.read_text().splitlines()
    assert len(lines) <= 200, len(lines)
    head = "\n".join(lines[:100])
    for needle in ("/cmd_vel", "controller:=external", "record:=", "legged-wbc compare"):
        assert needle in head, f"{needle} not within the README's first 100 lines"
    first = commands(README)[:3]
    assert first[:2] == ["./setup.sh", ".venv/bin/legged-wbc launch walking_sim controller:=cbf scenario:=paper "
                                       "mode:=realtime duration:=52 layout:=split"], first
    assert first[2] == "./run_tests.sh", first


def _slug(heading: str) -> str:
    from markdown.extensions.toc import slugify

    return slugify(heading.replace("`", ""), "-")


def test_every_link_of_the_readme_resolves():
    pytest.importorskip("markdown")
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", README.read_text()):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        file = ROOT / path
        if not file.is_file():
            bad.append(target)
        elif anchor and anchor not in {_slug(h) for h in re.findall(r"^#+ (.+)$", file.read_text(), flags=re.M)}:
            bad.append(target)
    assert not bad, bad


def short_version(cmd: str, tmp: Path, run_dir: Path) -> list[str] | None:
    """The argv that runs ``cmd`` (a README command) briefly, or None for the suite's own commands."""
    if cmd in NOT_RUN:
        return None
    argv = shlex.split(cmd)
    assert argv[0] in ("legged-wbc", ".venv/bin/legged-wbc"), f"a README command this test cannot run: {cmd}"
    name, args = argv[1], argv[2:]
    cli = [sys.executable, "-m", "legged_wbc.cli", name]
    if name in HELP_ONLY:
        return cli + (args[:1] if name == "bench" else []) + ["--help"]
    if name == "launch":
        return [*cli, "--dry-run", *args]                    # every launch argument checked, nothing started
    if name == "run":
        out = args.index("--out")
        return cli + args[:out] + ["--out", str(tmp / "run"), "--duration", "1"] + args[out + 2:]
    if name == "compare":
        return cli + [str(run_dir), "--out", str(tmp / "compare"), "--no-figures"]
    if name == "sweep":
        out = args.index("--out")
        return cli + args[:out] + ["--out", str(tmp / "sweep"), "--trials", "1", "--duration", "1", "--workers", "1"] + \
            [a for a in args[out + 2:] if a != "--trials"]
    raise AssertionError(f"README command without a short version here (add one): {cmd}")


@pytest.fixture(scope="module")
def headless_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("readme") / "cbf"
    res = subprocess.run([sys.executable, "-m", "legged_wbc.cli", "run", "--controller", "cbf", "--scenario", "paper",
                          "--duration", "1", "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    return out


ALL = sorted({c for src in SOURCES for c in commands(src)})


def test_the_readme_has_its_commands():
    names = {shlex.split(c)[1] for c in ALL if c not in NOT_RUN}
    assert {"launch", "run", "compare", "teleop-example", "example-controller", "sweep", "param", "bench"} <= names
    assert NOT_RUN <= set(ALL)


@pytest.mark.parametrize("cmd", ALL)
def test_each_readme_command_runs(cmd, tmp_path, headless_run, ros_env):
    argv = short_version(cmd, tmp_path, headless_run)
    if argv is None:
        pytest.skip("run_tests.sh runs setup.sh, then this suite")
    res = subprocess.run(argv, cwd=ROOT, env=ros_env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, f"{cmd}\n-> {' '.join(argv)}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"


@pytest.mark.ros
def test_the_main_command_walks_records_and_compares(tmp_path, ros_env):
    """The README's walk, 2 s instead of 52, recorded and compared: a bag, a report, no fall."""
    walk = [c for c in commands(README) if "record:=bags/cbf" in c][0]
    argv = shlex.split(walk)
    args = [a for a in argv[3:] if not a.startswith(("duration:=", "record:="))]
    bag = tmp_path / "bag"
    res = subprocess.run([sys.executable, "-m", "legged_wbc.cli", "launch", "walking_sim", *args, "duration:=2",
                          f"record:={bag}"], cwd=ROOT, env=ros_env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    res = subprocess.run([sys.executable, "-m", "legged_wbc.cli", "compare", str(bag), "--out", str(tmp_path / "r"),
                          "--no-figures"], cwd=ROOT, env=ros_env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert (tmp_path / "r" / "report.md").is_file()
