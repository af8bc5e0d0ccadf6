"""One parameter schema: the core validator / loader, the ROS declaration, and every live parameter
of every node taking effect at the next tick (through the same on-set / post-set path a
``ros2 param set`` takes)."""

import math
import re
import time
from dataclasses import dataclass

import numpy as np
import pytest

from legged_wbc import params as P
from legged_wbc.params import group, param, validate
from legged_wbc.robot import ConfigError


# ------------------------------------------------------------------------------------ core
@dataclass(frozen=True)
class _Inner:
    _prefix = "inner"
    gain: float = param(1.0, 0.0, 2.0, "a gain", unit="N m/rad")
    count: int = param(2, 1, 5, "a count", unit="-", live=False)

    def __post_init__(self):
        validate(self)


@dataclass(frozen=True)
class _Cfg:
    flag: bool = param(True, desc="a flag")
    mode: str = param("a", desc="a mode", choices=("a", "b"))
    xyz: tuple = param([1.0, 2.0, 3.0], 0.0, 10.0, "a vector", unit="m")
    names: tuple = param((), desc="some names", type="str_array")
    limit: float = param(1.0, 0.0, math.inf, "may be infinite", unit="s")
    inner: _Inner = group(_Inner)

    def __post_init__(self):
        validate(self)
        if self.limit < self.xyz[0]:
            raise ConfigError("limit: must be >= xyz[0]")


def test_schema_lists_dotted_names_units_and_read_only():
    s = {f.name: f for f in P.schema(_Cfg)}
    assert list(s) == ["flag", "mode", "xyz", "names", "limit", "inner.gain", "inner.count"]
    assert s["inner.gain"].description == "a gain [N m/rad]" and s["inner.gain"].unit == "N m/rad"
    assert s["inner.count"].read_only and not s["inner.gain"].read_only
    assert s["xyz"].type == "float_array" and not s["xyz"].variable_length
    assert s["names"].type == "str_array" and s["names"].variable_length and s["names"].default == ()
    assert s["mode"].choices == ("a", "b") and s["inner.gain"].min == 0.0 and s["inner.gain"].max == 2.0


@pytest.mark.parametrize("flat, why", [
    ({"flag": "yes"}, "flag: expected true/false"), ({"flag": 1}, "flag: expected true/false"),
    ({"inner.count": 1.5}, r"inner\.count: expected an integer"), ({"inner.count": True}, "inner.count"),
    ({"inner.gain": float("nan")}, r"inner\.gain: must be finite"), ({"inner.gain": math.inf}, "finite"),
    ({"inner.gain": 3.0}, r"inner\.gain: 3\.0 out of range \[0, 2\] \(a gain \[N m/rad\]\)"),
    ({"xyz": [1.0, 2.0]}, "xyz: expected 3 values, got 2"), ({"xyz": [1, 2, 11]}, r"xyz\[2\]: 11\.0 out of range"),
    ({"mode": "c"}, "mode: 'c' is not allowed, must be one of 'a', 'b'"), ({"mode": 1}, "mode: expected a string"),
    ({"inner.gian": 1.0}, r"unknown parameter\(s\) \['inner\.gian'\]"), ({"limit": 0.5}, "limit: must be >= xyz"),
])
def test_strict_validation_names_the_parameter(flat, why):
    with pytest.raises(ConfigError, match=why):
        P.from_flat(_Cfg, flat)


def test_from_flat_to_flat_replace_round_trip():
    c = P.from_flat(_Cfg, {"flag": "False", "inner": {"count": 3.0}, "xyz": [1, 2, 3], "names": ["x"],
                           "limit": math.inf})
    assert c.flag is False and c.inner.count == 3 and isinstance(c.inner.count, int)
    assert c.xyz == (1.0, 2.0, 3.0) and all(isinstance(x, float) for x in c.xyz) and c.names == ("x",)
    assert c.limit == math.inf                              # the declared bound is inf
    flat = P.to_flat(c)
    assert flat["inner.count"] == 3 and P.from_flat(_Cfg, flat) == c
    d = P.replace(c, **{"inner.gain": "0.5", "xyz": "[4, 5, 6]"})  # CLI text
    assert d.inner.gain == 0.5 and d.xyz == (4.0, 5.0, 6.0) and P.changed_names(c, d) == ["xyz", "inner.gain"]
    e = P.replace(c, **{"inner.gain": "1e0", "inner.count": "4e0"})   # exponent without a dot: YAML 1.1 reads a string
    assert e.inner.gain == 1.0 and e.inner.count == 4 and isinstance(e.inner.count, int)
    with pytest.raises(ConfigError, match=r"inner\.gain: expected a number, got 'x1'"):
        P.replace(c, **{"inner.gain": "x1"})
    with pytest.raises(ConfigError, match=r"inner\.gain"):
        P.replace(c, **{"inner.gain": -1})
    with pytest.raises(ConfigError, match=r"inner\.gain"):
        _Inner(gain=9.0)                                    # direct construction validates too
    assert _Inner(gain=1).gain == 1.0 and isinstance(_Inner(gain=1).gain, float)


