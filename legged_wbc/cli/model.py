"""``legged-wbc check-model | conditioning | generate-urdf | export-mjcf | check-robot``: the robot model's commands."""

from __future__ import annotations

import json
from pathlib import Path

from .argtypes import nonneg_int, positive_float, positive_int


def _print_json_or(result: dict, as_json: bool, text: str) -> None:
    print(json.dumps(result, indent=2) if as_json else text)


def cmd_check_model(args) -> int:
    from legged_wbc.tools.analysis.checks import check_model

    res = check_model(args.robot, states=args.states, seed=args.seed)
    lines = [f"{res['robot']}: Pinocchio vs MuJoCo at {res['states']} random states (max abs error)"]
    lines += [f"  {k:14s} {v:.3e}" for k, v in res["max_err"].items()]
    ok = res["max_abs_error"] <= args.tol
    lines.append(f"  {'all':14s} {res['max_abs_error']:.3e}  ({'OK' if ok else 'FAIL'}: target <= {args.tol:g})")
    _print_json_or(res, args.json, "\n".join(lines))
    return 0 if ok else 1


def cmd_conditioning(args) -> int:
    from legged_wbc.tools.analysis.checks import conditioning, plot_conditioning

    res = conditioning(args.robot, theta_max=args.range, samples=args.samples)
    if args.plot:
        plot_conditioning(res, args.plot)
    summary = {k: v for k, v in res.items() if k != "rows"}
    text = (f"{res['robot']}: {res['samples']} IK samples over +-{args.range} rad: rank(J_p) >= {res['rank_jp_min']}, "
            f"sigma_min(J_i) >= {res['sigma_min']:.3f}, |J_theta n| >= {res['alignment_min']:.3f}, "
            f"IK failures {res['ik_failures']}" + (f"; plot: {args.plot}" if args.plot else ""))
    _print_json_or(summary if not args.rows else res, args.json, text)
    return 0 if res["ik_failures"] == 0 and res["rank_jp_min"] == 3 else 1


def cmd_generate_urdf(args) -> int:
    from legged_wbc.robot import generate_urdf, load_robot_config

    cfg = load_robot_config(args.config)
    text = generate_urdf(cfg)
    out = Path(args.out) if args.out else cfg.urdf_path()
    out.write_text(text)
    print(f"wrote {out}")
    return 0


def cmd_export_mjcf(args) -> int:
    from legged_wbc.mujoco_model import build_spec

    spec = build_spec(args.robot, actuators=args.actuators)
    spec.compile()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(spec.to_xml())
    print(f"wrote {args.out}")
    return 0


def cmd_check_robot(args) -> int:
    import sys

    from legged_wbc.robot import ConfigError, find_robot_file, load_yaml_file
    from legged_wbc.tools.analysis.robot_check import check_robot, example_robot_data_table, report_text

    if args.all_example_robot_data:
        rows, text = example_robot_data_table()
        if args.stand:
            text += "\n\n" + _stand_rows(rows, args.stand)
        _print_json_or({"robots": rows}, args.json, text)
        bad = [r["robot"] for r in rows if r["problems"]]
        if bad:
            print(f"legged-wbc check-robot: cannot walk: {', '.join(bad)}", file=sys.stderr)
        return 1 if bad or not rows else 0
    if not args.file:
        raise ConfigError("a robot file (or name) is needed, or --all-example-robot-data")
    path = find_robot_file(args.file)
    d = load_yaml_file(path)
    body = d.get("robot", d) if isinstance(d, dict) else None
    if not isinstance(body, dict) or body.get("kind") != "urdf":
        raise ConfigError(f"{path}: not a robot described by its URDF (robot.kind: urdf); "
                          "generated robots: legged-wbc check-model")
    res = check_robot(path, data=d)
    text = report_text(res)
    if args.stand and not res["problems"]:
        from legged_wbc.tools.analysis.robot_check import stand_test

        res["stand"] = st = stand_test(path, args.stand)
        text += "\n  " + _stand_line(st, args.stand)
        if not st["stood"]:
            res["problems"].append(f"fell standing: {st['fall_reason']}")
    _print_json_or(res, args.json, text)
    if res["problems"]:
        print(f"legged-wbc check-robot: {path}: cannot walk: {'; '.join(res['problems'])}", file=sys.stderr)
        return 1
    return 0


