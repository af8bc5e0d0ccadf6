"""Terrain in the simulation (``scenario.terrain``, ``legged_wbc.terrain``): the ground MuJoCo
simulates is the surface the terrain describes, a rough field is reproducible from its seed, the
feet touch it as ground, and a fall is judged against the ground under the robot."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from legged_wbc.robot import ConfigError
from legged_wbc.scenario import load_scenario
from legged_wbc.terrain import Terrain, add_terrain

CASES = [Terrain(kind="slope", angle_deg=20.0), Terrain(kind="slope", angle_deg=-10.0),
         Terrain(kind="steps", height_m=0.10), Terrain(kind="steps", height_m=-0.05, count=3),
         Terrain(kind="rough", amplitude_m=0.05, seed=3), Terrain()]


def _surface(m, d, x, y) -> float:
    """Height of the first surface below (x, y) as MuJoCo's ray sees it."""
    gid = np.array([-1], dtype=np.int32)
    return 10.0 - mujoco.mj_ray(m, d, np.array([x, y, 10.0]), np.array([0.0, 0.0, -1.0]), None, 1, -1, gid)


@pytest.mark.parametrize("t", CASES, ids=lambda t: f"{t.kind}-{t.angle_deg or t.height_m or t.amplitude_m}")
def test_the_simulated_ground_is_the_terrains_surface(t):
    spec = mujoco.MjSpec()
    add_terrain(spec, t, 0.9)
    m = spec.compile()
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    rng = np.random.default_rng(0)
    xs, ys = rng.uniform(-2.0, 7.5, 400), rng.uniform(-1.8, 1.8, 400)
    err = np.array([abs(_surface(m, d, x, y) - float(t.height(x, y))) for x, y in zip(xs, ys)])
    # planes and boxes exactly (float64 ray casting); the height field is MuJoCo's triangulation of the
    # grid against our bilinear interpolation: within a millimetre at 2 cm cells
    assert err.max() < (1e-3 if t.kind == "rough" else 1e-9), err.max()
    assert float(t.height(0.0, 0.0)) == 0.0                  # the robot starts on level ground at 0
    assert abs(float(t.height(0.25 * t.start_x_m, 0.3))) == 0.0


def test_rough_ground_is_reproducible_from_its_seed_and_has_its_peak():
    a, b, c = (Terrain(kind="rough", amplitude_m=0.03, seed=s) for s in (7, 7, 8))
    ha, hb, hc = a.grid()[2], b.grid()[2], c.grid()[2]
    assert np.array_equal(ha, hb) and not np.allclose(ha, hc)
    assert np.isclose(np.abs(ha).max(), 0.03, rtol=0, atol=1e-15)
    xs = a.grid()[0]
    assert np.all(ha[:, np.abs(xs) <= 0.5 * a.start_x_m] == 0.0)   # level around the start
    # features of about the wavelength: the field's autocorrelation falls to ~0 within a wavelength
    row = ha[ha.shape[0] // 2, xs > a.start_x_m]
    row = row - row.mean()
    ac = np.correlate(row, row, "full")[row.size - 1:] / (row @ row)
    lag = int(np.argmax(ac < 0.1))
    assert 0.3 * a.wavelength_m <= lag * 0.02 <= 1.5 * a.wavelength_m


def test_terrain_keys_reach_the_scenario_and_bad_values_are_one_line():
    sc = load_scenario("paper", ["terrain.kind=slope", "terrain.angle_deg=10"])
    assert sc.terrain.kind == "slope" and sc.terrain.angle_deg == 10.0
    assert load_scenario("paper").terrain == Terrain()        # every older scenario: flat
    assert load_scenario("steps").terrain.height_m == 0.10 and load_scenario("rough").terrain.amplitude_m == 0.05
    assert load_scenario("slope_up").terrain.angle_deg == 20.0 and load_scenario("slope_down").terrain.angle_deg == -20.0
    for bad, msg in (("terrain.kind=ice", "terrain.kind"), ("terrain.angle_deg=60", "angle_deg"),
                     ("terrain.amplitude_m=-0.1", "amplitude_m"), ("terrain.depth=1", "no such scenario key")):
        with pytest.raises(ConfigError, match=msg):
            load_scenario("paper", [bad])


def test_feet_on_a_step_touch_ground_and_a_fall_is_judged_above_the_ground():
    from legged_wbc.closed_loop import ClosedLoop
    from mujoco_bridge.sim import MujocoSim

    sim = MujocoSim("hexapod", terrain=Terrain(kind="steps", height_m=0.1))
    assert len(sim.terrain_geoms) == 6                        # the plane and five steps
    q = sim.robot.stance_configuration(0.30)
    q[0] = 0.8 + 0.35 * 5 + 1.0                               # on the top landing, 0.5 m high
    q[2] += 0.5
    sim.reset(q)
    sim.step(20)
    assert sim.foot_contacts().all() and not sim.base_contact()
    q[2] -= 0.5                                               # the same pose 0.5 m lower: inside the stairs
    sim.reset(q)
    sim.step(5)
    assert sim.base_contact()
    # standing on a plateau that starts 0 m high and goes down 20 deg: nothing is judged a fall while
    # the robot stands up at the start, and the run walks down onto the slope below z = 0
    res = ClosedLoop(load_scenario("slope_down", ["duration=4", "evaluation.window=1", "walk.t_s=3.0"]),
                     "cbf").run()
    assert not res.fell
