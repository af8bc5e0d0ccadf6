"""A teleop in ~20 lines of rclpy (``legged-wbc teleop-example``): publishes a base velocity command on
``/cmd_vel`` (``geometry_msgs/msg/Twist``, REP 103 base frame: ``vx`` forward, ``vy`` left [m/s], ``wz``
yaw rate [rad/s]) at ``rate`` Hz for ``duration`` s (0: until Ctrl-C; from when a subscriber is matched, 30 s at most), then
a zero command. The
controller clamps each axis to ``cmd_max_*`` and treats a command older than ``cmd_vel_timeout``
(0.5 s) as zero, so a teleop publishes continuously; any node doing the same steers the robot."""

from __future__ import annotations

import sys
import time


def teleop(vx: float, vy: float, wz: float, rate: float = 10.0, duration: float = 0.0) -> int:
    """Publish the command; returns how many messages went out (the final zero included, when there was one)."""
    import rclpy
    from geometry_msgs.msg import Twist

    rclpy.init()
    node = rclpy.create_node("teleop_example")
    pub = node.create_publisher(Twist, "/cmd_vel", 10)
    msg, sent = Twist(), 0
    msg.linear.x, msg.linear.y, msg.angular.z = float(vx), float(vy), float(wz)
    t_wait = time.monotonic() + 30.0         # discovery: until the controller's subscription is matched
    try:                                     # SIGTERM shuts the context down: every loop checks rclpy.ok()
        while rclpy.ok() and pub.get_subscription_count() == 0 and time.monotonic() < t_wait:
            time.sleep(0.05)
        t_end = time.monotonic() + duration if duration > 0 else float("inf")
        if rclpy.ok():
            print(f"teleop-example: {pub.get_subscription_count()} subscriber(s); publishing {vx:g} m/s, "
                  f"{vy:g} m/s, {wz:g} rad/s on /cmd_vel at {rate:g} Hz", file=sys.stderr, flush=True)
        while time.monotonic() < t_end and rclpy.ok():
            pub.publish(msg)
            sent += 1
            time.sleep(1.0 / rate)
    except KeyboardInterrupt:
        pass
    finally:
        if rclpy.ok():                   # (stopped by SIGTERM: the command goes stale in cmd_vel_timeout)
            pub.publish(Twist())         # stop: the robot decelerates, stops and stands
            sent += 1
            time.sleep(0.2)              # let the last message leave before the node goes
        node.destroy_node()
        rclpy.try_shutdown()
    return sent
