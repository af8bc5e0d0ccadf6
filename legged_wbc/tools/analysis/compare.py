"""``legged-wbc compare``: the paper's Table 3 and figures from bags and headless runs, side by side.

:func:`compare` loads each input with :func:`legged_wbc.tools.analysis.bag_metrics.load_run` (rosbag2 directory,
MCAP or sqlite3, or a headless run directory with ``log.npz``), computes its metrics with
:func:`legged_wbc.metrics.compute_metrics` (through :func:`~legged_wbc.tools.analysis.bag_metrics.run_metrics`)
and writes into the output directory:

* ``report.md``: the runs (source, controller, scenario, window), a headline per run (:func:`headline`:
  the worse of the window's and the whole run's worst violation, fall, QP failures, clipping, foot
  slip), the Table-3 rows (evaluation window) side by side with
  the paper's numbers in a reference column (max relative-pitch violation, support-leg violation
  rate, roll-pitch RMSE, joint torque RMS / max, QP time p99 / over 2 ms) plus distance walked,
  falls, QP failures, the bridge's deadline misses / watchdog events, the first violation time, and
  the whole run's figures (``whole_run``);
  then what could not be computed for which run and why, and the figures;
* ``metrics.json``: ``{run name: metrics}``, each with the keys of ``legged-wbc run``'s
  ``metrics.json`` (plus ``source``, ``kind``, bridge counters, ``unavailable``);
* PNG figures (matplotlib, Agg backend):

  - ``fig6_disturbed_leg_pitch.png``: relative pitch of the disturbed leg for each run, bounds, the
    disturbance window shaded (where the disturbance was applied, else the scenario's window),
    with a zoom on the window (paper Fig. 6);
  - ``fig5_wbc0_drift.png``: every leg's relative pitch in the WBC-0 (``none``) run(s), bounds,
    stand-up / gait start / t_s marked, the first support-leg violation marked (paper Fig. 5);
  - ``body_roll_pitch.png``: ground-truth body roll and pitch error;
  - ``joint_torques.png``: every joint's command torque (the disturbed leg's joints highlighted);
  - ``qp_time_hist.png``: QP time histograms with the 2 ms line and the p99;
  - ``command_latency_hist.png``: bags whose bridge timed its commands: histogram of the command
    latency (command arrival - publication of the sample it answers, wall clock) with the 2 ms
    deadline, p50 / p99 and the share of ticks that missed it;
  - ``gait_diagram.png``: the estimated support pattern of every leg (gait diagram);
  - ``terrain_<kind>.png``: runs off flat ground, per terrain kind: every leg's relative pitch in the
    estimated support set with the bounds, and the body's roll and pitch from level (ground truth).
  - ``actuator_envelope.png``, ``cbf_slack.png``, ``leg_distance.png``: torque against the drives'
    envelope, the barrier's slack, the legs' smallest link distance (:mod:`.compare_actuators`).
  - ``command_path.png``, ``command_tracking.png``: runs under a velocity command: the x-y path,
    commanded vs actual, and the commanded vs actual heading-frame velocity over time (:mod:`.compare_commands`).

:func:`summary_rows` aggregates repeated runs (``legged-wbc experiment --repeat``): mean, spread
(standard deviation, min-max) and the worst case of each metric per controller.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from legged_wbc.metrics import CONTROL_DT, worst_of
from legged_wbc.tools.analysis.bag_metrics import RunData, RunInputError, eval_window, load_run, run_metrics
from legged_wbc.tools.analysis.compare_actuators import FIGURES as ACTUATOR_FIGURES
from legged_wbc.tools.analysis.compare_commands import FIGURES as COMMAND_FIGURES
from legged_wbc.tools.analysis.run_data import CONTROLLER_NAMES, controller_title  # noqa: F401  (compare's names)

# The paper's Table 3 (docs/design.md, *Metrics*): (WBC-D, WBC-CBF); their robot, one run each.
PAPER = {
    "max_violation_rad": (0.519, 0.005),
    "violation_rate_pct": (0.858, 0.555),
    "rp_rmse_deg": (0.0521, 0.0379),
    "torque_rms_nm": (165.0, 162.3),
    "torque_max_nm": (8180.0, 2305.0),
    "qp_p99_us": (639.0, 670.0),
    "qp_over_2ms_pct": (0.0, 0.0),
}

# (row title, metric keys, format); a row with two keys shows "a / b"
TABLE_ROWS = [
    ("max relative-pitch violation (rad)", ("max_violation_rad",), "{:.4g}"),
    ("support-leg sample violation rate (%)", ("violation_rate_pct",), "{:.4g}"),
    ("roll-pitch RMSE (deg)", ("rp_rmse_deg",), "{:.4g}"),
    ("joint torque RMS / max (N m)", ("torque_rms_nm", "torque_max_nm"), "{:.4g}"),
    ("QP time p99 (us) / over-2 ms (%)", ("qp_p99_us", "qp_over_2ms_pct"), "{:.4g}"),
]
# the whole run's figures (metrics.json ``whole_run``: stand-up and gait start included), beside the window's
WHOLE_RUN_ROWS = [
    ("whole run (s)", ("whole_run.window_s",), None),
    ("whole run: max relative-pitch violation (rad) / ticks with one", ("whole_run.max_violation_rad",
                                                                       "whole_run.violation_ticks"), "{:.4g}"),
    ("whole run: support-leg sample violation rate (%)", ("whole_run.violation_rate_pct",), "{:.4g}"),
    ("whole run: torque clipped by the actuators (% of ticks x joints)", ("whole_run.torque_saturation_pct",), "{:.3g}"),
    ("whole run: CBF slack max (rad/s^2)", ("whole_run.cbf_slack_max",), "{:.4g}"),
    ("whole run: foot slip max (m)", ("whole_run.foot_slip_max_m",), "{:.3g}"),
]
EXTRA_ROWS = WHOLE_RUN_ROWS + [
    ("distance walked (m)", ("distance_m",), "{:.3f}"),
    ("fall", ("fell",), None),
    ("QP failures (whole run)", ("qp_failures",), "{:d}"),
    ("torque clipped by the actuators (% of ticks x joints)", ("torque_saturation_pct",), "{:.3g}"),
    ("CBF slack max (rad/s^2) / ticks with slack", ("cbf_slack_max", "cbf_slack_ticks"), "{:.4g}"),
    ("smallest leg-link distance (m) / ticks with leg contacts", ("min_leg_distance_m", "leg_contacts"), "{:.4g}"),
    ("deadline misses (bridge)", ("deadline_misses",), "{:d}"),
    ("ticks commanded late or not at all (%)", ("deadline_miss_pct",), "{:.3g}"),
    ("command latency p50 / p99 (us)", ("command_latency_p50_us", "command_latency_p99_us"), "{:.0f}"),
    ("watchdog events / stale / rejected commands", ("watchdog_events", "stale_commands", "rejected_commands"), "{:d}"),
    ("velocity tracking RMSE (m/s) / yaw rate (rad/s), steady segments",
     ("velocity_tracking_rmse_mps", "yaw_rate_tracking_rmse_radps"), "{:.4f}"),
    ("estimated velocity RMSE (m/s) / standing drift (m)", ("estimated_velocity_rmse_mps", "standing_drift_m"), "{:.4g}"),
    ("first support-leg violation (s)", ("first_violation_time_s",), "{:.3f}"),
    ("evaluated samples (ticks, QP accepted)", ("samples",), "{:d}"),
    ("bag size (MB) / per simulated second (MB/s)", ("bag_mb", "bag_mb_per_sim_s"), "{:.2f}"),
    ("bag MCAP chunk compression", ("bag_compression",), None),
]
# metric -> "worse" direction for the worst case of repeated runs
WORSE_HIGH = ("max_violation_rad", "violation_rate_pct", "rp_rmse_deg", "torque_rms_nm", "torque_max_nm", "qp_p99_us",
              "qp_over_2ms_pct", "qp_failures", "deadline_misses", "deadline_miss_pct", "command_latency_p99_us",
              "leg_contacts", "whole_run.max_violation_rad", "whole_run.qp_failures")
WORSE_LOW = ("distance_m", "min_leg_distance_m")


def _fmt(v, fmt: str | None) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, bool) or fmt is None:
        return "yes" if v is True else ("no" if v is False else str(v))
    if isinstance(v, float) and fmt == "{:d}":
        if math.isnan(v):
            return "n/a"
        v = int(round(v))
    try:
        return fmt.format(v)
    except (ValueError, TypeError):
        return str(v)


def _get(m: dict, key: str):
    """``m[key]``; a dotted key reads a nested dict (``whole_run.max_violation_rad``)."""
    for part in key.split("."):
        m = m.get(part) if isinstance(m, dict) else None
    return m


def _cell(m: dict, keys, fmt) -> str:
    cells = []
    for k in keys:
        v = _get(m, k)
        cells.append(f"{v[0]:g} - {v[1]:g}" if isinstance(v, list) and len(v) == 2 else _fmt(v, fmt))
    return " / ".join(cells)


def headline(m: dict) -> str:
    """One run's headline: the worse of the evaluation window's and the whole run's figures (a
    violation at the stand-up or the gait's start, outside the window, shows here): worst
    relative-pitch violation, fall, QP failures, torque clipped, foot slip."""
    v, where = worst_of(m, "max_violation_rad")
    w = m.get("whole_run") or {}
    viol = f"worst violation {_fmt(v, '{:.4g}')} rad"
    if v and where == "whole run":
        viol += (f" (whole run: {w.get('violation_ticks')} ticks, first at "
                 f"{_fmt(w.get('first_violation_time_s'), '{:.3f}')} s; window {_fmt(m.get('max_violation_rad'), '{:.4g}')})")
    elif v:
        viol += " (in the window)"
    fell = m.get("fell")
    fall = "fall n/a" if fell is None else (f"FELL ({m.get('fall_reason') or '?'})" if fell else "no fall")
    sat, _ = worst_of(m, "torque_saturation_pct")
    slip, _ = worst_of(m, "foot_slip_max_m")
    qpf = w.get("qp_failures", m.get("qp_failures"))
    return (f"{viol}, {fall}, {_fmt(qpf, '{:d}')} QP failures, {_fmt(sat, '{:.3g}')} % torque clipped, "
            f"foot slip max {_fmt(slip, '{:.3g}')} m")


def _paper_cell(keys) -> str:
    if not all(k in PAPER for k in keys):
        return ""
    d = " / ".join(f"{PAPER[k][0]:g}" for k in keys)
    c = " / ".join(f"{PAPER[k][1]:g}" for k in keys)
    return f"D: {d}; CBF: {c}"


def unique_names(runs: list[RunData]) -> list[str]:
    names = [r.path.name if r.path.name not in ("", ".") else str(r.path) for r in runs]
    for i, n in enumerate(names):
        if names.count(n) > 1:
            names[i] = f"{runs[i].path.parent.name}/{n}"
    seen: dict[str, int] = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n}#{seen[n]}")
    return out


# ------------------------------------------------------------------------------------ report
def _runs_section(runs, names, metrics, window_override) -> list[str]:
    """report.md's runs (source, controller, scenario, windows) and headlines (:func:`headline`)."""
    L = ["## Runs", "", "| run | controller | kind | scenario | mode | simulated (s) | evaluation window (s) | source |",
         "|---|---|---|---|---|---|---|---|"]
    for r, n, m in zip(runs, names, metrics):
        w = m.get("window_s")
        req = m.get("window_requested_s")
        win = (f"{w[0]:g} - {w[1]:g}" if w else "none (the run ends before it)") + (
            f" (of {req[0]:g} - {req[1]:g})" if req and w != req else "")
        L.append(f"| {n} | {controller_title(r.controller)} (`{r.controller}`) | {r.kind} | "
                 f"{m.get('scenario') or r.scenario_name or '?'} | {r.mode or '?'} | "
                 f"{_fmt(r.sim_time_s, '{:.3f}')} | {win} | `{r.path}` |")
    L.append("")
    if window_override:
        L += [f"Evaluation window given on the command line: {window_override[0]:g} - {window_override[1]:g} s.", ""]
    L += ["## Headline", "", "The worse of the evaluation window's and the whole run's figures (stand-up and gait "
          "start included).", ""]
    L += [f"- **{n}**: {headline(m)}" for n, m in zip(names, metrics)]
    L.append("")
    return L


