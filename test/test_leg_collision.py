"""Leg-collision barrier (wbc_controller/blocks/leg_collision.py): the capsule geometry against known
answers, distance / Jacobian / drift against finite differences, the row's entries and bound, that it
is loose far from d_min, the kernel against the numpy reference (Pinocchio), and the leg_squeeze
scenario in closed loop with and without the barrier."""

import dataclasses

import numpy as np
import pytest

from legged_wbc.closed_loop import ClosedLoop
from legged_wbc.leg_neighbours import neighbour_pairs
from legged_wbc.model import RobotModel
from legged_wbc.scenario import load_scenario
from wbc_controller.blocks import leg_collision as lc
from wbc_controller.config import load_wbc_config
from wbc_controller.controller import WholeBodyController
from wbc_controller.qp import INF


@pytest.fixture(scope="module")
def rm():
    return RobotModel("hexapod")


@pytest.fixture(scope="module")
def ctl(rm):
    """A compiled controller with the barrier (its workspace record holds the geometry and chains)."""
    cfg = load_wbc_config(overrides={"leg_collision_barrier": True, "leg_collision_d_min": 0.2,
                                     "leg_collision_range": 1.0})
    return WholeBodyController(rm, cfg)


def squeezed(rm, yaw=0.55):
    """Stance joints with lf and lm turned towards each other by ``yaw`` (their links ~cm apart)."""
    qj = rm.stance_joint_positions().copy()
    names = rm.cfg.leg_names
    qj[rm.leg_joints[names.index("lf")][0]] += yaw
    qj[rm.leg_joints[names.index("lm")][0]] -= yaw
    return qj


def frames(ctl, qj):
    w = ctl._ws[0]
    N = ctl.N
    O, Z, P = np.zeros((N, 4, 3)), np.zeros((N, 4, 3)), np.zeros((N, 3))
    lc.collision_frames(qj, np.zeros_like(qj), w, O, Z, P)
    return w, O, Z, P


def kernel_distance(ctl, qj, c):
    w, O, Z, P = frames(ctl, qj)
    coef = np.zeros(8)
    d = lc.pair_row(c, w, O, Z, P, coef)
    la, lb = ctl._lc_pairs[c, 0], ctl._lc_pairs[c, 2]
    J = np.zeros(ctl.n)
    J[ctl.leg_j[la]] = coef[:4]
    if lb >= 0:
        J[ctl.leg_j[lb]] = coef[4:]
    return d, J


# ---------------------------------------------------------------------------- geometry
def test_segment_closest_known_answers():
    # crossing at right angles, 1 m apart: the middles
    assert lc.segment_closest(-1, 0, 0, 1, 0, 0, 0, -1, 1, 0, 1, 1) == pytest.approx((0.5, 0.5))
    # end point to the other's interior
    assert lc.segment_closest(0, 0, 0, 1, 0, 0, 2, -1, 0, 2, 1, 0) == pytest.approx((1.0, 0.5))
    # both clamped: end to end
    assert lc.segment_closest(0, 0, 0, 1, 0, 0, 2, 1, 0, 3, 2, 0) == pytest.approx((1.0, 0.0))
    # a point (degenerate segment) and a segment
    assert lc.segment_closest(0.3, 1, 0, 0.3, 1, 0, 0, 0, 0, 1, 0, 0) == pytest.approx((0.0, 0.3))
    # parallel: a pair of closest points at the same distance
    s, t = lc.segment_closest(0, 0, 0, 1, 0, 0, 0.5, 1, 0, 1.5, 1, 0)
    assert 0.5 <= s <= 1.0 and t == pytest.approx(s - 0.5)    # on the overlap, 1 m apart
    ref = lc.LegCollisionReference.closest(*(np.array(v, float) for v in ((0, 0, 0), (1, 0, 0), (0.5, 1, 0), (1.5, 1, 0))))
    assert np.linalg.norm(ref[0] - ref[1]) == pytest.approx(1.0)


def test_neighbours_and_candidates(rm):
    names = rm.cfg.leg_names
    pairs = {(names[a], names[b]) for a, b in neighbour_pairs([leg.mount_xyz[:2] for leg in rm.cfg.legs])}
    want = {("lf", "lm"), ("lm", "lh"), ("lh", "rh"), ("rf", "rm"), ("rm", "rh"), ("lf", "rf")}
    assert {tuple(sorted(p, key=names.index)) for p in pairs} == {tuple(sorted(p, key=names.index)) for p in want}
    g = lc.collision_geometry(rm)
    assert g["lc_pairs"].shape == (10 * rm.n_legs, 4)
    assert g["lc_radius"].tolist() == [0.03, 0.03, 0.025, 0.025]
    assert g["lc_body_half"].tolist() == [0.45, 0.25, 0.08]


