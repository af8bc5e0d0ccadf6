"""``mujoco_bridge``: the MuJoCo simulation as a ROS 2 node (physics at 1 kHz, control ticks at 500 Hz).

Only the ROS wiring: topics, message layouts, the lockstep protocol, realtime mode and the watchdog
are documented and implemented in :mod:`mujoco_bridge.scheduler` (no ROS); the scenario's
disturbance hook, initial state and sensor noise in :mod:`mujoco_bridge.scenario_setup`; the
parameters are :class:`mujoco_bridge.config.BridgeConfig` (``config/mujoco_bridge.yaml``; live ones
act from the next tick). ``duration`` > 0: the node exits (status 0) after that many sim seconds."""

import signal
import sys
import time

import numpy as np
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from legged_wbc.robot import ConfigError
from legged_wbc.ros.io import adapters
from legged_wbc.ros.nodekit import diagnostics as ros_diagnostics, tf_publisher
from legged_wbc.ros.nodekit.executor_thread import ExecutorThread
from legged_wbc.ros.nodekit.launch_identity import read_identity
from legged_wbc.ros.nodekit.params import NodeParameters
from legged_wbc.ros import io as ros_io
from legged_wbc.ros.transport import endpoints
from legged_wbc.ros.transport.endpoint_ids import publisher_gid
from legged_wbc.ros.nodekit.publisher_names import PublisherNames
from legged_wbc.ros.nodekit.startup import StartupPeers
from mujoco_bridge.command_source import CommandSources
from mujoco_bridge.config import BridgeConfig
from mujoco_bridge.scenario_setup import (BridgePhysics, ScenarioDisturbance, bridge_simulation, delay_ticks,
                                          scenario_disturbance)
from mujoco_bridge.scheduler import PHYSICS_DT_NS, BridgePorts, BridgeScheduler
from mujoco_bridge.timing import WallStamps