def report_markdown(runs: list[RunData], names: list[str], metrics: list[dict], figures: list[tuple[str, str]],
                    window_override=None, summary: str | None = None) -> str:
    L = ["# Controller comparison (paper Table 3)", ""] + _runs_section(runs, names, metrics, window_override)
    head = "| metric | " + " | ".join(f"{controller_title(r.controller)} ({n})" for r, n in zip(runs, names)) + \
           " | paper (their robot) |"
    sep = "|---|" + "---|" * len(runs) + "---|"
    L += ["## Table 3 (evaluation window)", "",
          "Over the evaluation window and the cycles whose QP was accepted; violations over support-leg samples "
          "(estimated support set). Paper column: WBC-D; WBC-CBF (one run each, their robot: a reference, not a "
          "target).", "", head, sep]
    for title, keys, fmt in TABLE_ROWS:
        L.append(f"| {title} | " + " | ".join(_cell(m, keys, fmt) for m in metrics) + f" | {_paper_cell(keys)} |")
    L += ["", "## Also measured", "", "Over the evaluation window unless the row says whole run.", "",
          head.replace(" | paper (their robot) |", " |"), sep[:-4]]
    for title, keys, fmt in EXTRA_ROWS:
        cells = []
        for r, m in zip(runs, metrics):
            c = _cell(m, keys, fmt)
            if keys == ("fell",) and m.get("fell"):
                c = f"yes ({m.get('fall_reason') or '?'})"
            if keys == ("first_violation_time_s",) and m.get("first_violation_time_s") is None \
                    and m.get("max_violation_rad") is not None:
                c = "none"
            cells.append(c)
        L.append(f"| {title} | " + " | ".join(cells) + " |")
    bounds = sorted({tuple(m.get("theta_bounds_rad") or ()) for m in metrics})
    L += ["", "Relative-pitch bounds: " + ", ".join(f"[{b[0]:g}, {b[1]:g}] rad" for b in bounds if b) + "."]
    # what could not be computed
    unav = [(n, k, why) for n, m in zip(names, metrics) for k, why in (m.get("unavailable") or {}).items()]
    L += ["", "## Could not be computed", ""]
    if unav:
        L += [f"- **{n}**: {k} ({why})" for n, k, why in unav]
    else:
        L.append("Every metric could be computed for every run.")
    notes = [(n, x) for n, m in zip(names, metrics) for x in m.get("notes", [])]
    gaps = [(n, t, g) for n, m in zip(names, metrics) for t, g in (m.get("gaps") or {}).items()]
    if notes or gaps:
        L += ["", "## Notes", ""]
        L += [f"- **{n}**: {x}" for n, x in notes]
        L += [f"- **{n}**: {t} has no sample at {g} control tick(s) (those rows are NaN / false)" for n, t, g in gaps]
    if summary:
        L += ["", summary]
    if figures:
        L += ["", "## Figures", ""]
        for fname, caption in figures:
            L += [f"**{caption}**", "", f"![{caption}]({fname})", ""]
    return "\n".join(L).rstrip() + "\n"


