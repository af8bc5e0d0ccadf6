"""``/diagnostics`` (``diagnostic_msgs/DiagnosticArray``) of the stack's nodes: what ``rqt_runtime_monitor``,
``diagnostic_aggregator`` and Foxglove's diagnostics panels read.

Each node reports one status (:func:`attach`): a publisher on ``/diagnostics`` and a job every
:data:`PERIOD_S` wall seconds (1 Hz, ``diagnostic_updater``'s rate) in the process's background thread
(:mod:`legged_wbc.ros.nodekit.background`: no executor wake-up, nothing handed to the control thread). The job reads what the node keeps anyway (the scheduler's counters, the last diagnostics array
the node published, its rejection and skip counts), compares the counters with the previous report (the
*window*) and publishes: nothing runs in the control tick. The numeric topics ``/bridge/diagnostics``,
``/estimator/diagnostics`` and ``/wbc/diagnostics`` (what ``compare`` reads) are unchanged.

Levels (``DiagnosticStatus.level``), names ``<node>: <what>``, ``hardware_id`` = the robot:

* ``mujoco_bridge: command timing``: ERROR while the watchdog damps the joints (no command in time), and
  from an alarm on (two publishers of torque commands under the followed one's name,
  :mod:`mujoco_bridge.command_source`: its value ``command_source_alarm`` names both) to the end of the run;
  WARN for deadline misses, watchdog events, stale or rejected commands in the window, and in the report
  after the watchdog released; OK otherwise.
* ``state_estimator: inputs and gating``: WARN for rejected samples or skipped ticks in the window, and when
  no leg's kinematics was used at the last tick (velocity from the IMU alone); OK otherwise. The values
  name the legs used, the legs whose measurement the chi-square gate down-weighted (``vel_inflation`` > 1)
  and those in their post-touchdown exclusion window.
* ``wbc_controller: QP``: ERROR in safe stop (more than ``max_failures`` consecutive QP failures: zero
  torque, latched); WARN while holding the last accepted torque (consecutive failures), for QP failures,
  rejected inputs or skipped ticks in the window; OK otherwise. Its values also give the velocity command:
  its source (``scenario`` until a ``/cmd_vel`` message, then ``/cmd_vel``), the filtered command and the
  counts of clamped commands and rejected ``/cmd_vel`` messages.

Before a node's first tick its status is OK with the message ``waiting for the first tick``. The bridge
also reports once when its run ends (``report_diagnostics``), so a recording of even a short run holds its
final status.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from wbc_controller.diagnostics import DIAG_FIELDS
from legged_wbc.ros.nodekit import background
from legged_wbc.ros import io as ros_io
from legged_wbc.ros.transport import endpoints

PERIOD_S = 1.0
TOPIC = "/diagnostics"
OK, WARN, ERROR, STALE = 0, 1, 2, 3
LEVEL_NAMES = {OK: "OK", WARN: "WARN", ERROR: "ERROR", STALE: "STALE"}


@dataclass
class Status:
    """One ``DiagnosticStatus``: level, name, message, key-values (strings in the message)."""

    level: int
    name: str
    message: str
    values: dict = field(default_factory=dict)
    hardware_id: str = ""


class Window:
    """The counters at the previous report: :meth:`delta` = the increase since then (from 0 the first time)."""

    def __init__(self, clock=time.monotonic):
        self.prev: dict[str, float] = {}
        self.clock = clock
        self.t_prev = clock()

    def delta(self, key: str, value: float) -> float:
        d = value - self.prev.get(key, 0)
        self.prev[key] = value
        return d

    def elapsed(self) -> float:
        """Wall seconds since the previous call."""
        now = self.clock()
        dt, self.t_prev = now - self.t_prev, now
        return dt


def _join(parts: list[str], default: str) -> str:
    return "; ".join(parts) if parts else default


def bridge_status(sched, window: Window, hardware_id: str = "", alarm: str | None = None,
                  alarm_detail: str = "") -> Status:
    """``mujoco_bridge: command timing`` from the counters of the scheduler
    (:class:`mujoco_bridge.scheduler.BridgeScheduler`); ``alarm``: a second publisher under the name of the
    one whose torque commands the bridge follows (:mod:`mujoco_bridge.command_source`), ERROR for the run;
    ``alarm_detail``: the two, named (the value ``command_source_alarm``)."""
    c = dict(sched.counters)
    sim_t = sched.step_count * 1e-3
    wall = window.elapsed()
    d_sim = window.delta("sim_time", sim_t)
    d = {k: int(window.delta(k, c[k])) for k in ("deadline_misses", "watchdog_events", "stale_commands",
                                                 "rejected_commands", "commands_clamped", "commands_foreign",
                                                 "commands_applied") if k in c}
    watchdog = bool(sched.watchdog_active)
    was_damping = window.prev.get("watchdog_active", 0) > 0
    window.prev["watchdog_active"] = float(watchdog)
    values = {"sim_time_s": f"{sim_t:.3f}", "tick": str(int(sched.tick)),
              "realtime_factor": f"{d_sim / wall:.3f}" if wall > 0 else "nan",
              "watchdog_active": str(watchdog).lower(),
              **{k: str(int(c[k])) for k in ("commands_applied", "deadline_misses", "watchdog_events",
                                             "stale_commands", "rejected_commands", "commands_clamped",
                                             "commands_foreign", "overruns") if k in c},
              **{f"{k}_last_window": str(v) for k, v in d.items()}}
    if alarm:
        values["command_source_alarm"] = alarm_detail or alarm
    if watchdog or alarm:
        msg = _join([m for m in ("watchdog: damping the joints (no command in time)" if watchdog else "",
                                 f"torque commands: {alarm} (command_source_alarm names both)" if alarm else "")
                     if m], "")
        return Status(ERROR, "mujoco_bridge: command timing", msg, values, hardware_id)
    warn = [f"{v} {k.replace('_', ' ')}" for k, v in d.items() if v and k != "commands_applied"]
    if warn or was_damping:
        msg = (_join(warn, "") + " in the last window") if warn else ""
        msg = _join([m for m in (msg, "watchdog released (it was damping at the last report)" if was_damping else "")
                     if m], "")
        return Status(WARN, "mujoco_bridge: command timing", msg, values, hardware_id)
    idle = c.get("commands_applied", 0) == 0
    return Status(OK, "mujoco_bridge: command timing", "waiting for the first tick" if idle else "commands on time",
                  values, hardware_id)


def controller_status(diag: dict | None, max_failures: int, rejected: int, skipped: int, window: Window,
                      hardware_id: str = "") -> Status:
    """``wbc_controller: QP`` from the last ``/wbc/diagnostics`` values (``{field: value}``, None before
    the first tick) and the node's counts of rejected inputs and skipped ticks."""
    name = "wbc_controller: QP"
    d_rej, d_skip = int(window.delta("rejected", rejected)), int(window.delta("skipped", skipped))
    values = {"rejected_inputs": str(rejected), "skipped_ticks": str(skipped)}
    if diag is None:
        level = WARN if d_rej or d_skip else OK
        return Status(level, name, _join([f"{d_rej} inputs rejected"] if d_rej else [], "waiting for the first tick"),
                      values, hardware_id)
    total, consecutive = int(diag["total_failures"]), int(diag["consecutive_failures"])
    d_fail = int(window.delta("failures", total))
    values.update({"tick": str(int(diag["tick"])), "qp_accepted": str(bool(diag["qp_accepted"])).lower(),
                   "qp_time_us": f"{diag['qp_time_us']:.1f}", "qp_iterations": str(int(diag["qp_iterations"])),
                   "consecutive_failures": str(consecutive), "total_failures": str(total),
                   "failures_last_window": str(d_fail), "safe_stop": str(bool(diag["safe_stop"])).lower(),
                   "eq_residual": f"{diag['eq_residual']:.3g}", "ineq_violation": f"{diag['ineq_violation']:.3g}",
                   "body_error_roll_rad": f"{diag['err_roll']:.4g}",
                   "body_error_pitch_rad": f"{diag['err_pitch']:.4g}"})
    if "cmd_live" in diag:          # the velocity command (legged_wbc.ros.nodekit.cmd_vel)
        values.update({"cmd_source": "/cmd_vel" if diag["cmd_live"] else "scenario",
                       "cmd_vx_mps": f"{diag['cmd_vx']:.3f}", "cmd_vy_mps": f"{diag['cmd_vy']:.3f}",
                       "cmd_wz_radps": f"{diag['cmd_wz']:.3f}", "cmd_clamped": str(int(diag["cmd_clamped"])),
                       "cmd_rejected": str(int(diag["cmd_rejected"]))})
    if "gait_paused" in diag:
        values["gait_stopped"] = str(bool(diag["gait_paused"])).lower()
    if diag["safe_stop"]:
        return Status(ERROR, name, f"safe stop: more than {max_failures} consecutive QP failures (zero torque, "
                      "latched)", values, hardware_id)
    warn = []
    if consecutive:
        warn.append(f"holding the last accepted torque ({consecutive} consecutive QP failures)")
    if d_fail:
        warn.append(f"{d_fail} QP failures")
    if d_rej:
        warn.append(f"{d_rej} inputs rejected")
    if d_skip:
        warn.append(f"{d_skip} ticks skipped (fell behind)")
    return Status(WARN if warn else OK, name, _join(warn, "QP accepted"), values, hardware_id)


