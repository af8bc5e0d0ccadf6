"""``legged-wbc eval-estimator``: see :mod:`legged_wbc.tools.analysis.eval_estimator`."""

from __future__ import annotations


def cmd_eval(args):
    """The command (its module, with the estimator and the controller, loaded only when it runs)."""
    from legged_wbc.tools.analysis.eval_estimator import cmd_eval as run

    return run(args)


def register(sub) -> None:
    from .argtypes import nonneg_float, positive_float

    s = sub.add_parser("eval-estimator", help="estimator vs ground truth in closed-loop walking (and a foot slip)")
    s.add_argument("--duration", type=positive_float, default=12.0, help="simulated seconds per run")
    s.add_argument("--no-slip", action="store_true", help="skip the slip run")
    s.add_argument("--slip-leg", default="lm", help="leg whose foot is pushed in the slip run (default lm)")
    s.add_argument("--slip-force", type=nonneg_float, default=350.0, help="horizontal push on the foot [N]")
    s.add_argument("--scenario", default="nominal", help="scenario walked (default nominal; slope_up, steps, "
                   "rough, ...: the support-plane normal's error off flat ground)")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help="scenario override (dotted key)")
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s.set_defaults(func=cmd_eval)
