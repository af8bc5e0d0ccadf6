"""``legged-wbc compare`` / ``experiment``: metrics from bags equal the headless loop's, reports and figures.

One short lockstep run of the ROS stack is recorded (WBC-D on a compressed ``paper`` scenario:
stand-up, gait start, a gait boundary and the null-space disturbance within 2.4 s of sim time,
~30 s wall on 2 cores) and compared with the in-process headless loop of the same scenario.

Equality is exact: the headless loop runs on the ROS nodes' tick clock (tick ``k`` at
``k * 2_000_000 ns``, not MuJoCo's accumulated ``d.time``, which drifts in the last bits and used to
shift gait boundaries, the disturbance start and the window start by one tick), so the headless
runs compared here are the loop exactly as ``legged-wbc run`` runs it.
"""

from __future__ import annotations

from domains import domain_id
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

SHORT = ["stand_up.start=0.1", "stand_up.duration=0.8", "walk.gait_start=1.0", "walk.t_s=1.4",
         "evaluation.window=1.0", "duration=2.4", "disturbance.start_offset=0.3", "disturbance.duration=0.4",
         "disturbance.torque_nm=8"]
DURATION = 2.4

# metrics that must agree between the bag and the headless loop (QP times are wall-clock, excluded)
SAME = ("max_violation_rad", "violation_rate_pct", "first_violation_time_s", "rp_rmse_deg", "torque_rms_nm",
        "torque_max_nm", "torque_saturation_pct", "distance_m", "qp_failures", "samples", "fell", "window_s")
COMMAND_KEYS = ("velocity_tracking_rmse_mps", "yaw_rate_tracking_rmse_radps", "estimated_velocity_rmse_mps",
                "standing_drift_m")
# a short manoeuvre: stand up, forward, turn in place under the disturbance, stop and stand
SHORT_MANOEUVRES = ["stand_up.start=0.1", "stand_up.duration=0.8", "walk.gait_start=1.0", "walk.t_s=1.4",
                    "evaluation.window=4.6", "duration=6.0", "disturbance.start_offset=1.8", "disturbance.duration=0.6",
                    "commands=[{t: 0, vx: 0, vy: 0, wz: 0}, {t: 1.0, vx: 0.15, vy: 0, wz: 0}, "
                    "{t: 2.6, vx: 0, vy: 0.0, wz: 0.3}, {t: 4.0, vx: 0, vy: 0, wz: 0}]"]
FIGURES = ("fig6_disturbed_leg_pitch.png", "fig5_wbc0_drift.png", "body_roll_pitch.png", "joint_torques.png",
           "qp_time_hist.png", "gait_diagram.png", "command_latency_hist.png")


