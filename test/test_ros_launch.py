"""Launcher (parsing, substitutions, process supervision), ros_io conversions, ros_params schema.

No DDS traffic here except the in-process parameter test (a lone node on a test-unique domain).
"""

from __future__ import annotations

from domains import domain_id
import io
import os
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from legged_wbc.params import param
from legged_wbc.ros.tooling import launcher as L
from legged_wbc.ros import io as ros_io


# ------------------------------------------------------------------------------------ launch file
def _plan(**args):
    return L.load_launch(L.resolve_launch_file("walking_sim"), {k: str(v) for k, v in args.items()})


def _node(plan, name):
    return next(n for n in plan.nodes if n.name == name)


def test_walking_sim_default_is_the_container(tmp_path):
    plan = _plan()
    assert [n.name for n in plan.nodes] == ["walking_container"]
    c = plan.nodes[0]
    assert c.shutdown_on_exit and c.exec == "walking_container" and c.pkg == "legged_wbc"
    cmd = c.command("/x/walking_container")
    # no __node remap: in ROS 2 it would rename every node of the process
    assert cmd[:2] == ["/x/walking_container", "--ros-args"] and not any("__node" in a for a in cmd)
    files = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--params-file"]
    assert [Path(f).name for f in files] == ["mujoco_bridge.yaml", "estimator.yaml", "wbc_controller.yaml",
                                             "recorder.yaml", "no_params.yaml"]     # params_file:= last
    assert all(Path(f).is_file() for f in files)
    for want in ("mode:=lockstep", "duration:=0.0", "relative_pitch_mode:=cbf", "scenario:=nominal", "record:=''",
                 "robot:=hexapod"):
        assert want in cmd, want
    assert "use_sim_time:=true" in cmd and cmd[2:4] == ["--log-level", "info"]   # the container feeds the clocks
    mine = tmp_path / "mine.yaml"
    mine.write_text("/**:\n  ros__parameters:\n    kp_b: 2000.0\n")
    user = _plan(params_file=mine, log_level="debug", use_sim_time="false").nodes[0].command("w")
    assert [user[i + 1] for i, a in enumerate(user) if a == "--params-file"][-1] == str(mine)
    assert "use_sim_time:=false" in user and user[2:4] == ["--log-level", "debug"]
    rec = _plan(record="/tmp/b", mode="realtime", controller="damping").nodes[0].command("w")
    assert "record:=/tmp/b" in rec and "mode:=realtime" in rec and "relative_pitch_mode:=damping" in rec
    assert any(a.startswith("custom_data:=") and a.endswith("layout=container") for a in rec)


def test_walking_sim_processes_layout():
    plan = _plan(layout="processes")
    assert [n.name for n in plan.nodes] == ["mujoco_bridge", "state_estimator", "wbc_controller"]
    br = _node(plan, "mujoco_bridge")
    assert br.shutdown_on_exit and br.exec == "mujoco_bridge" and br.pkg == "legged_wbc"
    cmd = br.command("/x/mujoco_bridge")
    assert cmd[:6] == ["/x/mujoco_bridge", "--ros-args", "--log-level", "info", "-r", "__node:=mujoco_bridge"]
    i = cmd.index("--params-file")
    assert cmd[i + 1].endswith("config/mujoco_bridge.yaml") and Path(cmd[i + 1]).is_file()
    assert "mode:=lockstep" in cmd and "duration:=0.0" in cmd and "startup_min_subscribers:=2" in cmd
    assert "startup_wait_all_topics:=false" in cmd
    assert "viewer:=false" in cmd and "robot:=hexapod" in cmd
    # params files come before the single -p values (ROS applies them in order)
    assert cmd.index("--params-file") < cmd.index("-p")
    ctrl = _node(plan, "wbc_controller")
    c = ctrl.command("wbc_controller")
    assert "relative_pitch_mode:=cbf" in c and "use_sim_time:=true" in c   # one time base: /clock
    assert any(a.endswith("config/wbc_controller.yaml") for a in c)
    est = _node(plan, "state_estimator").command("state_estimator")
    assert "use_sim_time:=true" in est
    assert all(n.shutdown_on_exit for n in plan.nodes)     # any node the graph needs ends the launch


def test_walking_sim_args_and_recording(tmp_path):
    bag = tmp_path / "bag"
    plan = _plan(controller="damping", mode="realtime", duration=12.5, record=bag, storage="sqlite3",
                 viewer="true", robot="quadruped", scenario="paper", layout="processes")
    assert [n.name for n in plan.nodes] == ["mujoco_bridge", "state_estimator", "wbc_controller", "bag_recorder"]
    br = _node(plan, "mujoco_bridge").command("b")
    for want in ("mode:=realtime", "duration:=12.5", "viewer:=true", "robot:=quadruped", "scenario:=paper",
                 "startup_min_subscribers:=2", "startup_wait_all_topics:=true"):
        assert want in br
    assert "relative_pitch_mode:=damping" in _node(plan, "wbc_controller").command("w")
    rec = _node(plan, "bag_recorder")
    rc = rec.command("bag_recorder")
    assert f"output:={bag}" in rc and "storage:=sqlite3" in rc and "stamp_source:=clock_topic" in rc
    assert any(a.startswith("custom_data:=controller=damping;scenario=paper;mode=realtime") for a in rc)
    assert rec.sigterm_timeout == 15.0
    with pytest.raises(L.LaunchError, match="unknown launch argument"):
        _plan(contoller="cbf")


def test_cli_dry_run_and_show_args(capsys):
    from legged_wbc.cli import main

    assert main(["launch", "walking_sim", "--dry-run", "controller:=none", "record:=/tmp/never_created",
                 "layout:=processes"]) == 0
    out = capsys.readouterr().out
    assert "[mujoco_bridge] (on_exit=shutdown)" in out and "relative_pitch_mode:=none" in out
    assert "[bag_recorder]" in out and not Path("/tmp/never_created").exists()
    assert main(["launch", "walking_sim", "--dry-run", "record:=/tmp/never_created"]) == 0
    out = capsys.readouterr().out
    assert "[walking_container] (on_exit=shutdown)" in out and "record:=/tmp/never_created" in out
    assert main(["launch", "walking_sim", "--show-args"]) == 0
    out = capsys.readouterr().out
    assert "controller:" in out and "record:" in out and "duration:" in out
    assert main(["launch", "no_such_launch_file", "--dry-run"]) == 2


