"""``mujoco_bridge``: the MuJoCo simulation as a ROS 2 node (physics at 1 kHz, control ticks at 500 Hz).

Publishes (conventions and array layouts: :mod:`legged_wbc.ros.io`):

* ``/joint_states`` (sensor_msgs/JointState, every physics step): ``name`` = ``RobotModel.joint_names``,
  position [rad], velocity [rad/s], effort = motor torque applied during the step that ended at
  the stamp [N m];
* ``/imu`` (sensor_msgs/Imu, every physics step): orientation base->world (``x, y, z, w``), gyro
  [rad/s] and specific force [m/s^2] in the base frame, ``frame_id`` = the base link;
* ``/clock`` (rosgraph_msgs/Clock, every physics step): sim time;
* ``/disturbance`` (Float64MultiArray, label ``disturbance_torque_Nm[joint_states.name order]``):
  the extra joint torque the simulation applied during the step ending at the stamp's time;
* ``/ground_truth/odom`` (nav_msgs/Odometry, evaluation only): base pose in ``world``, twist
  (linear and angular) in the BASE frame (``child_frame_id`` = base link), i.e. Pinocchio's
  ``v[0:6]``;
* ``/ground_truth/contacts`` (Float64MultiArray, evaluation only, label
  ``foot_contact_0or1[<leg names>]``): 1.0 where a foot sphere touches the floor, robot-config leg
  order;
* ``/bridge/diagnostics`` (Float64MultiArray, label ``bridge[<field names>]``) every
  ``diagnostics_period`` sim seconds: ``sim_time`` [s], ``tick``, ``commands_applied``,
  ``deadline_misses`` (realtime), ``stale_commands``, ``rejected_commands``, ``watchdog_active``
  (0/1), ``watchdog_events``, ``realtime_factor`` (sim s per wall s since the last sample),
  ``overruns`` (realtime: times the bridge fell > 0.1 s behind the wall clock and re-anchored), and
  the window since the previous sample (:mod:`mujoco_bridge.timing`): ``window_ticks``,
  ``window_deadline_misses``, ``command_latency_p50_us`` / ``_p99_us`` / ``_max_us`` (command
  arrival minus the wall time the answered tick's sample was published);
* ``/bridge/command_latency`` (Float64MultiArray, label ``tick_and_command_latency_us[pairs]``),
  with every diagnostics sample: ``[tick, latency_us, tick, latency_us, ...]`` of each tick closed
  in the window (NaN latency: no command by the deadline), for whole-run statistics.

The three ground-truth/disturbance topics are published every ``ground_truth_decimation`` physics
steps (default 2: 500 Hz, on the control ticks; 1 = every physics step), stamped like ``/joint_states``.
``/disturbance`` then holds the torque applied during the step that ended at its stamp.

Subscribes to ``/joint_torque_cmd`` (sensor_msgs/JointState): ``name`` = the joints (any order,
each once), ``effort`` = torques [N m], ``header.stamp`` = the sim time of the control tick the
command answers (see :mod:`legged_wbc.ros.io`). A command with unknown / missing / duplicate names,
an effort count that does not match, a non-finite torque or a stamp between ticks is rejected
(reason logged, ``rejected_commands`` counted) and never applied. The latest accepted command is
applied with zero-order hold. ``command_timing: untimed`` (realtime mode only, as a hardware
interface would) ignores the stamps: every command is untimed and the newest one is applied.

Lockstep protocol (``mode: lockstep``, the default; deterministic, independent of CPU speed)
------------------------------------------------------------------------------------------
Control tick ``k`` is sim time ``t_k = k * control_period`` (``control_period`` =
``control_period_steps`` physics steps = 0.002 s).

1. Start-up: the sim is reset to the stance pose; the bridge waits (at most ``startup_timeout``
   wall seconds) until ``/joint_states`` has ``startup_min_subscribers`` matched subscriptions,
   in lockstep ``/joint_torque_cmd`` has a publisher, and with ``startup_wait_all_topics`` every
   published topic has a matched subscription (the recorder's); then (at most 2 s more) until every
   subscription the graph shows on its topics is matched; then it publishes the tick-0 sample
   (stamp 0) of every topic. A controller should likewise call
   ``ros_io.wait_for_matched_subscribers(node, [cmd_publisher])`` before answering tick 0, or the
   recorder can miss its first commands.
2. At tick ``k`` the bridge has published the samples stamped ``t_k`` and waits for a command whose
   ``tick == k`` (a controller reads ``k`` off the stamp with ``ros_io.tick_from_stamp``; samples
   between ticks have no tick and need no answer).
3. When it arrives, the bridge applies it (held constant) for ``control_period_steps`` physics steps,
   publishing the samples after each step (stamps ``t_k + 1 ms``, ``t_{k+1}``), and goes to step 2
   with ``k + 1``. Commands stamped before tick ``k`` are stale (counted, dropped); stamped after
   it, rejected.

Nothing depends on wall time except the watchdog: if the command for tick ``k`` has not arrived
within ``watchdog_timeout`` WALL seconds (``startup_timeout`` for tick 0), the bridge logs an
error, applies joint damping ``tau = -watchdog_damping * dq`` (clipped to the joint effort limits)
and keeps stepping, paced at about real time; at every tick it still waits up to one control
period (wall) for that tick's command, and resumes lockstep (logged) when one arrives. If the
tick-0 command has not come after ``republish_period`` wall seconds, the tick-0 samples are
published again (a late subscriber may have missed them; only at start-up).

Realtime mode (``mode: realtime``)
----------------------------------
Physics is paced by the wall clock (``realtime_factor`` sim seconds per wall second) after the
first command (or ``startup_timeout``). The latest valid command is applied at every physics step
(commands with a tick older than the applied one are stale; with ``command_timing: untimed`` every
command is untimed and the newest applies).
The command answering tick ``k`` is due before the bridge starts period ``k + 1``; when it has not
arrived by then, ``deadline_misses`` is incremented. A physics step applies the newest command that
had arrived by the step's *scheduled* wall time (:class:`~mujoco_bridge.timing.CommandQueue`), so a
step that runs late (in a container the bridge's thread computes the command itself) behaves as if
it had run on time and a late command is never applied early. With no valid command for ``watchdog_timeout``
SIM seconds the watchdog applies joint damping until a command arrives.

Disturbance hook: ``self.disturbance_fn(t, sim) -> np.ndarray | None`` is called before every
physics step with the sim time [s] and the :class:`~mujoco_bridge.sim.MujocoSim`; it returns the
extra joint torque [N m] in joint_states order (``None`` = zero). For a scenario whose disturbance
is enabled (``config/scenarios/paper.yaml``) it is :class:`ScenarioDisturbance`: the scenario's
``DisturbanceModel`` (shared with the headless loop), gated by the estimated support set that the
bridge then subscribes to on ``/estimator/support`` (JointState-shaped, ``name`` = legs,
``position`` = 1/0); in lockstep the bridge also waits for that tick's support estimate. Otherwise
(and for ``scenario: none``) the disturbance is zero.

Initial state: ``RobotModel.stance_configuration(h)`` (level, at the origin, feet on the floor, at
rest) with ``h`` = ``initial_height`` if non-zero, else the scenario's ``initial_height`` (see
``config/scenarios/``), else the robot config's stance height. Sensor noise: the ``noise_*``
parameters, or the scenario's ``noise`` block when they are all zero.

``duration`` > 0: the node exits (status 0) once that many sim seconds have been simulated.
Parameters: see ``SCHEMA`` below and ``config/mujoco_bridge.yaml``.
"""

