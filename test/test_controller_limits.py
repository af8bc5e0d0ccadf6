"""The limits the controller lives under (issue 20, item 2): the torque-speed envelope as the QP's
torque bounds, the relative-pitch barrier's slack, the joint position / velocity barriers."""

from __future__ import annotations

import numpy as np
import pytest

from legged_wbc.model import RobotModel
from mujoco_bridge.sim import ActuatorEnvelope
from wbc_controller import kernels as K
from wbc_controller.blocks.torque import torque_envelope, torque_envelope_reference


def envelope_params(stall, no_load, peak):
    base = {k: t(0) for k, t in K.PARAM_SCALARS}
    base.update({k: np.zeros(shape(1, 1), dtype=t) for k, t, shape in K.PARAM_ARRAYS})
    stall, no_load, peak = (np.asarray(a, dtype=float) for a in (stall, no_load, peak))
    base.update(tau_stall=stall, tau_slope=stall / no_load, tau_peak=peak)
    return K.Params(**base)


def test_torque_envelope_known_points():
    """Stall 250 N m, no-load speed 12 rad/s, peak 250 N m (the hip yaw) and a drive whose stall
    torque exceeds its current limit (300 / 10 / 250): the bounds at chosen velocities, by hand."""
    stall, no_load, peak = [250.0, 300.0], [12.0, 10.0], [250.0, 250.0]
    par = envelope_params(stall, no_load, peak)
    cases = [  # w (2 joints) -> (lo, hi) by hand
        ([0.0, 0.0], [-250.0, -250.0], [250.0, 250.0]),
        ([6.0, 4.0], [-250.0, -250.0], [125.0, 180.0]),         # motoring along +w: S (1 - w/W)
        ([-6.0, -4.0], [-125.0, -180.0], [250.0, 250.0]),       # the mirror image
        ([12.0, 10.0], [-250.0, -250.0], [0.0, 0.0]),           # no-load speed: no torque along +w
        ([20.0, -15.0], [-250.0, -0.0], [0.0, 250.0]),          # beyond it: zero, never negative
        ([2.0, 1.0], [-250.0, -250.0], [250.0 - 250.0 / 6.0, 250.0]),   # 300 - 30 = 270, capped at P
    ]
    lo, hi = np.zeros(2), np.zeros(2)
    for w, lo_ref, hi_ref in cases:
        w = np.array(w)
        torque_envelope(w, par, lo, hi)
        np.testing.assert_allclose(lo, lo_ref, rtol=1e-15, atol=0, err_msg=f"w={w}")
        np.testing.assert_allclose(hi, hi_ref, rtol=1e-15, atol=0, err_msg=f"w={w}")
        rl, rh = torque_envelope_reference(w, np.array(stall), np.array(no_load), np.array(peak))
        np.testing.assert_array_equal(lo, rl)
        np.testing.assert_array_equal(hi, rh)


def test_torque_envelope_is_the_simulation_s():
    """The controller's bounds are the simulated drives' envelope (one formula, robot YAML)."""
    rm = RobotModel("hexapod")
    par = envelope_params(rm.stall_torque, rm.no_load_speed, rm.effort)
    env = ActuatorEnvelope(rm.stall_torque, rm.no_load_speed, rm.effort)
    w = np.random.default_rng(3).uniform(-20, 20, rm.n)
    lo, hi = np.zeros(rm.n), np.zeros(rm.n)
    torque_envelope(w, par, lo, hi)
    slo, shi = env.limits(w)
    np.testing.assert_allclose(lo, slo, rtol=1e-15, atol=1e-12)
    np.testing.assert_allclose(hi, shi, rtol=1e-15, atol=1e-12)


# ---------------------------------------------------------------------------- controller on a walking state

from legged_wbc.closed_loop import ClosedLoop  # noqa: E402
from legged_wbc.gait import SWING_UP  # noqa: E402
from legged_wbc.scenario import load_scenario  # noqa: E402
from wbc_controller.blocks.joint_limits import joint_limit_bounds, joint_limit_bounds_reference  # noqa: E402
from wbc_controller.controller import ControllerInput  # noqa: E402
from test_fast_controller import pair  # noqa: E402  (fast and reference controllers of one config)