def test_load_node_config_nested_dotted_and_errors(tmp_path):
    f = tmp_path / "n.yaml"
    f.write_text("my_node:\n  ros__parameters:\n    use_sim_time: true\n    inner:\n      gain: 1.5\n"
                 "    inner.count: 4\n    mode: b\n")
    c = P.load_node_config(_Cfg, f, "my_node", overrides={"flag": False})
    assert c.inner.gain == 1.5 and c.inner.count == 4 and c.mode == "b" and c.flag is False
    f.write_text("my_node:\n  ros__parameters:\n    flag: \"yes\"\n")   # text, not a YAML boolean
    with pytest.raises(ConfigError, match=f"{f}.*flag: expected true/false"):
        P.load_node_config(_Cfg, f, "my_node")
    f.write_text("my_node:\n  ros__parameters:\n    mode: [a\n")
    with pytest.raises(ConfigError, match=f"{f}: line 4"):
        P.load_node_config(_Cfg, f, "my_node")
    f.write_text("other:\n  ros__parameters: {}\n")
    with pytest.raises(ConfigError, match="my_node"):
        P.load_node_config(_Cfg, f, "my_node")


def test_shipped_files_load_and_match_the_defaults():
    from legged_wbc.ros.stack.recorder import RecorderConfig
    from legged_wbc.robot import share_path
    from state_estimator.config import EstimatorNodeConfig, load_estimator_node_config
    from wbc_controller.config import WbcConfig, WbcNodeConfig, load_wbc_config, load_wbc_node_config

    assert load_wbc_config() == WbcConfig() and load_wbc_node_config().wbc == WbcConfig()
    assert load_estimator_node_config() == EstimatorNodeConfig()
    rec = P.load_node_config(RecorderConfig, share_path("config", "recorder.yaml"), "bag_recorder")
    assert rec.storage == "mcap" and len(rec.topics) > 3
    for cls in (WbcNodeConfig, EstimatorNodeConfig, RecorderConfig):
        for s in P.schema(cls):
            assert s.description, s.name
            if s.type in ("float", "int") and s.name not in ("qos_depth",):
                assert s.min is not None and s.max is not None, f"{cls.__name__}.{s.name}: no range"


# ------------------------------------------------------------------------------------ ROS declaration


@pytest.mark.ros
def test_node_parameters_declare_validate_and_hand_a_typed_config(ros_context):
    import rclpy
    from rclpy.parameter import Parameter

    from legged_wbc.ros.nodekit.params import NodeParameters, ParameterSchemaError

    node = rclpy.create_node("lwbc_schema_test", context=ros_context, parameter_overrides=[
        Parameter("inner.gain", value=2), Parameter("xyz", value=[1, 2, 3])])   # ints for floats
    seen = []
    Pn = NodeParameters(node, _Cfg, on_change=lambda cfg, names: seen.append((cfg, names)),
                        startup=lambda cfg: {"inner.count": cfg.inner.count + 1})  # read-only, at start-up
    assert isinstance(Pn.config, _Cfg) and Pn.config.inner.gain == 2.0 and Pn.config.inner.count == 3
    d = node.describe_parameters(["inner.gain", "inner.count", "mode", "xyz", "names"])
    assert d[0].description == "a gain [N m/rad]" and d[0].floating_point_range[0].to_value == 2.0
    assert "unit: N m/rad" in d[0].additional_constraints
    assert d[1].read_only and d[1].integer_range[0].from_value == 1 and not d[0].read_only
    assert "one of: a, b" in d[2].additional_constraints and "exactly 3 values" in d[3].additional_constraints
    assert list(node.get_parameter("names").value) == []
    for params, why in (([Parameter("inner.count", value=4)], "read-only parameter: inner.count"),
                        ([Parameter("inner.gain", value=5.0)], "inner.gain"),
                        ([Parameter("xyz", value=[1.0, 2.0])], "xyz: expected 3 values"),
                        ([Parameter("mode", value="c")], "mode"),
                        ([Parameter("limit", value=0.1)], "limit: must be >= xyz")):
        r = node.set_parameters(params)[0]
        assert not r.successful and why in r.reason, (why, r.reason)
    assert seen == [] and Pn.config.inner.gain == 2.0
    assert node.set_parameters([Parameter("inner.gain", value=0.25)])[0].successful
    assert Pn.config.inner.gain == 0.25 and seen[-1][0] is Pn.config and seen[-1][1] == ["inner.gain"]
    node.destroy_node()
    bad = rclpy.create_node("lwbc_schema_bad", context=ros_context,
                            parameter_overrides=[Parameter("inner.gain", value=7.0)])
    with pytest.raises(ParameterSchemaError, match=r"inner\.gain.*out of range"):
        NodeParameters(bad, _Cfg)
    bad.destroy_node()


