"""A teleop in ~20 lines of rclpy (``legged-wbc teleop-example``): publishes a base velocity command on
``/cmd_vel`` (``geometry_msgs/msg/Twist``, REP 103 base frame: ``vx`` forward, ``vy`` left [m/s], ``wz``
yaw rate [rad/s]) at ``rate`` Hz for ``duration`` s (0: until Ctrl-C; from when a subscriber is matched, 30 s at most), then
a zero command (also on Ctrl-C / SIGTERM). The
controller clamps each axis to ``cmd_max_*`` and treats a command older than ``cmd_vel_timeout``
(0.5 s) as zero, so a teleop publishes continuously; any node doing the same steers the robot."""

from __future__ import annotations

import signal
import sys
import time


def teleop(vx: float, vy: float, wz: float, rate: float = 10.0, duration: float = 0.0) -> int:
    """Publish the command; returns how many messages went out (the final zero included)."""
    import rclpy
    from geometry_msgs.msg import Twist
    from rclpy.signals import SignalHandlerOptions

    # Ctrl-C / SIGTERM stop the loop, not the context: the zero still goes out (rclpy's own handler
    # would shut the context down first, and the robot would stop only by cmd_vel_timeout)
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    stop: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: stop.append(signum))
    node = rclpy.create_node("teleop_example")
    pub = node.create_publisher(Twist, "/cmd_vel", 10)
    msg, sent = Twist(), 0
    msg.linear.x, msg.linear.y, msg.angular.z = float(vx), float(vy), float(wz)
    t_wait = time.monotonic() + 30.0         # discovery: until the controller's subscription is matched
    try:
        while not stop and pub.get_subscription_count() == 0 and time.monotonic() < t_wait:
            time.sleep(0.05)
        t_end = time.monotonic() + duration if duration > 0 else float("inf")
        if not stop:
            print(f"teleop-example: {pub.get_subscription_count()} subscriber(s); publishing {vx:g} m/s, "
                  f"{vy:g} m/s, {wz:g} rad/s on /cmd_vel at {rate:g} Hz", file=sys.stderr, flush=True)
        while time.monotonic() < t_end and not stop:
            pub.publish(msg)
            sent += 1
            time.sleep(1.0 / rate)
    finally:
        pub.publish(Twist())             # stop: the robot decelerates, stops and stands
        sent += 1
        time.sleep(0.2)                  # let the last message leave before the node goes
        node.destroy_node()
        rclpy.try_shutdown()
    return sent
