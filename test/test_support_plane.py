"""The estimator's support plane (known answers, kernel vs numpy) and late touchdowns on a synthetic
step (issue 19, items 2 and 3)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from legged_wbc.gait import SUPPORT, SWING_DOWN, SWING_UP
from state_estimator import support_plane as sp
from state_estimator.config import TouchdownConfig
from state_estimator.touchdown import LATE_FALLBACK, LATE_LANDED, TouchdownDetector

FEET = np.array([[0.64, 0.44, 0.0], [0.0, 0.65, 0.0], [-0.64, 0.44, 0.0],
                 [0.64, -0.44, 0.0], [0.0, -0.65, 0.0], [-0.64, -0.44, 0.0]])   # hexapod stance, world-aligned


def _on_plane(normal, d, xy):
    """Points with the given x, y on the plane {n . r = d}."""
    n = np.asarray(normal, dtype=float)
    z = (d - n[0] * xy[:, 0] - n[1] * xy[:, 1]) / n[2]
    return np.column_stack([xy, z])


@pytest.mark.parametrize("slope_deg,roll_deg", [(20.0, 0.0), (-20.0, 0.0), (10.0, 5.0), (0.0, 0.0)])
def test_plane_fit_known_answer(slope_deg, roll_deg):
    # a plane through the feet of a slope of slope_deg (up along +x) and roll_deg (down along +y)
    a, b = math.tan(math.radians(slope_deg)), -math.tan(math.radians(roll_deg))
    n = np.array([-a, -b, 1.0]) / math.sqrt(a * a + b * b + 1.0)
    r = _on_plane(n, -0.4, FEET[:, :2])
    for support in (np.ones(6, bool), np.array([1, 0, 1, 0, 1, 0], bool), np.array([0, 1, 0, 1, 0, 1], bool)):
        ok, nx, ny, nz, d = sp.plane_fit(r, support)
        assert ok
        np.testing.assert_allclose([nx, ny, nz], n, atol=1e-14)
        assert d == pytest.approx(-0.4, abs=1e-14)
        assert sp.plane_fit_reference(r, support) == pytest.approx((ok, nx, ny, nz, d), abs=1e-14)


def test_plane_fit_needs_three_spread_feet():
    r = _on_plane([0.0, 0.0, 1.0], -0.4, FEET[:, :2])
    assert not sp.plane_fit(r, np.array([1, 1, 0, 0, 0, 0], bool))[0]          # two feet
    line = r.copy()
    line[:, 1] = 0.3                                                         # all on one line
    assert not sp.plane_fit(line, np.ones(6, bool))[0]
    assert not sp.plane_fit_reference(line, np.ones(6, bool))[0]


def test_plane_fit_least_squares_on_noisy_feet():
    """Over-determined (6 feet): the fit is the least-squares plane (numpy's lstsq)."""
    rng = np.random.default_rng(3)
    r = _on_plane([0.1, 0.05, math.sqrt(1 - 0.0125)], -0.4, FEET[:, :2])
    r[:, 2] += rng.normal(0, 0.01, 6)
    ok, nx, ny, nz, d = sp.plane_fit(r, np.ones(6, bool))
    A = np.column_stack([r[:, 0], r[:, 1], np.ones(6)])
    (a, b, c), *_ = np.linalg.lstsq(A, r[:, 2], rcond=None)
    n = np.array([-a, -b, 1.0]) / math.sqrt(a * a + b * b + 1)
    np.testing.assert_allclose([nx, ny, nz], n, atol=1e-12)
    assert d == pytest.approx(n @ r.mean(axis=0), abs=1e-12)


def test_dead_band_gives_world_z_on_flat_ground_and_is_continuous():
    band = math.radians(1.0)
    for tilt_deg in (0.0, 0.3, 0.999):
        t = math.radians(tilt_deg)
        assert sp.dead_band(math.sin(t), 0.0, math.cos(t), band) == (0.0, 0.0, 1.0)
    for tilt_deg, az in ((1.001, 0.3), (5.0, -2.0), (20.0, 1.0)):
        t = math.radians(tilt_deg)
        n = sp.dead_band(math.sin(t) * math.cos(az), math.sin(t) * math.sin(az), math.cos(t), band)
        assert sp.tilt_deg(n) == pytest.approx(tilt_deg - 1.0, abs=1e-9)
        assert math.atan2(n[1], n[0]) == pytest.approx(az, abs=1e-9)


def test_support_plane_step_matches_reference_and_filters():
    """The compiled cycle and its numpy specification over a random walk of attitudes, supports
    and planes; the filtered normal follows a step in the plane with the low-pass's time constant."""
    rng = np.random.default_rng(11)
    st_k, st_r = np.zeros(sp.STATE_SIZE), np.zeros(sp.STATE_SIZE)
    sp.reset_state(st_k)
    sp.reset_state(st_r)
    scratch, out = np.zeros((6, 3)), np.zeros(5)
    for k in range(400):
        tilt = math.radians(rng.uniform(0, 25))
        az = rng.uniform(-math.pi, math.pi)
        n = np.array([math.sin(tilt) * math.cos(az), math.sin(tilt) * math.sin(az), math.cos(tilt)])
        r_world = _on_plane(n, -0.42, FEET[:, :2] + rng.normal(0, 0.02, (6, 2)))
        q = rng.normal(size=4)
        q /= np.linalg.norm(q)
        x, y, z, w = q
        R = np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                      [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                      [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])
        foot_base = r_world @ R                          # R^T r, row-wise
        support = rng.random(6) < 0.6
        qv = np.concatenate([np.zeros(3), q])
        sp.support_plane_step(foot_base, support, qv, 0.3, math.radians(1.0), st_k, scratch, out)
        ref = sp.support_plane_reference(foot_base, support, R, 0.3, math.radians(1.0), st_r)
        np.testing.assert_allclose(out, ref, atol=1e-12)
        np.testing.assert_allclose(st_k, st_r, atol=1e-12)
    # a step from flat to 20 deg, 2 Hz low-pass at 500 Hz: 63 % of the way after 1 / (2 pi 2) s
    sp.reset_state(st_k)
    dt, fc = 0.002, 2.0
    alpha = 1 - math.exp(-2 * math.pi * fc * dt)
    flat = _on_plane([0, 0, 1], -0.42, FEET[:, :2])
    sp.support_plane_step(flat, np.ones(6, bool), np.array([0, 0, 0, 0, 0, 0, 1.0]), alpha, 0.0, st_k, scratch, out)
    t20 = math.radians(20)
    slope = _on_plane([-math.sin(t20), 0, math.cos(t20)], -0.42, FEET[:, :2])
    tilts = []
    for _ in range(int(round(1 / (2 * math.pi * fc) / dt))):
        sp.support_plane_step(slope, np.ones(6, bool), np.array([0, 0, 0, 0, 0, 0, 1.0]), alpha, 0.0, st_k, scratch,
                              out)
        tilts.append(sp.tilt_deg(out[:3]))
    assert 0.55 * 20 < tilts[-1] < 0.70 * 20          # (a normalized vector average: close to 1 - 1/e)
    assert np.all(np.diff(tilts) > 0)


# ------------------------------------------------------------------ late touchdowns
def _detector(late_max=10):
    det = TouchdownDetector(TouchdownConfig(gamma_land=1000.0, n_land=2, late_max_cycles=late_max), 1, 4, 0.002)
    det.reset(np.zeros((1, 4)))
    return det


def _run(det, phases, scores, cycle=0):
    """Feed (phase, score) pairs; returns per step (touchdown, late, event)."""
    out = []
    for ph, s in zip(phases, scores):
        det.score = np.array([float(s)])
        td = det.detect(np.array([ph]), np.array([cycle]))
        out.append((bool(td[0]), int(det.late[0]), int(det.event[0])))
    return out


def test_late_touchdown_on_a_synthetic_step_down():
    """The ground is lower than planned (a step down): no contact during the swing-down, so the leg is
    late (out of support) after it; the contact seen 4 cycles later lands it (event LATE_LANDED)."""
    det = _detector()
    phases = [SWING_UP] * 3 + [SWING_DOWN] * 5 + [SUPPORT] * 8
    scores = [100] * 3 + [200] * 5 + [100, 100, 100, 3000, 3000, 100, 100, 100]
    out = _run(det, phases, scores)
    late = [o[1] > 0 for o in out]
    assert not any(late[:8])
    assert late[8:12] == [True] * 4 and not any(late[12:])           # landed on the 2nd sample over gamma
    assert [o[2] for o in out].count(LATE_LANDED) == 1 and out[12][2] == LATE_LANDED
    assert not any(o[0] for o in out)                                # no touchdown latch in support


def test_late_touchdown_falls_back_after_the_limit_and_early_touchdowns_are_not_late():
    det = _detector(late_max=5)
    out = _run(det, [SWING_DOWN] * 3 + [SUPPORT] * 10, [100] * 13)
    late = [o[1] > 0 for o in out]
    assert late[3:8] == [True] * 5 and not any(late[8:])
    assert out[8][2] == LATE_FALLBACK
    # a touchdown seen during the swing-down (early): never late
    det = _detector()
    out = _run(det, [SWING_DOWN] * 4 + [SUPPORT] * 5, [100, 3000, 3000, 100] + [100] * 5, cycle=1)
    assert out[2][0] and not any(o[1] for o in out)
    # no extension at all with late_max_cycles = 0
    det = _detector(late_max=0)
    assert not any(o[1] for o in _run(det, [SWING_DOWN] * 3 + [SUPPORT] * 5, [100] * 8))
