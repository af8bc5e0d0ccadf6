"""Base velocity commands: the command filter, the gait clock and the body reference they drive.

Plain Python, no ROS: the headless loop runs it every control tick (:class:`Commander`), and so can a
node (a scheduled command; a live ``/cmd_vel`` calls :meth:`VelocityCommand.set` on each message).

Frames and units (REP 103): a command is the base's twist in its **heading frame** (the base frame
yawed with the base, level): ``vx`` forward, ``vy`` left [m/s], ``wz`` yaw rate [rad/s].

* :class:`VelocityCommand`: the target clamped per axis to the limits (each clamped target counted),
  treated as zero once older than ``timeout`` [s], reached through the per-axis acceleration limits
  (a rate limiter: the filtered command reaches its target exactly, zero included).
* :class:`GaitClock`: the gait's time ``tau`` (what :func:`legged_wbc.gait.gait_state` is evaluated
  at). ``tau = t - paused_total``: exactly ``t`` while never paused. With the stand condition (the
  filtered command zero for ``stand_delay`` s) the clock pauses at the first tick whose ``tau`` has
  every leg nominally in support (or, at the gait's start, at the last tick before it); paused, every
  leg is in support whatever ``tau`` (:func:`gait_phases`); a non-zero command resumes it from the
  same ``tau``. Its state is ``(tau, paused)``: what the estimator takes (``gait_clock``) and what a
  controller node can publish for an estimator that follows it.
* :class:`CommandReference`: the body reference's horizontal part, integrating the filtered command:
  ``yaw += wz dt``, ``p += Rz(yaw) [vx, vy] dt`` (world; the exact step of a constant twist, so a
  constant ``(v, wz)`` walks a circle of radius ``|v| / |wz|``), its world velocity and acceleration
  (``a = Rz(yaw) ([ax, ay] + wz z x [vx, vy])``), yaw rate and its derivative, the gait clock: the
  array :data:`CMD_FIELDS` the compiled cycle reads (``cmd_ref`` in the controller's workspace).
"""

from __future__ import annotations

import bisect
import math
from typing import NamedTuple

import numpy as np

from legged_wbc.gait import SUPPORT, GaitScheduler, gait_state

AXES = ("vx", "vy", "wz")
# the command reference as the compiled cycle reads it (wbc_controller.kernels: workspace field cmd_ref)
CMD_FIELDS = ("px", "py", "vx_w", "vy_w", "ax_w", "ay_w", "yaw", "wz", "dwz", "tau", "paused", "spare")
CMD_PX, CMD_PY, CMD_VX, CMD_VY, CMD_AX, CMD_AY, CMD_YAW, CMD_WZ, CMD_DWZ, CMD_TAU, CMD_PAUSED = range(11)
CMD_SIZE = len(CMD_FIELDS)
_ZERO3 = np.zeros(3)
_ZERO3.flags.writeable = False     # the target without a command (read-only: shared)


class CommandLimits(NamedTuple):
    """Per-axis limits ``(vx, vy, wz)`` [m/s, m/s, rad/s], acceleration limits ``(ax, ay, dwz)``
    [m/s^2, m/s^2, rad/s^2], the age after which a command counts as zero [s] and how long the
    filtered command stays zero before the gait stops [s]."""

    v_max: tuple
    a_max: tuple
    timeout: float
    stand_delay: float

    @classmethod
    def from_config(cls, cfg) -> "CommandLimits":
        """From a :class:`wbc_controller.config.WbcConfig` (``cmd_max_*``, ``cmd_accel_*``,
        ``cmd_vel_timeout``, ``stand_delay``)."""
        return cls((cfg.cmd_max_vx, cfg.cmd_max_vy, cfg.cmd_max_wz),
                   (cfg.cmd_accel_x, cfg.cmd_accel_y, cfg.cmd_accel_wz), cfg.cmd_vel_timeout, cfg.stand_delay)