# ------------------------------------------------------------------------------------ live parameters
def _set(node, **kw):
    """What ``ros2 param set`` does: SetParameters -> on-set validation -> post-set -> on_change."""
    from rclpy.parameter import Parameter

    rs = node.set_parameters([Parameter(k, value=list(v) if isinstance(v, tuple) else v) for k, v in kw.items()])
    assert all(r.successful for r in rs), [r.reason for r in rs]


def _changed(a: dict, b: dict, keys, exact=False) -> list:
    """The probed quantities that did not change between the two ticks."""
    same = []
    for k in keys:
        x, y = np.asarray(a[k]), np.asarray(b[k])
        eq = x.shape == y.shape and (np.array_equal(x, y, equal_nan=True) if exact else
                                     np.allclose(x, y, rtol=1e-7, atol=1e-9, equal_nan=True))
        if eq:
            same.append(k)
    return same


# What each live controller parameter controls, probed at the next tick: (new value, probed
# quantities of the QP / output, context (other live parameters set first), time of the tick [s]).
# tau = commanded torque; H, g = QP cost; l, u = inequality bounds (CBF, torque, normal force, swing);
# C = inequality rows (friction pyramid); tau_bounds = final torque clip; target = planned swing
# touchdown points; accepted / safe_stop = QP failure handling.
T_WALK, T_STAND = 3.3, 1.0
WBC_LIVE = {
    "relative_pitch_mode": ("damping", ["l", "u"], {}, T_WALK),
    "kp_b": (1000.0, ["l", "u"], {}, T_WALK),
    "kd_b": (50.0, ["l", "u"], {}, T_WALK),
    "k_dtheta": (20.0, ["g", "tau"], {"relative_pitch_mode": "damping"}, T_WALK),
    "theta_ddot_max": (0.01, ["g", "tau"], {"relative_pitch_mode": "damping"}, T_WALK),
    "theta_min": (-0.01, ["l", "cbf_active"], {}, T_WALK),
    "theta_max": (0.01, ["u", "cbf_active"], {}, T_WALK),
    "cbf_margin": (0.005, ["l", "u"], {}, T_WALK),
    "cbf_margin_mode": ("tau_ext", ["u"], {}, T_WALK),       # this tick's tau_ext pushes every support leg up
    "jdot_mode": ("fd", ["l", "u"], {}, T_WALK),
    "null_space_compensation": (True, ["tau"], {}, T_WALK),
    "compensation_limit": (1.0, ["tau"], {"null_space_compensation": True}, T_WALK),
    "mu": (0.3, ["C"], {}, T_WALK),
    "fz_max": (10.0, ["u", "tau"], {}, T_WALK),
    "w_body": (2.0, ["H", "g"], {}, T_WALK),
    "w_support": (2.0, ["H", "g"], {}, T_WALK),
    "w_swing": (0.5, ["H", "g"], {}, T_WALK),
    "w_pitch": (2.0, ["H", "g"], {}, T_WALK),
    "w_pitch_none": (0.5, ["H"], {"relative_pitch_mode": "none"}, T_WALK),
    "w_lambda_t": (1e-3, ["H"], {}, T_WALK),
    "w_lambda_n": (1e-3, ["H"], {}, T_WALK),
    "hessian_reg": (1e-4, ["H"], {}, T_WALK),
    "torque_limit_mode": ("realistic", ["tau_bounds", "l", "u"], {}, T_WALK),
    "tau_limit_paper": (5.0, ["tau_bounds", "tau"], {}, T_WALK),
    "residual_tol": (0.0, ["accepted"], {}, T_WALK),
    "max_failures": (0, ["safe_stop"], {"residual_tol": 0.0}, T_WALK),
    "kp_pos": ((100.0, 100.0, 100.0), ["g"], {}, T_WALK),
    "kd_pos": ((10.0, 10.0, 10.0), ["g"], {}, T_WALK),
    "kp_rot": ((100.0, 100.0, 100.0), ["g"], {}, T_WALK),
    "kd_rot": ((10.0, 10.0, 10.0), ["g"], {}, T_WALK),
    "kp_swing": ((500.0, 500.0, 500.0), ["l", "u", "tau"], {}, T_WALK),
    "kd_swing": ((10.0, 10.0, 10.0), ["l", "u", "tau"], {}, T_WALK),
    "support_foot_acceleration": ("consistent", ["g"], {}, T_WALK),
    "swing_pitch_recenter": (False, ["g"], {}, T_WALK),
    "kp_swing_pitch": (10.0, ["g"], {}, T_WALK),
    "kd_swing_pitch": (1.0, ["g"], {}, T_WALK),
    "swing_pitch_projection": (False, ["l", "u", "tau"], {}, T_WALK),
    "lift_height": (0.2, ["g", "l", "u"], {}, T_WALK),
    "touchdown_depth": (0.05, ["target"], {}, T_WALK),
    "raibert_gain": (1.5, ["target"], {}, T_WALK),
    "stand_height": (0.3, ["g"], {}, T_WALK),
    "stand_up_start": (0.5, ["g"], {"stand_height": 0.3}, T_STAND),       # a ramp from the reset height
    "stand_up_duration": (10.0, ["g"], {"stand_height": 0.3}, T_STAND),
    "forward_velocity": (0.5, ["g"], {}, T_WALK),
    "velocity_ramp_end": (20.0, ["g"], {}, T_WALK),
    "contact_normal": ("body_z", ["C"], {}, T_WALK),            # the tick's support plane is tilted 3.4 deg
    "body_attitude": ("level", ["g"], {}, T_WALK),
}
# live only with a read-only setting other than the default: (start-up overrides, new value, probes)
WBC_LIVE_WITH = {"cbf_slack_weight": ({"cbf_slack": True}, 10.0, ["H"]),
                 "cbf_margin_max": ({"cbf_margin_mode": "tau_ext"}, 0.001, ["u"]),
                 "joint_limit_kp": ({"joint_limit_barrier": True}, 100.0, ["l", "u"]),
                 "joint_limit_kd": ({"joint_limit_barrier": True, "joint_limit_kp": 1.0}, 10.0, ["l", "u"]),
                 "joint_velocity_gain": ({"joint_limit_barrier": True}, 2.0, ["l", "u"]),
                 # leg-collision rows: active for every candidate with a range of 1 m (the legs are ~0.35 m apart)
                 "leg_collision_d_min": ({"leg_collision_barrier": True, "leg_collision_range": 1.0}, 0.1, ["l"]),
                 "leg_collision_margin": ({"leg_collision_barrier": True, "leg_collision_range": 1.0}, 0.01, ["l"]),
                 "leg_collision_range": ({"leg_collision_barrier": True}, 1.0, ["l"]),
                 "leg_collision_kp": ({"leg_collision_barrier": True, "leg_collision_range": 1.0}, 1000.0, ["l"]),
                 "leg_collision_kd": ({"leg_collision_barrier": True, "leg_collision_range": 1.0,
                                       "leg_collision_kp": 1.0}, 10.0, ["l"]),
                 "leg_collision_tau_ext": ({"leg_collision_barrier": True, "leg_collision_range": 1.0}, False, ["l"])}
