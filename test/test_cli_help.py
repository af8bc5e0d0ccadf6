"""The command line as a user meets it: every command and option says what it does, in plain text (no
reStructuredText / Markdown markup), the help says what the code does, the README's commands write only
where .gitignore covers, and an unknown parameter name is one line, not a traceback."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from legged_wbc.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
MARKUP = re.compile(r"``|`[^`]+`|:(mod|func|class|meth|data|attr):")


def _subparsers(parser):
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            yield from a.choices.items()


def test_every_command_and_option_has_plain_help():
    top = build_parser()
    texts = [("legged-wbc", top.description or "")]
    helps = {c.dest: c.help for a in top._actions if isinstance(a, argparse._SubParsersAction)
             for c in a._choices_actions}
    missing = []
    for name, sub in _subparsers(top):
        assert helps.get(name), f"{name}: no help in the command list"
        texts += [(name, helps[name]), (name, sub.description or "")]
        for a in sub._actions:
            if isinstance(a, argparse._HelpAction):
                continue
            if not a.help:
                missing.append(f"{name} {'/'.join(a.option_strings) or a.dest}")
            texts.append((f"{name} {a.dest}", a.help or ""))
    assert not missing, f"options without help text: {missing}"
    marked = [(w, t) for w, t in texts if MARKUP.search(t)]
    assert not marked, marked
    out = top.format_help()
    assert not MARKUP.search(out) and "legged-wbc" in out


def test_launch_help_says_what_the_default_layout_is():
    sub = dict(_subparsers(build_parser()))["launch"]
    text = " ".join(sub.format_help().split())
    assert "container" in text and "layout:=processes" in text
    # the launch file's own default agrees
    assert re.search(r'<arg name="layout" default="container"', (ROOT / "launch/walking_sim.launch.xml").read_text())


def test_readme_commands_write_only_ignored_paths():
    """Every output path the README's commands name (``--out X``, ``record:=X``, ``--plot X``) and the
    commands' default outputs are ignored by git: running them leaves ``git status`` clean."""
    readme = (ROOT / "README.md").read_text() + "".join(p.read_text() for p in (ROOT / "docs").glob("*.md"))
    paths = set(re.findall(r"(?:--out|--plot|--compare)\s+([A-Za-z0-9_./-]+)", readme))
    paths |= set(re.findall(r"record:=([A-Za-z0-9_./-]+)", readme))
    paths = {p.rstrip(".`,;") for p in paths}
    paths = {p for p in paths if p and p not in ("DIR", "F.png", "RUN2") and not p.startswith("/")}
    paths |= {"out/scene.xml"}                         # export-mjcf's default
    assert {"bags/cbf", "reports/cbf", "runs/cbf"} <= paths, sorted(paths)
    probe = [f"{p}/metadata.yaml" if not Path(p).suffix else p for p in paths]
    probe += ["reports/rt/report.md", "reports/rt/metrics.json", "bags/rt/metadata.yaml", "bags/rt/rt_0.mcap",
              "fig.png", "MUJOCO_LOG.TXT"]
    res = subprocess.run(["git", "check-ignore", "--no-index", "-v", "-n", *probe], cwd=ROOT, capture_output=True,
                         text=True)
    assert res.returncode in (0, 1) and not res.stderr, res.stderr
    not_ignored = [line.split("\t")[-1] for line in res.stdout.splitlines() if line.startswith("::")]
    assert not not_ignored, f"README outputs git would show as untracked: {not_ignored}"


NODE = textwrap.dedent("""
    import rclpy, sys
    from rclpy.node import Node
    rclpy.init()
    n = Node("param_probe")
    n.declare_parameter("k_dtheta", 10.0)
    n.declare_parameter("kp_b", 1.0)
    print("up", flush=True)
    try:
        rclpy.spin(n)
    except (KeyboardInterrupt, rclpy.executors.ExternalShutdownException):
        pass
""")


@pytest.mark.ros
def test_unknown_parameter_is_one_line(ros_env):
    node = subprocess.Popen([sys.executable, "-c", NODE], env=ros_env, stdout=subprocess.PIPE, text=True)
    try:
        assert node.stdout.readline().strip() == "up"
        cli = str(ROOT / ".venv/bin/legged-wbc")
        for argv in (["get", "param_probe", "k_dtheta_typo"], ["set", "param_probe", "no_such_param", "1.0"],
                     ["describe", "param_probe", "no_such_param"]):
            for _ in range(3):   # discovery of a fresh node can take a moment on a loaded machine
                r = subprocess.run([cli, "param", *argv], env=ros_env, capture_output=True, text=True, timeout=60)
                if "not reachable" not in r.stderr:
                    break
                time.sleep(1.0)
            assert r.returncode == 1, (argv, r.stdout, r.stderr)
            lines = r.stderr.strip().splitlines()
            assert len(lines) == 1 and "Traceback" not in r.stderr, (argv, r.stderr)
            assert f"parameter {argv[2]} is not declared on /param_probe" in lines[0], lines
        assert "did you mean k_dtheta" in subprocess.run([cli, "param", "get", "param_probe", "k_dtheta_typo"],
                                                         env=ros_env, capture_output=True, text=True,
                                                         timeout=60).stderr
        ok = subprocess.run([cli, "param", "get", "param_probe", "k_dtheta"], env=ros_env, capture_output=True,
                            text=True, timeout=60)
        assert ok.returncode == 0 and "10.0" in ok.stdout, ok.stdout + ok.stderr
    finally:
        node.terminate()      # the probe is the test's own: a slow DDS teardown under load is no finding
        try:
            node.wait(30)
        except subprocess.TimeoutExpired:
            node.kill()
            node.wait(10)
