"""Velocity commands (wbc_controller.blocks.command): the command filter, the body reference it
drives, the gait clock that stops and restarts the gait, the command's kernels against their numpy
references, and a short headless turn in place."""

from __future__ import annotations

import math
from collections import namedtuple
from types import SimpleNamespace

import numpy as np
import pytest

from legged_wbc.gait import SUPPORT, GaitConfig, GaitScheduler
from wbc_controller.blocks.command import (CMD_SIZE, CMD_WZ, CommandLimits, CommandReference, CommandSchedule,
                                           CommandState, Commander, GaitClock, VelocityCommand, gait_phases)
from wbc_controller.blocks.swing import command_foothold, command_foothold_reference
from wbc_controller.blocks.tasks import BodyReference, attitude_task_command, body_task_reference, yaw_rotation

DT = 0.002
LIMITS = CommandLimits((0.3, 0.15, 0.5), (0.3, 0.3, 1.0), 0.5, 1.0)


def test_filter_clamps_each_axis_and_counts_the_clamped_commands():
    f = VelocityCommand(LIMITS)
    assert f.set(1.0, -1.0, 0.2, 0.0) and f.clamped == 1
    assert f.target.tolist() == [0.3, -0.15, 0.2]
    assert not f.set(0.1, 0.0, -0.5, 0.1) and f.clamped == 1       # at the limit: not clamped
    assert f.set(0.0, 0.0, -2.0, 0.2) and f.clamped == 2
    with pytest.raises(ValueError):
        f.set(math.nan, 0.0, 0.0, 0.3)
    assert f.target.tolist() == [0.0, 0.0, -0.5] and f.clamped == 2   # a bad command changes nothing


def test_filter_reaches_the_target_through_the_acceleration_limits():
    f = VelocityCommand(LIMITS)
    f.set(0.3, -0.15, 0.5, 0.0)
    t, vs = 0.0, []
    for k in range(1000):
        t = k * DT
        f.set(0.3, -0.15, 0.5, t)
        v, a = f.step(t)
        vs.append(v.copy())
        assert np.all(np.abs(a) <= np.array(LIMITS.a_max) + 1e-12)
    vs = np.array(vs)
    steps = np.abs(np.diff(vs, axis=0))
    assert np.all(steps <= np.array(LIMITS.a_max) * DT * (1 + 1e-9))
    # 0.3 m/s at 0.3 m/s^2: reached after 1 s, exactly; 0.5 rad/s at 1 rad/s^2 after 0.5 s
    assert vs[499, 0] < 0.3 and vs[501, 0] == 0.3 and vs[-1].tolist() == [0.3, -0.15, 0.5]
    assert vs[249, 2] < 0.5 and vs[251, 2] == 0.5


def test_a_stale_command_counts_as_zero_and_the_robot_decelerates_to_exactly_zero():
    f = VelocityCommand(LIMITS)
    f.set(0.2, 0.0, 0.0, 0.0)
    for k in range(1000):                     # set once at t = 0, older than 0.5 s from t = 0.5 s
        v, _ = f.step(k * DT)
        if k * DT <= 0.5:
            assert v[0] == min(0.2, 0.3 * k * DT) or abs(v[0] - min(0.2, 0.3 * k * DT)) < 1e-12
    assert f.effective_target(0.6).tolist() == [0.0, 0.0, 0.0]
    assert v.tolist() == [0.0, 0.0, 0.0]     # 0.2 m/s takes 0.67 s to stop: done by 2 s


def _advance(ref, cmds, out):
    for k, c in enumerate(cmds):
        ref.advance(k * DT, c, out)


def test_reference_turning_in_place_has_yaw_wz_t():
    ref, out = CommandReference(), np.zeros(CMD_SIZE)
    ref.reset((1.0, 2.0), 0.0)
    wz, n = 0.3, 5001
    _advance(ref, [CommandState(0.0, 0.0, wz, 0.0, 0.0, 0.0, 0.0, False)] * n, out)
    assert abs(ref.yaw - wz * (n - 1) * DT) < 1e-12
    assert ref.p.tolist() == [1.0, 2.0]


