"""Our quadruped's gaits: the walking trot (diagonal pairs, its default) and the crawl (one leg at a
time), selected by a scenario's ``gait.type`` from the robot YAML's ``gait.gaits``; both driven by
velocity commands (``config/scenarios/quadruped_trot.yaml``)."""

import pytest

from legged_wbc.closed_loop import ClosedLoop
from legged_wbc.gait import GaitConfig
from legged_wbc.robot import ConfigError, load_robot_config
from legged_wbc.scenario import gait_dict_of, load_scenario

TROT = (("lf", "rh"), ("rf", "lh"))
CRAWL = (("lf",), ("rh",), ("rf",), ("lh",))


def _turn(wz: float, until: float) -> list[str]:
    """Stand, then turn in place at ``wz`` [rad/s] from 3 s; metrics over [4 s, until]."""
    return ["push.enabled=false", f"commands=[{{t: 0, vx: 0, vy: 0, wz: 0}}, {{t: 3, vx: 0, vy: 0, wz: {wz}}}]",
            "walk.t_s=4.0", f"evaluation.window={until - 4.0}"]


def test_gait_type_selects_the_robot_s_named_gait():
    rc = load_robot_config("quadruped")
    assert GaitConfig.from_dict(rc.gait).groups == TROT          # the default: the trot
    sc = load_scenario("quadruped_trot", ["gait.type=crawl"])
    g = GaitConfig.from_dict(sc.gait_dict(rc.gait))
    assert g.groups == CRAWL and (g.period, g.duty) == (1.6, 0.8) and g.start_time == sc.gait_start
    g = GaitConfig.from_dict(load_scenario("quadruped_trot", ["gait.period=1.0"]).gait_dict(rc.gait))
    assert g.groups == TROT and (g.period, g.duty) == (1.0, 0.6)
    with pytest.raises(ConfigError, match="'gallop' is not one of the robot's gaits"):
        gait_dict_of(rc.gait, {"type": "gallop"})


def test_hexapod_gait_unchanged_without_a_gait_choice():
    rc = load_robot_config("hexapod")
    sc = load_scenario("paper")
    assert sc.gait_dict(rc.gait) == dict(rc.gait, start_time=sc.gait_start)


def test_trot_turns_in_place_without_slip():
    """Trotting in place at 0.3 rad/s: no support foot moves more than 2 cm while it is down."""
    res = ClosedLoop(load_scenario("quadruped_trot", _turn(0.3, 8.0)), "cbf").run(8.0)
    m = res.metrics
    assert not res.fell, res.fall_reason
    assert m["qp_failures"] == 0 and m["foot_slip_max_m"] <= 0.02, m
    assert m["yaw_rate_tracking_rmse_radps"] <= 0.05, m


def test_crawl_is_selectable_and_stays_up():
    """The crawl (gait.type=crawl, the controller's default body gains) turns in place for 7 s (its
    support feet still slip: up to 0.12 m in 16 s, the centre of mass on the diagonal of the support
    triangle leaves the third foot unloaded)."""
    over = ["gait.type=crawl", "controller.kd_pos=[40, 40, 60]"] + _turn(0.3, 10.0)
    res = ClosedLoop(load_scenario("quadruped_trot", over), "cbf").run(10.0)
    assert not res.fell, res.fall_reason
    assert res.metrics["qp_failures"] == 0


@pytest.mark.slow
def test_trot_scenario_targets():
    """The whole schedule (38 s): forward 0.3 m/s, sideways 0.1 m/s both ways, turning 0.5 rad/s both
    ways, stop and stand, a 150 N lateral push for 0.3 s while trotting forward."""
    res = ClosedLoop(load_scenario("quadruped_trot"), "cbf").run()
    m = res.metrics
    assert not res.fell, res.fall_reason
    assert m["qp_failures"] == 0, m
    assert m["yaw_rate_tracking_rmse_radps"] <= 0.05 and m["standing_drift_m"] <= 0.01, m
    assert m["velocity_tracking_rmse_mps"] <= 0.04, m