def ros_env() -> dict:
    env = dict(os.environ)
    env["ROS_DOMAIN_ID"] = str(domain_id())
    env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def headless(scenario: str, controller: str, out: Path) -> Path:
    from legged_wbc.closed_loop import ClosedLoop, save_run
    from legged_wbc.scenario import load_scenario

    res = ClosedLoop(load_scenario(scenario), controller).run(DURATION)
    return save_run(res, out)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """The bag of a short lockstep WBC-D run, the headless runs of the same scenario, their comparison."""
    from legged_wbc.tools.analysis.compare import compare
    from legged_wbc.scenario import dump_scenario, load_scenario

    d = tmp_path_factory.mktemp("compare")
    sc_path = d / "short.yaml"
    sc_path.write_text(dump_scenario(load_scenario("paper", SHORT)))
    nominal_path = d / "short_nominal.yaml"
    nominal_path.write_text(dump_scenario(load_scenario("nominal", SHORT)))
    bag = d / "wbcd_bag"
    run = subprocess.run([str(BIN / "legged-wbc"), "launch", "walking_sim", "controller:=damping",
                          f"scenario:={sc_path}", f"record:={bag}", f"duration:={DURATION}"],
                         env=ros_env(), capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert (bag / "metadata.yaml").is_file(), run.stdout[-4000:]
    head = headless(str(sc_path), "damping", d / "wbcd_headless")
    wbc0 = headless(str(nominal_path), "none", d / "wbc0_headless")
    res = compare([bag, head, wbc0], d / "report")
    return {"dir": d, "bag": bag, "headless": head, "wbc0": wbc0, "scenario": sc_path, "res": res,
            "report": d / "report"}


# ------------------------------------------------------------------------------------ bag == headless
@pytest.mark.ros
def test_bag_metrics_equal_headless_loop(recorded):
    m = recorded["res"]["metrics"]
    bag, head = m["wbcd_bag"], m["wbcd_headless"]
    assert bag["kind"] == "bag" and head["kind"] == "headless"
    assert bag["controller"] == "damping" and bag["mode"] == "lockstep"
    assert bag["window_s"] == [1.4, 2.4]
    assert not bag.get("unavailable"), bag.get("unavailable")
    # the scenario really exercised the metrics: stand-up, walking, a WBC-D violation under the push
    assert bag["max_violation_rad"] > 0.05 and bag["violation_rate_pct"] > 0 and bag["distance_m"] > 0.05
    assert bag["samples"] == 500
    for k in SAME:
        assert bag[k] == head[k], f"{k}: bag {bag[k]!r} vs headless {head[k]!r}"
    # the metrics.json of `legged-wbc run` (written by the headless loop itself) agrees too
    own = json.loads((recorded["headless"] / "metrics.json").read_text())
    for k in SAME:
        assert own[k] == bag[k], f"{k}: legged-wbc run {own[k]!r} vs bag {bag[k]!r}"
    # and every key of `legged-wbc run`'s metrics.json is in compare's
    assert set(own) <= set(bag), set(own) - set(bag)
    assert bag["deadline_misses"] == 0 and bag["watchdog_events"] == 0 and bag["rejected_commands"] == 0
    # the bridge timed every tick's command (lockstep: latency only, no deadline to miss)
    assert bag["ticks_timed"] >= round(DURATION / 0.002) - 60 and bag["deadline_miss_pct"] == 0.0
    assert 0 < bag["command_latency_p50_us"] <= bag["command_latency_p99_us"] <= bag["command_latency_max_us"]
    assert head["deadline_miss_pct"] is None and head["command_latency_p99_us"] is None   # no transport
    # no velocity command in paper: the command metrics are null in both, and no command figures
    for k in COMMAND_KEYS:
        assert bag[k] is None and head[k] is None and own[k] is None, k
    assert bag["command_source"] is None


@pytest.mark.ros
def test_bag_series_bit_identical_to_headless(recorded):
    """The series rebuilt at the control ticks are the headless loop's, bit for bit."""
    from legged_wbc.tools.analysis.bag_metrics import load_run

    b, h = recorded["res"]["runs"][0], recorded["res"]["runs"][1]
    assert np.array_equal(b.series["t"], np.arange(len(b.series["t"])) * 2_000_000 * 1e-9)  # exact tick times
    assert len(b.series["t"]) == len(h.series["t"]) == round(DURATION / 0.002)
    ok = b.complete if b.complete is not None else np.ones(len(b.series["t"]), bool)
    assert np.count_nonzero(~ok) <= 20, f"{np.count_nonzero(~ok)} ticks incomplete in the bag: {b.gaps}"
    for k in ("theta", "theta_dot", "support", "touchdown", "tau", "qp_accepted", "base_pos", "base_quat",
              "rp_err", "est_pos", "contact_gt", "disturbance", "cbf_active"):
        x, y = np.asarray(b.series[k]), np.asarray(h.series[k])
        assert x.shape == y.shape, (k, x.shape, y.shape)
        assert np.array_equal(x[ok], y[ok]), f"{k}: max |diff| {np.nanmax(np.abs(x[ok].astype(float) - y[ok])):.3e}"
    # the disturbance was applied (on the scenario's leg, only while it was in the estimated support)
    assert np.any(b.series["disturbance"] != 0)
    assert load_run(recorded["bag"]).disturbed_leg == b.leg_names.index("lh")


@pytest.mark.ros
@pytest.mark.parametrize("delay", [["command_delay_ticks=2"], ["sensor_delay_ticks=2", "actuators=realistic"]],
                         ids=["command", "sensor_realistic"])
def test_command_delay_bag_bit_identical_to_headless(recorded, tmp_path, delay):
    """``command_delay_ticks=2`` (the command answering tick k acts from period k + 3), or
    ``sensor_delay_ticks=2`` (every sample reports the state 4 physics steps earlier) with the
    realistic actuators (envelope + joint friction): the lockstep ROS stack and the headless loop
    apply it alike, bit for bit, and it changes the run."""
    from legged_wbc.closed_loop import load_log
    from legged_wbc.scenario import dump_scenario, load_scenario
    from legged_wbc.tools.analysis.bag_metrics import load_run

    sc_path = tmp_path / "short_delay2.yaml"
    sc_path.write_text(dump_scenario(load_scenario("paper", SHORT + delay)))
    bag = tmp_path / "bag"
    run = subprocess.run([str(BIN / "legged-wbc"), "launch", "walking_sim", "controller:=damping",
                          f"scenario:={sc_path}", f"record:={bag}", f"duration:={DURATION}"],
                         env=ros_env(), capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    if "command_delay_ticks=2" in delay:
        assert "command delay 2 ticks" in run.stdout + run.stderr
    b = load_run(bag)
    h, _ = load_log(headless(str(sc_path), "damping", tmp_path / "headless"))
    assert len(b.series["t"]) == len(h["t"]) == round(DURATION / 0.002)
    ok = b.complete if b.complete is not None else np.ones(len(b.series["t"]), bool)
    assert np.count_nonzero(~ok) <= 20, b.gaps
    for k in ("theta", "tau", "support", "touchdown", "qp_accepted", "base_pos", "base_quat", "est_pos",
              "contact_gt", "disturbance"):
        x, y = np.asarray(b.series[k]), np.asarray(h[k])
        assert x.shape == y.shape and np.array_equal(x[ok], y[ok]), k
    undelayed, _ = load_log(recorded["headless"])        # the same scenario without the delay
    assert np.abs(undelayed["base_pos"] - h["base_pos"]).max() > 1e-5
    assert b.bridge.get("watchdog_events") == 0, b.bridge


@pytest.mark.ros
def test_manoeuvres_bag_command_metrics_equal_headless(tmp_path):
    """A lockstep bag of a short command schedule (forward, a turn in place under the disturbance, stop
    and stand) gives the headless run's command metrics: the command re-computed from the scenario's
    schedule over the bag's ticks is the controller's, bit for bit (cmd_target, the gait clock, the body
    reference); the yaw rate and the drift from the recorded pose are exact, the velocities (the odometry's
    base-frame twist turned into the world) to rounding. compare draws the path and the tracking for both."""
    from legged_wbc.closed_loop import load_log
    from legged_wbc.scenario import dump_scenario, load_scenario
    from legged_wbc.tools.analysis.compare import compare

    sc_path = tmp_path / "short_manoeuvres.yaml"
    sc_path.write_text(dump_scenario(load_scenario("manoeuvres", SHORT_MANOEUVRES)))
    bag = tmp_path / "bag"
    run = subprocess.run([str(BIN / "legged-wbc"), "launch", "walking_sim", "controller:=cbf",
                          f"scenario:={sc_path}", f"record:={bag}", "duration:=6.0"],
                         env=ros_env(), capture_output=True, text=True, timeout=400, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    from legged_wbc.closed_loop import ClosedLoop, save_run

    head = save_run(ClosedLoop(load_scenario(str(sc_path)), "cbf").run(6.0), tmp_path / "headless")
    res = compare([bag, head], tmp_path / "report")
    b, h = res["metrics"]["bag"], res["metrics"]["headless"]
    own = json.loads((head / "metrics.json").read_text())
    assert b["command_source"] == "scenario commands" and not b.get("unavailable"), b.get("unavailable")
    for k in SAME:
        assert b[k] == h[k] == own[k], (k, b[k], h[k])
    assert b["standing_drift_m"] is not None and b["yaw_rate_tracking_rmse_radps"] is not None
    for k in ("yaw_rate_tracking_rmse_radps", "standing_drift_m"):
        assert b[k] == h[k] == own[k], (k, b[k], h[k])
    for k in ("velocity_tracking_rmse_mps", "estimated_velocity_rmse_mps"):
        assert b[k] == pytest.approx(own[k], rel=1e-9, abs=1e-12) and h[k] == own[k], (k, b[k], own[k])
    rb, rh = res["runs"]
    series, _ = load_log(head)
    ok = rb.complete if rb.complete is not None else np.ones(len(rb.series["t"]), bool)
    for k in ("cmd_target", "cmd_filtered", "gait_tau", "gait_paused", "cmd_ref"):
        assert np.array_equal(np.asarray(rb.series[k])[ok], np.asarray(series[k])[ok]), k
    assert rb.series["gait_paused"][-1] and not rb.series["gait_paused"][len(ok) // 2]   # it walked, then stood
    assert abs(series["cmd_ref"][-1, 2] - 0.3 * 1.4) < 0.05                            # the turn: ~0.42 rad of yaw
    assert {"command_path.png", "command_tracking.png"} <= set(res["figures"])
    md = (tmp_path / "report" / "report.md").read_text()
    assert "velocity tracking RMSE (m/s) / yaw rate (rad/s), steady segments" in md and "](command_path.png)" in md


# ------------------------------------------------------------------------------------ report and figures
@pytest.mark.ros
def test_report_and_figures(recorded):
    rep = recorded["report"]
    md = (rep / "report.md").read_text()
    for text in ("max relative-pitch violation (rad)", "support-leg sample violation rate (%)", "roll-pitch RMSE (deg)",
                 "joint torque RMS / max (N m)", "QP time p99 (us) / over-2 ms (%)", "distance walked (m)",
                 "deadline misses (bridge)", "QP failures", "D: 0.519; CBF: 0.005", "WBC-D (wbcd_bag)",
                 "WBC-0 (wbc0_headless)", "Every metric could be computed"):
        assert text in md, text
    metrics = json.loads((rep / "metrics.json").read_text())
    assert set(metrics) == {"wbcd_bag", "wbcd_headless", "wbc0_headless"}
    from matplotlib.image import imread

    assert sorted(recorded["res"]["figures"]) == sorted(FIGURES)
    for f in FIGURES:
        p = rep / f
        assert p.stat().st_size > 20_000, f"{f}: {p.stat().st_size} bytes"
        img = imread(p)[..., :3]
        non_white = np.mean(np.any(img < 0.9, axis=-1))
        assert non_white > 0.03 and img.std() > 0.05, f"{f} looks blank ({non_white:.3f} non-white, std {img.std():.3f})"
        assert f"]({f})" in md


# ------------------------------------------------------------------------------------ other bags
@pytest.mark.ros
def test_runs_of_different_lengths(recorded, tmp_path):
    """A long run next to a short one (the short one ends before the other's gait excerpt)."""
    from legged_wbc.closed_loop import ClosedLoop, save_run
    from legged_wbc.tools.analysis.compare import compare
    from legged_wbc.scenario import load_scenario

    short = save_run(ClosedLoop(load_scenario(str(recorded["scenario"])), "cbf").run(0.6), tmp_path / "short")
    long_ = save_run(ClosedLoop(load_scenario("paper", ["disturbance.start_offset=2.0"]), "cbf").run(10.0),
                     tmp_path / "long")
    res = compare([long_, short, recorded["bag"]], tmp_path / "rep")
    assert set(res["metrics"]) == {"long", "short", "wbcd_bag"}
    assert "gait_diagram.png" in res["figures"] and (tmp_path / "rep" / "report.md").is_file()


@pytest.mark.ros
def test_report_is_complete_or_absent(recorded, tmp_path, monkeypatch):
    """A failure half-way (here: a figure raising) leaves no half-written output directory."""
    from legged_wbc.tools.analysis import compare as C

    def boom(*a, **kw):
        raise RuntimeError("figure failed")

    monkeypatch.setattr(C, "fig_gait", boom)
    with pytest.raises(RuntimeError, match="figure failed"):
        C.compare([recorded["bag"]], tmp_path / "rep")
    assert not (tmp_path / "rep").exists()
    assert [p.name for p in tmp_path.iterdir()] == []              # no partial directory left behind
    monkeypatch.undo()
    C.compare([recorded["bag"]], tmp_path / "rep")
    assert {"report.md", "metrics.json", "gait_diagram.png"} <= {p.name for p in (tmp_path / "rep").iterdir()}


def _copy_bag(src: Path, dst: Path, storage: str, drop=()) -> None:
    """A copy of ``src`` (raw CDR, same definitions and custom_data) without the ``drop`` topics."""
    import yaml
    from rosbags.highlevel import AnyReader
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    meta = yaml.safe_load((src / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    ts = get_typestore(Stores.ROS2_KILTED)
    plugin = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}[storage]
    with AnyReader([src], default_typestore=ts) as reader, Writer(dst, version=9, storage_plugin=plugin) as writer:
        conns = {}
        for c in reader.connections:
            if c.topic in drop:
                continue
            conns[c.id] = writer.add_connection(c.topic, c.msgtype, typestore=reader.typestore)
        for k, v in (meta.get("custom_data") or {}).items():
            writer.set_custom_data(k, str(v))
        for c, t, raw in reader.messages(connections=[c for c in reader.connections if c.id in conns]):
            writer.write(conns[c.id], t, raw)


@pytest.mark.ros
def test_sqlite3_bag_and_missing_topics(recorded, tmp_path, capsys):
    from legged_wbc.cli import main

    full = recorded["res"]["metrics"]["wbcd_bag"]
    sq = tmp_path / "sqlite_bag"
    _copy_bag(recorded["bag"], sq, "sqlite3")
    assert any(sq.glob("*.db3"))
    part = tmp_path / "partial_bag"
    _copy_bag(recorded["bag"], part, "mcap", drop=("/wbc/diagnostics", "/ground_truth/odom", "/bridge/diagnostics"))
    out = tmp_path / "rep"
    rc = main(["compare", str(sq), str(part), "--out", str(out), "--no-figures"])
    err = capsys.readouterr().err
    assert rc == 0, err
    m = json.loads((out / "metrics.json").read_text())
    sqm, pm = m["sqlite_bag"], m["partial_bag"]
    for k in SAME:
        assert sqm[k] == full[k], f"sqlite3 bag {k}: {sqm[k]!r} vs mcap {full[k]!r}"
    # what the partial bag still has is computed, and equal; the rest is listed as not computable
    for k in ("max_violation_rad", "violation_rate_pct", "first_violation_time_s", "torque_rms_nm", "torque_max_nm"):
        assert pm[k] == full[k], k
    for k in ("qp_p99_us", "qp_over_2ms_pct", "qp_failures", "rp_rmse_deg", "distance_m", "fell", "deadline_misses"):
        assert pm[k] is None, k
        assert k in pm["unavailable"], k
    assert "no /wbc/diagnostics" in pm["unavailable"]["qp_p99_us"]
    assert "no /ground_truth/odom" in pm["unavailable"]["distance_m"]
    md = (out / "report.md").read_text()
    assert "## Could not be computed" in md and "**partial_bag**: qp_p99_us (no /wbc/diagnostics)" in md
    assert "partial_bag: distance_m could not be computed (no /ground_truth/odom)" in err
    assert "sqlite_bag:" not in err


@pytest.mark.ros
def test_bag_without_support_or_pitch_names_the_missing_topic(recorded, tmp_path):
    """A bag without ``/estimator/support`` (was ``KeyError: 'support'``) or without
    ``/wbc/relative_pitch`` (the support message's plane-normal entries were taken for legs): compare
    computes what the bag has, lists the violation metrics as not computable, naming the topic, one
    line each and no traceback."""
    for topic in ("/estimator/support", "/wbc/relative_pitch"):
        bag = tmp_path / topic.rsplit("/", 1)[1]
        _copy_bag(recorded["bag"], bag, "mcap", drop=(topic,))
        out = tmp_path / f"rep_{bag.name}"
        r = subprocess.run([str(BIN / "legged-wbc"), "compare", str(bag), "--out", str(out)], capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
        m = json.loads((out / "metrics.json").read_text())[bag.name]
        for k in ("max_violation_rad", "violation_rate_pct", "first_violation_time_s"):
            assert m[k] is None and m["unavailable"][k] == f"no {topic}", (k, m["unavailable"])
            assert f"{bag.name}: {k} could not be computed (no {topic})" in r.stderr
        assert m["torque_rms_nm"] is not None and m["distance_m"] is not None    # what the bag has
        assert m["normal_error_deg_mean"] is None


def test_not_a_bag_is_a_clear_error(tmp_path, capsys):
    from legged_wbc.cli import main

    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("hello")
    half = tmp_path / "half"
    half.mkdir()
    (half / "half.mcap").write_bytes(b"\x89MCAP0\r\n")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "metadata.yaml").write_text("just: text\n")
    binary = tmp_path / "binary"
    binary.mkdir()
    (binary / "metadata.yaml").write_bytes(bytes(range(256)) * 16)
    laughs = tmp_path / "laughs"
    laughs.mkdir()
    (laughs / "metadata.yaml").write_text("a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [" + ", ".join([f"*{p}"] * 10) + "]\n" for p, c in zip("abcdefgh", "bcdefghi")))
    cases = [(binary, "unreadable metadata.yaml (" + str(binary / "metadata.yaml") + ": not UTF-8 text"),
             (laughs, "metadata.yaml: refused: more than 100000 nodes"),
             (empty, "not a rosbag2 bag (no metadata.yaml) nor a headless run directory"),
             (half, "no metadata.yaml (an unfinished recording?"),
             (bad, "metadata.yaml is not rosbag2 metadata"),
             (tmp_path / "nowhere", "no such file or directory")]
    for path, text in cases:
        rc = main(["compare", str(path), "--out", str(tmp_path / "out")])
        err = capsys.readouterr().err
        assert rc == 2, (path, err)
        assert text in err and str(path) in err, err
        assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()  # nothing written for a bad input


# ------------------------------------------------------------------------------------ experiment
def test_experiment_plan_randomized_repeats(tmp_path):
    from legged_wbc.tools.experiments.experiment import ExperimentError, plan
    from legged_wbc.scenario import load_scenario

    jobs = plan(tmp_path, SHORT, None, repeat=3, seed=7)
    assert [j.name for j in jobs] == ["wbc0", "wbcd_r00", "wbcd_r01", "wbcd_r02", "cbf_r00", "cbf_r01", "cbf_r02"]
    assert [j.controller for j in jobs] == ["none"] + ["damping"] * 3 + ["cbf"] * 3
    assert all(j.output.endswith(f"bags/{j.name}") for j in jobs)
    by = {j.name: j for j in jobs}
    draws = []
    for r in range(3):
        d, c = by[f"wbcd_r{r:02d}"], by[f"cbf_r{r:02d}"]
        assert d.randomized == c.randomized  # paired: the same disturbance for both controllers
        sc = load_scenario(c.scenario_arg)   # the YAML the ROS nodes get
        assert sc.disturbance.leg == d.randomized["disturbance.leg"]
        assert sc.disturbance.sign in (-1, 1)
        assert 4.0 <= sc.disturbance.torque_nm <= 12.0        # 0.5x - 1.5x of 8 N m
        assert sc.t_s <= sc.disturbance.start and sc.disturbance.start + sc.disturbance.duration <= 2.4 + 1e-9
        assert sc.duration == 2.4 and sc.window == 1.0
        draws.append(tuple(sorted(d.randomized.items())))
    assert len(set(draws)) == 3
    again = plan(tmp_path / "again", SHORT, None, repeat=3, seed=7)
    assert [j.randomized for j in again] == [j.randomized for j in jobs]   # reproducible from the seed
    assert by["wbc0"].randomized == {} and load_scenario(by["wbc0"].scenario_arg).disturbance.enabled is False
    plain = plan(tmp_path / "plain", None, 10.0)            # Table 3: the scenarios with the paper's preset
    assert [(j.name, j.duration) for j in plain] == [("wbc0", 10.0), ("wbcd", 10.0), ("cbf", 10.0)]
    assert [(load_scenario(j.scenario_arg).name, load_scenario(j.scenario_arg).preset) for j in plain] == [
        ("nominal", "paper"), ("paper", "paper"), ("paper", "paper")]
    robust = plan(tmp_path / "robust", ["preset=robust"], 10.0)   # another preset when asked for
    assert {load_scenario(j.scenario_arg).preset for j in robust} == {"robust"}
    # an estimator override reaches the ROS graph's estimator: its node applies the scenario's block
    from state_estimator.config import EstimatorNodeConfig
    from state_estimator.node import scenario_overrides

    est = plan(tmp_path / "x", ["estimator.touchdown.sigma_dq_meas=0.07"], None, controllers=("cbf",))
    assert scenario_overrides(EstimatorNodeConfig(scenario=est[0].scenario_arg)) == {
        "touchdown": {"sigma_dq_meas": 0.07}}
    with pytest.raises(ExperimentError):
        plan(tmp_path / "y", ["estimator.touchdown.no_such_key=5"], None)


def test_experiment_headless_end_to_end(tmp_path, capsys):
    from legged_wbc.cli import main

    out = tmp_path / "exp"
    sets = [a for s in SHORT + ["duration=1.2", "walk.t_s=1.0", "evaluation.window=0.2", "disturbance.start_offset=0.05",
                                "disturbance.duration=0.1"] for a in ("--set", s)]
    rc = main(["experiment", "paper", "--out", str(out), "--headless", "--no-figures", "--quiet", *sets])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "[3/3] cbf: ok" in text
    m = json.loads((out / "report" / "metrics.json").read_text())
    assert set(m) == {"wbc0", "wbcd", "cbf"}
    assert [m[k]["controller"] for k in ("wbc0", "wbcd", "cbf")] == ["none", "damping", "cbf"]
    assert all(m[k]["window_s"] == [1.0, 1.2] for k in m)
    assert (out / "report" / "report.md").is_file() and (out / "experiment.json").is_file()
    # resumable: a second call reuses the runs
    rc = main(["experiment", "paper", "--out", str(out), "--headless", "--no-figures", "--quiet", *sets])
    assert rc == 0 and capsys.readouterr().out.count("already recorded, reused") == 3


@pytest.mark.ros
def test_experiment_realtime_reports_command_timing(tmp_path):
    """``experiment --mode realtime``: the runs are paced by the wall clock; the report says how many
    ticks were commanded late and the command latency."""
    out = tmp_path / "exp_rt"
    sets = [a for s in SHORT for a in ("--set", s)]
    r = subprocess.run([str(BIN / "legged-wbc"), "experiment", "paper", "--out", str(out), "--mode", "realtime",
                        "--controllers", "cbf", "--no-figures", "--quiet", *sets], env=ros_env(),
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "ROS realtime" in r.stdout and "mode:=realtime" in r.stdout
    m = json.loads((out / "report" / "metrics.json").read_text())["cbf"]
    assert m["mode"] == "realtime" and m["ticks_timed"] >= 1150
    assert m["deadline_miss_pct"] is not None and m["command_latency_p50_us"] > 0
    md = (out / "report" / "report.md").read_text()
    assert "ticks commanded late or not at all (%)" in md and "command latency p50 / p99 (us)" in md
    r = subprocess.run([str(BIN / "legged-wbc"), "experiment", "paper", "--out", str(tmp_path / "x"), "--headless",
                        "--mode", "realtime"], env=ros_env(), capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 2 and "needs the ROS stack" in r.stderr


@pytest.mark.ros
def test_experiment_ros_repeats(tmp_path):
    """The protocol through the ROS stack with two randomized repetitions (5 lockstep runs in the container)."""
    out = tmp_path / "exp"
    sets = [a for s in SHORT for a in ("--set", s)]
    r = subprocess.run([str(BIN / "legged-wbc"), "experiment", "paper", "--out", str(out), "--repeat", "2",
                        "--seed", "3", *sets], env=ros_env(), capture_output=True, text=True, timeout=1800, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "sim " in r.stdout  # progress lines
    m = json.loads((out / "report" / "metrics.json").read_text())
    assert set(m) == {"wbc0", "wbcd_r00", "wbcd_r01", "cbf_r00", "cbf_r01"}
    s = json.loads((out / "report" / "summary.json").read_text())
    assert s["damping"]["runs"] == 2 and s["cbf"]["runs"] == 2
    assert "worst" in s["cbf"]["max_violation_rad"]
    md = (out / "report" / "report.md").read_text()
    assert "Repeated runs: mean, spread, worst case" in md
    for name in m:
        assert (out / "bags" / name / "metadata.yaml").is_file()