def test_equals_substitutions(tmp_path):
    f = tmp_path / "eq.launch.xml"
    f.write_text(textwrap.dedent("""\
        <launch>
          <arg name="layout" default="container"/>
          <arg name="rec" default=""/>
          <node pkg="p" exec="c" if="$(equals $(var layout) container)"/>
          <node pkg="p" exec="q" name="q" if="$(equals $(var layout) processes)"/>
          <node pkg="p" exec="r" name="r" if="$(not-equals _$(var rec) _)"/>
          <node pkg="p" exec="n" name="n" if="$(equals 1 1.0)"/>
          <node pkg="p" exec="b" name="b" unless="$(equals True true)"/>
        </launch>
        """))
    assert [n.exec for n in L.load_launch(f, {}).nodes] == ["c", "n"]
    # a value that would be code under $(eval) is only text here
    assert [n.exec for n in L.load_launch(f, {"layout": "processes", "rec": "it's'+str(1)+'"}).nodes] == ["q", "r", "n"]
    assert L.load_launch(f, {}).nodes[0].command("c") == ["c", "--ros-args"]


@pytest.mark.parametrize("value", ["bags/it's", 'say "hi" there', "a $(var mode) b", "x')+str(1)+('",
                                   "'+str(__import__('os').system('echo X'))+'", "two\nlines", ") $("])
def test_no_launch_argument_reaches_an_evaluator(value, capsys):
    """A record path is text: whatever it holds, it becomes the recorder's output and nothing else."""
    plan = _plan(layout="processes", record=value)
    assert [n.name for n in plan.nodes][-1] == "bag_recorder"
    rec = _node(plan, "bag_recorder")
    assert dict(rec.params)["output"] == value
    assert dict(_node(plan, "mujoco_bridge").params)["startup_wait_all_topics"] == "true"
    c = _plan(record=value).nodes[0]
    assert dict(c.params)["record"] == value
    assert "X" not in capsys.readouterr().out


def test_arg_choices_are_enforced(capsys):
    for arg, bad in (("layout", "foo"), ("controller", "pid"), ("mode", "fast"), ("storage", "bag")):
        with pytest.raises(L.LaunchError, match=f"{arg}:='{bad}' is not one of"):
            _plan(**{arg: bad})
    from legged_wbc.cli import main

    assert main(["launch", "walking_sim", "layout:=foo"]) == 2      # one line, before anything starts
    assert "is not one of container, split, processes" in capsys.readouterr().err


def test_substitutions_and_conditions(tmp_path, monkeypatch):
    monkeypatch.setenv("LWBC_TEST_ENV", "from_env")
    monkeypatch.delenv("LWBC_UNSET", raising=False)
    f = tmp_path / "t.launch.xml"
    f.write_text(textwrap.dedent("""\
        <launch>
          <arg name="a" default="x y"/>
          <arg name="flag" default="false"/>
          <arg name="n" default="2"/>
          <let name="b" value="$(var a)-b"/>
          <node pkg="p" exec="e1" name="one" if="$(var flag)"/>
          <node pkg="p" exec="e2" name="two" unless="$(var flag)" args="--foo bar">
            <param name="s" value="$(var b)"/>
            <param name="env" value="$(env LWBC_TEST_ENV)"/>
            <param name="envdef" value="$(env LWBC_UNSET 'dflt val')"/>
            <param name="opt" value="[$(optenv LWBC_UNSET)]"/>
            <param name="calc" value="$(eval '$(var n) * 3')"/>
            <param name="cmp" value="$(eval &quot;'$(var a)' == 'x y'&quot;)"/>
            <param name="esc" value="a\\$(b)"/>
            <param name="dir" value="$(dirname)"/>
            <remap from="in" to="/out"/>
          </node>
          <group if="$(eval '$(var n) > 1')">
            <node pkg="p" exec="e3" namespace="ns" required="true" sigterm_timeout="0.5"/>
          </group>
        </launch>
        """))
    plan = L.load_launch(f, {})
    assert [n.name for n in plan.nodes] == ["two", "e3"]
    two = plan.nodes[0]
    assert dict(two.params) == {"s": "x y-b", "env": "from_env", "envdef": "dflt val", "opt": "[]",
                                "calc": "6", "cmp": "True", "esc": "a$(b)", "dir": str(tmp_path)}
    assert two.remaps == [("in", "/out")] and two.extra_args == ["--foo", "bar"]
    cmd = two.command("e2")
    assert cmd[:3] == ["e2", "--foo", "bar"] and "-r" in cmd and "in:=/out" in cmd
    e3 = plan.nodes[1]
    assert e3.shutdown_on_exit and e3.sigterm_timeout == 0.5 and "__ns:=/ns" in e3.command("e3")
    plan = L.load_launch(f, {"flag": "True", "n": "1"})
    assert [n.name for n in plan.nodes] == ["one"]
    with pytest.raises(L.LaunchError, match="condition must be"):
        L.load_launch(f, {"flag": "maybe"})
    with pytest.raises(L.LaunchError, match="only literals"):
        L.safe_eval("__import__('os').getcwd()")
    bad = tmp_path / "bad.launch.xml"
    bad.write_text('<launch><node pkg="p" exec="e"><param from="/no/such.yaml"/></node></launch>')
    with pytest.raises(L.LaunchError, match="not found"):
        L.load_launch(bad, {})
    bad.write_text('<launch><include file="x.launch.xml"/></launch>')
    with pytest.raises(L.LaunchError, match="not supported"):
        L.load_launch(bad, {})
    req = tmp_path / "req.launch.xml"
    req.write_text('<launch><arg name="must" description="needed"/></launch>')
    with pytest.raises(L.LaunchError, match="required launch argument 'must'"):
        L.load_launch(req, {})