# the velocity command's limits, probed under a live /cmd_vel (vx 0.25, vy 0.12, wz 0.4, taken 0.3 s before the
# tick, the filter at rest 10 ms before): the tick's filtered command ("cmd") and the QP see them
WBC_LIVE_CMD = {"cmd_max_vx": (0.001, ["cmd", "g"], {}, T_WALK),
                "cmd_max_vy": (0.001, ["cmd", "g"], {}, T_WALK),
                "cmd_max_wz": (0.001, ["cmd", "g"], {}, T_WALK),
                "cmd_accel_x": (1.0, ["cmd", "g"], {}, T_WALK),
                "cmd_accel_y": (1.0, ["cmd", "g"], {}, T_WALK),
                "cmd_accel_wz": (5.0, ["cmd", "g"], {}, T_WALK),
                "cmd_vel_timeout": (0.1, ["cmd", "g"], {}, T_WALK)}


def _live_command(node, t: float) -> None:
    """A /cmd_vel message (as the subscription hands it over) taken 0.3 s before tick ``t``; the gait clock
    restarted and the filter at rest 10 ms before ``t``, so that each tick at ``t`` is the same."""
    cv = node.cmd_vel
    f = cv.commander.filter
    if node._new_cfg is not None:       # the node clamps a message taken at a tick with that tick's limits
        c = node._new_cfg
        f.limits = f.limits._replace(v_max=(c.cmd_max_vx, c.cmd_max_vy, c.cmd_max_wz))
    cv._msg = (cv._msg[0] + 1, 0.25, 0.12, 0.4)
    cv.commander.clock.tau = cv.commander._t = None
    cv.command(t - 0.3, node.ctl)
    f.v[:], f._t = 0.0, t - 0.01