def summary_rows(groups: dict[str, list[dict]]) -> str:
    """Markdown table: per controller (group) mean, std, min-max and worst case of each metric over
    repeated runs."""
    keys = [("max_violation_rad", "max violation (rad)"), ("violation_rate_pct", "violation rate (%)"),
            ("rp_rmse_deg", "roll-pitch RMSE (deg)"), ("torque_rms_nm", "torque RMS (N m)"),
            ("torque_max_nm", "torque max (N m)"), ("qp_p99_us", "QP p99 (us)"),
            ("qp_over_2ms_pct", "QP over 2 ms (%)"), ("distance_m", "distance (m)"),
            ("qp_failures", "QP failures"), ("deadline_misses", "deadline misses"),
            ("whole_run.max_violation_rad", "max violation, whole run (rad)")]
    L = ["## Repeated runs: mean, spread, worst case", "",
         "Per controller over the randomized repetitions: mean +- standard deviation [min - max]; worst = "
         "highest (lowest for distance).", "",
         "| metric | " + " | ".join(f"{controller_title(g)} (n={len(ms)})" for g, ms in groups.items()) + " |",
         "|---|" + "---|" * len(groups)]
    for key, title in keys:
        cells = []
        for ms in groups.values():
            vals = np.array([_get(m, key) for m in ms if isinstance(_get(m, key), (int, float))], dtype=float)
            if vals.size == 0:
                cells.append("n/a")
                continue
            worst = vals.min() if key in WORSE_LOW else vals.max()
            cells.append(f"{vals.mean():.4g} +- {vals.std():.2g} [{vals.min():.4g} - {vals.max():.4g}], "
                         f"worst {worst:.4g}")
        L.append(f"| {title} | " + " | ".join(cells) + " |")
    falls = [f"{sum(bool(m.get('fell')) for m in ms)}/{len(ms)}" for ms in groups.values()]
    L.append("| falls | " + " | ".join(falls) + " |")
    return "\n".join(L) + "\n"