def test_reference_on_an_arc_stays_on_the_circle_of_radius_v_over_wz():
    ref, out = CommandReference(), np.zeros(CMD_SIZE)
    ref.reset((0.0, 0.0), 0.0)
    v, wz = 0.1, 0.2
    centre = np.array([0.0, v / wz])          # to the left of a robot heading along x, turning left
    for k in range(20000):                     # 40 s: more than a full circle
        ref.advance(k * DT, CommandState(v, 0.0, wz, 0.0, 0.0, 0.0, 0.0, False), out)
        assert abs(np.hypot(*(ref.p - centre)) - v / wz) < 1e-9
    # the world velocity and acceleration of the reference: tangent, and centripetal v wz
    vel, acc = out[2:4], out[4:6]
    assert abs(np.hypot(*vel) - v) < 1e-12 and abs(np.hypot(*acc) - v * wz) < 1e-12
    assert abs(vel @ (ref.p - centre)) < 1e-9 and acc @ (centre - ref.p) > 0


def test_schedule_holds_each_entry_until_the_next():
    s = CommandSchedule([(1.0, 0.1, 0.0, 0.0), (2.0, 0.0, 0.0, 0.3)])
    assert s.at(0.5) == (0.0, 0.0, 0.0) and s.at(1.0) == (0.1, 0.0, 0.0) and s.at(1.999) == (0.1, 0.0, 0.0)
    assert s.at(2.0) == (0.0, 0.0, 0.3) and s.at(100.0) == (0.0, 0.0, 0.3)


def _tripod():
    return GaitScheduler(GaitConfig(groups=(("a", "c"), ("b", "d")), period=1.0, duty=0.6, start_time=3.0),
                         ["a", "b", "c", "d"])


def test_gait_clock_is_the_time_while_never_paused():
    clock = GaitClock(_tripod())
    for k in range(4000):
        t = k * DT
        assert clock.step(t, DT if k else 0.0, False) == (t, False) or abs(clock.tau - t) < 1e-9
    cm = Commander(LIMITS, _tripod(), CommandSchedule([(0.0, 0.1, 0.0, 0.0)]))
    for k in range(3000):
        t = (k * 2_000_000) * 1e-9
        c = cm.tick(t)
        assert not c.paused and abs(c.tau - t) < 1e-9


def test_gait_pauses_only_with_every_leg_in_support_and_resumes_from_the_same_tau():
    gait = _tripod()
    cm = Commander(LIMITS, gait, CommandSchedule([(0.0, 0.1, 0.0, 0.0), (5.0, 0.0, 0.0, 0.0),
                                                  (9.0, 0.0, 0.0, 0.2)]))
    ph, pr, cy = np.empty(4, np.int64), np.empty(4), np.empty(4, np.int64)
    states = []
    for k in range(6000):
        t = k * DT
        c = cm.tick(t)
        gait_phases(gait, c.tau, False, ph, pr, cy)
        states.append((t, c.tau, c.paused, bool(np.all(ph == SUPPORT))))
    t, tau, paused, all_support = (np.array(x) for x in zip(*states))
    first = np.flatnonzero(paused)[0]
    # stopped: command zero from 5 s, the filter at zero by 5.34 s, stand_delay 1 s, then the next all-support
    assert 6.3 < t[first] < 7.4 and all_support[first] and not paused[first - 1]
    assert np.all(tau[paused] == tau[first])                       # held
    assert np.all(all_support[paused])
    resumed = np.flatnonzero(~paused & (t > t[first]))[0]
    assert abs(t[resumed] - 9.0) < 1e-9 and tau[resumed] == tau[first]   # resumes from the same tau
    assert abs(tau[resumed + 1] - tau[first] - DT) < 1e-12
    ph2, _, _ = gait.state(tau[first], paused=True)
    assert np.all(ph2 == SUPPORT)