@pytest.fixture(scope="module")
def lifting_state():
    """A closed-loop walking input from ~3.75 s (gait from 3 s) whose legs out of the support set are
    lifting off (``SWING_UP``: no relative-pitch CBF row on them, ``blocks.cbf.barrier_legs``)."""
    loop = ClosedLoop(load_scenario("paper"), "cbf")
    seen = []
    real = loop.ctl.update

    def hooked(inp):
        swing = ~inp.support
        if not seen and inp.t >= 3.75 and swing.sum() >= 2 and np.all(loop.ctl.gait.state(inp.t)[0][swing] == SWING_UP):
            seen.append(ControllerInput(t=inp.t, q=inp.q.copy(), v=inp.v.copy(), support=inp.support.copy(),
                                        tau_ext=inp.tau_ext.copy()))
        return real(inp)

    loop.ctl.update = hooked
    loop.run(4.6)
    return loop, seen[0]


def test_joint_limit_bounds_known_answer():
    """k_p 400, k_d 40, k_v 20, limits [-1, 2] rad, 10 rad/s: bounds by hand."""
    par = envelope_params([1.0], [1.0], [1.0])._replace(jl_kp=400.0, jl_kd=40.0, jl_kv=20.0, q_lower=np.array([-1.0]),
                                                        q_upper=np.array([2.0]), v_limit=np.array([10.0]))
    cases = [  # q, dq -> lo, hi
        (0.0, 0.0, -200.0, 200.0),                 # velocity barriers: +-k_v v_max = +-200; position: -400, +800
        (1.9, 0.0, -200.0, 40.0),                  # near the upper limit: 400 * 0.1
        (1.9, 2.0, -240.0, -40.0),                 # moving towards it: 40 - 80; lower: max(-1160-80, -240)
        (-0.95, -3.0, 100.0, 260.0),               # near the lower limit moving down: -20 + 120; upper 20 * 13
        (0.5, 9.0, -380.0, 20.0),                  # velocity barrier: 20 (10 - 9); lower max(-600-360, -380)
    ]
    for q, dq, lo_ref, hi_ref in cases:
        lo, hi = joint_limit_bounds(par, 0, q, dq)
        assert (lo, hi) == pytest.approx((lo_ref, hi_ref), rel=1e-14, abs=1e-12), (q, dq)
        rl, rh = joint_limit_bounds_reference(np.array([q]), np.array([dq]), 400.0, 40.0, 20.0, np.array([-1.0]),
                                              np.array([2.0]), np.array([10.0]))
        assert (rl[0], rh[0]) == (lo, hi)
    # crossing bounds (k_v small: the velocity barrier asks for more than the position one allows):
    # both at their midpoint, one value the QP can meet
    par2 = par._replace(jl_kv=1.0)
    lo, hi = joint_limit_bounds(par2, 0, 0.0, -30.0)      # hi = min(800 + 1200, 40) = 40; lo = max(-400 + 1200, 20) = 800
    assert lo == hi == pytest.approx(420.0)


def test_joint_limit_barrier_holds_a_joint_near_its_limit(lifting_state):
    """A lifting swing leg's knee 0.01 rad below its upper limit moving up at 5 rad/s: the barrier row asks
    for q_ddot <= min(400 * 0.01 - 40 * 5, 200 (12 - 5)) = -196 rad/s^2; the accepted solution meets
    it (fast cycle: found violated by the solve without the last rows, solved again with them), the
    oracle agrees; without the option the QP accelerates the knee on towards the limit. (A lifting
    leg: a landing one has the relative-pitch CBF row too, which this knee rate would make bind.)"""
    loop, inp = lifting_state
    rm = loop.rm
    leg = int(np.flatnonzero(~inp.support)[0])
    j = int(rm.leg_joints[leg][2])                 # its knee
    q, v = inp.q.copy(), inp.v.copy()
    q[7 + j] = rm.upper[j] - 0.01
    v[6 + j] = 5.0
    near = ControllerInput(t=inp.t, q=q, v=v, support=inp.support, tau_ext=inp.tau_ext)
    free, _ = pair(loop)
    out_free = free.update(near)
    assert out_free.diag.qp_accepted and free.last_x[6 + j] > -196.0
    fast, ref = pair(loop, joint_limit_barrier=True)
    of, orf = fast.update(near), ref.update(near)
    assert of.diag.qp_accepted and orf.diag.qp_accepted
    p = fast.problem
    row = fast.row_jl + j
    assert p.C[row, 6 + j] == 1.0 and np.count_nonzero(p.C[row]) == 1
    assert p.u[row] == pytest.approx(-196.0, rel=1e-12)
    assert fast.last_x[6 + j] <= -196.0 + 1e-6 * 196.0
    assert fast.last_x[6 + j] == pytest.approx(-196.0, rel=1e-6)       # binding
    np.testing.assert_allclose(of.tau, orf.tau, rtol=0, atol=1e-9 * np.abs(orf.tau).max())
    assert fast._tau_rows_hold > 0                   # the next cycles keep the last rows in the solve