# ------------------------------------------------------------------------------------ supervision
def _script(bindir: Path, name: str, body: str) -> None:
    p = bindir / name
    p.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
    p.chmod(0o755)


@pytest.fixture
def fake_bin(tmp_path, monkeypatch):
    """Console scripts on PATH standing in for nodes (no ROS): they ignore the --ros-args they get."""
    b = tmp_path / "bin"
    b.mkdir()
    _script(b, "lwbc_finisher", """\
        import sys, time
        print("args", " ".join(sys.argv[1:]), flush=True)
        time.sleep(0.3)
        print("done", flush=True)
        """)
    _script(b, "lwbc_sleeper", """\
        import signal, sys, time
        def h(s, f):
            print("got SIGINT, stopping", flush=True); sys.exit(0)
        signal.signal(signal.SIGINT, h)
        print("sleeping", flush=True)
        time.sleep(60)
        """)
    _script(b, "lwbc_stubborn", """\
        import signal, time
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print("ignoring SIGINT", flush=True)
        while True:
            time.sleep(0.05)
        """)
    _script(b, "lwbc_crasher", """\
        import sys, time
        time.sleep(0.1)
        print("boom", flush=True)
        sys.exit(3)
        """)
    monkeypatch.setenv("PATH", f"{b}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("ROS_AUTOMATIC_DISCOVERY_RANGE", raising=False)
    return b


def _run(tmp_path, body: str) -> tuple[int, str]:
    f = tmp_path / "s.launch.xml"
    f.write_text(f"<launch>{body}</launch>")
    out = io.StringIO()
    rc = L.Launcher(L.load_launch(f, {}), out=out).run()
    return rc, out.getvalue()


def test_required_node_exit_stops_the_others(tmp_path, fake_bin):
    rc, out = _run(tmp_path, """
        <node pkg="p" exec="lwbc_finisher" name="fin" on_exit="shutdown"><param name="k" value="1"/></node>
        <node pkg="p" exec="lwbc_sleeper" name="sl"/>
        <node pkg="p" exec="lwbc_stubborn" name="st" sigterm_timeout="0.5"/>""")
    assert rc == 0, out
    assert "[fin] args --ros-args -r __node:=fin -p k:=1" in out
    assert "[fin] done" in out and "[sl] sleeping" in out and "[sl] got SIGINT, stopping" in out
    assert "fin exited and is marked on_exit=shutdown" in out
    assert "st still running 0.5 s after SIGINT: SIGTERM" in out
    assert "crashed" not in out


def test_crash_gives_nonzero_and_env_is_localhost(tmp_path, fake_bin):
    _script(fake_bin, "lwbc_env", """\
        import os
        print("range", os.environ.get("ROS_AUTOMATIC_DISCOVERY_RANGE"), flush=True)
        """)
    rc, out = _run(tmp_path, """
        <node pkg="p" exec="lwbc_env" name="env"/>
        <node pkg="p" exec="lwbc_crasher" name="cr"/>""")
    assert rc == 1, out
    assert "[env] range LOCALHOST" in out and "[cr] boom" in out
    assert "process cr died with exit code 3" in out and "crashed: cr" in out
    rc, out = _run(tmp_path, '<node pkg="p" exec="lwbc_no_such_exe" name="x" on_exit="shutdown"/>')
    assert rc == 1 and "cannot start x" in out


def test_sigint_to_launcher_is_forwarded(tmp_path, fake_bin):
    import signal
    import subprocess
    import time

    f = tmp_path / "s.launch.xml"
    f.write_text('<launch><node pkg="p" exec="lwbc_sleeper" name="sl"/></launch>')
    proc = subprocess.Popen([sys.executable, "-m", "legged_wbc.cli", "launch", str(f)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=dict(os.environ))
    lines = []
    t0 = time.monotonic()
    for line in proc.stdout:
        lines.append(line)
        if "[sl] sleeping" in line:
            break
        assert time.monotonic() - t0 < 20, lines
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=20)
    out = "".join(lines) + rest
    assert proc.returncode == 130, out
    assert "[sl] got SIGINT, stopping" in out and "process sl finished (exit code 0)" in out


def _term_note(fake_bin: Path) -> None:
    """``lwbc_term_note FILE``: a node that, on SIGTERM, writes the signal's name to FILE and exits 143 (the
    stack's convention, 128 + SIGTERM); SIGINT ends it with 130."""
    _script(fake_bin, "lwbc_term_note", """\
        import signal, sys, time
        def h(s, f):
            open(sys.argv[1], "w").write(signal.Signals(s).name)
            sys.exit(128 + s)
        signal.signal(signal.SIGTERM, h)
        signal.signal(signal.SIGINT, h)
        print("waiting", flush=True)
        time.sleep(60)
        """)


def _run_and_signal(tmp_path, body: str, name: str, sig) -> tuple[int, str, float]:
    """Run the launch ``body`` in this (main) thread; once node ``name`` printed a line, send it ``sig``
    from another thread (from outside the launcher). The launch's rc, its output and its wall time after
    the signal."""
    import signal
    import threading
    import time

    f = tmp_path / "s.launch.xml"
    f.write_text(f"<launch>{body}</launch>")
    out = io.StringIO()
    launcher = L.Launcher(L.load_launch(f, {}), out=out)
    sent = []

    def kill_it():
        t_end = time.monotonic() + 20
        while f"[{name}] " not in out.getvalue() and time.monotonic() < t_end:
            time.sleep(0.02)
        os.kill(launcher.pids()[name], sig)
        sent.append(time.monotonic())

    threading.Thread(target=kill_it, daemon=True).start()
    rc = launcher.run()
    return rc, out.getvalue(), time.monotonic() - sent[0]


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "SIGKILL"])
def test_a_node_stopped_from_outside_fails_the_launch(tmp_path, fake_bin, how):
    """A node the launch did not ask to stop ends (SIGTERM / SIGINT: it exits 143 / 130, the convention; or
    SIGKILL): one line naming it and how it ended, the other nodes shut down, launch rc 1. The same node
    stopped by the launcher is a clean end (the last part)."""
    import signal

    _term_note(fake_bin)
    note = tmp_path / "note"
    rc, out, after = _run_and_signal(tmp_path, f"""
        <node pkg="p" exec="lwbc_term_note" name="rec" args="{note}"/>
        <node pkg="p" exec="lwbc_sleeper" name="sl" on_exit="shutdown"/>""", "rec", getattr(signal, how))
    assert rc == 1, out
    code = {"SIGTERM": 143, "SIGINT": 130, "SIGKILL": -9}[how]
    why = f"killed by {how} from outside" if how == "SIGKILL" else f"stopped by {how} from outside"
    line = f"process rec died with exit code {code} ({why})"
    assert out.count(line) == 1, out
    assert f"shutting down: rec {why}" in out and "[sl] got SIGINT, stopping" in out, out
    assert "process sl finished (exit code 0)" in out and f"crashed: rec (exit {code})" in out, out
    assert after < 5.0, out
    # asked by the launcher (the finisher ends the launch): 130 from the same node is clean
    rc, out = _run(tmp_path, f"""
        <node pkg="p" exec="lwbc_term_note" name="rec" args="{note}"/>
        <node pkg="p" exec="lwbc_finisher" name="fin" on_exit="shutdown"/>""")
    assert rc == 0 and "process rec finished (exit code 130)" in out and "crashed" not in out, out


