"""Typed parameter files: a value of a type the parameter does not take is one line naming the node,
the parameter, the expected and the given type, exit status 2, nothing started: under ``legged-wbc
launch`` (its check before anything starts) and in the nodes themselves (what ``ros2 launch`` and a
node started by hand rely on). An integer for a double is taken, as rclcpp does. Values are typed as
rcl types them (checked against rcl itself). A parameter file the bounded reader refuses (size, depth,
aliases, encoding, not a mapping, not a regular file) is one line too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from legged_wbc.cli import main
from legged_wbc.ros.nodekit.params import file_parameters

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
DEFAULTS = [ROOT / "config" / f for f in ("mujoco_bridge.yaml", "estimator.yaml", "wbc_controller.yaml")]

# (node, body under ros__parameters, the line's tail after "params file F: ")
WRONG = [
    ("wbc_controller", 'k_dtheta: "fast"', "wbc_controller: parameter k_dtheta: expected a double, given a string ('fast')"),
    ("wbc_controller", "kp_b: [1.0, 2.0]", "wbc_controller: parameter kp_b: expected a double, given a double array "
                                           "('[1.0, 2.0]')"),
    ("wbc_controller", "theta_max: true", "wbc_controller: parameter theta_max: expected a double, given a bool ('true')"),
    ("wbc_controller", "solver_max_iter: 50.0", "wbc_controller: parameter solver_max_iter: expected an integer, "
                                                "given a double ('50.0')"),
    ("wbc_controller", 'cbf_slack: "yes"', "wbc_controller: parameter cbf_slack: expected a bool, given a string ('yes')"),
    ("wbc_controller", "null_space_compensation: 1", "wbc_controller: parameter null_space_compensation: expected a "
                                                     "bool, given an integer ('1')"),
    ("state_estimator", 'touchdown:\n      gamma_land: "x"', "state_estimator: parameter touchdown.gamma_land: "
                                                              "expected a double, given a string ('x')"),
    ("state_estimator", "touchdown:\n      n_land: 2.5", "state_estimator: parameter touchdown.n_land: expected an "
                                                         "integer, given a double ('2.5')"),
    ("wbc_controller", "kp_pos: [a, b, c]", "wbc_controller: parameter kp_pos: expected a double array, given a "
                                            "string array ('[a, b, c]')"),
    ("wbc_controller", "kp_pos: 100.0", "wbc_controller: parameter kp_pos: expected a double array, given a double "
                                        "('100.0')"),
    ("wbc_controller", "kp_pos: [1, 2.5, 3]", "wbc_controller: parameter kp_pos: expected a double array, given a "
                                              "mixed array (integer, double) ('[1, 2.5, 3]')"),
    ("/**", "qos_depth: 1.5", None),          # a wildcard: the first node of the launch that declares it
    ("wbc_controller", "k_dtheta:", "wbc_controller: parameter k_dtheta: expected a double, given no value "
                                    "(ROS refuses an empty value)"),
]


def _file(tmp_path: Path, node: str, body: str, name: str = "mine.yaml") -> Path:
    f = tmp_path / name
    f.write_text(f"{node}:\n  ros__parameters:\n    {body}\n")
    return f


@pytest.mark.parametrize("node,body,line", WRONG, ids=[f"{n}:{b.split(':')[0]}" for n, b, _ in WRONG])
def test_a_wrongly_typed_value_stops_the_launch_in_one_line(tmp_path, capsys, node, body, line):
    f = _file(tmp_path, node, body)
    for layout in ("container", "processes"):
        rc = main(["launch", "walking_sim", f"layout:={layout}", f"params_file:={f}", "--dry-run"])
        out, err = capsys.readouterr()
        assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1, (rc, out, err)
        if line is not None:
            assert err.strip() == f"legged-wbc launch: params file {f}: {line}"
        else:
            assert err.startswith(f"legged-wbc launch: params file {f}: /** (") and \
                "parameter qos_depth: expected an integer, given a double ('1.5')" in err


def test_an_integer_for_a_double_is_taken(tmp_path, capsys, ros_env):
    f = _file(tmp_path, "wbc_controller", "k_dtheta: 12")
    assert main(["launch", "walking_sim", f"params_file:={f}", "--dry-run"]) == 0
    assert f"--params-file {f} " in capsys.readouterr().out
    # the node takes it as 12.0, after the defaults' file (rcl keeps the integer: converted)
    code = ("import sys, rclpy; from rclpy.node import Node; rclpy.init(args=sys.argv)\n"
            "from legged_wbc.ros.nodekit.params import NodeParameters\n"
            "from wbc_controller.config import WbcNodeConfig\n"
            "from wbc_controller.node import scenario_overrides\n"
            "n = Node('wbc_controller'); P = NodeParameters(n, WbcNodeConfig, startup=scenario_overrides)\n"
            "print(repr(P.config.wbc.k_dtheta), repr(n.get_parameter('k_dtheta').value))\n")
    r = subprocess.run([sys.executable, "-c", code, "--ros-args", "--params-file", str(DEFAULTS[2]),
                        "--params-file", str(f), "-p", "scenario:=nominal"], env=ros_env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.split() == ["12.0", "12.0"], r.stderr[-2000:]


@pytest.mark.parametrize("exe,node,body,line", [
    ("walking_container", "wbc_controller", 'k_dtheta: "fast"', WRONG[0][2]),
    ("wbc_controller", "wbc_controller", "solver_max_iter: 50.0", WRONG[3][2]),
    ("state_estimator", "state_estimator", 'touchdown:\n      gamma_land: "x"', WRONG[6][2]),
])
def test_the_nodes_refuse_it_themselves(tmp_path, ros_env, exe, node, body, line):
    """As ``ros2 launch`` starts them: the defaults' files, then the user's (rcl keeps the first file's
    double for ``"fast"``: only the node reading its files sees the string)."""
    f = _file(tmp_path, node, body)
    args = [a for d in DEFAULTS for a in ("--params-file", str(d))]
    r = subprocess.run([str(BIN / exe), "--ros-args", *args, "--params-file", str(f), "-p", "duration:=0.5",
                        "-p", "use_sim_time:=true"] if exe == "walking_container" else
                       [str(BIN / exe), "--ros-args", *args, "--params-file", str(f)],
                       env=ros_env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, (r.returncode, r.stderr[-2000:])
    assert r.stderr.strip().splitlines()[-1] == f"{exe}: params file {f}: {line}"
    assert "ticks run" not in r.stdout + r.stderr


def test_a_real_launch_starts_nothing(tmp_path, ros_env):
    f = _file(tmp_path, "wbc_controller", 'k_dtheta: "fast"')
    r = subprocess.run([sys.executable, "-m", "legged_wbc.cli", "launch", "walking_sim", "layout:=processes",
                        "duration:=1", f"params_file:={f}"], env=ros_env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "[launch] started" not in r.stdout
    assert r.stderr.strip() == f"legged-wbc launch: params file {f}: {WRONG[0][2]}"


def test_values_are_typed_as_rcl_types_them(tmp_path, ros_env):
    body = {"a": "1e5", "b": "yes", "c": '"on"', "d": "on", "e": "0x10", "f": ".inf", "g": "Y", "h": "010",
            "i": "1_000", "j": "nan", "k": "'true'", "l": "[1, 2]", "m": "[1.5, 2.5]", "n": "!!str 5", "o": "5.",
            "p": "+3", "q": "~", "r": "inf", "s": "1:30", "t": "08", "u": "-0.5e-3", "v": "[a, 'b']",
            "w": "[true, false]", "x": "[]", "y": "99999999999999999999"}
    f = tmp_path / "types.yaml"
    f.write_text("x:\n  ros__parameters:\n" + "".join(f"    {k}: {v}\n" for k, v in body.items()))
    ours = {k: t for k, (t, _) in file_parameters(str(f))["x"].items()}
    code = ("import sys, json, rclpy; from rclpy.node import Node; rclpy.init(args=sys.argv)\n"
            "print(json.dumps({k: p.type_.name for k, p in Node('x')._parameter_overrides.items()}))\n")
    r = subprocess.run([sys.executable, "-c", code, "--ros-args", "--params-file", str(f)], env=ros_env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    rcl = {k: ("empty array" if t == "NOT_SET" else t.lower().replace("_", " ")) for k, t in
           json.loads(r.stdout.strip().splitlines()[-1]).items()}
    assert ours == rcl


def _bad_files(d: Path) -> dict[str, str]:
    """name -> the line's tail after "params file PATH: " (or after "parameter file PATH ")."""
    (d / "deep.yaml").write_text("wbc_controller:\n  ros__parameters:\n    a: " + "[" * 3000 + "]" * 3000 + "\n")
    (d / "anchors.yaml").write_text("wbc_controller:\n  ros__parameters: &p\n    k_dtheta: 10.0\n"
                                    "state_estimator:\n  ros__parameters: *p\n")
    (d / "binary.yaml").write_bytes(bytes(range(256)) * 4)
    (d / "latin1.yaml").write_bytes("wbc_controller:\n  ros__parameters:\n    scenario: 'caf\xe9'\n".encode("latin-1"))
    (d / "list.yaml").write_text("- wbc_controller\n- 1\n")
    (d / "big.yaml").write_text("wbc_controller:\n  ros__parameters:\n" + "    # padding\n" * 200_000)
    os.mkfifo(d / "fifo.yaml")
    (d / "dir.yaml").mkdir()
    return {"deep.yaml": "YAML nested too deeply",
            "anchors.yaml": "YAML anchors / aliases (&name, *name): ROS's parameter file reader does not take them; "
                            "write the values out",
            "binary.yaml": "not UTF-8 text (byte 0x80 at offset 128): not a YAML file",
            "latin1.yaml": "not UTF-8 text (byte 0xe9 at offset 53): not a YAML file",
            "list.yaml": "not a parameters file (a mapping of node names to ros__parameters)",
            "big.yaml": "larger than 1048576 bytes, the most a YAML input may be",
            "fifo.yaml": "is not a regular file", "dir.yaml": "is not a regular file"}


