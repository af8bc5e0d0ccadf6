"""Headless closed loop (sim -> estimator -> WBC): standing, walking, the pushed scenario, metrics."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from legged_wbc.closed_loop import ClosedLoop, load_log, save_run
from legged_wbc.metrics import compute_metrics, roll_pitch_from_quat_xyzw, violation
from legged_wbc.scenario import load_scenario
from legged_wbc.robot import ConfigError

ROOT = Path(__file__).resolve().parent.parent
# a compressed timeline for CI: stand up in 1 s, walk from 1.5 s, steady from 2.5 s
FAST = ["stand_up.start=0.2", "stand_up.duration=1.0", "walk.gait_start=1.5", "walk.t_s=2.5"]


@pytest.fixture(scope="module", params=["none", "damping", "cbf"])
def walked(request):
    sc = load_scenario("nominal", FAST + ["evaluation.window=3.5"])
    return request.param, ClosedLoop(sc, request.param).run(6.0)


def test_stands_up_and_walks(walked):
    mode, res = walked
    assert not res.fell, res.fall_reason
    S = res.series
    t = S["t"]
    z = S["base_pos"][:, 2]
    assert z[0] < 0.32 and abs(z[t > 1.3].mean() - 0.42) < 0.02, "stands up to the commanded height"
    assert res.metrics["qp_failures"] == 0
    assert res.metrics["distance_m"] > 0.15, "walks forward"          # ~0.1 m/s over the window
    assert np.all(np.abs(S["rp_err"]) < np.radians(5))
    # the gait really lifts feet: every leg loses ground contact at some point while walking
    assert np.all((~S["contact_gt"][t > 2.0]).any(axis=0))


def test_pushed_leg_cbf_holds_damping_does_not():
    over = FAST + ["disturbance.start_offset=0.5", "disturbance.duration=2.0", "disturbance.torque_nm=6.0",
                   "evaluation.window=3.0"]
    sc = load_scenario("paper", over)
    res = {m: ClosedLoop(sc, m).run(5.5) for m in ("damping", "cbf")}
    for m, r in res.items():
        assert not r.fell, (m, r.fall_reason)
        assert r.series["disturbance"].any(), "the disturbance was applied"
    assert res["damping"].metrics["max_violation_rad"] > 0.1
    assert res["cbf"].metrics["max_violation_rad"] < 0.01
    assert res["cbf"].series["cbf_active"].any()
    # the disturbance is only applied while the leg is in the estimated support set
    S = res["cbf"].series
    leg = sc.raw["disturbance"]["leg"]
    i = ["lf", "lm", "lh", "rf", "rm", "rh"].index(leg)
    applied = np.abs(S["disturbance"]).sum(axis=1) > 0
    assert np.all(S["support"][applied, i])


def test_command_delay_of_two_ticks_stays_up():
    """``command_delay_ticks=2``: every command acts 4 ms later than it would (period k + 3 instead of
    k + 1). Stand-up, walking and the null-space push of 6 s: WBC-CBF stays up and within its bound."""
    over = FAST + ["disturbance.start_offset=0.5", "disturbance.duration=2.0", "disturbance.torque_nm=6.0",
                   "evaluation.window=3.5", "command_delay_ticks=2"]
    res = ClosedLoop(load_scenario("paper", over), "cbf").run(6.0)
    assert not res.fell, res.fall_reason
    m = res.metrics
    assert m["qp_failures"] == 0 and m["distance_m"] > 0.15 and m["max_violation_rad"] < 0.01
    assert res.series["disturbance"].any() and np.all(np.abs(res.series["rp_err"]) < np.radians(5))


def test_command_delay_first_ticks_are_damped_then_delayed():
    """The torque of every physics step: joint damping (the bridge's before a first command,
    recomputed each step) during the first N ticks, then the command computed N ticks earlier; the
    logged ``tau`` is each tick's command. N = 0 applies each tick's own command."""
    from mujoco_bridge.config import load_bridge_config
    from mujoco_bridge.scheduler import damping_torque

    def run(n):
        loop = ClosedLoop(load_scenario("paper", FAST + [f"command_delay_ticks={n}"]), "cbf")
        steps, sim_step = [], loop.sim.step

        def step(k=1):                         # (torque, joint velocities before the step) per physics step
            steps.extend([(loop.sim.tau.copy(), loop.sim.joint_velocities().copy())] * k)
            sim_step(k)
        loop.sim.step = step
        return loop, loop.run(0.2), steps

    loop, r0, s0 = run(0)
    _, r3, s3 = run(3)
    assert len(s0) == len(s3) == 200
    assert np.array_equal(np.array([tau for tau, _ in s0]), np.repeat(r0.series["tau"], 2, axis=0))
    tau3 = np.array([tau for tau, _ in s3])
    assert np.array_equal(tau3[6:], np.repeat(r3.series["tau"][:-3], 2, axis=0))
    damping = load_bridge_config().watchdog_damping
    for tau, dq in s3[:6]:
        assert np.array_equal(tau, damping_torque(dq, damping, loop.rm.effort))
    assert np.any(tau3[5])                      # the robot sags: the damping is not zero
    assert np.abs(r0.series["base_pos"] - r3.series["base_pos"]).max() > 0


def test_same_config_same_log_twice(tmp_path):
    sc = load_scenario("paper", FAST)
    a = ClosedLoop(sc, "cbf").run(1.0)
    b = ClosedLoop(sc, "cbf").run(1.0)
    for k in ("theta", "tau", "base_pos", "support"):
        np.testing.assert_array_equal(a.series[k], b.series[k])
    save_run(a, tmp_path / "run")
    series, meta = load_log(tmp_path / "run")
    np.testing.assert_array_equal(series["tau"], a.series["tau"])
    assert meta["controller"] == "cbf"
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["sim_time_s"] == pytest.approx(1.0, abs=0.01)


def test_fall_is_detected_and_reported():
    # motors that cannot hold the robot: it collapses, and the run says so
    sc = load_scenario("nominal", FAST + ["controller.tau_limit_paper=5.0"])
    res = ClosedLoop(sc, "cbf").run(3.0)
    assert res.fell and res.metrics["fell"] is True
    assert "base" in res.fall_reason


def test_metrics_on_hand_made_series():
    t = np.arange(0, 10, 0.5)
    T = len(t)
    theta = np.zeros((T, 2))
    theta[4, 0] = 0.5      # violation 0.2 on a support sample
    theta[5, 1] = -0.4     # violation 0.1, but leg 1 is in swing there: not counted
    theta[6, 1] = -0.35    # violation 0.05 in support
    support = np.ones((T, 2), bool)
    support[5, 1] = False
    rp = np.zeros((T, 2))
    rp[:, 0] = np.radians(3.0)
    rp[:, 1] = np.radians(4.0)   # sqrt(3^2 + 4^2) = 5 deg
    tau = np.full((T, 3), 2.0)
    tau[3, 2] = -7.0
    qp = np.full(T, 100.0)
    qp[::5] = 2500.0
    acc = np.ones(T, bool)
    acc[-1] = False
    base = np.stack([0.1 * t, 0 * t, 0 * t + 0.4], axis=1)
    S = dict(t=t, theta=theta, support=support, rp_err=rp, tau=tau, qp_time_us=qp, qp_accepted=acc, base_pos=base)
    m = compute_metrics(S, 0.0, 100.0, -0.3, 0.3)
    assert m["max_violation_rad"] == pytest.approx(0.2)
    n_support = support[acc].sum()
    assert m["violation_rate_pct"] == pytest.approx(100 * 2 / n_support)
    assert m["rp_rmse_deg"] == pytest.approx(5.0)
    tau_ok = tau[acc]
    assert m["torque_rms_nm"] == pytest.approx(np.sqrt(np.mean(tau_ok**2)))
    assert m["torque_max_nm"] == 7.0
    assert m["qp_over_2ms_pct"] == pytest.approx(100 * 4 / 19)
    assert m["qp_failures"] == 1
    assert m["distance_m"] == pytest.approx(0.95)
    assert m["first_violation_time_s"] == 2.0
    np.testing.assert_allclose(violation(np.array([0.5, -0.4, 0.0]), -0.3, 0.3), [0.2, 0.1, 0.0])
    # roll/pitch of a quaternion
    q = np.array([[np.sin(0.05), 0, 0, np.cos(0.05)]])
    np.testing.assert_allclose(roll_pitch_from_quat_xyzw(q), [[0.1, 0.0]], atol=1e-12)
    # missing series are reported, not crashed on
    m = compute_metrics({"t": t, "tau": tau}, 0, 100)
    assert m["max_violation_rad"] is None and "theta" in m["missing"]


def test_scenario_overrides_are_checked():
    sc = load_scenario("paper", ["disturbance.leg=rf", "disturbance.torque_nm=40", "controller.kp_b=2000"])
    assert sc.disturbance.leg == "rf" and sc.disturbance.torque_nm == 40.0
    assert sc.controller_overrides("cbf")["kp_b"] == 2000
    with pytest.raises(ConfigError, match="no such scenario key"):
        load_scenario("paper", ["disturbance.legg=rf"])
    with pytest.raises(ConfigError, match="not found"):
        load_scenario("nonexistent")
    with pytest.raises(ValueError, match="unknown leg"):
        ClosedLoop(load_scenario("paper", ["disturbance.leg=xx"]), "cbf")
    assert load_scenario("paper").command_delay_ticks == 0
    assert load_scenario("nominal", ["command_delay_ticks=3"]).command_delay_ticks == 3
    for bad in ("-1", "2.5", "true", "two"):
        with pytest.raises(ConfigError, match="command_delay_ticks: must be an integer >= 0"):
            load_scenario("paper", [f"command_delay_ticks={bad}"])


def test_run_cli_writes_metrics(tmp_path):
    out = subprocess.run([sys.executable, "-m", "legged_wbc.cli", "run", "--controller", "damping", "--scenario",
                          "nominal", "--duration", "0.5", "--quiet", "--out", str(tmp_path)],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    m = json.loads((tmp_path / "metrics.json").read_text())
    for key in ("max_violation_rad", "violation_rate_pct", "rp_rmse_deg", "torque_rms_nm", "torque_max_nm",
                "qp_p99_us", "qp_over_2ms_pct", "qp_failures", "distance_m", "fell", "first_violation_time_s",
                "sim_time_s", "wall_time_s"):
        assert key in m


def test_quadruped_variant_walks():
    """The 4-legged variant is a config change only: same code, the trot from its robot YAML."""
    sc = load_scenario("nominal", FAST + ["robot=quadruped", "evaluation.window=3.0"])
    res = ClosedLoop(sc, "cbf").run(5.5)
    assert not res.fell, res.fall_reason
    assert res.series["theta"].shape[1] == 4
    assert res.metrics["qp_failures"] == 0 and res.metrics["distance_m"] > 0.1


@pytest.mark.slow
def test_full_paper_scenario_targets():
    """The full protocol (52 s each, ~2-4 min wall): ./run_tests.sh -m slow -k full_paper."""
    sc = load_scenario("paper")
    res = {m: ClosedLoop(sc, m).run() for m in ("damping", "cbf")}
    for m, r in res.items():
        assert not r.fell and r.metrics["qp_failures"] == 0 and r.metrics["distance_m"] >= 2.0, m
    assert res["damping"].metrics["max_violation_rad"] >= 0.1
    assert res["cbf"].metrics["max_violation_rad"] <= 0.005
    wbc0 = ClosedLoop(load_scenario("nominal"), "none").run(12.0)
    assert wbc0.metrics["first_violation_time_s"] is not None


@pytest.mark.slow
@pytest.mark.parametrize("ticks", [1, 2])
def test_full_paper_scenario_with_command_delay(ticks):
    """Late is not a fall: WBC-CBF on the full paper scenario (52 s) with every command acting 1 or 2
    ticks late stays up, within the barrier's 0.005 rad, without a QP failure (docs/realtime.md,
    *Command delay*: the first failing delay is 6 ticks)."""
    r = ClosedLoop(load_scenario("paper", [f"command_delay_ticks={ticks}"]), "cbf").run()
    m = r.metrics
    assert not r.fell, r.fall_reason
    assert m["qp_failures"] == 0 and m["max_violation_rad"] <= 0.005 and m["distance_m"] >= 2.0, m