def _wbc_node(ctx, live_command: bool = False, **overrides):
    from rclpy.parameter import Parameter

    from wbc_controller.node import WbcNode

    node = WbcNode(context=ctx, parameter_overrides=[Parameter("scenario", value="none")] +
                              [Parameter(k, value=v) for k, v in overrides.items()])
    ctl, outs = node.ctl, []
    update = ctl.update
    ctl.update = lambda inp: outs.append(update(inp)) or outs[-1]
    rm, rng = node.rm, np.random.default_rng(0)
    q = rm.stance_configuration(0.4).copy()
    q[3:7] = [0.02, -0.03, 0.01, 1.0] / np.linalg.norm([0.02, -0.03, 0.01, 1.0])   # attitude error
    q[7:] += 0.05 * rng.standard_normal(rm.n)
    v = 0.3 * rng.standard_normal(rm.nv)
    tau_ext = 20.0 * rng.standard_normal(rm.n)
    normal = np.array([0.05, -0.03, 1.0]) / np.linalg.norm([0.05, -0.03, 1.0])   # a tilted support plane

    def tick(t: float) -> dict:
        """One control tick on the fixed input (the swings of this tick re-planned), what it produced."""
        ctl.swing.cycle[:] = -1
        if live_command:
            _live_command(node, t)
        d = {"js": (q[7:], v[6:]), "odom": (q[:7], v[:6]), "support": np.asarray(ctl.gait.nominal_support(t), bool),
             "tau_ext": tau_ext, "normal": normal}
        node._run_tick(int(round(t / 0.002)), d)
        o, p = outs[-1], ctl.problem
        return {"tau": o.tau.copy(), "H": p.H.copy(), "g": p.g.copy(), "C": p.C.copy(), "l": p.l.copy(),
                "u": p.u.copy(), "tau_bounds": np.concatenate(ctl.tau_bounds()), "target": ctl.swing.target.copy(),
                "accepted": o.diag.qp_accepted, "safe_stop": o.diag.safe_stop,
                "cbf_active": o.diag.cbf_active.copy(), "cmd": node.cmd_vel.commander.filter.v.copy()}

    return node, tick


def _probe_all(node, tick, cases, base):
    failures = []
    for name, (new, keys, context, t) in cases.items():
        if context:
            _set(node, **context)
        a = tick(t)
        again = tick(t)
        assert _changed(a, again, list(a)) == list(a), f"{name}: the tick is not reproducible"
        _set(node, **{name: new})                 # applied at the next tick
        b = tick(t)
        same = _changed(a, b, keys, exact=name == "jdot_mode")
        if same:
            failures.append(f"{name}: {same} unchanged")
        _set(node, **{name: base[name]}, **{k: base[k] for k in context})
    return failures


