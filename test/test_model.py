"""Dynamics core: conventions, Jacobians, Pinocchio-vs-MuJoCo agreement, model hygiene."""

import subprocess
import sys
from pathlib import Path

import mujoco
import numpy as np
import pinocchio as pin
import pytest

from legged_wbc.tools.analysis.checks import check_model, conditioning, make_pair
from legged_wbc.model import RobotModel, joint_permutation, null_vector
from legged_wbc.robot import ConfigError, RobotConfig, generate_urdf, load_robot_config

ROOT = Path(__file__).resolve().parent.parent
ROBOTS = ["hexapod", "quadruped"]


def random_state(rm, rng):
    q = rm.neutral()
    q[:3] = rng.uniform(-1, 1, 3)
    q[3:7] = pin.Quaternion(pin.exp3(rng.normal(size=3))).coeffs()
    q[7:] = rng.uniform(rm.lower, rm.upper)
    return q, rng.normal(size=rm.nv)


@pytest.mark.parametrize("robot", ROBOTS)
def test_urdf_in_sync_with_config(robot):
    cfg = load_robot_config(robot)
    assert cfg.urdf_path().read_text() == generate_urdf(cfg), "run `legged-wbc generate-urdf` after editing the YAML"


@pytest.mark.parametrize("robot", ROBOTS)
def test_pinocchio_matches_mujoco(robot):
    res = check_model(robot, states=20, seed=3)
    assert res["states"] == 20
    for k, v in res["max_err"].items():
        assert v <= 1e-9, (k, v)


@pytest.mark.parametrize("robot", ROBOTS)
def test_conversions_round_trip(robot):
    rm, m, conv = make_pair(robot)
    rng = np.random.default_rng(1)
    for _ in range(10):
        q, v = random_state(rm, rng)
        qpos, qvel = conv.qpos_from_pin(q), conv.qvel_from_pin(q, v)
        np.testing.assert_allclose(conv.q_from_mj(qpos), q, atol=1e-14)
        np.testing.assert_allclose(conv.v_from_mj(qpos, qvel), v, atol=1e-13)
        # and from MuJoCo's side
        qpos2 = conv.qpos_from_pin(conv.q_from_mj(qpos))
        np.testing.assert_allclose(qpos2, qpos, atol=1e-14)
        # quaternion order: MuJoCo stores w first
        assert qpos[3] == q[6]
        # MuJoCo's free-joint linear velocity is in the world frame: R v_body
        R = pin.Quaternion(q[3:7]).toRotationMatrix()
        np.testing.assert_allclose(qvel[:3], R @ v[:3], atol=1e-14)


def test_joint_maps_by_name(hexapod):
    rm, m, conv = make_pair("hexapod")
    from legged_wbc.mujoco_model import actuator_joint_names, hinge_joint_names

    mj_names = hinge_joint_names(m)
    assert sorted(mj_names) == sorted(rm.joint_names)
    # the maps really permute (Pinocchio orders the tree differently from the URDF file)
    x_pin = np.arange(rm.n, dtype=float)
    x_mj = x_pin[conv.pin_to_mj]
    for k, name in enumerate(mj_names):
        assert x_mj[k] == rm.joint_index[name]
    ctrl = conv.ctrl_from_tau(x_pin)
    for a, name in enumerate(actuator_joint_names(m)):
        assert ctrl[a] == rm.joint_index[name]
    with pytest.raises(ValueError, match="missing"):
        joint_permutation(["a", "b"], ["a", "c"])


def test_free_flyer_nq_nv_trap(hexapod):
    """Seed note: nq = nv + 1, configurations move with pin.integrate(q, v*dt), v is body-local."""
    rm = hexapod
    assert rm.nq == rm.n + 7 and rm.nv == rm.n + 6
    q = rm.stance_configuration()
    yaw = pin.utils.rpyToMatrix(0, 0, np.pi / 2)
    q[3:7] = pin.Quaternion(yaw).coeffs()
    v = np.zeros(rm.nv)
    v[0] = 1.0  # 1 m/s forward in the BODY frame -> world +y when yawed by 90 deg
    q1 = rm.integrate(q, v, 0.5)
    np.testing.assert_allclose(q1[:3] - q[:3], [0.0, 0.5, 0.0], atol=1e-12)
    # rotation: 1 rad/s about body z for 0.1 s
    v[:] = 0.0
    v[5] = 1.0
    q2 = rm.integrate(q, v, 0.1)
    rpy = pin.utils.matrixToRpy(pin.Quaternion(q2[3:7]).toRotationMatrix())
    assert abs(rpy[2] - (np.pi / 2 + 0.1)) < 1e-12
    assert abs(np.linalg.norm(q2[3:7]) - 1) < 1e-14
    with pytest.raises(ValueError, match="expected shape"):
        rm.check_state(np.zeros(rm.nv))


