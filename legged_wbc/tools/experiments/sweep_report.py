"""A sweep's report: figures, ``report.md`` and the summary printed at the end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from legged_wbc.tools.experiments.sweep_plan import BARRIER_TARGET_RAD, METRICS
from legged_wbc.tools.experiments.sweep_stats import _metric
from legged_wbc.tools.experiments.sweep_task import DIAGNOSTICS


def _param(r: dict, cat: str, key: str):
    return ((r.get("params") or {}).get(cat) or {}).get(key)


def write_figures(results: dict, names: list[str], meta: dict, out: Path) -> list[str]:
    try:
        from legged_wbc.tools.analysis.compare import _plt, _save_figure

        plt = _plt()
    except ImportError:
        return []
    floor = 1e-6
    ok = [r for r in results.values() if r.get("status") == "ok" and r.get("name") in names]
    figs = []
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for n in names:
        v = np.sort([max(floor, _metric(r, "max_violation_rad") or 0.0) for r in ok if r["name"] == n])
        if v.size:
            ax.step(v, np.arange(1, v.size + 1) / v.size, where="post", label=f"{n} (n={v.size})")
    ax.axvline(BARRIER_TARGET_RAD, color="k", ls="--", lw=1, label=f"target {BARRIER_TARGET_RAD} rad")
    ax.set_xscale("log")
    ax.set_xlabel(f"max relative-pitch violation [rad] (0 shown at {floor:g})")
    ax.set_ylabel("fraction of trials")
    ax.set_title("ECDF of the max violation per controller")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    _save_figure(fig, out / "ecdf_max_violation.png")
    figs.append("ecdf_max_violation.png")

    def diag(r, cat, key):
        return (r.get("diagnostics") or {}).get(key) if cat == "diagnostics" else _param(r, cat, key)

    for cat, key, label, fname in (("disturbance", "torque_nm", "disturbance magnitude [N m]", "violation_vs_disturbance.png"),
                                   ("friction", "mu", "ground friction [-]", "violation_vs_friction.png"),
                                   ("noise", "joint_velocity", "joint-velocity noise std [rad/s]", "violation_vs_joint_velocity_noise.png"),
                                   ("diagnostics", "support_airborne_pct",
                                    "estimated support legs with the foot in the air [% of support leg-ticks]",
                                    "violation_vs_support_airborne.png")):
        pts = {n: [(float(diag(r, cat, key)), _metric(r, "max_violation_rad") or 0.0) for r in ok
                   if r["name"] == n and diag(r, cat, key) is not None] for n in names}
        if not any(pts.values()):
            continue
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for n in names:
            if pts[n]:
                x, y = np.array(pts[n]).T
                ax.scatter(x, y, s=14, alpha=0.7, label=n)
        ax.axhline(BARRIER_TARGET_RAD, color="k", ls="--", lw=1, label=f"target {BARRIER_TARGET_RAD} rad")
        ax.set_yscale("symlog", linthresh=1e-3)
        ax.set_xlabel(label)
        ax.set_ylabel("max violation [rad]")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        _save_figure(fig, out / fname)
        figs.append(fname)
    return figs


def _f(v, fmt="{:.4g}") -> str:
    if v is None:
        return "-"
    if isinstance(v, list):
        return "[" + ", ".join(_f(x, fmt) for x in v) + "]"
    return fmt.format(v) if isinstance(v, float) else str(v)


def _share(c: dict, key: str) -> str:
    """``k of n (lo-hi %)``: a count among a controller's runs that finished, with its Wilson interval
    (an old summary without the interval: the count alone)."""
    ci = c.get(f"{key}_ci95")
    if ci is None:
        return str(c.get(key, "-"))
    return f"{c[key]} of {c['ok']} ({100 * ci[0]:.1f}-{100 * ci[1]:.1f} %)"


def report_md(summary: dict, results: dict, names: list[str], meta: dict, figs: list[str]) -> str:
    L = [f"# Sweep: {meta['scenario']}, {summary['trials']} paired trials x {len(names)} controllers", ""]
    L.append(f"Randomized: {', '.join(meta['randomize']) or 'nothing'}; {meta['duration']:g} s per run; seed "
             f"{meta['seed']}; base overrides: {' '.join(meta['set']) or 'none'}.")
    L.append(f"Runs on disk {summary['runs']} of {summary['runs_planned']} ({summary['failed']} failed, "
             f"{summary['retried']} retried after a worker died). This invocation: {summary.get('ran')} runs on "
             f"{summary.get('workers')} dask worker(s), {_f(summary.get('wall_s'), '{:.0f}')} s wall, "
             f"{_f(summary.get('trials_per_hour'), '{:.1f}')} trials/h (load average "
             f"{_f(summary.get('load_avg_start'), '{:.2f}')} at the start, {_f(summary.get('load_avg_end'), '{:.2f}')} at the end, "
             f"{summary.get('cpus')} CPUs)." + (" **Interrupted**." if summary.get("interrupted") else ""))
    L += ["", "## Per controller (mean, median, p95, worst, 95 % bootstrap CI of the mean)", ""]
    L.append("| metric | " + " | ".join(names) + " |")
    L.append("|---|" + "---|" * len(names))
    for m in METRICS:
        cells = []
        for n in names:
            s = summary["controllers"][n][m]
            cells.append(f"{_f(s['mean'])} / {_f(s['median'])} / {_f(s['p95'])} / **{_f(s['max'])}** "
                         f"CI {_f(s['ci95'])}")
        L.append(f"| {m} | " + " | ".join(cells) + " |")
    for key, title in (("falls", "falls"), ("over_target", f"runs over {BARRIER_TARGET_RAD} rad")):
        L.append(f"| {title} (of runs ok, 95 % Wilson interval) | " + " | ".join(
            _share(summary["controllers"][n], key) for n in names) + " |")
    for key, title in (("qp_failures", "QP failures (ticks)"), ("qp_failure_runs", "runs with a QP failure"),
                       ("failed", "failed runs"), ("ok", "runs ok")):
        L.append(f"| {title} | " + " | ".join(str(summary["controllers"][n][key]) for n in names) + " |")
    for k in DIAGNOSTICS:
        L.append(f"| {k} (mean / max) | " + " | ".join(
            f"{_f(summary['controllers'][n]['diagnostics'][k]['mean'])} / {_f(summary['controllers'][n]['diagnostics'][k]['max'])}"
            for n in names) + " |")
    L.append(f"| worst violation <= {BARRIER_TARGET_RAD} rad and no fall | "
             + " | ".join("yes" if summary["controllers"][n]["barrier_ok"] else "**no**" for n in names) + " |")
    if summary.get("pairs"):
        L += ["", "## Paired differences (same trial, A minus B): mean and 95 % bootstrap CI", ""]
        pn = list(summary["pairs"])
        L.append("| metric | " + " | ".join(pn) + " |")
        L.append("|---|" + "---|" * len(pn))
        for m in METRICS:
            L.append(f"| {m} | " + " | ".join(f"{_f(summary['pairs'][p][m]['mean'])} CI {_f(summary['pairs'][p][m]['ci95'])}"
                                             for p in pn) + " |")
    L += ["", "## Worst 5 trials per controller (max violation), with the command that reproduces each", ""]
    for n in names:
        L.append(f"### {n}")
        L.append("")
        for w in summary["controllers"][n]["worst"]:
            L.append(f"* `{w['run']}`: {_f(w['max_violation_rad'])} rad{' (FELL)' if w['fell'] else ''}; "
                     f"{json.dumps(w['params'], sort_keys=True)}")
            L.append(f"  `{w['command']}`")
        L.append("")
    fails = [r for r in results.values() if r.get("status") != "ok"]
    if fails:
        L += ["## Failed runs", ""]
        for r in sorted(fails, key=lambda r: r.get("run", "")):
            L.append(f"* `{r.get('run')}`: {r.get('error')}")
        L.append("")
    if figs:
        L += ["## Figures", ""] + [f"![{f}]({f})" for f in figs] + [""]
    return "\n".join(L) + "\n"


def print_summary(summary: dict, names: list[str], stream) -> None:
    print(f"{'':22s}" + "".join(f"{n[:16]:>18s}" for n in names), file=stream)
    for m in METRICS:
        row = []
        for n in names:
            s = summary["controllers"][n][m]
            row.append(f"{_f(s['mean'], '{:.4g}'):>9s}/{_f(s['max'], '{:.3g}'):>8s}")
        print(f"{m + ' mean/max':22s}" + "".join(f"{c:>18s}" for c in row), file=stream)
    for key in ("falls", "qp_failures", "failed"):
        print(f"{key:22s}" + "".join(f"{summary['controllers'][n][key]:>18d}" for n in names), file=stream)
    tph = summary.get("trials_per_hour")
    print(f"runs on disk {summary['runs']}/{summary['runs_planned']}, failed {summary['failed']}, retried "
          f"{summary['retried']}; this invocation {summary.get('ran')} runs in {summary.get('wall_s', 0):.0f} s"
          + (f" = {tph:.1f} trials/h" if tph else ""), file=stream)
    stream.flush()