# ---------------------------------------------------------------------------- the settings preset
def test_preset_robust_is_every_scenario_s_default_and_paper_is_the_parameter_files():
    """``preset``: robust (default) puts cbf_margin 0.01, sigma_dq_meas 0.15 and the leg-collision
    barrier under the scenario's own blocks; paper leaves the parameter files' values (the paper's method); explicit keys win;
    a bad preset is one clear error."""
    from legged_wbc.robot import ConfigError
    from legged_wbc.scenario import PRESETS, load_scenario
    from state_estimator.config import load_estimator_config
    from wbc_controller.config import load_wbc_config

    files_ctl, files_est = load_wbc_config(), load_estimator_config()
    assert files_ctl.cbf_margin == 0.0 and files_est.touchdown.sigma_dq_meas == 0.05    # the paper's
    for name in ("paper", "nominal", "paper_full"):
        sc = load_scenario(name)
        assert sc.preset == "robust"
        assert load_wbc_config(overrides=sc.controller_overrides("cbf")).cbf_margin == 0.01
        assert load_wbc_config(overrides=sc.controller_overrides("cbf")).cbf_margin_mode == "tau_ext"
        assert load_estimator_config(overrides=sc.estimator).touchdown.sigma_dq_meas == 0.15
        sp = load_scenario(name, ["preset=paper"])
        assert load_wbc_config(overrides=sp.controller_overrides("cbf")).cbf_margin == files_ctl.cbf_margin
        assert load_wbc_config(overrides=sp.controller_overrides("cbf")).cbf_margin_mode == "fixed"
        assert load_estimator_config(overrides=sp.estimator).touchdown.sigma_dq_meas == 0.05
    mine = load_scenario("paper", ["controller.cbf_margin=0.02", "estimator.touchdown.sigma_dq_meas=0.1"])
    assert mine.controller["cbf_margin"] == 0.02 and mine.estimator["touchdown"]["sigma_dq_meas"] == 0.1
    assert PRESETS["robust"]["controller"] == {"cbf_margin": 0.01, "cbf_margin_mode": "tau_ext",
                                               "leg_collision_barrier": True}   # what the docs say
    assert load_wbc_config(overrides=load_scenario("paper").controller_overrides("cbf")).leg_collision_barrier
    assert not load_wbc_config(overrides=load_scenario("paper", ["preset=paper"]).controller_overrides("cbf")
                               ).leg_collision_barrier
    with pytest.raises(ConfigError, match="scenario.preset: must be one of robust, paper"):
        load_scenario("paper", ["preset=fast"])


def test_run_cbf_paper_and_the_experiment_use_the_paper_preset(tmp_path):
    """``legged-wbc run --controller cbf_paper`` = cbf with preset paper (a short run's metrics say
    cbf and the saved scenario has the preset); the paper experiment's runs carry preset=paper."""
    import json
    import subprocess
    import sys

    from legged_wbc.tools.experiments.experiment import plan

    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "legged_wbc.cli", "run", "--controller", "cbf_paper", "--duration", "0.1",
                        "--quiet", "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    meta = json.loads(str(np.load(out / "log.npz")["meta"]))
    assert meta["controller"] == "cbf" and meta["scenario"]["preset"] == "paper"
    import yaml

    assert plan(tmp_path / "exp", None, None, headless=True)
    written = sorted((tmp_path / "exp" / "scenarios").glob("*.yaml"))
    assert written and all(yaml.safe_load(p.read_text())["scenario"]["preset"] == "paper" for p in written)


