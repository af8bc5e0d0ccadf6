"""The limits the controller lives under (issue 20, item 2): the torque-speed envelope as the QP's
torque bounds, the relative-pitch barrier's slack, the joint position / velocity barriers."""

from __future__ import annotations

import numpy as np
import pytest

from legged_wbc.model import RobotModel
from mujoco_bridge.sim import ActuatorEnvelope
from wbc_controller import kernels as K
from wbc_controller.blocks.torque import torque_envelope, torque_envelope_reference


def envelope_params(stall, no_load, peak):
    base = {k: t(0) for k, t in K.PARAM_SCALARS}
    base.update({k: np.zeros(shape(1, 1), dtype=t) for k, t, shape in K.PARAM_ARRAYS})
    stall, no_load, peak = (np.asarray(a, dtype=float) for a in (stall, no_load, peak))
    base.update(tau_stall=stall, tau_slope=stall / no_load, tau_peak=peak)
    return K.Params(**base)


def test_torque_envelope_known_points():
    """Stall 250 N m, no-load speed 12 rad/s, peak 250 N m (the hip yaw) and a drive whose stall
    torque exceeds its current limit (300 / 10 / 250): the bounds at chosen velocities, by hand."""
    stall, no_load, peak = [250.0, 300.0], [12.0, 10.0], [250.0, 250.0]
    par = envelope_params(stall, no_load, peak)
    cases = [  # w (2 joints) -> (lo, hi) by hand
        ([0.0, 0.0], [-250.0, -250.0], [250.0, 250.0]),
        ([6.0, 4.0], [-250.0, -250.0], [125.0, 180.0]),         # motoring along +w: S (1 - w/W)
        ([-6.0, -4.0], [-125.0, -180.0], [250.0, 250.0]),       # the mirror image
        ([12.0, 10.0], [-250.0, -250.0], [0.0, 0.0]),           # no-load speed: no torque along +w
        ([20.0, -15.0], [-250.0, -0.0], [0.0, 250.0]),          # beyond it: zero, never negative
        ([2.0, 1.0], [-250.0, -250.0], [250.0 - 250.0 / 6.0, 250.0]),   # 300 - 30 = 270, capped at P
    ]
    lo, hi = np.zeros(2), np.zeros(2)
    for w, lo_ref, hi_ref in cases:
        w = np.array(w)
        torque_envelope(w, par, lo, hi)
        np.testing.assert_allclose(lo, lo_ref, rtol=1e-15, atol=0, err_msg=f"w={w}")
        np.testing.assert_allclose(hi, hi_ref, rtol=1e-15, atol=0, err_msg=f"w={w}")
        rl, rh = torque_envelope_reference(w, np.array(stall), np.array(no_load), np.array(peak))
        np.testing.assert_array_equal(lo, rl)
        np.testing.assert_array_equal(hi, rh)


def test_torque_envelope_is_the_simulation_s():
    """The controller's bounds are the simulated drives' envelope (one formula, robot YAML)."""
    rm = RobotModel("hexapod")
    par = envelope_params(rm.stall_torque, rm.no_load_speed, rm.effort)
    env = ActuatorEnvelope(rm.stall_torque, rm.no_load_speed, rm.effort)
    w = np.random.default_rng(3).uniform(-20, 20, rm.n)
    lo, hi = np.zeros(rm.n), np.zeros(rm.n)
    torque_envelope(w, par, lo, hi)
    slo, shi = env.limits(w)
    np.testing.assert_allclose(lo, slo, rtol=1e-15, atol=1e-12)
    np.testing.assert_allclose(hi, shi, rtol=1e-15, atol=1e-12)
