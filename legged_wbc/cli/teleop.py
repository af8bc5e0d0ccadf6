"""``legged-wbc teleop-example``: drive the running stack from another terminal (see
:mod:`legged_wbc.ros.stack.teleop_example`)."""

from __future__ import annotations

import sys


def cmd_teleop(args) -> int:
    from legged_wbc.ros.stack.teleop_example import teleop

    n = teleop(args.vx, args.vy, args.wz, args.rate, args.duration)
    print(f"teleop-example: {n} commands sent on /cmd_vel (the last one zero)", file=sys.stderr)
    return 0


def register(sub) -> None:
    from .argtypes import _number as finite_float, nonneg_float, positive_float

    s = sub.add_parser("teleop-example", help="publish a base velocity command on /cmd_vel (geometry_msgs/Twist) "
                       "to steer the running stack")
    s.add_argument("--vx", type=finite_float, default=0.0, help="forward speed, base frame [m/s] (clamped to cmd_max_vx)")
    s.add_argument("--vy", type=finite_float, default=0.0, help="sideways speed, left positive [m/s] (cmd_max_vy)")
    s.add_argument("--wz", type=finite_float, default=0.0, help="yaw rate, counter-clockwise positive [rad/s] (cmd_max_wz)")
    s.add_argument("--rate", type=positive_float, default=10.0, help="messages per second (default 10; the "
                   "controller's cmd_vel_timeout is 0.5 s)")
    s.add_argument("--duration", type=nonneg_float, default=0.0, help="seconds to publish, then a zero command "
                   "(default 0: until Ctrl-C)")
    s.set_defaults(func=cmd_teleop)
