"""BridgeScheduler (mujoco_bridge/scheduler.py) driven by a virtual clock: no ROS, no real sleeping.

The fake clock only moves when the scheduler sleeps or waits; events (a controller's answer, a
parameter change) fire at their virtual time, inside that sleep / wait, as a command from the
executor thread would."""

from __future__ import annotations

import dataclasses
import heapq
import itertools
from types import SimpleNamespace

import numpy as np
import pytest

from legged_wbc.params import schema
from legged_wbc.robot import ConfigError
from mujoco_bridge.config import BridgeConfig, load_bridge_config
from mujoco_bridge.scheduler import DIAG_FIELDS, BridgeScheduler, damping_torque

SPT = 2                      # physics steps per control tick
N = 3                        # joints
DQ = np.array([1.0, -2.0, 100.0])
LIMIT = np.array([10.0, 10.0, 10.0])


class FakeClock:
    def __init__(self):
        self.t = 0.0
        self._events: list = []
        self._seq = itertools.count()
        self.waits = 0

    def monotonic(self) -> float:
        return self.t

    def at(self, t: float, fn) -> None:
        heapq.heappush(self._events, (t, next(self._seq), fn))

    def _advance(self, until: float) -> None:
        while self._events and self._events[0][0] <= until:
            t, _, fn = heapq.heappop(self._events)
            self.t = max(self.t, t)
            fn()
        self.t = max(self.t, until)

    def sleep(self, dt: float) -> None:
        self._advance(self.t + max(dt, 0.0))

    def wait(self, cond, timeout: float) -> None:
        """Like Condition.wait: returns at the next event (a notify) or after ``timeout``."""
        self.waits += 1
        assert self.waits < 10**6, "the scheduler spins"
        until = self.t + max(timeout, 0.0)
        if self._events and self._events[0][0] < until:
            until = self._events[0][0]
        self._advance(max(until, np.nextafter(self.t, np.inf)))   # real time always moves on


class Log:
    def __init__(self):
        self.lines: list[tuple[str, float, str]] = []
        self.clock = None

    def _add(self, level, text, **kw):
        self.lines.append((level, self.clock.t if self.clock else 0.0, text))

    def info(self, text, **kw):
        self._add("info", text)

    def warning(self, text, **kw):
        self._add("warning", text)

    def error(self, text, **kw):
        self._add("error", text)

    def having(self, part: str) -> list:
        return [ln for ln in self.lines if part in ln[2]]


def cmd(tick: int, value: float | None = None):
    return SimpleNamespace(tick=tick, tau=np.full(N, float(tick if value is None else value)))


class Rig:
    """A scheduler with fake ports and a scripted controller.

    ``latency(k)`` -> wall seconds until the command for tick ``k`` arrives after its sample was
    published (None: never answered)."""

    def __init__(self, lockstep=True, latency=lambda k: 1e-4, peers_after=0.0, delay=0, **cfg):
        self.clock = FakeClock()
        self.log = Log()
        self.log.clock = self.clock
        self.latency = latency
        self.steps: list[tuple[int, float, np.ndarray]] = []      # (step, wall, tau)
        self.published: list[tuple[int, float]] = []             # (step, wall)
        self.answered: dict[int, float] = {}                       # tick -> wall of the answer
        self.diags: list[dict] = []
        self.progress: list[str] = []
        self.peers_after = peers_after
        self.settled = False
        self.step_cost = {}                                       # step -> wall seconds the step takes
        cfg = BridgeConfig(**{"duration": 0.02, "mode": "lockstep" if lockstep else "realtime", **cfg})
        self.sched = BridgeScheduler(cfg, self, lockstep=lockstep, steps_per_tick=SPT, effort_limit=LIMIT,
                                     log=self.log, clock=self.clock, command_delay_ticks=delay)

    # ports
    def physics_step(self, tau, step):
        assert step == self.sched.step_count
        self.steps.append((step, self.clock.t, np.array(tau)))
        if step in self.step_cost:                  # a slow step: what arrives meanwhile is delivered
            self.clock._advance(self.clock.t + self.step_cost[step])

    def publish_sample(self, step):
        self.published.append((step, self.clock.t))
        if step * 1_000_000 >= self.sched.diag_next_ns:        # as the node does
            fields, ticks, lat, line = self.sched.diagnostics()
            self.diags.append(fields)
            if line:
                self.progress.append((self.clock.t, line))
        if step % SPT == 0:
            k = step // SPT
            lat = self.latency(k)
            if lat is not None and k not in self.answered:
                self.answered[k] = self.clock.t + lat
                self.clock.at(self.clock.t + lat, lambda k=k: self.sched.offer_command(cmd(k)))

    def joint_velocities(self):
        return DQ

    def peers_missing(self):
        return None if self.clock.t >= self.peers_after else "0/1 /joint_states subscribers"

    def settle_peers(self):
        self.settled = True

    # helpers
    def set_cfg(self, at: float, **changes):
        self.clock.at(at, lambda: setattr(self.sched, "cfg", dataclasses.replace(self.sched.cfg, **changes)))

    def run(self):
        self.sched.run()
        return self

    def taus(self) -> np.ndarray:
        return np.array([s[2][0] for s in self.steps])

    def step_walls(self) -> np.ndarray:
        return np.array([s[1] for s in self.steps])