@pytest.mark.ros
def test_every_live_controller_parameter_takes_effect_next_tick(ros_context):
    from wbc_controller.config import WbcConfig, WbcNodeConfig

    live = {s.name for s in P.schema(WbcNodeConfig) if s.live}
    assert live == set(WBC_LIVE) | set(WBC_LIVE_WITH) | set(WBC_LIVE_CMD), "every live parameter needs a probe (or live=False)"
    base = P.to_flat(WbcConfig())
    node, tick = _wbc_node(ros_context)
    order = [k for k in WBC_LIVE if k not in ("residual_tol", "max_failures")] + ["residual_tol", "max_failures"]
    failures = _probe_all(node, tick, {k: WBC_LIVE[k] for k in order}, base)
    node.destroy_node()
    for name, (startup, new, keys) in WBC_LIVE_WITH.items():
        node, tick = _wbc_node(ros_context, **startup)
        failures += _probe_all(node, tick, {name: (new, keys, {}, T_WALK)}, base)
        node.destroy_node()
    node, tick = _wbc_node(ros_context, live_command=True)
    failures += _probe_all(node, tick, WBC_LIVE_CMD, base)
    node.destroy_node()
    assert not failures, failures


# What each live estimator parameter controls, probed at the tick after it is set: (new value,
# probed outputs, context, (first tick after a reset, probed tick)).
SWING_DOWN_TICKS = (1598, 1601)        # the first swing of the tripod gait is in swing-down from 3.2 s (tick 1600)
SUPPORT_ENTRY_TICKS = (1690, 1705)     # ... and its feet re-enter the support set at 3.4 s
EST_LIVE = {
    "touchdown.gamma_land": (1e7, ["td_count", "touchdown"], {}, SWING_DOWN_TICKS),
    "touchdown.n_land": (5, ["touchdown"], {"touchdown.gamma_land": 1.0}, SWING_DOWN_TICKS),
    "touchdown.sigma_dq_process": (1.0, ["P_td", "tau_ext"], {}, SWING_DOWN_TICKS),
    "touchdown.sigma_tau_process": (50.0, ["P_td"], {}, SWING_DOWN_TICKS),
    "touchdown.sigma_dq_meas": (1.0, ["P_td", "tau_ext"], {}, SWING_DOWN_TICKS),
    "touchdown.base_coupling": (False, ["tau_ext"], {}, SWING_DOWN_TICKS),
    "velocity.gating": (False, ["vel_inflation", "v_world"], {}, SWING_DOWN_TICKS),
    "velocity.gate_d2": (1e4, ["vel_inflation", "v_world"], {}, SWING_DOWN_TICKS),
    "velocity.max_inflation": (1.5, ["vel_inflation", "v_world"], {}, SWING_DOWN_TICKS),
    "velocity.exclusion_cycles": (2, ["vel_excluded", "vel_used"], {}, SUPPORT_ENTRY_TICKS),
    "velocity.sigma_accel": (5.0, ["vel_cov"], {}, SWING_DOWN_TICKS),
    "velocity.sigma_meas": (1.0, ["vel_cov"], {}, SWING_DOWN_TICKS),
    "height.cutoff_hz": (0.1, ["height"], {}, SWING_DOWN_TICKS),
    "plane.cutoff_hz": (0.01, ["normal"], {"plane.deadband_deg": 0.0}, SWING_DOWN_TICKS),
    "plane.deadband_deg": (0.0, ["normal"], {}, SWING_DOWN_TICKS),
    # no touchdown in the swing-down ending at tick 1700: its legs are late at 1705, unless no extension
    "touchdown.late_max_cycles": (0, ["late", "support"], {"touchdown.gamma_land": 1e7}, SUPPORT_ENTRY_TICKS),
}


