"""``compare``'s figures of runs under a velocity command (scenario ``commands``, or a bag's ``/cmd_vel``),
from headless runs and bags alike (a bag's command series: :func:`.bag_series.command_series`):

- ``command_path.png``: the base's path in the world's x-y plane [m] (ground truth) against the body
  reference the command integrates (``cmd_ref``: position and heading), start and end marked;
- ``command_tracking.png``: over time, the commanded twist (the filter's target, dashed, and the
  filtered command, through the acceleration limits) against the base's true heading-frame velocity
  ``vx``, ``vy`` [m/s] and yaw rate ``wz`` [rad/s] (:func:`legged_wbc.metrics.heading_velocity`,
  :func:`legged_wbc.metrics.yaw_rate`, as the metrics see them); the stretches where the gait stood
  (``gait_paused``) shaded.

Each ``fig_*`` returns ``(figure, caption)`` or None (no run under a command); ``compare`` saves them."""

from __future__ import annotations

import numpy as np

from legged_wbc.metrics import heading_velocity, yaw_rate
from legged_wbc.tools.analysis.run_data import controller_title


def _commanded(runs, names, need) -> list:
    """``(run, name)`` of the runs with a command and the series ``need``, in the given order."""
    return [(r, n) for r, n in zip(runs, names)
            if "cmd_target" in r.series and all(k in r.series for k in need)]


def _title(run, name: str) -> str:
    return f"{controller_title(run.controller)} ({name})"


def fig_command_path(runs, names, plt):
    """The x-y path of each commanded run: actual (ground truth) solid, the command's body reference dashed."""
    sel = _commanded(runs, names, ("cmd_ref", "base_pos"))
    if not sel:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 5.2))
    for i, (r, n) in enumerate(sel):
        c = f"C{i}"
        ref, pos = np.asarray(r.series["cmd_ref"]), np.asarray(r.series["base_pos"])
        ax.plot(ref[:, 0], ref[:, 1], ls="--", lw=1.2, color=c, alpha=0.8, label=f"commanded: {_title(r, n)}")
        ax.plot(pos[:, 0], pos[:, 1], lw=1.0, color=c, label=f"actual: {_title(r, n)}")
        ax.plot(pos[-1, 0], pos[-1, 1], "s", color=c, ms=5)
        step = max(1, len(ref) // 12)        # the commanded heading, now and then
        ax.quiver(ref[::step, 0], ref[::step, 1], np.cos(ref[::step, 2]), np.sin(ref[::step, 2]), color=c,
                  alpha=0.5, scale=25, width=0.004)
    ax.plot(0.0, 0.0, "ko", ms=5, label="start")
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_xlabel("world x (m)")
    ax.set_ylabel("world y (m)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.suptitle("Path: commanded body reference (dashed, arrows: heading) vs actual base (ground truth)",
                 fontsize=9)
    return fig, "x-y path: the body reference the velocity command integrates vs the base's true path"


def _shade_standing(ax, t, paused, target) -> None:
    """Shade the stretches with the gait stopped under a zero command."""
    stand = np.asarray(paused, bool) & np.all(np.asarray(target) == 0.0, axis=1)
    edges = np.flatnonzero(np.diff(np.r_[0, stand.astype(np.int8), 0]))
    for a, b in zip(edges[::2], edges[1::2]):
        ax.axvspan(t[a], t[b - 1], color="0.9", lw=0)


def fig_command_tracking(runs, names, plt):
    """Commanded vs actual heading-frame ``vx``, ``vy`` and yaw rate over time, one row each."""
    sel = _commanded(runs, names, ("base_vel_world", "base_quat"))
    if not sel:
        return None
    fig, axes = plt.subplots(3, 1, figsize=(12, 7), sharex=True)
    r0 = sel[0][0]
    t0 = np.asarray(r0.series["t"])
    target = np.asarray(r0.series["cmd_target"])
    if "gait_paused" in r0.series:
        for ax in axes:
            _shade_standing(ax, t0, r0.series["gait_paused"], target)
    for j, ax in enumerate(axes):
        ax.plot(t0, target[:, j], "k--", lw=1.0, label="command (target)")
        if "cmd_filtered" in r0.series:
            ax.plot(t0, np.asarray(r0.series["cmd_filtered"])[:, j], color="0.4", lw=0.8,
                    label="command (filtered)")
    for i, (r, n) in enumerate(sel):
        t = np.asarray(r.series["t"])
        v = heading_velocity(r.series["base_vel_world"], r.series["base_quat"])
        w = yaw_rate(t, r.series["base_quat"])
        for ax, y in zip(axes, (v[:, 0], v[:, 1], w)):
            ax.plot(t, y, color=f"C{i}", lw=0.8, alpha=0.85, label=f"actual: {_title(r, n)}")
    for ax, lab in zip(axes, ("vx forward (m/s)", "vy left (m/s)", "wz yaw rate (rad/s)")):
        ax.set_ylabel(lab)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, ncol=2, loc="upper right")
    axes[-1].set_xlabel("t (s)")
    fig.suptitle("Velocity tracking in the heading frame (ground truth; grey: standing, gait stopped)", fontsize=10)
    return fig, "Commanded vs actual heading-frame velocity and yaw rate over time (standing shaded)"


FIGURES = (("command_path.png", fig_command_path, "no run under a velocity command"),
           ("command_tracking.png", fig_command_tracking, "no run under a velocity command"))