@pytest.mark.parametrize("robot", ROBOTS)
def test_leg_jacobians_finite_difference(robot):
    rm = RobotModel(robot)
    rng = np.random.default_rng(2)
    eps = 1e-6
    qj0 = rm.stance_joint_positions()
    for trial in range(5):
        qj = qj0 + rng.uniform(-0.3, 0.3, rm.n)
        legs = rm.legs(qj)
        for i, leg in enumerate(legs):
            cols = rm.leg_joints[i]
            for k, c in enumerate(cols):
                dq = np.zeros(rm.n)
                dq[c] = eps
                lp, lm = rm.legs(qj + dq)[i], rm.legs(qj - dq)[i]
                np.testing.assert_allclose((lp.p - lm.p) / (2 * eps), leg.J_p[:, k], atol=1e-7)
                np.testing.assert_allclose((lp.theta - lm.theta) / (2 * eps), leg.J_theta[k], atol=1e-7)
            # null-space vector: J_p n = 0, |n| = 1, J_theta n >= 0
            np.testing.assert_allclose(leg.J_p @ leg.n, 0.0, atol=1e-12)
            assert abs(np.linalg.norm(leg.n) - 1) < 1e-12 and leg.J_theta @ leg.n >= 0


@pytest.mark.parametrize("robot", ROBOTS)
def test_drift_terms_finite_difference(robot):
    """d/dt (J q_dot) along a trajectory with q_ddot = 0 equals the exact drift J_dot q_dot."""
    rm = RobotModel(robot)
    rng = np.random.default_rng(4)
    qj0 = rm.stance_joint_positions()
    h = 1e-6
    saw_nonzero_theta_drift = False
    for trial in range(5):
        qj = qj0 + rng.uniform(-0.3, 0.3, rm.n)
        dqj = rng.normal(size=rm.n) * 2.0
        legs = rm.legs(qj, dqj)
        lp, lm = rm.legs(qj + h * dqj, dqj), rm.legs(qj - h * dqj, dqj)
        for i, leg in enumerate(legs):
            dq = dqj[rm.leg_joints[i]]
            fd_p = (lp[i].J_p @ dq - lm[i].J_p @ dq) / (2 * h)
            fd_t = (lp[i].J_theta @ dq - lm[i].J_theta @ dq) / (2 * h)
            np.testing.assert_allclose(leg.dJ_p_dq, fd_p, atol=1e-5)
            assert abs(leg.dJ_theta_dq - fd_t) < 1e-5
            saw_nonzero_theta_drift |= abs(leg.dJ_theta_dq) > 1e-3
            # theta_dot from the Jacobian agrees with the time derivative of theta
            assert abs((lp[i].theta - lm[i].theta) / (2 * h) - leg.theta_dot) < 1e-6
    if robot == "quadruped":  # tilted hip-yaw axes make theta nonlinear in q
        assert saw_nonzero_theta_drift


@pytest.mark.parametrize("robot", ROBOTS)
def test_relative_pitch_definition(robot):
    """theta = atan2(-a_z, |a_xy|) of the foot link's x-axis ``a`` in the base frame (Pinocchio's
    foot-link placement on the fixed-base model), in the reference leg kinematics and in the compiled
    chain kernel the controller runs, at configurations IK puts at prescribed theta."""
    rm = RobotModel(robot)
    ws = rm.leg_workspace()
    assert ws.chain is not None                      # the compiled chain walk, not the Pinocchio fallback
    d = rm.fixed.createData()
    qj0 = rm.stance_joint_positions()
    zeros = np.zeros(rm.n)
    for i, (p_nom, _) in enumerate(rm.stance_targets()):
        for th in (-0.4, 0.0, 0.3):
            qj, ok = rm.leg_ik(i, p_nom, th, qj0)
            assert ok, (i, th)
            pin.framesForwardKinematics(rm.fixed, d, qj)
            a = d.oMf[rm.foot_link_frames_fixed[i]].rotation[:, 0]
            assert abs(np.arctan2(-a[2], np.hypot(a[0], a[1])) - th) < 1e-9
            ref = rm.legs_batch(qj)
            fast = ws.update(qj, zeros)
            np.testing.assert_allclose(fast.a[i], a, atol=1e-12)
            assert abs(ref.theta[i] - th) < 1e-9 and abs(fast.theta[i] - th) < 1e-9