def estimator_status(diag, leg_names: list[str], rejected: int, skipped: int, window: Window,
                     hardware_id: str = "") -> Status:
    """``state_estimator: inputs and gating`` from the last ``/estimator/diagnostics`` array (blocks of
    ``vel_d2``, ``vel_inflation``, ``vel_excluded``, ``vel_used`` per leg, then ``height_raw``,
    ``skipped_ticks``; None before the first tick) and the node's count of rejected samples."""
    name = "state_estimator: inputs and gating"
    d_rej, d_skip = int(window.delta("rejected", rejected)), int(window.delta("skipped", skipped))
    values = {"rejected_inputs": str(rejected), "rejected_last_window": str(d_rej), "skipped_ticks": str(skipped)}
    warn = [f"{d_rej} samples rejected"] if d_rej else []
    if d_skip:
        warn.append(f"{d_skip} ticks skipped (fell behind)")
    if diag is None:
        return Status(WARN if warn else OK, name, _join(warn, "waiting for the first tick"), values, hardware_id)
    L = len(leg_names)
    a = np.asarray(diag, dtype=float)
    d2, inflation, excluded, used = a[:L], a[L:2 * L], a[2 * L:3 * L] > 0.5, a[3 * L:4 * L] > 0.5
    gated = [n for n, f, u in zip(leg_names, inflation, used) if u and f > 1.0]
    finite = d2[np.isfinite(d2)]
    values.update({"legs_used": ",".join(n for n, u in zip(leg_names, used) if u),
                   "legs_gated": ",".join(gated),
                   "legs_excluded_after_touchdown": ",".join(n for n, e in zip(leg_names, excluded) if e),
                   "max_mahalanobis_d2": f"{finite.max():.3g}" if finite.size else "nan",
                   "height_raw_m": f"{a[4 * L]:.4f}"})
    if not used.any():
        warn.append("no leg kinematics used at the last tick (velocity from the IMU alone)")
    msg = _join(warn, f"{int(used.sum())} legs used" + (f", {len(gated)} down-weighted by the gate" if gated else ""))
    return Status(WARN if warn else OK, name, msg, values, hardware_id)


