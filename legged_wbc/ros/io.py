"""ROS 2 message <-> numpy conversions: the one place where message conventions are handled.

Every node of the stack converts through these helpers, so the conventions below hold everywhere.

Topics (names relative to the node namespace; the launch file runs everything in ``/``):

================================  ==============================  ===========================================
topic                             type                            content
================================  ==============================  ===========================================
``/joint_states``                 sensor_msgs/JointState          1 kHz; ``name`` = ``RobotModel.joint_names``
                                                                  (Pinocchio order); position [rad], velocity
                                                                  [rad/s], effort = applied motor torque [N m]
``/imu``                          sensor_msgs/Imu                 1 kHz; orientation base->world, stored
                                                                  ``x, y, z, w`` (ROS); angular velocity [rad/s]
                                                                  and linear acceleration (specific force,
                                                                  [m/s^2]) in the base frame (``frame_id`` =
                                                                  base link; the IMU is aligned with it)
``/clock``                        rosgraph_msgs/Clock             sim time, every physics step (1 kHz)
``/joint_torque_cmd``             sensor_msgs/JointState          torque command: name, effort [N m],
                                                                  stamp = the tick it answers, see below
``/disturbance``                  std_msgs/Float64MultiArray      extra joint torque applied by the sim [N m],
                                                                  joint_states.name order
``/ground_truth/odom``            nav_msgs/Odometry               evaluation only: pose of the base in
                                                                  ``world``; twist in the BASE frame
                                                                  (``child_frame_id``, as ROS specifies for
                                                                  Odometry; = Pinocchio's ``v[0:6]``)
``/ground_truth/contacts``        std_msgs/Float64MultiArray      evaluation only: 1.0/0.0 foot-floor contact
                                                                  per leg, robot-config leg order
``/bridge/diagnostics``           std_msgs/Float64MultiArray      bridge counters, fields in the dim label
================================  ==============================  ===========================================

Array layouts: every ``Float64MultiArray`` published by the stack is one-dimensional,
``layout.dim = [MultiArrayDimension(label=LABEL, size=len(data), stride=len(data))]`` and
``data_offset = 0``. ``LABEL`` says what the values are, their unit and their order, e.g.
``disturbance_torque_Nm[joint_states.name order]`` or ``foot_contact_0or1[lf,lm,lh,rf,rm,rh]``.

Torque command (``/joint_torque_cmd``, :func:`torque_command_msg`): a ``sensor_msgs/JointState``
with ``name`` = the joints, ``effort`` = their torques [N m] (position and velocity NaN) and
``header.stamp`` = the sim time of the control tick it answers. Control tick ``k`` is sim time
``k * control_period`` (``control_period`` = 2 physics steps = 0.002 s); the sensor sample of tick
``k`` is the one stamped exactly ``k * control_period`` (:func:`tick_from_stamp`; the samples in
between, at 1 kHz, have no tick), and its command carries the same stamp. The bridge pairs commands
with ticks by that stamp and maps the joints by name (:class:`TorqueCommandDecoder`); a bridge with
``command_timing: untimed`` (realtime only) ignores the stamp and applies the newest command, as a
hardware interface would. A ros2_control robot takes the same efforts from the controller's
optional ``forward_command_topic`` (``std_msgs/Float64MultiArray`` in a ``joints`` order). See
:mod:`mujoco_bridge.scheduler` for the lockstep protocol.

Time stamps: integer nanoseconds of sim time (``/clock``); use :func:`stamp_ns` /
:func:`time_msg` to convert, never floats, so tick arithmetic is exact.

Hardware stamps (``input_timing: sample`` of the estimator and the controller; the bridge emulates
them with ``sample_stamps: wall``): a robot stamps ``/joint_states`` and ``/imu`` with its own clock,
off the tick grid. :class:`SampleTicks` then picks the ticks (a joint state due by a schedule
advancing ``CONTROL_PERIOD_NS`` per tick, +- ``SAMPLE_TICK_TOLERANCE_NS``), the nodes pair by stamp
(:class:`TickSync` keyed by nanoseconds) and the command carries the sample's stamp, which a bridge
with ``command_timing: untimed`` uses only to time the answer.

Start-up: DDS drops what a volatile publisher sends before a subscriber is *matched*, so a node
should call :func:`wait_for_matched_subscribers` on its publishers before its first message of a
run (the bridge does before tick 0; a controller should before answering tick 0), or the recorder
may miss the beginning of that topic.
"""

from __future__ import annotations

import array
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from legged_wbc.conventions import CONTROL_PERIOD_NS, PHYSICS_DT_NS, UNTIMED_TICK  # noqa: F401  (the stack's clock)

