"""Metrics that see the whole run (metrics.json ``whole_run``) beside the evaluation window's, and
``compare``'s headline: the worse of the two."""

import json

import numpy as np
import pytest

from legged_wbc.metrics import WHOLE_RUN_KEYS, compute_metrics, worst_of
from legged_wbc.tools.analysis.compare import headline


def _series(T=40, legs=3):
    t = np.arange(T) * 0.5
    S = dict(t=t, theta=np.zeros((T, legs)), support=np.ones((T, legs), bool), rp_err=np.zeros((T, 2)),
             tau=np.ones((T, 2)), qp_time_us=np.full(T, 100.0), qp_accepted=np.ones(T, bool),
             base_pos=np.zeros((T, 3)), tau_saturated=np.zeros((T, 2), bool), cbf_slack=np.zeros((T, legs)),
             foot_pos_gt=np.zeros((T, legs, 3)))
    return S


def test_whole_run_figures_beside_the_window():
    S = _series()
    S["theta"][4, 0] = 0.36          # before the window (t = 2 s): 0.06 over
    S["theta"][30, 1] = -0.32        # in the window (t = 15 s): 0.02 over
    S["theta"][5, 2] = 0.9           # leg 2 has no foot pitch joint: never counted
    S["qp_accepted"][2] = False      # a QP failure at the stand-up
    S["tau_saturated"][3, 1] = True  # clipped before the window
    S["cbf_slack"][6, 0] = -4.0
    S["support"][10:14, 0] = False   # leg 0 lifted; its next support stretch (t = 7 s) slides 3 cm
    S["foot_pos_gt"][14:, 0, 0] = np.linspace(0.0, 0.03, 26)
    m = compute_metrics(S, 10.0, 30.0, -0.3, 0.3, pitch_legs=[True, True, False])
    w = m["whole_run"]
    assert set(w) == set(WHOLE_RUN_KEYS)
    assert m["max_violation_rad"] == pytest.approx(0.02) and w["max_violation_rad"] == pytest.approx(0.06)
    assert w["violation_ticks"] == 2 and w["first_violation_time_s"] == 2.0 and w["window_s"] == [0.0, 19.502]
    assert w["violation_rate_pct"] == pytest.approx(100 * 2 / (39 * 2 - 4))     # 4 samples of leg 0 lifted
    assert w["qp_failures"] == 1 and not w["fell"]
    assert m["torque_saturation_pct"] == 0.0 and w["torque_saturation_pct"] == pytest.approx(100 / (39 * 2))
    assert m["cbf_slack_max"] == 0.0 and w["cbf_slack_max"] == 4.0
    assert w["foot_slip_max_m"] == pytest.approx(0.03)
    assert worst_of(m, "max_violation_rad") == (w["max_violation_rad"], "whole run")
    line = headline(m)
    assert line.startswith("worst violation 0.06 rad (whole run: 2 ticks, first at 2.000 s; window 0.02)"), line
    assert "1 QP failures" in line and "foot slip max 0.03 m" in line
    # in the window it is the window's (the worse): the headline says so
    S["theta"][30, 1] = -0.5
    m = compute_metrics(S, 10.0, 30.0, -0.3, 0.3, pitch_legs=[True, True, False])
    assert worst_of(m, "max_violation_rad") == (pytest.approx(0.2), "window")
    assert headline(m).startswith("worst violation 0.2 rad (in the window)")
    # no leg with a relative pitch: None, not a reassuring 0
    m = compute_metrics(S, 10.0, 30.0, -0.3, 0.3, pitch_legs=[False, False, False])
    assert m["whole_run"]["max_violation_rad"] is None and m["whole_run"]["violation_ticks"] is None


def test_a_run_whose_violation_is_outside_the_window_says_so_in_metrics_and_compare(tmp_path, capsys):
    """A real headless WBC-0 run (its relative pitch drifts out of bounds once the gait runs) evaluated
    over a window before the drift: the window says 0, the whole run and compare's headline do not."""
    from legged_wbc.cli import main

    run, rep = tmp_path / "wbc0", tmp_path / "rep"
    sets = ["stand_up.start=0.2", "stand_up.duration=1.0", "walk.gait_start=1.5", "walk.t_s=1.5",
            "evaluation.window=0.5"]
    assert main(["run", "--controller", "none", "--scenario", "nominal", *[a for s in sets for a in ("--set", s)],
                 "--duration", "3.5", "--out", str(run), "--quiet"]) == 0
    out = capsys.readouterr().out
    m = json.loads((run / "metrics.json").read_text())
    w = m["whole_run"]
    assert m["max_violation_rad"] == 0.0 and m["window_s"] == [1.5, 2.0]
    assert w["max_violation_rad"] > 0.05 and w["violation_ticks"] > 0 and w["first_violation_time_s"] > 2.0
    assert w["window_s"] == [0.0, 3.5] and w["qp_failures"] == 0 and w["fell"] is False
    assert f"max violation {w['max_violation_rad']:.4g} rad ({w['violation_ticks']} ticks" in out
    assert main(["compare", str(run), "--out", str(rep), "--no-figures"]) == 0
    out = capsys.readouterr().out
    assert f"wbc0: worst violation {w['max_violation_rad']:.4g} rad (whole run: {w['violation_ticks']} ticks" in out
    cm = json.loads((rep / "metrics.json").read_text())["wbc0"]
    assert cm["whole_run"] == w and cm["max_violation_rad"] == 0.0
    md = (rep / "report.md").read_text()
    assert "## Headline" in md and "## Table 3 (evaluation window)" in md
    assert f"| whole run: max relative-pitch violation (rad) / ticks with one | {w['max_violation_rad']:.4g} / " \
           f"{w['violation_ticks']} |" in md