def test_null_vector_general():
    rng = np.random.default_rng(0)
    J = rng.normal(size=(3, 4))
    n = null_vector(J)
    np.testing.assert_allclose(J @ n, 0, atol=1e-12)


@pytest.mark.parametrize("robot", ROBOTS)
def test_mujoco_model_steps_without_warnings(robot):
    rm, m, conv = make_pair(robot)
    d = mujoco.MjData(m)
    q = rm.stance_configuration()
    d.qpos[:] = conv.qpos_from_pin(q)
    for _ in range(1000):
        qj = d.qpos[7:][conv.mj_to_pin]
        dqj = d.qvel[6:][conv.mj_to_pin]
        d.ctrl[:] = conv.ctrl_from_tau(300 * (q[7:] - qj) - 10 * dqj)
        mujoco.mj_step(m, d)
    assert all(w.number == 0 for w in d.warning)
    assert np.all(np.isfinite(d.qpos))
    assert d.qpos[2] > 0.3  # still standing on its feet


@pytest.mark.parametrize("robot", ROBOTS)
def test_conditioning_well_away_from_zero(robot):
    res = conditioning(robot, samples=11)
    assert res["ik_failures"] == 0 and res["rank_jp_min"] == 3
    assert res["sigma_min"] > 0.1 and res["alignment_min"] > 0.5


def test_bad_input_is_named():
    cfg = load_robot_config("hexapod")
    import dataclasses

    bad = dataclasses.replace(cfg, legs=cfg.legs[:-1])  # URDF has a leg the config does not
    with pytest.raises(ConfigError, match="does not assign"):
        RobotModel(bad)
    import yaml

    d = yaml.safe_load((ROOT / "config/robot_hexapod.yaml").read_text())
    d["robot"]["leg_type"]["joint_suffixes"][2] = "elbow"
    with pytest.raises(ConfigError, match="lf_elbow"):
        RobotModel(RobotConfig.from_dict(d))
    d = yaml.safe_load((ROOT / "config/robot_hexapod.yaml").read_text())
    d["robot"]["leg_type"]["femur_length"] = -1
    with pytest.raises(ConfigError, match="femur_length"):
        RobotConfig.from_dict(d)
    rm = RobotModel("hexapod")
    with pytest.raises(ValueError, match="joint positions: expected 24"):
        rm.legs(np.zeros(23))
    q = rm.stance_configuration()
    q[9] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        rm.check_state(q)


# Where rclpy may be imported: the ROS plumbing package and the three node modules. Everything else
# (the core, the tools, the CLI, the math of the node packages) must import without it.
ROS_MODULES = ("legged_wbc.ros", "mujoco_bridge.node", "state_estimator.node", "wbc_controller.node")


def _python_modules():
    for pkg in ("legged_wbc", "wbc_controller", "state_estimator", "mujoco_bridge"):
        for f in sorted((ROOT / pkg).rglob("*.py")):
            rel = f.relative_to(ROOT).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            yield ".".join(parts), f


def _is_ros_module(mod: str) -> bool:
    return any(mod == r or mod.startswith(r + ".") for r in ROS_MODULES)