def _stand_line(st: dict, seconds: float) -> str:
    if st["stood"]:
        return f"stood {seconds:g} s (base drift {st['drift_m'] * 1000:.1f} mm)"
    return f"did not stand {seconds:g} s: {st['fall_reason']}"


def _stand_rows(rows: list, seconds: float) -> str:
    """Each walkable row stood for ``seconds`` (its ``stand`` entry); the lines of the result."""
    from legged_wbc.tools.analysis.robot_check import stand_test
    from legged_wbc.urdf_robot import default_robot_dict

    out = [f"standing {seconds:g} s (WBC-CBF, the robot's own heights and gains):"]
    for r in rows:
        if r["problems"]:
            continue
        srdf = Path(r["srdf"])
        urdf = next(p for p in (srdf.parent.parent / "urdf", srdf.parent.parent / "robots") if (p / r["urdf"]).is_file())
        r["stand"] = st = stand_test(None, seconds, data={"robot": default_robot_dict(urdf / r["urdf"], srdf)})
        out.append(f"  {r['robot']:24s} {_stand_line(st, seconds)}")
        if not st["stood"]:
            r["problems"].append(f"fell standing: {st['fall_reason']}")
    return "\n".join(out)


def register(sub) -> None:

    s = sub.add_parser("check-model", help="Pinocchio vs MuJoCo agreement at random states")
    s.add_argument("--robot", default="hexapod", help="robot name or YAML path")
    s.add_argument("--states", type=positive_int, default=25, help="random joint configurations compared (default 25)")
    s.add_argument("--seed", type=nonneg_int, default=0, help="seed of the random states (default 0)")
    s.add_argument("--tol", type=positive_float, default=1e-9,
                   help="largest absolute error accepted; exit status 1 above it (default 1e-9)")
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s.set_defaults(func=cmd_check_model)

    s = sub.add_parser("conditioning", help="extended-Jacobian conditioning over relative-pitch targets")
    s.add_argument("--robot", default="hexapod", help="robot name or YAML path")
    s.add_argument("--range", type=positive_float, default=0.5, help="theta targets in +-RANGE [rad]")
    s.add_argument("--samples", type=positive_int, default=41, help="theta samples per leg")
    s.add_argument("--plot", help="write a PNG figure (paper Fig. 4)")
    s.add_argument("--rows", action="store_true", help="include every sample in the JSON")
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s.set_defaults(func=cmd_conditioning)

    s = sub.add_parser("generate-urdf", help="write the URDF of a robot YAML")
    s.add_argument("config", nargs="?", default="hexapod",
                   help="hexapod, quadruped (config/robot_NAME.yaml) or a robot YAML path (default hexapod)")
    s.add_argument("--out", help="URDF file to write (default: the robot's URDF under urdf/)")
    s.set_defaults(func=cmd_generate_urdf)

    s = sub.add_parser("export-mjcf", help="write the MuJoCo scene (MJCF) built from the URDF")
    s.add_argument("--robot", default="hexapod", help="robot name or YAML path")
    s.add_argument("--out", default="out/scene.xml", help="MJCF file to write (default out/scene.xml)")
    s.add_argument("--actuators", choices=["ideal", "realistic"], default="ideal",
                   help="realistic: with the robot YAML's joint friction (frictionloss, damping)")
    s.set_defaults(func=cmd_export_mjcf)

    s = sub.add_parser("check-robot", help="what was found and repaired in a robot's own URDF + SRDF; can it walk")
    s.add_argument("file", nargs="?", help="robot file (kind: urdf) or name (go2, anymal_c: config/robots/NAME.yaml)")
    s.add_argument("--all-example-robot-data", action="store_true",
                   help="check every quadruped of the installed example-robot-data (a robot file from its SRDF alone)")
    s.add_argument("--stand", type=positive_float, metavar="SECONDS",
                   help="also stand each walkable robot up and hold it this long in the headless loop (WBC-CBF)")
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s.set_defaults(func=cmd_check_robot)