# ------------------------------------------------------------------------------------ ROS side
def to_msg(statuses: list[Status], stamp_ns: int):
    """``diagnostic_msgs/DiagnosticArray`` of ``statuses`` stamped ``stamp_ns``."""
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

    from legged_wbc.ros.io import time_msg

    msg = DiagnosticArray()
    msg.header.stamp = time_msg(stamp_ns)
    for s in statuses:
        msg.status.append(DiagnosticStatus(level=bytes([s.level]), name=s.name, message=s.message,
                                           hardware_id=s.hardware_id,
                                           values=[KeyValue(key=k, value=str(v)) for k, v in s.values.items()]))
    return msg


def _last_published(node, pub):
    """The value ``node`` last published on ``pub`` in its tick (its ``_last_out`` list, replaced whole at
    every tick: read without a lock from another thread), or None."""
    for p, value in list(getattr(node, "_last_out", None) or ()):
        if p is pub:
            return value
    return None


def status_of(node, window: Window) -> Status:
    """The status of one of the stack's nodes, by its name."""
    name = node.get_name()
    if name == "mujoco_bridge":
        sources = getattr(node, "cmd_sources", None)
        return bridge_status(node.sched, window, node.robot.cfg.name, *((sources.alarm, sources.alarm_detail)
                                                                         if sources else ()))
    if name == "wbc_controller":
        vals = _last_published(node, node.pub_diag)
        diag = None if vals is None else dict(zip(DIAG_FIELDS, np.asarray(vals, dtype=float)))
        return controller_status(diag, node.cfg.max_failures, node.rejected, node.ticks.skipped, window,
                                 node.rm.cfg.name)
    if name == "state_estimator":
        return estimator_status(_last_published(node, node.pub_diag), node.leg_names, node.rejected,
                                node.ticks.skipped, window, node.rm.cfg.name)
    raise ValueError(f"no diagnostics for node {name}")


