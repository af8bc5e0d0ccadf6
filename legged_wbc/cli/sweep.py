"""``legged-wbc sweep``: randomized paired trials of the headless loop on a Dask cluster
(:mod:`legged_wbc.tools.experiments.sweep`, ``docs/sweeps.md``)."""

from __future__ import annotations


def cmd_sweep(args) -> int:
    from legged_wbc.tools.experiments.sweep import DEFAULT_RANDOMIZE, run_sweep

    randomize = DEFAULT_RANDOMIZE if args.randomize is None else tuple(x.strip() for x in args.randomize.split(",") if x.strip())
    if "default" in randomize:     # the default categories plus the ones named with it (e.g. default,command)
        randomize = tuple(dict.fromkeys(c for x in randomize for c in (DEFAULT_RANDOMIZE if x == "default" else (x,))))
    if args.randomize is not None and args.randomize.strip().lower() == "none":
        randomize = ()
    return run_sweep(args.scenario, args.trials, args.out, controllers=args.controllers.split(","), seed=args.seed,
                     randomize=randomize, duration=args.duration, workers=args.workers, scheduler=args.scheduler,
                     resume=args.resume, ranges=args.ranges, sets=args.set, dashboard=args.dashboard,
                     figures=not args.no_figures)


def register(sub) -> None:
    from legged_wbc.cli.argtypes import nonneg_int, positive_float, positive_int

    s = sub.add_parser("sweep", help="randomized paired trials of the headless loop on a Dask cluster, with statistics")
    s.add_argument("scenario", help="scenario name (config/scenarios) or YAML path")
    s.add_argument("--trials", type=positive_int, required=True, help="paired trials (each runs every controller)")
    s.add_argument("--out", required=True, help="output directory (trials/*.json, summary.json, report.md, figures)")
    s.add_argument("--controllers", default="damping,cbf",
                   help="comma-separated: none, damping, cbf, or variants of the ranges YAML (default damping,cbf)")
    s.add_argument("--seed", type=nonneg_int, default=0, help="seed of the trials' draws")
    s.add_argument("--randomize", metavar="LIST",
                   help="comma-separated subset of disturbance,friction,noise,mass,push,terrain,actuators,delay,command "
                   "(default: disturbance,friction,noise,mass,push, also named 'default', e.g. default,command; "
                   "'none': nothing)")
    s.add_argument("--duration", type=positive_float, help="simulated seconds per run (default: the scenario's)")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--workers", type=positive_int, help="LocalCluster worker processes (default: one per core)")
    g.add_argument("--scheduler", metavar="ADDRESS", help="run on an existing Dask cluster, e.g. tcp://host:8786")
    s.add_argument("--resume", action="store_true", help="run only the runs of DIR without a result file")
    s.add_argument("--ranges", default="default", help="sweep ranges: config/sweeps/NAME.yaml or a YAML path")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help="scenario override applied to every run")
    s.add_argument("--dashboard", default="127.0.0.1:8787", help="LocalCluster dashboard address (loopback)")
    s.add_argument("--no-figures", action="store_true", help="no PNG figures")
    s.set_defaults(func=cmd_sweep)