def test_a_stopped_node_is_killed_within_the_bound_and_named(tmp_path, fake_bin):
    """A node that cannot stop (SIGSTOP: neither SIGINT nor SIGTERM act) is killed sigterm_timeout +
    sigkill_timeout after the shutdown began; the launch then ends, rc 1, naming it."""
    import signal
    import time

    f = tmp_path / "s.launch.xml"
    f.write_text("""<launch>
        <node pkg="p" exec="lwbc_sleeper" name="frozen" sigterm_timeout="0.5" sigkill_timeout="0.5"/>
        <node pkg="p" exec="lwbc_term_note" name="ender" args="{}" on_exit="shutdown"/></launch>""".format(
        tmp_path / "note"))
    _term_note(fake_bin)
    out = io.StringIO()
    launcher = L.Launcher(L.load_launch(f, {}), out=out)
    import threading

    marks = {}

    def freeze_then_end():
        t_end = time.monotonic() + 20
        while not ("[frozen] sleeping" in out.getvalue() and "[ender] waiting" in out.getvalue()) \
                and time.monotonic() < t_end:
            time.sleep(0.02)
        pids = launcher.pids()
        os.kill(pids["frozen"], signal.SIGSTOP)
        marks["t0"] = time.monotonic()
        os.kill(pids["ender"], signal.SIGKILL)      # a required node fails: the launch shuts down

    threading.Thread(target=freeze_then_end, daemon=True).start()
    rc = launcher.run()
    took = time.monotonic() - marks["t0"]
    text = out.getvalue()
    assert rc == 1, text
    assert "frozen still running 0.5 s after SIGINT: SIGTERM" in text and "still running after SIGTERM: SIGKILL" in text
    assert text.count("process frozen did not stop within 1 s of SIGINT and SIGTERM: killed by SIGKILL "
                      "(exit code -9)") == 1, text
    assert "crashed: " in text and "frozen (exit -9)" in text, text
    assert 1.0 <= took < 4.0, (took, text)


def test_link_secret_reaches_every_node_and_is_never_printed(tmp_path, fake_bin, monkeypatch):
    """Each launch hands its nodes one new random secret (LEGGED_WBC_LINK_SECRET, 32 bytes as hex), also
    over a value inherited from the launcher's environment; the launch's output never shows it."""
    import hashlib

    _script(fake_bin, "lwbc_secret", """\
        import hashlib, os
        s = os.environ.get("LEGGED_WBC_LINK_SECRET")
        print("secret", "unset" if s is None else f"{len(s)} {hashlib.sha256(s.encode()).hexdigest()}", flush=True)
        """)
    monkeypatch.setenv(L.LINK_SECRET_ENV, "inherited")
    f = tmp_path / "s.launch.xml"
    f.write_text('<launch><node pkg="p" exec="lwbc_secret" name="a"/><node pkg="p" exec="lwbc_secret" name="b"/>'
                 '</launch>')
    secrets = []
    for _ in range(2):
        out = io.StringIO()
        launcher = L.Launcher(L.load_launch(f, {}), out=out)
        assert launcher.run() == 0
        secret = launcher.env[L.LINK_SECRET_ENV]
        digest = hashlib.sha256(secret.encode()).hexdigest()
        text = out.getvalue()
        assert f"[a] secret 64 {digest}" in text and f"[b] secret 64 {digest}" in text, text
        assert secret not in text and int(secret, 16) >= 0
        secrets.append(secret)
    assert secrets[0] != secrets[1] and "inherited" not in secrets


def _marked(marker: str) -> dict[int, str]:
    """``{pid: command line}`` of this user's processes whose environment holds ``LWBC_TEST_MARK=marker``:
    a launch started with it and every process under it (they inherit it; a zombie shows none)."""
    want = f"LWBC_TEST_MARK={marker}".encode()
    found = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            env = Path(f"/proc/{d}/environ").read_bytes()
            cmd = Path(f"/proc/{d}/cmdline").read_bytes()
        except OSError:
            continue
        if want in env.split(b"\0"):
            found[int(d)] = cmd.replace(b"\0", b" ").decode(errors="replace").strip()
    return found


