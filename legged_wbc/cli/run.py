"""``legged-wbc run``: the headless walking simulation with metrics (no ROS)."""

from __future__ import annotations

import json
import sys

from legged_wbc.cli.argtypes import check_out_dir, positive_float


def cmd_run(args) -> int:
    from legged_wbc.closed_loop import ClosedLoop, save_run
    from legged_wbc.metrics import whole_run_line
    from legged_wbc.scenario import load_scenario

    try:
        mode, sets = args.controller, list(args.set or [])
        if args.robot:                   # the scenario on another robot: its size and settings (robot_defaults)
            sets.insert(0, f"robot={args.robot}")
        if mode == "cbf_paper":             # WBC-CBF with the paper's settings (the preset under the --set's)
            mode, sets = "cbf", ["preset=paper"] + sets
        sc = load_scenario(args.scenario, sets)
        check_out_dir(args.out)
        loop = ClosedLoop(sc, mode, solver=args.solver)
    except ValueError as exc:   # a ConfigError, or e.g. an unknown disturbance leg
        print(f"legged-wbc run: {exc}", file=sys.stderr)
        return 2
    viewer = None
    if args.viewer:
        from mujoco_bridge.viewer import attach_viewer

        viewer = attach_viewer(loop)  # no display: says so once and returns a no-op viewer
    try:
        res = loop.run(args.duration, progress=not args.quiet)
    finally:
        if viewer is not None:
            viewer.close()
    try:
        out = save_run(res, args.out)
    except OSError as exc:          # e.g. the disk full: nothing that looks complete is left
        print(f"legged-wbc run: cannot write {args.out} ({exc.strerror or exc}): no metrics.json, no log.npz",
              file=sys.stderr)
        return 1
    m = res.metrics
    end = m["sim_time_s"]
    if m.get("window_s") is None:
        print(f"legged-wbc run: warning: the run ends at {end:g} s, before the evaluation window "
              f"({m['window_requested_s'][0]:g} - {m['window_requested_s'][1]:g} s): no Table-3 metrics", file=sys.stderr)
    elif m["window_s"] != m["window_requested_s"]:
        print(f"legged-wbc run: warning: metrics over {m['window_s'][0]:g} - {m['window_s'][1]:g} s only (the "
              f"evaluation window is {m['window_requested_s'][0]:g} - {m['window_requested_s'][1]:g} s)", file=sys.stderr)
    d = sc.disturbance
    if d.enabled and not m.get("disturbance_applied"):
        print(f"legged-wbc run: warning: the disturbance of {sc.name} (from {d.start:g} s) was never applied "
              f"(run of {end:g} s): disturbance_applied false", file=sys.stderr)
    if args.json:
        print(json.dumps(m, indent=2))
    else:
        print(f"{args.controller} on {sc.name}: {m['sim_time_s']:.1f} s simulated in {m['wall_time_s']:.1f} s "
              f"({m['realtime_factor']:.2f}x real time){'  FELL: ' + res.fall_reason if res.fell else ''}")
        keys = ["max_violation_rad", "violation_rate_pct", "rp_rmse_deg", "torque_rms_nm", "torque_max_nm",
                "torque_saturation_pct", "cbf_slack_max", "cbf_slack_ticks", "min_leg_distance_m", "leg_contacts", "qp_p99_us", "qp_over_2ms_pct", "qp_failures", "distance_m", "first_violation_time_s"]
        for k in keys:
            v = m.get(k)
            print(f"  {k:24s} {v:.4g}" if isinstance(v, float) else f"  {k:24s} {v}")
        print(f"  {'whole run':24s} {whole_run_line(m)}")
        print(f"wrote {out}/metrics.json and {out}/log.npz")
    return 1 if res.fell else 0


def register(sub) -> None:
    s = sub.add_parser("run", help="headless closed-loop walking simulation with metrics")
    s.add_argument("--controller", choices=["none", "damping", "cbf", "cbf_paper"], default="cbf",
                   help="none = WBC-0, damping = WBC-D, cbf = WBC-CBF (the scenario's preset, robust by "
                   "default), cbf_paper = WBC-CBF with the paper's settings (--set preset=paper)")
    s.add_argument("--scenario", default="paper", help="scenario name (config/scenarios) or YAML path")
    s.add_argument("--robot", metavar="NAME_OR_FILE", help="robot the scenario walks (default: the scenario's): a "
                   "name (config/robots/NAME.yaml, e.g. go2, anymal_c; hexapod, quadruped) or a robot file; a "
                   "scenario written for another robot takes this one's heights and settings (--set robot=...)")
    s.add_argument("--duration", type=positive_float, help="simulated seconds (default: the scenario's)")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a scenario value (dotted key)")
    s.add_argument("--solver", choices=["daqp", "proxqp", "osqp"], help="QP backend (default: config)")
    s.add_argument("--out", required=True, help="output directory (metrics.json, log.npz)")
    s.add_argument("--json", action="store_true", help="print metrics.json")
    s.add_argument("--quiet", action="store_true", help="no progress line")
    s.add_argument("--viewer", action="store_true", help="open MuJoCo's viewer (needs a display; rendered off the "
                   "control path); without a display the run goes on headless")
    s.set_defaults(func=cmd_run)