class CommandState(NamedTuple):
    """One tick's command: filtered twist (heading frame) [m/s, m/s, rad/s], its rate of change
    [m/s^2, m/s^2, rad/s^2], the gait clock ``tau`` [s] and whether it is paused."""

    vx: float
    vy: float
    wz: float
    ax: float
    ay: float
    dwz: float
    tau: float
    paused: bool


class VelocityCommand:
    """The command filter (module docstring): :meth:`set` a target, :meth:`step` once per tick."""

    def __init__(self, limits: CommandLimits):
        self.limits = limits
        self.target = np.zeros(3)       # the last target, clamped [m/s, m/s, rad/s]
        self.stamp: float | None = None  # its time [s]
        self.v = np.zeros(3)            # filtered command
        self.a = np.zeros(3)            # its rate over the last step
        self.clamped = 0                # targets that had an axis over its limit
        self._t: float | None = None

    def set(self, vx: float, vy: float, wz: float, t: float) -> bool:
        """A new target at time ``t`` [s]; each axis clamped to its limit. Returns whether one was
        clamped (then counted in :attr:`clamped`). Raises ``ValueError`` on a non-finite value (the
        target is then unchanged)."""
        raw = (float(vx), float(vy), float(wz))
        if not all(math.isfinite(x) for x in raw) or not math.isfinite(t):
            raise ValueError(f"velocity command: not finite ({raw[0]}, {raw[1]}, {raw[2]}) at t={t}")
        clipped = False
        for k, (x, m) in enumerate(zip(raw, self.limits.v_max)):
            c = min(max(x, -m), m)
            clipped |= c != x
            self.target[k] = c
        self.clamped += clipped
        self.stamp = float(t)
        return clipped

    def effective_target(self, t: float) -> np.ndarray:
        """The target at ``t``: zero when none was set or it is older than ``timeout``."""
        if self.stamp is None or t - self.stamp > self.limits.timeout:
            return _ZERO3
        return self.target

    def step(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """Advance to ``t`` [s]: the filtered command moves towards :meth:`effective_target` by at
        most ``a_max dt`` per axis. Returns ``(v, a)`` (views; the first call and a non-increasing
        ``t`` do not move it)."""
        dt = 0.0 if self._t is None else t - self._t
        self._t = t if self._t is None else max(self._t, t)
        if dt <= 0.0:
            self.a[:] = 0.0
            return self.v, self.a
        target, v, a, a_max = self.effective_target(t), self.v, self.a, self.limits.a_max
        for k in range(3):
            lim, vk = a_max[k] * dt, v[k]
            err = target[k] - vk
            new = target[k] if abs(err) <= lim else vk + min(max(err, -lim), lim)
            a[k] = (new - vk) / dt
            v[k] = new
        return v, a

    def hold(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """Advance to ``t`` [s] without moving the filtered command (a target is held, not followed).
        Returns ``(v, a)`` (views; ``a`` zero)."""
        self._t = t if self._t is None else max(self._t, t)
        self.a[:] = 0.0
        return self.v, self.a


def gait_phases(gait: GaitScheduler, tau: float, paused: bool, phases, progress, cycles) -> None:
    """The nominal gait state at the gait clock ``(tau, paused)`` into ``phases``, ``progress``,
    ``cycles`` (compiled :func:`legged_wbc.gait.gait_state`; paused: every leg in support)."""
    g = gait.cfg
    gait_state(tau, g.start_time, -math.inf if paused else g.stop_time, g.period, gait.swing_duration, gait.offset,
               gait.group, phases, progress, cycles)


class GaitClock:
    """The gait's clock (module docstring). State: ``tau`` [s], ``paused``; :meth:`step` once a tick."""

    def __init__(self, gait: GaitScheduler):
        self.gait = gait
        self.tau: float | None = None
        self.paused = False
        N = gait.n_legs
        self._ph, self._pr, self._cy = np.empty(N, np.int64), np.empty(N), np.empty(N, np.int64)

    def state(self) -> tuple[float, bool]:
        """``(tau, paused)``: all an estimator following this clock needs."""
        return self.tau, self.paused

    def set_state(self, tau: float, paused: bool) -> None:
        self.tau, self.paused = float(tau), bool(paused)

    def _all_support(self, tau: float) -> bool:
        gait_phases(self.gait, tau, False, self._ph, self._pr, self._cy)
        return bool(np.all(self._ph == SUPPORT))

    def step(self, t: float, dt: float, stand: bool) -> tuple[float, bool]:
        """The clock at tick time ``t`` [s], ``dt`` [s] after the previous tick: paused it holds
        ``tau`` (resumed when ``stand`` is false); running, ``tau`` advances by ``dt`` (the first call:
        ``tau = t``) and, with ``stand``, pauses at the first ``tau`` with every leg nominally in
        support (at or after the gait's start; or at the last ``tau`` before the start)."""
        if self.tau is None:
            self.tau = float(t)
        elif self.paused:
            self.paused = stand
            return self.tau, self.paused
        else:
            prev, self.tau = self.tau, (self.tau + dt if dt > 0 else self.tau)
            if stand and self.tau >= self.gait.cfg.start_time:
                if prev < self.gait.cfg.start_time:
                    self.tau, self.paused = prev, True
                elif self._all_support(self.tau):
                    self.paused = True
        return self.tau, self.paused


class CommandSchedule:
    """A scenario's ``commands``: ``[(t, vx, vy, wz), ...]`` (t strictly increasing), each held from
    its ``t`` until the next; zero before the first."""

    def __init__(self, entries):
        self.t = np.array([e[0] for e in entries], dtype=float)
        self.v = np.array([e[1:4] for e in entries], dtype=float).reshape(-1, 3)
        self._t = self.t.tolist()                                        # what at() searches, once a tick
        self._rows = [(0.0, 0.0, 0.0)] + [tuple(row) for row in self.v.tolist()]

    def at(self, t: float) -> tuple[float, float, float]:
        return self._rows[bisect.bisect_right(self._t, t)]


class Commander:
    """One tick's command and gait clock, computed once and handed to the estimator (``(tau,
    paused)``) and the controller (:class:`CommandState`): a :class:`VelocityCommand` fed by a
    :class:`CommandSchedule` (or by :meth:`set`, a live command) and a :class:`GaitClock`.

    Before the gait (the clock running towards ``start_time``: standing up, every leg planted) a
    non-zero target is held: the filtered command stays (zero), so the body reference does not move
    over planted feet; the held target keeps the clock from pausing, the gait starts at ``start_time``
    and the command is followed from there through the acceleration limits. Each hold is counted
    (:attr:`held`) and said once through :attr:`on_held`. A paused clock is resumed by the command at
    its very tick (it paused with every leg in support): nothing is held there."""

    def __init__(self, limits: CommandLimits, gait: GaitScheduler, schedule: CommandSchedule | None = None):
        self.filter = VelocityCommand(limits)
        self.clock = GaitClock(gait)
        self.schedule = schedule
        self.moving_t = -math.inf      # last tick the filtered command was non-zero [s]
        self.held_t: float | None = None   # the tick a non-zero target was first held (this hold) [s]
        self.held = 0                  # hold episodes (a non-zero target before the gait could follow it)
        self.on_held = None            # callable(message) told once per hold episode (None: silent)
        self._t: float | None = None

    def set(self, vx: float, vy: float, wz: float, t: float) -> bool:
        """A live command (clamped, counted; :meth:`VelocityCommand.set`)."""
        return self.filter.set(vx, vy, wz, t)

    def tick(self, t: float) -> CommandState:
        """The command and gait clock at tick time ``t`` [s]."""
        if self.schedule is not None:
            self.filter.set(*self.schedule.at(t), t)
        dt = 0.0 if self._t is None else t - self._t
        if self._before_gait(t, dt):
            v, a = self.filter.hold(t)
            self._held(t, self.filter.effective_target(t))
        else:
            v, a = self.filter.step(t)
            self.held_t = None
        if v[0] != 0.0 or v[1] != 0.0 or v[2] != 0.0 or self.held_t is not None:
            self.moving_t = t          # a held target keeps the gait from pausing: it starts and then follows
        stand = t - self.moving_t >= self.filter.limits.stand_delay
        self._t = t
        tau, paused = self.clock.step(t, dt, stand)
        return CommandState(float(v[0]), float(v[1]), float(v[2]), float(a[0]), float(a[1]), float(a[2]), tau, paused)

    def _before_gait(self, t: float, dt: float) -> bool:
        """Whether this tick's gait clock is still before the gait's start and running towards it (the
        stand-up and the wait for ``start_time``: every leg planted, nothing can follow a command). A
        paused clock is not: a command resumes it at this very tick, from a ``tau`` with every leg in
        support."""
        clock = self.clock
        if clock.paused:
            return False
        tau = t if clock.tau is None else (clock.tau + dt if dt > 0 else clock.tau)
        return tau < clock.gait.cfg.start_time

    def _held(self, t: float, target) -> None:
        """A tick before the gait: a non-zero target is held (reported once per hold through
        :attr:`on_held`); a zero one ends the hold."""
        if target[0] == 0.0 and target[1] == 0.0 and target[2] == 0.0:
            self.held_t = None
            return
        if self.held_t is None:
            self.held_t = t
            self.held += 1
            if self.on_held is not None:
                self.on_held(f"velocity command ({target[0]:g}, {target[1]:g}, {target[2]:g}) at t={t:.3f} s held "
                             f"until the gait starts (start_time {self.clock.gait.cfg.start_time:g} s): the feet "
                             "are all planted, the body does not follow it before")


def yaw_of_quat_xyzw(q) -> float:
    """Yaw [rad] (ZYX) of a base -> world quaternion ``xyzw``."""
    x, y, z, w = (float(c) for c in q)
    return math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


class CommandReference:
    """The body reference's horizontal part and the gait clock (module docstring) as the array
    ``out`` of :data:`CMD_FIELDS`, advanced once a tick by :meth:`advance`."""

    def __init__(self):
        self.p = np.zeros(2)     # world x, y [m]
        self.yaw = 0.0           # [rad]
        self._t: float | None = None

    def reset(self, p0, yaw0: float = 0.0) -> None:
        self.p[:] = (float(p0[0]), float(p0[1]))
        self.yaw = float(yaw0)
        self._t = None

    def advance(self, t: float, cmd: CommandState, out: np.ndarray) -> None:
        """Integrate the filtered command over ``[t_prev, t]`` as a constant twist (the first call:
        no motion) and write the reference into ``out``."""
        dt = 0.0 if self._t is None or t <= self._t else t - self._t
        self._t = t if self._t is None else max(self._t, t)
        half = 0.5 * cmd.wz * dt
        mid = self.yaw + half                      # the chord of an arc points along its mid yaw
        k = dt * (math.sin(half) / half if half != 0.0 else 1.0)   # chord / arc length
        c, s = math.cos(mid), math.sin(mid)
        self.p[0] += k * (c * cmd.vx - s * cmd.vy)
        self.p[1] += k * (s * cmd.vx + c * cmd.vy)
        self.yaw += cmd.wz * dt
        c, s = math.cos(self.yaw), math.sin(self.yaw)
        ax, ay = cmd.ax - cmd.wz * cmd.vy, cmd.ay + cmd.wz * cmd.vx     # d/dt of Rz(yaw) v, in the heading frame
        out[CMD_PX], out[CMD_PY] = self.p[0], self.p[1]
        out[CMD_VX], out[CMD_VY] = c * cmd.vx - s * cmd.vy, s * cmd.vx + c * cmd.vy
        out[CMD_AX], out[CMD_AY] = c * ax - s * ay, s * ax + c * ay
        out[CMD_YAW], out[CMD_WZ], out[CMD_DWZ] = self.yaw, cmd.wz, cmd.dwz
        out[CMD_TAU], out[CMD_PAUSED] = cmd.tau, 1.0 if cmd.paused else 0.0