# ----------------------------------------------------------------------------- names and constants
TOPIC_JOINT_STATES = "joint_states"
TOPIC_IMU = "imu"
TOPIC_CLOCK = "/clock"
TOPIC_TORQUE_CMD = "joint_torque_cmd"
TOPIC_DISTURBANCE = "disturbance"
TOPIC_GT_ODOM = "ground_truth/odom"
TOPIC_GT_CONTACTS = "ground_truth/contacts"
TOPIC_BRIDGE_DIAGNOSTICS = "bridge/diagnostics"
TOPIC_EST_ODOM = "estimator/odom"         # state_estimator's outputs (see state_estimator/node.py)
TOPIC_EST_SUPPORT = "estimator/support"
TOPIC_EST_TAU_EXT = "estimator/tau_ext"
TOPIC_EST_DIAG = "estimator/diagnostics"
TOPIC_WBC_PITCH = "wbc/relative_pitch"    # wbc_controller's outputs (see wbc_controller/node.py)
TOPIC_WBC_DIAG = "wbc/diagnostics"
TOPIC_COMMAND_LATENCY = "bridge/command_latency"
COMMAND_LATENCY_LABEL = "tick_and_command_latency_us[pairs]"

WORLD_FRAME = "world"

JOINT_ORDER = "joint_states.name order"
DISTURBANCE_LABEL = f"disturbance_torque_Nm[{JOINT_ORDER}]"


def contacts_label(leg_names: Sequence[str]) -> str:
    return f"foot_contact_0or1[{','.join(leg_names)}]"