@pytest.mark.ros
def test_every_live_estimator_parameter_takes_effect_next_tick(ros_context):
    from rclpy.parameter import Parameter

    from state_estimator.config import EstimatorConfig, EstimatorNodeConfig
    from state_estimator.node import EstimatorNode

    live = {s.name for s in P.schema(EstimatorNodeConfig) if s.live}
    assert live == set(EST_LIVE), "every live parameter needs a probe (or live=False)"
    base = P.to_flat(EstimatorConfig())
    node = EstimatorNode(context=ros_context, parameter_overrides=[Parameter("scenario", value="none")])
    est, rm, outs = node.est, node.rm, []
    update = est.update
    est.update = lambda *a, **kw: outs.append(update(*a, **kw)) or outs[-1]
    q0 = rm.stance_configuration()
    quat = np.array([0.01, -0.02, 0.0, 1.0]) / np.linalg.norm([0.01, -0.02, 0.0, 1.0])

    def sample(k: int) -> dict:
        rng = np.random.default_rng(k)           # the same input for the same tick, every run
        return {"js": (q0[7:] + 0.02 * rng.standard_normal(rm.n), 0.5 * rng.standard_normal(rm.n),
                       20.0 * rng.standard_normal(rm.n)),
                "imu": (quat, 0.1 * rng.standard_normal(3), np.array([0.0, 0.0, 9.81]) + rng.standard_normal(3))}

    def run(ticks, set_before_last: dict | None = None) -> dict:
        est.reset(q0)
        k0, k1 = ticks
        for k in range(k0, k1):
            node._run_tick(k, sample(k))
        if set_before_last:
            _set(node, **set_before_last)
        node._run_tick(k1, sample(k1))
        e = outs[-1]
        return {"td_count": e.td_count, "touchdown": e.touchdown, "tau_ext": e.tau_ext, "v_world": e.v_world,
                "vel_cov": e.vel_cov, "vel_inflation": e.vel_inflation, "vel_excluded": e.vel_excluded,
                "vel_used": e.vel_used, "height": e.q[2], "P_td": est.touchdown.P.copy(),
                "normal": e.support_normal, "late": e.late, "support": e.support}

    failures = []
    for name, (new, keys, context, ticks) in EST_LIVE.items():
        if context:
            _set(node, **context)
        a = run(ticks)
        assert _changed(a, run(ticks), list(a)) == list(a), f"{name}: the run is not reproducible"
        b = run(ticks, {name: new})
        same = _changed(a, b, keys)
        if same:
            failures.append(f"{name}: {same} unchanged")
        _set(node, **{name: base[name]}, **{k: base[k] for k in context})
        node._run_tick(ticks[1] + 1, sample(ticks[1] + 1))   # the restore is applied
    node.destroy_node()
    assert not failures, failures


@pytest.mark.ros
def test_every_live_recorder_parameter_takes_effect(ros_context, tmp_path):
    """discovery_period -> the discovery timer's period; stop_when_gone -> the next peer check;
    drain_time -> how long the stop keeps taking messages."""
    import rclpy
    from rclpy.parameter import Parameter

    from legged_wbc.ros.stack.recorder import RecorderConfig, BagRecorder

    assert {s.name for s in P.schema(RecorderConfig) if s.live} == {"discovery_period", "stop_when_gone",
                                                                     "drain_time"}
    rec = BagRecorder(context=ros_context, parameter_overrides=[
        Parameter("output", value=str(tmp_path / "bag")), Parameter("topics", value=["/x:std_msgs/msg/String"])])
    try:
        rec.start_discovery_timer()
        timer = rec.discovery_timer
        assert timer.period == 0.2
        _set(rec, discovery_period=0.05)
        assert timer.period == 0.05
        peer = rclpy.create_node("lwbc_peer", context=ros_context)
        rec.check_peers()
        assert rec.stop_reason is None and not rec.peers.seen        # not watched yet
        _set(rec, stop_when_gone=["lwbc_peer"])
        deadline = time.monotonic() + 5.0
        while "lwbc_peer" not in rec.peers.seen and time.monotonic() < deadline:
            rec.check_peers()
            time.sleep(0.02)
        peer.destroy_node()
        while rec.stop_reason is None and time.monotonic() < deadline:
            rec.check_peers()
            time.sleep(0.02)
        assert rec.stop_reason == "node lwbc_peer left the graph"

        def drained() -> float:
            t0 = time.monotonic()
            rec.drain(lambda t: time.sleep(t))
            return time.monotonic() - t0

        assert drained() > 0.25                                       # default 0.3 s
        _set(rec, drain_time=0.0)
        assert drained() < 0.1
        r = rec.set_parameters([Parameter("storage", value="sqlite3")])[0]
        assert not r.successful and "read-only" in r.reason
    finally:
        rec.close()
        rec.destroy_node()


# ------------------------------------------------------------------------------------ geometry
REACH = "beyond the legs' reach (hexapod)"


