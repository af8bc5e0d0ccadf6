"""Model checks behind ``legged-wbc check-model`` and ``legged-wbc conditioning``.

``check_model``: the textbook validation. At random states, Pinocchio's mass matrix, bias forces
(gravity + Coriolis), centre of mass, foot-point positions and foot-point Jacobians are compared
with MuJoCo's (``mj_fullM``, ``qfrc_bias``, ``subtree_com``, ``mj_jac``) after converting MuJoCo's
coordinates with :class:`~legged_wbc.conventions.StateConverter`.

``conditioning``: the paper's extended-Jacobian analysis (sec. 6, Fig. 4). Stance foot points are
fixed at the nominal stance; the relative-pitch target is swept over +-0.5 rad, each leg solved by
damped least-squares IK on ``[p; theta]``; reported: rank of ``J_p``, ``sigma_min(J_i)`` and the
alignment ``|J_theta n|``.
"""

from __future__ import annotations

import mujoco
import numpy as np
import pinocchio as pin

from legged_wbc.conventions import StateConverter
from legged_wbc.model import RobotModel
from legged_wbc.mujoco_model import actuator_joint_names, build_model, hinge_joint_names


def make_pair(robot: str | None = None):
    rm = RobotModel(robot)
    m = build_model(rm.cfg)
    conv = StateConverter(rm.joint_names, hinge_joint_names(m), actuator_joint_names(m))
    return rm, m, conv


def check_model(robot: str | None = None, states: int = 25, seed: int = 0) -> dict:
    rm, m, conv = make_pair(robot)
    d = mujoco.MjData(m)
    rng = np.random.default_rng(seed)
    err = {"mass_matrix": 0.0, "bias": 0.0, "com": 0.0, "foot_position": 0.0, "foot_jacobian": 0.0}
    foot_bodies = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, f) for f in rm.cfg.foot_links]
    M_mj = np.zeros((m.nv, m.nv))
    jacp = np.zeros((3, m.nv))
    for _ in range(states):
        q = rm.neutral()
        q[:3] = rng.uniform(-1, 1, 3)
        q[3:7] = pin.Quaternion(pin.exp3(rng.normal(size=3))).coeffs()
        q[7:] = rng.uniform(rm.lower, rm.upper)
        v = rng.normal(size=rm.nv)
        d.qpos[:] = conv.qpos_from_pin(q)
        d.qvel[:] = conv.qvel_from_pin(q, v)
        mujoco.mj_forward(m, d)
        mujoco.mj_fullM(m, d, M_mj)
        M = rm.mass_matrix(q)
        err["mass_matrix"] = max(err["mass_matrix"], np.abs(conv.mass_matrix_to_pin(q, M_mj) - M).max())
        h = rm.bias(q, v)
        err["bias"] = max(err["bias"], np.abs(conv.bias_to_pin(q, v, M_mj, d.qfrc_bias) - h).max())
        err["com"] = max(err["com"], np.abs(d.subtree_com[1] - rm.com(q)).max())
        p_pin = rm.foot_positions_world(q)
        J_pin = rm.foot_jacobians_world(q)
        for i, b in enumerate(foot_bodies):
            p_mj = d.xpos[b] + d.xmat[b].reshape(3, 3) @ rm.foot_offset
            err["foot_position"] = max(err["foot_position"], np.abs(p_mj - p_pin[i]).max())
            mujoco.mj_jac(m, d, jacp, None, p_mj, b)
            err["foot_jacobian"] = max(err["foot_jacobian"], np.abs(conv.jacobian_to_pin(q, jacp) - J_pin[i]).max())
    err = {k: float(v) for k, v in err.items()}
    return {"robot": rm.cfg.name, "states": states, "max_err": err, "max_abs_error": max(err.values())}


def conditioning(robot: str | None = None, theta_max: float = 0.5, samples: int = 41) -> dict:
    rm = RobotModel(robot)
    qj_nom = rm.stance_joint_positions()
    targets = rm.stance_targets()
    thetas = np.linspace(-theta_max, theta_max, samples)
    rows = []
    ik_failures = 0
    for i, (p, _) in enumerate(targets):
        qj = qj_nom.copy()
        # sweep outwards from the nominal pitch in both directions, warm-starting each IK
        order = np.argsort(np.abs(thetas))
        for th in thetas[order]:
            start = qj_nom.copy() if abs(th) < 1e-12 else qj
            qj_sol, ok = rm.leg_ik(i, p, float(th), start, iters=200)
            if not ok:
                ik_failures += 1
                continue
            qj = qj_sol
            leg = rm.legs(qj_sol)[i]
            sv = np.linalg.svd(leg.J, compute_uv=False)
            rows.append({
                "leg": rm.cfg.leg_names[i], "theta": float(th),
                "rank_jp": int(np.linalg.matrix_rank(leg.J_p, tol=1e-9)),
                "sigma_min": float(sv[-1]),
                "alignment": float(abs(leg.J_theta @ leg.n)),
            })
    return {
        "robot": rm.cfg.name,
        "samples": len(rows),
        "theta_range_rad": [-theta_max, theta_max],
        "rank_jp_min": min(r["rank_jp"] for r in rows) if rows else 0,
        "sigma_min": min(r["sigma_min"] for r in rows) if rows else 0.0,
        "alignment_min": min(r["alignment"] for r in rows) if rows else 0.0,
        "ik_failures": ik_failures,
        "rows": rows,
    }


def plot_conditioning(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    legs = sorted({r["leg"] for r in result["rows"]}, key=lambda s: s)
    for leg in legs:
        rr = sorted((r for r in result["rows"] if r["leg"] == leg), key=lambda r: r["theta"])
        th = [r["theta"] for r in rr]
        axes[0].plot(th, [r["sigma_min"] for r in rr], label=leg)
        axes[1].plot(th, [r["alignment"] for r in rr], label=leg)
    axes[0].set_ylabel(r"$\sigma_{min}(J_i)$")
    axes[1].set_ylabel(r"$|J_\theta n|$")
    for ax in axes:
        ax.set_xlabel("relative pitch target [rad]")
        ax.axvspan(-0.3, 0.3, color="g", alpha=0.08)
        ax.grid(True)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{result['robot']}: extended-Jacobian conditioning at fixed stance feet")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