# ---------------------------------------------------------------------------- torque-aware boundary
def test_disturbance_shift_known_answer():
    """``cbf_margin_mode: tau_ext``: a leg whose J_p is the first three joints has n = e_4 (J_theta n
    = 1 > 0); null-space inertia 0.5; tau_ext (opposing the motor) -10 N m on joint 4 is an external
    +10 N m: d = 20 rad/s^2 up, the upper bound moves in by 20 / k_p,b = 0.02 rad (capped at
    cbf_margin_max), the opposite torque moves the lower bound; swing legs and k_p,b = 0: nothing."""
    from wbc_controller.blocks.cbf import disturbance_shift, disturbance_shift_reference

    N = 3
    J = np.zeros((N, 4, 4))
    J[:, :3, :3] = np.eye(3)
    J[:, 3, 3] = 1.0
    leg_j = np.arange(12, dtype=np.int64).reshape(N, 4)
    leg_v = leg_j + 6
    M = np.eye(18) * 2.0
    for i in range(N):
        M[leg_v[i, 3], leg_v[i, 3]] = 0.5
    tau_ext = np.zeros(12)
    tau_ext[leg_j[:, 3]] = [-10.0, 10.0, -10.0]
    support = np.array([True, True, False])
    par = envelope_params([1.0], [1.0], [1.0])._replace(kp_b=1000.0, cbf_margin_max=0.1)
    shift, nvec = np.full((N, 2), 7.0), np.zeros(4)
    disturbance_shift(support, J, M, leg_v, leg_j, tau_ext, par, shift, nvec)
    np.testing.assert_allclose(shift, [[0.0, 0.02], [0.02, 0.0], [0.0, 0.0]], rtol=1e-14, atol=0)
    np.testing.assert_allclose(disturbance_shift_reference(support, J, M, leg_v, leg_j, tau_ext, 1000.0, 0.1), shift,
                               rtol=1e-14, atol=0)
    disturbance_shift(support, J, M, leg_v, leg_j, tau_ext, par._replace(cbf_margin_max=0.005), shift, nvec)
    np.testing.assert_array_equal(shift, [[0.0, 0.005], [0.005, 0.0], [0.0, 0.0]])
    disturbance_shift(support, J, M, leg_v, leg_j, tau_ext, par._replace(kp_b=0.0), shift, nvec)
    np.testing.assert_array_equal(shift, 0.0)


@pytest.mark.slow
def test_tau_ext_boundary_holds_paper_full():
    """The paper's 80 N m push on realistic drives (``paper_full``): the fixed barrier settles
    ~0.07 rad beyond its bound (d / k_p,b), the torque-aware boundary holds it (<= 0.005 rad), no fall,
    no QP failure."""
    from legged_wbc.scenario import load_scenario

    res = ClosedLoop(load_scenario("paper_full", ["controller.cbf_margin_mode=tau_ext"]), "cbf").run()
    m = res.metrics
    assert not res.fell and m["qp_failures"] == 0 and m["max_violation_rad"] <= 0.005, m


def test_tau_ext_boundary_short_closed_loop():
    """Short closed loop (CI): paper_full's 80 N m push from 3.5 s for 3 s on realistic drives. The
    fixed boundary (robust preset, 0.01 rad back-off) lets the pushed support leg settle ~0.07 rad
    beyond the bound; the torque-aware one keeps it within 0.005 rad; no fall, no QP failure."""
    from legged_wbc.metrics import violation
    from legged_wbc.scenario import load_scenario

    worst = {}
    for mode in ("fixed", "tau_ext"):
        sc = load_scenario("paper_full", ["disturbance.start_offset=-2.5", f"controller.cbf_margin_mode={mode}"])
        res = ClosedLoop(sc, "cbf").run(7.0)
        S = res.series
        assert not res.fell and S["qp_accepted"].all()
        worst[mode] = float((violation(S["theta"], -0.3, 0.3) * S["support"]).max())
    assert worst["fixed"] > 0.03, worst
    assert worst["tau_ext"] <= 0.005, worst
