"""A sweep's statistics: per controller (mean, median, p95, max, bootstrap CI) and paired between
controllers over the same trials (:func:`summarize`)."""

from __future__ import annotations

import math

import numpy as np

from legged_wbc.tools.experiments.sweep_plan import BARRIER_TARGET_RAD, METRICS
from legged_wbc.tools.experiments.sweep_task import DIAGNOSTICS


def bootstrap_ci(x, level: float = 0.95, n_boot: int = 10000, seed: int = 0, stat=None) -> list[float] | None:
    """Percentile bootstrap confidence interval of the mean (or ``stat(samples, axis=1)``) of ``x``."""
    x = np.asarray([v for v in x if v is not None and np.isfinite(v)], dtype=float)
    if x.size == 0:
        return None
    if x.size == 1:
        return [float(x[0]), float(x[0])]
    rng = np.random.default_rng(seed)
    stat = stat or (lambda a, axis: np.mean(a, axis=axis))
    vals = np.empty(n_boot)
    chunk = max(1, 2_000_000 // x.size)
    for i in range(0, n_boot, chunk):
        m = min(chunk, n_boot - i)
        vals[i:i + m] = stat(x[rng.integers(0, x.size, (m, x.size))], 1)
    a = (1.0 - level) / 2.0
    lo, hi = np.quantile(vals, [a, 1.0 - a])
    return [float(lo), float(hi)]


def wilson_ci(k: int, n: int, z: float = 1.959964) -> list[float] | None:
    """95 % Wilson score interval of a proportion ``k / n`` (as fractions; None for ``n == 0``): sound at
    0 or n successes, where the normal approximation collapses to a point."""
    if n <= 0:
        return None
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [max(0.0, centre - half), min(1.0, centre + half)]


def describe(x, seed: int = 0) -> dict:
    """mean, median, p95, max, ci95 (bootstrap of the mean), n of the finite values of ``x``."""
    a = np.asarray([v for v in x if v is not None and np.isfinite(v)], dtype=float)
    if a.size == 0:
        return {"mean": None, "median": None, "p95": None, "max": None, "ci95": None, "n": 0}
    return {"mean": float(a.mean()), "median": float(np.median(a)), "p95": float(np.percentile(a, 95)),
            "max": float(a.max()), "ci95": bootstrap_ci(a, seed=seed), "n": int(a.size)}


def _metric(r: dict, m: str):
    v = (r.get("metrics") or {}).get(m)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def summarize(results: dict[str, dict], names: list[str], meta: dict) -> dict:
    """Statistics of the runs on disk (see the keys in docs/sweeps.md)."""
    trials = int(meta["trials"])
    by = {n: {} for n in names}           # name -> trial -> record
    for r in results.values():
        if r.get("name") in by and int(r.get("trial", -1)) < trials:
            by[r["name"]][int(r["trial"])] = r
    ctl = {n: _controller_stats(by[n]) for n in names}
    pairs = {}
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            pairs[f"{a}-{b}"] = _paired(by, a, b)
    if "damping" in names and "cbf" in names:
        main = ("damping", "cbf")
    elif len(names) >= 2:
        main = (names[0], names[1])
    else:
        main = None
    if main and f"{main[0]}-{main[1]}" not in pairs:
        pairs[f"{main[0]}-{main[1]}"] = _paired(by, *main)
    failed = sum(1 for r in results.values() if r.get("status") != "ok")
    return {"engine": "dask", "scenario": meta["scenario"], "seed": meta["seed"], "randomize": meta["randomize"],
            "duration_s": meta["duration"], "trials": trials, "controllers_order": names,
            "runs": sum(len(by[n]) for n in names), "runs_planned": trials * len(names),
            "trials_complete": sum(1 for k in range(trials) if all(k in by[n] for n in names)),
            "failed": failed, "retried": int(sum(int(r.get("retries") or 0) for r in results.values())),
            "controllers": ctl,
            "paired": pairs.get(f"{main[0]}-{main[1]}") if main else {},
            "paired_names": list(main) if main else None, "pairs": pairs,
            "barrier_target_rad": BARRIER_TARGET_RAD}


def _controller_stats(runs: dict[int, dict]) -> dict:
    """One controller's statistics over its runs (trial -> record): each metric and diagnostic, run
    counts, falls, QP failures, whether the barrier held, the worst runs."""
    ok = [r for r in runs.values() if r.get("status") == "ok"]
    c = {m: describe([_metric(r, m) for r in ok]) for m in METRICS}
    c["diagnostics"] = {k: describe([(r.get("diagnostics") or {}).get(k) for r in ok]) for k in DIAGNOSTICS}
    c["runs"] = len(runs)
    c["ok"] = len(ok)
    c["failed"] = len(runs) - len(ok)
    c["falls"] = sum(1 for r in ok if r.get("fell") or (r.get("metrics") or {}).get("fell"))
    c["falls_ci95"] = wilson_ci(c["falls"], len(ok))
    c["over_target"] = sum(1 for r in ok if (_metric(r, "max_violation_rad") or 0.0) > BARRIER_TARGET_RAD)
    c["over_target_ci95"] = wilson_ci(c["over_target"], len(ok))
    c["qp_failures"] = int(sum(int((r.get("metrics") or {}).get("qp_failures") or 0) for r in ok))
    c["qp_failure_runs"] = sum(1 for r in ok if int((r.get("metrics") or {}).get("qp_failures") or 0) > 0)
    c["barrier_ok"] = (c["max_violation_rad"]["max"] is not None and c["max_violation_rad"]["max"] <= BARRIER_TARGET_RAD
                       and c["falls"] == 0)
    worst = sorted(ok, key=lambda r: -(_metric(r, "max_violation_rad") or 0.0))[:5]
    c["worst"] = [{"run": r["run"], "trial": r["trial"], "max_violation_rad": _metric(r, "max_violation_rad"),
                   "fell": bool(r.get("fell")), "params": r.get("params"), "command": r.get("command")} for r in worst]
    return c


def _paired(by: dict, a: str, b: str) -> dict:
    """Per metric: mean and bootstrap CI of ``a - b`` over the trials both ran successfully."""
    d = {}
    common = sorted(set(by[a]) & set(by[b]))
    for m in METRICS:
        diffs = []
        for k in common:
            ra, rb = by[a][k], by[b][k]
            if ra.get("status") == rb.get("status") == "ok":
                va, vb = _metric(ra, m), _metric(rb, m)
                if va is not None and vb is not None:
                    diffs.append(va - vb)
        d[m] = {"mean": float(np.mean(diffs)) if diffs else None, "ci95": bootstrap_ci(diffs), "n": len(diffs)}
    return d
