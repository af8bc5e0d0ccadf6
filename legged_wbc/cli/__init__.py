"""legged-wbc: the command line of the legged_wbc stack (simulation, ROS 2 launch, analysis).

One module per command group, each with ``register(subparsers)``; they are listed explicitly in
:data:`COMMAND_GROUPS` (an import error in one of them is an error, not a missing command). The
modules import their heavy dependencies (MuJoCo, rclpy, matplotlib, Dask) inside the command
functions, so ``legged-wbc --help`` stays fast and the ROS-free commands never load rclpy.
"""

from __future__ import annotations

import sys

from . import bench, docs, estimator, model, report, render, ros, run, sweep, teleop
from .argtypes import OneLineParser

COMMAND_GROUPS = (
    model,      # check-model, conditioning, generate-urdf, export-mjcf, check-robot
    run,        # run (headless walking simulation)
    bench,      # bench qp, bench cycle
    estimator,  # eval-estimator
    ros,        # launch, param
    report,     # compare, experiment
    render,     # render
    sweep,      # sweep
    teleop,     # teleop-example
    docs,       # docs (the manual as a site)
)


def build_parser():
    p = OneLineParser(prog="legged-wbc", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    for group in COMMAND_GROUPS:
        group.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    from legged_wbc.robot import ConfigError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except ConfigError as exc:   # a bad config / scenario / robot file or value: one line, not a traceback
        print(f"legged-wbc {args.command}: {exc}", file=sys.stderr)
        return 2
