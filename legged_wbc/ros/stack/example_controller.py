"""Bring your own controller: a joint PD that stands the robot up and holds it there. Copy this file.

Plain rclpy, nothing of this package. Run the simulation without the WBC, then this node::

    legged-wbc launch walking_sim controller:=external      # or: ros2 launch legged_wbc walking_sim.launch.xml controller:=external
    legged-wbc example-controller                            # or: python3 example_controller.py

The command protocol (``docs/own-controller.md``): the simulation publishes ``/joint_states``
(sensor_msgs/JointState, every 1 ms of sim time). A sample whose stamp is a control tick (a multiple
of 2 ms) asks for a command: publish a sensor_msgs/JointState on ``/joint_torque_cmd`` with ``name`` =
the joints (any order), ``effort`` = their torques [N m] and ``header.stamp`` = the stamp of the sample
it answers. In lockstep (the default) the simulation waits for that answer before it steps on; a
command is held for the 2 ms of its tick. The bridge obeys the first node that sends a well-formed
command and ignores (counts) any other.
"""

import sys
import time

import rclpy
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState

CONTROL_PERIOD_NS = 2_000_000      # a sample stamped on this grid is a control tick


class ExampleController(Node):
    def __init__(self):
        super().__init__("example_controller")
        self.kp = self.declare_parameter("kp", 300.0).value    # [N m / rad]
        self.kd = self.declare_parameter("kd", 8.0).value      # [N m s / rad]
        # the standing joint positions [rad] in /joint_states order (legged-wbc example-controller gives the
        # robot's nominal stance); empty: hold the pose the simulation starts in
        self.stance = self.declare_parameter("stance", [0.0]).value
        self.rise_time = self.declare_parameter("rise_time", 1.5).value   # start pose -> stance [s]
        self.start = None                                      # the first sample's joint positions [rad]
        # reliable, 200 deep as the stack's own topics: a subscriber that falls up to 0.4 s behind (a
        # recorder in its own process on a busy machine) still gets every command
        qos = QoSProfile(depth=200, reliability=ReliabilityPolicy.RELIABLE)
        self.pub = self.create_publisher(JointState, "joint_torque_cmd", qos)
        self.create_subscription(JointState, "joint_states", self.on_joint_states, qos)

    def on_joint_states(self, msg: JointState) -> None:
        stamp_ns = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        if stamp_ns % CONTROL_PERIOD_NS:
            return                                             # between two ticks: no answer wanted
        if self.start is None:
            self.start, self.t0 = list(msg.position), stamp_ns
            if len(self.stance) != len(self.start):
                self.stance = self.start
            self.wait_for_listeners()
        s = min(1.0, (stamp_ns - self.t0) * 1e-9 / self.rise_time)   # 0 -> 1 over rise_time of sim time
        cmd = JointState(header=msg.header, name=list(msg.name))   # same stamp: the answer to this sample
        cmd.effort = [self.kp * (q0 + s * (q1 - q0) - q) - self.kd * dq
                      for q0, q1, q, dq in zip(self.start, self.stance, msg.position, msg.velocity)]
        self.pub.publish(cmd)

    def wait_for_listeners(self, timeout_s: float = 2.0) -> None:
        """Before the first command: every subscriber the graph shows (the simulation, a recorder) matched,
        so none misses it."""
        end = time.monotonic() + timeout_s
        while (self.pub.get_subscription_count() < max(1, self.count_subscribers(self.pub.topic_name))
               and time.monotonic() < end):
            time.sleep(0.01)


def main(args=None) -> int:
    rclpy.init(args=args if args is not None else sys.argv)
    node = ExampleController()
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    try:
        # rclpy.spin(node), with a timeout: after SIGTERM or Ctrl-C the context is shut down, and a wait
        # whose wake-up that missed (seen here once in a few runs) still ends within 0.2 s
        while rclpy.ok():
            executor.spin_once(timeout_sec=0.2)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:  # noqa: BLE001 - rcl's "context is not valid": a wait the SIGTERM shutdown interrupted
        if rclpy.ok():
            raise
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
