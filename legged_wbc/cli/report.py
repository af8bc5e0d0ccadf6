"""``legged-wbc compare`` and ``legged-wbc experiment``: Table 3 and figures from bags / runs, and the
paper's protocol end to end (see :mod:`legged_wbc.tools.analysis.compare` and :mod:`legged_wbc.tools.experiments.experiment`)."""

from __future__ import annotations

import sys

from legged_wbc.cli.argtypes import nonneg_float, nonneg_int, positive_float


def cmd_compare(args) -> int:
    from legged_wbc.tools.analysis.bag_metrics import RunInputError
    from legged_wbc.tools.analysis.compare import compare

    window = tuple(args.window) if args.window else None
    if window and not window[0] < window[1]:
        print(f"legged-wbc compare: --window {window[0]:g} {window[1]:g}: T0 must be < T1", file=sys.stderr)
        return 2
    try:
        res = compare(args.inputs, args.out, window=window, figures=not args.no_figures)
    except RunInputError as exc:
        print(f"legged-wbc compare: {exc}", file=sys.stderr)
        return 2
    for name, line in res["headlines"].items():
        print(f"{name}: {line}")
    print(f"wrote {args.out}/report.md, {args.out}/metrics.json and {len(res['figures'])} figure(s)")
    return 0


def cmd_experiment(args) -> int:
    from legged_wbc.tools.experiments.experiment import ExperimentError, experiment

    controllers = tuple(c.strip() for c in args.controllers.split(",") if c.strip())
    bad = [c for c in controllers if c not in ("none", "damping", "cbf")]
    if bad:
        print(f"legged-wbc experiment: unknown controller(s) {bad} (none, damping, cbf)", file=sys.stderr)
        return 2
    for name, pair in (("--torque-range", args.torque_range), ("--start-range", args.start_range)):
        if pair and pair[0] > pair[1]:
            print(f"legged-wbc experiment: argument {name}: {pair[0]:g} {pair[1]:g}: LO must be <= HI", file=sys.stderr)
            return 2
    try:
        return experiment(args.out, duration=args.duration, sets=args.set, repeat=args.repeat, seed=args.seed,
                          headless=args.headless, storage=args.storage, controllers=controllers, force=args.force,
                          progress=not args.quiet, torque_range=tuple(args.torque_range) if args.torque_range else None,
                          start_range=tuple(args.start_range) if args.start_range else None,
                          figures=not args.no_figures, mode=args.mode, layout=args.layout)
    except ExperimentError as exc:
        print(f"legged-wbc experiment: {exc}", file=sys.stderr)
        return 2


def register(sub) -> None:
    s = sub.add_parser("compare", help="Table 3 and figures from rosbag2 bags and/or headless run directories",
                       description="Reads rosbag2 directories (MCAP or sqlite3) recorded by the stack and/or "
                                   "headless run directories (log.npz), computes the metrics of 'legged-wbc run' "
                                   "and writes OUT/report.md, OUT/metrics.json and PNG figures.")
    s.add_argument("inputs", nargs="+", metavar="RUN", help="bag directory (metadata.yaml) or headless run directory")
    s.add_argument("--out", required=True, help="output directory")
    s.add_argument("--window", nargs=2, type=nonneg_float, metavar=("T0", "T1"),
                   help="evaluation window [s] (default: the scenario's t_s .. t_s + window)")
    s.add_argument("--no-figures", action="store_true", help="report and metrics only")
    s.set_defaults(func=cmd_compare)

    s = sub.add_parser("experiment", help="the paper's protocol (WBC-0 nominal, WBC-D and WBC-CBF paper) end to end",
                       description="Runs WBC-0 on the nominal scenario and WBC-D / WBC-CBF on the paper scenario "
                                   "through the ROS stack in lockstep (or --headless), keeps the bags under "
                                   "OUT/bags and writes the comparison to OUT/report.")
    s.add_argument("protocol", choices=["paper"], help="experiment protocol")
    s.add_argument("--out", required=True, help="output directory")
    s.add_argument("--duration", type=positive_float, help="simulated seconds per run (default: the scenario's)")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help="scenario override for every run (dotted key)")
    s.add_argument("--repeat", type=nonneg_int, default=0, metavar="N",
                   help="N randomized disturbances (leg, sign, magnitude, start) for WBC-D and WBC-CBF")
    s.add_argument("--seed", type=nonneg_int, default=0, help="seed of the randomized disturbances")
    s.add_argument("--torque-range", nargs=2, type=nonneg_float, metavar=("LO", "HI"),
                   help="--repeat: disturbance magnitude range [N m] (default: 0.5x - 1.5x the scenario's)")
    s.add_argument("--start-range", nargs=2, type=nonneg_float, metavar=("LO", "HI"),
                   help="--repeat: disturbance start after t_s [s] (default: 10%%-90%% of what fits in the window)")
    s.add_argument("--controllers", default="none,damping,cbf", help="subset of none,damping,cbf")
    s.add_argument("--headless", action="store_true", help="in-process loop instead of the ROS stack (faster)")
    s.add_argument("--mode", choices=["lockstep", "realtime"], default="lockstep",
                   help="ROS runs: lockstep (deterministic) or realtime (wall-clock paced, deadlines counted)")
    s.add_argument("--layout", choices=["container", "processes"],
                   help="ROS runs: process layout of the launch file (default: its default, container)")
    s.add_argument("--storage", choices=["mcap", "sqlite3"], default="mcap", help="bag storage")
    s.add_argument("--force", action="store_true", help="re-record runs whose output already exists")
    s.add_argument("--no-figures", action="store_true", help="report and metrics only")
    s.add_argument("--quiet", action="store_true", help="no progress lines")
    s.set_defaults(func=cmd_experiment)