from __future__ import annotations

import signal
import sys
import threading
import time

import numpy as np

from legged_wbc.robot import ConfigError
from legged_wbc.ros import io as ros_io
from legged_wbc.ros.params import NodeParameters, ParamSpec
from mujoco_bridge.timing import CommandQueue, CommandTiming

SCHEMA = [
    ParamSpec("robot", "hexapod", "robot config name or YAML path (config/robot_<name>.yaml)", read_only=True),
    ParamSpec("mode", "lockstep", "timing: lockstep (wait for each tick's command) or realtime (wall-clock paced)",
              choices=("lockstep", "realtime"), read_only=True),
    ParamSpec("duration", 0.0, "stop after this many sim seconds [s]; 0 = run until stopped", min=0.0, max=1e7),
    ParamSpec("initial_height", 0.0, "initial base height of the stance pose [m]; "
              "0 = the scenario's, else the robot config's stance height", min=0.0, max=2.0, read_only=True),
    ParamSpec("control_period_steps", 2, "physics steps (1 ms each) per control tick", min=1, max=100, read_only=True),
    ParamSpec("watchdog_timeout", 0.5, "no valid command for this long -> joint damping [s] "
              "(lockstep: wall seconds waiting for a tick's command; realtime: sim seconds)", min=0.001, max=3600.0),
    ParamSpec("watchdog_damping", 5.0, "joint damping applied by the watchdog [N m s/rad]", min=0.0, max=1e4),
    ParamSpec("startup_timeout", 60.0, "wall seconds to wait for subscribers and the first command before the "
              "watchdog engages [s]; 0 = wait forever", min=0.0, max=86400.0),
    ParamSpec("startup_min_subscribers", 1, "matched /joint_states subscriptions to wait for before publishing tick 0",
              min=0, max=1000, read_only=True),
    ParamSpec("startup_wait_all_topics", False, "also wait until every published topic has a matched subscription "
              "before tick 0 (set when a recorder runs, so no topic misses its first samples)", read_only=True),
    ParamSpec("republish_period", 1.0, "start-up only: re-publish the tick-0 samples after this many wall seconds "
              "without the tick-0 command [s]", min=0.01, max=3600.0),
    ParamSpec("command_timing", "stamped", "stamped = pair each torque command with the control tick its stamp "
              "names; untimed = ignore stamps, apply the newest command (realtime only, like a hardware interface)",
              choices=("stamped", "untimed"), read_only=True),
    ParamSpec("realtime_factor", 1.0, "realtime mode: sim seconds per wall second [-]", min=0.01, max=100.0),
    ParamSpec("ground_truth_decimation", 2, "publish /ground_truth/* and /disturbance every N physics steps [-]",
              min=1, max=1000),
    ParamSpec("diagnostics_period", 0.1, "period of /bridge/diagnostics [sim s]", min=0.001, max=3600.0),
    ParamSpec("progress_period", 10.0, "log a progress line (sim time, real-time factor, deadline misses, command "
              "latency) every this many wall seconds [s]; 0 = never", min=0.0, max=86400.0),
    ParamSpec("qos_depth", 200, "history depth of the reliable publishers [messages]", min=1, max=100000,
              read_only=True),
    ParamSpec("scenario", "none", "disturbance scenario name (none = no disturbance)", read_only=True),
    ParamSpec("viewer", False, "open the MuJoCo passive viewer (needs a display)", read_only=True),
    ParamSpec("noise_joint_velocity", 0.0, "white noise std of joint velocities [rad/s]", min=0.0, max=100.0,
              read_only=True),
    ParamSpec("noise_gyro", 0.0, "white noise std of the gyro [rad/s]", min=0.0, max=100.0, read_only=True),
    ParamSpec("noise_accel", 0.0, "white noise std of the accelerometer [m/s^2]", min=0.0, max=1000.0, read_only=True),
    ParamSpec("noise_seed", 0, "seed of the sensor noise [-]", min=0, max=2**31 - 1, read_only=True),
]

