"""``state_estimator``: the state estimator as a ROS 2 node (500 Hz, one update per control tick).

A thin wrapper around :class:`state_estimator.estimator.StateEstimator` (the object the headless
loop runs). For each control tick ``k`` it waits for the ``/joint_states`` and ``/imu`` samples
stamped ``t_k = k * 2 ms`` (the 1 kHz samples in between are not used, as in the headless loop),
updates, and publishes with the same stamp:

* ``/estimator/odom`` (nav_msgs/Odometry): estimated base pose in ``odom`` (REP 105: the estimator's
  frame, the world at t = 0), twist in the base frame (``/tf`` etc.: :mod:`legged_wbc.ros.nodekit.tf_publisher`);
* ``/estimator/support`` (sensor_msgs/JointState-shaped, ``name`` = legs, then
  ``support_plane_normal_{x,y,z}``): per leg ``position`` = support set S_c (1/0, the controller's
  contact mask), ``velocity`` = touchdown detected (1/0), ``effort`` = touchdown score [N m/s]; the
  three entries after the legs: ``position`` = the estimated support-plane normal (world frame,
  unit; :mod:`state_estimator.support_plane`), ``velocity`` of the first = the number of late legs
  (their swing-down extended), else 0;
* ``/estimator/tau_ext`` (JointState-shaped, ``name`` = joints): ``effort`` = estimated external
  joint torque [N m] ("opposes the motor", see :mod:`state_estimator.touchdown`);
* ``/estimator/diagnostics`` (Float64MultiArray, label ``estimator[<fields>]``): per leg, in robot
  leg order, blocks of ``vel_d2`` (squared Mahalanobis distance), ``vel_inflation``, ``vel_excluded``
  (1/0), ``vel_used`` (1/0), then ``height_raw`` [m] and ``skipped_ticks`` (see below).

Falling behind (own process): updates run on the newest complete tick, the stale ones are skipped
and counted (``skipped_ticks``, closing log line; :class:`legged_wbc.ros.io.NewestTickRunner`).

``input_timing: sample`` (hardware stamps, off the grid; :class:`legged_wbc.ros.io.SampleTicks`): a
``/joint_states`` sample due by a 2 ms schedule (+-0.5 ms) is a tick, paired with the newest
``/imu`` (rejected if that is more than 20 ms older; at start-up the first tick waits for the first
``/imu``); the outputs carry the joint state's stamp and ``t = stamp - first tick's stamp``. The
filters integrate over the measured intervals between ticks (``StateEstimator`` scales the process
noise with ``dt / 2 ms``): a late sample is predicted over the time that really passed, where a fixed
2 ms step would under-integrate the IMU and the joint dynamics.

Bad samples (NaN, wrong length, unknown joint names, time not increasing) are rejected and logged;
the filter state is untouched and that tick gets no output (the controller then sends no command
and the bridge's watchdog acts). Parameters: the fields of
:class:`state_estimator.config.EstimatorNodeConfig` (``touchdown.*``, ``velocity.*``, ``height.*``:
validated, the live ones reach the filters at the next tick; ``robot``, ``scenario``, ``qos_depth``
and the initial standard deviations read-only). The scenario's estimator block is applied on top of
``config/estimator.yaml``. The gait is evaluated at the scenario's command schedule's gait clock, or the
controller's under a live ``/cmd_vel`` (``/wbc/gait_clock``, :mod:`legged_wbc.ros.nodekit.cmd_vel`).
"""

from __future__ import annotations

import sys

import numpy as np
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Imu, JointState

from legged_wbc.gait import GaitConfig, GaitScheduler
from legged_wbc.model import RobotModel
from legged_wbc.ros.nodekit import cmd_vel, diagnostics as ros_diagnostics, tf_publisher
from legged_wbc.ros.nodekit.params import NodeParameters
from legged_wbc.ros import io as ros_io
from legged_wbc.ros.transport import endpoints
from legged_wbc.ros.io import TickSync, adapters
from legged_wbc.scenario import load_scenario_on, node_overrides

from . import support_plane
from .config import EstimatorNodeConfig
from .estimator import StateEstimator

def scenario_overrides(cfg: EstimatorNodeConfig) -> dict:
    """The scenario's estimator block on top of the parameter file, as in the headless loop
    (:func:`legged_wbc.scenario.node_overrides`)."""
    return node_overrides(cfg.scenario, cfg.robot)

