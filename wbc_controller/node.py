"""``wbc_controller``: the whole-body controller as a ROS 2 node (answers every control tick, 500 Hz).

A thin wrapper around :class:`wbc_controller.controller.WholeBodyController`: the same object the
headless loop runs. For each control tick ``k`` it waits until it holds the samples stamped
``t_k = k * 2 ms`` of

* ``/joint_states`` (sensor_msgs/JointState): joint positions and velocities, by name;
* ``/estimator/odom`` (nav_msgs/Odometry): estimated base pose (world) and twist (base frame);
* ``/estimator/support`` (JointState-shaped, ``name`` = legs, then ``support_plane_normal_{x,y,z}``):
  ``position`` = estimated support set S_c (1/0), then the support-plane normal (world frame; without
  those names: world z); ``velocity`` = touchdown detected (1/0);
* ``/estimator/tau_ext`` (sensor_msgs/JointState-shaped, ``name`` = joints): ``effort`` = estimated
  external joint torque [N m] (only waited for when ``null_space_compensation`` is on),

then computes the torque and publishes, in this order,

* ``/wbc/relative_pitch`` (JointState-shaped, ``name`` = legs): ``position`` = theta [rad],
  ``velocity`` = theta_dot [rad/s], ``effort`` = 1 where a CBF bound is binding;
* ``/wbc/diagnostics`` (Float64MultiArray, label ``wbc[<fields>]``, fields :data:`DIAG_FIELDS`);
* ``/joint_torque_cmd`` (sensor_msgs/JointState: ``name`` = the joints, ``effort`` = torques [N m],
  ``header.stamp`` = the tick answered; see :mod:`legged_wbc.ros.io`), and, with
  ``forward_command_topic``, the efforts alone for a ros2_control ``forward_command_controller``.

``/cmd_vel`` (Twist; ``cmd_vel_stamped``: TwistStamped) takes over from the scenario's schedule or walk; under it
``/wbc/gait_clock`` goes out first (:mod:`legged_wbc.ros.nodekit.cmd_vel`). ``input_timing: sample`` (hardware
stamps): inputs paired by equal stamps (the estimator's outputs carry its joint-state sample's), ``t = stamp -
first tick's stamp``, the command carries the sample's stamp (the bridge then needs ``command_timing: untimed``),
the diagnostics' ``tick`` is ``t`` on the 2 ms grid. Falling behind: :class:`legged_wbc.ros.io.NewestTickRunner`.

A sample with NaN or the wrong length is rejected (logged, counted in the diagnostics) and that tick
gets no command: the bridge's watchdog takes over, a NaN never reaches the torque output.
Parameters: the fields of :class:`~wbc_controller.config.WbcNodeConfig` (validated; the live ones
take effect at the next tick; ``robot``, ``scenario``, topics, QoS, the solver settings read-only). The scenario's
body references (stand-up, speed, gait start) are applied on top of ``config/wbc_controller.yaml``.
"""

from __future__ import annotations

import sys

import numpy as np
from nav_msgs.msg import Odometry
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from legged_wbc.gait import GaitConfig
from legged_wbc.model import RobotModel, joint_permutation
from legged_wbc.robot import ConfigError
from legged_wbc.ros.io import adapters
from legged_wbc.ros.nodekit import cmd_vel as ros_cmd_vel, diagnostics as ros_diagnostics
from legged_wbc.ros import io as ros_io
from legged_wbc.ros.transport import endpoints
from legged_wbc.ros.nodekit.params import NodeParameters
from legged_wbc.scenario import load_scenario_on, node_overrides
from state_estimator import support_plane

from .config import WbcConfig, WbcNodeConfig
from .controller import ControllerInput, InputError, WholeBodyController
from .diagnostics import DIAG_FIELDS  # noqa: F401  (the published fields; re-exported for old imports)

wbc_fields = set(WbcConfig.__dataclass_fields__)