DIAG_FIELDS = ("sim_time", "tick", "commands_applied", "deadline_misses", "stale_commands", "rejected_commands",
               "watchdog_active", "watchdog_events", "realtime_factor", "overruns", "window_ticks", "window_deadline_misses",
               "command_latency_p50_us", "command_latency_p99_us", "command_latency_max_us")


class ScenarioDisturbance:
    """``disturbance_fn`` of a scenario: ``DisturbanceModel.torque(t, q_j, leg_in_estimated_support)``
    evaluated at each control tick (with the true joint positions and the estimator's support set of
    that tick, from ``/estimator/support``) and held for the tick's physics steps, as in the headless
    loop. In lockstep the bridge waits for that tick's support estimate before stepping, so the
    result is deterministic."""

    def __init__(self, model, node):
        self.model = model
        self.node = node
        self.held = np.zeros(node.robot.n)

    def __call__(self, t: float, sim):
        node = self.node
        if node.step_count % node.steps_per_tick == 0:
            sup = node.support_estimate(node.step_count // node.steps_per_tick)
            in_support = bool(sup[self.model.leg]) if sup is not None else False
            qj = sim.joint_positions()
            self.held = self.model.torque(t, qj, in_support)
        return self.held


def _make_node_class():
    from rclpy.node import Node
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
    from std_msgs.msg import Float64MultiArray

    class MujocoBridge(Node):
        """See the module docstring."""

        def __init__(self, **kwargs):
            super().__init__("mujoco_bridge", **kwargs)
            self.params = NodeParameters(self, SCHEMA)
            P = self.params
            from legged_wbc.model import RobotModel
            from mujoco_bridge.sim import MujocoSim, SensorNoise

            self.robot = RobotModel(P["robot"])
            self.scenario = self._scenario_config(P["scenario"])
            noise = SensorNoise(joint_velocity=P["noise_joint_velocity"], gyro=P["noise_gyro"],
                                accel=P["noise_accel"], seed=P["noise_seed"])
            if self.scenario is not None and not noise.enabled and getattr(self.scenario, "noise", None):
                sn = self.scenario.noise
                noise = SensorNoise(joint_velocity=float(sn.get("joint_velocity", 0.0)),
                                    gyro=float(sn.get("gyro", 0.0)), accel=float(sn.get("accel", 0.0)),
                                    seed=int(sn.get("seed", 0)))
            self.sim = MujocoSim(self.robot, noise=noise)
            if abs(self.sim.dt * 1e9 - ros_io.PHYSICS_DT_NS) > 1e-3:
                raise RuntimeError(f"physics step {self.sim.dt} s, the bridge expects 0.001 s")
            self.n = self.robot.n
            self.joint_names = list(self.robot.joint_names)
            self.leg_names = list(self.robot.cfg.leg_names)
            self.base_frame = self.robot.cfg.base_link
            self.steps_per_tick = int(P["control_period_steps"])
            self.lockstep = P["mode"] == "lockstep"
            h = P["initial_height"] or getattr(self.scenario, "initial_height", None) or None
            self.q0 = self.robot.stance_configuration(h)
            self.sim.reset(self.q0)
            self.step_count = 0      # physics steps since reset; sim time = step_count * 1 ms
            self.tick = 0            # current control tick (lockstep: the one we wait a command for)
            self.tau = np.zeros(self.n)
            self.effort_limit = np.asarray(self.robot.effort, dtype=float)
            self.dist_applied = np.zeros(self.n)
            self.disturbance_fn = self._load_scenario(P["scenario"])

            qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=int(P["qos_depth"]),
                             reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE)
            from nav_msgs.msg import Odometry
            from rosgraph_msgs.msg import Clock
            from sensor_msgs.msg import Imu, JointState

            self.pub_js = ros_io.create_publisher(self, JointState, ros_io.TOPIC_JOINT_STATES, qos)
            self.pub_imu = ros_io.create_publisher(self, Imu, ros_io.TOPIC_IMU, qos)
            self.pub_clock = ros_io.create_publisher(self, Clock, ros_io.TOPIC_CLOCK, qos)
            self.pub_dist = ros_io.create_publisher(self, Float64MultiArray, ros_io.TOPIC_DISTURBANCE, qos)
            self.pub_odom = ros_io.create_publisher(self, Odometry, ros_io.TOPIC_GT_ODOM, qos)
            self.pub_contacts = ros_io.create_publisher(self, Float64MultiArray, ros_io.TOPIC_GT_CONTACTS, qos)
            self.pub_diag = ros_io.create_publisher(self, Float64MultiArray, ros_io.TOPIC_BRIDGE_DIAGNOSTICS, qos)
            self.pub_latency = ros_io.create_publisher(self, Float64MultiArray, ros_io.TOPIC_COMMAND_LATENCY, qos)
            self.timing = CommandTiming()        # command latency / deadlines per tick (wall clock)
            self.cmd_queue = CommandQueue()      # realtime: commands in arrival order

            # command state, shared with the executor thread
            self._cond = threading.Condition()
            self._pending = None                 # lockstep: accepted command for self.tick
            self._latest = None                  # realtime: newest accepted command
            self._last_cmd_step = None           # realtime: step_count when the newest command arrived
            self.stop_requested = False
            self.counters = dict(commands_applied=0, deadline_misses=0, stale_commands=0,
                                 rejected_commands=0, watchdog_events=0, overruns=0)
            self.watchdog_active = False
            self._reject_log: dict[str, tuple[float, int]] = {}
            self._got_first_command = False
            self._diag_next_ns = 0
            self._diag_wall = (time.monotonic(), 0)
            cmd_qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=50,
                                 reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE)
            if self.lockstep and P["command_timing"] == "untimed":
                raise ConfigError("command_timing: untimed needs mode: realtime (lockstep pairs commands with ticks)")
            self.cmd_decoder = ros_io.TorqueCommandDecoder(self.joint_names, timed=P["command_timing"] == "stamped")
            self.sub_cmd = ros_io.create_subscription(self, JointState, ros_io.TOPIC_TORQUE_CMD, self._on_command,
                                                      cmd_qos)
            self._support: dict[int, np.ndarray] = {}
            self._leg_order = ros_io.JointOrder(self.leg_names)
            self.sub_support = None
            if isinstance(self.disturbance_fn, ScenarioDisturbance):
                from sensor_msgs.msg import JointState as _JS

                self.sub_support = ros_io.create_subscription(self, _JS, ros_io.TOPIC_EST_SUPPORT, self._on_support, cmd_qos)
                d = self.scenario.disturbance
                self.get_logger().info(f"disturbance: {d.torque_nm:g} N m on leg {d.leg} from t = {d.start:g} s for "
                                       f"{d.duration:g} s, while the leg is in the estimated support set")
            self.viewer = self._open_viewer() if P["viewer"] else None
            nz = self.sim.noise
            zero_n = np.zeros(self.n)
            self._msgs = {
                "clock": ros_io.clock_msg(0),
                "js": ros_io.joint_state_msg(0, self.joint_names, zero_n, zero_n, zero_n),
                "imu": ros_io.imu_msg(0, self.base_frame, [0, 0, 0, 1], [0, 0, 0], [0, 0, 0],
                                      gyro_var=nz.gyro ** 2, accel_var=nz.accel ** 2),
                "odom": ros_io.odometry_msg(0, self.q0, np.zeros(self.n + 6), child_frame_id=self.base_frame),
                "contacts": ros_io.contacts_msg(np.zeros(len(self.leg_names)), self.leg_names),
                "dist": ros_io.float64_array_msg(zero_n, ros_io.DISTURBANCE_LABEL),
            }
            self.get_logger().info(
                f"{self.robot.cfg.name}: {self.n} joints, mode={P['mode']}, control period "
                f"{self.steps_per_tick} ms, duration={P['duration'] or 'inf'} s, scenario={P['scenario']}, "
                f"initial base height {self.q0[2]:.3f} m")

        # ------------------------------------------------------------ set-up helpers
        def _scenario_config(self, name: str):
            """The scenario (``legged_wbc.scenario.load_scenario``) for its initial height and sensor noise,
            or None (``none``, or no scenario module)."""
            if name in ("", "none"):
                return None
            try:
                from legged_wbc.scenario import load_scenario
            except ImportError:
                return None
            return load_scenario(name)

        def _load_scenario(self, name: str):
            """The disturbance hook of the scenario: its ``DisturbanceModel`` (the one the headless loop
            uses) when the scenario enables a disturbance, else None (zero disturbance)."""
            if self.scenario is None or not getattr(getattr(self.scenario, "disturbance", None), "enabled", False):
                return None
            try:
                from legged_wbc.scenario import DisturbanceModel
            except ImportError:
                self.get_logger().warning(f"scenario {name!r} enables a disturbance but legged_wbc.scenario has no "
                                          "DisturbanceModel; the disturbance stays zero")
                return None
            return ScenarioDisturbance(DisturbanceModel(self.scenario, self.robot), self)

        # ------------------------------------------------------------ estimated support (disturbance gating)
        def _on_support(self, msg) -> None:
            tick = ros_io.tick_from_stamp(msg.header.stamp)
            if tick is None:
                return
            try:
                flags = self._leg_order.arrays(msg)[0]
            except ValueError as exc:
                self.get_logger().warning(f"{ros_io.TOPIC_EST_SUPPORT}: {exc}", throttle_duration_sec=5.0)
                return
            with self._cond:
                self._support[tick] = flags > 0.5
                for old in [t for t in self._support if t < tick - 50]:
                    del self._support[old]
                self._cond.notify_all()

        def support_estimate(self, tick: int):
            """The estimated support flags of ``tick`` (or the newest older one); None if none yet."""
            with self._cond:
                if tick in self._support:
                    return self._support[tick]
                older = [t for t in self._support if t <= tick]
                return self._support[max(older)] if older else None

        def _open_viewer(self):
            """Live view with its own MjData, synced by its own thread (off the physics path);
            without a display it says so and the node runs on headless."""
            from legged_wbc.tools.viewer import open_viewer

            v = open_viewer(self.sim.m)
            if not v.active:
                self.get_logger().warning(f"viewer requested but unavailable: {v.reason}")
                return None
            return v

        # ------------------------------------------------------------ commands (executor thread)
        def _reject(self, reason: str, kind: str | None = None) -> None:
            """Count and log a rejected command; each kind of reason is logged at most once per wall second."""
            self.counters["rejected_commands"] += 1
            kind = kind or reason.split(" ")[0]
            now = time.monotonic()
            last, suppressed = self._reject_log.get(kind, (-1e9, 0))
            if now - last >= 1.0:
                more = f" ({suppressed} more like it suppressed)" if suppressed else ""
                self.get_logger().warning(f"torque command rejected: {reason}{more}")
                self._reject_log[kind] = (now, 0)
            else:
                self._reject_log[kind] = (last, suppressed + 1)

        def _on_command(self, msg) -> None:
            try:
                cmd = self.cmd_decoder.decode(msg)
            except ros_io.CommandError as exc:
                self._reject(str(exc), kind=exc.kind)
                return
            now = time.monotonic()
            with self._cond:
                if cmd.tick != ros_io.UNTIMED_TICK:
                    self.timing.command_arrived(cmd.tick, now)
                if self.lockstep:
                    if cmd.tick < self.tick:
                        self.counters["stale_commands"] += 1
                        return
                    if cmd.tick > self.tick:
                        self._reject(f"command for tick {cmd.tick} arrived while the bridge is at tick {self.tick}",
                                     kind="future")
                        return
                    self._pending = cmd
                else:
                    last = self._latest
                    if last is not None and cmd.tick != ros_io.UNTIMED_TICK and cmd.tick < last.tick:
                        self.counters["stale_commands"] += 1
                        return
                    self._latest = cmd
                    self.cmd_queue.push(now, cmd)
                    self._last_cmd_step = self.step_count
                self._cond.notify_all()

        def request_stop(self) -> None:
            with self._cond:
                self.stop_requested = True
                self._cond.notify_all()

        # ------------------------------------------------------------ publishing (main thread)
        @property
        def t_ns(self) -> int:
            return self.step_count * ros_io.PHYSICS_DT_NS

        def publish_sample(self) -> None:
            """Publish the current state (stamp = sim time). Message objects are reused: rclpy
            serialises synchronously in ``publish``, and building Imu/Odometry from scratch costs
            more than the physics step. Topics nobody subscribes to (in or outside the process) are
            skipped: no recorder, no ground truth to build."""
            t_ns = self.t_ns
            stamp = ros_io.time_msg(t_ns)
            if self.step_count % self.steps_per_tick == 0:
                # before publishing: in a container the answer arrives inside publish()
                self.timing.sample_published(self.step_count // self.steps_per_tick, time.monotonic())
            s = self.sim.sensors()
            m = self._msgs
            if self.pub_clock.get_subscription_count():
                m["clock"].clock = stamp
                self.pub_clock.publish(m["clock"])
            ros_io.fill_joint_state(m["js"], stamp, s.joint_pos, s.joint_vel, s.joint_effort)
            self.pub_js.publish(m["js"])
            ros_io.fill_imu(m["imu"], stamp, s.imu_quat_xyzw, s.imu_gyro, s.imu_accel)
            self.pub_imu.publish(m["imu"])
            if self.step_count % int(self.params["ground_truth_decimation"]) == 0:
                if self.pub_odom.get_subscription_count():
                    q, v = self.sim.ground_truth()
                    ros_io.fill_odometry(m["odom"], stamp, q, v)
                    self.pub_odom.publish(m["odom"])
                if self.pub_contacts.get_subscription_count():
                    m["contacts"].data = ros_io.dvec(self.sim.foot_contacts())
                    self.pub_contacts.publish(m["contacts"])
                if self.pub_dist.get_subscription_count():
                    m["dist"].data = ros_io.dvec(self.dist_applied)
                    self.pub_dist.publish(m["dist"])
            if t_ns >= self._diag_next_ns:
                self.publish_diagnostics()
                self._diag_next_ns = t_ns + int(round(self.params["diagnostics_period"] * 1e9))
            if self.viewer is not None:
                self.viewer.update(self.sim.d.qpos)  # a copy at most every 1/50 s; drawn by the viewer's thread
            if self.after_sample is not None:
                self.after_sample()                  # the container: the recorder's deferred copies

        after_sample = None   # hook called after each sample is published (before the messages are refilled)

        def publish_diagnostics(self) -> None:
            now = time.monotonic()
            w0, s0 = self._diag_wall
            rtf = ((self.step_count - s0) * 1e-3) / (now - w0) if now > w0 and self.step_count > s0 else 0.0
            self._diag_wall = (now, self.step_count)
            with self._cond:
                window, ticks, latency = self.timing.take_window()
            self._log_progress(now, window)
            d = {"sim_time": self.t_ns * 1e-9, "tick": float(self.tick),
                 **{k: float(v) for k, v in self.counters.items()},
                 "watchdog_active": float(self.watchdog_active), "realtime_factor": rtf, **window}
            self.pub_diag.publish(ros_io.diagnostics_msg({k: d[k] for k in DIAG_FIELDS}))
            if ticks:
                self.pub_latency.publish(ros_io.command_latency_msg(ticks, latency))

        def _log_progress(self, now: float, window: dict) -> None:
            """One line every ``progress_period`` wall seconds, so a long run is never silent."""
            period = float(self.params["progress_period"])
            if period <= 0:
                return
            if self._progress is None:
                self._progress = (now, self.step_count)
                return
            w0, s0 = self._progress
            if now - w0 < period:
                return
            self._progress = (now, self.step_count)
            dur = float(self.params["duration"])
            rtf = (self.step_count - s0) * 1e-3 / (now - w0)
            lat = window.get("command_latency_p99_us")
            self.get_logger().info(
                f"t = {self.t_ns * 1e-9:.1f}{f' / {dur:g}' if dur > 0 else ''} s sim, {rtf:.2f}x real time, "
                f"{self.counters['commands_applied']} commands applied, {self.counters['deadline_misses']} deadline "
                f"misses, command latency p99 {lat:.0f} us (last {self.params['diagnostics_period']:g} s)"
                if lat == lat else
                f"t = {self.t_ns * 1e-9:.1f} s sim, {rtf:.2f}x real time, no command in the last window")

        _progress = None

        # ------------------------------------------------------------ physics
        def damping_torque(self) -> np.ndarray:
            dq = self.sim.joint_velocities()
            tau = -float(self.params["watchdog_damping"]) * dq
            return np.clip(tau, -self.effort_limit, self.effort_limit)

        def physics_step(self, tau: np.ndarray | None) -> None:
            """One 1 ms step with ``tau`` (None: watchdog damping), then publish the new sample."""
            self.sim.set_torque(self.damping_torque() if tau is None else tau)
            dist = None
            if self.disturbance_fn is not None:
                dist = self.disturbance_fn(self.t_ns * 1e-9, self.sim)
            if dist is None:
                self.dist_applied[:] = 0.0
            else:
                dist = np.asarray(dist, dtype=float)
                if dist.shape != (self.n,) or not np.all(np.isfinite(dist)):
                    self.get_logger().error(f"disturbance_fn returned {dist!r}; using zero",
                                            throttle_duration_sec=1.0)
                    dist = np.zeros(self.n)
                self.dist_applied[:] = dist
            self.sim.set_disturbance(self.dist_applied)
            self.sim.step(1)
            self.step_count += 1

        def done(self) -> bool:
            dur = float(self.params["duration"])
            return self.stop_requested or (dur > 0 and self.t_ns >= int(round(dur * 1e9)))

        # ------------------------------------------------------------ start-up
        def wait_for_peers(self) -> bool:
            need = int(self.params["startup_min_subscribers"])
            timeout = float(self.params["startup_timeout"])
            t0 = time.monotonic()
            logged = False
            while not self.stop_requested:
                subs = self.pub_js.get_subscription_count()
                pubs = self.count_publishers(self.sub_cmd.topic_name) if self.lockstep else 1
                unmatched = [p.topic_name for p in self._publishers_list() if p.get_subscription_count() < 1] \
                    if self.params["startup_wait_all_topics"] else []
                if subs >= need and pubs >= 1 and not unmatched:
                    # every subscriber known to the graph (the recorder's on all topics) matched: none of
                    # the samples from tick 0 on is dropped for lack of a match
                    if not ros_io.wait_for_matched_subscribers(self, self._publishers_list(), timeout=2.0):
                        self.get_logger().warning("start-up: some subscriptions did not match within 2 s")
                    return True
                if timeout and time.monotonic() - t0 > timeout:
                    self.get_logger().error(f"start-up: {subs}/{need} /joint_states subscribers, {pubs} command "
                                            f"publishers, unmatched topics {unmatched} after {timeout:g} s; "
                                            "starting anyway")
                    return False
                if not logged and time.monotonic() - t0 > 2.0:
                    self.get_logger().info(f"waiting for {need} /joint_states subscriber(s) and a command publisher")
                    logged = True
                time.sleep(0.01)
            return False

        def _publishers_list(self):
            return [self.pub_clock, self.pub_js, self.pub_imu, self.pub_odom, self.pub_contacts, self.pub_dist,
                    self.pub_diag, self.pub_latency]

        # ------------------------------------------------------------ lockstep
        def _engage_watchdog(self, why: str) -> None:
            if not self.watchdog_active:
                self.watchdog_active = True
                self.counters["watchdog_events"] += 1
                self.get_logger().error(f"watchdog: {why}; applying joint damping "
                                        f"{self.params['watchdog_damping']:g} N m s/rad")

        def _leave_watchdog(self, how: str) -> None:
            if self.watchdog_active:
                self.watchdog_active = False
                self.get_logger().warning(f"watchdog released: {how}")

        def wait_command_lockstep(self):
            """The torque for the current tick, or None (watchdog damping) — see the module docstring."""
            k = self.tick
            startup = not self._got_first_command
            timeout = float(self.params["startup_timeout"] if startup else self.params["watchdog_timeout"])
            period = self.steps_per_tick * 1e-3
            t0 = time.monotonic()
            next_republish = t0 + float(self.params["republish_period"])
            with self._cond:
                while True:
                    cmd = self._pending
                    support_ready = (self.sub_support is None or k in self._support or self.watchdog_active
                                     or (time.monotonic() - t0) > timeout)
                    if cmd is not None and cmd.tick == k and support_ready:
                        self._pending = None
                        self._got_first_command = True
                        self._leave_watchdog(f"command for tick {k} received, lockstep resumed")
                        return cmd.tau
                    if self.stop_requested:
                        return None
                    now = time.monotonic()
                    if self.watchdog_active:
                        if now - t0 >= period:
                            return None
                        self._cond.wait(t0 + period - now)
                        continue
                    if timeout and now - t0 >= timeout:
                        self._engage_watchdog(f"no command for tick {k} (t = {self.t_ns * 1e-9:.3f} s) within "
                                              f"{timeout:g} s wall")
                        return None
                    if startup and k == 0 and now >= next_republish:
                        self._cond.release()
                        try:
                            self.get_logger().info("no command for tick 0 yet: re-publishing the tick-0 sample")
                            self.publish_sample()
                        finally:
                            self._cond.acquire()
                        next_republish = now + float(self.params["republish_period"])
                    deadline = min(next_republish if (startup and k == 0) else 1e18,
                                   (t0 + timeout) if timeout else 1e18)
                    self._cond.wait(max(0.0, min(deadline - now, 0.5)))

        def run_lockstep(self) -> None:
            while not self.done():
                tau = self.wait_command_lockstep()
                if self.stop_requested:
                    break
                if tau is not None:
                    self.counters["commands_applied"] += 1
                    self.tau = tau
                    with self._cond:
                        self.timing.close_tick(self.tick)      # latency only: lockstep has no deadline
                for i in range(self.steps_per_tick):
                    self.physics_step(tau)
                    if i == self.steps_per_tick - 1:
                        with self._cond:
                            self.tick += 1
                            if self._pending is not None and self._pending.tick < self.tick:
                                self._pending = None
                    self.publish_sample()

        # ------------------------------------------------------------ realtime
        def run_realtime(self) -> None:
            startup = float(self.params["startup_timeout"])
            t0 = time.monotonic()
            next_republish = t0 + float(self.params["republish_period"])
            with self._cond:
                while self._latest is None and not self.stop_requested:
                    now = time.monotonic()
                    left = (t0 + startup - now) if startup else 0.5
                    if startup and left <= 0:
                        self._engage_watchdog(f"no command within the start-up timeout of {startup:g} s")
                        break
                    if now >= next_republish:  # a late subscriber may have missed the tick-0 sample
                        self._cond.release()
                        try:
                            self.get_logger().info("no command yet: re-publishing the tick-0 sample")
                            self.publish_sample()
                        finally:
                            self._cond.acquire()
                        next_republish = now + float(self.params["republish_period"])
                    self._cond.wait(min(max(left, 0.0), 0.5, max(next_republish - now, 0.0)))
            wall0 = time.monotonic()
            step0 = self.step_count
            spt = self.steps_per_tick
            while not self.done():
                rtf = float(self.params["realtime_factor"])
                target = wall0 + (self.step_count - step0) * 1e-3 / rtf   # scheduled wall time of this step
                delay = target - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                elif delay < -0.1:  # far behind (debugger, overload): re-anchor instead of racing
                    self.counters["overruns"] += 1
                    wall0, step0 = time.monotonic(), self.step_count
                    target = wall0
                with self._cond:
                    if self.step_count % spt == 0 and self._got_first_command and self.step_count > 0:
                        # the command answering the previous tick is due when this period starts
                        if self.timing.close_tick(self.step_count // spt - 1, deadline=target):
                            self.counters["deadline_misses"] += 1
                    # what had arrived by the scheduled time (not by now: a step that runs late,
                    # e.g. because this process computed the command, acts as if it had run on time)
                    cmd, last_step = self.cmd_queue.due(target), self._last_cmd_step
                self.tick = self.step_count // spt
                wd = float(self.params["watchdog_timeout"])
                tau = None
                if cmd is not None:
                    self._got_first_command = True
                    if (self.step_count - last_step) * 1e-3 > wd:
                        self._engage_watchdog(f"no command for {wd:g} s of sim time")
                    else:
                        self._leave_watchdog("commands resumed")
                        tau = cmd.tau
                        if cmd is not self._applied_cmd:
                            self.counters["commands_applied"] += 1
                            self._applied_cmd = cmd
                self.physics_step(tau)
                self.publish_sample()

        _applied_cmd = None

        def flush_publishers(self, timeout: float = 5.0) -> None:
            """Wait until subscribers acknowledged the last samples: exiting right after ``publish``
            drops what is still in flight (seen: the last 3 of 501 samples lost), so the recorder would
            miss the end of the run. Acknowledgements come with the DDS heartbeat (Fast DDS: every
            3 s), so this can take up to ~3 s."""
            from rclpy.duration import Duration

            t_end = time.monotonic() + timeout
            for pub in self._publishers_list():
                left = max(0.0, t_end - time.monotonic())
                if not pub.wait_for_all_acked(Duration(nanoseconds=int(left * 1e9))):
                    self.get_logger().warning(f"{pub.topic_name}: not all samples acknowledged within {timeout:g} s")

        def run(self) -> int:
            self.wait_for_peers()
            if self.stop_requested:
                return 0
            self.publish_sample()  # the tick-0 sample
            if self.lockstep:
                self.run_lockstep()
            else:
                self.run_realtime()
            self.publish_diagnostics()
            self.flush_publishers()
            if self.stop_requested:
                self.get_logger().info(f"stopped at t = {self.t_ns * 1e-9:.3f} s")
            else:
                self.get_logger().info(f"duration reached: t = {self.t_ns * 1e-9:.3f} s, "
                                       f"{self.counters['commands_applied']} commands applied, "
                                       f"{self.counters['watchdog_events']} watchdog events")
            return 0

    return MujocoBridge


def main(argv: list[str] | None = None) -> int:
    import rclpy
    from rclpy.signals import SignalHandlerOptions

    rclpy.init(args=argv if argv is not None else sys.argv, signal_handler_options=SignalHandlerOptions.NO)
    node = None
    executor = None
    spin = None
    spinning = threading.Event()
    try:
        node = _make_node_class()()
        # commands, parameters and services in a thread of their own; the executor is ros_io's
        # (LEGGED_WBC_EXECUTOR: events by default, single), always spun with a timeout (ros_io.spin_until)
        executor = ros_io.make_executor()
        executor.add_node(node)
        spinning.set()
        spin = threading.Thread(target=ros_io.spin_until, args=(executor, lambda: not spinning.is_set()),
                                name="executor", daemon=True)
        spin.start()

        def _stop(signum, frame):
            node.request_stop()

        signal.signal(signal.SIGINT, _stop)
        signal.signal(signal.SIGTERM, _stop)
        rc = node.run()
    except Exception as exc:
        from legged_wbc.ros.params import ParameterSchemaError

        if isinstance(exc, (ParameterSchemaError, ConfigError)):
            print(f"mujoco_bridge: {exc}", file=sys.stderr)
            rc = 2
        else:
            raise
    finally:
        spinning.clear()
        if spin is not None:
            spin.join(timeout=2.0)
        if executor is not None:
            executor.shutdown(timeout_sec=1.0)
        if node is not None:
            if node.viewer is not None:
                try:
                    node.viewer.close()
                except Exception:
                    pass
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    return rc


if __name__ == "__main__":
    sys.exit(main())
