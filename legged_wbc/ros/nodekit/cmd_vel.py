"""Velocity commands in the nodes: the controller's ``/cmd_vel`` input and the gait clock it hands the
estimator (the math: :mod:`wbc_controller.blocks.command`, no ROS).

* ``/cmd_vel`` (``geometry_msgs/msg/Twist``, or ``TwistStamped`` as Nav2 publishes it with the
  parameter ``cmd_vel_stamped``): the base twist in its heading frame (REP 103: ``linear.x`` forward,
  ``linear.y`` left [m/s], ``angular.z`` yaw rate [rad/s]; the other components are ignored). Always a
  DDS subscription (no node of the stack publishes it), so any outside node steers the robot, in every
  layout; best effort, so reliable and best-effort publishers both match. A message with a NaN/inf
  is rejected (one log line a second, counted). The newest message is taken at the next control tick
  and stamped with that tick's time: ``cmd_vel_timeout`` runs in the controller's time.
* Precedence: the scenario's ``commands`` (or, without them, its forward walk) drive the robot until the
  first ``/cmd_vel`` message; from then on the live command rules (one log line). From the forward walk
  the command reference starts where the walk's reference is, at its speed (no jump).
* ``/wbc/gait_clock`` (``std_msgs/msg/Float64MultiArray``, label ``gait_clock[t,tau,paused]``): under a
  live command, each tick ``[t, tau, paused]`` (tick time [s], the gait clock [s], 1/0). The estimator
  evaluates the gait at ``tau + (t_now - t)`` (running) or ``tau`` (paused): exact with the clock one
  tick late (pausing happens at a ``tau`` where every leg is in support, resuming keeps ``tau``). In a
  container whose controller is chained to the estimator the estimator reads it from the controller and
  nothing is published (a message and a record less per tick); ``/wbc/diagnostics`` has it in any case.
"""

from __future__ import annotations

import math

import numpy as np
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import Float64MultiArray

from legged_wbc.gait import GaitScheduler
from legged_wbc.ros import io as ros_io
from legged_wbc.ros.io import adapters
from legged_wbc.ros.transport import endpoints
from wbc_controller.blocks.command import Commander, CommandLimits

TOPIC_CMD_VEL = "cmd_vel"
TOPIC_GAIT_CLOCK = "wbc/gait_clock"
CLOCK_LABEL = "gait_clock[t,tau,paused]"
# the controller's diagnostics fields this adds (wbc_controller.diagnostics.DIAG_FIELDS, at the end)
CMD_DIAG = ("cmd_live", "cmd_clamped", "cmd_rejected", "cmd_vx", "cmd_vy", "cmd_wz", "gait_tau", "gait_paused")
CMD_VEL_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10, reliability=ReliabilityPolicy.BEST_EFFORT)


def scheduled_commander(scenario, wcfg, gait_cfg, rm) -> Commander | None:
    """The scenario's command schedule as a :class:`Commander` (``legged_wbc.closed_loop.make_commander``,
    the headless loop's), None without ``commands``."""
    if scenario is None or not scenario.raw.get("commands"):
        return None
    from legged_wbc.closed_loop import make_commander

    return make_commander(scenario, wcfg, gait_cfg, rm)