def test_foot_to_body_known_answer(ctl, rm):
    """A foot point below the body: d = (depth below the box) - foot radius; inside the box: minus the
    depth to the nearest face, minus the radius."""
    w, O, Z, P = frames(ctl, rm.stance_joint_positions())
    c = int(np.flatnonzero(ctl._lc_pairs[:, 2] < 0)[0])       # leg 0's foot and the body
    leg = ctl._lc_pairs[c, 0]
    P2 = P.copy()
    P2[leg] = (0.1, 0.05, -0.30)
    d = lc.pair_points(c, w, O, P2)[6]
    assert d == pytest.approx(0.30 - 0.08 - 0.025, abs=1e-15)
    P2[leg] = (0.1, 0.05, 0.0)                                 # inside: through the nearest face (z, 8 cm)
    assert lc.pair_points(c, w, O, P2)[6] == pytest.approx(-0.08 - 0.025, abs=1e-15)
    P2[leg] = (0.1, 0.22, 0.0)                                 # nearer the side (y, 3 cm)
    assert lc.pair_points(c, w, O, P2)[6] == pytest.approx(-0.03 - 0.025, abs=1e-15)


# ---------------------------------------------------------------------------- derivatives
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_distance_jacobian_and_drift_match_finite_differences(ctl, rm, seed):
    rng = np.random.default_rng(seed)
    qj = squeezed(rm) + 0.05 * rng.standard_normal(rm.n)
    ref = lc.LegCollisionReference(rm, ctl.cfg)
    d_all = ref.distances(qj)
    for c in np.argsort(d_all)[:6]:                            # the closest pairs (lf-lm links)
        d, J = kernel_distance(ctl, qj, int(c))
        dr, Jr = ref.jacobian(int(c), qj)
        assert d == pytest.approx(dr, abs=1e-14)
        np.testing.assert_allclose(J, Jr, atol=1e-13)
        e = rng.standard_normal(rm.n)
        h = 1e-6
        fd = (kernel_distance(ctl, qj + h * e, int(c))[0] - kernel_distance(ctl, qj - h * e, int(c))[0]) / (2 * h)
        assert J @ e == pytest.approx(fd, rel=1e-6, abs=1e-8)
        # the drift q_dot^T (d^2 d / dq^2) q_dot: second difference of d along q_dot
        dq = rng.standard_normal(rm.n)
        h2 = 1e-4
        second = (kernel_distance(ctl, qj + h2 * dq, int(c))[0] - 2 * d
                  + kernel_distance(ctl, qj - h2 * dq, int(c))[0]) / h2**2
        rate = [float(kernel_distance(ctl, qj + s * lc.FD_STEP * dq, int(c))[1] @ dq) for s in (1, -1)]
        drift = (rate[0] - rate[1]) / (2 * lc.FD_STEP)
        assert drift == pytest.approx(second, rel=1e-3, abs=1e-4)


# ---------------------------------------------------------------------------- the rows
def test_row_entries_known_answer_and_loose_far_away(rm):
    """The row: coef = J_d on the two legs' nu_dot columns, lower bound -k_p (d - d_min) - k_d d_dot
    - drift - J_d M_ll^-1 tau_add (a swing leg with the option: tau_add - tau_ext), upper INF; far
    from d_min (nominal stance, d ~ 0.35 m) every row is loose."""
    cfg = load_wbc_config(overrides={"leg_collision_barrier": True})
    ctl = WholeBodyController(rm, cfg)
    ref = lc.LegCollisionReference(rm, cfg)
    n = rm.n
    q = rm.stance_configuration()
    M = rm.mass_matrix(q)
    rng = np.random.default_rng(3)
    dqj, tau_add, tau_ext = rng.standard_normal(n), 10 * rng.standard_normal(n), 10 * rng.standard_normal(n)
    support = np.ones(rm.n_legs, dtype=bool)
    w = ctl._ws[0]
    ws = ctl._ws
    # far: nominal stance
    qj = q[7:].copy()
    ctl._qj[:], ctl._dqj[:] = qj, dqj
    lc.leg_collision_stage(qj, dqj, M, tau_add, support, tau_ext, ws[0])
    assert (ctl._lc_cand == -1).all() and (ctl._lc_lo == -INF).all() and not ctl._lc_coef.any()
    assert ctl._lc_dmin_all[0] > cfg.leg_collision_boundary + cfg.leg_collision_range
    # near: lf and lm turned towards each other, lm swinging
    qj = squeezed(rm, 0.75)                                    # d ~ 0.049 m
    support[rm.cfg.leg_names.index("lm")] = False
    lc.leg_collision_stage(qj, dqj, M, tau_add, support, tau_ext, ws[0])
    cand, coef, lo, dk, d_all = ref.rows(qj, dqj, M, tau_add, support, tau_ext)
    assert (ctl._lc_cand == cand).all() and (cand >= 0).any()
    assert np.all(np.diff(dk[cand >= 0]) >= 0)                  # in order of distance
    for r in np.flatnonzero(cand >= 0):
        c = cand[r]
        d, J = ref.jacobian(int(c), qj)
        la, lb = ref.pairs[c, 0], ref.pairs[c, 2]
        acc = np.zeros(n)
        for leg in (la, lb):
            if leg >= 0:
                lj = ref.leg_j[leg]
                t = tau_add[lj] if support[leg] else tau_add[lj] - tau_ext[lj]
                acc[lj] = np.linalg.solve(M[np.ix_(lj + 6, lj + 6)], t)
        rate = [float(ref.jacobian(int(c), qj + s * lc.FD_STEP * dqj)[1] @ dqj) for s in (1, -1)]
        boundary = cfg.leg_collision_d_min + cfg.leg_collision_margin
        want = (-cfg.leg_collision_kp * (d - boundary) - cfg.leg_collision_kd * float(J @ dqj)
                - (rate[0] - rate[1]) / (2 * lc.FD_STEP) - float(J @ acc))
        scale = max(1.0, abs(want))
        assert ctl._lc_lo[r] == pytest.approx(want, abs=1e-9 * scale)
        assert lo[r] == pytest.approx(want, abs=1e-9 * scale)
        np.testing.assert_allclose(ctl._lc_coef[r, :4], J[ref.leg_j[la]], atol=1e-13)
        if lb >= 0:
            np.testing.assert_allclose(ctl._lc_coef[r, 4:], J[ref.leg_j[lb]], atol=1e-13)
    # the stacked rows
    C, lo_s, up_s = np.zeros((ctl.n_in, ctl.nx)), np.zeros(ctl.n_in), np.zeros(ctl.n_in)
    lc.leg_collision_rows(w, C, lo_s, up_s)
    for r in range(ctl.n_lc):
        row = ctl.row_lc + r
        assert up_s[row] == INF and lo_s[row] == ctl._lc_lo[r]
        np.testing.assert_allclose(C[row, 6:6 + n], coef[r], atol=1e-13)


