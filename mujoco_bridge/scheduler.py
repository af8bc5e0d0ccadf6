"""The MuJoCo bridge's control flow without ROS: lockstep handshake, realtime pacing, watchdog, start-up.

:class:`BridgeScheduler` owns when the bridge steps the physics, with which torque, and when it
publishes; the ROS node (:mod:`mujoco_bridge.node`) only wires publishers, subscriptions and
parameters to it. Wall time comes from an injected clock (:class:`MonotonicClock`: ``monotonic()``,
``sleep(s)``, ``wait(cond, s)``), so the tests drive it with a virtual one.

Topics (conventions and array layouts: :mod:`legged_wbc.ros.io`)
--------------------------------------------------------------
Publishes:

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
* ``/bridge/diagnostics`` (Float64MultiArray, label ``bridge[<field names>]``, :data:`DIAG_FIELDS`)
  every ``diagnostics_period`` sim seconds: ``sim_time`` [s], ``tick``, ``commands_applied``,
  ``deadline_misses`` (realtime), ``stale_commands``, ``rejected_commands``, ``watchdog_active``
  (0/1), ``watchdog_events``, ``realtime_factor`` (sim s per wall s since the last sample),
  ``overruns`` (realtime: times the bridge dropped whole control periods from its schedule), and
  the window since the previous sample (:mod:`mujoco_bridge.timing`): ``window_ticks``,
  ``window_deadline_misses``, ``command_latency_p50_us`` / ``_p99_us`` / ``_max_us`` (command
  arrival minus the wall time the answered tick's sample was published);
* ``/bridge/command_latency`` (Float64MultiArray, label ``tick_and_command_latency_us[pairs]``),
  with every diagnostics sample: ``[tick, latency_us, tick, latency_us, ...]`` of each tick closed
  in the window (NaN latency: no command by the deadline), for whole-run statistics;
  also ``controller_waits``, ``commands_clamped`` (commands with a torque beyond a joint's effort
  limit: clamped to it by :meth:`mujoco_bridge.sim.MujocoSim.set_torque`, not rejected) and
  ``commands_foreign`` (commands of a publisher the bridge does not follow, never applied:
  :mod:`mujoco_bridge.command_source`).

The three ground-truth/disturbance topics are published every ``ground_truth_decimation`` physics
steps (default 2: 500 Hz, on the control ticks; 1 = every physics step), stamped like ``/joint_states``.
``/disturbance`` then holds the torque applied during the step that ended at its stamp.

Subscribes to ``/joint_torque_cmd`` (sensor_msgs/JointState): ``name`` = the joints (any order,
each once), ``effort`` = torques [N m], ``header.stamp`` = the sim time of the control tick the
command answers (see :mod:`legged_wbc.ros.io`). A command with unknown / missing / duplicate names,
an effort count that does not match, a non-finite torque or a stamp between ticks is rejected
(reason logged, ``rejected_commands`` counted) and never applied, and so is one from a publisher
other than the one the bridge follows (``command_source``). The latest accepted command is
applied with zero-order hold. ``command_timing: untimed`` (realtime mode only, as a hardware
interface would) ignores the stamps: every command is untimed and the newest one is applied. For
the real-time statistics an untimed command whose stamp is that of a sample the bridge published
(:meth:`BridgeScheduler.note_sample`, e.g. a controller with ``input_timing: sample``) answers that
sample: latency from its publication, counted for the tick whose period holds it.

``sample_stamps: wall`` (realtime + untimed only; hardware emulation): ``/joint_states`` and ``/imu``
are stamped with the ROS time at publication (wall clock), like a ros2_control robot; ``/clock``,
ground truth and ``/disturbance`` keep sim time (bag metrics align them by tick), and
``/estimator/support`` (disturbance gating) is mapped back to ticks through the noted stamps.

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
   ``endpoints.wait_for_matched_subscribers(node, [cmd_publisher])`` before answering tick 0, or the
   recorder can miss its first commands.
2. At tick ``k`` the bridge has published the samples stamped ``t_k`` and waits for a command whose
   ``tick == k`` (a controller reads ``k`` off the stamp with ``ros_io.tick_from_stamp``; samples
   between ticks have no tick and need no answer).
3. When it arrives, the bridge applies it (held constant) for ``control_period_steps`` physics steps,
   publishing the samples after each step (stamps ``t_k + 1 ms``, ``t_{k+1}``), and goes to step 2
   with ``k + 1``. Commands stamped before tick ``k`` are stale (counted, dropped); stamped after
   it, rejected.

Command delay (the scenario's ``command_delay_ticks`` ``N``, default 0): the command answering tick
``k`` is still waited for at tick ``k`` (the handshake is unchanged), but it drives the physics steps
of tick ``k + N`` (control period ``k + 1 + N``); the steps of tick ``k`` get tick ``k - N``'s command.
During the first ``N`` ticks, which no command reaches yet, the joints are damped as before the
first command (``-watchdog_damping * dq``, clipped). This is exactly the headless loop's behaviour
(:mod:`legged_wbc.closed_loop`), bit for bit. A tick whose command did not come (watchdog) is
damped at once, not ``N`` ticks later; ``commands_applied`` counts commands that drove the physics.

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
first command (or ``startup_timeout``): each step has a 1 ms slot. With ``early_intermediate_steps``
(default) a step whose sample falls between two control ticks runs as soon as the command it applies
has arrived (in the container: at once, the chain ran in this thread), without waiting for its slot;
it publishes only an intermediate sample, so the tick samples keep their slots, the deadlines their
schedule, and the sim is never more than one step ahead of the wall clock. That is one wake-up per
tick instead of two: on our VMs a loop that sleeps comes back to cold caches (the control thread's
CPU per tick fell from 1030-1072 to 800-948 us with one wake-up a tick, alternating A/B). The latest valid command is applied at every physics step
(commands with a tick older than the applied one are stale; with ``command_timing: untimed`` every
command is untimed and the newest applies).
Physics step ``s`` (sim time ``s`` ms, tick ``j = s // control_period_steps``) applies the newest
command that exists when the step runs and answers a tick ``<= j - N`` (``N``: the scenario's
``command_delay_ticks``, default 0; :class:`~mujoco_bridge.timing.CommandQueue`): a command answering
tick ``k`` may act from the first step of tick ``k + N`` (period ``k + 1 + N``), never earlier, and a
command never acts before the sim time of the tick it answers. An untimed command answers the tick
of the sample whose stamp it carries (:meth:`BridgeScheduler.note_sample`), else the tick of the
newest sample published when it arrived. Before any command may act (the first ``N`` ticks) the
joints are damped as before the first command.
The command answering tick ``k`` is due by the scheduled wall time of the step that starts tick
``k + 1 + N`` (for ``N = 0``: before the bridge starts the period after tick ``k``'s); when it has
not arrived by then, ``deadline_misses`` is incremented. The physics does not wait for the schedule
to judge a command, though: a step that runs behind its scheduled time (the machine is busy; in a
container the bridge's own thread computes the command) applies the newest command that is there
when it runs, so the torques are as fresh as the machine allows, while the deadline accounting
stays on the schedule (a command that came after its deadline is a miss even if a late step still
applied it). A tick step a whole control period or more behind its slot (a stall of the process) drops
those periods from the schedule (``overruns``) and counts each as a missed deadline: the ticks a robot's
controller would have lost; the simulated world waits instead of racing to catch up (which cost every
tick of the catch-up too), and the schedule keeps its phase. The closing log line and ``/bridge/diagnostics`` give the real-time factor (sim
seconds per wall second). With no valid command for ``watchdog_timeout`` SIM seconds the watchdog
applies joint damping until a command arrives.

The simulated world waits for a controller that fell behind (``max_command_age_ticks`` ``A``, default
2; -1 = never): a physics step of tick ``j`` that would apply a command answering a tick before
``j - N - A`` waits until a fresher one is there (``controller_waits``;
:meth:`BridgeScheduler._await_controller`). On an overloaded machine the simulation, which is not the
robot, would otherwise outrun its controller, and the robot would walk on torques many ticks old: a
fall that says nothing about the controller (2 of 9 runs at 0.3-0.5x real time on a 3x slowed
machine fell that way). A robot cannot wait;
the deadline accounting stays on the wall-clock schedule, so the misses and the real-time factor
still report the overload. The wait ends after ``watchdog_timeout`` wall seconds (a silent
controller: the simulation steps on, the watchdog damps) and is not repeated until a newer command arrives.

Live parameters (``legged-wbc param set /mujoco_bridge ...``) act from the next tick (realtime: the
next physics step): ``watchdog_timeout``, ``watchdog_damping``, ``startup_timeout``,
``republish_period``, ``realtime_factor`` (the schedule continues from the current step at the new
rate, no jump), ``max_command_age_ticks``, ``duration``, ``diagnostics_period``, ``progress_period``, ``ground_truth_decimation``.

Disturbance hook, initial state and sensor noise: :mod:`mujoco_bridge.scenario_setup`.
``duration`` > 0: the run ends once that many sim seconds have been simulated.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from legged_wbc.conventions import PHYSICS_DT_NS, UNTIMED_TICK
from mujoco_bridge.timing import CommandDelayLine, CommandQueue, CommandTiming, window_stats

PHYSICS_DT = PHYSICS_DT_NS / 1e9      # one physics step [s] (the same double as 1e-3)

PEER_POLL_S = 0.01               # start-up: period of the subscriber check [wall s]
SUPPORT_KEPT = 50                # support estimates kept: at least the last this many ticks (offer_support)

DIAG_FIELDS = ("sim_time", "tick", "commands_applied", "deadline_misses", "stale_commands", "rejected_commands",
               "watchdog_active", "watchdog_events", "realtime_factor", "overruns", "window_ticks", "window_deadline_misses",
               "command_latency_p50_us", "command_latency_p99_us", "command_latency_max_us", "controller_waits",
               "commands_clamped", "commands_foreign")


class MonotonicClock:
    """The real clock: ``time.monotonic``, ``time.sleep`` and ``Condition.wait``."""

    monotonic = staticmethod(time.monotonic)
    sleep = staticmethod(time.sleep)

    @staticmethod
    def wait(cond: threading.Condition, timeout: float) -> None:
        cond.wait(timeout)


def damping_torque(dq: np.ndarray, damping: float, effort_limit: np.ndarray) -> np.ndarray:
    """The watchdog's joint damping ``-damping * dq``, clipped to the effort limits [N m]."""
    return np.clip(-float(damping) * dq, -effort_limit, effort_limit)


