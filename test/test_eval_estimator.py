"""legged-wbc eval-estimator: touchdown statistics definitions and the closed-loop evaluation."""

import numpy as np

from legged_wbc.tools.analysis.eval_estimator import run_eval, touchdown_stats


def test_touchdown_stats_definitions():
    t = np.arange(0, 1.0, 0.002)
    T = len(t)
    phase = np.zeros((T, 3), int)
    phase[100:150] = 2                       # one swing-down interval per leg
    contact = np.zeros((T, 3), bool)
    td = np.zeros((T, 3), bool)
    contact[120:, 0] = True
    td[123:150, 0] = True                     # leg 0: detected 3 samples = 6 ms after contact
    td[110:150, 1] = True                     # leg 1: flag with no contact -> false
    contact[140:, 2] = True                   # leg 2: contact, never flagged -> missed
    s = touchdown_stats(t, phase, td, contact)
    assert s["swing_down_intervals"] == 3
    assert abs(s["touchdown_latency_ms_mean"] - 6.0) < 1e-9
    assert s["false_touchdowns"] == 1 and s["missed_touchdowns"] == 1


def test_eval_estimator_closed_loop():
    r = run_eval(duration=8.0)
    assert r["detected_touchdowns"] >= 20
    assert r["touchdown_latency_ms_mean"] <= 10.0 and r["false_touchdowns"] == 0
    assert r["vel_rmse_mps"] <= 0.03
    assert r["slip_vel_rmse_mps"] < r["slip_vel_rmse_nogating_mps"]
