"""The running stack live in Foxglove (``foxglove:=PORT``, :mod:`legged_wbc.ros.stack.foxglove`), checked with
Foxglove's own client library: ``tools/foxglove_live`` (npm ``@foxglove/ws-protocol``'s FoxgloveClient over a
``ws`` WebSocket with the subprotocol ``foxglove.sdk.v1``, ``@foxglove/rosmsg`` and
``@foxglove/rosmsg2-serialization``, pinned) connects to a realtime walk, subscribes to every channel, decodes
the messages, gets and sets a controller gain (and is refused an out-of-range one), publishes ``/cmd_vel`` and a
malformed message. The walk records a bag: what the client got is compared with what was published. Runs when
node is installed (``npm ci`` fetches the pinned packages the first time). The tap's own properties (the CDR it
makes equals rclpy's serialization; a full queue drops and counts, never blocks) are checked without node."""

from __future__ import annotations

from domains import domain_id
from npm_tools import node_for
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "foxglove_live"
LAUNCHER = str(Path(sys.executable).parent / "legged-wbc")


@pytest.fixture(scope="module")
def node_tool():
    return node_for(TOOL, "@foxglove/ws-protocol")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env():
    return dict(os.environ, ROS_DOMAIN_ID=str(domain_id()), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")


def _walk_with_client(tmp_path, node, port: int, seconds: float, control: bool = True, duration: float = 14.0,
                      client_env=None, layout: str = "container"):
    """A realtime walk of ``duration`` s recording a bag, served on ``port`` (``foxglove_control:=control``); the
    client runs ``seconds`` once the server is up. Returns (the launch's output, the client's JSON summary, the
    bag directory)."""
    bag = tmp_path / "bag"
    p = subprocess.Popen([LAUNCHER, "launch", "walking_sim", "mode:=realtime", f"duration:={duration}", f"layout:={layout}",
                          f"foxglove:={port}", f"foxglove_control:={str(control).lower()}", f"record:={bag}"],
                         cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, client = [], None
    try:
        for line in p.stdout:
            lines.append(line)
            if client is None and "Foxglove: ws://127.0.0.1:" in line:
                client = subprocess.Popen([node, "live_client.mjs", f"ws://127.0.0.1:{port}", str(seconds),
                                           "/wbc_controller.kp_b", "2900", "-5"], cwd=TOOL, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True, env=dict(os.environ, **(client_env or {})))
        p.wait(timeout=300)
        assert client is not None, "".join(lines)[-4000:]
        out, err = client.communicate(timeout=120)
    finally:
        for proc in (p, client):
            if proc is not None and proc.poll() is None:
                proc.kill()
    assert p.returncode == 0, "".join(lines)[-4000:]
    assert client.returncode == 0, (out[-3000:], err[-3000:])
    return "".join(lines), json.loads(out), bag


@pytest.mark.slow
@pytest.mark.ros
def test_foxglove_client_gets_every_topic_decodes_them_tunes_a_gain_and_publishes_cmd_vel(tmp_path, node_tool):
    from rosbags.highlevel import AnyReader

    log, out, bag = _walk_with_client(tmp_path, node_tool, free_port(), 8)
    assert out["subprotocol"] == "foxglove.sdk.v1"
    info = out["serverInfo"]
    assert {"clientPublish", "parameters", "time"} <= set(info["capabilities"]) and info["supportedEncodings"] == ["cdr"]
    ch = out["channels"]
    with AnyReader([bag]) as reader:
        types = {c.topic: c.msgtype for c in reader.connections}
        js = sorted(t for c, t, _ in reader.messages([c for c in reader.connections if c.topic == "/joint_states"]))
    # every recorded topic is served with its ROS 2 type, in cdr with a ros2msg schema, and decodes
    for topic, msgtype in types.items():
        assert topic in ch, f"{topic} not served"
        c = ch[topic]
        assert (c["schemaName"], c["encoding"], c["schemaEncoding"]) == (msgtype, "cdr", "ros2msg"), c
        assert c["count"] > 0 and c["decoded"] > 0, (topic, c)
    assert out["failures"] == []
    # the live layout names only served topics (but the 3D panel's publish tool's, which it would publish)
    layout = json.dumps(json.loads((ROOT / "config" / "foxglove_live_layout.json").read_text()))
    named = set(re.findall(r'"(/[a-z_/]+)', layout)) - {"/clicked_point", "/initialpose", "/move_base_simple/goal"}
    assert {"/cmd_vel", "/tf", "/robot_description", "/diagnostics"} <= named <= set(ch), named - set(ch)
    # /joint_states: every one published while the client was subscribed (the bag's, by their /clock stamps)
    c = ch["/joint_states"]
    first, last = int(c["first"]), int(c["last"])
    published = sum(1 for t in js if first <= t <= last)
    assert c["decoded"] == c["count"] >= 0.95 * published and published > 5000, (c["count"], published)
    assert c["sample"]["names"] == c["sample"]["position"] == 24
    # the 3D panel's inputs: the URDF (latched, sent to the late subscriber) and one tree from world
    assert ch["/robot_description"]["sample"]["robot"] == "hexapod"
    assert "odom->base_link" in ch["/tf"]["sample"]["transforms"]
    assert "world->odom" in ch["/tf_static"]["sample"]["transforms"]
    # parameters: every node's, the gain set and read back, the refused value said and not applied
    params = out["params"]
    assert params["count"] > 50 and "/wbc_controller.kp_b" in params["names"]
    assert any(n.startswith("/mujoco_bridge.") for n in params["names"])
    assert params["after_set"] == params["got_back"] == 2900 and params["after_bad"] == 2900
    assert "parameter kp_b := 2900.0" in log                                  # the node took it
    assert any("/wbc_controller.kp_b" in s and "out of range" in s for s in out["statuses"])
    # /cmd_vel from the client is on the ROS graph (served back from the DDS subscription the 1 s graph poll makes
    # once the client's publisher appears: the first ones come before it); the malformed one refused
    assert out["cmd_vel"]["sent"] > 5 and 1 <= ch["/cmd_vel"]["count"] <= out["cmd_vel"]["sent"]
    assert ch["/cmd_vel"]["sample"]["linear"]["x"] == pytest.approx(0.1)
    assert any("/cmd_vel: a message that is not a finite" in s for s in out["statuses"])
    with AnyReader([bag]) as reader:
        conns = [c for c in reader.connections if c.topic == "/diagnostics"]
        mine = [s for _, _, raw in reader.messages(conns)
                for s in reader.deserialize(raw, conns[0].msgtype).status if s.name == "foxglove_bridge: live view"]
    assert mine, "no foxglove_bridge status in /diagnostics"
    last_values = {kv.key: kv.value for kv in mine[-1].values}
    assert int(last_values["client messages refused"]) >= 1 and int(last_values["parameter sets refused"]) >= 1
    assert int(last_values["messages sent"]) > 0


@pytest.mark.ros
def test_split_serves_both_parts_topics_and_the_control_part_s_parameters(tmp_path, node_tool):
    """``layout:=split`` (the README's main layout): the sim part serves its own topics and the control
    part's (over the host link) from its bus; the controller's gain (in the other process) is read and set
    through its parameter services, an out-of-range value refused by the node. A topic of another process
    (``/cmd_vel`` the client publishes, through DDS) has a DDS subscription only while a client watches it:
    once the client is gone, none is left but the latched topics'."""
    from rosbags.highlevel import AnyReader

    log, out, bag = _walk_with_client(tmp_path, node_tool, free_port(), 4, duration=10.0, layout="split")
    ch = out["channels"]
    for topic in ("/joint_states", "/imu", "/clock", "/estimator/odom", "/wbc/diagnostics", "/wbc/relative_pitch",
                  "/joint_torque_cmd", "/robot_description"):
        assert ch[topic]["decoded"] > 0, (topic, ch.get(topic))
    assert ch["/estimator/odom"]["count"] > 200 and out["failures"] == []       # ~500/s for the 4 s
    params = out["params"]
    assert "/wbc_controller.kp_b" in params["names"] and "/state_estimator.kp_b" not in params["names"]
    assert any(n.startswith("/state_estimator.") for n in params["names"])
    assert params["after_set"] == params["got_back"] == 2900 and params["after_bad"] == 2900
    assert "[control_container]" in log and "parameter kp_b := 2900.0" in log   # set in the control part
    assert any("/wbc_controller.kp_b" in s and "out of range" in s for s in out["statuses"])
    with AnyReader([bag]) as reader:
        conns = [c for c in reader.connections if c.topic == "/diagnostics"]
        mine = [(t, {kv.key: kv.value for kv in s.values}) for _, t, raw in reader.messages(conns)
                for s in reader.deserialize(raw, conns[0].msgtype).status if s.name == "foxglove_bridge: live view"]
    assert max(int(v["dds subscriptions"]) for _, v in mine) > int(mine[-1][1]["latched topics"])
    assert mine[-1][1]["dds subscriptions"] == mine[-1][1]["latched topics"], mine[-1]


@pytest.mark.ros
def test_the_view_is_read_only_unless_the_launch_grants_control(tmp_path, node_tool):
    """``foxglove:=PORT`` alone: a client sees the topics and reads the parameters, but its parameter set is
    refused (the gain unchanged in the node) and its ``/cmd_vel`` channel, advertised although the server
    offers no ``clientPublish``, is refused: nothing it sends reaches the ROS graph or the bag."""
    from rosbags.highlevel import AnyReader

    log, out, bag = _walk_with_client(tmp_path, node_tool, free_port(), 4, control=False, duration=8.0,
                                      client_env={"PUBLISH_ANYWAY": "1"})
    assert "read-only: foxglove_control:=true lets clients set them" in log
    caps = set(out["serverInfo"]["capabilities"])
    assert "clientPublish" not in caps and {"parameters", "time"} <= caps
    assert out["channels"]["/joint_states"]["decoded"] > 100
    params = out["params"]
    assert "/wbc_controller.kp_b" in params["names"]
    default = params["after_set"]
    assert default != 2900 and params["got_back"] == default       # the set refused, the gain as it was
    assert "parameter kp_b := 2900.0" not in log
    assert any("/wbc_controller.kp_b" in s and "read-only" in s for s in out["statuses"])
    assert out["cmd_vel"]["sent"] > 5                              # the client did send
    # the SDK itself drops the channel of a server without clientPublish (its sends: "Unknown channel ID");
    # the node's own refusal (advertise) is the second line of defence
    assert any("Unknown channel ID" in s or "client channel /cmd_vel refused" in s for s in out["statuses"])
    with AnyReader([bag]) as reader:
        cmd = [c for c in reader.connections if c.topic == "/cmd_vel"]
        assert not cmd or not list(reader.messages(cmd))


@pytest.mark.slow
@pytest.mark.ros
def test_a_port_in_use_is_one_line_and_the_launch_does_not_run(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        p = subprocess.run([LAUNCHER, "launch", "walking_sim", "duration:=1", f"foxglove:={port}"], cwd=ROOT,
                           env=_env(), capture_output=True, text=True, timeout=300)
    text = p.stdout + p.stderr
    assert p.returncode != 0
    assert f"foxglove: cannot serve on 127.0.0.1:{port}" in text and "Traceback" not in text, text[-3000:]


def _joint_state_value():
    from legged_wbc.ros import io as ros_io
    from legged_wbc.ros.io.adapters import AdaptedValue, JointSample, JointStateAdapter

    names = [f"j{i}" for i in range(18)]
    adapter = JointStateAdapter(ros_io.joint_state_msg(0, names, np.zeros(18), np.zeros(18), np.zeros(18)))
    rng = np.random.default_rng(3)
    return [AdaptedValue(JointSample(2_000_000 * k, names, *rng.normal(size=(3, 18))), adapter) for k in range(3)]


@pytest.mark.ros
def test_the_taps_cdr_is_rclpys_serialization_and_a_full_queue_drops_and_counts():
    from rclpy.serialization import serialize_message

    from legged_wbc.ros.stack.foxglove import ViewerTap

    wanted = {"/joint_states": 1}
    tap = ViewerTap(wanted, max_len=2)
    values = _joint_state_value()
    tap.on_batch([("/joint_states", v) for v in values])
    tap.on_batch([("/imu", values[0])])                       # nobody subscribed: nothing queued
    assert len(tap.queue) == 2 and tap.dropped == 1 and tap.failed == 0
    for (topic, _, rec, splicer), v in zip(tap.queue, values):
        assert splicer is not None                            # a record, spliced off the control thread
        assert splicer.build(rec) == serialize_message(v.adapter.to_ros(v.value))
    wanted["/joint_states"] = 0                               # the client unsubscribed: the tap does nothing
    tap.queue.clear()
    tap.on_batch([("/joint_states", v) for v in values])
    assert len(tap.queue) == 0 and tap.dropped == 1


def test_a_read_only_bridge_refuses_a_client_channel_and_every_parameter_set(ros_context):
    """The node's own refusals (behind the SDK's, which drops the channels of a server without
    ``clientPublish``): without ``control`` a client's channel is refused and counted, a parameter set leaves
    the node's value as it was; with it, both go through."""
    from types import SimpleNamespace

    import foxglove
    from rclpy.node import Node

    from legged_wbc.ros.stack.foxglove import FoxgloveBridge, LiveParameters

    target = Node("fox_target", context=ros_context)
    target.declare_parameter("kp_b", 3000.0)
    channel = SimpleNamespace(topic="/cmd_vel", encoding="cdr", schema_name="geometry_msgs/msg/Twist", id=1)
    client = SimpleNamespace(id=7)
    for control in (False, True):
        bridge = FoxgloveBridge(0, control=control, context=ros_context)
        bridge.advertise(client, channel)
        assert (bridge.client_refused, len(bridge._advertised)) == ((1, 0) if not control else (0, 1))
        params = LiveParameters([target], read_only=not control)
        got = params.set([foxglove.Parameter("/fox_target.kp_b", value=2900.0,
                                             type=foxglove.ParameterType.Float64)])
        assert got[0].get_value() == (3000.0 if not control else 2900.0)
        assert (params.refused, params.accepted) == ((1, 0) if not control else (0, 1))
        bridge.destroy_node()
    target.destroy_node()