@dataclass
class BridgePorts:
    """What the scheduler calls on the node side (the bridge node builds one from its bound methods;
    tests pass their own):

    * ``physics_step(tau, step)``: one 1 ms physics step with the torque ``tau`` [N m] (``step`` =
      physics steps taken before it);
    * ``publish_sample(step)``: publish the state after ``step`` physics steps (stamp ``step`` ms);
    * ``joint_velocities()``: for the watchdog's damping;
    * ``peers_missing() -> str | None``: None once the subscribers needed at start-up are there, else
      what is missing (for the log); ``settle_peers()``: called once they are;
    * ``poll_inputs()`` or None (realtime): deliver the inputs waiting for this thread (a host link
      read by the bridge's own thread; they reach :meth:`BridgeScheduler.offer_command` with their
      send time); ``wait_inputs(timeout)`` or None: block at most ``timeout`` wall seconds until
      there are some (the same transport's readiness)."""

    physics_step: Callable[[np.ndarray, int], None] | None
    publish_sample: Callable[[int], None]
    joint_velocities: Callable[[], np.ndarray]
    peers_missing: Callable[[], str | None]
    settle_peers: Callable[[], None]
    poll_inputs: Callable[[], None] | None = None
    wait_inputs: Callable[[float], None] | None = None


class BridgeScheduler:
    """The bridge's control flow (see the module docstring).

    ``cfg``: any object with the attributes ``duration``, ``watchdog_timeout``, ``watchdog_damping``,
    ``startup_timeout``, ``republish_period``, ``realtime_factor``, ``diagnostics_period`` and
    ``progress_period`` (the bridge's config); replace :attr:`cfg` to change them live (read at every
    tick / step). ``ports``: the node side, a :class:`BridgePorts` (or anything with its attributes).

    Commands (``.tick``, ``.tau``) come from any thread through :meth:`offer_command`, the estimated
    support sets through :meth:`offer_support`. All shared state is guarded by :attr:`cond` (an
    ``RLock`` condition: a command may arrive inside ``publish_sample``, in the same thread).
    """

    def __init__(self, cfg, ports, *, lockstep: bool, steps_per_tick: int, effort_limit, log,
                 clock=None, wait_for_support: bool = False, command_delay_ticks: int = 0):
        self.cfg = cfg
        self.ports = ports
        self.lockstep = bool(lockstep)
        self.steps_per_tick = int(steps_per_tick)
        self.effort_limit = np.asarray(effort_limit, dtype=float)
        self.log = log
        self.clock = clock or MonotonicClock()
        self.wait_for_support = wait_for_support   # lockstep: also wait for the tick's support estimate
        self.cond = threading.Condition()
        self.timing = CommandTiming()       # command latency / deadlines per tick (wall clock)
        self._stamp_steps: dict[int, tuple[int, float]] = {}   # untimed: sample stamp [ns] -> (step, wall)
        # the scenario's command_delay_ticks N: the command answering tick k acts from period k + 1 + N
        self.command_delay_ticks = int(command_delay_ticks)
        self.command_delay = CommandDelayLine(self.command_delay_ticks)   # lockstep
        self.cmd_queue = CommandQueue(64 + 4 * self.command_delay_ticks)  # realtime: commands in arrival order
        self.step_count = 0                 # physics steps since reset; sim time = step_count * 1 ms
        self.tick = 0                       # current control tick (lockstep: the one we wait a command for)
        self.tau = None                     # the torque of the last applied command
        self.counters = dict(commands_applied=0, deadline_misses=0, stale_commands=0, rejected_commands=0,
                             watchdog_events=0, overruns=0, controller_waits=0, commands_clamped=0,
                             commands_foreign=0)
        self.watchdog_active = False
        self.stop_requested = False
        self.got_first_command = False
        self.diag_next_ns = 0               # sim time of the next /bridge/diagnostics sample [ns]
        self._pending = None                # lockstep: accepted command for self.tick
        self._latest = None                 # realtime: newest accepted command
        self._last_cmd_step = None          # realtime: step_count when the newest command arrived
        self._answered_step = -(1 << 62)    # realtime: the newest sample (physics steps) a command answers
        self._gave_up_at = None             # realtime: _answered_step when a wait for the controller ran out
        self._applied_cmd = None
        self._support: dict[int, np.ndarray] = {}
        self._reject_log: dict[str, tuple[float, int]] = {}
        self._diag_wall = (self.clock.monotonic(), 0)
        self._progress = None
        self._run_wall0 = None              # realtime: (wall, step) when stepping started

    @property
    def t_ns(self) -> int:
        return self.step_count * PHYSICS_DT_NS

    # ------------------------------------------------------------ inputs (any thread)
    def offer_command(self, cmd, arrived: float | None = None) -> bool:
        """Take a decoded command (``.tick``: the tick it answers or ``UNTIMED_TICK``; ``.tau``); True
        if accepted. Stale ones are counted and dropped, future ones (lockstep) rejected. ``arrived``:
        when it was there [s, the clock's], if earlier than now (taken from a transport that is read
        later, :meth:`run_realtime`'s ``poll_inputs``)."""
        now = self.clock.monotonic() if arrived is None else arrived
        with self.cond:
            answers = cmd.tick              # the tick it answers (realtime: for the command delay)
            if cmd.tick != UNTIMED_TICK:
                self.timing.command_arrived(cmd.tick, now)
                sample_step = cmd.tick * self.steps_per_tick
            else:                           # untimed: the sample it answers, if its stamp is one we published
                answered = self._stamp_steps.get(cmd.stamp_ns)
                if answered is not None:
                    sample_step = answered[0]
                    answers = sample_step // self.steps_per_tick
                    self.timing.answer_arrived(answers, answered[1], now)
                else:                       # at most the tick of the newest sample
                    sample_step = self.step_count
                    answers = sample_step // self.steps_per_tick
            if self.lockstep:
                if cmd.tick < self.tick:
                    self.counters["stale_commands"] += 1
                    return False
                if cmd.tick > self.tick:
                    self.reject(f"command for tick {cmd.tick} arrived while the bridge is at tick {self.tick}",
                                kind="future")
                    return False
                self._pending = cmd
            else:
                last = self._latest
                if last is not None and cmd.tick != UNTIMED_TICK and cmd.tick < last.tick:
                    self.counters["stale_commands"] += 1
                    return False
                self._latest = cmd
                self._answered_step = max(self._answered_step, sample_step)
                self.cmd_queue.push(answers, cmd)
                self._last_cmd_step = self.step_count
            self.cond.notify_all()
        return True

    def note_sample(self, stamp_ns: int, step: int) -> None:
        """The sample after ``step`` physics steps goes out stamped ``stamp_ns`` (call it before
        publishing). With ``command_timing: untimed`` a command carrying that stamp answers it: its
        latency runs from this publication, and it counts for the tick ``step // steps_per_tick``
        (due when the next period starts). Keeps the last 512 samples."""
        d = self._stamp_steps
        d[int(stamp_ns)] = (int(step), self.clock.monotonic())
        if len(d) > 512:
            del d[next(iter(d))]

    def tick_of_stamp(self, stamp_ns: int) -> int | None:
        """The tick whose period holds the sample stamped ``stamp_ns`` (one of the last 512 noted)."""
        answered = self._stamp_steps.get(stamp_ns)
        return None if answered is None else answered[0] // self.steps_per_tick

    def reject(self, reason: str, kind: str | None = None) -> None:
        """Count and log a rejected command; each kind of reason is logged at most once per wall second."""
        with self.cond:
            self.counters["rejected_commands"] += 1
            kind = kind or reason.split(" ")[0]
            now = self.clock.monotonic()
            last, suppressed = self._reject_log.get(kind, (-1e9, 0))
            if now - last >= 1.0:
                self._reject_log[kind] = (now, 0)
            else:
                self._reject_log[kind] = (last, suppressed + 1)
                return
        more = f" ({suppressed} more like it suppressed)" if suppressed else ""
        self.log.warning(f"torque command rejected: {reason}{more}")

    def offer_support(self, tick: int, flags: np.ndarray) -> None:
        """The estimator's support set of ``tick`` (bool per leg), for the disturbance gating."""
        with self.cond:
            self._support[tick] = flags
            if len(self._support) > 2 * SUPPORT_KEPT:   # pruned now and then, not every tick
                for old in [t for t in self._support if t < tick - SUPPORT_KEPT]:
                    del self._support[old]
            self.cond.notify_all()

    def support_estimate(self, tick: int):
        """The estimated support flags of ``tick`` (or the newest older one); None if none yet."""
        with self.cond:
            if tick in self._support:
                return self._support[tick]
            older = [t for t in self._support if t <= tick]
            return self._support[max(older)] if older else None

    def request_stop(self) -> None:
        with self.cond:
            self.stop_requested = True
            self.cond.notify_all()

    # ------------------------------------------------------------ run
    def done(self) -> bool:
        dur = self.cfg.duration
        return self.stop_requested or (dur > 0 and self.step_count * PHYSICS_DT_NS >= int(round(dur * 1e9)))

    def run(self) -> bool:
        """Start-up, then lockstep or realtime stepping until ``duration`` or :meth:`request_stop`;
        False if stopped before tick 0 was published."""
        self.wait_for_peers()
        if self.stop_requested:
            return False
        if self.command_delay_ticks:
            n = self.command_delay_ticks
            self.log.info(f"command delay {n} ticks: the command answering tick k acts from tick k + {n}")
        self._publish()  # the tick-0 sample
        if self.lockstep:
            self.run_lockstep()
        else:
            self.run_realtime()
        return True

    def _publish(self) -> None:
        if self.step_count % self.steps_per_tick == 0:
            # before publishing: in a container the answer arrives inside publish_sample()
            self.timing.sample_published(self.step_count // self.steps_per_tick, self.clock.monotonic())
        self.ports.publish_sample(self.step_count)

    def damping_torque(self) -> np.ndarray:
        return damping_torque(self.ports.joint_velocities(), self.cfg.watchdog_damping, self.effort_limit)

    def wait_for_peers(self) -> bool:
        """Wait (at most ``startup_timeout`` wall s; 0 = forever) until ``ports.peers_missing()`` is None."""
        clock = self.clock
        timeout = float(self.cfg.startup_timeout)
        t0 = clock.monotonic()
        logged = False
        while not self.stop_requested:
            missing = self.ports.peers_missing()
            if missing is None:
                self.ports.settle_peers()
                return True
            waited = clock.monotonic() - t0
            if timeout and waited > timeout:
                self.log.error(f"start-up: {missing} after {timeout:g} s; starting anyway")
                return False
            if not logged and waited > 2.0:
                self.log.info(f"start-up: waiting for subscribers and a command publisher ({missing})")
                logged = True
            clock.sleep(PEER_POLL_S)
        return False

    def _engage_watchdog(self, why: str) -> None:
        if not self.watchdog_active:
            self.watchdog_active = True
            self.counters["watchdog_events"] += 1
            self.log.error(f"watchdog: {why}; applying joint damping {self.cfg.watchdog_damping:g} N m s/rad")

    def _leave_watchdog(self, how: str) -> None:
        if self.watchdog_active:
            self.watchdog_active = False
            self.log.warning(f"watchdog released: {how}")

    def _republish_tick0(self, what: str) -> None:
        """Re-publish the tick-0 sample (the lock is held by the caller and released meanwhile)."""
        self.cond.release()
        try:
            self.log.info(f"{what}: re-publishing the tick-0 sample")
            self._publish()
        finally:
            self.cond.acquire()

    # ------------------------------------------------------------ lockstep
    def wait_command_lockstep(self):
        """The torque for the current tick, or None (watchdog damping) — see the module docstring."""
        k = self.tick
        startup = not self.got_first_command
        cfg = self.cfg
        timeout = float(cfg.startup_timeout if startup else cfg.watchdog_timeout)
        period = self.steps_per_tick * PHYSICS_DT
        monotonic, wait = self.clock.monotonic, self.clock.wait
        t0 = monotonic()
        next_republish = t0 + float(cfg.republish_period)
        cond = self.cond
        with cond:
            while True:
                cmd = self._pending
                if cmd is not None and cmd.tick == k and (
                        not self.wait_for_support or k in self._support or self.watchdog_active
                        or (monotonic() - t0) > timeout):
                    self._pending = None
                    self.got_first_command = True
                    self._leave_watchdog(f"command for tick {k} received, lockstep resumed")
                    return cmd.tau
                if self.stop_requested:
                    return None
                now = monotonic()
                if self.watchdog_active:
                    if now - t0 >= period:
                        return None
                    wait(cond, t0 + period - now)
                    continue
                if timeout and now - t0 >= timeout:
                    self._engage_watchdog(f"no command for tick {k} (t = {self.t_ns * 1e-9:.3f} s) within "
                                          f"{timeout:g} s wall")
                    return None
                if startup and k == 0 and now >= next_republish:
                    self._republish_tick0("no command for tick 0 yet")
                    next_republish = now + float(self.cfg.republish_period)
                deadline = min(next_republish if (startup and k == 0) else math.inf,
                               (t0 + timeout) if timeout else math.inf)
                wait(cond, max(0.0, min(deadline - now, 0.5)))

    def run_lockstep(self) -> None:
        spt = self.steps_per_tick
        physics_step, publish = self.ports.physics_step, self._publish
        while not self.done():
            tau = self.wait_command_lockstep()
            if self.stop_requested:
                break
            if tau is not None:
                with self.cond:
                    self.timing.close_tick(self.tick)      # latency only: lockstep has no deadline
            delayed = self.command_delay.push(tau)         # tick - N's command (N = 0: tau itself)
            tau = None if tau is None else delayed         # the watchdog damps at once, undelayed
            if tau is not None:
                self.counters["commands_applied"] += 1
                self.tau = tau
            for i in range(spt):
                physics_step(self.damping_torque() if tau is None else tau, self.step_count)
                self.step_count += 1
                if i == spt - 1:
                    with self.cond:
                        self.tick += 1
                        if self._pending is not None and self._pending.tick < self.tick:
                            self._pending = None
                publish()

    # ------------------------------------------------------------ realtime
    def wait_first_command_realtime(self) -> None:
        """Until the first command (or ``startup_timeout``: watchdog), re-publishing tick 0."""
        monotonic, wait = self.clock.monotonic, self.clock.wait
        startup = float(self.cfg.startup_timeout)
        t0 = monotonic()
        next_republish = t0 + float(self.cfg.republish_period)
        cond = self.cond
        poll = getattr(self.ports, "poll_inputs", None)     # inputs this thread reads itself: look every 1 ms
        with cond:
            while self._latest is None and not self.stop_requested:
                if poll is not None:
                    poll()
                    if self._latest is not None:
                        break
                now = monotonic()
                left = (t0 + startup - now) if startup else 0.5
                if startup and left <= 0:
                    self._engage_watchdog(f"no command within the start-up timeout of {startup:g} s")
                    break
                if now >= next_republish:  # a late subscriber may have missed the tick-0 sample
                    self._republish_tick0("no command yet")
                    next_republish = now + float(self.cfg.republish_period)
                wait(cond, min(max(left, 0.0), 0.5 if poll is None else 0.001, max(next_republish - now, 0.0)))

    def run_realtime(self) -> None:
        """Realtime stepping (see the module docstring): after the first command, one physics step
        per pass at its wall-clock slot (or earlier, an intermediate step whose command is there;
        later, a tick step whole periods behind: :meth:`_overrun`), with the command due for it
        (:meth:`_due_torque`), then its sample published. A new ``realtime_factor`` re-anchors the
        schedule at the current step's slot (:meth:`_reanchor`). At 1 kHz: the rare cases are the
        methods; a common step makes one call more than the loop did in one piece (~0.1 us)."""
        self.wait_first_command_realtime()
        monotonic, sleep = self.clock.monotonic, self.clock.sleep
        physics_step, publish_sample, physics_dt = self.ports.physics_step, self.ports.publish_sample, PHYSICS_DT
        timing, spt, lag = self.timing, self.steps_per_tick, self.command_delay_ticks
        period = spt * physics_dt            # control period [sim s]
        wall0, step0 = monotonic(), self.step_count
        self._run_wall0 = (wall0, step0)
        rtf = float(self.cfg.realtime_factor)
        early = bool(self.cfg.early_intermediate_steps)
        poll = getattr(self.ports, "poll_inputs", None) or (lambda: None)
        while not self.done():
            poll()                           # inputs read by this thread (a host link), else nothing
            cfg = self.cfg
            step = self.step_count
            if cfg.realtime_factor != rtf:   # a new factor: the schedule goes on from this step's slot
                wall0, step0, rtf = self._reanchor(wall0, step0, rtf, step, cfg.realtime_factor)
            target = wall0 + (step - step0) * physics_dt / rtf   # scheduled wall time of this step
            delay = target - monotonic()
            if delay > 0 and not (early and (step + 1) % spt and self._command_there(step, lag)):
                sleep(delay)
                poll()
            elif delay < -period / rtf and (step + 1) % spt == 0:   # whole periods behind at a tick
                shift = self._overrun(delay, rtf)
                wall0 += shift
                target += shift
            age = cfg.max_command_age_ticks
            if age >= 0 and self._answered_step < (step // spt - lag - age) * spt:
                self._await_controller(step, age, poll)   # overloaded: the world waits for its controller
            tau = self._due_torque(step, target, cfg)
            physics_step(self.damping_torque() if tau is None else tau, step)
            self.step_count = step + 1
            if (step + 1) % spt == 0:
                timing.sample_published((step + 1) // spt, monotonic())
            publish_sample(step + 1)

    @staticmethod
    def _reanchor(wall0: float, step0: int, rtf: float, step: int, new_rtf) -> tuple[float, int, float]:
        """Realtime, a new ``realtime_factor`` ``new_rtf``: the schedule (slot of step ``s``: ``wall0 +
        (s - step0) * 1 ms / rtf``) goes on from step ``step``'s slot at the new factor, no jump.
        Returns the new ``(wall0, step0, rtf)``."""
        return wall0 + (step - step0) * PHYSICS_DT / rtf, step, float(new_rtf)

    def _overrun(self, delay: float, rtf: float) -> float:
        """Realtime, a tick step ``-delay`` wall seconds behind its slot, a whole control period or
        more: those periods are dropped from the schedule and each counted as a missed deadline
        (``overruns`` + 1). Returns how much later [wall s] the schedule goes on."""
        period = self.steps_per_tick * PHYSICS_DT
        lost = int(-delay * rtf / period)
        self.counters["overruns"] += 1
        self.counters["deadline_misses"] += lost
        self.timing.stalled(lost)
        return lost * period / rtf

    def _await_controller(self, step: int, age: int, poll) -> None:
        """Realtime, ``max_command_age_ticks`` ``age`` >= 0: physics step ``step`` (tick ``j``) would
        apply a command answering a tick older than ``j - N - age``: the controller fell behind the
        simulation (an overloaded machine). A robot would run on; the simulated world waits instead
        (``controller_waits`` + 1; the real-time factor drops, the schedule's deadlines stay as they
        are), taking inputs (``poll``) until a fresh enough command is there. Nothing is waited for
        before the first command, under the watchdog, or again after a wait of ``watchdog_timeout``
        wall seconds ran out, until a newer command arrives (a silent controller: the simulation
        goes on and the sim-time watchdog damps)."""
        spt, lag = self.steps_per_tick, self.command_delay_ticks
        need = (step // spt - lag - age) * spt      # the oldest sample the applied command may answer
        monotonic, cond = self.clock.monotonic, self.cond
        wait_inputs = getattr(self.ports, "wait_inputs", None)
        with cond:
            if self._latest is None or self.watchdog_active or self._answered_step == self._gave_up_at:
                return
            self.counters["controller_waits"] += 1
        t0 = monotonic()
        while True:
            poll()
            with cond:
                if self._answered_step >= need or self.stop_requested:
                    return
                if monotonic() - t0 > float(self.cfg.watchdog_timeout):
                    self._gave_up_at = self._answered_step
                    break
                if wait_inputs is None:             # inputs come from other threads: they notify
                    self.clock.wait(cond, 0.001)
            if wait_inputs is not None:             # inputs this thread reads: until some are there
                wait_inputs(0.002)
        self.log.warning(f"no command fresh enough for t = {self.t_ns * 1e-9:.3f} s within "
                         f"{self.cfg.watchdog_timeout:g} s wall: stepping on without it")

    def _due_torque(self, step: int, target: float, cfg):
        """Realtime, physics step ``step`` (scheduled at wall time ``target``): at a tick, the deadline
        of the command answering tick ``tick - 1 - N`` is closed (a miss counted if it had not come);
        the newest command there is (now, even if this step runs behind its scheduled time) for a
        tick this step may answer, none after ``tick - N``. Returns its torque, or None (joint
        damping): no command yet, or none for ``watchdog_timeout`` sim seconds (the watchdog)."""
        spt, lag, counters = self.steps_per_tick, self.command_delay_ticks, self.counters
        tick = step // spt
        with self.cond:
            self.got_first_command = self._latest is not None
            if step % spt == 0 and self.got_first_command and tick > lag:
                # the command answering tick k is due when period k + 2 + N starts (from period
                # k + 1 + N on it is applied; from this one on the next tick's may be)
                if self.timing.close_tick(tick - 1 - lag, deadline=target):
                    counters["deadline_misses"] += 1
            cmd, last_step = self.cmd_queue.due(tick - lag), self._last_cmd_step
        self.tick = tick
        if cmd is None:
            return None
        wd = cfg.watchdog_timeout
        if (step - last_step) * PHYSICS_DT > wd:
            self._engage_watchdog(f"no command for {wd:g} s of sim time")
            return None
        self._leave_watchdog("commands resumed")
        if cmd is not self._applied_cmd:
            counters["commands_applied"] += 1
            self._applied_cmd = cmd
            self.tau = cmd.tau
        return cmd.tau

    def _command_there(self, step: int, lag: int) -> bool:
        """Realtime, ``early_intermediate_steps``: the step after ``step`` physics steps, which publishes
        a sample between ticks, may run before its slot once the command it applies has arrived: one
        that answers a sample published after the previous tick's sample (``N = lag`` ticks earlier
        with a command delay). It only publishes an intermediate sample, so the tick samples keep their
        slots and the deadlines their schedule.

        For commands that answer ticks this is "the command answering this period's tick is there".
        A controller that answers the samples *between* ticks (``input_timing: sample`` on hardware
        stamps may lock onto either phase of a 1 kHz source) answered the previous intermediate sample,
        and waits for the one this step publishes: nothing newer can come before the slot, so the step
        runs at once and that controller gets the same 2 ms to the deadline as one on the tick phase
        (waiting for the slot left it 1 ms: 3-15 % misses in the sample-mode realtime test)."""
        spt = self.steps_per_tick
        first_after_previous_tick = (step // spt - lag) * spt - spt + 1
        with self.cond:
            return self._latest is not None and self._answered_step >= first_after_previous_tick

    # ------------------------------------------------------------ diagnostics
    def diagnostics(self) -> tuple[dict, list[int], list[float], str | None]:
        """``(fields, ticks, latencies_us, progress_line)``: the ``/bridge/diagnostics`` values in
        :data:`DIAG_FIELDS` order, the window's per-tick latencies, and the progress log line when
        ``progress_period`` wall seconds have passed since the last one (else None). Schedules the
        next sample ``diagnostics_period`` sim seconds later. :meth:`diagnostics_snapshot` then
        :meth:`finish_diagnostics`, in one go."""
        return self.finish_diagnostics(self.diagnostics_snapshot())

    def diagnostics_snapshot(self) -> tuple:
        """The state a diagnostics sample reports, copied as it is now (the physics thread: no arithmetic
        beyond the real-time factor, ~20 us); :meth:`finish_diagnostics` turns it into the sample,
        in any thread. Schedules the next sample ``diagnostics_period`` sim seconds later."""
        now = self.clock.monotonic()
        w0, s0 = self._diag_wall
        rtf = ((self.step_count - s0) * PHYSICS_DT) / (now - w0) if now > w0 and self.step_count > s0 else 0.0
        self._diag_wall = (now, self.step_count)
        with self.cond:
            raw = self.timing.take_window_raw()
        state = {"sim_time": self.t_ns * 1e-9, "tick": float(self.tick), **self.counters,
                 "watchdog_active": float(self.watchdog_active), "realtime_factor": rtf}
        self.diag_next_ns = self.t_ns + int(round(self.cfg.diagnostics_period * 1e9))
        return now, state, raw, self.step_count

    def finish_diagnostics(self, snapshot: tuple) -> tuple[dict, list[int], list[float], str | None]:
        """:meth:`diagnostics`' result from a :meth:`diagnostics_snapshot` (call them in snapshot order)."""
        now, state, (ticks, latency, missed), step_count = snapshot
        window = window_stats(ticks, latency, missed)
        d = {**{k: float(v) for k, v in state.items()}, **window}
        return {k: d[k] for k in DIAG_FIELDS}, ticks, latency, self._progress_line(now, window, state, step_count)

    def _progress_line(self, now: float, window: dict, state: dict, step_count: int) -> str | None:
        """One line every ``progress_period`` wall seconds, so a long run is never silent (``state``: a
        :meth:`diagnostics_snapshot`'s)."""
        cfg = self.cfg
        period = float(cfg.progress_period)
        if period <= 0:
            return None
        if self._progress is None:
            self._progress = (now, step_count)
            return None
        w0, s0 = self._progress
        if now - w0 < period:
            return None
        self._progress = (now, step_count)
        dur = float(cfg.duration)
        rtf = (step_count - s0) * PHYSICS_DT / (now - w0)
        lat, t = window.get("command_latency_p99_us"), state["sim_time"]
        if lat != lat:
            return f"t = {t:.1f} s sim, {rtf:.2f}x real time, no command in the last window"
        return (f"t = {t:.1f}{f' / {dur:g}' if dur > 0 else ''} s sim, {rtf:.2f}x real time, "
                f"{state['commands_applied']} commands applied, {state['deadline_misses']} deadline "
                f"misses, command latency p99 {lat:.0f} us (last {cfg.diagnostics_period:g} s)")

    def summary(self) -> str:
        """The closing log line (realtime: also deadline misses, overruns and the real-time factor of
        the whole run, sim seconds per wall second since the first step)."""
        c = self.counters
        if self.stop_requested:
            line = f"stopped at t = {self.t_ns * 1e-9:.3f} s"
        else:
            line = (f"duration reached: t = {self.t_ns * 1e-9:.3f} s, {c['commands_applied']} commands "
                    f"applied, {c['watchdog_events']} watchdog events")
        if not self.lockstep and self._run_wall0 is not None:
            wall0, step0 = self._run_wall0
            wall = self.clock.monotonic() - wall0
            rtf = f"{(self.step_count - step0) * PHYSICS_DT / wall:.2f}x" if wall > 0 else "n/a"
            line += (f"; realtime: {c['deadline_misses']} deadline misses, {c['overruns']} overruns, {rtf} real time"
                     + (f", {c['controller_waits']} waits for the controller" if c["controller_waits"] else "")
                     + (f", command delay {self.command_delay_ticks} ticks" if self.command_delay_ticks else ""))
        return line