def test_before_the_gait_starts_a_zero_command_holds_the_clock_at_the_start():
    cm = Commander(LIMITS, _tripod(), CommandSchedule([(0.0, 0.0, 0.0, 0.0), (4.0, 0.1, 0.0, 0.0)]))
    out = [cm.tick(k * DT) for k in range(2200)]
    held = [c for c in out if c.paused]
    assert held and all(c.tau < 3.0 for c in held) and abs(held[0].tau - (3.0 - DT)) < 1e-9
    assert not out[2000].paused and abs(out[2001].tau - 3.0) < 1e-9   # the gait starts with the command


def _held_run(cm, ticks=2400, live=None):
    """Ticks of ``cm`` (a live command ``live`` re-sent every tick when given) with the body reference
    integrated: ``(t, CommandState, reference x)`` per tick."""
    ref, out, rows = CommandReference(), np.zeros(CMD_SIZE), []
    for k in range(ticks):
        t = k * DT
        if live is not None:
            cm.set(*live, t)
        c = cm.tick(t)
        ref.advance(t, c, out)
        rows.append((t, c, out[0]))
    return rows


@pytest.mark.parametrize("t_cmd", [0.0, 0.1, 2.5])
def test_a_command_before_the_gait_is_held_then_followed_through_the_acceleration_limits(t_cmd):
    said = []
    cm = Commander(LIMITS, _tripod(), CommandSchedule([(t_cmd, 0.15, 0.0, 0.0)]))
    cm.on_held = said.append
    rows = _held_run(cm)
    before = [r for r in rows if r[0] < 3.0 - 1e-9]
    assert all(c.vx == 0.0 and c.ax == 0.0 and not c.paused for _, c, _ in before)
    assert all(x == 0.0 for _, _, x in before)                     # the body reference stays over the feet
    assert len(said) == 1 and cm.held == 1 and f"t={t_cmd:.3f} s held" in said[0]
    after = [r for r in rows if r[0] >= 3.0 - 1e-9]
    assert abs(after[0][1].tau - 3.0) < 1e-9 and not after[0][1].paused   # the gait starts on time
    vx = np.array([c.vx for _, c, _ in after])
    assert vx[0] == pytest.approx(0.3 * DT) and np.all(np.diff(vx) <= 0.3 * DT + 1e-12)
    assert vx[-1] == 0.15 and cm.held_t is None


def test_a_live_command_before_the_gait_is_held_and_a_withdrawn_one_lets_the_gait_wait():
    said = []
    cm = Commander(LIMITS, _tripod())
    cm.on_held = said.append
    rows = _held_run(cm, live=(0.1, 0.0, 0.2))
    assert all(c.vx == 0.0 and c.wz == 0.0 and x == 0.0 for t, c, x in rows if t < 3.0 - 1e-9)
    assert len(said) == 1 and rows[-1][1].wz > 0.0 and not rows[-1][1].paused
    # a command that stops before the start: the gait waits at its start (as with no command at all)
    cm = Commander(LIMITS, _tripod(), CommandSchedule([(0.1, 0.15, 0.0, 0.0), (0.5, 0.0, 0.0, 0.0)]))
    rows = _held_run(cm)
    assert all(c.vx == 0.0 for _, c, _ in rows) and rows[-1][1].paused and rows[-1][1].tau < 3.0
    assert cm.held == 1


def test_a_command_into_a_paused_gait_resumes_it_at_once():
    """Paused (after a stop, or waiting at the start): the command is followed from its tick (the
    clock resumes there, from a tau with every leg in support): nothing is held."""
    cm = Commander(LIMITS, _tripod(), CommandSchedule([(0.0, 0.0, 0.0, 0.0), (4.0, 0.1, 0.0, 0.0)]))
    rows = _held_run(cm, ticks=2100)
    first = next(c for t, c, _ in rows if abs(t - 4.0) < 1e-9)
    assert first.vx > 0.0 and not first.paused and cm.held == 0


