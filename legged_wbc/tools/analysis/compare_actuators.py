"""``compare``'s figures of the actuators and the leg-collision barrier (docs/actuators.md), from
headless runs (bags carry neither the slack nor the leg distance):

- ``actuator_envelope.png``: runs on ``actuators: realistic``: every joint's command torque against its
  velocity, one panel per joint of the leg (all legs' samples), with the drives' torque-speed envelope
  (:class:`mujoco_bridge.sim.ActuatorEnvelope`, the robot YAML's ``leg_type.actuator``);
- ``cbf_slack.png``: the relative-pitch barrier's largest slack over the legs per tick [rad/s^2]
  (``cbf_slack: true``; all zero while the barrier is feasible);
- ``leg_distance.png``: runs whose legs came within 12 cm: the smallest link distance of neighbouring
  legs (and foot to body) per tick [m],
  ``leg_collision_d_min`` dashed, ticks with MuJoCo contacts between robot links marked.

Joint velocities are the central difference of the logged joint positions over the 2 ms control
period (the log has no velocity series): good for a scatter against the envelope, not for metrics.
Each ``fig_*`` returns ``(figure, caption)`` or None (nothing to draw); ``compare`` saves them."""

from __future__ import annotations

import numpy as np


def _realistic(run) -> bool:
    return getattr(run.scenario, "actuators", "ideal") == "realistic"


def _joint_velocity(run) -> np.ndarray:
    """``(T, n)`` [rad/s]: the central difference of ``joint_pos`` over ``t``."""
    t = np.asarray(run.series["t"], dtype=float)
    q = np.asarray(run.series["joint_pos"], dtype=float)
    return np.gradient(q, t, axis=0) if t.shape[0] > 2 else np.zeros_like(q)


def _leg_drives(run):
    """``(joint labels of a leg, stall (k,), no-load speed (k,), peak (k,))`` of the run's robot's first leg."""
    from legged_wbc.robot import load_robot_config

    cfg = load_robot_config(run.scenario.robot)
    leg, tab = cfg.leg_specs[0], cfg.joint_table()
    idx = [tab.names.index(j) for j in leg.joints]
    labels = [n.split("_", 1)[-1] for n in leg.joints]
    return labels, tab.stall_torque[idx], tab.no_load_speed[idx], tab.effort[idx]


def fig_actuator_envelope(runs, names, plt) -> str | None:
    from mujoco_bridge.sim import ActuatorEnvelope

    sel = [(r, n) for r, n in zip(runs, names) if _realistic(r) and r.scenario is not None
           and {"tau", "joint_pos", "t"} <= set(r.series) and r.leg_joints]
    if not sel:
        return None
    labels, stall, no_load, peak = _leg_drives(sel[0][0])
    fig, axes = plt.subplots(len(sel), len(labels), figsize=(3.6 * len(labels), 3.0 * len(sel)), squeeze=False)
    for i, (r, n) in enumerate(sel):
        tau, w = np.asarray(r.series["tau"], dtype=float), _joint_velocity(r)
        for k, label in enumerate(labels):
            cols = [r.leg_joints[leg][k] for leg in r.leg_joints if len(r.leg_joints[leg]) > k]
            ax = axes[i, k]
            ax.plot(w[:, cols].ravel(), tau[:, cols].ravel(), ".", ms=1, alpha=0.3, color="C0")
            wmax = max(float(no_load[k]) * 1.1, float(np.abs(w[:, cols]).max()) * 1.05)
            ws = np.linspace(-wmax, wmax, 201)
            lo, hi = ActuatorEnvelope([stall[k]], [no_load[k]], [peak[k]]).limits(ws[:, None])
            ax.plot(ws, hi[:, 0], "C3--", lw=1)
            ax.plot(ws, lo[:, 0], "C3--", lw=1)
            ax.set_title(f"{n}: {label}", fontsize=8)
            ax.set_xlabel("joint velocity (rad/s)")
            ax.grid(alpha=0.3)
        axes[i, 0].set_ylabel("command torque (N m)")
    return fig, "Command torque against joint velocity, every leg's joint of each kind, with the drives' torque-speed envelope"


def fig_cbf_slack(runs, names, plt) -> str | None:
    sel = [(r, n) for r, n in zip(runs, names) if "cbf_slack" in r.series and r.controller == "cbf"]
    if not sel:
        return None
    fig, ax = plt.subplots(figsize=(10, 3.6))
    for c, (r, n) in enumerate(sel):
        s = np.asarray(r.series["cbf_slack"], dtype=float)
        peak = s.max(axis=1) if s.ndim == 2 and s.shape[1] else np.zeros(s.shape[0])
        ax.plot(r.series["t"], peak, lw=0.9, color=f"C{c}",
                label=f"{n}: max {peak.max():.3g}, {int(np.count_nonzero(peak > 0))} ticks > 0")
    ax.set_xlabel("t (s)")
    ax.set_ylabel("largest CBF slack (rad/s^2)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig, "The relative-pitch barrier's slack over time (largest over the legs; zero while the barrier is feasible)"


def fig_leg_distance(runs, names, plt) -> str | None:
    from wbc_controller.config import WbcConfig

    def near(r) -> bool:        # a robot without capsule links has no distances (all nan)
        d = np.asarray(r.series["leg_distance"], dtype=float)
        return bool(np.any(d < NEAR_M))

    sel = [(r, n) for r, n in zip(runs, names) if "leg_distance" in r.series and near(r)]
    if not sel:
        return None
    fig, ax = plt.subplots(figsize=(10, 4))
    for c, (r, n) in enumerate(sel):
        t, d = np.asarray(r.series["t"]), np.asarray(r.series["leg_distance"], dtype=float) * 1e3
        ax.plot(t, d, lw=0.9, color=f"C{c}", label=f"{n}: min {np.nanmin(d):.1f} mm")
        hit = np.asarray(r.series.get("leg_contacts", np.zeros(t.shape)), dtype=bool)
        if hit.any():
            ax.plot(t[hit], d[hit], "x", ms=3, color=f"C{c}")
    d_min = float((sel[0][0].scenario.controller if sel[0][0].scenario is not None else {}).get(
        "leg_collision_d_min", WbcConfig().leg_collision_d_min))
    ax.axhline(d_min * 1e3, color="C3", ls="--", lw=1, label=f"d_min {d_min * 1e3:.0f} mm")
    ax.set_ylim(min(-10.0, ax.get_ylim()[0]), 60.0)
    ax.set_xlabel("t (s)")
    ax.set_ylabel("smallest link distance (mm)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig, "Smallest distance between neighbouring legs' links (and foot to body), MuJoCo link contacts marked x"


NEAR_M = 0.12      # leg_distance.png: runs whose legs came closer than this [m] (nominal walking: 0.35 m)

FIGURES = (("actuator_envelope.png", fig_actuator_envelope, "no run on realistic actuators"),
           ("cbf_slack.png", fig_cbf_slack, "no headless WBC-CBF run"),
           ("leg_distance.png", fig_leg_distance, "no headless run with legs closer than 12 cm (bags do not carry the leg distance)"))