class MujocoBridge(Node):
    """See the module docstring."""

    def __init__(self, **kwargs):
        super().__init__("mujoco_bridge", **kwargs)
        self.params = NodeParameters(self, BridgeConfig, on_change=self._on_config)
        cfg = self.cfg = self.params.config
        self._init_simulation(cfg)
        self._init_scheduler(cfg)
        self._init_publishers(cfg)
        self._init_subscriptions(cfg)
        self._init_observers(cfg)
        self.get_logger().info(f"{self.robot.cfg.name}: {self.n} joints, mode={cfg.mode}, control period "
                               f"{cfg.control_period_steps} ms, duration={cfg.duration or 'inf'} s, scenario="
                               f"{cfg.scenario}, initial base height {self.q0[2]:.3f} m")

    def _init_simulation(self, cfg: BridgeConfig) -> None:
        """Robot model, scenario and simulation, reset to the initial pose (:func:`bridge_simulation`)."""
        self.robot, self.scenario, self.sim, self.q0 = bridge_simulation(cfg)
        self.n, self.joint_names, self.leg_names = self.robot.n, list(self.robot.joint_names), self.robot.cfg.leg_names
        self.lockstep, self.untimed = cfg.lockstep, cfg.command_timing == "untimed"
        self._wall = WallStamps() if cfg.sample_stamps == "wall" else None   # hardware emulation (BridgeConfig)

    def _init_scheduler(self, cfg: BridgeConfig) -> None:
        """The scheduler (its ports: this node's bound methods, the start-up wait's :class:`StartupPeers` once
        the endpoints exist) and the physics step with the disturbance hook."""
        log = self.get_logger()
        self.ports = BridgePorts(None, self.publish_sample, self.sim.joint_velocities,   # what the scheduler calls
                                 lambda: self.startup.missing(), lambda: self.startup.settle())   # no layer
        self.sched = BridgeScheduler(cfg, self.ports, lockstep=self.lockstep, steps_per_tick=cfg.control_period_steps,
                                     log=log, effort_limit=self.robot.effort,
                                     command_delay_ticks=delay_ticks(self.scenario))
        self.physics = BridgePhysics(self.sim, self.n, log, scenario_disturbance(self.scenario, self.robot,
                                                                                 self.sched, log),
                                     counters=self.sched.counters)
        self.ports.physics_step = self.physics.step
        self.request_stop = self.sched.request_stop            # from a signal handler or the container

    def _init_publishers(self, cfg: BridgeConfig) -> None:
        """The publishers; messages built once with their constant parts, filled only when wanted."""
        qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=cfg.qos_depth,
                         reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE)
        nz, zero_n, A = self.sim.noise, np.zeros(self.n), adapters
        published = (
            (A.JointStateAdapter(ros_io.joint_state_msg(0, self.joint_names, zero_n, zero_n, zero_n)),
             ros_io.TOPIC_JOINT_STATES),
            (A.ImuAdapter(ros_io.imu_msg(0, self.robot.cfg.base_link, [0, 0, 0, 1], [0, 0, 0], [0, 0, 0],
                                         gyro_var=nz.gyro ** 2, accel_var=nz.accel ** 2)), ros_io.TOPIC_IMU),
            (A.ClockAdapter(ros_io.clock_msg(0)), ros_io.TOPIC_CLOCK),
            (A.ArrayAdapter(ros_io.float64_array_msg(zero_n, ros_io.DISTURBANCE_LABEL)), ros_io.TOPIC_DISTURBANCE),
            (A.OdometryAdapter(ros_io.odometry_msg(0, self.q0, np.zeros(self.n + 6),
                                                   child_frame_id=self.robot.cfg.base_link)), ros_io.TOPIC_GT_ODOM),
            (A.ArrayAdapter(ros_io.contacts_msg(np.zeros(len(self.leg_names)), self.leg_names)),
             ros_io.TOPIC_GT_CONTACTS))
        (self.pub_js, self.pub_imu, self.pub_clock, self.pub_dist, self.pub_odom, self.pub_contacts) = [
            endpoints.create_publisher(self, a.msg_type, topic, qos, adapter=a) for a, topic in published]
        self.pub_diag, self.pub_latency = [endpoints.create_publisher(self, Float64MultiArray, topic, qos) for topic in
                                           (ros_io.TOPIC_BRIDGE_DIAGNOSTICS, ros_io.TOPIC_COMMAND_LATENCY)]
        self._pubs = [self.pub_clock, self.pub_js, self.pub_imu, self.pub_odom, self.pub_contacts, self.pub_dist,
                      self.pub_diag, self.pub_latency]
        self.windows = ros_diagnostics.WindowPublisher(self, self.sched, self.pub_diag, self.pub_latency,
                                                       off_path=not self.lockstep)

    def _init_subscriptions(self, cfg: BridgeConfig) -> None:
        """Torque commands; with a scenario disturbance, also the estimated support set (the gating)."""
        cmd_qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=50,
                             reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE)
        self.cmd_decoder = ros_io.TorqueCommandDecoder(self.joint_names, cfg.control_period_steps * PHYSICS_DT_NS,
                                                       timed=cfg.command_timing == "stamped")
        self.cmd_sources = CommandSources(cfg.command_source, PublisherNames(self, lambda: self.sub_cmd.topic_name),
                                          self.sched.counters, self.get_logger(), identity=read_identity,
                                          gid_of=publisher_gid)
        self.sub_cmd = endpoints.create_subscription(self, JointState, ros_io.TOPIC_TORQUE_CMD, self._on_command,
                                                  cmd_qos, adapter=adapters.JointStateAdapter, with_source=True,
                                                  any_thread=True)   # outside commands: executor thread (processes: same)
        self.cmd_sources.topic = self.sub_cmd.topic_name
        self.startup = StartupPeers(self, self.pub_js, self.sub_cmd, self._pubs, wait_for_commands=self.lockstep)
        self._leg_order = ros_io.JointOrder(self.leg_names)
        self.sub_support = None
        if isinstance(self.disturbance_fn, ScenarioDisturbance):   # gated by the estimated support set
            self.sub_support = endpoints.create_subscription(self, JointState, ros_io.TOPIC_EST_SUPPORT,
                                                          self._on_support, cmd_qos,
                                                          adapter=adapters.JointStateAdapter)
            self.sched.wait_for_support = True

    def _init_observers(self, cfg: BridgeConfig) -> None:
        """Off the physics path: the viewer, /diagnostics, the ground-truth /tf."""
        self.viewer = None
        if cfg.viewer:   # its own MjData and thread (off the physics path); else one line why not, headless
            from mujoco_bridge.viewer import open_viewer

            self.viewer = viewer if (viewer := open_viewer(self.sim.m)).active else None
        self.diag_timer = ros_diagnostics.attach(self)   # /diagnostics, 1 Hz in the executor thread
        self.gt_tf = tf_publisher.attach_ground_truth(self, cfg.tf_rate)   # /tf world -> base_link_ground_truth

    source_time = None    # realtime, split: () -> the delivered command's frame's send time [s]
    # the disturbance hook ``disturbance_fn(t, sim) -> torque | None`` (see mujoco_bridge.scenario_setup)
    disturbance_fn = property(lambda self: self.physics.disturbance_fn,
                              lambda self, fn: setattr(self.physics, "disturbance_fn", fn))
    after_sample = None   # hook called after each sample is published (the container: the recorder's copies)
    after_control_inputs = None   # hook(step) once /clock, /joint_states, /imu are out (split: the link's frame)
    _last_step = -1       # the step of the last sample published
    def _on_config(self, cfg: BridgeConfig, changed) -> None:
        self.cfg = self.sched.cfg = cfg          # read by the scheduler at its next tick / step

    # ------------------------------------------------------------ inputs (executor thread, or in publish)
    def _on_command(self, sample: adapters.JointSample, source=None) -> None:
        """A torque command from ``source`` (DDS: its ``MessageInfo``; in the process: its publisher; None:
        a direct call): applied only if it comes from the publisher the bridge follows (:class:`CommandSources`)."""
        follows = self.cmd_sources.check(source)
        if follows is False:                     # another publisher's: counted, never applied
            return
        try:
            cmd = self.cmd_decoder.decode_fields(sample.stamp_ns, sample.names, sample.effort)
        except ros_io.CommandError as exc:
            self.sched.reject(str(exc), kind=exc.kind)
            return
        if follows is None:                      # command_source: first, and this is the first well-formed one
            self.cmd_sources.follow(source)
        self.sched.offer_command(cmd, self.source_time() if self.source_time else None)

    def _on_support(self, sample: adapters.JointSample) -> None:
        ns = sample.stamp_ns
        tick = self.sched.tick_of_stamp(ns) if self._wall else ros_io.tick_from_stamp(ns)
        if tick is None:
            return
        try:
            flags = self._leg_order.arrays_of(sample.names, sample.position, sample.velocity, sample.effort)[0]
        except ValueError as exc:
            self.get_logger().warning(f"{ros_io.TOPIC_EST_SUPPORT}: {exc}", throttle_duration_sec=5.0)
            return
        self.sched.offer_support(tick, flags > 0.5)

    # ------------------------------------------------------------ scheduler ports (main thread; start-up: StartupPeers)
    def publish_sample(self, step: int) -> None:
        """Publish the state after ``step`` physics steps (stamp: sim time; sample_stamps wall: ROS time, see
        ``WallStamps``). Message objects are reused; topics nobody subscribes to are skipped."""
        t_ns = step * PHYSICS_DT_NS
        repeat, self._last_step = step == self._last_step, step   # re-published (start-up): control inputs only
        sensor_ns = self._wall.stamp(t_ns, time.time_ns()) if self._wall else t_ns   # wall: never sim time
        if self.untimed:
            self.sched.note_sample(sensor_ns, step)   # untimed answers name it
        s = self.sim.sensors()
        if self.pub_clock.has_subscribers():
            self.pub_clock.publish_value(t_ns)
        self.pub_js.publish_value(adapters.JointSample(sensor_ns, self.joint_names, s.joint_pos, s.joint_vel,
                                                       s.joint_effort))
        self.pub_imu.publish_value(adapters.ImuSample(sensor_ns, s.imu_quat_xyzw, s.imu_gyro, s.imu_accel))
        if self.after_control_inputs is not None:
            self.after_control_inputs(step)
        if step % self.cfg.ground_truth_decimation == 0 and not repeat:
            if self.pub_odom.has_subscribers():
                self.pub_odom.publish_value(adapters.OdomSample(t_ns, *self.sim.base_ground_truth()))
            if self.pub_contacts.has_subscribers():
                self.pub_contacts.publish_value(self.sim.foot_contact_values())
            if self.pub_dist.has_subscribers():
                self.pub_dist.publish_value(self.physics.dist_applied)
            if self.gt_tf is not None and self.gt_tf.wanted:   # on the ground-truth samples' stamps
                self.gt_tf.offer(t_ns, self.sim.d.qpos)   # a copy of the base pose, when /tf asked for one
        if t_ns >= self.sched.diag_next_ns:
            self.publish_diagnostics()
        if self.viewer is not None:
            self.viewer.update(self.sim.d.qpos)  # a copy at most every 1/50 s; drawn by the viewer's thread
        if self.after_sample is not None:
            self.after_sample()                  # the container: the recorder's deferred copies

    def publish_diagnostics(self, last: bool = False) -> None:
        self.windows.publish(last)             # off the physics path in realtime (ros.diagnostics.WindowPublisher)

    def run(self) -> int:
        if self.sched.run():
            self.publish_diagnostics(last=True)
            self.report_diagnostics()                   # the run's final /diagnostics status
            # the subscribers have the last samples before we exit
            endpoints.wait_for_acks(self, [*self._pubs, self.diagnostics_publisher])
            self.get_logger().info(self.sched.summary())
        return 0


def main(argv: list[str] | None = None) -> int:
    """Commands, parameters and services in an executor thread (:class:`ExecutorThread`, spun with a
    timeout); the simulation loop in the main thread. Exit status 2 for a bad parameter or configuration."""
    import rclpy

    from legged_wbc.ros.nodekit.params import init_node_process

    if not init_node_process(argv, "mujoco_bridge"):
        return 2
    node = spin = None
    try:
        node = MujocoBridge()
        spin = ExecutorThread(node)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda signum, frame: node.request_stop())
        return node.run()
    except ConfigError as exc:                 # also ParameterSchemaError
        print(f"mujoco_bridge: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:                  # Ctrl-C / the launch shutting down before the loop started
        return 130
    finally:
        if spin is not None:
            spin.stop()                        # the executor shut down before the node is destroyed
        if node is not None:
            if node.viewer is not None:
                node.viewer.close()
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()


if __name__ == "__main__":
    sys.exit(main())