def _kill_marked(marker: str) -> None:
    """SIGKILL to every process of the test's launch still running (after a failed test)."""
    import signal

    for pid in _marked(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _left_after(marker: str, seconds: float) -> tuple[dict[int, str], float]:
    """The marked processes still running ``seconds`` from now (empty as soon as none is), and when."""
    import time

    t0 = time.monotonic()
    while (left := _marked(marker)) and time.monotonic() - t0 < seconds:
        time.sleep(0.05)
    return left, time.monotonic() - t0


def test_kill_9_of_the_launcher_stops_its_nodes(tmp_path, fake_bin):
    """``kill -9`` of ``legged-wbc launch``: its nodes get SIGTERM (their parent-death signal) and none
    is left running 5 s later (a node that ignores only SIGINT included)."""
    import signal
    import subprocess
    import uuid

    _term_note(fake_bin)
    note = tmp_path / "note"
    f = tmp_path / "s.launch.xml"
    f.write_text(f'<launch><node pkg="p" exec="lwbc_term_note" name="tn" args="{note}"/>'
                 '<node pkg="p" exec="lwbc_stubborn" name="st"/></launch>')
    marker = uuid.uuid4().hex
    env = dict(os.environ, LWBC_TEST_MARK=marker)
    proc = subprocess.Popen([sys.executable, "-m", "legged_wbc.cli", "launch", str(f)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    seen = ""
    for line in proc.stdout:
        seen += line
        if "[tn] waiting" in seen and "[st] ignoring SIGINT" in seen:
            break
    nodes = set(_marked(marker)) - {proc.pid}
    assert len(nodes) == 2, seen
    try:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        left, took = _left_after(marker, 5.0)
    finally:
        _kill_marked(marker)
    assert not left, left
    assert note.read_text() == "SIGTERM"
    print(f"no node left {took:.2f} s after kill -9 of the launcher")


def _mcap_bytes(bag: Path) -> int:
    return sum(f.stat().st_size for f in bag.glob("*.mcap")) if bag.is_dir() else 0


def _launch_recording(tmp_path, env, layout: str, bag: Path, min_bytes: int):
    """``legged-wbc launch walking_sim layout:=LAYOUT record:=BAG`` (lockstep, until stopped), once its bag
    holds ``min_bytes`` of MCAP (the walk well under way: ~3 kB a simulated millisecond)."""
    import time

    from test_ros_stack import BIN, Proc

    lp = Proc("launch", [str(BIN / "legged-wbc"), "launch", "walking_sim", f"layout:={layout}", "scenario:=paper",
                         f"record:={bag}"], env, tmp_path)
    t_end = time.monotonic() + 180
    while _mcap_bytes(bag) < min_bytes:
        assert time.monotonic() < t_end and lp.p.poll() is None, lp.text()[-3000:]
        time.sleep(0.1)
    return lp


@pytest.mark.ros
@pytest.mark.parametrize("layout", ["container", "split", "processes"])
def test_kill_9_of_the_launcher_leaves_nothing_of_the_launch_running(tmp_path, ros_env, layout):
    """``kill -9`` of ``legged-wbc launch`` while it walks and records: within 10 s no process of the launch
    is left (the nodes, the containers' recorder processes and their helpers), the bag stops growing and
    is left readable (the nodes stop as on SIGTERM and close it)."""
    import signal
    import time
    import uuid

    from test_ros_stack import read_bag

    marker = uuid.uuid4().hex
    bag = tmp_path / "bag"
    lp = _launch_recording(tmp_path, dict(ros_env, LWBC_TEST_MARK=marker), layout, bag, 1 << 20)
    try:
        before = _marked(marker)
        os.kill(lp.p.pid, signal.SIGKILL)
        lp.p.wait(10)
        left, took = _left_after(marker, 10.0)
        size = _mcap_bytes(bag)
        time.sleep(1.0)
        grew = _mcap_bytes(bag) - size
    finally:
        _kill_marked(marker)
        lp._fh.close()
    assert len(before) >= (3 if layout != "processes" else 5), before   # launcher, node(s), recorder process
    assert not left, (left, lp.text()[-3000:])
    assert grew == 0
    topics = read_bag(bag)
    n = sum(len(v) for v in topics.values())
    assert (bag / "metadata.yaml").is_file() and len(topics["/joint_states"]) > 300, lp.text()[-3000:]
    print(f"{layout}: {len(before) - 1} processes under the launcher, none left {took:.2f} s after kill -9; "
          f"bag {size} B, readable, {n} messages")


@pytest.mark.ros
@pytest.mark.parametrize("layout,node", [("processes", "bag_recorder"), ("container", "walking_container"),
                                         ("split", "sim_container")])
def test_sigterm_from_outside_to_a_node_fails_the_launch(tmp_path, ros_env, layout, node):
    """SIGTERM to one of the launch's nodes from outside (not the launcher): the node stops as on SIGTERM
    (its bag closed), exits 143, and the launch shuts the rest down and exits 1 with one line naming it."""
    import signal

    bag = tmp_path / "bag"
    lp = _launch_recording(tmp_path, ros_env, layout, bag, 256 << 10)
    try:
        pid = int(lp.wait_for(rf"started {node} \[pid (\d+)\]").group(1))
        os.kill(pid, signal.SIGTERM)
        rc = lp.wait(120)
    finally:
        lp.stop()
    out = lp.text()
    assert rc == 1, out[-3000:]
    assert out.count(f"process {node} died with exit code 143 (stopped by SIGTERM from outside)") == 1, out[-3000:]
    # the split's control part may end first (its peer said bye) and be the shutdown's reason: the
    # launcher's SIGINT to the sim part then does not hide the SIGTERM that stopped it
    assert f"shutting down: {node} stopped by SIGTERM from outside" in out or layout == "split"
    assert (bag / "metadata.yaml").is_file(), out[-3000:]


# ------------------------------------------------------------------------------------ ros_io
def test_ros_io_conversions():
    names = ["a", "b", "c"]
    m = ros_io.joint_state_msg(1_234_000_000, names, [1, 2, 3], [4, 5, 6], [7, 8, 9])
    assert ros_io.stamp_ns(m) == 1_234_000_000 and ros_io.tick_from_stamp(m.header.stamp) == 617
    assert ros_io.tick_from_stamp(1_233_000_000) is None
    # reordering by name
    order = ros_io.JointOrder(["c", "a", "b"])
    p, v, e = order.arrays(m)
    assert p.tolist() == [3, 1, 2] and v.tolist() == [6, 4, 5] and e.tolist() == [9, 7, 8]
    with pytest.raises(ValueError, match="lacks joints"):
        ros_io.JointOrder(["a", "zz"]).arrays(m)
    # IMU quaternion x, y, z, w
    imu = ros_io.imu_msg(0, "base_link", [0.1, 0.2, 0.3, 0.9], [1, 2, 3], [4, 5, 6])
    assert (imu.orientation.x, imu.orientation.w) == (0.1, 0.9)
    q, w, a = ros_io.imu_arrays(imu)
    assert q.tolist() == [0.1, 0.2, 0.3, 0.9] and w.tolist() == [1, 2, 3] and a.tolist() == [4, 5, 6]
    # odometry: pose world, twist base
    qf = np.array([1, 2, 3, 0, 0, 0.6, 0.8] + [0] * 3)
    vf = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6] + [0] * 3)
    od = ros_io.odometry_msg(5, qf, vf, child_frame_id="base_link")
    assert od.header.frame_id == "world" and od.child_frame_id == "base_link"
    qb, vb = ros_io.odometry_arrays(od)
    assert np.allclose(qb, qf[:7]) and np.allclose(vb, vf[:6])
    # torque command protocol: JointState, tick by stamp, joints by name (any order)
    P = ros_io.CONTROL_PERIOD_NS
    dec = ros_io.TorqueCommandDecoder(["a", "b", "c"])
    cmd = ros_io.torque_command_msg(42 * P, ["a", "b", "c"], [1.0, -2.0, 3.0])
    assert list(cmd.name) == ["a", "b", "c"] and np.isnan(cmd.position).all() and np.isnan(cmd.velocity).all()
    from rclpy.serialization import serialize_message
    from rosbags.typesys import Stores, get_typestore

    back = get_typestore(Stores.ROS2_HUMBLE).deserialize_cdr(serialize_message(cmd), "sensor_msgs/msg/JointState")
    assert back.effort.tolist() == [1.0, -2.0, 3.0] and back.header.stamp.nanosec == 84_000_000  # a bag reads it
    tc = dec.decode(cmd)
    assert tc.tick == 42 and tc.tau.tolist() == [1.0, -2.0, 3.0]
    tc = dec.decode(ros_io.torque_command_msg(43 * P, ["c", "a", "b"], [3.0, 1.0, -2.0]))
    assert tc.tick == 43 and tc.tau.tolist() == [1.0, -2.0, 3.0]           # mapped by name
    tc = dec.decode(ros_io.torque_command_msg(44 * P, ["a", "b", "c"], [4.0, 5.0, 6.0]))
    assert tc.tau.tolist() == [4.0, 5.0, 6.0]                              # the cached order follows the message
    for (stamp, names, eff), kind in (((P, ["a", "b"], [1, 2]), "names"), ((P, ["a", "b", "b"], [1, 2, 3]), "names"),
                                      ((P, ["a", "b", "x"], [1, 2, 3]), "names"), ((P, ["a", "b", "c"], [1, 2]), "length"),
                                      ((P, ["a", "b", "c"], [1, np.nan, 3]), "nonfinite"),
                                      ((P + 1_000_000, ["a", "b", "c"], [1, 2, 3]), "tick")):
        m = ros_io.torque_command_msg(stamp, ["a", "b", "c"], [0.0, 0.0, 0.0])
        m.name, m.effort = names, [float(x) for x in eff]
        with pytest.raises(ros_io.CommandError) as ei:
            dec.decode(m)
        assert ei.value.kind == kind, (names, eff, ei.value)
    untimed = ros_io.TorqueCommandDecoder(["a", "b", "c"], timed=False)
    assert untimed.decode(ros_io.torque_command_msg(P + 1_000_000, ["a", "b", "c"], [0, 0, 0])).tick == ros_io.UNTIMED_TICK
    diag = ros_io.diagnostics_msg({"x": 1.0, "y": 2.0})
    assert ros_io.diagnostics_dict(diag) == {"x": 1.0, "y": 2.0}
    c = ros_io.contacts_msg([True, False], ["lf", "rf"])
    assert ros_io.array_label(c) == "foot_contact_0or1[lf,rf]" and list(c.data) == [1.0, 0.0]


# ------------------------------------------------------------------------------------ ros_params
@dataclass(frozen=True)
class _DemoConfig:
    """A config class for the declaration tests (the real ones: tests in test_params.py)."""

    gain: float = param(1.0, 0.0, 10.0, "a gain", unit="N m/rad")
    mode: str = param("a", desc="mode", choices=("a", "b"))
    w: tuple = param((0.5, 0.5), 0.0, 1.0, "weights")
    name: str = param("x", desc="a name")
    names: tuple = param((), desc="names", type="str_array")
    ro: int = param(1, 0, 10, "fixed", live=False)


def test_param_spec_validation():
    """Descriptors and the one validator, from a config dataclass's field specs."""
    from legged_wbc.robot import ConfigError
    from legged_wbc.ros.nodekit.params import ParameterSchemaError, descriptor, normalize_schema

    specs = {s.name: s for s in normalize_schema(_DemoConfig)}
    s = specs["gain"]
    assert s.type == "float" and s.coerce(5) == 5.0 and isinstance(s.coerce(5), float)
    for bad, why in ((11.0, r"gain: 11.0 out of range \[0, 10\]"), (float("nan"), "finite"),
                     (True, "expected a number")):
        with pytest.raises(ConfigError, match=why):
            s.coerce(bad)
    d = descriptor(s)
    assert d.floating_point_range[0].from_value == 0.0 and d.floating_point_range[0].to_value == 10.0
    assert "N m/rad" in d.description and not d.read_only
    with pytest.raises(ConfigError, match="must be one of 'a', 'b'"):
        specs["mode"].coerce("c")
    assert "one of: a, b" in descriptor(specs["mode"]).additional_constraints
    assert specs["w"].type == "float_array"
    with pytest.raises(ConfigError, match=r"w\[1\]"):
        specs["w"].coerce([0.5, 2.0])
    assert descriptor(specs["ro"]).read_only and descriptor(specs["ro"]).integer_range[0].to_value == 10
    with pytest.raises(ParameterSchemaError, match="config dataclass"):
        normalize_schema([s])


@pytest.mark.ros
def test_node_parameters_live_updates():
    import rclpy
    from rclpy.parameter import Parameter

    from legged_wbc.ros.nodekit.params import NodeParameters, ParameterSchemaError

    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=domain_id(),
               args=["--ros-args", "-p", "gain:=3", "-p", "name:=42"])
    try:
        node = rclpy.create_node("lwbc_param_test", context=ctx)
        changes = []
        P = NodeParameters(node, _DemoConfig, on_change=lambda cfg, names: changes.append((cfg.gain, names)))
        assert P.config.gain == 3.0 and P.config.name == "42" and P.config.names == ()   # int -> float, int -> str
        assert P.values["gain"] == 3.0 and P.values["names"] == []
        r = node.set_parameters([Parameter("gain", value=20.0)])[0]
        assert not r.successful and "gain" in r.reason and "10" in r.reason
        assert P.config.gain == 3.0 and changes == []
        assert node.set_parameters([Parameter("gain", value=7.5)])[0].successful
        assert P.config.gain == 7.5 and changes == [(7.5, ["gain"])]
        r = node.set_parameters([Parameter("ro", value=2)])[0]
        assert not r.successful and "read-only" in r.reason and "ro" in r.reason
        node.destroy_node()
        bad = rclpy.create_node("lwbc_param_test2", context=ctx, parameter_overrides=[Parameter("gain", value=50.0)])
        with pytest.raises(ParameterSchemaError, match="gain"):
            NodeParameters(bad, _DemoConfig)
        bad.destroy_node()
    finally:
        rclpy.shutdown(context=ctx)


