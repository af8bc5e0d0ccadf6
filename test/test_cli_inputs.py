"""Every command answers a bad input with one line that names the option or file, and exit status 2
(table-driven: a new option gets a row here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from legged_wbc.cli import main


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad_inputs")
    (d / "syntax.yaml").write_text("scenario:\n  name: x\n  duration: [1, 2\n")
    (d / "nomapping.yaml").write_text("- just\n- a list\n")
    (d / "robot_syntax.yaml").write_text("name: r\nlegs: {a: 1\n")
    (d / "empty_dir").mkdir()
    paper = (Path(__file__).resolve().parents[1] / "config/scenarios/paper.yaml").read_text()
    # a billion laughs: 9 aliases of 9 aliases ... 9 levels deep (9^9 strings once expanded)
    laughs = ['  lol0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    laughs += [f"  lol{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    (d / "laughs.yaml").write_text(paper + "\n".join(laughs) + "\n")
    (d / "binary.yaml").write_bytes(bytes(range(256)) * 8)
    for name, old, new in (("nan", "min_height: 0.22", "min_height: .nan"), ("negwin", "window: 46.0", "window: -46"),
                           ("huge", "torque_nm: 3.0", "torque_nm: 1.0e+308"), ("typo", "leg: lh", "legg: lh"),
                           ("delay", "duration: 52.0 ", "duration: 52.0\n  command_delay_ticks: 1.0e+9\n#")):
        assert old in paper, old
        (d / f"{name}.yaml").write_text(paper.replace(old, new, 1))
    robot = (Path(__file__).resolve().parents[1] / "config/robot_hexapod.yaml").read_text()
    (d / "robot_typo.yaml").write_text(robot.replace("coxa_length:", "coxa_lenght:", 1))
    (d / "robot_inf.yaml").write_text(robot.replace("mass: 55.0", "mass: .inf", 1))
    (d / "a_file").write_text("not a directory\n")
    return d


CASES = [
    # (argv with {d} for the fixture directory, fragment the one line must contain)
    (["run", "--duration", "-5", "--out", "{d}/o"], "argument --duration: must be > 0, got -5"),
    (["run", "--duration", "0", "--out", "{d}/o"], "argument --duration: must be > 0, got 0"),
    (["run", "--duration", "abc", "--out", "{d}/o"], "argument --duration: expected a number, got 'abc'"),
    (["run", "--duration", "inf", "--out", "{d}/o"], "argument --duration: must be finite"),
    (["run", "--controller", "pid", "--out", "{d}/o"], "argument --controller: invalid choice"),
    (["run", "--scenario", "{d}/syntax.yaml", "--out", "{d}/o"], "syntax.yaml: line 4, column 1: YAML syntax error"),
    (["run", "--scenario", "{d}/nomapping.yaml", "--out", "{d}/o"], "nomapping.yaml: not a scenario file"),
    (["run", "--scenario", "nonexistent", "--out", "{d}/o"], "scenario 'nonexistent' not found"),
    (["run", "--set", "foo", "--out", "{d}/o"], "--set 'foo': expected key=value"),
    (["run", "--set", "nosuch.key=1", "--out", "{d}/o"], "--set nosuch.key: no such scenario key"),
    # scenario files: the checks of --set, the bounded YAML loader
    (["run", "--scenario", "{d}/laughs.yaml", "--out", "{d}/o"], "laughs.yaml: refused: more than 100000 nodes"),
    (["run", "--scenario", "{d}/binary.yaml", "--out", "{d}/o"], "binary.yaml: not UTF-8 text (byte 0x80 at offset 128)"),
    (["run", "--scenario", "{d}/nan.yaml", "--out", "{d}/o"], "nan.yaml: scenario.fall.min_height: must be finite"),
    (["run", "--scenario", "{d}/negwin.yaml", "--out", "{d}/o"],
     "negwin.yaml: scenario.evaluation.window: -46.0 out of range [0, 86400]"),
    (["run", "--scenario", "{d}/huge.yaml", "--out", "{d}/o"], "scenario.disturbance.torque_nm: 1e+308 out of range"),
    (["run", "--scenario", "{d}/delay.yaml", "--out", "{d}/o"],
     "delay.yaml: scenario.command_delay_ticks: must be an integer >= 0 and <= 500, got 1000000000.0"),
    (["run", "--scenario", "{d}/typo.yaml", "--out", "{d}/o"],
     "typo.yaml: scenario.disturbance.legg: no such scenario key (did you mean disturbance.leg"),
    (["run", "--set", "disturbance.legg=rf", "--out", "{d}/o"], "--set disturbance.legg: no such scenario key (did you"),
    (["run", "--set", "disturbance={{a: [1", "--out", "{d}/o"], "--set disturbance: line 1, column 7: YAML syntax error"),
    (["run", "--set", "fall.min_height=.nan", "--out", "{d}/o"], "scenario.fall.min_height: must be finite"),
    (["run", "--set", "evaluation.window=-46", "--out", "{d}/o"], "scenario.evaluation.window: -46.0 out of range"),
    (["run", "--set", "noise.seed=1.5", "--out", "{d}/o"], "scenario.noise.seed: expected an integer, got 1.5"),
    (["run", "--set", "x=&a [*a]", "--out", "{d}/o"], "--set x: refused: a recursive alias"),
    (["run", "--out", "{d}/a_file"], "--out {d}/a_file: exists and is not a directory"),
    (["run", "--out", "{d}/a_file/sub"], "--out {d}/a_file/sub: {d}/a_file is not a directory"),
    (["launch", "walking_sim", "scenario:={d}/binary.yaml"], "binary.yaml: not UTF-8 text"),
    (["launch", "walking_sim", "scenario:={d}/laughs.yaml"], "laughs.yaml: refused"),
    (["check-model", "--robot", "{d}/robot_typo.yaml"], "robot.leg_type.coxa_lenght: no such robot key (did you mean "
                                                         "coxa_length?)"),
    (["check-model", "--robot", "{d}/robot_inf.yaml"], "robot_inf.yaml: base.mass: must be a positive number"),
    (["check-model", "--robot", "{d}/binary.yaml"], "binary.yaml: not UTF-8 text"),
    (["check-model", "--states", "0"], "argument --states: must be >= 1, got 0"),
    (["check-model", "--tol", "-1"], "argument --tol: must be > 0"),
    (["check-model", "--robot", "{d}/robot_syntax.yaml"], "robot_syntax.yaml: line 3, column 1: YAML syntax error"),
    (["conditioning", "--samples", "0"], "argument --samples: must be >= 1"),
    (["conditioning", "--range", "-0.5"], "argument --range: must be > 0"),
    (["generate-urdf", "nosuchrobot"], "robot config not found"),
    (["export-mjcf", "--robot", "nosuchrobot"], "robot config not found"),
    (["bench", "qp", "--seconds", "-1"], "argument --seconds: must be > 0"),
    (["bench", "cycle", "--seconds", "0"], "argument --seconds: must be > 0"),
    (["bench", "flops"], "argument what: invalid choice"),
    (["eval-estimator", "--duration", "-1"], "argument --duration: must be > 0"),
    (["eval-estimator", "--slip-force", "-3"], "argument --slip-force: must be >= 0"),
    (["compare", "{d}/missing", "--out", "{d}/c"], "no such file or directory"),
    (["compare", "{d}/empty_dir", "--out", "{d}/c"], "not a rosbag2 bag"),
    (["compare", "{d}/empty_dir", "--out", "{d}/c", "--window", "5", "1"], "--window 5 1: T0 must be < T1"),
    (["experiment", "paper", "--out", "{d}/e", "--duration", "-1", "--headless"], "argument --duration: must be > 0"),
    (["experiment", "paper", "--out", "{d}/e", "--repeat", "-1"], "argument --repeat: must be >= 0"),
    (["experiment", "paper", "--out", "{d}/e", "--repeat", "1", "--torque-range", "5", "1", "--headless"],
     "argument --torque-range: 5 1: LO must be <= HI"),
    (["experiment", "paper", "--out", "{d}/e", "--controllers", "pid"], "unknown controller(s) ['pid']"),
    (["experiment", "paper", "--out", "{d}/e", "--headless", "--mode", "realtime"], "needs the ROS stack"),
    (["render", "{d}/missing", "--out", "{d}/r"], "no such file or directory"),
    (["render", "{d}/empty_dir", "--out", "{d}/r", "--fps", "0"], "argument --fps: must be > 0"),
    (["launch", "walking_sim", "layout:=foo"], "layout:='foo' is not one of container, split, processes"),
    (["launch", "walking_sim", "foo"], "launch argument 'foo': expected name:=value"),
    (["launch", "walking_sim", "contoller:=cbf"], "unknown launch argument(s) ['contoller']"),
    (["launch", "no_such_launch_file"], "no launch file"),
]


@pytest.mark.parametrize("argv, fragment", CASES, ids=[" ".join(a)[:60] for a, _ in CASES])
def test_bad_input_is_one_line_and_exit_2(argv, fragment, files, capsys):
    argv = [a.format(d=files) for a in argv]
    fragment = fragment.format(d=files)
    try:
        rc = main(argv)
    except SystemExit as exc:      # argparse
        rc = exc.code
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2, (argv, err)
    assert len(err) == 1, err
    assert fragment in err[0] and err[0].startswith("legged-wbc"), err[0]
    assert not (files / "o").exists() and not (files / "e" / "report").exists()