def test_a_parameter_file_the_reader_refuses_is_one_line(tmp_path, capsys):
    for name, why in _bad_files(tmp_path).items():
        f = tmp_path / name
        rc = main(["launch", "walking_sim", f"params_file:={f}", "--dry-run"])
        out, err = capsys.readouterr()
        assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1, (name, rc, out, err)
        assert err.strip().endswith(f"{f}: {why}") or err.strip().endswith(f"{f} {why}"), (name, err)


def test_bad_launch_arguments_are_one_line_before_anything_starts(tmp_path, capsys):
    """Numeric arguments through the parameter's own validator, ``record:=`` where nothing can be
    written, a 5,000-digit integer in a scenario, a FIFO as ``robot:=``."""
    sc = tmp_path / "huge.yaml"
    sc.write_text((ROOT / "config" / "scenarios" / "nominal.yaml").read_text().replace("seed: 0", "seed: " + "9" * 5000))
    assert "9" * 5000 in sc.read_text()
    fifo = tmp_path / "robot.yaml"
    os.mkfifo(fifo)
    (tmp_path / "there").mkdir()
    (tmp_path / "file").write_text("x")
    cases = {
        "duration:=-1": "duration:=-1 (mujoco_bridge): duration: -1.0 out of range [0, 1e+07]",
        "duration:=abc": "duration:=abc (mujoco_bridge): duration: expected a number, got 'abc'",
        "max_command_age_ticks:=2.5": "max_command_age_ticks:=2.5 (mujoco_bridge): max_command_age_ticks: expected "
                                      "an integer, got 2.5",
        "watchdog_timeout:=0": "watchdog_timeout:=0 (mujoco_bridge): watchdog_timeout: 0.0 out of range [0.001, 3600]",
        f"record:={tmp_path / 'there'}": "exists already (a bag is written into a new directory; rosbag2 never "
                                         "overwrites one)",
        f"record:={tmp_path / 'file' / 'bag'}": f"{tmp_path / 'file'} is not a directory",
        "record:=/proc/no/bag": "cannot create a directory in /proc",
        f"scenario:={sc}": f"{sc}: a value YAML cannot convert (Exceeds the limit (4300 digits) for integer string "
                           "conversion)",
        f"robot:={fifo}": f"{fifo}: not a regular file",
    }
    for arg, why in cases.items():
        for layout in ("container", "processes"):
            rc = main(["launch", "walking_sim", f"layout:={layout}", arg, "--dry-run"])
            out, err = capsys.readouterr()
            assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1, (arg, rc, out, err)
            assert err.startswith("legged-wbc launch: ") and why in err, (arg, err)
    assert not any(p.name.startswith(".legged-wbc-record-check-") for p in tmp_path.iterdir())
    rc = main(["launch", "walking_sim", f"record:={tmp_path / 'new' / 'bag'}", "duration:=5", "--dry-run"])
    assert rc == 0 and not (tmp_path / "new").exists()