def test_recorder_loads_message_definitions_from_installed_msg_files():
    """Types missing from rosbags' store are read from the installed .msg files, with the same hash."""
    from rosbags.typesys import Stores, get_typestore

    from legged_wbc.ros.recording.bag_writer import ensure_type

    empty, kilted = get_typestore(Stores.EMPTY), get_typestore(Stores.ROS2_KILTED)
    for t in ("sensor_msgs/msg/JointState", "nav_msgs/msg/Odometry", "std_msgs/msg/Float64MultiArray"):
        ensure_type(empty, t)
        assert empty.hash_rihs01(t) == kilted.hash_rihs01(t)
        assert empty.generate_msgdef(t, ros_version=2) == kilted.generate_msgdef(t, ros_version=2)
    with pytest.raises(KeyError, match="no message definition"):
        ensure_type(empty, "no_such_pkg/msg/Nothing")


def test_scenario_disturbance_hook_is_gated_and_held_per_tick(hexapod):
    """The bridge's disturbance hook: the scenario's DisturbanceModel, evaluated at control ticks with
    the estimated support of that tick, held over the tick's physics steps."""
    from types import SimpleNamespace

    from legged_wbc.scenario import DisturbanceModel, load_scenario
    from mujoco_bridge.node import ScenarioDisturbance
    from mujoco_bridge.sim import MujocoSim

    sc = load_scenario("paper")
    sim = MujocoSim(hexapod)
    sim.reset(hexapod.stance_configuration())
    support = {}
    node = SimpleNamespace(robot=hexapod, steps_per_tick=2, step_count=0,
                           support_estimate=lambda k: support.get(k))
    fn = ScenarioDisturbance(DisturbanceModel(sc, hexapod), node)
    t_in = sc.disturbance.start + 0.1
    assert np.all(fn(t_in, sim) == 0.0)                      # no support estimate yet -> not in support
    support[0] = np.ones(hexapod.n_legs, dtype=bool)
    tau = fn(t_in, sim)
    leg = hexapod.cfg.leg_names.index(sc.disturbance.leg)
    assert np.isclose(np.linalg.norm(tau), sc.disturbance.torque_nm)
    assert np.count_nonzero(tau) <= 4 and np.all(tau[np.setdiff1d(np.arange(hexapod.n), hexapod.leg_joints[leg])] == 0)
    node.step_count = 1                                      # between ticks: held
    support[0] = np.zeros(hexapod.n_legs, dtype=bool)
    assert np.array_equal(fn(t_in, sim), tau)
    node.step_count = 2                                      # next tick, leg in swing: zero
    support[1] = np.zeros(hexapod.n_legs, dtype=bool)
    assert np.all(fn(t_in, sim) == 0.0)
    node.step_count = 4
    support[2] = np.ones(hexapod.n_legs, dtype=bool)
    assert np.all(fn(sc.disturbance.start - 0.01, sim) == 0.0)  # outside the window