# ---------------------------------------------------------------- lockstep
def test_lockstep_applies_exactly_the_command_of_each_tick_for_its_steps():
    r = Rig(latency=lambda k: 0.05 + 0.01 * (k % 3), duration=0.02).run()
    assert len(r.steps) == 20 and [s[0] for s in r.steps] == list(range(20))
    # the command answering tick k (tau = k) drives exactly physics steps 2k and 2k+1
    assert np.array_equal(r.taus(), np.repeat(np.arange(10.0), SPT))
    # ... and no step of tick k ran before its command had arrived (the bridge waited for it)
    for step, wall, _ in r.steps:
        assert wall >= r.answered[step // SPT]
    assert r.sched.counters["commands_applied"] == 10 and r.sched.tick == 10
    assert r.sched.counters["watchdog_events"] == 0 and not r.log.having("watchdog")
    # samples after every step; the tick-0 sample once, before any step
    assert [p[0] for p in r.published] == list(range(21))
    assert r.settled and "duration reached: t = 0.020 s, 10 commands applied, 0 watchdog events" == r.sched.summary()


def test_lockstep_drops_stale_and_rejects_future_commands():
    r = Rig(duration=0.02)
    offered = []

    def publish(step, orig=r.publish_sample):
        orig(step)
        if step == 0 and not offered:         # at tick 0: an answer to tick 3 (future)
            offered.append(r.sched.offer_command(cmd(3, value=99.0)))
        if step == 8:                         # tick 4 published: a second answer to tick 2 (stale)
            offered.append(r.sched.offer_command(cmd(2, value=77.0)))
    r.publish_sample = publish
    r.run()
    assert offered == [False, False]
    assert r.sched.counters["stale_commands"] == 1
    assert r.sched.counters["rejected_commands"] == 1
    assert r.log.having("torque command rejected: command for tick 3 arrived while the bridge is at tick 0")
    assert 99.0 not in r.taus() and 77.0 not in r.taus()
    assert np.array_equal(r.taus(), np.repeat(np.arange(10.0), SPT))
    r.sched.reject("non-finite torque", kind="nonfinite")
    r.sched.reject("non-finite torque", kind="nonfinite")            # within a second: counted, not logged
    assert r.sched.counters["rejected_commands"] == 3 and len(r.log.having("non-finite")) == 1


def test_lockstep_watchdog_engages_after_timeout_damps_and_releases_on_the_next_command():
    hang = range(5, 12)                               # ticks 5..11 are never answered
    r = Rig(latency=lambda k: None if k in hang else 1e-4, duration=0.04, watchdog_timeout=0.3,
            watchdog_damping=5.0).run()
    s = r.sched
    assert s.counters["watchdog_events"] == 1 and not s.watchdog_active
    (err,) = r.log.having("watchdog: no command for tick 5")
    assert "(t = 0.010 s) within 0.3 s wall; applying joint damping 5 N m s/rad" in err[2]
    # engaged 0.3 s (wall) after the tick-5 sample went out
    t5 = [w for st, w in r.published if st == 10][0]
    assert err[1] == pytest.approx(t5 + 0.3)
    damp = np.clip(-5.0 * DQ, -LIMIT, LIMIT)
    for step, wall, tau in r.steps:
        if step // SPT in hang:
            assert np.array_equal(tau, damp), step
        else:
            assert np.array_equal(tau, np.full(N, float(step // SPT))), step
    # damped ticks are paced at one control period of wall time each (waiting for their command)
    walls = {st: w for st, w, _ in r.steps}
    assert walls[2 * 7] - walls[2 * 6] == pytest.approx(0.002)
    (rel,) = r.log.having("watchdog released")
    assert "command for tick 12 received, lockstep resumed" in rel[2]
    assert s.counters["commands_applied"] == 20 - len(hang)


def test_startup_republishes_tick0_every_period_only_until_the_first_command():
    # tick 0 answered after 2.5 s; tick 3 after 1.5 s (no re-publishing then: only at start-up)
    r = Rig(latency=lambda k: {0: 2.5, 3: 1.5}.get(k, 1e-4), duration=0.01, republish_period=1.0,
            watchdog_timeout=5.0).run()
    zero = [w for st, w in r.published if st == 0]
    assert zero == pytest.approx([0.0, 1.0, 2.0])
    assert len(r.log.having("no command for tick 0 yet: re-publishing the tick-0 sample")) == 2
    assert [st for st, _ in r.published].count(6) == 1
    assert r.sched.counters["watchdog_events"] == 0
    assert r.steps[0][1] == pytest.approx(2.5)


def test_startup_waits_for_peers_then_gives_up_after_startup_timeout():
    r = Rig(peers_after=0.5, duration=0.004).run()
    assert r.settled and r.published[0] == (0, pytest.approx(0.5, abs=0.011))
    r2 = Rig(peers_after=1e9, startup_timeout=3.0, duration=0.004).run()
    assert not r2.settled
    (err,) = r2.log.having("start-up: 0/1 /joint_states subscribers after 3 s; starting anyway")
    assert err[1] == pytest.approx(3.0, abs=0.011)
    assert r2.log.having("start-up: waiting for subscribers")
    assert len(r2.steps) == 4                 # then runs as usual


def test_stop_request_ends_the_run():
    r = Rig(duration=0.0)
    r.clock.at(0.0305, r.sched.request_stop)
    r.run()
    assert 0 < len(r.steps) < 1000 and r.sched.summary().startswith("stopped at t = ")


# ---------------------------------------------------------------- realtime
def test_realtime_late_command_counts_a_miss_and_a_late_step_applies_it():
    # tick k's sample goes out after step 2k-1 (scheduled at wall0 + (2k-1) ms), its command is due at
    # the scheduled start of the period after tick k's (step 2k+2). Tick 4's answer takes 3.5 ms: it
    # arrives at wall0 + 10.5 ms, during step 9, which runs 2 ms late: step 10 starts after the arrival,
    # though its scheduled time (wall0 + 10 ms) is before it.
    r = Rig(lockstep=False, latency=lambda k: 0.0035 if k == 4 else 5e-4, duration=0.03)
    r.step_cost[9] = 0.002
    r.run()
    s = r.sched
    assert s.counters["deadline_misses"] == 1 and s.counters["overruns"] == 0
    taus, walls = r.taus(), r.step_walls()
    wall0 = walls[0]
    assert walls[10] > r.answered[4] and r.answered[4] == pytest.approx(wall0 + 0.0105)
    assert np.array_equal(taus[:10], [0, 0, 1, 1, 2, 2, 3, 3, 3, 3])   # tick 4's: not there for step 8
    # step 10 runs behind its schedule: it applies the newest command there is (tick 4's), not the
    # older one that was there by its scheduled time; the miss is counted all the same
    assert taus[10] == 4.0 and taus[11] == 4.0
    # steps 10 and 11 both ran at wall0 + 11 ms: the answers to ticks 5 and 6 were both there for step 12
    assert taus[12] == 6.0 and 5.0 not in taus
    assert s.counters["commands_applied"] == len(np.unique(taus)) == 14
    fields, ticks, lat, _ = s.diagnostics()
    assert list(fields) == list(DIAG_FIELDS) and fields["deadline_misses"] == 1.0
    assert np.isnan(lat[ticks.index(4)]) and lat[ticks.index(3)] == pytest.approx(500.0)


class SyncChainRig(Rig):
    """Realtime with the control chain in the bridge's thread (the container): publishing tick k's
    sample computes its command, which takes ``cost(k)`` wall seconds, then offers it."""

    def __init__(self, cost, **cfg):
        super().__init__(lockstep=False, latency=lambda k: None, **cfg)
        self.cost = cost

    def publish_sample(self, step):
        super().publish_sample(step)
        if step % SPT == 0:
            k = step // SPT
            self.clock._advance(self.clock.t + self.cost(k))
            self.answered[k] = self.clock.t
            self.sched.offer_command(cmd(k))


def test_realtime_overload_applies_the_newest_command_not_a_stale_one():
    """A control chain that takes longer than a period (2.5 ms per 2 ms tick): the bridge falls behind
    its schedule by 0.5 ms a tick. Every step still applies the command of its own tick (the newest,
    computed just before it), where judging arrivals by the scheduled time applied ever older ones;
    whenever a tick step is a whole period behind, that period's slot is dropped from the schedule
    and counted as a missed deadline (a robot's controller at 2.5 ms a tick answers 4 samples in 5):
    the bridge never races to catch up, never sleeps, and runs at 2 / 2.5 = 0.8x real time."""
    r = SyncChainRig(cost=lambda k: 0.0025, duration=1.0).run()
    s = r.sched
    taus = r.taus()
    ticks = np.arange(len(taus)) // SPT
    assert len(taus) == 1000 and np.array_equal(taus, ticks)            # never stale
    assert 123 <= s.counters["overruns"] <= 125                          # 500 ticks, one slot dropped per 4
    lost = s.timing.ticks_closed - 499
    assert lost == s.counters["overruns"]                                # a slot each time
    # the answers arrive 2.5 ms after their sample: after their deadline once the bridge is > 0.5 ms
    # behind (3 ms after the tick sample's slot), i.e. in 3 ticks of every 4; plus the dropped slots
    assert s.counters["deadline_misses"] == s.timing.deadline_misses == lost + 247
    assert np.allclose(np.diff(r.step_walls()[1:])[::2], 0.0025)        # no sleep: 2.5 ms a tick, evenly
    assert "0 watchdog events; realtime: " in s.summary() and "overruns, 0.80x real time" in s.summary()
    # a chain that takes 1.5 ms keeps up: no miss, no overrun, fresh commands as well
    ok = SyncChainRig(cost=lambda k: 0.0015, duration=0.2).run()
    assert ok.sched.counters["deadline_misses"] == 0 and ok.sched.counters["overruns"] == 0
    assert np.array_equal(ok.taus(), np.arange(200) // SPT)


def _answered_ticks(r) -> np.ndarray:
    """The tick each physics step's command answered (the Rig's commands carry their tick as torque)."""
    return r.taus()


def test_realtime_world_waits_for_a_controller_that_fell_behind():
    """Answers take 7 ms (3.5 ticks): a robot would run on ever older torques. With
    ``max_command_age_ticks`` 2 no step of tick j applies a command answering a tick before j - 2: the
    simulation waits for its controller (counted, the real-time factor drops); -1 runs on, as before."""
    for age, delay in ((2, 0), (0, 0), (0, 2)):
        r = Rig(lockstep=False, latency=lambda k: 0.007, duration=0.1, max_command_age_ticks=age, delay=delay).run()
        ticks = np.arange(len(r.steps)) // SPT
        answered = _answered_ticks(r)
        live = ticks >= delay + 4                       # after the first answer and the delay
        assert np.all(answered[live] >= ticks[live] - delay - age), age
        assert np.all(answered[live] <= ticks[live] - delay)                 # never one it may not act on
        assert r.sched.counters["controller_waits"] > 0
        assert f"{r.sched.counters['controller_waits']} waits for the controller" in r.sched.summary()
        rtf = 0.1 / (r.step_walls()[-1] - r.step_walls()[0])
        assert rtf < 0.9                                 # 2 ms of sim per 7 / 3 ms with age 2, less with less
    run_on = Rig(lockstep=False, latency=lambda k: 0.007, duration=0.1, max_command_age_ticks=-1).run()
    ticks = np.arange(len(run_on.steps)) // SPT
    assert np.min(_answered_ticks(run_on)[ticks >= 8] - ticks[ticks >= 8]) == -4     # 3.5 ticks old and more
    assert run_on.sched.counters["controller_waits"] == 0
    assert 0.1 / (run_on.step_walls()[-1] - run_on.step_walls()[0]) == pytest.approx(1.0, abs=0.02)
    fields, *_ = run_on.sched.diagnostics()
    assert fields["controller_waits"] == 0.0 and list(fields) == list(DIAG_FIELDS)


class PolledRig(Rig):
    """Realtime with inputs this thread reads itself (the split's host link): answers land in an inbox
    at their time; ``poll_inputs`` delivers what is there, ``wait_inputs`` blocks until the next one."""

    def __init__(self, **kw):
        super().__init__(lockstep=False, **kw)
        self.inbox: list = []
        self.polls = self.blocked = 0

    def publish_sample(self, step):
        lat = self.latency(step // SPT) if step % SPT == 0 else None
        if lat is not None:
            self.inbox.append((self.clock.t + lat, step // SPT))
        Rig.publish_sample(self, 1)                 # as a sample between ticks: the Rig schedules no answer

    def poll_inputs(self):
        self.polls += 1
        for item in [i for i in self.inbox if i[0] <= self.clock.t]:
            self.inbox.remove(item)
            self.sched.offer_command(cmd(item[1]), arrived=item[0])

    def wait_inputs(self, timeout):
        self.blocked += 1
        nxt = min((i[0] for i in self.inbox), default=np.inf)
        self.clock.sleep(max(0.0, min(nxt - self.clock.t, timeout)))


def test_realtime_world_waits_reading_its_own_inputs():
    """The same wait when the bridge's thread reads its inputs itself: it blocks on them, not 1 ms sleeps."""
    r = PolledRig(latency=lambda k: 0.007, duration=0.1).run()
    ticks = np.arange(len(r.steps)) // SPT
    live = ticks >= 4
    assert np.all(r.taus()[live] >= ticks[live] - 2) and r.sched.counters["controller_waits"] > 0
    assert r.blocked >= r.sched.counters["controller_waits"]


def test_realtime_world_stops_waiting_for_a_silent_controller():
    """The controller stops answering after tick 10: the simulation waits ``watchdog_timeout`` wall
    seconds once (logged), then steps on without waiting again, and the sim-time watchdog damps."""
    r = Rig(lockstep=False, duration=0.06, watchdog_timeout=0.01, latency=lambda k: 1e-4 if k <= 10 else None).run()
    s = r.sched
    assert s.counters["controller_waits"] == 1 and s.counters["watchdog_events"] == 1
    assert len(r.log.having("no command fresh enough")) == 1
    walls = r.step_walls()
    gap = np.diff(walls)
    assert gap.max() == pytest.approx(0.01, abs=2e-3) and np.sum(gap > 2e-3) == 1   # one wait, one timeout long
    damp = np.clip(-5.0 * DQ, -LIMIT, LIMIT)
    assert np.array_equal(r.steps[-1][2], damp)


def test_command_delay_lockstep_applies_tick_k_minus_n_and_damps_before():
    """``command_delay_ticks`` N = 2 in lockstep: the handshake waits for each tick's command, the
    steps of tick k get tick k-2's; the first two ticks are damped (as before a first command)."""
    r = Rig(latency=lambda k: 0.05, duration=0.02, delay=2).run()
    damp = np.clip(-5.0 * DQ, -LIMIT, LIMIT)
    for step, wall, tau in r.steps:
        k = step // SPT
        assert wall >= r.answered[k]                       # still lockstep: tick k's command was there
        assert np.array_equal(tau, damp if k < 2 else np.full(N, k - 2.0)), step
    assert r.sched.counters["commands_applied"] == 8 and r.sched.tick == 10
    assert r.sched.summary() == "duration reached: t = 0.020 s, 8 commands applied, 0 watchdog events"
    # a tick without a command (watchdog) is damped at once, and its slot in the line stays empty
    r = Rig(latency=lambda k: None if k == 4 else 1e-4, duration=0.02, delay=2, watchdog_timeout=0.1).run()
    expect = [damp if k in (0, 1, 4, 6) else np.full(N, k - 2.0) for k in range(10)]
    for step, _, tau in r.steps:
        assert np.array_equal(tau, expect[step // SPT]), step


def test_command_delay_realtime_acts_from_tick_k_plus_n_and_gives_n_more_periods():
    """Realtime, N = 2: a command answering tick k acts from the first step of tick k+2, never before
    (even when it came early), the steps before get damping; its deadline is the start of tick k+3,
    so answers 3.5 ms after the sample (a miss every tick with N = 0) are all in time."""
    damp = np.clip(-5.0 * DQ, -LIMIT, LIMIT)
    for latency in (1e-4, 0.0035):
        r = Rig(lockstep=False, latency=lambda k, lat=latency: lat, duration=0.04, delay=2).run()
        for step, _, tau in r.steps:
            k = step // SPT
            assert np.array_equal(tau, damp if k < 2 else np.full(N, k - 2.0)), (latency, step)
        assert r.sched.counters["deadline_misses"] == 0 and r.sched.timing.ticks_closed == 17
        assert r.sched.summary().endswith("real time, command delay 2 ticks")
    late = Rig(lockstep=False, latency=lambda k: 0.0035, duration=0.04).run()
    assert late.sched.counters["deadline_misses"] == 18     # all of ticks 1..18 (tick 0's answer starts the clock)
    # untimed commands (hardware stamps) answer the tick of the sample they name: N = 1, answers to the
    # odd steps (the second sample of each tick) act from the next tick on
    u = WallStampRig(answers=lambda step: step % 2 == 1, duration=0.02, delay=1).run()
    for step, _, tau in u.steps:
        k = step // SPT
        assert np.array_equal(tau, damp if k < 1 else np.full(N, 2.0 * (k - 1) + 1)), step


class WallStampRig(Rig):
    """Realtime, untimed commands: the samples are stamped off the grid (a hardware clock) and noted
    with the scheduler; the controller answers the samples ``answers(step)`` picks, carrying their stamp."""

    W = 1_760_000_000_123_456_789

    def __init__(self, answers, latency=2e-4, **cfg):
        super().__init__(lockstep=False, latency=lambda k: None, command_timing="untimed", **cfg)
        self.answers, self.lat = answers, latency

    def stamp(self, step):
        return self.W + step * 1_000_000 + (step * 7919) % 300_000          # jittered, never on a 2 ms grid

    def publish_sample(self, step):
        self.sched.note_sample(self.stamp(step), step)
        super().publish_sample(step)
        if self.answers(step):
            c = SimpleNamespace(tick=-1, tau=np.full(N, float(step)), stamp_ns=self.stamp(step))
            self.answered[step] = self.clock.t + self.lat
            self.clock.at(self.clock.t + self.lat, lambda c=c: self.sched.offer_command(c))


def test_realtime_untimed_commands_naming_a_sample_stamp_are_timed_per_tick():
    # a sample-mode controller locked on the odd steps: each command answers the second sample of a
    # period and arrives 0.2 ms after it, before the next period starts: no miss, latency 200 us
    r = WallStampRig(answers=lambda step: step % 2 == 1, duration=0.04)
    r.run()
    s = r.sched
    assert s.counters["deadline_misses"] == 0 and s.counters["commands_applied"] == 20
    fields, ticks, lat, _ = s.diagnostics()
    assert ticks == list(range(19)) and np.allclose(lat, 200.0)     # the last period is never closed
    assert s.tick_of_stamp(r.stamp(37)) == 18 and s.tick_of_stamp(r.stamp(37) + 1) is None
    # every third period without an answer: exactly those are misses, the others timed
    r = WallStampRig(answers=lambda step: step % 2 == 1 and (step // 2) % 3 != 1, duration=0.04)
    r.run()
    fields, ticks, lat, _ = r.sched.diagnostics()
    missed = [k for k, x in zip(ticks, lat) if np.isnan(x)]
    assert missed == list(range(1, 19, 3))
    assert r.sched.counters["deadline_misses"] == len(missed)


def test_realtime_untimed_commands_with_unknown_stamps_count_as_misses():
    # stamps the bridge never published (the old untimed behaviour): applied, but no tick is timed
    r = WallStampRig(answers=lambda step: step % 2 == 0, duration=0.02)
    r.stamp = lambda step: 3 + step          # noted and answered with different stamps below
    r.sched.note_sample = lambda stamp, step: None
    r.run()
    s = r.sched
    assert s.counters["commands_applied"] == 10 and s.counters["deadline_misses"] == 9
    assert s.tick_of_stamp(3) is None


def test_realtime_paces_sim_time_at_the_factor_and_a_live_change_continues_without_a_jump():
    r = Rig(lockstep=False, duration=1.0, realtime_factor=2.0, latency=lambda k: 1e-4)
    r.set_cfg(0.25, realtime_factor=0.5)
    r.run()
    walls = r.step_walls()
    gaps = np.diff(walls)
    fast = np.isclose(gaps, 0.5e-3)
    slow = np.isclose(gaps, 2e-3)
    assert np.all(fast | slow)                          # sim time = factor * wall, no jump, no catching up
    n_fast = int(fast.sum())
    assert fast[:n_fast].all() and slow[n_fast:].all()  # factor 2, then 0.5
    assert 0.25 <= walls[n_fast] <= 0.25 + 1e-3         # from the step after the change
    assert len(walls) == 1000 and r.sched.counters["overruns"] == 0
    assert r.sched.counters["deadline_misses"] == 0


def test_realtime_overrun_reanchors_the_schedule():
    """One step takes 250 ms (a debugger, a stall): the slots of the 124 whole control periods it
    overran are dropped from the schedule and counted as missed deadlines (a robot's controller would
    have lost those ticks; the simulated world waits instead); the schedule goes on in its phase,
    without racing to catch up."""
    r = Rig(lockstep=False, duration=0.05, latency=lambda k: 1e-4)
    r.step_cost[20] = 0.25
    r.run()
    s = r.sched
    assert s.counters["overruns"] == 1 and s.counters["deadline_misses"] == 124 == s.timing.deadline_misses
    walls = r.step_walls()
    assert walls[21] == pytest.approx(walls[20] + 0.25)      # no sleep: far behind
    # paced again from step 22 on, in the old phase (124 slots of 2 ms later), not racing
    assert np.allclose(walls[22:], walls[0] + 0.248 + np.arange(22, 50) * 1e-3)
    assert len(walls) == 50
    fields, ticks, lat, _ = s.diagnostics()
    assert ticks.count(-1) == 124 and all(np.isnan(lat[i]) for i, t in enumerate(ticks) if t == -1)


def test_realtime_watchdog_in_sim_seconds_and_startup_timeout():
    # commands stop after tick 10; watchdog_timeout 0.01 sim s -> damping from step 21 + 10 on
    r = Rig(lockstep=False, duration=0.06, watchdog_timeout=0.01, latency=lambda k: 1e-4 if k <= 10 else None).run()
    s = r.sched
    assert s.counters["watchdog_events"] == 1 and s.watchdog_active
    count_at_arrival = sum(1 for _, w, _ in r.steps if w <= r.answered[10])  # physics steps then
    damp = np.clip(-5.0 * DQ, -LIMIT, LIMIT)
    damped = [st for st, _, tau in r.steps if np.array_equal(tau, damp)]
    # more than 10 steps (0.01 sim s) after the last command
    assert damped and damped[0] == count_at_arrival + 11 and damped == list(range(damped[0], 60))
    r2 = Rig(lockstep=False, duration=0.004, startup_timeout=2.0, latency=lambda k: None).run()
    assert r2.log.having("watchdog: no command within the start-up timeout of 2 s")
    assert r2.steps[0][1] == pytest.approx(2.0) and len(r2.steps) == 4


def test_duration_stops_and_is_live():
    r = Rig(duration=0.01).run()
    assert len(r.steps) == 10 and r.published[-1][0] == 10 and r.sched.t_ns == 10_000_000
    r = Rig(lockstep=False, duration=0.0, latency=lambda k: 1e-4)    # until stopped ...
    r.set_cfg(0.0105, duration=0.03)                                # ... or, set live, 30 ms of sim time
    r.run()
    assert len(r.steps) == 30 and r.sched.t_ns == 30_000_000
    assert r.sched.summary().startswith("duration reached: t = 0.030 s, 15 commands applied, 0 watchdog events; "
                                        "realtime: 0 deadline misses, 0 overruns, ")


# ---------------------------------------------------------------- live parameters
def test_live_watchdog_timeout_and_damping_take_effect_on_the_next_tick():
    r = Rig(latency=lambda k: None if k in (5, 9) else 1e-4, duration=0.03, watchdog_timeout=0.5,
            watchdog_damping=5.0)
    r.set_cfg(0.1, watchdog_timeout=0.2, watchdog_damping=1.0)   # while waiting for tick 5 (since t = 0.0009)
    r.run()
    errs = r.log.having("watchdog: no command for tick")
    # tick 5 still uses the 0.5 s it started waiting with; tick 9, the new 0.2 s and 1 N m s/rad
    assert "tick 5" in errs[0][2] and "within 0.5 s" in errs[0][2] and "damping 1 N m s/rad" in errs[0][2]
    t9 = [w for st, w in r.published if st == 18][0]
    assert "tick 9" in errs[1][2] and "within 0.2 s" in errs[1][2] and errs[1][1] == pytest.approx(t9 + 0.2)
    assert np.array_equal(r.steps[10][2], np.clip(-1.0 * DQ, -LIMIT, LIMIT))
    assert np.array_equal(damping_torque(DQ, 3.0, LIMIT), np.clip(-3.0 * DQ, -LIMIT, LIMIT))


def test_live_republish_period():
    r = Rig(latency=lambda k: None if k == 0 else 1e-4, duration=0.004, republish_period=1.0, startup_timeout=10.0)
    r.set_cfg(0.5, republish_period=0.25)            # from the next re-publication on
    r.run()
    zero = [w for st, w in r.published if st == 0]
    assert zero[:5] == pytest.approx([0.0, 1.0, 1.25, 1.5, 1.75])
    assert r.log.having("watchdog: no command for tick 0 (t = 0.000 s) within 10 s wall")


def test_live_diagnostics_period():
    r = Rig(duration=0.2, latency=lambda k: 0.02, diagnostics_period=0.01)
    r.set_cfg(1.0, diagnostics_period=0.05)           # wall 1.0 s = sim 0.1 s
    r.run()
    times = np.array([d["sim_time"] for d in r.diags])
    gaps = np.round(np.diff(times), 6)
    assert set(gaps[times[1:] <= 0.1 + 1e-9]) == {0.01} and set(gaps[times[:-1] >= 0.1 - 1e-9]) == {0.05}
    assert all(d["watchdog_active"] == 0.0 and d["tick"] == round(d["sim_time"] / 0.002) for d in r.diags)


def test_live_progress_period():
    # 10 ms wall per sim ms; a diagnostics sample every tick
    r = Rig(duration=0.2, latency=lambda k: 0.02, diagnostics_period=0.002, progress_period=0.5)
    r.set_cfg(1.01, progress_period=0.2)
    r.run()
    walls = [w for w, _ in r.progress]
    assert np.allclose(walls, [0.5, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0], atol=0.021)
    assert all("commands applied" in p and "deadline misses" in p and "x real time" in p for _, p in r.progress)
    r.set_cfg(r.clock.t, progress_period=0.0)        # 0 = never
    r.clock.sleep(0.0)
    assert r.sched.diagnostics()[3] is None


def test_bridge_config_live_fields_and_validation():
    live = {f.name for f in schema(BridgeConfig) if not f.read_only}
    # what the scheduler re-reads every tick / step, plus the node's ground_truth_decimation
    assert live == {"duration", "watchdog_timeout", "watchdog_damping", "republish_period", "realtime_factor",
                    "ground_truth_decimation", "diagnostics_period", "progress_period", "max_command_age_ticks"}
    cfg = load_bridge_config()                       # config/mujoco_bridge.yaml: every name known, in range
    assert cfg == BridgeConfig()                     # ... and the defaults are the file's values
    with pytest.raises(ConfigError, match="watchdog_timeout"):
        dataclasses.replace(cfg, watchdog_timeout=0.0)
    with pytest.raises(ConfigError, match="mode"):
        BridgeConfig(mode="fast")
    with pytest.raises(ConfigError, match="max_command_age_ticks"):
        dataclasses.replace(cfg, max_command_age_ticks=-2)


# ---------------------------------------------------------------- the ROS node's wiring
class _CountingPub:
    topic_name = "/fake"

    def __init__(self):
        self.msgs = 0

    def get_subscription_count(self):
        return 1

    def has_subscribers(self):
        return True

    def publish(self, msg):
        self.msgs += 1

    def publish_value(self, value):
        self.msgs += 1


def test_node_live_parameters_reach_the_scheduler_and_the_publishers():
    """Every live bridge parameter set on the node (as ``legged-wbc param set`` does) lands in the
    scheduler's config; ground_truth_decimation changes which samples carry ground truth; read-only
    ones are refused."""
    rclpy = pytest.importorskip("rclpy")
    from rclpy.parameter import Parameter

    from mujoco_bridge.node import MujocoBridge

    rclpy.init(args=[])
    try:
        node = MujocoBridge(parameter_overrides=[Parameter("duration", value=0.5)])
        try:
            odom = node.pub_odom = _CountingPub()
            for step in range(1, 7):
                node.publish_sample(step)
            assert odom.msgs == 3                                     # decimation 2: steps 2, 4, 6
            new = {"duration": 1.5, "watchdog_timeout": 0.25, "watchdog_damping": 2.0, "republish_period": 0.5,
                   "realtime_factor": 3.0, "ground_truth_decimation": 1, "diagnostics_period": 0.02,
                   "progress_period": 1.0, "max_command_age_ticks": 5}
            live = {f.name for f in schema(BridgeConfig) if not f.read_only}
            assert set(new) == live
            for name, value in new.items():
                (res,) = node.set_parameters([Parameter(name, value=value)])
                assert res.successful, (name, res.reason)
            assert node.sched.cfg is node.cfg and node.cfg == dataclasses.replace(BridgeConfig(), **new)
            for step in range(7, 11):
                node.publish_sample(step)
            assert odom.msgs == 3 + 4                                 # decimation 1: every step
            (res,) = node.set_parameters([Parameter("mode", value="realtime")])
            assert not res.successful and node.sched.lockstep and node.cfg.mode == "lockstep"
            (res,) = node.set_parameters([Parameter("watchdog_timeout", value=0.0)])
            assert not res.successful and node.sched.cfg.watchdog_timeout == 0.25
        finally:
            node.destroy_node()
    finally:
        rclpy.shutdown()


@pytest.mark.parametrize("early", [True, False])
def test_realtime_intermediate_steps_run_once_their_command_is_there(early):
    """early_intermediate_steps: the step after a tick sample (it applies the tick's command and publishes
    only an intermediate sample) runs as soon as the command is there (in the container: right after the
    chain); the tick samples keep their 1 ms slots, so the physics never runs ahead by more than a step.
    Without it every step waits for its slot. The physics is the same either way."""
    runs = {}
    for e in (early, not early):
        r = SyncChainRig(cost=lambda k: 3e-4, duration=0.02, early_intermediate_steps=e)
        r.run()
        runs[e] = r
    r = runs[early]
    walls, wall0 = r.step_walls(), r.step_walls()[0]
    slots = [wall0 + s * 1e-3 for s in range(len(walls))]
    for s, w in enumerate(walls):
        if s % SPT == 1:                                  # publishes a tick sample: in its slot
            assert w == pytest.approx(slots[s], abs=1e-9)
        elif early and s >= 2:                            # right after the previous tick's chain
            assert w == pytest.approx(slots[s - 1] + 3e-4, abs=1e-9) and w < slots[s]
        else:
            assert w >= slots[s] - 1e-9
    assert np.array_equal(r.taus(), runs[not early].taus())
    assert r.sched.counters["deadline_misses"] == 0


def test_wall_stamps_keep_the_physics_clock_when_the_simulation_runs_behind():
    """sample_stamps: wall: on time or early, a stamp is the real publication time (driver-like jitter);
    when the simulation runs slower than real time the stamps' intervals stay the physics' (2 ms a
    tick), never the wall clock's: a stamp is never more than 1 ms after its schedule."""
    from mujoco_bridge.timing import WallStamps

    w = WallStamps(max_jitter_ns=1_000_000)
    t0 = 1_700_000_000_000_000_000
    assert w.stamp(0, t0) == t0
    assert w.stamp(2_000_000, t0 + 2_000_300) == t0 + 2_000_300          # 0.3 ms late: the real time
    assert w.stamp(4_000_000, t0 + 3_999_000) == t0 + 3_999_000          # early: the real time too
    # 0.8x real time: 2.5 ms of wall per 2 ms of physics, for a second
    stamps = [w.stamp(k * 2_000_000, t0 + k * 2_500_000) for k in range(3, 500)]
    gaps = np.diff(stamps)
    assert gaps.max() == 2_000_000 and gaps.min() >= 1_000_000           # the physics' tick, not 2.5 ms
    assert all(s - (t0 + k * 2_000_000) <= 1_000_000 for k, s in zip(range(3, 500), stamps))


# ------------------------------------------------------------------------------------ bounded commands
def test_over_limit_torque_is_clamped_at_the_bridge_counted_and_the_physics_unchanged(hexapod):
    """A command beyond a joint's effort limit (1e9 N m on a knee, -5e3 on a hip yaw) is clamped to the limit
    by the simulation's set_torque before MuJoCo, counted once per command in commands_clamped (a held
    command is not counted again), logged once a run, reported in /bridge/diagnostics; the physics is bit
    for bit what MuJoCo's own clamp of the raw torque gave, and the published effort is the applied torque."""
    import mujoco

    from legged_wbc.ros.nodekit.diagnostics import Window, bridge_status
    from mujoco_bridge.scenario_setup import BridgePhysics
    from mujoco_bridge.sim import MujocoSim

    n, q0 = hexapod.n, hexapod.stance_configuration()
    sim, raw = MujocoSim(hexapod), MujocoSim(hexapod)
    for s in (sim, raw):
        s.reset(q0)
    r = Rig()
    phys = BridgePhysics(sim, n, r.log, counters=r.sched.counters)
    knee, yaw = hexapod.leg_joints[0][2], hexapod.leg_joints[3][0]
    over = np.zeros(n)
    over[knee], over[yaw] = 1e9, -5e3
    within = 0.5 * hexapod.effort
    commands = [over] * 3 + [within, over.copy()]        # held for 3 steps, then two new commands
    for step, tau in enumerate(commands):
        phys.step(tau, step)
        raw.d.ctrl[:] = raw.conv.ctrl_from_tau(tau)       # what MuJoCo did with the raw command
        mujoco.mj_step(raw.m, raw.d)
        assert np.array_equal(sim.d.qpos, raw.d.qpos) and np.array_equal(sim.d.qvel, raw.d.qvel), step
    lim = sim.effort_limit
    assert lim[knee] == hexapod.effort[knee] and np.array_equal(sim.tau, np.clip(over, -lim, lim))
    assert sim.sensors().joint_effort[knee] == lim[knee] != raw.d.actuator_force[raw.conv.pin_to_act.tolist().index(knee)]
    assert r.sched.counters["commands_clamped"] == 2 == sim.commands_clamped
    said = r.log.having("beyond the effort limit")
    assert len(said) == 1 and hexapod.joint_names[knee] in said[0][2] and "clamped" in said[0][2]
    fields, *_ = r.sched.diagnostics()
    assert fields["commands_clamped"] == 2.0 and fields["commands_foreign"] == 0.0
    status = bridge_status(r.sched, Window(clock=lambda: 0.0))
    assert status.values["commands_clamped"] == "2" and "2 commands clamped" in status.message


def test_headless_loop_and_bridge_share_the_clamp(hexapod):
    """The headless loop holds its torque through the same set_torque: an over-limit torque is clamped
    and flags the joint as saturated for the steps it is held, exactly as MuJoCo's clamp did."""
    from mujoco_bridge.sim import MujocoSim

    sim = MujocoSim(hexapod)
    sim.reset(hexapod.stance_configuration())
    tau = np.zeros(hexapod.n)
    tau[hexapod.leg_joints[1][1]] = -1e4
    assert sim.set_torque(tau) and not sim.set_torque(np.zeros(hexapod.n)) and sim.commands_clamped == 1
    sim.set_torque(tau)
    sim.step(2)
    sat = sim.take_saturation()
    assert sat[hexapod.leg_joints[1][1]] and sat.sum() == 1
    sim.set_torque(np.zeros(hexapod.n))
    sim.step(1)
    assert not sim.take_saturation().any()


class _Pub:
    """An in-process publisher as the bus hands it to a subscriber (its node, or None over the host link)."""

    def __init__(self, name):
        self.node = None if name is None else SimpleNamespace(get_fully_qualified_name=lambda: name)


def _info(gid: int) -> dict:
    return {"publisher_gid": {"implementation_identifier": "rmw_fastrtps_cpp", "data": bytes([gid] * 16)}}


def test_command_sources_follow_one_publisher():
    """command_source: the bridge follows one publisher (by name, the first of the run, or the host link);
    every other one's commands are dropped, counted, and each such publisher logged once."""
    from mujoco_bridge.command_source import UNNAMED_PATIENCE, CommandSources, check_command_source

    names = {bytes([1] * 16): "/wbc_controller", bytes([2] * 16): "/intruder"}
    node_name = lambda info: names.get(info["publisher_gid"]["data"])      # noqa: E731
    log, counters = Log(), {}
    s = CommandSources("wbc_controller", node_name, counters, log)
    assert s.check(_info(2)) is False and s.check(_info(2)) is False and s.check(_info(3)) is False
    assert len(log.having("torque commands from")) == 1       # gid 3: the graph does not name it yet
    assert s.check(_info(1)) is True and s.check(_info(1)) is True
    assert s.alarm is None
    twin = _Pub("/wbc_controller")
    assert s.check(twin) is False and s.check(twin) is False  # the same name, another publisher: not followed,
    alarms = log.having("ALARM")                              # an alarm naming both (once per publisher)
    assert len(alarms) == 1 and alarms[0][0] == "error", log.lines
    assert f"gid {bytes([1] * 16).hex()}" in alarms[0][2] and "gid unknown, pid unknown" in alarms[0][2]
    assert s.alarm.startswith("two publishers named /wbc_controller on /joint_torque_cmd")
    names[bytes([3] * 16)] = "/late_intruder"                 # discovery caught up: named in its line
    assert s.check(_info(3)) is False and s.check(_info(3)) is False
    for _ in range(UNNAMED_PATIENCE):                         # never named: said as unknown, once
        assert s.check(_info(4)) is False
    said = log.having("torque commands from")
    assert counters["commands_foreign"] == 7 + UNNAMED_PATIENCE and len(said) == 3
    assert ["/intruder" in said[0][2], "/late_intruder" in said[1][2], "(unknown node)" in said[2][2]] == [True] * 3
    assert f"gid {bytes([2] * 16).hex()}, pid unknown" in said[0][2]
    first = CommandSources("first", node_name, {}, Log())
    assert first.check(_info(2)) is None                       # undecided until a well-formed command
    first.follow(_info(2))
    assert first.check(_info(2)) is True and first.check(_info(1)) is False and first.followed_name == "/intruder"
    # followed before the graph names it: the line waits for the name (the commands are applied meanwhile)
    late_log = Log()
    late = CommandSources("first", node_name, {}, late_log)
    late.follow(_info(5))
    assert late.check(_info(5)) is True and not late_log.having("following")
    names[bytes([5] * 16)] = "/outside_controller"
    assert late.check(_info(5)) is True and late.check(_info(5)) is True
    said = late_log.having("following")
    assert len(said) == 1 and "following /outside_controller (gid 0505" in said[0][2]
    assert ", pid unknown), the first publisher of the run;" in said[0][2]
    own, intruder = _Pub("/wbc_controller"), _Pub("/intruder")
    inproc = CommandSources("/wbc_controller", node_name, {}, Log())
    assert inproc.check(intruder) is False and inproc.check(own) is True and inproc.check(_info(1)) is False
    link = CommandSources("link", node_name, {}, Log())
    assert link.check(own) is False and link.check(_Pub(None)) is True
    for ok in ("first", "link", "launch", "/wbc_controller", "ns/wbc_controller", "wbc_controller"):
        assert check_command_source(ok) is None
    for bad in ("", "/", "a b", "9x", "/x/"):
        assert "command_source" in check_command_source(bad)
    with pytest.raises(ConfigError, match="command_source"):
        BridgeConfig(command_source="not a name")


def test_command_source_launch_follows_the_handed_over_gid_only():
    """command_source: launch: nothing is followed before the launch's handover; then its GID only, whatever
    the others are called; an impostor under the controller's name that came first is said once both are
    known, as one alarm naming both (GID, pid); without a handover the name rule takes over after the patience."""
    from legged_wbc.ros.nodekit.launch_identity import Identity
    from mujoco_bridge.command_source import HANDOVER_PATIENCE_S, CommandSources

    names = {bytes([1] * 16): "/wbc_controller", bytes([2] * 16): "/wbc_controller", bytes([3] * 16): "/other"}
    node_name = lambda info: names.get(info["publisher_gid"]["data"])      # noqa: E731
    handover = []
    log, counters = Log(), {}
    s = CommandSources("launch", node_name, counters, log, identity=lambda: handover[0] if handover else None)
    for _ in range(3):
        assert s.check(_info(2)) is False                      # the impostor, first: never followed
    assert s.check(_info(3)) is False and not log.having("ALARM")
    handover.append(Identity(bytes([1] * 16), 4321, "/wbc_controller", "/joint_torque_cmd"))
    assert s.check(_info(1)) is True and s.check(_info(2)) is False and s.check(_info(1)) is True
    following, alarms = log.having("following"), log.having("ALARM")
    assert len(following) == 1 and f"gid {bytes([1] * 16).hex()}, pid 4321" in following[0][2]
    assert len(alarms) == 1 and f"gid {bytes([1] * 16).hex()}, pid 4321" in alarms[0][2]
    assert f"gid {bytes([2] * 16).hex()}, pid unknown" in alarms[0][2] and s.alarm
    assert counters["commands_foreign"] == 5 and len(log.having("torque commands from")) == 1   # /other
    # no handover at all: the first publisher named /wbc_controller after the patience, the next one an alarm
    clock = SimpleNamespace(t=0.0)
    log = Log()
    s = CommandSources("launch", node_name, {}, log, clock=lambda: clock.t)
    assert s.check(_info(2)) is False
    clock.t = HANDOVER_PATIENCE_S
    assert s.check(_info(2)) is True and s.check(_info(1)) is False
    assert len(log.having("no publisher identity handed over")) == 1 and len(log.having("ALARM")) == 1
    # pinned (a container's own controller): a DDS publisher of the same name is an alarm from its first command
    log = Log()
    s = CommandSources("first", node_name, {}, log)
    own = _Pub("/wbc_controller")
    s.pin(own, "/wbc_controller", how="composed in this process")
    assert s.check(_info(1)) is False and not log.lines           # both said at its first command (tick 0)
    assert s.check(own) is True and len(log.having("ALARM")) == 1 and len(log.having("composed in this process")) == 2


def test_bridge_in_a_container_applies_its_own_controller_s_commands_only(ros_context):
    """In-process delivery (a container's bus): the bridge follows the named controller's publisher; a
    command of a co-located intruder node is counted as foreign and never reaches the scheduler."""
    from rclpy.node import Node
    from rclpy.parameter import Parameter
    from rclpy.qos import QoSProfile
    from sensor_msgs.msg import JointState

    from legged_wbc.ros.io import adapters
    from legged_wbc.ros import io as ros_io
    from legged_wbc.ros.transport import endpoints
    from legged_wbc.ros.transport.intra_process import IntraProcessBus
    from mujoco_bridge.node import MujocoBridge

    bus = IntraProcessBus()
    with bus.active():
        bridge = MujocoBridge(context=ros_context, parameter_overrides=[
            Parameter("command_source", value="/wbc_controller"), Parameter("scenario", value="none")])
        pubs = {}
        for name in ("intruder", "wbc_controller"):
            node = Node(name, context=ros_context)
            msg = ros_io.torque_command_msg(0, bridge.joint_names, np.zeros(bridge.n))
            pubs[name] = (node, endpoints.create_publisher(node, JointState, ros_io.TOPIC_TORQUE_CMD, QoSProfile(depth=10),
                                                        adapter=adapters.JointStateAdapter(msg)))
    bus.finalize()
    try:
        def send(name, torque):
            pubs[name][1].publish_value(adapters.JointSample(0, bridge.joint_names, np.zeros(bridge.n),
                                                             np.zeros(bridge.n), np.full(bridge.n, torque)))

        send("intruder", 1e9)
        assert bridge.sched._pending is None and bridge.sched.counters["commands_foreign"] == 1
        send("wbc_controller", 1.0)
        assert bridge.sched._pending is not None and np.all(bridge.sched._pending.tau == 1.0)
        send("intruder", 1e9)
        assert np.all(bridge.sched._pending.tau == 1.0) and bridge.sched.counters["commands_foreign"] == 2
    finally:
        for node, _ in pubs.values():
            node.destroy_node()
        bridge.destroy_node()