def summary_json(groups: dict[str, list[dict]]) -> dict:
    out = {}
    for g, ms in groups.items():
        d = {"runs": len(ms), "falls": sum(bool(m.get("fell")) for m in ms)}
        for key in WORSE_HIGH + WORSE_LOW:
            vals = [_get(m, key) for m in ms if isinstance(_get(m, key), (int, float))]
            if vals:
                a = np.asarray(vals, dtype=float)
                d[key] = {"mean": float(a.mean()), "std": float(a.std()), "min": float(a.min()),
                          "max": float(a.max()), "worst": float(a.min() if key in WORSE_LOW else a.max())}
        out[g] = d
    return out


# ------------------------------------------------------------------------------------ figures
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save_figure(fig, path: Path, title: str | None = None) -> None:
    """The figure, with its suptitle when given, laid out tight into a 110 dpi PNG, then closed."""
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _plt().close(fig)


def _saved(made, path: Path) -> str | None:
    """``made``: ``(figure, caption)`` or None; saves the figure (:func:`_save_figure`), returns the caption."""
    if made is None:
        return None
    _save_figure(made[0], path)
    return made[1]


def _disturbance_window(run: RunData, leg: int | None) -> tuple[float, float] | None:
    """Where the disturbance was actually applied on ``leg`` (first to last nonzero tick), else the
    scenario's window (if enabled)."""
    S = run.series
    if "disturbance" in S and leg is not None:
        d = np.asarray(S["disturbance"])
        cols = d[:, run.joints_of_leg(leg)] if run.joints_of_leg(leg) else d
        idx = np.flatnonzero(np.any(cols != 0, axis=1))
        if idx.size:
            return float(S["t"][idx[0]]), float(S["t"][idx[-1]] + CONTROL_DT)
    sc = run.scenario
    if sc is not None and sc.disturbance.enabled:
        return sc.disturbance.start, sc.disturbance.start + sc.disturbance.duration
    return None


def _applied_segments(run: RunData, leg: int | None) -> list[tuple[float, float]]:
    """Time intervals where the disturbance torque on ``leg`` was nonzero (from the recorded torque)."""
    S = run.series
    if "disturbance" not in S or leg is None or not run.joints_of_leg(leg):
        return []
    on = np.any(np.asarray(S["disturbance"])[:, run.joints_of_leg(leg)] != 0, axis=1)
    edges = np.flatnonzero(np.diff(np.r_[False, on, False].astype(int)))
    t = S["t"]
    return [(float(t[a]), float(t[b - 1]) + CONTROL_DT) for a, b in zip(edges[::2], edges[1::2])]


def _shade_disturbance(ax, run: RunData, leg: int | None, label: bool = False) -> None:
    """The scenario's disturbance window lightly, the intervals where it was applied (leg in the
    estimated support set) darker."""
    sc = run.scenario
    if sc is not None and sc.disturbance.enabled:
        ax.axvspan(sc.disturbance.start, sc.disturbance.start + sc.disturbance.duration, color="C1", alpha=0.12,
                   lw=0, label="disturbance window" if label else None)
    for i, (a, b) in enumerate(_applied_segments(run, leg)):
        ax.axvspan(a, b, color="C1", alpha=0.35, lw=0, label="disturbance applied" if label and i == 0 else None)


def _common_disturbed_leg(runs: list[RunData]) -> tuple[int, str]:
    for r in runs:
        i = r.disturbed_leg
        if i is not None:
            return i, r.leg_names[i]
    return 0, (runs[0].leg_names[0] if runs and runs[0].leg_names else "leg 0")


def _leg_index(run: RunData, name: str, default: int) -> int:
    return run.leg_names.index(name) if name in run.leg_names else default


def _shade_support(ax, t, sup, color="0.85"):
    """Light shading where the leg is in the estimated support set."""
    if sup is None or len(t) == 0:
        return
    s = np.asarray(sup, dtype=bool)
    edges = np.flatnonzero(np.diff(np.r_[False, s, False].astype(int)))
    for a, b in zip(edges[::2], edges[1::2]):
        ax.axvspan(t[a], t[min(b, len(t) - 1)], color=color, lw=0, zorder=0)


