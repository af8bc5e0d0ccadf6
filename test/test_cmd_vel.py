"""Live velocity commands through ROS: ``/cmd_vel`` into the controller node (Twist and TwistStamped, over
real DDS from another node), clamping, NaN rejection, the stale-command stop, the gait clock the
estimator follows, and an outside publisher steering the realtime stack (container and split)."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from test_ros_stack import BIN, Proc, procs, read_bag  # noqa: F401  (fixtures)

pytestmark = pytest.mark.ros
DT = 0.002


def _controller(ctx, **params):
    """A controller node on a fixed standing input (scenario none: the forward walk until /cmd_vel), a
    publisher node beside it in the same context (DDS between them) and ``tick(k) -> diagnostics dict``."""
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter

    from wbc_controller.diagnostics import DIAG_FIELDS
    from wbc_controller.node import WbcNode

    node = WbcNode(context=ctx, parameter_overrides=[Parameter("scenario", value="none")] +
                   [Parameter(k, value=v) for k, v in params.items()])
    diag = []
    node.pub_diag = type("Tap", (), {"publish_value": lambda self, v: diag.append(np.array(v))})()
    q = node.rm.stance_configuration(0.42)
    v = np.zeros(node.rm.nv)
    ctl = node.ctl

    def tick(k: int) -> dict:
        t = k * DT
        d = {"js": (q[7:], v[6:]), "odom": (q[:7], v[:6]), "support": np.asarray(ctl.gait.nominal_support(t), bool),
             "tau_ext": np.zeros(node.rm.n), "normal": np.array([0.0, 0.0, 1.0])}
        node._run_tick(k, d)
        return dict(zip(DIAG_FIELDS, diag[-1]))

    ex = SingleThreadedExecutor(context=ctx)
    ex.add_node(node)
    return node, tick, ex


def _send(ctx, ex, node, msg_type, msgs, what=lambda n: n.cmd_vel._msg[0]):
    """Publish ``msgs`` from another node on /cmd_vel until the controller took each (spinning it)."""
    from rclpy.node import Node
    from rclpy.qos import QoSProfile

    outside = Node("teleop_test", context=ctx)
    pub = outside.create_publisher(msg_type, "/cmd_vel", QoSProfile(depth=10))
    t_end = time.monotonic() + 20
    while pub.get_subscription_count() < 1 and time.monotonic() < t_end:
        time.sleep(0.02)
    for m in msgs:
        n0 = what(node)
        while what(node) == n0 and time.monotonic() < t_end:
            pub.publish(m)
            ex.spin_once(timeout_sec=0.05)
    outside.destroy_node()
    assert time.monotonic() < t_end, "the controller did not take the messages"


def _twist(vx=0.0, vy=0.0, wz=0.0):
    from geometry_msgs.msg import Twist

    m = Twist()
    m.linear.x, m.linear.y, m.angular.z = float(vx), float(vy), float(wz)
    return m


def test_cmd_vel_takes_over_clamps_rejects_nan_and_goes_stale(ros_context):
    """Over DDS from another node: until the first /cmd_vel the forward walk drives (no gait clock out);
    then the live command rules (one log line), is clamped (counted), a NaN is rejected (counted, the
    command unchanged), and with no message for cmd_vel_timeout the filtered command ramps to zero."""
    from geometry_msgs.msg import Twist

    node, tick, ex = _controller(ros_context)
    try:
        k = 1500                                         # t = 3 s, the forward walk on
        d = tick(k)
        assert d["cmd_live"] == 0 and node.cmd_vel.output() is None and node._last_out[0][0] is not node.cmd_vel.pub
        ref_x = node.ctl.refs(k * DT).p[0]
        _send(ros_context, ex, node, Twist, [_twist(wz=0.3)])
        k += 1
        d = tick(k)
        assert d["cmd_live"] == 1 and d["cmd_clamped"] == 0
        # taken over from the forward walk: the command reference starts at the walk's, no jump
        assert abs(node.ctl.cmd_array[0] - ref_x) < 1e-3 and node.ctl.cmd_array[6] == 0.0
        pub, clock = node._last_out[0]                   # /wbc/gait_clock goes out first: [t, tau, paused]
        assert pub is node.cmd_vel.pub and clock[0] == k * DT and clock[1] == k * DT and clock[2] == 0.0
        for _ in range(250):                            # 0.5 s at 1 rad/s^2: wz reaches 0.3
            k += 1
            d = tick(k)
            if k % 100 == 0:                             # kept fresh (every 0.2 s of controller time)
                _send(ros_context, ex, node, Twist, [_twist(wz=0.3)])
        assert d["cmd_wz"] == pytest.approx(0.3) and d["cmd_vx"] == 0.0
        assert node.ctl.cmd_array[6] > 0.05              # the reference's yaw turns
        _send(ros_context, ex, node, Twist, [_twist(vx=5.0, wz=0.3)], what=lambda n: n.cmd_vel._msg[0])
        rej0 = node.rejected
        _send(ros_context, ex, node, Twist, [_twist(wz=float("nan"))], what=lambda n: n.cmd_vel.rejected)
        k += 1
        d = tick(k)
        assert d["cmd_clamped"] == 1 and d["cmd_rejected"] == 1 and node.rejected == rej0 + 1
        assert d["rejected_inputs"] == node.rejected
        assert node.cmd_vel.commander.filter.target[0] == 0.3      # clamped to cmd_max_vx, not NaN
        # no message any more: stale after 0.5 s, then the accel limits bring it to zero
        for _ in range(int(1.6 / DT)):
            k += 1
            d = tick(k)
        assert d["cmd_vx"] == 0.0 and d["cmd_wz"] == 0.0 and d["cmd_live"] == 1
        assert np.isfinite(node._last_out[-1][1].effort).all()
    finally:
        ex.shutdown()
        node.destroy_node()


def test_cmd_vel_stamped_and_live_limits(ros_context):
    """``cmd_vel_stamped:=true``: TwistStamped (Nav2); the limits are live (the next message is clamped to them)."""
    from geometry_msgs.msg import TwistStamped
    from rclpy.parameter import Parameter

    node, tick, ex = _controller(ros_context, cmd_vel_stamped=True)
    try:
        m = TwistStamped()
        m.header.frame_id = "base_link"
        m.twist.linear.y = 0.1
        _send(ros_context, ex, node, TwistStamped, [m])
        d = tick(1500)
        assert d["cmd_live"] == 1 and node.cmd_vel.commander.filter.target[1] == pytest.approx(0.1)
        assert node.set_parameters([Parameter("cmd_max_vy", value=0.05)])[0].successful
        d = tick(1501)                                   # applied at the next tick
        _send(ros_context, ex, node, TwistStamped, [m])
        d = tick(1502)
        assert node.cmd_vel.commander.filter.target[1] == pytest.approx(0.05) and d["cmd_clamped"] == 1
    finally:
        ex.shutdown()
        node.destroy_node()
