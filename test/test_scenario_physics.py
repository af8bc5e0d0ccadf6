"""Scenario physics (ground friction, payload, push) are applied by the ROS bridge exactly as by the
headless loop: a lockstep ROS run of such a scenario is bit-identical to the headless run."""

from __future__ import annotations

from domains import domain_id
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
DURATION = 2.4
# a short walk with a lateral push during the gait, on a slippery floor, carrying 8 kg
PHYSICS = ["stand_up.start=0.1", "stand_up.duration=0.8", "walk.gait_start=1.0", "walk.t_s=1.4",
           "evaluation.window=1.0", "duration=2.4", "ground.friction=0.4", "payload.mass_kg=8.0",
           "push.enabled=true", "push.force_n=120.0", "push.start_offset=0.2", "push.duration=0.4"]


@pytest.mark.ros
def test_bridge_applies_friction_payload_and_push_like_the_headless_loop(tmp_path):
    from legged_wbc.closed_loop import ClosedLoop, save_run
    from legged_wbc.scenario import dump_scenario, load_scenario
    from legged_wbc.tools.analysis.bag_metrics import load_run

    sc = load_scenario("nominal", PHYSICS)
    assert sc.physics()["push"] is not None and sc.friction == 0.4 and sc.payload_kg == 8.0
    path = tmp_path / "physics.yaml"
    path.write_text(dump_scenario(sc))
    env = dict(os.environ, ROS_DOMAIN_ID=str(domain_id()), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    bag = tmp_path / "bag"
    r = subprocess.run([str(BIN / "legged-wbc"), "launch", "walking_sim", "controller:=cbf", f"scenario:={path}",
                        f"record:={bag}", f"duration:={DURATION}"], env=env, capture_output=True, text=True,
                       timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    head = save_run(ClosedLoop(load_scenario(str(path)), "cbf").run(DURATION), tmp_path / "headless")
    nominal = save_run(ClosedLoop(load_scenario("nominal", PHYSICS[:6]), "cbf").run(DURATION), tmp_path / "nominal")
    b, h, n = load_run(bag), load_run(head), load_run(nominal)
    ok = b.complete if b.complete is not None else np.ones(len(b.series["t"]), bool)
    assert ok.all(), b.gaps
    for k in ("base_pos", "base_quat", "theta", "tau", "support", "est_pos"):
        assert np.array_equal(np.asarray(b.series[k]), np.asarray(h.series[k])), k
    # and the physics did something: the pushed, loaded robot on ice differs from the nominal one
    moved = np.abs(np.asarray(h.series["base_pos"]) - np.asarray(n.series["base_pos"])).max()
    assert moved > 1e-3, moved