def attach(node):
    """``/diagnostics`` for ``node`` (the bridge, the estimator or the controller): a publisher and a job every
    :data:`PERIOD_S` in the process's background thread. Returns the job (``cancel()``)."""
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

    qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10, reliability=ReliabilityPolicy.RELIABLE,
                     durability=DurabilityPolicy.VOLATILE)
    pub = endpoints.create_publisher(node, DiagnosticArray, TOPIC, qos)   # in a container: the recorder in-process
    window = Window()
    log = node.get_logger()
    last = {"level": OK}

    def report():
        try:
            s = status_of(node, window)
        except Exception as exc:        # never take the node down for a report; say why
            s = Status(STALE, f"{node.get_name()}: diagnostics", f"status unavailable: {exc}")
        if s.level != last["level"] and s.level == ERROR:     # (rclpy: one severity per call site, or it raises)
            log.error(f"diagnostics: ERROR: {s.message}")
        elif s.level != last["level"] and s.level == WARN:
            log.warning(f"diagnostics: WARN: {s.message}")
        last["level"] = s.level
        background.publish(pub, to_msg([s], node.get_clock().now().nanoseconds))

    def report_now(timeout_s: float = 2.0) -> bool:
        """One report now, in the background thread (the run's final status: a short run may end before a
        subscriber that joined late saw a periodic one); False if it did not run within ``timeout_s``."""
        background.soon(report, f"{node.get_name()} /diagnostics (final)")
        return background.drain(timeout_s)

    node.diagnostics_publisher = pub
    node.report_diagnostics = report_now
    return background.for_node(node, PERIOD_S, report, name=f"{node.get_name()} /diagnostics")


class WindowPublisher:
    """The bridge's per-window diagnostics topics (``/bridge/diagnostics``, ``/bridge/command_latency``), built
    and published off the physics path in realtime: the physics thread only copies the window
    (:meth:`~mujoco_bridge.scheduler.BridgeScheduler.diagnostics_snapshot`, a list swap); the stats, the
    messages and their publication (the recorder's copies too) follow in the process's background thread
    (:func:`legged_wbc.ros.nodekit.background.soon`, the idea of ``realtime_tools::RealtimePublisher``). Inline they cost
    2-3 ms of CPU every 0.1 s on a slow machine and made the next tick late (``docs/realtime.md``, *Off the
    physics path*). Lockstep, and the last window of a run, stay inline."""

    def __init__(self, node, sched, pub_diag, pub_latency, off_path: bool):
        self.node, self.sched, self.pub_diag, self.pub_latency = node, sched, pub_diag, pub_latency
        self.off_path = off_path

    def publish(self, last: bool = False) -> None:
        """The window just closed (``last``: the run's final one, after every window handed off before it)."""
        if last:
            background.drain()
        snap = self.sched.diagnostics_snapshot()
        if self.off_path and not last:
            background.soon(lambda: self._publish(snap, background.publish), "bridge_diagnostics")
        else:
            self._publish(snap, lambda pub, msg: pub.publish(msg))

    def _publish(self, snap, publish) -> None:
        fields, ticks, latency, progress = self.sched.finish_diagnostics(snap)
        if progress:
            self.node.get_logger().info(progress)
        publish(self.pub_diag, ros_io.diagnostics_msg(fields))
        if ticks:
            publish(self.pub_latency, ros_io.command_latency_msg(ticks, latency))