def fig_disturbed_leg(runs, names, path: Path) -> str | None:
    runs_th = [(r, n) for r, n in zip(runs, names) if "theta" in r.series]
    if not runs_th:
        return None
    plt = _plt()
    leg0, leg_name = _common_disturbed_leg(runs)
    fig, axes = plt.subplots(len(runs_th), 2, figsize=(13, 2.6 * len(runs_th) + 0.6), squeeze=False,
                             gridspec_kw={"width_ratios": [2.2, 1]})
    for row, (r, n) in enumerate(runs_th):
        S = r.series
        li = _leg_index(r, leg_name, leg0)
        t, th = S["t"], np.asarray(S["theta"])[:, li]
        win = _disturbance_window(r, li)
        for col, ax in enumerate(axes[row]):
            _shade_support(ax, t, np.asarray(S["support"])[:, li] if "support" in S else None)
            ax.plot(t, th, lw=1.0, color="C0", label=f"theta {leg_name}")
            ax.axhline(r.theta_max, color="C3", ls="--", lw=1)
            ax.axhline(r.theta_min, color="C3", ls="--", lw=1)
            _shade_disturbance(ax, r, li, label=col == 0)
            ax.set_ylabel("rad")
            ax.grid(alpha=0.3)
            if col == 1:
                if win:
                    pad = max(0.5, 0.5 * (win[1] - win[0]))
                    lo, hi = win[0] - pad, win[1] + pad
                    sel = (t >= lo) & (t <= hi)
                    ax.set_xlim(lo, hi)
                    if np.any(sel):
                        ymin = min(np.nanmin(th[sel]), r.theta_min) - 0.02
                        ymax = max(np.nanmax(th[sel]), r.theta_max) + 0.02
                        ax.set_ylim(ymin, ymax)
                    ax.set_title("zoom: disturbance window", fontsize=9)
                else:
                    ax.text(0.5, 0.97, "no disturbance in this run", transform=ax.transAxes, ha="center",
                            va="top", fontsize=9, color="0.3", bbox={"fc": "white", "ec": "none", "alpha": 0.8})
            else:
                ax.set_title(f"{controller_title(r.controller)} ({n}): relative pitch of leg {leg_name} "
                             "(grey: estimated support)", fontsize=9)
                if row == 0 or win:
                    ax.legend(loc="upper left", fontsize=7)
        axes[row][0].set_xlim(t[0] if len(t) else 0, t[-1] if len(t) else 1)
    for ax in axes[-1]:
        ax.set_xlabel("t (s)")
    _save_figure(fig, path, f"Relative pitch of the disturbed leg ({leg_name}) with bounds (paper Fig. 6)")
    return f"Relative pitch of the disturbed leg {leg_name}, bounds dashed, disturbance window shaded (Fig. 6)"


def fig_wbc0_drift(runs, names, path: Path) -> str | None:
    sel = [(r, n) for r, n in zip(runs, names) if r.controller == "none" and "theta" in r.series]
    if not sel:
        return None
    plt = _plt()
    fig, axes = plt.subplots(len(sel), 2, figsize=(14, 3.8 * len(sel) + 0.4), squeeze=False,
                             gridspec_kw={"width_ratios": [1.3, 1]})
    for row, (r, n) in enumerate(sel):
        S = r.series
        t, th = S["t"], np.asarray(S["theta"])
        sc = r.scenario
        first = None
        if "support" in S:
            v = np.maximum(0.0, np.maximum(th - r.theta_max, r.theta_min - th)) * np.asarray(S["support"], bool)
            idx = np.flatnonzero(np.any(v > 0, axis=1))
            if idx.size:
                first = (int(idx[0]), int(np.argmax(v[idx[0]])))
        # left: the stand-up and the start of walking (up to a little after the first violation / t_s)
        t_hi = max(sc.t_s if sc is not None else 0.0, t[first[0]] if first else 0.0) + 2.0
        t_hi = min(float(t[-1]), t_hi) if len(t) else 1.0
        for col, ax in enumerate(axes[row]):
            for i, leg in enumerate(r.leg_names):
                ax.plot(t, th[:, i], lw=1.0 if col == 0 else 0.6, label=leg)
            ax.axhline(r.theta_max, color="k", ls="--", lw=1)
            ax.axhline(r.theta_min, color="k", ls="--", lw=1)
            if sc is not None:
                ax.axvspan(sc.stand_up_start, sc.stand_up_start + sc.stand_up_duration, color="0.9", lw=0, zorder=0)
                for x, lab in ((sc.gait_start, "gait start"), (sc.t_s, "t_s")):
                    ax.axvline(x, color="0.5", lw=0.8, ls=":")
                    if col == 0:
                        ax.text(x, 0.98, " " + lab, transform=ax.get_xaxis_transform(), fontsize=8, va="top",
                                color="0.3")
            if first:
                k, i = first
                ax.axvline(t[k], color="C3", lw=1.2)
                ax.plot([t[k]], [th[k, i]], "o", color="C3", ms=7, mfc="none")
                if col == 0:
                    ax.annotate(f"first support-leg violation:\n{r.leg_names[i]} at t = {t[k]:.3f} s",
                                (t[k], th[k, i]), xytext=(-150, 25), textcoords="offset points", color="C3",
                                fontsize=9, arrowprops={"arrowstyle": "->", "color": "C3"})
            elif col == 0 and "support" in S:
                ax.text(0.01, 0.04, "no support-leg violation", transform=ax.transAxes, fontsize=9, color="C2")
            ax.set_xlabel("t (s)")
            ax.grid(alpha=0.3)
            if col == 0:
                ax.set_xlim(float(t[0]) if len(t) else 0.0, t_hi)
                sel_t = t <= t_hi
                if np.any(sel_t):
                    lo = min(float(np.nanmin(th[sel_t])), r.theta_min)
                    hi = max(float(np.nanmax(th[sel_t])), r.theta_max)
                    pad = 0.08 * (hi - lo)
                    ax.set_ylim(lo - pad, hi + pad)
                ax.set_ylabel("theta (rad)")
                ax.set_title(f"WBC-0 ({n}): relative pitch of every leg, stand-up (grey) and start of walking",
                             fontsize=9)
                ax.legend(ncol=len(r.leg_names), fontsize=8, loc="lower left")
            else:
                ax.set_title("whole run", fontsize=9)
    _save_figure(fig, path, "WBC-0 drift while standing up / starting to walk (paper Fig. 5)")
    return "WBC-0: every leg's relative pitch with bounds, first support-leg violation marked (Fig. 5)"