def scenario_overrides(cfg: WbcNodeConfig) -> dict:
    """The scenario's references on top of the parameter file, made visible as parameters
    (:func:`legged_wbc.scenario.node_overrides`)."""
    return {k: v for k, v in node_overrides(cfg.scenario, cfg.robot, cfg.relative_pitch_mode).items() if k in wbc_fields}

class WbcNode(ros_io.TickOutputs, Node):
    def __init__(self, **kw):
        super().__init__("wbc_controller", **kw)
        self.params = NodeParameters(self, WbcNodeConfig, on_change=self._on_config, startup=scenario_overrides)
        P = self.params.config
        self.rm = RobotModel(P.robot)
        sc = load_scenario_on(P.scenario, P.robot) if P.scenario not in ("", "none") else None
        gait = GaitConfig.from_dict(sc.gait_dict(self.rm.cfg.gait) if sc else self.rm.cfg.gait)
        self.cfg = P.wbc
        self.ctl = WholeBodyController(self.rm, self.cfg, gait)
        self.ctl.reset(self.rm.stance_configuration(sc.initial_height if sc else None))
        self._new_cfg = self._cfg_applied = None   # written by the parameter callback only
        self.joint_names = list(self.rm.joint_names)
        self.leg_names = list(self.rm.cfg.leg_names)
        self.order = ros_io.JointOrder(self.joint_names, bounds=ros_io.joint_bounds(self.rm))
        self.legs_order = ros_io.JointOrder(self.leg_names)
        self.support_order = ros_io.JointOrder(self.leg_names + list(support_plane.ROS_NAMES))   # legs, normal
        # input_timing: sample (hardware stamps): inputs paired by stamp [ns], t = stamp - first tick's
        self.samples = ros_io.SampleTicks() if P.input_timing == "sample" else None
        self.sync = ros_io.TickSync(self._required_inputs(), max_pending=None if self.samples is None else 64)
        self._last_out: list = []   # messages of the last tick, re-sent if its inputs come again
        self.rejected = 0
        qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=P.qos_depth,
                         reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE)
        A, JS = adapters, adapters.JointStateAdapter
        endpoints.create_subscription(self, JointState, ros_io.TOPIC_JOINT_STATES, self._on_js, qos, adapter=JS)
        endpoints.create_subscription(self, Odometry, ros_io.TOPIC_EST_ODOM, self._on_odom, qos, adapter=A.OdometryAdapter)
        endpoints.create_subscription(self, JointState, ros_io.TOPIC_EST_SUPPORT, self._on_support, qos, adapter=JS)
        endpoints.create_subscription(self, JointState, ros_io.TOPIC_EST_TAU_EXT, self._on_tau_ext, qos, adapter=JS)
        self.cmd_vel = ros_cmd_vel.CmdVelInput(self, self.cfg, gait, sc, P.cmd_vel_stamped, qos)   # /cmd_vel, /wbc/gait_clock
        # the messages of a tick, built once with their constant parts (values in, see ros.adapters)
        zeros_legs, zeros_n = np.zeros(len(self.leg_names)), np.zeros(self.rm.n)
        self._nan_n = np.full(self.rm.n, np.nan)    # the command's position / velocity: "not commanded"
        self.pub_cmd, self.pub_pitch, self.pub_diag = [
            endpoints.create_publisher(self, a.msg_type, topic, qos, adapter=a) for a, topic in (
                (JS(ros_io.torque_command_msg(0, self.joint_names, zeros_n)), ros_io.TOPIC_TORQUE_CMD),
                (JS(ros_io.joint_state_msg(0, self.leg_names, zeros_legs, zeros_legs, zeros_legs)),
                 ros_io.TOPIC_WBC_PITCH),
                (A.ArrayAdapter(ros_io.float64_array_msg(np.zeros(len(DIAG_FIELDS)),
                                                         "wbc[" + ",".join(DIAG_FIELDS) + "]")),
                 ros_io.TOPIC_WBC_DIAG))]
        self.pub_forward, self._forward_idx = None, None
        if P.forward_command_topic:
            # ros2_control's forward_command_controller takes exactly the efforts, in its `joints` order
            joints = list(P.forward_command_joints) or self.joint_names
            try:
                self._forward_idx = joint_permutation(self.joint_names, joints)
            except ValueError as exc:
                raise ConfigError(f"forward_command_joints: {exc}") from None
            self.pub_forward = endpoints.create_publisher(self, Float64MultiArray, P.forward_command_topic, qos,
                                                       adapter=A.ArrayAdapter(Float64MultiArray()))
        self.ticks = ros_io.NewestTickRunner(self._run_tick, name="controller_ticks")
        self.diag_timer = ros_diagnostics.attach(self)   # /diagnostics, 1 Hz in the executor thread
        self.get_logger().info(f"wbc_controller: {self.cfg.relative_pitch_mode} mode, solver {self.cfg.solver}, "
                               f"scenario {P.scenario}")

    # -------------------------------------------------------------- parameters
    def _on_config(self, cfg: WbcNodeConfig, changed: list) -> None:
        self._new_cfg = cfg.wbc      # applied at the next tick

    # -------------------------------------------------------------- inputs
    def _tick_key(self, value) -> int | None:
        """The tick of a sample (``tick_grid``; None between ticks) or its stamp [ns] (``sample``)."""
        return ros_io.tick_from_stamp(value.stamp_ns) if self.samples is None else value.stamp_ns

    def _slot(self, tick: int | None, key: str, value) -> None:
        if tick is None:
            return
        status = self.sync.status(tick)
        if status != ros_io.TickSync.NEW:
            if status == ros_io.TickSync.REPEAT and key == "js":  # re-published: our answer was lost
                self._resend()
            return
        d = self.sync.add(tick, key, value)
        if d is not None:               # sample mode: SampleTicks' schedule advances in completion order
            self.ticks.submit(tick, d, tick == 0 if self.samples is None else self.samples.take(tick) == 0)

    def _on_js(self, msg: adapters.JointSample) -> None:
        tick = self._tick_key(msg)
        if tick is None or (self.samples is not None and self.samples.status(tick) == ros_io.SampleTicks.SKIP):
            return                      # between ticks (1 kHz samples): nothing to parse
        try:
            pos, vel, _ = self.order.arrays_of(msg.names, msg.position, msg.velocity, msg.effort)
        except ValueError as exc:
            return self._reject("joint state", str(exc))
        if not ros_io.all_finite(pos, vel):
            return self._reject("joint state", "NaN/inf or missing position/velocity")
        self._slot(tick, "js", (pos, vel))

    def _on_odom(self, msg: adapters.OdomSample) -> None:
        qb, vb = msg.q, msg.v
        if not ros_io.all_finite(qb, vb):
            return self._reject("odometry", "NaN/inf")
        self._slot(self._tick_key(msg), "odom", (qb, vb))

    def _finite_field(self, order, msg, what: str, k: int):
        """Field ``k`` (0 position, 2 effort) of a JointState-shaped value in ``order``'s order; None
        (rejected, logged) for unknown names or a NaN."""
        try:
            a = order.arrays_of(msg.names, msg.position, msg.velocity, msg.effort)[k]
        except ValueError as exc:
            return self._reject(what, str(exc))
        return a if ros_io.all_finite(a) else self._reject(what, "NaN")

    def _on_support(self, msg: adapters.JointSample) -> None:
        plane = support_plane.ROS_NAMES[0] in msg.names   # (a publisher without the support plane: world z)
        pos = self._finite_field(self.support_order if plane else self.legs_order, msg,
                                 "support and support plane normal" if plane else "support", 0)
        if pos is None:
            return
        key, n_legs = self._tick_key(msg), len(self.leg_names)
        if plane:
            self._slot(key, "normal", pos[n_legs:])    # before "support", which may complete the tick
        self._slot(key, "support", pos[:n_legs] > 0.5)

    def _on_tau_ext(self, msg: adapters.JointSample) -> None:
        eff = self._finite_field(self.order, msg, "tau_ext", 2)
        if eff is not None:
            self._slot(self._tick_key(msg), "tau_ext", eff)

    def take_estimate(self, tick: int, pos, vel, q_base, v_base, support, normal, tau_ext) -> None:
        """Tick ``tick`` from the chained estimator, our joint / leg order: ``pos`` [rad], ``vel`` [rad/s]; base
        pose (x, y, z, qx, qy, qz, qw) in world, twist in the BASE frame (Pinocchio's); ``tau_ext`` [N m]."""
        if tick is not None and self.sync.status(tick) == ros_io.TickSync.NEW:
            self.sync.last_tick = tick
            self.ticks.submit(tick, dict(js=(pos, vel), odom=(q_base, v_base), support=support, normal=normal,
                                         tau_ext=tau_ext), tick == 0)

    # -------------------------------------------------------------- one control tick
    def _required_inputs(self) -> tuple:
        """The topics a tick waits for (tau_ext only with null-space compensation)."""
        return ("js", "odom", "support") + (("tau_ext",) if self.cfg.null_space_compensation else ())

    def _run_tick(self, tick: int, d: dict, first: bool | None = None) -> None:
        if self._new_cfg is not self._cfg_applied:
            self.cfg = self._cfg_applied = self._new_cfg
            self.ctl.set_config(self.cfg)
            self.cmd_vel.set_limits(self.cfg)
            self.sync.required = self._required_inputs()   # from the next tick on
        pos, vel = d["js"]
        qb, vb = d["odom"]
        q = np.concatenate([qb, pos])
        v = np.concatenate([vb, vel])
        first = tick == 0 if first is None else first
        if self.samples is None:
            t_ns, t = tick * ros_io.CONTROL_PERIOD_NS, tick * ros_io.CONTROL_PERIOD_NS * 1e-9
        else:                           # tick = the stamp [ns]; the diagnostics: t's tick on the 2 ms grid
            t_ns, t = tick, self.samples.t(tick)
            tick = (t_ns - self.samples.first_ns + ros_io.CONTROL_PERIOD_NS // 2) // ros_io.CONTROL_PERIOD_NS
        try:
            out = self.ctl.update(ControllerInput(t=t, q=q, v=v, support=d["support"], tau_ext=d.get("tau_ext"),
                                                  normal=d.get("normal"), command=self.cmd_vel.command(t, self.ctl)))
        except InputError as exc:
            return self._reject("controller input", str(exc))
        diag = out.diag
        vals = [tick, diag.qp_accepted, diag.qp_time_us, diag.solve_time_us, diag.cycle_time_us,
                diag.qp_iterations, diag.eq_residual, diag.ineq_violation, diag.consecutive_failures,
                diag.total_failures, diag.safe_stop, self.rejected, *diag.body_error_rpy[:2], self.ticks.skipped,
                *self.cmd_vel.diag()]
        if diag.safe_stop and diag.consecutive_failures == self.cfg.max_failures + 1:
            self.get_logger().error(f"safe stop: {diag.consecutive_failures} consecutive QP failures ({diag.qp_status})")
        self._last_out = [self.cmd_vel.output()] if self.cmd_vel.live and self.cmd_vel.to_topic else []
        self._last_out += [
            (self.pub_pitch, adapters.JointSample(t_ns, self.leg_names, diag.theta, diag.theta_dot,
                                                  diag.cbf_active.astype(float))),
            (self.pub_diag, np.array(vals, dtype=float)),
            (self.pub_cmd, adapters.JointSample(t_ns, self.joint_names, self._nan_n, self._nan_n, out.tau))]
        if self.pub_forward is not None:
            self._last_out.append((self.pub_forward, out.tau[self._forward_idx]))
        if first:   # the first command must reach every subscriber in the graph (bridge, recorder)
            endpoints.wait_for_matched_subscribers(self, [self.pub_cmd, self.pub_pitch, self.pub_diag], timeout=5.0)
        self._resend()


def main(argv: list[str] | None = None) -> int:
    return ros_io.spin_node(lambda: WbcNode(), argv)      # starts the ticks' worker


if __name__ == "__main__":
    sys.exit(main())
