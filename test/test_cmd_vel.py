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
        assert d["gait_tau"] == pytest.approx(k * DT) and d["gait_paused"] == 0.0
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


def _yaw_series(topics):
    """``(t [s], yaw [rad])`` of the ground truth in the bag, yaw unwrapped."""
    from wbc_controller.blocks.command import yaw_of_quat_xyzw

    msgs = [m for _, m in topics["/ground_truth/odom"]]
    t = np.array([m.header.stamp.sec + 1e-9 * m.header.stamp.nanosec for m in msgs])
    o = [m.pose.pose.orientation for m in msgs]
    return t, np.unwrap([yaw_of_quat_xyzw((q.x, q.y, q.z, q.w)) for q in o])


TELEOP_WALK_S = 22.0   # [s]: a teleop started under load took over at 13 s of a 16 s walk, no room to go stale


@pytest.mark.parametrize("layout", ["container", "split"])
def test_an_outside_cmd_vel_publisher_turns_the_realtime_stack(tmp_path, ros_env, procs, layout):
    """Realtime, recording: ``legged-wbc teleop-example --wz 0.3`` from another process turns the robot
    (the ground truth's yaw follows at ~0.3 rad/s from the tick the live command took over); killed
    (no final zero), its command goes stale after cmd_vel_timeout and the robot stops turning."""
    from legged_wbc.ros import io as ros_io
    from legged_wbc.scenario import dump_scenario, load_scenario
    from test_container import _metrics

    sc = tmp_path / "short.yaml"
    sc.write_text(dump_scenario(load_scenario("paper", ["stand_up.start=0.1", "stand_up.duration=0.8",
                                                        "walk.gait_start=1.0", "walk.t_s=1.1"])))
    bag = tmp_path / "bag"
    lp = Proc("launch", [str(BIN / "legged-wbc"), "launch", "walking_sim", f"layout:={layout}", "mode:=realtime",
                         f"scenario:={sc}", f"duration:={TELEOP_WALK_S}", f"record:={bag}"], ros_env, tmp_path)
    procs.append(lp)
    lp.wait_for(r"torque commands: following", timeout=180)     # tick 0 (split: the sim part waits for the other)
    time.sleep(1.5)
    tp = Proc("teleop", [str(BIN / "legged-wbc"), "teleop-example", "--wz", "0.3", "--rate", "20"], ros_env, tmp_path)
    procs.append(tp)
    lp.wait_for("/cmd_vel: the live velocity command takes over", timeout=90)   # discovery may take seconds
    time.sleep(3.5)
    tp.p.kill()                                  # no zero command: the last one goes stale
    assert lp.wait(120) == 0, lp.text()[-4000:]
    out = lp.text()
    assert "/cmd_vel: the live velocity command takes over from the scenario's forward walk" in out, out[-3000:]
    topics = read_bag(bag)
    diag = [ros_io.diagnostics_dict(m) for _, m in topics["/wbc/diagnostics"]]
    t_d = np.array([d["tick"] * DT for d in diag])
    live = np.array([d["cmd_live"] for d in diag]) > 0
    wz = np.array([d["cmd_wz"] for d in diag])
    assert live.any() and not live[0], "the live command never took over"
    t_live = t_d[np.argmax(live)]
    t_stop = t_d[np.flatnonzero(wz > 0.299)[-1]]  # the last tick at the full command (then stale, ramped down)
    assert t_stop - t_live > 2.0 and t_stop < TELEOP_WALK_S - 2.0, (t_live, t_stop)   # room to see it go stale
    t, yaw = _yaw_series(topics)
    at = lambda s: np.interp(s, t, yaw)        # noqa: E731
    assert abs(at(t_live)) < 0.05                # the forward walk: no turn
    rate = (at(t_stop) - at(t_live + 1.0)) / (t_stop - t_live - 1.0)
    assert 0.2 < rate < 0.4, rate                # follows the command (0.3 rad/s, after its 0.3 s ramp)
    # stale 0.5 s after the last message, ramped to zero at 1 rad/s^2: still by then
    assert wz[t_d > t_stop + 1.0].max() == 0.0
    assert abs(at(t[-1]) - at(t_stop + 1.5)) < 0.05 * (t[-1] - t_stop - 1.5) + 0.02
    m = _metrics(bag, tmp_path / "cmp")
    assert not m["fell"] and m["qp_failures"] == 0, m
    print(f"{layout}: {100.0 - m['deadline_miss_pct']:.2f} % of {m['ticks_timed']} ticks in time, "
          f"realtime factor {m['realtime_factor']:.3f}, latency p50 {m['command_latency_p50_us']:.0f} us")
    if m["realtime_factor"] >= 0.95:
        assert m["deadline_miss_pct"] <= 5.0, m