def test_bridge_physics_checks_a_new_disturbance_and_holds_a_returned_one(hexapod):
    """BridgePhysics: each new array of ``disturbance_fn`` is checked (a bad one logged and zeroed) and
    applied; the same array returned again stays applied; None is zero."""
    from mujoco_bridge.scenario_setup import BridgePhysics
    from mujoco_bridge.sim import MujocoSim

    sim = MujocoSim(hexapod)
    sim.reset(hexapod.stance_configuration())
    errors, out = [], {}
    log = type("Log", (), {"error": lambda self, text, **kw: errors.append(text)})()
    phys = BridgePhysics(sim, hexapod.n, log, lambda t, s: out["dist"])
    tau = np.zeros(hexapod.n)
    a = np.full(hexapod.n, 0.5)
    out["dist"] = a
    phys.step(tau, 0)
    assert np.array_equal(phys.dist_applied, a) and np.array_equal(sim.disturbance, a) and not errors
    phys.step(tau, 1)                                         # the same array: held
    assert np.array_equal(sim.disturbance, a)
    out["dist"] = np.full(hexapod.n, np.nan)                  # a new, bad one: zero, said
    phys.step(tau, 2)
    assert np.all(phys.dist_applied == 0.0) and np.all(sim.disturbance == 0.0) and len(errors) == 1
    out["dist"] = b = np.arange(hexapod.n, dtype=float)
    phys.step(tau, 3)
    assert np.array_equal(sim.disturbance, b)
    out["dist"] = None                                        # none: zero
    phys.step(tau, 4)
    assert np.all(sim.disturbance == 0.0) and np.all(phys.dist_applied == 0.0)
    assert sim.time == pytest.approx(0.005)