class EstimatorNode(ros_io.TickOutputs, Node):
    def __init__(self, **kw):
        super().__init__("state_estimator", **kw)
        self.params = NodeParameters(self, EstimatorNodeConfig, on_change=self._on_config,
                                     startup=scenario_overrides)
        cfg = self.params.config
        self.rm = RobotModel(cfg.robot)
        sc = load_scenario_on(cfg.scenario, cfg.robot) if cfg.scenario not in ("", "none") else None
        gait = GaitConfig.from_dict(sc.gait_dict(self.rm.cfg.gait) if sc else self.rm.cfg.gait)
        self.est = StateEstimator(self.rm, GaitScheduler(gait, self.rm.cfg.leg_names), cfg.estimator)
        self.est.reset(self.rm.stance_configuration(sc.initial_height if sc else None))
        self._new_cfg = self._cfg_applied = None   # written by the parameter callback only
        self.joint_names = list(self.rm.joint_names)
        self.leg_names = list(self.rm.cfg.leg_names)
        self.leg_joint_flat = np.array(self.rm.leg_joints).reshape(-1)
        self.order = ros_io.JointOrder(self.joint_names, bounds=ros_io.joint_bounds(self.rm))
        self.base_frame = self.rm.cfg.base_link
        self.sync = TickSync(("js", "imu"))
        # input_timing: sample (hardware stamps): a joint state due by the 2 ms schedule is a tick
        self.samples = ros_io.SampleTicks() if cfg.input_timing == "sample" else None
        self._imu = self._held_js = None   # sample mode: newest (stamp, imu arrays); a tick waiting for one
        self._last_out: list = []   # messages of the last tick, re-sent if its inputs come again
        self.rejected = 0
        # a co-located controller chained to this estimator (ros.composition.chain_controller): it takes each
        # tick's estimate by a call (WbcNode.take_estimate) after the outputs are published, not by topics
        self.chained = None
        qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=cfg.qos_depth,
                         reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE)
        A = adapters
        grid = self.samples is None         # on the tick grid the samples between ticks are ignored: not sent
        endpoints.create_subscription(self, JointState, ros_io.TOPIC_JOINT_STATES, self._on_js, qos,
                                   adapter=A.JointStateAdapter, tick_samples_only=grid)
        endpoints.create_subscription(self, Imu, ros_io.TOPIC_IMU, self._on_imu, qos, adapter=A.ImuAdapter,
                                   tick_samples_only=grid)
        # the gait clock: the scenario's command schedule, or the controller's under a live /cmd_vel
        self.gait_clock = cmd_vel.GaitClockFollower(self, gait, sc, qos)
        legs, n = ",".join(self.leg_names), self.rm.n
        # /estimator/support: the legs, then the support-plane normal's entries
        self.support_names = self.leg_names + list(support_plane.ROS_NAMES)
        zeros_sup = np.zeros(len(self.support_names))
        self._zeros_n = np.zeros(n)
        # the messages of a tick, built once with their constant parts (values in, see ros.adapters)
        diag_label = (f"estimator[vel_d2({legs}),vel_inflation({legs}),vel_excluded({legs}),vel_used({legs}),"
                      "height_raw_m,skipped_ticks]")
        self.pub_odom, self.pub_support, self.pub_tau_ext, self.pub_diag = [
            endpoints.create_publisher(self, a.msg_type, topic, qos, adapter=a) for a, topic in (
                (A.OdometryAdapter(ros_io.odometry_msg(0, self.rm.stance_configuration(), np.zeros(6),
                                                       self.base_frame, frame_id=tf_publisher.ODOM_FRAME)),
                 ros_io.TOPIC_EST_ODOM),
                (A.JointStateAdapter(ros_io.joint_state_msg(0, self.support_names, zeros_sup, zeros_sup,
                                                            zeros_sup)), ros_io.TOPIC_EST_SUPPORT),
                (A.JointStateAdapter(ros_io.joint_state_msg(0, self.joint_names, np.zeros(n), np.zeros(n),
                                                            np.zeros(n))), ros_io.TOPIC_EST_TAU_EXT),
                (A.ArrayAdapter(ros_io.float64_array_msg(np.zeros(4 * len(self.leg_names) + 2), diag_label)),
                 ros_io.TOPIC_EST_DIAG))]
        self.ticks = ros_io.NewestTickRunner(self._run_tick, name="estimator_ticks")
        self.diag_timer = ros_diagnostics.attach(self)   # /diagnostics, 1 Hz in the executor thread
        self.tf_timer = tf_publisher.attach(self, cfg.tf_rate)   # /tf, /tf_static, /robot_description

    def _on_config(self, cfg: EstimatorNodeConfig, changed: list) -> None:
        self._new_cfg = cfg.estimator       # applied at the next tick (StateEstimator.set_config)

    def _on_js(self, msg: adapters.JointSample) -> None:
        if self.samples is not None:
            return self._on_js_sample(msg)
        tick = ros_io.tick_from_stamp(msg.stamp_ns)
        if tick is None:
            return
        status = self.sync.status(tick)
        if status != TickSync.NEW:
            return self._resend() if status == TickSync.REPEAT else None
        arrays = self._joint_arrays(msg)
        if arrays is not None:
            self._tick_ready(tick, self.sync.add(tick, "js", arrays))

    def _joint_arrays(self, msg):
        """The sample's (position, velocity, effort) in our joint order, or None (rejected, logged)."""
        try:
            arrays = self.order.arrays_of(msg.names, msg.position, msg.velocity, msg.effort)
        except ValueError as exc:
            return self._reject("joint state", str(exc))
        if not ros_io.all_finite(*arrays):
            return self._reject("joint state", "NaN/inf or missing fields")
        return arrays

    def _on_imu(self, msg: adapters.ImuSample) -> None:
        if self.samples is not None:
            return self._on_imu_sample(msg)
        tick = ros_io.tick_from_stamp(msg.stamp_ns)
        if tick is None or self.sync.status(tick) != TickSync.NEW:
            return
        arrays = msg[1:]
        if not ros_io.all_finite(*arrays):
            return self._reject("imu", "NaN/inf")
        self._tick_ready(tick, self.sync.add(tick, "imu", arrays))

    # ---------------------------------------------------- input_timing: sample
    def _on_js_sample(self, msg: adapters.JointSample) -> None:
        ns = msg.stamp_ns
        status = self.samples.status(ns)
        if status != ros_io.SampleTicks.NEW:
            return self._resend() if status == ros_io.SampleTicks.REPEAT else None
        arrays = self._joint_arrays(msg)
        if arrays is None:
            return
        if self._imu is None:           # start-up: the first tick runs with the first /imu
            self._held_js = (ns, arrays)
            return
        self._sample_tick(ns, arrays)

    def _on_imu_sample(self, msg: adapters.ImuSample) -> None:
        ns = msg.stamp_ns
        if self._imu is not None and ns < self._imu[0]:
            return                      # out of order: keep the newest
        arrays = msg[1:]
        if not ros_io.all_finite(*arrays):
            return self._reject("imu", "NaN/inf")
        self._imu = (ns, arrays)
        held, self._held_js = self._held_js, None
        if held is not None:
            self._sample_tick(*held)

    def _sample_tick(self, ns: int, js) -> None:
        imu_ns, imu = self._imu
        if ns - imu_ns > ros_io.IMU_MAX_AGE_NS:
            return self._reject("sample", f"the newest /imu is {(ns - imu_ns) * 1e-6:.1f} ms older than the "
                                f"joint state (at most {ros_io.IMU_MAX_AGE_NS * 1e-6:g} ms)")
        self.samples.take(ns)
        self._tick_ready(None, {"js": js, "imu": imu}, ns, self.samples.t(ns))

    def _tick_ready(self, tick: int | None, d: dict | None, stamp: int | None = None, t: float | None = None) -> None:
        if d is not None:               # else the tick still lacks an input
            self.ticks.submit(tick, d, stamp, t)

    def _run_tick(self, tick: int | None, d: dict, stamp: int | None = None, t: float | None = None) -> None:
        """One update of ``tick``; in sample mode (``tick`` None) ``stamp`` [ns] and ``t`` [s]."""
        cfg = self._new_cfg
        if cfg is not self._cfg_applied:
            self.est.set_config(cfg)
            self._cfg_applied = cfg
        pos, vel, eff = d["js"]
        quat, gyro, acc = d["imu"]
        t_ns = tick * ros_io.CONTROL_PERIOD_NS if stamp is None else stamp
        first = tick == 0 if stamp is None else not self._last_out
        try:
            t = t_ns * 1e-9 if t is None else t
            e = self.est.update(t, pos, vel, eff, quat, gyro, acc, gait_clock=self.gait_clock.clock(t, self.chained))
        except ValueError as exc:
            return self._reject("sample", str(exc))
        tau_ext = np.zeros(self.rm.n)
        tau_ext[self.leg_joint_flat] = e.tau_ext.reshape(-1)
        diag = np.concatenate([e.vel_d2, e.vel_inflation, e.vel_excluded.astype(float), e.vel_used.astype(float),
                               [e.height_raw, self.ticks.skipped]])
        z = self._zeros_n
        self._last_out = [
            (self.pub_diag, diag),
            (self.pub_tau_ext, adapters.JointSample(t_ns, self.joint_names, z, z, tau_ext)),
            (self.pub_support, adapters.JointSample(
                t_ns, self.support_names, np.concatenate((e.support.astype(float), e.support_normal)),
                np.concatenate((e.touchdown.astype(float), (float(e.late.sum()), 0.0, 0.0))),
                np.concatenate((np.asarray(e.td_score, dtype=float), (0.0, 0.0, 0.0))))),
            (self.pub_odom, adapters.OdomSample(t_ns, e.q[:7], e.v[:6]))]
        if first:                       # the first answer: wait until the subscribers are matched
            endpoints.wait_for_matched_subscribers(self, [p for p, _ in self._last_out], timeout=5.0)
        ros_io.TickOutputs._resend(self)
        if self.chained is not None:    # the values its four input topics would carry, in the same order
            self.chained.take_estimate(tick, pos, vel, e.q[:7], e.v[:6], e.support, e.support_normal, tau_ext)

    def _resend(self) -> None:
        """Answer a re-published tick again (start-up): this node's outputs, then the chained controller's."""
        super()._resend()
        if self.chained is not None:
            self.chained._resend()


def main(argv: list[str] | None = None) -> int:
    return ros_io.spin_node(lambda: EstimatorNode(), argv)      # starts the ticks' worker


if __name__ == "__main__":
    sys.exit(main())
