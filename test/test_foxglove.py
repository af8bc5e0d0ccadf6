"""A bag that Foxglove's own parsers read: ``tools/foxglove_check`` (npm ``@mcap/core``, ``@mcap/support``,
``@foxglove/rosmsg``, ``@foxglove/rosmsg2-serialization``, pinned) decodes every message of every topic of a
recorded bag, ``/tf`` and ``/robot_description`` included, and resolves every message path and panel of
``config/foxglove_layout.json``; a layout naming a field that does not exist fails. Runs when node is
installed (``npm ci`` fetches the pinned packages the first time)."""

from __future__ import annotations

from domains import domain_id
from npm_tools import node_for
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "foxglove_check"

pytestmark = [pytest.mark.slow, pytest.mark.ros]


@pytest.fixture(scope="module")
def node_tool():
    return node_for(TOOL, "@mcap/core")


def test_foxglove_parsers_read_every_message_and_resolve_the_layout(tmp_path, node_tool):
    bag = tmp_path / "bag"
    env = dict(os.environ, ROS_DOMAIN_ID=str(domain_id()), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    p = subprocess.run([str(Path(sys.executable).parent / "legged-wbc"), "launch", "walking_sim", "controller:=cbf",
                        "scenario:=paper", "duration:=3", f"record:={bag}"], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    mcap = next(bag.glob("*.mcap"))
    layout = ROOT / "config" / "foxglove_layout.json"
    r = subprocess.run([node_tool, "check_bag.mjs", str(mcap), str(layout)], cwd=TOOL, capture_output=True, text=True,
                       timeout=300)
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["failures"] == [], out["failures"] or r.stderr
    assert out["compressions"] == ["zstd"]
    meta = yaml.safe_load((bag / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    counts = {t["topic_metadata"]["name"]: t["message_count"] for t in meta["topics_with_message_count"]}
    assert {k: v["count"] for k, v in out["topics"].items()} == counts          # every message decoded
    assert {"/tf", "/tf_static", "/robot_description", "/diagnostics"} <= set(counts)
    assert all(v["topic_type_hash"].startswith("RIHS01_") for v in out["topics"].values())
    assert all(v == "ok" for v in out["panels"].values()) and "3D!robot" in out["panels"]
    assert len(out["paths"]) >= 30 and all(v["ok"] for v in out["paths"].values())
    # the check is not vacuous: a path to a field that does not exist, a frame that is not on /tf
    bad = json.loads(layout.read_text())
    bad["configById"]["Plot!qp_time"]["paths"][0]["value"] = "/wbc/diagnostics.no_such_field[2]"
    bad["configById"]["3D!robot"]["followTf"] = "no_such_frame"
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    r = subprocess.run([node_tool, "check_bag.mjs", str(mcap), str(tmp_path / "bad.json")], cwd=TOOL,
                       capture_output=True, text=True, timeout=300)
    fails = json.loads(r.stdout)["failures"]
    assert r.returncode == 1 and any("no_such_field" in f for f in fails) and any("no_such_frame" in f for f in fails)