def test_joint_order_rejects_duplicates_and_implausible_states():
    from legged_wbc.model import RobotModel

    rm = RobotModel("hexapod")
    order = ros_io.JointOrder(rm.joint_names, bounds=ros_io.joint_bounds(rm))
    q = rm.stance_configuration(0.3)[7:]
    ok = ros_io.joint_state_msg(0, rm.joint_names, q, np.zeros(24), np.zeros(24))
    pos, vel, _ = order.arrays(ok)
    assert np.array_equal(pos, q)
    dup = ros_io.joint_state_msg(0, list(rm.joint_names) + [rm.joint_names[2]], np.append(q, 1e6),
                                 np.zeros(25), np.zeros(25))
    with pytest.raises(ValueError, match=rf"\['{rm.joint_names[2]}'\] more than once"):
        order.arrays(dup)
    far = q.copy()
    far[7] = rm.upper[7] + 1000.5                            # beyond the 1000 rad margin
    with pytest.raises(ValueError, match=f"joint {rm.joint_names[7]} position .* far outside its limits"):
        order.arrays(ros_io.joint_state_msg(0, rm.joint_names, far, np.zeros(24), np.zeros(24)))
    near = q.copy()
    near[7] = rm.upper[7] + 200.0                            # WBC-0's spinning foot link (sim has no limits)
    order.arrays(ros_io.joint_state_msg(0, rm.joint_names, near, np.zeros(24), np.zeros(24)))
    # every joint inside its bounds but all near them (the quick test's norm is > 1: the exact test passes it)
    edge = 0.5 * (rm.lower + rm.upper) + 0.95 * (0.5 * (rm.upper - rm.lower) + 1000.0)
    edge_v = np.full(24, 0.95 * 100.0 * 12.0)               # every joint is a leg joint (12 rad/s)
    pos, vel, _ = order.arrays(ros_io.joint_state_msg(0, rm.joint_names, edge, edge_v, np.zeros(24)))
    assert np.array_equal(pos, edge) and np.array_equal(vel, edge_v)
    fast = np.zeros(24)
    fast[4] = 100.0 * 12.0 + 1.0
    with pytest.raises(ValueError, match="velocity .* exceeds 100x its limit 12 rad/s"):
        order.arrays(ros_io.joint_state_msg(0, rm.joint_names, q, fast, np.zeros(24)))
    # without bounds (the leg-name messages), only duplicates are refused
    legs = ros_io.JointOrder(["a", "b"])
    assert legs.arrays(ros_io.joint_state_msg(0, ["b", "a"], [1e6, 2.0], [0, 0], [0, 0]))[0].tolist() == [2.0, 1e6]


def test_all_finite_known_answers_and_nan_positions_are_not_plausibility_errors():
    """The nodes' input check: every value finite, across several arrays; a NaN, +inf, -inf or
    +inf in one array and -inf in another is caught; huge finite values are finite (the fast test's
    square overflows beyond 1e154: the exact one decides)."""
    f = ros_io.all_finite
    assert f(np.zeros(24), np.ones(3)) and f() and f(np.zeros(0))
    for bad in (np.nan, np.inf, -np.inf):
        a = np.zeros(24)
        a[5] = bad
        assert not f(np.zeros(3), a)
    assert not f(np.array([np.inf]), np.array([-np.inf]))
    assert f(np.array([1.7e308, 1.7e308])) and f(np.array([1e200]), [1.0, 2.0])
    assert not f(np.array([1e200, np.nan])) and not f(np.array([[0.0, np.inf]]))
    # a NaN position is left to the finiteness check (not reported as out of range)
    from legged_wbc.model import RobotModel

    rm = RobotModel("hexapod")
    order = ros_io.JointOrder(rm.joint_names, bounds=ros_io.joint_bounds(rm))
    q = rm.stance_configuration(0.3)[7:].copy()
    q[3] = np.nan
    pos, vel, eff = order.arrays(ros_io.joint_state_msg(0, rm.joint_names, q, np.zeros(24), np.zeros(24)))
    assert np.isnan(pos[3]) and not f(pos, vel, eff)


@dataclass(frozen=True)
class _ArraysConfig:
    topics: tuple = param((), desc="t", type="str_array")
    w: tuple = param((), desc="w", type="float_array", variable_length=True)


@pytest.mark.ros
def test_empty_array_parameters_without_a_file():
    """An empty-list default (the recorder's `topics`) is a usable, typed parameter without any file."""
    import rclpy
    from rclpy.context import Context
    from rclpy.parameter import Parameter

    from legged_wbc.ros.nodekit.params import NodeParameters

    ctx = Context()
    rclpy.init(context=ctx)
    try:
        n = rclpy.create_node("empty_arrays", context=ctx)
        P = NodeParameters(n, _ArraysConfig)
        assert P["topics"] == [] and P["w"] == [] and list(n.get_parameter("topics").value) == []
        assert n.get_parameter("topics").type_ == Parameter.Type.STRING_ARRAY
        n2 = rclpy.create_node("given_arrays", context=ctx,
                               parameter_overrides=[Parameter("topics", value=["/a", "/b"])])
        assert NodeParameters(n2, _ArraysConfig).config.topics == ("/a", "/b")
        n.destroy_node()
        n2.destroy_node()
    finally:
        rclpy.shutdown(context=ctx)