def test_foot_depth_range_from_the_leg_kinematics():
    """The reach the parameter check uses is the legs' own: at its ends the IK solution has a knee bent by
    exactly the margin (top) and every joint inside its limits; 1 cm further it has none."""
    from legged_wbc.model import KNEE_BEND_MIN, RobotModel

    rm = RobotModel("hexapod")
    d_min, d_max = rm.foot_depth_range()
    lt = rm.cfg.leg_type
    planar = lt.femur_length + lt.tibia_length          # a stretched femur + tibia: above the true reach
    assert rm.cfg.stance_height - rm.foot_radius < d_max < planar + lt.foot_length
    q = rm._feet_at_depth(d_max, rm.stance_joint_positions(), KNEE_BEND_MIN)
    assert q is not None and min(abs(q[j[2]]) for j in rm.leg_joints) == pytest.approx(KNEE_BEND_MIN, abs=0.02)
    assert rm._feet_at_depth(d_max + 0.01, q, KNEE_BEND_MIN) is None
    assert rm._feet_at_depth(d_min - 0.01, rm.stance_joint_positions(), KNEE_BEND_MIN) is None


def test_stand_height_out_of_reach_is_refused_with_the_reason(tmp_path):
    """stand_height 1.5 is inside its declared range [0.1, 1.5] but the legs cannot reach it: refused by the
    one check every path takes (the config, the headless loop's --set, a parameter file), one line, rc 2."""
    import subprocess
    import sys
    from pathlib import Path

    from wbc_controller.config import WbcConfig, load_wbc_config, load_wbc_node_config

    spec = {s.name: s for s in P.schema(WbcConfig)}["stand_height"]
    assert spec.min <= 1.5 <= spec.max                            # the range alone lets it through
    for over, why in (({"stand_height": 1.5}, f"stand_height: 1.5 m is {REACH}"),
                      ({"stand_height": 0.1}, "stand_height: 0.1 m leaves the body"),
                      ({"stand_height": 0.2, "lift_height": 0.4, "stumble_lift": 0.3}, "lift_height: a swing apex")):
        with pytest.raises(ConfigError, match=re.escape(why)):
            load_wbc_config(overrides=over)
    assert load_wbc_config(overrides={"stand_height": 0.7}).stand_height == 0.7
    with pytest.raises(ConfigError, match=re.escape("reach (quadruped)")):
        load_wbc_config(overrides={"stand_height": 1.5}, robot="quadruped")
    f = tmp_path / "wbc.yaml"
    f.write_text("wbc_controller:\n  ros__parameters:\n    stand_height: 1.5\n")
    with pytest.raises(ConfigError, match=re.escape(f"stand_height: 1.5 m is {REACH}")):
        load_wbc_node_config(f)
    exe = Path(sys.executable).parent / "legged-wbc"
    r = subprocess.run([str(exe), "run", "--scenario", "nominal", "--duration", "0.1", "--out", str(tmp_path / "r"),
                        "--set", "controller.stand_height=1.5"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().count("\n") == 0 and f"stand_height: 1.5 m is {REACH}" in r.stderr, r.stderr
    assert not (tmp_path / "r" / "metrics.json").exists()


@pytest.mark.ros
def test_stand_height_out_of_reach_refused_by_the_node(ros_context, tmp_path):
    """The controller node: a parameter file's stand_height 1.5 stops it at start-up (rc 2, the reason), and a
    live ``param set`` of 1.5 is rejected with the reason, the running config unchanged."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from rclpy.parameter import Parameter

    from domains import domain_id

    node, _ = _wbc_node(ros_context)
    r = node.set_parameters([Parameter("stand_height", value=1.5)])[0]
    assert not r.successful and f"stand_height: 1.5 m is {REACH}" in r.reason, r.reason
    assert node.params.config.stand_height != 1.5 and node.get_parameter("stand_height").value != 1.5
    assert node.set_parameters([Parameter("stand_height", value=0.5)])[0].successful
    node.destroy_node()
    f = tmp_path / "wbc.yaml"
    f.write_text("wbc_controller:\n  ros__parameters:\n    stand_height: 1.5\n")
    env = dict(os.environ, ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST", ROS_DOMAIN_ID=str(domain_id()))
    p = subprocess.run([str(Path(sys.executable).parent / "wbc_controller"), "--ros-args", "-p", "scenario:=none",
                        "--params-file", str(f)], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stdout + p.stderr
    assert f"stand_height: 1.5 m is {REACH}" in p.stderr, p.stderr