def _imports(f):
    import ast

    for node in ast.walk(ast.parse(f.read_text())):
        if isinstance(node, ast.Import):
            yield from ((a.name, node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            yield node.module or "", node.lineno


def test_rclpy_only_in_ros_modules_by_structure():
    """rclpy is imported (at the top or inside a function) only by legged_wbc.ros and the node modules;
    the core (legged_wbc's top-level modules, the node packages' math) imports neither the ROS package
    nor the tools or the CLI (layering: core <- tools, ros <- cli)."""
    offenders = []
    for mod, f in _python_modules():
        core = mod.count(".") <= 1 and not mod.startswith(("legged_wbc.ros", "legged_wbc.tools", "legged_wbc.cli")) \
            and not _is_ros_module(mod) and not mod.endswith(".bench")
        for name, line in _imports(f):
            if name.split(".")[0] == "rclpy" and not _is_ros_module(mod):
                offenders.append(f"{mod}:{line} imports {name}")
            if core and name.startswith(("legged_wbc.ros", "legged_wbc.tools", "legged_wbc.cli")):
                offenders.append(f"{mod}:{line} (core) imports {name}")
    assert offenders == [], offenders


def test_core_imports_without_rclpy():
    mods = [m for m, _ in _python_modules() if not _is_ros_module(m) and not m.endswith(".__main__")]
    assert "legged_wbc.robot" in mods and "legged_wbc.cli" in mods and "wbc_controller.controller" in mods
    code = (
        "import sys, importlib\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'rclpy' or name.startswith('rclpy.'): raise ImportError('rclpy blocked')\n"
        "sys.meta_path.insert(0, Block())\n"
        f"for m in {mods!r}:\n"
        "    importlib.import_module(m)\n"
        "from legged_wbc.cli import build_parser\n"
        "build_parser()\n"
        "assert 'rclpy' not in sys.modules\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr


def test_check_model_cli_json():
    out = subprocess.run([sys.executable, "-m", "legged_wbc.cli", "check-model", "--json", "--states", "20"],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    import json

    res = json.loads(out.stdout)
    assert set(res["max_err"]) == {"mass_matrix", "bias", "com", "foot_position", "foot_jacobian"}
    assert res["states"] == 20 and res["max_abs_error"] <= 1e-9


NODE_MODULES = ("mujoco_bridge/node.py", "state_estimator/node.py", "wbc_controller/node.py",
                "legged_wbc/ros/stack/recorder.py", "legged_wbc/ros/stack/container.py")


def test_node_modules_stay_thin():
    """Nodes wire ROS to rclpy-free classes; each node module stays under 250 lines (docstring included)."""
    long = {m: n for m in NODE_MODULES if (n := len((ROOT / m).read_text().splitlines())) > 250}
    assert long == {}, long


def test_setup_lists_every_package():
    """setup.py's explicit package list (an ament_python install copies only those) has every package."""
    import re

    listed = set(re.findall(r'"([a-z_.]+)"', re.search(r"packages=\[(.*?)\]", (ROOT / "setup.py").read_text(),
                                                        re.S).group(1)))
    found = {".".join(p.parent.relative_to(ROOT).parts) for pkg in ("legged_wbc", "wbc_controller", "state_estimator",
                                                                   "mujoco_bridge") for p in (ROOT / pkg).rglob("__init__.py")}
    assert listed == found


def test_null_vector_equals_the_determinant_definition_and_leg_jacobians_equal_legs():
    """null_vector (minors in floats) = the signed 3x3 determinants of J_p (LAPACK), up to rounding;
    leg_jacobians(q, i) is bit-identical to legs(q)[i] (J_p, J_theta), the disturbance's inputs."""
    rm = RobotModel("hexapod")
    rng = np.random.default_rng(3)
    for _ in range(200):
        J, jt = rng.normal(size=(3, 4)), rng.normal(size=4)
        ref = np.array([(-1) ** k * np.linalg.det(np.delete(J, k, axis=1)) for k in range(4)])
        ref /= np.linalg.norm(ref)
        ref = -ref if jt @ ref < 0 else ref
        n = null_vector(J, jt)
        assert np.allclose(n, ref, rtol=0, atol=1e-13) and abs(np.linalg.norm(n) - 1) < 1e-14
        assert np.allclose(J @ n, 0, atol=1e-12) and jt @ n >= 0
    J = np.array([[1.0, 0, 0, 0], [2.0, 0, 0, 0], [0, 0, 1.0, 0]])   # rank 2: the SVD fallback
    n = null_vector(J)
    assert np.allclose(J @ n, 0, atol=1e-12) and abs(np.linalg.norm(n) - 1) < 1e-12
    q0 = rm.stance_joint_positions()
    for _ in range(20):
        q = q0 + rng.normal(0, 0.3, rm.n)
        legs = rm.legs(q)
        for i, lg in enumerate(legs):
            Jp, Jt = rm.leg_jacobians(q, i)
            assert np.array_equal(Jp, lg.J_p) and np.array_equal(Jt, lg.J_theta)
