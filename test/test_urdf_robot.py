"""Robots described by their own URDF + SRDF (legged_wbc.urdf_robot): the real go2 and ANYmal C files of
example-robot-data, both models built from them (Pinocchio, MuJoCo) and the check-robot command."""

from __future__ import annotations

import re

import mujoco
import numpy as np
import pinocchio as pin
import pytest

from legged_wbc.conventions import StateConverter
from legged_wbc.mujoco_model import actuator_joint_names, build_model, hinge_joint_names
from legged_wbc.robot import ConfigError, RobotConfig, load_robot_config
from legged_wbc.urdf_robot import UrdfRobotConfig, example_robot_data_share, load_urdf_robot, resolve_uri

ROBOTS = ["go2", "anymal_c"]
ERD = example_robot_data_share() / "example-robot-data" / "robots"
GO2 = ERD / "go2_description"


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    """Prepared URDFs in a temporary cache, not the user's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "cache"))


def _robot_file(tmp_path, body: str):
    p = tmp_path / "robot.yaml"
    p.write_text("robot:\n  kind: urdf\n" + body)
    return p


def test_go2_and_anymal_c_load():
    go2 = load_robot_config("go2")
    assert isinstance(go2, UrdfRobotConfig) and go2.kind == "urdf"
    assert isinstance(load_robot_config("hexapod"), RobotConfig)        # the generated robots by name as before
    assert go2.leg_names == ["lf", "rf", "lh", "rh"] and go2.n_legs == 4
    assert go2.foot_links == ["FL_foot", "FR_foot", "RL_foot", "RR_foot"]
    assert go2.leg_specs[0].joints == ("FL_hip_joint", "FL_thigh_joint", "FL_calf_joint")
    assert go2.joint_names == [j for lg in go2.leg_specs for j in lg.joints]
    assert not any(lg.has_pitch for lg in go2.leg_specs)
    assert go2.leg_specs[0].hip_xyz == pytest.approx((0.1934, 0.0465, 0.0))
    assert go2.joint_table().names == tuple(go2.joint_names)
    assert go2.joint_table().effort[2] == pytest.approx(45.43)
    assert "mesh" in go2.feet[0].how and 0.015 < go2.foot.radius < 0.025
    assert go2.robot_mass == pytest.approx(16.085)
    assert go2.stance_height == pytest.approx(0.335, abs=2e-3)      # the SRDF's root_joint height
    assert go2.gait["groups"] == [["lf", "rh"], ["rf", "lh"]] and go2.gait["period"] == 0.5
    assert go2.imu_link == "imu" and go2.imu_xyz == pytest.approx((-0.02557, 0.0, 0.04232))
    assert go2.placeholders == []
    anymal = load_robot_config("anymal_c")
    assert anymal.foot_links == ["LF_FOOT", "RF_FOOT", "LH_FOOT", "RH_FOOT"]
    assert anymal.leg_specs[3].joints == ("RH_HAA", "RH_HFE", "RH_KFE")
    assert anymal.feet[0].how == "collision sphere"
    assert np.allclose(anymal.foot.offset, [0, 0, 0.0225]) and anymal.foot.radius == 0.03
    assert 0.7 <= anymal.gait["period"] <= 0.8
    assert np.allclose(np.array(anymal.imu_rotation) @ [1, 0, 0], [0, 1, 0], atol=1e-9)   # imu_link yawed 90 deg
    assert any("base: no <inertial>" in r for r in anymal.repairs)
    assert any("triangle inequality" in r for r in anymal.repairs)


def test_prepared_urdf_is_cached_and_loadable():
    a, b = load_robot_config("anymal_c"), load_robot_config("anymal_c")
    assert a.urdf == b.urdf and a.urdf_path().is_file() and a.urdf != a.source_urdf
    text = a.urdf_path().read_text()
    assert "package://" not in text and ".dae" not in text and 'inertiafromgeom="false"' in text


@pytest.mark.parametrize("robot", ROBOTS)
def test_pinocchio_and_mujoco_agree(robot):
    """Total mass, mass matrix, bias forces and foot points at random states, after the standard conversion."""
    cfg = load_robot_config(robot)
    m = build_model(cfg)
    pm = pin.buildModelFromUrdf(str(cfg.urdf_path()), pin.JointModelFreeFlyer())
    pd, d = pm.createData(), mujoco.MjData(m)
    assert float(np.sum(m.body_mass)) == pytest.approx(sum(i.mass for i in pm.inertias), rel=1e-12)
    assert float(np.sum(m.body_mass)) == pytest.approx(cfg.robot_mass, rel=1e-12)
    names = [pm.names[j] for j in range(2, pm.njoints)]
    assert sorted(names) == sorted(cfg.joint_names) and actuator_joint_names(m) == cfg.joint_names
    conv = StateConverter(names, hinge_joint_names(m), actuator_joint_names(m))
    t = cfg.joint_table()
    idx = [cfg.joint_names.index(n) for n in names]
    lo, hi = t.lower[idx], t.upper[idx]
    np.testing.assert_allclose(pm.lowerPositionLimit[7:], lo)       # the limits found are the model's
    feet = [pm.addFrame(pin.Frame(f"{f}_point", pm.frames[pm.getFrameId(f)].parentJoint, pm.getFrameId(f),
                                  pm.frames[pm.getFrameId(f)].placement * pin.SE3(np.eye(3), cfg.foot.offset),
                                  pin.FrameType.OP_FRAME)) for f in cfg.foot_links]
    pd = pm.createData()
    spheres = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, f"{f}_sphere") for f in cfg.foot_links]
    assert min(spheres) >= 0
    rng = np.random.default_rng(4)
    M = np.zeros((m.nv, m.nv))
    for _ in range(5):
        q = pin.neutral(pm)
        q[:3] = rng.uniform(-1, 1, 3)
        q[3:7] = pin.Quaternion(pin.exp3(rng.normal(size=3))).coeffs()
        q[7:] = rng.uniform(lo, hi)
        v = rng.normal(size=pm.nv)
        d.qpos[:], d.qvel[:] = conv.qpos_from_pin(q), conv.qvel_from_pin(q, v)
        mujoco.mj_forward(m, d)
        mujoco.mj_fullM(m, d, M)
        Mp = pin.crba(pm, pd, q)
        Mp = np.triu(Mp) + np.triu(Mp, 1).T
        np.testing.assert_allclose(conv.mass_matrix_to_pin(q, M), Mp, atol=1e-9)
        np.testing.assert_allclose(conv.bias_to_pin(q, v, M, d.qfrc_bias), pin.nonLinearEffects(pm, pd, q, v),
                                   atol=1e-9)
        pin.framesForwardKinematics(pm, pd, q)
        for fr, g in zip(feet, spheres):
            np.testing.assert_allclose(d.geom_xpos[g], pd.oMf[fr].translation, atol=1e-12)


@pytest.mark.parametrize("robot", ROBOTS)
def test_foot_point_is_the_lowest_point_standing(robot):
    """Standing pose, base at stance_height: every foot sphere touches the ground, and no part of the
    foot link's own collision geometry is lower than the sphere's bottom (within 1 mm)."""
    cfg = load_robot_config(robot)
    m = build_model(cfg)
    d = mujoco.MjData(m)
    d.qpos[2], d.qpos[3] = cfg.stance_height, 1.0
    for k, n in enumerate(hinge_joint_names(m)):
        d.qpos[7 + k] = cfg.standing_pose[n]
    mujoco.mj_forward(m, d)
    for foot in cfg.foot_links:
        g = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, f"{foot}_sphere")
        bottom = d.geom_xpos[g][2] - cfg.foot.radius
        assert abs(bottom) < 1e-3, (foot, bottom)
        b = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, foot)
        lows = []
        for k in np.flatnonzero(m.geom_bodyid == b):
            if k == g:
                continue
            if m.geom_type[k] == mujoco.mjtGeom.mjGEOM_MESH:
                mid = m.geom_dataid[k]
                V = m.mesh_vert[m.mesh_vertadr[mid]:m.mesh_vertadr[mid] + m.mesh_vertnum[mid]]
                lows.append((V @ d.geom_xmat[k].reshape(3, 3).T + d.geom_xpos[k])[:, 2].min())
            elif m.geom_type[k] == mujoco.mjtGeom.mjGEOM_SPHERE:
                lows.append(d.geom_xpos[k][2] - m.geom_size[k][0])
        assert lows and min(lows) > bottom - 1e-3 and min(lows) < bottom + 1e-3, (foot, lows, bottom)


def test_wrong_srdf_is_one_line(tmp_path):
    srdf = (GO2 / "srdf/go2.srdf").read_text()
    bad = srdf.replace('<group name="rf_leg">\n        <joint name="FR_hip_joint"/>',
                       '<group name="rf_leg">\n        <joint name="FL_hip_joint"/>', 1)
    assert bad != srdf
    (tmp_path / "bad.srdf").write_text(bad)
    p = _robot_file(tmp_path, f"  urdf: {GO2 / 'urdf/go2.urdf'}\n  srdf: bad.srdf\n")
    with pytest.raises(ConfigError) as exc:
        load_robot_config(p)
    msg = str(exc.value)
    assert "\n" not in msg and "bad.srdf" in msg
    assert re.search(r"group 'rf_leg'.*'FL_hip_joint' is not on the chain from 'base' to 'FR_foot'", msg), msg


def test_without_srdf_the_legs_come_from_the_tree(tmp_path):
    cfg = load_robot_config(_robot_file(tmp_path, f"  urdf: {GO2 / 'urdf/go2.urdf'}\n"))
    assert sorted(cfg.foot_links) == ["FL_foot", "FR_foot", "RL_foot", "RR_foot"]
    assert all(len(lg.joints) == 3 for lg in cfg.leg_specs)
    assert any("standing pose" in r for r in cfg.repairs)     # no SRDF: all joints at 0, said so


def test_package_uri_through_ament_prefix_path(tmp_path, monkeypatch):
    share = tmp_path / "prefix" / "share" / "my_go2"
    (share / "urdf").mkdir(parents=True)
    (share / "srdf").mkdir()
    (share / "urdf/go2.urdf").write_text((GO2 / "urdf/go2.urdf").read_text())
    (share / "srdf/go2.srdf").write_text((GO2 / "srdf/go2.srdf").read_text())
    body = "  urdf: package://my_go2/urdf/go2.urdf\n  srdf: package://my_go2/srdf/go2.srdf\n"
    monkeypatch.delenv("ROS_PACKAGE_PATH", raising=False)
    monkeypatch.setenv("AMENT_PREFIX_PATH", "")
    with pytest.raises(ConfigError, match="package 'my_go2' not found"):
        load_robot_config(_robot_file(tmp_path, body))
    monkeypatch.setenv("AMENT_PREFIX_PATH", f"/nonexistent{':'}{tmp_path / 'prefix'}")
    cfg = load_robot_config(_robot_file(tmp_path, body))
    assert cfg.source_urdf == str(share / "urdf/go2.urdf") and cfg.n_legs == 4
    monkeypatch.setenv("AMENT_PREFIX_PATH", "")
    monkeypatch.setenv("ROS_PACKAGE_PATH", str(tmp_path / "prefix" / "share"))
    assert resolve_uri("package://my_go2/srdf/go2.srdf") == share / "srdf/go2.srdf"


def test_placeholders_flagged_and_replaced(tmp_path):
    anymal = load_robot_config("anymal_c")
    flagged = {p.split(":")[0] for p in anymal.placeholders}
    assert flagged == {f"{leg}_{j}" for leg in ("LF", "RF", "LH", "RH") for j in ("HFE", "KFE")}
    t = anymal.joint_table()
    assert np.all(t.upper - t.lower < 2 * np.pi)
    pm = pin.buildModelFromUrdf(str(anymal.urdf_path()))
    assert np.all(pm.upperPositionLimit - pm.lowerPositionLimit < 2 * np.pi)
    # an effort placeholder from the file's overrides, and a plain override
    p = _robot_file(tmp_path, f"  urdf: {GO2 / 'urdf/go2.urdf'}\n  srdf: {GO2 / 'srdf/go2.srdf'}\n"
                              "  overrides: {effort: {'*_hip_joint': 5000, FL_calf_joint: 40}}\n")
    cfg = load_robot_config(p)
    t = cfg.joint_table()
    assert sum("effort 5000" in s for s in cfg.placeholders) == 4
    k = cfg.joint_names.index("FL_hip_joint")
    assert 0 < t.effort[k] < 1000 and t.effort[cfg.joint_names.index("FL_calf_joint")] == 40.0
    with pytest.raises(ConfigError, match="matches no leg joint"):
        load_robot_config(_robot_file(tmp_path, f"  urdf: {GO2 / 'urdf/go2.urdf'}\n"
                                                "  overrides: {effort: {nosuch: 1}}\n"))


def test_check_robot_exit_codes(tmp_path, capsys):
    from legged_wbc.cli import main

    assert main(["check-robot", "go2"]) == 0
    out = capsys.readouterr().out
    assert "OK: can walk" in out and "Pinocchio 16.085 kg, MuJoCo 16.085 kg" in out
    # a standing pose with one foot lifted: not on one plane
    pose = dict(load_robot_config("go2").standing_pose, FL_calf_joint=-2.6)
    p = _robot_file(tmp_path, f"  urdf: {GO2 / 'urdf/go2.urdf'}\n  srdf: {GO2 / 'srdf/go2.srdf'}\n"
                              f"  stance: {{pose: {pose}}}\n".replace("'", ""))
    assert main(["check-robot", str(p)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not on one plane" in err
    assert main(["check-robot", "hexapod"]) == 2          # a generated robot: check-model's business
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_check_all_example_robot_data():
    from legged_wbc.tools.analysis.robot_check import example_robot_data_table

    rows, text = example_robot_data_table()
    by = {r["robot"]: r for r in rows}
    for ok in ("go2/go2", "anymal_c_simple/anymal", "a1/a1", "go1/go1", "b1/b1", "solo/solo"):
        assert not by[ok]["problems"], (ok, by[ok]["problems"])
        assert by[ok]["mass"]["pinocchio"] == pytest.approx(by[ok]["mass"]["mujoco"], rel=1e-12)
    assert by["solo/solo"]["urdf"] == "solo12.urdf"       # the URDF the SRDF's legs are found in
    assert "is not on the chain" in by["hyq/hyq"]["problems"][0]   # its SRDF's rh_leg chain ends at lh_foot
    assert "go2/go2" in text
