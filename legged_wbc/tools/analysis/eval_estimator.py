"""``legged-wbc eval-estimator``: the estimator in closed-loop walking against MuJoCo ground truth.

Two headless runs of the ``nominal`` scenario (WBC-CBF), the controller fed by the estimator with
gating on. A *shadow* estimator with gating off is fed the very same sensor samples, so the two
velocity estimates are compared on one trajectory:

* **nominal walking**: touchdown latency vs the first true foot-floor contact (per swing-down
  interval: the first sample with contact -> the first sample flagged as touchdown), false
  touchdowns (a flag with no contact before it in that swing-down), missed touchdowns (contact in
  swing-down, no flag before the swing-down ends), base-velocity RMSE (world frame, from ``t_s``)
  with gating on and off;
* **support plane**: the angle between the estimated support-plane normal and (a) the true terrain
  normal under the support feet (``normal_error_deg_{mean,max}``, as ``metrics.json``), (b) the
  least-squares plane through the support feet's ground-truth positions
  (``plane_fit_error_deg_{mean,max}``: the estimator's own error: kinematics, attitude, filter lag and
  dead band, without the terrain's departure from a plane), from ``t_s``; meaningful off flat
  ground (``--scenario slope_up`` etc.; on flat ground both are 0 with the dead band);
* **slip**: in steady walking a horizontal force pushes one support foot so it slides
  (``slip_force`` N for ``slip_duration`` s, mid-stance); the velocity RMSE over the slip window
  (from the push to 0.3 s after it) with gating on and off. Gating must win.
"""

from __future__ import annotations

import json

import numpy as np

from state_estimator.estimator import StateEstimator


def touchdown_stats(t: np.ndarray, phase: np.ndarray, touchdown: np.ndarray, contact: np.ndarray,
                    t_min: float = 0.0) -> dict:
    """Latency / false / missed touchdowns per swing-down interval (phase == 2) after ``t_min``."""
    from legged_wbc.gait import SWING_DOWN

    lat, false, missed, late, intervals = [], 0, 0, 0, 0
    for leg in range(phase.shape[1]):
        sd = (phase[:, leg] == SWING_DOWN) & (t >= t_min)
        edges = np.flatnonzero(np.diff(np.concatenate([[0], sd.astype(int), [0]])))
        for a, b in zip(edges[::2], edges[1::2]):
            intervals += 1
            c = np.flatnonzero(contact[a:b, leg])
            d = np.flatnonzero(touchdown[a:b, leg])
            tc = t[a + c[0]] if c.size else None
            td = t[a + d[0]] if d.size else None
            if td is not None and (tc is None or td < tc):
                false += 1
            elif tc is not None and td is None:
                missed += 1
            elif tc is not None:
                lat.append(td - tc)
            else:
                late += 1  # landed after the nominal swing ended: the gait takes over, nothing to detect
    lat_ms = 1e3 * np.array(lat)
    return {"touchdown_latency_ms_mean": float(lat_ms.mean()) if lat else None,
            "touchdown_latency_ms_max": float(lat_ms.max()) if lat else None,
            "false_touchdowns": false, "missed_touchdowns": missed, "detected_touchdowns": len(lat),
            "landings_after_swing_end": late, "swing_down_intervals": intervals}


def plane_errors(series: dict, mask: np.ndarray) -> dict:
    """``plane_fit_error_deg_{mean,max}``: the estimated normal against the least-squares plane through
    the ground-truth foot positions of the estimated support feet (ticks of ``mask`` with a fit)."""
    from state_estimator.support_plane import plane_fit_reference

    errs = []
    for k in np.flatnonzero(mask):
        ok, nx, ny, nz, _ = plane_fit_reference(series["foot_pos_gt"][k], series["support"][k])
        if ok:
            c = float(np.clip(np.dot(series["normal_est"][k], (nx, ny, nz)), -1.0, 1.0))
            errs.append(np.degrees(np.arccos(c)))
    return {"plane_fit_error_deg_mean": float(np.mean(errs)) if errs else None,
            "plane_fit_error_deg_max": float(np.max(errs)) if errs else None}


