"""Seeing the robot: offscreen replay of runs (log.npz and rosbag2) into MP4/PNG, the live viewer's
fallbacks and threading, the Foxglove layout. Frames are small (2 shared cores)."""

import json
import time
from pathlib import Path

import numpy as np
import pytest

from legged_wbc import cli
from legged_wbc.closed_loop import ClosedLoop, load_log, save_run
from legged_wbc.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
W, H = 160, 120
QUICK = ["stand_up.start=0.0", "stand_up.duration=0.5", "walk.gait_start=0.6", "walk.t_s=0.6",
         "evaluation.window=0.4"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A real 1-s headless run (stand up, first steps) saved like `legged-wbc run` does."""
    res = ClosedLoop(load_scenario("nominal", QUICK), "cbf").run(1.0)
    assert not res.fell
    return save_run(res, tmp_path_factory.mktemp("run") / "cbf")


@pytest.fixture(scope="module")
def scene():
    from legged_wbc.tools.pictures.scene_render import SceneRenderer

    sr = SceneRenderer("hexapod", W, H)
    yield sr
    sr.close()


def _changed_fraction(a: np.ndarray, b: np.ndarray, level: int = 40) -> float:
    return float(np.mean(np.abs(a.astype(int) - b.astype(int)).max(axis=2) > level))


def test_render_cli_video_and_strip(run_dir, tmp_path, scene, capsys):
    import imageio.v2 as iio

    out = tmp_path / "r"
    rc = cli.main(["render", str(run_dir), "--out", str(out), "--size", f"{W}x{H}", "--fps", "12",
                   "--start", "0.25", "--strip-frames", "3"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "frame 9/9" in cap.err, "progress shown"
    summary = json.loads((out / "render.json").read_text())
    # 0.25 .. 1.0 s at 12 fps -> 9 frames, read back from the MP4
    reader = iio.get_reader(out / "video.mp4")
    assert reader.get_meta_data()["codec"] == "h264"
    frames = [f for f in reader]
    reader.close()
    assert len(frames) == 9 == summary["video"]["frames"]
    assert all(f.shape == (H, W, 3) for f in frames)
    assert min(float(f.std()) for f in frames) > 10.0, "frames are not blank"
    # the robot is visible: each frame differs from an empty-floor render of the same instant
    S, _ = load_log(run_dir)
    for k in (0, 4, 8):
        t = 0.25 + k / 12
        i = int(np.searchsorted(S["t"], t + 1e-9, side="right")) - 1
        q = np.concatenate([S["base_pos"][i], S["base_quat"][i], S["joint_pos"][i]])
        empty = scene.render(q, hide_robot=True)
        robot = scene.render(q)
        assert _changed_fraction(robot, empty) > 0.03, "the robot covers part of the picture"
        # the video frame (overlay in the corners, H.264 loss) shows the robot as well
        assert _changed_fraction(frames[k][H // 4:, : W * 3 // 4], empty[H // 4:, : W * 3 // 4]) > 0.03
    # the strip: 3 panels of the frame size side by side
    from PIL import Image

    strip = Image.open(out / "gait_strip.png")
    assert strip.size == (3 * W, H)
    assert summary["strip"]["times_s"][0] == pytest.approx(0.25)
    assert summary["controller"] == "cbf" and summary["scenario"] == "nominal"


def test_a_new_renderer_s_first_frame_equals_the_same_state_drawn_again():
    """Software GL shaded the floor of a context's first frame differently: a video's first frame, or a
    bag's picture compared with a log's, differed from the same state drawn later."""
    from legged_wbc.tools.pictures.scene_render import SceneRenderer

    with SceneRenderer("hexapod", W, H) as sr:
        q = np.r_[0.0, 0.0, 0.3, 0.0, 0.0, 0.0, 1.0, np.zeros(len(sr.rm.joint_names))]
        first = sr.render(q)
        assert np.array_equal(first, sr.render(q))


def test_frame_overlay_draws_support_dots(scene):
    from legged_wbc.tools.pictures.overlays import SUPPORT_RGB, SWING_RGB, draw_overlay, leg_layout

    frame = np.full((240, 320, 3), 90, np.uint8)
    sup = np.array([1, 0, 1, 0, 1, 0], bool)
    img = draw_overlay(frame, ["WBC-CBF", "t = 1.00 s"], leg_layout(scene.rm.cfg), scene.rm.cfg.leg_names, sup)
    px = img.reshape(-1, 3)
    assert (np.abs(px - SUPPORT_RGB).max(axis=1) < 8).sum() > 20
    assert (np.abs(px - SWING_RGB).max(axis=1) < 8).sum() > 20
    assert img.shape == frame.shape


def test_strip_covers_one_gait_cycle(run_dir):
    from legged_wbc.tools.experiments.recording import Recording, Series, load_recording
    from legged_wbc.tools.pictures.render import strip_times

    rec = load_recording(run_dir)
    # a synthetic 6-s recording: the strip takes the middle complete cycle after the gait start
    t = np.arange(0, 6.0, 0.002)
    long = Recording(path=rec.path, kind="log", robot="hexapod", controller="cbf", scenario_name="nominal",
                     scenario=rec.scenario, joint_names=rec.joint_names, leg_names=rec.leg_names,
                     base=Series(t, np.zeros((t.size, 7))), joints=Series(t, np.zeros((t.size, 24))))
    times, span = strip_times(long, 0.0, 6.0, 4)
    assert span == pytest.approx(1.0)                 # robot YAML gait.period
    assert times[0] == pytest.approx(2.6)             # cycles 0.6, 1.6, 2.6, 3.6, 4.6 -> middle
    assert np.diff(times) == pytest.approx([0.25] * 3)
    times, _ = strip_times(long, 0.0, 6.0, 2, at=4.0)
    assert list(times) == pytest.approx([4.0, 4.5])


def test_compare_side_by_side(run_dir, tmp_path):
    from PIL import Image

    from legged_wbc.tools.pictures.render import RenderOptions, render_run

    # a second "run": the same log relabelled as WBC-0
    S, meta = load_log(run_dir)
    other = tmp_path / "none"
    other.mkdir()
    np.savez_compressed(other / "log.npz", meta=json.dumps(dict(meta, controller="none")), **S)
    res = render_run(run_dir, tmp_path / "c", compare=other,
                     opts=RenderOptions(width=W, height=H, video=False, strip=False, progress=False,
                                        compare_time=0.8))
    img = Image.open(tmp_path / "c" / "compare.png")
    assert img.size == (2 * W, H)
    assert res["compare"]["time_s"] == pytest.approx(0.8)
    a = np.asarray(img)
    assert float(a[:, :W].std()) > 10 and float(a[:, W:].std()) > 10


# ------------------------------------------------------------------------------------------ bags
def _write_bag(path: Path, S: dict, joint_names, leg_names, storage="mcap", topics=("odom", "js", "support"),
               custom=(("controller", "damping"), ("scenario", "nominal")), every=10):
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    ts = get_typestore(Stores.ROS2_KILTED)
    T = ts.types
    Time, Header = T["builtin_interfaces/msg/Time"], T["std_msgs/msg/Header"]
    Point, Quat, Pose = T["geometry_msgs/msg/Point"], T["geometry_msgs/msg/Quaternion"], T["geometry_msgs/msg/Pose"]
    Vec3, Twist = T["geometry_msgs/msg/Vector3"], T["geometry_msgs/msg/Twist"]
    PwC, TwC = T["geometry_msgs/msg/PoseWithCovariance"], T["geometry_msgs/msg/TwistWithCovariance"]
    Odom, JS = T["nav_msgs/msg/Odometry"], T["sensor_msgs/msg/JointState"]
    plugin = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}[storage]
    w = Writer(path, version=9, storage_plugin=plugin)
    for k, v in custom:
        w.set_custom_data(k, v)
    w.open()
    conns = {}
    if "odom" in topics:
        conns["odom"] = w.add_connection("/ground_truth/odom", Odom.__msgtype__, typestore=ts)
    if "js" in topics:
        conns["js"] = w.add_connection("/joint_states", JS.__msgtype__, typestore=ts)
    if "support" in topics:
        conns["support"] = w.add_connection("/estimator/support", JS.__msgtype__, typestore=ts)
    rev = list(reversed(joint_names))   # the bag's name order differs: mapping must be by name
    perm = [joint_names.index(n) for n in rev]
    for i in range(0, len(S["t"]), every):
        ns = int(round(S["t"][i] * 1e9))
        hdr = Header(stamp=Time(sec=ns // 10**9, nanosec=ns % 10**9), frame_id="world")
        if "odom" in conns:
            p, q = S["base_pos"][i], S["base_quat"][i]
            msg = Odom(header=hdr, child_frame_id="base_link",
                       pose=PwC(pose=Pose(position=Point(x=p[0], y=p[1], z=p[2]),
                                          orientation=Quat(x=q[0], y=q[1], z=q[2], w=q[3])),
                                covariance=np.zeros(36)),
                       twist=TwC(twist=Twist(linear=Vec3(x=0.0, y=0.0, z=0.0), angular=Vec3(x=0.0, y=0.0, z=0.0)),
                                 covariance=np.zeros(36)))
            w.write(conns["odom"], ns, ts.serialize_cdr(msg, Odom.__msgtype__))
        if "js" in conns:
            pos = S["joint_pos"][i][perm]
            msg = JS(header=hdr, name=rev, position=pos, velocity=np.zeros(len(rev)), effort=np.zeros(len(rev)))
            w.write(conns["js"], ns, ts.serialize_cdr(msg, JS.__msgtype__))
        if "support" in conns:
            msg = JS(header=hdr, name=list(leg_names), position=S["support"][i].astype(float),
                     velocity=np.zeros(len(leg_names)), effort=np.zeros(0))
            w.write(conns["support"], ns, ts.serialize_cdr(msg, JS.__msgtype__))
    w.close()
    return path


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_bag_replays_like_the_log(run_dir, tmp_path, scene, storage):
    from legged_wbc.tools.experiments.recording import load_recording

    S, _ = load_log(run_dir)
    bag = _write_bag(tmp_path / "bag", S, scene.rm.joint_names, scene.rm.cfg.leg_names, storage)
    rec = load_recording(bag)
    log = load_recording(run_dir)
    assert rec.kind == "bag" and rec.controller == "damping" and rec.scenario_name == "nominal"
    assert rec.label == "WBC-D"
    for t in (0.0, 0.5, 0.93):
        k = int(np.floor(t / 0.02 + 1e-9)) * 10      # the bag holds every 10th sample
        assert np.allclose(rec.q_at(t), np.concatenate([S["base_pos"][k], S["base_quat"][k], S["joint_pos"][k]]))
        assert np.array_equal(rec.support.at(t), S["support"][k])
    # same instant, same picture as from the log
    t = 0.5
    assert np.array_equal(scene.render(rec.q_at(t)), scene.render(log.q_at(0.5)))


def test_bag_cli_renders_with_controller_from_metadata(run_dir, tmp_path, capsys, scene):
    S, _ = load_log(run_dir)
    bag = _write_bag(tmp_path / "bag", S, scene.rm.joint_names, scene.rm.cfg.leg_names, every=20)
    out = tmp_path / "r"
    rc = cli.main(["render", str(bag), "--out", str(out), "--size", f"{W}x{H}", "--fps", "5", "--quiet",
                   "--no-strip"])
    assert rc == 0, capsys.readouterr().err
    summary = json.loads((out / "render.json").read_text())
    assert summary["kind"] == "bag" and summary["controller"] == "damping"
    assert summary["video"]["frames"] == 5


# ------------------------------------------------------------------------------------------ errors
def test_log_without_joint_positions_is_a_clear_error(run_dir, tmp_path, capsys):
    S, meta = load_log(run_dir)
    bad = tmp_path / "bad"
    bad.mkdir()
    np.savez_compressed(bad / "log.npz", meta=json.dumps(meta), **{k: v for k, v in S.items() if k != "joint_pos"})
    rc = cli.main(["render", str(bad), "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "lacks joint_pos" in err and "legged-wbc render: error:" in err
    assert not (tmp_path / "o" / "video.mp4").exists()


def test_bag_without_joint_states_is_a_clear_error(run_dir, tmp_path, capsys, scene):
    S, _ = load_log(run_dir)
    bag = _write_bag(tmp_path / "bag", S, scene.rm.joint_names, scene.rm.cfg.leg_names, topics=("odom",), every=50)
    rc = cli.main(["render", str(bag), "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "no /joint_states" in err and "/ground_truth/odom" in err


def test_not_a_run_and_bad_options(tmp_path, run_dir, capsys):
    assert cli.main(["render", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "neither a headless run directory" in capsys.readouterr().err
    assert cli.main(["render", str(run_dir), "--out", str(tmp_path / "o"), "--size", "161x120"]) == 2
    assert "even" in capsys.readouterr().err
    assert cli.main(["render", str(run_dir), "--out", str(tmp_path / "o"), "--start", "5"]) == 2
    assert "outside the run's data" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ viewer
def test_viewer_without_display_is_a_noop_with_one_message(monkeypatch, capsys):
    from mujoco_bridge import viewer
    from legged_wbc.mujoco_model import build_model

    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr(viewer, "_warned", set())
    m = build_model()
    v = viewer.open_viewer(m)
    assert not v.active and "no display" in v.reason
    v.update(np.zeros(m.nq))
    v.close()
    v2 = viewer.open_viewer(m)
    assert not v2.active
    err = capsys.readouterr().err
    assert err.count("viewer: no display") == 1 and "running without the live view" in err


def test_viewer_launch_failure_falls_back(monkeypatch, capsys):
    from mujoco_bridge import viewer
    from legged_wbc.mujoco_model import build_model

    monkeypatch.setattr(viewer, "_warned", set())

    def boom(m, d):
        raise RuntimeError("could not initialize GLFW")

    v = viewer.open_viewer(build_model(), launch=boom)
    assert not v.active and "could not initialize GLFW" in v.reason
    assert "could not initialize GLFW" in capsys.readouterr().err


def test_viewer_with_unreachable_display_does_not_end_the_process(tmp_path):
    """mujoco.viewer.launch_passive exits the process when GLFW cannot start; open_viewer must not."""
    import os
    import subprocess
    import sys

    code = ("from legged_wbc.mujoco_model import build_model\n"
            "from mujoco_bridge.viewer import open_viewer\n"
            "v = open_viewer(build_model())\n"
            "v.update([0.0] * 31)\n"
            "print('still running', v.active)\n")
    env = dict(os.environ, DISPLAY=":987")
    env.pop("WAYLAND_DISPLAY", None)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "still running False" in r.stdout
    assert "viewer: the viewer could not start" in r.stderr and "running without the live view" in r.stderr


class FakeHandle:
    """Stands in for mujoco.viewer.Handle (no window): records what sync() would show."""

    def __init__(self, d):
        import threading

        self.d, self.synced, self.running = d, [], True
        self._lock = threading.Lock()

    def is_running(self):
        return self.running

    def lock(self):
        return self._lock

    def sync(self):
        self.synced.append(self.d.qpos.copy())

    def close(self):
        self.running = False


def test_attach_viewer_feeds_the_view_off_the_physics_path(monkeypatch):
    from mujoco_bridge import viewer

    loop = ClosedLoop(load_scenario("nominal", QUICK), "cbf")
    handles = []

    def fake_launch(m, d):
        handles.append(FakeHandle(d))
        return handles[-1]

    sim = loop.sim
    qpos_sim_before = sim.d.qpos.copy()
    v = viewer.attach_viewer(loop, rate_hz=100, launch=fake_launch)
    assert v.active and sim.step.__name__ == "step" and "step" in sim.__dict__
    assert v.d is not sim.d, "the viewer has its own MjData"
    res = loop.run(0.3)
    assert not res.fell
    time.sleep(0.1)
    h = handles[0]
    assert len(h.synced) >= 3, "synced at the display rate while the loop ran"
    # copies are rate-limited (at 10x real time the last one may be 0.1 s of sim old): the next
    # update after the display period shows the latest state
    v.update(sim.d.qpos)
    time.sleep(0.1)
    assert np.allclose(h.synced[-1], sim.d.qpos, atol=1e-12), "shows the latest simulation state"
    assert not np.allclose(h.synced[-1][:3], qpos_sim_before[:3]), "the robot moved in the view"
    # update() is cheap for the caller: it copies the state at most once per display period, however
    # often it is called (the cost per call is printed, not asserted: the machine is shared)
    copies, last = 0, v._last_copy
    t0 = time.perf_counter()
    for _ in range(20000):
        v.update(sim.d.qpos)
        if v._last_copy != last:
            copies, last = copies + 1, v._last_copy
    elapsed = time.perf_counter() - t0
    assert copies <= elapsed / v.period + 1, (copies, elapsed)
    print(f"viewer update: {elapsed / 20000 * 1e6:.2f} us per call, {copies} copies in {elapsed * 1e3:.1f} ms")
    v.close()
    assert "step" not in sim.__dict__ and not h.running


def test_viewer_data_provider(monkeypatch):
    from mujoco_bridge import viewer
    from legged_wbc.mujoco_model import build_model

    m = build_model()
    q = np.array(m.qpos0)
    q[2] = 0.42
    hs = []
    v = viewer.open_viewer(m, data_provider=lambda: q, rate_hz=100,
                           launch=lambda mm, d: hs.append(FakeHandle(d)) or hs[-1])
    time.sleep(0.2)
    v.close()
    assert hs[0].synced and hs[0].synced[-1][2] == pytest.approx(0.42)


# ------------------------------------------------------------------------------------------ Foxglove
def test_foxglove_layout_is_consistent_with_the_stack():
    from legged_wbc.model import RobotModel
    from wbc_controller.config import load_wbc_config

    lay = json.loads((ROOT / "config" / "foxglove_layout.json").read_text())
    assert set(lay) >= {"configById", "layout", "globalVariables", "userNodes", "playbackConfig"}

    def leaves(node):
        if isinstance(node, str):
            return [node]
        assert node["direction"] in ("row", "column") and 0 < node.get("splitPercentage", 50) < 100
        return leaves(node["first"]) + leaves(node["second"])

    ids = leaves(lay["layout"])
    assert sorted(ids) == sorted(lay["configById"]), "every panel is placed exactly once"
    for pid in ids:
        assert pid.split("!")[0] in ("Plot", "StateTransitions", "RawMessages", "3D", "DiagnosticSummary",
                                     "DiagnosticStatusPanel"), pid
    by_title = {c["foxglovePanelTitle"]: c for c in lay["configById"].values()}
    rm, wc = RobotModel("hexapod"), load_wbc_config()
    legs = rm.cfg.leg_names

    def values(title):
        return [p["value"] for p in by_title[title]["paths"]]

    rp = by_title["Relative pitch theta [rad] (CBF bounds)"]["paths"]
    assert [p["value"] for p in rp[:len(legs)]] == [f"/wbc/relative_pitch.position[{i}]" for i in range(len(legs))]
    assert [p["label"] for p in rp[:len(legs)]] == legs
    assert sorted(float(p["value"]) for p in rp[len(legs):]) == [wc.theta_min, wc.theta_max]
    tq = by_title["Joint torque command [N m]"]["paths"]
    assert [p["label"] for p in tq] == rm.joint_names
    assert [p["value"] for p in tq] == [f"/joint_torque_cmd.effort[{i}]" for i in range(rm.n)]
    assert values("Support (estimated)") == [f"/estimator/support.position[{i}]" for i in range(len(legs))]
    from wbc_controller.diagnostics import DIAG_FIELDS

    assert f"/wbc/diagnostics.data[{DIAG_FIELDS.index('qp_time_us')}]" in values("QP time [us]")
    assert any(v.startswith("/ground_truth/odom.pose.pose.orientation.@rpy.roll") for v in values("Body roll / pitch [deg]"))
    for c in lay["configById"].values():
        for p in c.get("paths", []):
            assert p["timestampMethod"] in ("receiveTime", "headerStamp")


def test_no_offscreen_gl_is_a_clear_error(run_dir, tmp_path):
    """What a machine without the GL libraries gets (provoked with OSMesa, which is not installed)."""
    import ctypes.util
    import os
    import subprocess
    import sys

    if ctypes.util.find_library("OSMesa"):
        pytest.skip("libOSMesa is installed: this way of provoking the failure does not work")
    env = dict(os.environ, MUJOCO_GL="osmesa")
    r = subprocess.run([sys.executable, "-m", "legged_wbc.cli", "render", str(run_dir), "--out", str(tmp_path / "o"),
                        "--no-video", "--quiet"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "offscreen OpenGL (osmesa) is not available" in r.stderr and "libosmesa6" in r.stderr