def test_headless_command_before_the_gait_no_slide_no_violation():
    """The command sent before the gait starts (issue: the base slid 0.40 m over planted feet and the
    support legs' relative pitch broke its bound when the gait started)."""
    from legged_wbc.closed_loop import ClosedLoop
    from legged_wbc.metrics import violation
    from legged_wbc.scenario import load_scenario

    sc = load_scenario("nominal", ["commands=[{t: 0.1, vx: 0.15, vy: 0, wz: 0}]"])
    loop = ClosedLoop(sc, "cbf")
    said = []
    loop.commander.on_held = said.append
    res = loop.run(5.0)
    S = res.series
    t, bp = S["t"], S["base_pos"]
    pre = t < sc.gait_start
    assert np.hypot(*(bp[pre, :2] - bp[0, :2]).T).max() <= 0.01
    v = violation(S["theta"], loop.wcfg.theta_min, loop.wcfg.theta_max) * S["support"]
    assert not res.fell and v.max() == 0.0 and int(np.count_nonzero(~S["qp_accepted"])) == 0
    assert len(said) == 1
    assert bp[-1, 0] - bp[np.searchsorted(t, sc.gait_start), 0] > 0.1     # and it walks after


def test_attitude_rows_under_a_yaw_rate_match_the_geometric_law():
    rng = np.random.default_rng(3)
    cfg = SimpleNamespace(_kp_pos=np.zeros(3), _kd_pos=np.zeros(3), _kp_rot=np.array([900.0, 800.0, 400.0]),
                          _kd_rot=np.array([60.0, 50.0, 40.0]))
    par = namedtuple("Par", "kp_rot kd_rot")(cfg._kp_rot, cfg._kd_rot)
    for _ in range(50):
        a = rng.normal(size=3) * 0.2
        R = yaw_rotation(rng.uniform(-3, 3)) @ _rot(a)
        R_d = _rot(rng.normal(size=3) * 0.05) @ yaw_rotation(rng.uniform(-3, 3))
        v = np.r_[rng.normal(size=3) * 0.1, rng.normal(size=3) * 0.5]
        cmd = np.zeros(CMD_SIZE)
        cmd[CMD_WZ], cmd[CMD_WZ + 1] = rng.normal() * 0.4, rng.normal()
        acc, e = np.zeros(6), np.zeros(3)
        attitude_task_command(R_d, cmd, R, v, par, acc, e)
        ref = BodyReference(p=np.zeros(3), v=np.zeros(3), a=np.zeros(3), R=R_d, w=np.array([0, 0, cmd[CMD_WZ]]),
                            w_dot=np.array([0, 0, cmd[CMD_WZ + 1]]))
        want = body_task_reference(cfg, ref, np.zeros(3), R, v[:3], v[3:6])[3:]
        assert np.allclose(acc[3:], want, rtol=0, atol=1e-12 * max(1.0, np.abs(want).max()))


def _rot(a):
    """Rotation of the axis-angle vector ``a``."""
    th = np.linalg.norm(a)
    if th == 0:
        return np.eye(3)
    k = a / th
    K = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return np.eye(3) + math.sin(th) * K + (1 - math.cos(th)) * K @ K