@pytest.mark.parametrize("layout", ["container", "split", "processes"])
def test_good_launch_arguments_pass_the_check(capsys, layout):
    """A value is checked against the nodes the process runs: with ``controller:=external`` no
    controller is composed, so its ``relative_pitch_mode:=external`` is no refusal."""
    for args in (["controller:=external"], ["controller:=none", "duration:=3", "mode:=realtime"],
                 ["robot:=quadruped", "scenario:=quadruped_trot", "max_command_age_ticks:=-1", "chain:=false"]):
        assert main(["launch", "walking_sim", f"layout:={layout}", *args, "--dry-run"]) == 0, capsys.readouterr().err
        capsys.readouterr()


@pytest.mark.parametrize("exe", ["walking_container", "wbc_controller"])
def test_a_node_given_a_file_rcl_cannot_read_says_why_in_one_line(tmp_path, ros_env, exe):
    """Under ``ros2 launch`` (no check first): rcl refuses the file; the node names the cause, rc 2, no
    traceback (rcl logs its own ``Failed to parse global arguments`` before)."""
    bad = _bad_files(tmp_path)
    for name in ("anchors.yaml", "list.yaml"):
        f = tmp_path / name
        r = subprocess.run([str(BIN / exe), "--ros-args", "--params-file", str(f)], env=ros_env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and "Traceback" not in r.stderr, (r.returncode, r.stderr[-2000:])
        assert r.stderr.strip().splitlines()[-1] == f"{exe}: params file {f}: {bad[name]}"