class CmdVelInput:
    """The controller node's command source: ``/cmd_vel`` (module docstring), the scenario's schedule
    before it, and the ``/wbc/gait_clock`` publisher. :meth:`command` once a tick, in the tick's thread."""

    def __init__(self, node, cfg, gait_cfg, scenario, stamped: bool, qos):
        self.node = node
        self.scheduled = scheduled_commander(scenario, cfg, gait_cfg, node.rm)
        self.commander = self.scheduled or Commander(CommandLimits.from_config(cfg),
                                                     GaitScheduler(gait_cfg, node.rm.cfg.leg_names))
        self.commander.on_held = lambda msg: node.get_logger().info(msg)   # once per hold (before the gait)
        self.live = False
        self.rejected = 0
        self.clock: tuple | None = None    # under a live command: (t, tau, paused) of the last tick
        self._msg = (0, 0.0, 0.0, 0.0)     # (sequence, vx, vy, wz): written by the callback only
        self._taken = 0
        self._last = np.zeros(5)           # the last tick's filtered command and gait clock (diagnostics)
        self.to_topic = True               # publish /wbc/gait_clock (off when chained: the estimator reads .clock)
        if stamped:
            from geometry_msgs.msg import TwistStamped as msg_type
        else:
            from geometry_msgs.msg import Twist as msg_type
        self.stamped = stamped
        # no publisher in the stack: the in-process bus makes this an rclpy subscription (DDS)
        self.sub = endpoints.create_subscription(node, msg_type, TOPIC_CMD_VEL, self._on_msg, CMD_VEL_QOS)
        self.pub = endpoints.create_publisher(node, Float64MultiArray, TOPIC_GAIT_CLOCK, qos,
                                              adapter=adapters.ArrayAdapter(
                                                  ros_io.float64_array_msg(np.zeros(3), CLOCK_LABEL)))

    def _on_msg(self, msg) -> None:
        tw = msg.twist if self.stamped else msg
        vals = (float(tw.linear.x), float(tw.linear.y), float(tw.angular.z))
        if not all(math.isfinite(x) for x in vals):
            self.rejected += 1
            return self.node._reject("cmd_vel", f"NaN/inf in ({vals[0]}, {vals[1]}, {vals[2]})")
        self._msg = (self._msg[0] + 1, *vals)

    def set_limits(self, cfg) -> None:
        """Live ``cmd_max_*``, ``cmd_accel_*``, ``cmd_vel_timeout`` (from the next message / tick)."""
        self.commander.filter.limits = CommandLimits.from_config(cfg)

    def command(self, t: float, ctl):
        """The tick's command (:class:`~wbc_controller.blocks.command.CommandState`) at tick time ``t`` [s]:
        the newest ``/cmd_vel`` taken first; None while the scenario's forward walk drives."""
        msg = self._msg
        if msg[0] != self._taken:
            self._taken = msg[0]
            if not self.live:
                self._take_over(t, ctl)
            self.commander.set(msg[1], msg[2], msg[3], t)
        if not self.live and self.scheduled is None:
            return None
        cmd = self.commander.tick(t)
        self._last[:] = (cmd.vx, cmd.vy, cmd.wz, cmd.tau, 1.0 if cmd.paused else 0.0)
        if self.live:
            self.clock = (t, cmd.tau, 1.0 if cmd.paused else 0.0)
        return cmd

    def _take_over(self, t: float, ctl) -> None:
        self.live = True
        cm = self.commander
        if self.scheduled is not None:
            cm.schedule = None                 # filter, reference and gait clock go on from where they are
            was = "the scenario's command schedule"
        else:                                  # from the forward walk: its reference and speed (yaw 0)
            ref = ctl.refs(t)
            ctl.command_ref.reset(ref.p[:2], 0.0)
            vmax = cm.filter.limits.v_max
            cm.filter.v[:2] = [min(max(float(ref.v[k]), -vmax[k]), vmax[k]) for k in range(2)]
            was = "the scenario's forward walk"
        self.node.get_logger().info(f"/cmd_vel: the live velocity command takes over from {was} at t={t:.3f} s")

    def output(self):
        """``(publisher, value)`` of this tick's ``/wbc/gait_clock``, None without a live command or when chained."""
        return None if self.clock is None or not self.to_topic else (self.pub, np.array(self.clock))

    def diag(self) -> list:
        """The values of :data:`CMD_DIAG`: live (1/0), clamped commands, rejected messages, the filtered
        command (vx, vy [m/s], wz [rad/s]), the gait clock (tau [s], paused 1/0)."""
        return [float(self.live), self.commander.filter.clamped, self.rejected, *self._last]


class GaitClockFollower:
    """The estimator's gait clock: the scenario's schedule (its own :class:`Commander`, the controller's
    twin: the same clock, bit for bit) until the controller publishes ``/wbc/gait_clock``; then that
    clock (module docstring); neither: None (the gait at ``t``)."""

    def __init__(self, node, gait_cfg, scenario, qos):
        wcfg = None
        if scenario is not None and scenario.raw.get("commands"):   # the controller's limits, as it loads them
            from wbc_controller.config import load_wbc_config

            wcfg = load_wbc_config(overrides=scenario.controller_overrides("cbf"), robot=scenario.robot)
        self.scheduled = scheduled_commander(scenario, wcfg, gait_cfg, node.rm)
        self.last: tuple | None = None     # (t, tau, paused) of the newest message
        endpoints.create_subscription(node, Float64MultiArray, TOPIC_GAIT_CLOCK, self._on_msg, qos,
                                      adapter=adapters.ArrayAdapter)

    def _on_msg(self, value) -> None:
        if len(value) == 3 and all(math.isfinite(x) for x in value):
            self.last = (float(value[0]), float(value[1]), float(value[2]))

    def clock(self, t: float, chained=None) -> tuple | None:
        """``(tau, paused)`` at tick time ``t`` [s] (``chained``: the controller whose clock to read)."""
        src = chained.cmd_vel.clock if chained is not None else self.last
        if src is None:
            if self.scheduled is None:
                return None
            cmd = self.scheduled.tick(t)
            return cmd.tau, cmd.paused
        t0, tau, paused = src
        return (tau, True) if paused else (tau + (t - t0), False)