def test_barrier_only_near_d_min_in_closed_loop_nominal():
    """Nominal walking: the rows never activate (d >= 0.35 m > d_min + range), the distance is reported."""
    sc = load_scenario("nominal")
    loop = ClosedLoop(sc, "cbf")
    assert loop.wcfg.leg_collision_barrier                     # the robust preset's default
    res = loop.run(3.2)
    assert res.metrics["fell"] is False
    assert np.min(res.series["leg_distance"]) > loop.wcfg.leg_collision_boundary + loop.wcfg.leg_collision_range
    assert not res.series["leg_contacts"].any()


# ---------------------------------------------------------------------------- closed loop
def _squeeze_run(barrier: bool, duration: float, start_offset: float | None = None):
    over = [f"controller.leg_collision_barrier={str(barrier).lower()}"]
    if start_offset is not None:
        over.append(f"squeeze.start_offset={start_offset}")
    sc = load_scenario("leg_squeeze", over)
    loop = ClosedLoop(sc, "cbf")
    res = loop.run(duration)
    t = res.series["t"]
    after = t >= sc.squeeze.start
    return res, loop, float(res.series["leg_distance"][after].min()), int(np.count_nonzero(
        res.series["leg_contacts"][after]))


def test_leg_squeeze_short_with_and_without_barrier(tmp_path):
    """The squeeze from 3.5 s (gait from 3 s), 2.5 s of it: without the barrier the swinging legs
    hit their neighbour (MuJoCo contacts), with it none and the distance stays near d_min."""
    res_off, _, dmin_off, contacts_off = _squeeze_run(False, 6.0, -2.5)
    res_on, loop, dmin_on, contacts_on = _squeeze_run(True, 6.0, -2.5)
    assert not res_off.fell and not res_on.fell
    assert contacts_off > 0 and dmin_off < 0.0
    assert contacts_on == 0
    assert dmin_on >= loop.wcfg.leg_collision_d_min - 0.001      # the promise: d_min - 1 mm
    # compare's figures of these runs: the leg distance (both), the drives' envelope (realistic), the slack
    from matplotlib.image import imread
    from legged_wbc.closed_loop import save_run
    from legged_wbc.tools.analysis.compare import compare

    rep = compare([save_run(res_off, tmp_path / "off"), save_run(res_on, tmp_path / "on")], tmp_path / "rep")
    assert {"actuator_envelope.png", "cbf_slack.png", "leg_distance.png"} <= set(rep["figures"])
    img = imread(tmp_path / "rep" / "leg_distance.png")[..., :3]
    assert np.mean(np.any(img < 0.9, axis=-1)) > 0.03, "leg_distance.png looks blank"


@pytest.mark.slow
def test_leg_squeeze_full_scenario():
    """The whole scenario (metrics over its window): with the barrier 0 leg contacts and the distance
    >= d_min - 1 mm (measured 21.0 mm for d_min 20 mm, margin 2 mm; 18.9 mm without the margin); without it
    contacts."""
    for barrier in (False, True):
        sc = load_scenario("leg_squeeze", [f"controller.leg_collision_barrier={str(barrier).lower()}"])
        loop = ClosedLoop(sc, "cbf")
        m = loop.run().metrics
        assert m["fell"] is False and m["qp_failures"] == 0
        if barrier:
            assert m["leg_contacts"] == 0
            assert m["min_leg_distance_m"] >= loop.wcfg.leg_collision_d_min - 0.001
        else:
            assert m["leg_contacts"] > 0 and m["min_leg_distance_m"] < 0.0