def fig_roll_pitch(runs, names, path: Path) -> str | None:
    sel = [(r, n) for r, n in zip(runs, names) if "rp_err" in r.series]
    if not sel:
        return None
    plt = _plt()
    fig, axes = plt.subplots(2, 1, figsize=(12, 6), sharex=True)
    for r, n in sel:
        e = np.degrees(np.asarray(r.series["rp_err"]))
        lab = f"{controller_title(r.controller)} ({n})"
        axes[0].plot(r.series["t"], e[:, 0], lw=0.9, label=lab)
        axes[1].plot(r.series["t"], e[:, 1], lw=0.9, label=lab)
    for ax, what in zip(axes, ("roll", "pitch")):
        ax.set_ylabel(f"{what} error (deg)")
        ax.grid(alpha=0.3)
    w = eval_window(sel[0][0])
    if w:
        for ax in axes:
            ax.axvline(w[0], color="0.5", ls=":", lw=0.8)
    axes[0].legend(fontsize=8)
    axes[1].set_xlabel("t (s)")
    _save_figure(fig, path, "Body roll / pitch error (ground truth; desired attitude level)")
    return "Body roll and pitch error (ground truth)"


def fig_torques(runs, names, path: Path) -> str | None:
    sel = [(r, n) for r, n in zip(runs, names) if "tau" in r.series]
    if not sel:
        return None
    plt = _plt()
    leg0, leg_name = _common_disturbed_leg(runs)
    fig, axes = plt.subplots(len(sel), 1, figsize=(12, 2.6 * len(sel) + 0.6), squeeze=False, sharex=True)
    for ax, (r, n) in zip(axes[:, 0], sel):
        t, tau = r.series["t"], np.asarray(r.series["tau"])
        li = _leg_index(r, leg_name, leg0)
        hl = set(r.joints_of_leg(li))
        for j in range(tau.shape[1]):
            if j not in hl:
                ax.plot(t, tau[:, j], color="0.7", lw=0.5)
        for c, j in enumerate(sorted(hl)):
            name = r.joint_names[j] if j < len(r.joint_names) else f"{leg_name} joint {c}"
            ax.plot(t, tau[:, j], color=f"C{c}", lw=0.9, label=name)
        _shade_disturbance(ax, r, li)
        ax.set_ylabel("N m")
        ax.grid(alpha=0.3)
        ax.set_title(f"{controller_title(r.controller)} ({n}): command torque, all joints (grey), leg {leg_name} "
                     "in colour", fontsize=9)
        if hl:
            ax.legend(fontsize=7, ncol=4, loc="upper left")
    axes[-1, 0].set_xlabel("t (s)")
    _save_figure(fig, path)
    return "Joint command torques (disturbed leg highlighted, disturbance window shaded)"