def _normal_errors(S: dict, sc, win) -> dict:
    """The estimated support plane's errors over the window ``win``: against the terrain under the
    support feet (``normal_error_deg_mean`` / ``_max``) and against the plane through their true
    positions (:func:`plane_errors`)."""
    from legged_wbc.terrain_metrics import terrain_metrics

    tm = terrain_metrics(S, sc.t_s, float(S["t"][-1]))
    out = {"normal_error_deg_mean": tm["normal_error_deg_mean"], "normal_error_deg_max": tm["normal_error_deg_max"]}
    out.update(plane_errors(S, win & S["support"].any(axis=1)))
    return out


def run_eval(duration: float = 12.0, slip: bool = True, slip_leg: str = "lm", slip_force: float = 350.0,
             slip_duration: float = 0.15, overrides: list[str] | None = None, scenario: str = "nominal") -> dict:
    from legged_wbc.closed_loop import ClosedLoop
    from legged_wbc.gait import GaitScheduler
    from legged_wbc.scenario import load_scenario

    def one(with_slip: bool) -> tuple[dict, object, np.ndarray]:
        sc = load_scenario(scenario, overrides)
        loop = ClosedLoop(sc, "cbf")
        rm = loop.rm
        shadow = StateEstimator(rm, GaitScheduler(loop.gait_cfg, rm.cfg.leg_names),
                                loop.ecfg.replace(**{"velocity.gating": False}), dt=0.002)
        shadow.reset(loop.q0)
        leg = rm.cfg.leg_names.index(slip_leg)
        sched = loop.ctl.gait
        # mid-stance of the slipping leg, some cycles into steady walking
        t_push = None
        if with_slip:
            t = sc.t_s + 1.0
            while not (sched.nominal_support(t)[leg] and sched.nominal_support(t + slip_duration)[leg]
                       and not sched.nominal_support(t - 0.2)[leg]):
                t += 0.002
            t_push = t + 0.1
        shadow_vel = []

        def on_tick(lp, t, f, est):
            e2 = shadow.update(t, f.joint_pos, f.joint_vel, f.joint_effort, f.imu_quat_xyzw, f.imu_gyro, f.imu_accel)
            shadow_vel.append(e2.v_world)
            if t_push is not None:
                push = t_push <= t < t_push + slip_duration
                lp.sim.set_foot_force(leg, np.array([slip_force, 0.0, 0.0]) if push else None)

        res = loop.run(duration, on_tick=on_tick)
        return res.series, (sc, t_push, res.metrics), np.array(shadow_vel)

    S, (sc, _, metrics), vel_off = one(False)
    t = S["t"]
    win = t >= sc.t_s

    def rmse(est, mask):
        e = est[mask] - gt_cur[mask]
        return float(np.sqrt(np.mean(np.sum(e**2, axis=1))))

    gt_cur = S["base_vel_world"]
    out = touchdown_stats(t, S["phase"], S["touchdown"], S["contact_gt"], t_min=sc.gait_start)
    out["vel_rmse_mps"] = rmse(S["est_vel_world"], win)
    out["vel_rmse_nogating_mps"] = rmse(vel_off, win)
    out.update(_normal_errors(S, sc, win))
    out["scenario"] = sc.name
    out["fell"] = bool(metrics["fell"])
    if slip:
        S2, (_, t_push, _), vel_off2 = one(True)
        t2 = S2["t"]
        gt_cur = S2["base_vel_world"]
        w2 = (t2 >= t_push) & (t2 < t_push + slip_duration + 0.3)
        out["slip_vel_rmse_mps"] = rmse(S2["est_vel_world"], w2)
        out["slip_vel_rmse_nogating_mps"] = rmse(vel_off2, w2)
        out["slip"] = {"leg": slip_leg, "force_n": slip_force, "start_s": float(t_push), "duration_s": slip_duration}
    out["duration_s"] = duration
    return out


def cmd_eval(args) -> int:
    res = run_eval(duration=args.duration, slip=not args.no_slip, slip_leg=args.slip_leg,
                   slip_force=args.slip_force, overrides=args.set, scenario=args.scenario)
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        for k, v in res.items():
            print(f"  {k:28s} {v:.4g}" if isinstance(v, float) else f"  {k:28s} {v}")
    ok = ((res["touchdown_latency_ms_mean"] or 0) <= 10 and res["false_touchdowns"] == 0
          and res["vel_rmse_mps"] <= 0.03
          and ("slip_vel_rmse_mps" not in res or res["slip_vel_rmse_mps"] < res["slip_vel_rmse_nogating_mps"]))
    return 0 if ok else 1