def test_foothold_puts_the_hip_over_the_foot_at_mid_stance():
    rng = np.random.default_rng(7)
    T, k = 0.6, 0.5
    for _ in range(100):
        r, v, wz = rng.normal(size=2) * 0.3, rng.normal(size=2) * 0.2, rng.normal() * 0.5
        x, y = command_foothold(r[0], r[1], v[0], v[1], wz, k, T)
        p = np.array([x, y])
        assert np.allclose(p, command_foothold_reference(r, v, wz, k, T), rtol=0, atol=1e-13)
        # the world-fixed foot, seen from the base moving at (v, wz) for k T, is at the stance point
        yaw, pos = 0.0, np.zeros(2)
        n = 2000
        for _ in range(n):                      # base pose integrated exactly (constant twist)
            h = 0.5 * wz * k * T / n
            c, s = math.cos(yaw + h), math.sin(yaw + h)
            f = k * T / n * (math.sin(h) / h if h else 1.0)
            pos += f * np.array([c * v[0] - s * v[1], s * v[0] + c * v[1]])
            yaw += wz * k * T / n
        c, s = math.cos(yaw), math.sin(yaw)
        seen = np.array([[c, s], [-s, c]]) @ (p - pos)          # the foot in the base frame then
        assert np.allclose(seen, r, atol=1e-12)
    # a known answer: turning in place the foot lands at the stance point turned by wz k T
    x, y = command_foothold(0.3, 0.0, 0.0, 0.0, 0.4, 0.5, 0.6)
    assert np.allclose([x, y], [0.3 * math.cos(0.12), 0.3 * math.sin(0.12)], atol=1e-15)
    assert command_foothold(0.3, 0.1, 0.1, -0.05, 0.0, 0.5, 0.6) == (0.3 + 0.03, 0.1 - 0.015)


def test_headless_turn_in_place_yaw_follows_the_command():
    from legged_wbc.closed_loop import ClosedLoop
    from legged_wbc.scenario import load_scenario

    sc = load_scenario("paper", ["disturbance.enabled=false",
                                 "commands=[{t: 0, vx: 0, vy: 0, wz: 0}, {t: 3, vx: 0, vy: 0, wz: 0.3}]"])
    res = ClosedLoop(sc, "cbf").run(7.0)
    S, m = res.series, res.metrics
    assert not res.fell and m["qp_failures"] == 0 and m["max_violation_rad"] == 0.0
    x, y, z, w = S["base_quat"][-1]
    yaw = math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
    # 0.3 rad/s from 3 s through the 1 rad/s^2 limit: 0.3 * 4 - 0.045 rad at 7 s
    assert abs(yaw - (0.3 * 4.0 - 0.045)) < 0.03
    assert m["yaw_rate_tracking_rmse_radps"] < 0.03 and m["velocity_tracking_rmse_mps"] < 0.01
    assert np.hypot(*S["base_pos"][-1, :2]) < 0.02                 # in place
    assert S["cmd_ref"][-1, 2] == pytest.approx(0.3 * (7.0 - DT - 3.0) - 0.045, abs=1e-3)


@pytest.mark.ros
def test_ros_stack_command_at_t0_is_held_until_the_gait(tmp_path, ros_env):
    """Lockstep container, the scenario's command at t = 0: said once, the base stays over its feet until
    the gait starts, no violation over the whole run (the bag's whole-run metrics)."""
    import subprocess
    import sys
    from pathlib import Path

    from legged_wbc.tools.analysis.bag_metrics import load_run, run_metrics

    root = Path(__file__).resolve().parent.parent
    sc = tmp_path / "cmd0.yaml"
    sc.write_text((root / "config" / "scenarios" / "nominal.yaml").read_text().rstrip()
                  + "\n  commands:\n    - {t: 0.0, vx: 0.15, vy: 0.0, wz: 0.0}\n")
    bag = tmp_path / "bag"
    r = subprocess.run([sys.executable, "-m", "legged_wbc.cli", "launch", "walking_sim", f"scenario:={sc}",
                        "duration:=4.5", f"record:={bag}"], env=ros_env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (r.stdout + r.stderr).count("held until the gait starts") == 1
    run = load_run(bag)
    t, bp = np.asarray(run.series["t"]), np.asarray(run.series["base_pos"])
    ok = ~np.isnan(bp[:, 0])
    pre = ok & (t < 3.0)
    assert np.hypot(*(bp[pre, :2] - bp[ok][0, :2]).T).max() <= 0.01
    assert bp[ok][-1, 0] > 0.05                                   # and it walks once the gait runs
    m = run_metrics(run)
    assert m["whole_run"]["max_violation_rad"] == 0.0 and m["whole_run"]["qp_failures"] == 0