def _time_histograms(curves, xlabel: str, ylabel: str, title: str, path: Path, bins_n: int = 120) -> None:
    """Step histograms of microsecond timings ``[(values, label, p99 or None)]`` on a log count
    axis, with the 2 ms control period marked (and each curve's p99 dotted when given)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 4.5))
    finite = [v[np.isfinite(v)] for v, _, _ in curves]
    allv = np.concatenate(finite) if finite else np.zeros(0)
    hi = max(2500.0, float(np.percentile(allv, 99.9)) * 1.1) if allv.size else 2500.0
    bins = np.linspace(0, hi, bins_n)
    for c, (v, (_, label, p99)) in enumerate(zip(finite, curves)):
        ax.hist(np.clip(v, 0, hi), bins=bins, histtype="step", lw=1.3, color=f"C{c}", label=label)
        if p99 is not None:
            ax.axvline(p99, color=f"C{c}", ls=":", lw=1)
    ax.axvline(2000.0, color="C3", lw=1.5, label="2 ms (control period)")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title)
    _save_figure(fig, path)


def fig_qp_hist(runs, names, metrics, path: Path) -> str | None:
    sel = [(r, n, m) for r, n, m in zip(runs, names, metrics) if "qp_time_us" in r.series]
    if not sel:
        return None
    curves = [(np.asarray(r.series["qp_time_us"], float),
               f"{controller_title(r.controller)} ({n}, {r.mode}): p99 {_fmt(m.get('qp_p99_us'), '{:.0f}')} us",
               m.get("qp_p99_us")) for r, n, m in sel]
    _time_histograms(curves, "QP time: build + solve + residual check (us)", "cycles",
                     "QP time per control cycle (whole run; dotted: p99 over the evaluation window)", path)
    return "QP time histograms with the 2 ms line"


def fig_latency_hist(runs, names, metrics, path: Path) -> str | None:
    sel = [(r, n, m) for r, n, m in zip(runs, names, metrics)
           if r.command_latency_us is not None and np.isfinite(r.command_latency_us).any()]
    if not sel:
        return None
    curves = [(r.command_latency_us,
               f"{controller_title(r.controller)} ({n}, {r.mode}, {r.custom_data.get('layout', '?')} layout): "
               f"p50 {_fmt(m.get('command_latency_p50_us'), '{:.0f}')} / p99 "
               f"{_fmt(m.get('command_latency_p99_us'), '{:.0f}')} us, "
               f"{_fmt(m.get('deadline_miss_pct'), '{:.3g}')} % missed", m.get("command_latency_p99_us"))
              for r, n, m in sel]
    _time_histograms(curves, "command latency: arrival at the bridge - publication of the answered sample "
                     "(us, wall clock)", "ticks", "Torque-command latency per control tick (dotted: p99)", path,
                     bins_n=150)
    return "Command latency histograms with the 2 ms deadline"


GAIT_EXCERPT_S = 8.0


def _gait_span(run: RunData) -> tuple[float, float] | None:
    """For a long run, an excerpt of a few gait cycles: around the disturbance if there is one, else
    from one second before the gait start."""
    t = run.series["t"]
    if len(t) == 0 or t[-1] - t[0] <= GAIT_EXCERPT_S:
        return None
    win = _disturbance_window(run, run.disturbed_leg)
    if win:
        c = 0.5 * (win[0] + win[1])
        lo = c - 0.5 * GAIT_EXCERPT_S
    elif run.scenario is not None:
        lo = run.scenario.gait_start - 1.0
    else:
        lo = float(t[0])
    lo = max(float(t[0]), min(lo, float(t[-1]) - GAIT_EXCERPT_S))
    return lo, lo + GAIT_EXCERPT_S


def fig_gait(runs, names, path: Path) -> str | None:
    sel = [(r, n) for r, n in zip(runs, names) if "support" in r.series]
    if not sel:
        return None
    plt = _plt()
    from matplotlib.colors import ListedColormap

    fig, axes = plt.subplots(len(sel), 1, figsize=(12, 0.35 * sum(len(r.leg_names) for r, _ in sel) + 1.2 * len(sel)),
                             squeeze=False, sharex=True)
    cmap = ListedColormap(["white", "0.25"])
    disturbed = [r for r, _ in sel if r.disturbed_leg is not None]
    span = _gait_span(disturbed[0] if disturbed else sel[0][0])
    for ax, (r, n) in zip(axes[:, 0], sel):
        t, s = r.series["t"], np.asarray(r.series["support"], float)
        keep = None
        if span is not None:
            keep = (t >= span[0]) & (t < span[1])
            if np.count_nonzero(keep) > 1:
                t, s = t[keep], s[keep]
            else:           # this run does not reach the excerpt (another run's span): show it whole
                keep = None
        ax.imshow(s.T, aspect="auto", interpolation="nearest", cmap=cmap, vmin=0, vmax=1,
                  extent=(t[0], t[-1] + CONTROL_DT, len(r.leg_names) - 0.5, -0.5))
        if "contact_gt" in r.series:
            c = np.asarray(r.series["contact_gt"], bool)
            if keep is not None and len(c) == len(keep):
                c = c[keep]
            mism = c != s.astype(bool)
            ii, jj = np.nonzero(mism)
            if ii.size:
                ax.plot(t[ii], jj, ",", color="C3", alpha=0.6)
        ax.set_yticks(range(len(r.leg_names)))
        ax.set_yticklabels(r.leg_names, fontsize=8)
        _shade_disturbance(ax, r, r.disturbed_leg)
        ax.set_title(f"{controller_title(r.controller)} ({n}): estimated support (dark)"
                     + (", red: differs from the true contact" if "contact_gt" in r.series else "")
                     + (f"; excerpt {span[0]:g} - {span[1]:g} s" if span is not None else ""), fontsize=9)
    axes[-1, 0].set_xlabel("t (s)")
    _save_figure(fig, path)
    return "Support pattern (gait diagram) from the estimated support set"


def _terrain_kind(run: RunData) -> str:
    t = getattr(run.scenario, "terrain", None)
    return t.kind if t is not None else "flat"


def fig_terrain(runs, names, kind: str, path: Path) -> str | None:
    """Off flat ground (issue 19): per run on terrain ``kind``, every leg's relative pitch while in the
    estimated support set with the bounds, and the body's roll and pitch from level (ground truth)."""
    sel = [(r, n) for r, n in zip(runs, names) if _terrain_kind(r) == kind and "theta" in r.series]
    if not sel:
        return None
    plt = _plt()
    fig, axes = plt.subplots(2, len(sel), figsize=(6 * len(sel), 6), sharex=True, squeeze=False)
    for j, (r, n) in enumerate(sel):
        t, th = np.asarray(r.series["t"]), np.asarray(r.series["theta"], dtype=float)
        sup = np.asarray(r.series.get("support", np.ones_like(th)), dtype=bool)
        ax = axes[0, j]
        for i in range(th.shape[1]):
            ax.plot(t, np.where(sup[:, i], th[:, i], np.nan), lw=0.7,
                    label=r.leg_names[i] if i < len(r.leg_names) else str(i))
        ax.axhline(r.theta_max, color="C3", ls="--", lw=1)
        ax.axhline(r.theta_min, color="C3", ls="--", lw=1)
        ax.set_title(f"{controller_title(r.controller)} ({n})", fontsize=9)
        ax.set_ylabel("relative pitch in support (rad)")
        ax.legend(fontsize=7, ncol=3, loc="lower left")
        if "rp_err" in r.series:
            e = np.degrees(np.asarray(r.series["rp_err"]))
            axes[1, j].plot(t, e[:, 0], lw=0.9, label="roll")
            axes[1, j].plot(t, e[:, 1], lw=0.9, label="pitch")
            axes[1, j].legend(fontsize=8, loc="lower left")
        axes[1, j].set_ylabel("body attitude from level (deg)")
        axes[1, j].set_xlabel("t (s)")
        for ax in axes[:, j]:
            ax.grid(alpha=0.3)
    _save_figure(fig, path, f"Terrain {kind}: relative pitch (support legs, bounds dashed) and body attitude")
    return f"Terrain {kind}: every leg's relative pitch in support with the bounds, body roll and pitch from level"