# ----------------------------------------------------------------------------- time
def time_msg(t_ns: int):
    """``builtin_interfaces/Time`` of an integer nanosecond time."""
    from builtin_interfaces.msg import Time

    t_ns = int(t_ns)
    return Time(sec=t_ns // 1_000_000_000, nanosec=t_ns % 1_000_000_000)


def stamp_ns(stamp) -> int:
    """Integer nanoseconds of a ``builtin_interfaces/Time`` (or of a message with a header)."""
    if hasattr(stamp, "header"):
        stamp = stamp.header.stamp
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def tick_from_stamp(stamp, control_period_ns: int = CONTROL_PERIOD_NS) -> int | None:
    """Control tick of a sensor sample stamped exactly on a tick, else ``None`` (an in-between sample)."""
    ns = stamp if isinstance(stamp, int) else stamp_ns(stamp)
    k, rem = divmod(ns, control_period_ns)
    return k if rem == 0 else None


def clock_msg(t_ns: int):
    from rosgraph_msgs.msg import Clock

    return Clock(clock=time_msg(t_ns))


def dvec(x) -> array.array:
    """A float64 ``array.array`` (what rclpy stores for ``float64[]`` fields; assigning one is fast)."""
    return array.array("d", np.ascontiguousarray(x, dtype=np.float64).tobytes())



# ----------------------------------------------------------------------------- JointState
def joint_state_msg(t_ns: int, names: Sequence[str], position, velocity, effort):
    from sensor_msgs.msg import JointState

    m = JointState()
    m.header.stamp = time_msg(t_ns)
    m.name = list(names)
    m.position = dvec(position)
    m.velocity = dvec(velocity)
    m.effort = dvec(effort)
    return m


def fill_joint_state(m, stamp, position=None, velocity=None, effort=None) -> None:
    """Refill a JointState built by :func:`joint_state_msg` (same names) in place; ``stamp`` is a Time,
    a field given as None keeps its values. Publishers reuse their messages this way (rclpy
    serializes in ``publish``; in-process subscribers have parsed theirs by the next refill)."""
    m.header.stamp = stamp
    if position is not None:
        m.position = dvec(position)
    if velocity is not None:
        m.velocity = dvec(velocity)
    if effort is not None:
        m.effort = dvec(effort)


# Corrupt-sample bounds. The simulation does not enforce joint limits (the controller's business), and
# WBC-0 legitimately spins a foot link ~200 rad (30 turns) past its range: the bounds catch garbage
# (a finite 1e6 rad passes a NaN check), not physics.
POSITION_MARGIN_RAD = 1000.0   # accepted excursion of a joint position beyond its URDF range [rad]
VELOCITY_FACTOR = 100.0        # accepted |velocity| in multiples of the URDF velocity limit


class JointOrder:
    """Reorders ``JointState`` arrays into a fixed joint order, by name (cached per name list).

    A message naming a joint twice is rejected (``ValueError``: which entry would count?). With
    ``bounds = (lower, upper, velocity_limit)`` (arrays in this order, [rad], [rad/s]) positions more
    than ``POSITION_MARGIN_RAD`` outside ``[lower, upper]`` and velocities above
    ``VELOCITY_FACTOR * velocity_limit`` are rejected too: no joint of the robot or the simulation
    reports them, so the sample is corrupt."""

    def __init__(self, joint_names: Sequence[str], bounds=None):
        self.joint_names = list(joint_names)
        self._cache: dict[tuple, np.ndarray] = {}
        self._last: tuple = (None, None, None)   # (names object, its copy, its index): the usual case
        self._bounds = None
        if bounds is not None:
            lo, hi, vmax = (np.asarray(b, dtype=float) for b in bounds)
            self._bounds = (lo - POSITION_MARGIN_RAD, hi + POSITION_MARGIN_RAD, VELOCITY_FACTOR * vmax)
            self._mid = 0.5 * (self._bounds[0] + self._bounds[1])
            self._half = 0.5 * (self._bounds[1] - self._bounds[0])

    def index(self, msg_names: Sequence[str]) -> np.ndarray:
        obj, copy, idx = self._last
        if msg_names is obj and msg_names == copy:   # the same list as last time (a publisher's names)
            return idx
        idx = self._index(msg_names)
        self._last = (msg_names, list(msg_names), idx)
        return idx

    def _index(self, msg_names: Sequence[str]) -> np.ndarray:
        key = tuple(msg_names)
        idx = self._cache.get(key)
        if idx is None:
            if len(set(key)) != len(key):
                dup = sorted({n for n in key if key.count(n) > 1})
                raise ValueError(f"JointState names {dup} more than once")
            pos = {n: k for k, n in enumerate(key)}
            missing = [n for n in self.joint_names if n not in pos]
            if missing:
                raise ValueError(f"JointState lacks joints {missing}")
            idx = np.array([pos[n] for n in self.joint_names], dtype=int)
            self._cache[key] = idx
        return idx

    def arrays(self, msg) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(position, velocity, effort)`` of a JointState in this order (empty fields -> NaN)."""
        return self.arrays_of(msg.name, msg.position, msg.velocity, msg.effort)

    def arrays_of(self, names, position, velocity, effort) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`arrays` of a JointState's fields (e.g. an adapted value, :mod:`legged_wbc.ros.adapters`)."""
        idx = self.index(names)
        n = len(names)
        out = []
        for field in (position, velocity, effort):
            a = np.asarray(field, dtype=float)
            out.append(a[idx] if len(a) == n else np.full(len(idx), np.nan))
        if self._bounds is not None:
            self._check_plausible(out[0], out[1])
        return out[0], out[1], out[2]

    def _check_plausible(self, pos: np.ndarray, vel: np.ndarray) -> None:
        lo, hi, vmax = self._bounds
        if (np.abs(pos - self._mid) <= self._half).all() and (np.abs(vel) <= vmax).all():
            return                          # the usual path, one pass per array
        pos, vel = np.nan_to_num(pos, nan=self._mid), np.nan_to_num(vel, nan=0.0)  # NaN: checked later
        bad_p = np.flatnonzero((pos < lo) | (pos > hi))
        bad_v = np.flatnonzero(np.abs(vel) > vmax)
        if bad_p.size:
            j = int(bad_p[0])
            raise ValueError(f"joint {self.joint_names[j]} position {pos[j]:.6g} rad is far outside its limits "
                             f"[{lo[j] + POSITION_MARGIN_RAD:g}, {hi[j] - POSITION_MARGIN_RAD:g}]")
        if bad_v.size:
            j = int(bad_v[0])
            raise ValueError(f"joint {self.joint_names[j]} velocity {vel[j]:.6g} rad/s exceeds "
                             f"{VELOCITY_FACTOR:g}x its limit {vmax[j] / VELOCITY_FACTOR:g} rad/s")


def joint_bounds(rm) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(lower, upper, velocity_limit)`` of a ``RobotModel``'s joints in its joint order (URDF limits)."""
    vel = np.zeros(rm.n)
    for idx in rm.leg_joints:
        vel[idx] = rm.cfg.leg_type.velocity
    return rm.lower, rm.upper, vel


# ----------------------------------------------------------------------------- Imu
def imu_msg(t_ns: int, frame_id: str, quat_xyzw, gyro, accel,
            gyro_var: float = 0.0, accel_var: float = 0.0):
    """IMU sample. Orientation base->world as ROS ``x, y, z, w``; covariance diagonal from variances
    (0 = unknown, as ROS specifies); orientation covariance left 0 (unknown)."""
    from sensor_msgs.msg import Imu

    m = Imu()
    m.header.frame_id = frame_id
    fill_imu(m, time_msg(t_ns), quat_xyzw, gyro, accel)
    if gyro_var > 0:
        m.angular_velocity_covariance = dvec(np.diag([gyro_var] * 3).ravel())
    if accel_var > 0:
        m.linear_acceleration_covariance = dvec(np.diag([accel_var] * 3).ravel())
    return m


def fill_imu(m, stamp, quat_xyzw, gyro, accel) -> None:
    """Refill an Imu built by :func:`imu_msg` in place (frame and covariances kept)."""
    m.header.stamp = stamp
    q = m.orientation
    q.x, q.y, q.z, q.w = (float(v) for v in quat_xyzw)
    w = m.angular_velocity
    w.x, w.y, w.z = (float(v) for v in gyro)
    a = m.linear_acceleration
    a.x, a.y, a.z = (float(v) for v in accel)


def imu_arrays(msg) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(quat_xyzw, gyro, accel)`` of an Imu message (quaternion in ``x, y, z, w`` order)."""
    q, w, a = msg.orientation, msg.angular_velocity, msg.linear_acceleration
    return (np.array([q.x, q.y, q.z, q.w]), np.array([w.x, w.y, w.z]), np.array([a.x, a.y, a.z]))


# ----------------------------------------------------------------------------- Odometry
def odometry_msg(t_ns: int, q: np.ndarray, v: np.ndarray, child_frame_id: str,
                 frame_id: str = WORLD_FRAME):
    """Base odometry from Pinocchio ``q`` (``[p_world, quat_xyzw, ...]``) and ``v``
    (``[v_base_in_base, w_base_in_base, ...]``): pose in ``frame_id``, twist in ``child_frame_id``
    (the base frame), which is ROS's Odometry convention and Pinocchio's free-flyer convention."""
    from nav_msgs.msg import Odometry

    m = Odometry()
    m.header.frame_id = frame_id
    m.child_frame_id = child_frame_id
    fill_odometry(m, time_msg(t_ns), q, v)
    return m


def fill_odometry(m, stamp, q: np.ndarray, v: np.ndarray) -> None:
    """Refill an Odometry built by :func:`odometry_msg` in place (frames kept)."""
    m.header.stamp = stamp
    p, o = m.pose.pose.position, m.pose.pose.orientation
    p.x, p.y, p.z = (float(x) for x in q[:3])
    o.x, o.y, o.z, o.w = (float(x) for x in q[3:7])
    lin, ang = m.twist.twist.linear, m.twist.twist.angular
    lin.x, lin.y, lin.z = (float(x) for x in v[:3])
    ang.x, ang.y, ang.z = (float(x) for x in v[3:6])


def odometry_arrays(msg) -> tuple[np.ndarray, np.ndarray]:
    """``(q_base, v_base)``: ``[p_world(3), quat_xyzw(4)]`` and ``[v_base(3), w_base(3)]`` (base frame)."""
    p, o = msg.pose.pose.position, msg.pose.pose.orientation
    lin, ang = msg.twist.twist.linear, msg.twist.twist.angular
    return (np.array([p.x, p.y, p.z, o.x, o.y, o.z, o.w]),
            np.array([lin.x, lin.y, lin.z, ang.x, ang.y, ang.z]))


# ----------------------------------------------------------------------------- Float64MultiArray
def float64_array_msg(data, label: str):
    """A 1-D ``Float64MultiArray`` whose single dimension's label documents the content."""
    from std_msgs.msg import Float64MultiArray, MultiArrayDimension

    m = Float64MultiArray()
    m.data = dvec(data)
    n = len(m.data)
    m.layout.dim = [MultiArrayDimension(label=label, size=n, stride=n)]
    m.layout.data_offset = 0
    return m


def array_label(msg) -> str:
    return msg.layout.dim[0].label if msg.layout.dim else ""


def array_data(msg) -> np.ndarray:
    """The values of a ``Float64MultiArray`` (honouring ``data_offset``)."""
    return np.asarray(msg.data, dtype=float)[int(msg.layout.data_offset):]


def command_latency_msg(ticks, latency_us):
    """``/bridge/command_latency``: ``[tick, latency_us, ...]`` pairs (NaN: no command by the deadline)."""
    data = np.empty(2 * len(ticks))
    data[0::2] = ticks
    data[1::2] = latency_us
    return float64_array_msg(data, COMMAND_LATENCY_LABEL)


def command_latency_arrays(msg) -> tuple[np.ndarray, np.ndarray]:
    """``(ticks, latency_us)`` of a ``/bridge/command_latency`` message."""
    d = array_data(msg)
    return d[0::2].astype(np.int64), d[1::2]


def contacts_msg(flags, leg_names: Sequence[str]):
    return float64_array_msg(np.asarray(flags, dtype=float), contacts_label(leg_names))


def diagnostics_msg(values: dict):
    """Named scalars as a Float64MultiArray; label ``bridge[name1,name2,...]``."""
    return float64_array_msg(list(values.values()), "bridge[" + ",".join(values) + "]")


def diagnostics_dict(msg) -> dict:
    label = array_label(msg)
    names = label[label.index("[") + 1: label.rindex("]")].split(",") if "[" in label else []
    return dict(zip(names, array_data(msg).tolist()))


# ----------------------------------------------------------------------------- tick synchronizer
class TickSync:
    """Collects one control tick's inputs from several topics (the estimator and the controller
    nodes): a tick runs once, when every ``required`` input stamped on it has arrived.

    ``status(tick)`` says what a sample stamped on ``tick`` is before it is parsed: ``NEW``, ``REPEAT``
    (the tick that ran last: the bridge re-published it because the answer got lost, answer again)
    or ``STALE`` (older). ``add(tick, key, value)`` stores a new tick's input and returns all of them
    (a dict) when the tick is complete, else None; older incomplete ticks are dropped then.

    The keys are any increasing integers: tick numbers (``input_timing: tick_grid``) or stamps in
    nanoseconds (``input_timing: sample``, where most 1 kHz joint states never complete a tick:
    ``max_pending`` then bounds the buffer, the oldest incomplete key is dropped first)."""

    NEW, REPEAT, STALE = "new", "repeat", "stale"

    def __init__(self, required, max_pending: int | None = None):
        self.required = tuple(required)
        self.last_tick = -1
        self.max_pending = max_pending     # None: unbounded (tick_grid); keys are then stamps [ns]
        self._buf: dict[int, dict] = {}

    def status(self, tick: int) -> str:
        if tick < self.last_tick:
            return self.STALE
        return self.REPEAT if tick == self.last_tick else self.NEW

    def add(self, tick: int, key: str, value) -> dict | None:
        if tick <= self.last_tick:
            return None
        d = self._buf.get(tick)
        if d is None:
            if self.max_pending is not None and len(self._buf) >= self.max_pending:
                del self._buf[min(self._buf)]           # the oldest incomplete tick (never completed)
            d = self._buf[tick] = {}
        d[key] = value
        if any(k not in d for k in self.required):
            return None
        for k in [k for k in self._buf if k <= tick]:
            del self._buf[k]
        self.last_tick = tick
        return d

    def pending(self) -> int:
        """Ticks waiting for an input (diagnostics / tests)."""
        return len(self._buf)


# ----------------------------------------------------------------------------- newest tick first
class NewestTickRunner:
    """Runs a node's control ticks (the estimator's and the controller's ``run(*args)``), always on
    the newest complete tick.

    By default a tick runs at once, in the caller's thread: so it does when the node is composed in
    a container, where the whole chain runs in the bridge's thread, one tick after the other, and
    nothing can pile up. A node in a process of its own (``layout:=processes``; :func:`spin_node`
    calls :meth:`start_worker` of the node's ``ticks``) runs its ticks in a worker thread while the executor thread goes on taking
    samples, so a node that fell behind (a slow tick, a busy machine) does not work through a
    backlog: when a tick is done and several complete ticks are waiting, only the newest runs; the
    older ones are skipped (their answers would come later still) and counted in :attr:`skipped`. In
    lockstep the bridge publishes the next tick only after this tick's command, so nothing is ever
    skipped there. An exception in the worker is raised again by the next :meth:`submit` (in the
    executor thread: the node ends, as when a callback raises)."""

    def __init__(self, run, name: str = "ticks"):
        import threading

        self._run = run
        self.name = name
        self.ran = 0                    # ticks run
        self.skipped = 0                # complete ticks never run: a newer one was waiting
        self._ready = None
        self._error: BaseException | None = None
        self._stop = False
        self._cond = threading.Condition()
        self._thread = None

    @property
    def threaded(self) -> bool:
        return self._thread is not None

    def start_worker(self) -> None:
        """From now on run the ticks in a worker thread, the newest first (see the class docstring)."""
        import threading

        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            self._thread.start()

    def submit(self, *args) -> None:
        """A complete tick: run it now (no worker), or when the worker is free unless a newer one comes
        first."""
        if self._thread is None:
            self._run(*args)
            self.ran += 1
            return
        with self._cond:
            if self._error is not None:
                err, self._error = self._error, None
                raise err
            if self._ready is not None:
                self.skipped += 1
            self._ready = args
            self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._ready is None and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                args, self._ready = self._ready, None
            try:
                self._run(*args)
                self.ran += 1
            except BaseException as exc:  # noqa: BLE001  (handed to the executor thread)
                with self._cond:
                    self._error = exc

    def close(self, timeout: float = 2.0) -> str:
        """Stop the worker, if any (a tick in progress is finished; one still waiting is not run);
        returns ``"R ticks run, S stale ticks skipped"`` for the node's closing log line."""
        if self._thread is not None:
            with self._cond:
                self._stop = True
                self._cond.notify()
            self._thread.join(timeout)
        return f"{self.ran} ticks run, {self.skipped} stale ticks skipped"


# ----------------------------------------------------------------------------- input_timing: sample
INPUT_TIMINGS = ("tick_grid", "sample")
# How early a sample may be and still be the tick the schedule (SampleTicks) expects: half a 1 kHz
# sample period, so with a 1 kHz source the sample 1 ms after a tick is skipped and the one due is
# taken (500 Hz, never 333 Hz because a sample came 10 us early); a 500 Hz source ticks on every sample.
SAMPLE_TICK_TOLERANCE_NS = 500_000
IMU_MAX_AGE_NS = 20_000_000     # sample mode: the newest /imu may be this much older than the joint state


class SampleTicks:
    """Which sensor samples become control ticks with ``input_timing: sample`` (hardware stamps,
    off our 2 ms grid), and the nodes' time ``t`` of a tick.

    Ticks follow a schedule that advances one control period per tick from the first tick's stamp
    (``due`` = the next tick's scheduled stamp): a sample stamped at or after ``due - tolerance``
    becomes the next tick. Advancing the schedule, not the last tick's actual stamp, keeps one tick
    per period under stamp jitter: a late sample does not push the next tick later (with a 1 kHz
    source the sample 1 ms after the due one would otherwise be skipped and that period lose its
    tick). A sample more than a period behind the schedule re-anchors it (a pause, a dropped burst).

    Two ticks are at least ``tolerance`` apart.

    ``status(ns)`` of a sample stamped ``ns`` [ns]: ``NEW`` (it becomes a tick), ``REPEAT`` (the last
    tick's stamp again: answer again), ``STALE`` (older than the last tick) or ``SKIP`` (before the
    schedule: rate limit, e.g. a 1 kHz source -> 500 Hz). ``take(ns)`` records a tick. ``t(ns)`` [s] =
    ``(ns - first tick's ns) * 1e-9``: the first tick is t = 0, as tick 0 of ``tick_grid`` (for
    samples stamped ``k * 2 ms`` from 0 the two agree exactly, same float)."""

    NEW, REPEAT, STALE, SKIP = TickSync.NEW, TickSync.REPEAT, TickSync.STALE, "skip"

    def __init__(self, control_period_ns: int = CONTROL_PERIOD_NS, tolerance_ns: int = SAMPLE_TICK_TOLERANCE_NS):
        self.period_ns = int(control_period_ns)
        self.tolerance_ns = int(tolerance_ns)
        self.first_ns: int | None = None
        self.last_ns: int | None = None
        self.due_ns: int | None = None  # scheduled stamp of the next tick
        self.count = 0                  # ticks taken
        self.reanchors = 0              # times a sample came more than a period behind the schedule

    def status(self, ns: int) -> str:
        last = self.last_ns
        if last is None:
            return self.NEW
        if ns == last:
            return self.REPEAT
        if ns < last:
            return self.STALE
        # on the schedule, and never closer than the tolerance to the last tick (a late tick followed
        # at once by the next on-time sample)
        return self.NEW if ns >= self.due_ns - self.tolerance_ns and ns - last >= self.tolerance_ns else self.SKIP

    def take(self, ns: int) -> int:
        """Record the tick stamped ``ns``; returns its index (0 for the first)."""
        if self.first_ns is None:
            self.first_ns = ns
            self.due_ns = ns
        due = self.due_ns + self.period_ns
        if ns >= due - self.tolerance_ns:       # more than a period behind: start the schedule here
            due = ns + self.period_ns
            self.reanchors += 1
        self.due_ns = due
        self.last_ns = ns
        self.count += 1
        return self.count - 1

    def t(self, ns: int) -> float:
        return (ns - self.first_ns) * 1e-9


# ----------------------------------------------------------------------------- torque command
class CommandError(ValueError):
    """A torque command that must not be applied; the message is the reason, ``kind`` its category
    (``length``, ``tick``, ``nonfinite``)."""

    def __init__(self, reason: str, kind: str = "invalid"):
        super().__init__(reason)
        self.kind = kind


@dataclass(frozen=True)
class TorqueCommand:
    tick: int              # control tick it answers (UNTIMED_TICK = -1: untimed)
    tau: np.ndarray        # [N m], in the receiver's joint order
    stamp_ns: int | None = None   # untimed: the stamp (of the sample it answers), for latency bookkeeping


def torque_command_msg(t_ns: int, names: Sequence[str], tau):
    """``/joint_torque_cmd``: a ``sensor_msgs/JointState`` with ``name`` (the joints), ``effort`` [N m]
    and ``header.stamp`` = the sim time of the control tick it answers (``tick * 2 ms``); ``position``
    and ``velocity`` are NaN ("not commanded"). They are filled rather than empty because the
    ``rosbags`` reader mis-aligns an empty float64 sequence followed by data (Fast-CDR does not pad
    an empty sequence; rosbags 0.11 does) and could not read the bags. The receiver pairs it with its tick by the stamp
    (:class:`TorqueCommandDecoder`)."""
    from sensor_msgs.msg import JointState

    m = JointState()
    m.header.stamp = time_msg(t_ns)
    m.name = list(names)
    m.effort = dvec(tau)
    m.position = m.velocity = dvec(np.full(len(m.name), np.nan))
    return m


def fill_torque_command(m, stamp, tau) -> None:
    """Refill a command built by :func:`torque_command_msg` (same joints) for another tick."""
    fill_joint_state(m, stamp, effort=tau)


class TorqueCommandDecoder:
    """Validates and decodes ``/joint_torque_cmd`` for a receiver with joints ``joint_names``.

    ``decode(msg)`` returns a :class:`TorqueCommand` with the torques in ``joint_names`` order and the
    tick the stamp names (``stamp / control_period``), or raises :class:`CommandError` with a reason
    and a ``kind``: ``names`` (not every joint exactly once, or a name the receiver does not have),
    ``length`` (``effort`` not one value per name), ``nonfinite``, ``tick`` (a stamp between two
    control ticks). With ``timed=False`` (a hardware-style input, e.g. a controller that does not
    know the bridge's ticks) the stamp is ignored and every command is untimed (``tick = -1``).
    The joints may come in any order; the order of the first message is remembered, so the usual
    case (the same order every time) costs one list comparison.
    """

    def __init__(self, joint_names: Sequence[str], control_period_ns: int = CONTROL_PERIOD_NS, timed: bool = True):
        self.names = list(joint_names)
        self.n = len(self.names)
        self._index = {nm: i for i, nm in enumerate(self.names)}
        self.period_ns = int(control_period_ns)
        self.timed = bool(timed)
        self._last_names: list[str] | None = None
        self._perm: np.ndarray | None = None     # receiver index of each message entry (None: same order)

    def _order(self, names) -> np.ndarray | None:
        if names == self._last_names:      # the usual case: the same order as the previous command
            return self._perm
        names = list(names)
        if names == self.names:
            perm = None
        else:
            unknown = [nm for nm in names if nm not in self._index]
            if unknown or len(names) != self.n or len(set(names)) != self.n:
                missing = sorted(set(self.names) - set(names))
                dup = sorted({nm for nm in names if names.count(nm) > 1})
                raise CommandError(f"joint names must be each of the {self.n} joints once (unknown {unknown[:3]}, "
                                   f"missing {missing[:3]}, duplicate {dup[:3]})", "names")
            perm = np.array([self._index[nm] for nm in names])
        self._last_names, self._perm = names, perm
        return perm

    def decode(self, msg) -> TorqueCommand:
        return self.decode_fields(stamp_ns(msg.header.stamp), msg.name, msg.effort)

    def decode_fields(self, t_ns: int, names, effort) -> TorqueCommand:
        """:meth:`decode` of a command's stamp [ns], names and efforts (e.g. an adapted value)."""
        tick, stamp = UNTIMED_TICK, None
        if not self.timed:
            stamp = t_ns
        else:
            tick, rem = divmod(t_ns, self.period_ns)
            if rem:
                raise CommandError(f"stamp {t_ns * 1e-9:.6f} s is not a control tick (a multiple of "
                                   f"{self.period_ns * 1e-9:g} s); answer the stamp of the tick's sensor sample", "tick")
        try:
            perm = self._order(names)
        except CommandError as exc:
            raise CommandError(f"{exc} (tick {tick})", exc.kind) from None
        eff = np.array(effort, dtype=float)         # a copy: the sender may reuse its array
        if eff.shape != (self.n,):
            raise CommandError(f"expected {self.n} efforts (one per name), got {eff.size} (tick {tick})", "length")
        bad = np.flatnonzero(~np.isfinite(eff))
        if bad.size:
            names = [names[i] for i in bad[:3]]
            raise CommandError(f"non-finite effort for joint(s) {names} (tick {tick})", "nonfinite")
        if perm is None:
            return TorqueCommand(tick=int(tick), tau=eff, stamp_ns=stamp)
        tau = np.empty(self.n)
        tau[perm] = eff
        return TorqueCommand(tick=int(tick), tau=tau, stamp_ns=stamp)


# ----------------------------------------------------------------------------- publishers / subscriptions
def create_publisher(node, msg_type, topic: str, qos, adapter=None, **kw):
    """``node.create_publisher``, or, when the node is being composed into a container, an
    :class:`legged_wbc.ros.intra_process.IntraPublisher` that hands messages to co-located
    subscriptions directly. Every node of the stack creates its publishers through this. With an
    ``adapter`` (:mod:`legged_wbc.ros.adapters`) the publisher also has ``publish_value``."""
    from legged_wbc.ros.intra_process import active_bus

    bus = getattr(node, "_intra_bus", None) or active_bus()
    if bus is None:
        pub = node.create_publisher(msg_type, topic, qos, **kw)
        if adapter is None:
            return pub
        from legged_wbc.ros.adapters import AdaptedPublisher

        return AdaptedPublisher(pub, adapter)
    node._intra_bus = bus
    return bus.create_publisher(node, msg_type, topic, qos, adapter=adapter, **kw)


def create_subscription(node, msg_type, topic: str, callback, qos, raw: bool = False, tap=None, adapter=None,
                        **kw):
    """``node.create_subscription``, or the in-process subscription of a composed node (see
    :func:`create_publisher`; ``tap``: :meth:`IntraProcessBus.create_subscription`, ignored outside a
    container). With an ``adapter`` class (:mod:`legged_wbc.ros.adapters`) ``callback`` takes values:
    an adapted publisher's in the process as they are, any other message through ``adapter.to_value``."""
    from legged_wbc.ros.intra_process import active_bus

    bus = getattr(node, "_intra_bus", None) or active_bus()
    on_msg = callback if adapter is None else (lambda msg: callback(adapter.to_value(msg)))
    if bus is None:
        return node.create_subscription(msg_type, topic, on_msg, qos, raw=raw, **kw)
    node._intra_bus = bus
    return bus.create_subscription(node, msg_type, topic, on_msg, qos, raw=raw, tap=tap,
                                   value_callback=callback if adapter is not None else None, **kw)


# ----------------------------------------------------------------------------- start-up helper
def wait_for_matched_subscribers(node, publishers, timeout: float = 2.0, min_count: int = 0) -> bool:
    """Wait until each publisher is matched with every subscription the ROS graph shows for its topic
    (and at least ``min_count``). True if so within ``timeout`` wall seconds, else False (e.g. a
    QoS-incompatible subscriber that will never match)."""
    import time

    t_end = time.monotonic() + timeout
    while True:
        ok = all(p.get_subscription_count() >= max(min_count, node.count_subscribers(p.topic_name))
                 for p in publishers)
        if ok or time.monotonic() >= t_end:
            return ok
        time.sleep(0.01)


# ----------------------------------------------------------------------------- node entry point
EXECUTOR_ENV = "LEGGED_WBC_EXECUTOR"
EXECUTORS = ("events", "single")
SPIN_PERIOD = 0.1   # [s wall] longest time the spin loops stay in the executor without looking at their stop flag


def executor_kind(kind: str | None = None) -> str:
    """The executor the stack's processes use: ``kind``, else ``$LEGGED_WBC_EXECUTOR``, else ``events``.

    * ``events``: rclpy's ``rclpy.experimental.EventsExecutor`` (C++ event queue fed by the middleware's
      new-message callbacks; a fraction of the CPU per message of the wait-set executor).
    * ``single``: ``rclpy.executors.SingleThreadedExecutor`` (rebuilds a wait set for every callback)."""
    import os

    kind = (kind or os.environ.get(EXECUTOR_ENV) or "events").strip().lower()
    if kind not in EXECUTORS:
        raise ValueError(f"{EXECUTOR_ENV}={kind!r}: expected one of {', '.join(EXECUTORS)}")
    return kind


def make_executor(kind: str | None = None, context=None):
    """A new executor of :func:`executor_kind` ``kind``. Spin it with :func:`spin_until` only."""
    if executor_kind(kind) == "events":
        from rclpy.experimental import EventsExecutor

        return EventsExecutor(context=context)
    from rclpy.executors import SingleThreadedExecutor

    return SingleThreadedExecutor(context=context)


def spin_until(executor, done, period: float = SPIN_PERIOD) -> None:
    """Run ``executor``'s callbacks until ``done()`` is true, waiting at most ``period`` s at a time.

    Never call ``spin()``, ``spin_once()`` or ``spin_until_future_complete()`` of rclpy's EventsExecutor
    without a timeout: its event queue then waits with the deadline ``steady_clock::time_point::max()``,
    which does not block in rclpy 9.1.2's wheel: the queue thread busy-loops (~70 % of a core while
    idle) holding the queue's mutex, so the middleware threads that enqueue new messages and
    ``shutdown()`` starve on that mutex (throughput collapses, publishers see no acknowledgements,
    ``shutdown(timeout_sec=...)`` never returns) and Python signal handlers never get to run: the
    "lost messages and hung at shutdown" of the EventsExecutor (``test/test_executors.py``). A finite
    timeout blocks normally. ``spin_once`` of either executor runs at most one callback (for the
    EventsExecutor one subscription's ready messages) and returns at the latest after ``period``.
    An exception from a callback propagates; do not keep spinning an EventsExecutor after one: it
    takes exactly the announced number of messages per event, so the rest of the failed batch stays
    in the reader behind every later message (the last ones of a run are then never taken)."""
    while not done():
        executor.spin_once(timeout_sec=period)


def spin_node(make_node, argv=None) -> int:
    """``main()`` of a node: init, spin ``make_node()`` until Ctrl-C / SIGTERM / shutdown, clean up.
    The node is in a process of its own: if it has a :class:`NewestTickRunner` ``ticks``, its
    worker is started (when behind, the newest tick first).

    The executor is :func:`make_executor`'s (``$LEGGED_WBC_EXECUTOR``: ``events`` by default, or
    ``single``). SIGINT and SIGTERM only set a flag that the spin loop reads at least every
    :data:`SPIN_PERIOD` (nothing is raised inside a callback); then the executor is shut down before
    the node is destroyed (the EventsExecutor holds the subscriptions' middleware callbacks)."""
    import os
    import signal
    import sys

    import rclpy
    from rclpy.executors import ExternalShutdownException
    from rclpy.signals import SignalHandlerOptions

    rclpy.init(args=argv if argv is not None else sys.argv, signal_handler_options=SignalHandlerOptions.NO)
    stop: list[int] = []
    old = {s: signal.signal(s, lambda signum, frame: stop.append(signum)) for s in (signal.SIGINT, signal.SIGTERM)}
    node = executor = None
    try:
        try:
            node = make_node()
        except Exception as exc:     # a bad parameter / scenario / robot file: one line, exit 2
            from legged_wbc.robot import ConfigError
            from legged_wbc.ros.params import ParameterSchemaError

            if not isinstance(exc, (ConfigError, ParameterSchemaError)):
                raise
            print(f"{os.path.basename(sys.argv[0])}: {exc}", file=sys.stderr, flush=True)
            return 2
        if isinstance(getattr(node, "ticks", None), NewestTickRunner):
            node.ticks.start_worker()
        executor = make_executor()
        executor.add_node(node)
        spin_until(executor, lambda: bool(stop) or not rclpy.ok())
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if executor is not None:
            executor.shutdown(timeout_sec=1.0)
        if node is not None:
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
        for s, h in old.items():
            signal.signal(s, h)
    return 0


class TickOutputs:
    """What the estimator and controller nodes share about a tick's outputs: ``_last_out`` (the tick's
    ``(publisher, value)`` pairs), re-sent when the bridge re-publishes a tick's samples because its answer
    got lost (start-up), and the count of rejected inputs, each logged at most once a second."""

    _last_out: list = []
    rejected = 0

    def _resend(self) -> None:
        """The bridge re-publishes a tick's samples when its answer got lost (start-up): answer again."""
        for pub, value in self._last_out:
            pub.publish_value(value)

    def _reject(self, what: str, reason: str) -> None:
        self.rejected += 1
        self.get_logger().warning(f"rejected {what}: {reason}", throttle_duration_sec=1.0)