def make_figures(runs, names, metrics, out: Path) -> tuple[list[tuple[str, str]], list[str]]:
    """Writes the figures; returns ``[(file, caption)]`` and the figures skipped (with why)."""
    figs, skipped = [], []
    jobs = [("fig6_disturbed_leg_pitch.png", lambda p: fig_disturbed_leg(runs, names, p), "no relative-pitch data"),
            ("fig5_wbc0_drift.png", lambda p: fig_wbc0_drift(runs, names, p), "no WBC-0 (controller none) run"),
            ("body_roll_pitch.png", lambda p: fig_roll_pitch(runs, names, p), "no ground-truth odometry"),
            ("joint_torques.png", lambda p: fig_torques(runs, names, p), "no torque commands"),
            ("qp_time_hist.png", lambda p: fig_qp_hist(runs, names, metrics, p), "no WBC diagnostics"),
            ("command_latency_hist.png", lambda p: fig_latency_hist(runs, names, metrics, p),
             "no command timing in any bag"),
            ("gait_diagram.png", lambda p: fig_gait(runs, names, p), "no estimated support")]
    for kind in sorted({_terrain_kind(r) for r in runs} - {"flat"}):     # one figure per terrain (issue 19)
        jobs.append((f"terrain_{kind}.png", lambda p, k=kind: fig_terrain(runs, names, k, p), "no relative pitch"))
    for fname, fn, why in ACTUATOR_FIGURES + COMMAND_FIGURES:             # drives, slack, leg distance; commands
        jobs.append((fname, lambda p, f=fn: _saved(f(runs, names, _plt()), p), why))
    for fname, fn, why in jobs:
        cap = fn(out / fname)
        if cap:
            figs.append((fname, cap))
        else:
            skipped.append(f"{fname}: {why}")
    return figs, skipped


# ------------------------------------------------------------------------------------ entry
def compare(inputs: list[str | Path], out: str | Path, window=None, figures: bool = True,
            summary_groups: dict[str, list[str]] | None = None, log=None) -> dict:
    """Loads the inputs, writes report.md, metrics.json and the figures into ``out``.

    ``summary_groups``: ``{controller: [run name, ...]}`` of repeated runs, for the mean / spread /
    worst-case table. Returns ``{"names", "metrics", "figures", "unavailable"}``. Raises
    :class:`RunInputError` for an input that is not a run."""
    log = log or sys.stderr
    out = Path(out)
    runs = [load_run(p) for p in inputs]   # raises RunInputError before anything is written
    out.parent.mkdir(parents=True, exist_ok=True)
    # everything is written next to OUT first and moved in at the end: OUT gets a complete report or
    # nothing (a crash or Ctrl-C half-way leaves no half-written directory)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        res = _write_comparison(runs, stage, window, figures, summary_groups, log)
        out.mkdir(parents=True, exist_ok=True)
        for f in sorted(stage.iterdir()):
            os.replace(f, out / f.name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return res


def _write_comparison(runs, out: Path, window, figures: bool, summary_groups, log) -> dict:
    names = unique_names(runs)
    metrics = [run_metrics(r, window) for r in runs]
    figs, skipped = make_figures(runs, names, metrics, out) if figures else ([], [])
    summary = None
    if summary_groups:
        by_name = dict(zip(names, metrics))
        groups = {g: [by_name[n] for n in ns if n in by_name] for g, ns in summary_groups.items()}
        groups = {g: ms for g, ms in groups.items() if ms}
        summary = summary_rows(groups)
        (out / "summary.json").write_text(json.dumps(summary_json(groups), indent=2) + "\n")
    md = report_markdown(runs, names, metrics, figs, window, summary)
    if skipped:
        md += "\nFigures not produced: " + "; ".join(skipped) + ".\n"
    (out / "report.md").write_text(md)
    (out / "metrics.json").write_text(json.dumps(dict(zip(names, metrics)), indent=2, default=_json_default) + "\n")
    unavailable = {n: m["unavailable"] for n, m in zip(names, metrics) if m.get("unavailable")}
    for n, u in unavailable.items():
        for k, why in u.items():
            print(f"compare: {n}: {k} could not be computed ({why})", file=log)
    return {"names": names, "metrics": dict(zip(names, metrics)), "figures": [f for f, _ in figs],
            "unavailable": unavailable, "runs": runs, "headlines": {n: headline(m) for n, m in zip(names, metrics)}}


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serializable: {type(o)}")


__all__ = ["compare", "summary_rows", "summary_json", "RunInputError", "PAPER"]
