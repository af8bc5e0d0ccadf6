"""One run of a sweep, executed on a Dask worker (:func:`run_trial`), and the estimator-vs-truth
figures it reports (:func:`run_diagnostics`)."""

from __future__ import annotations

import os
import time
import traceback
from pathlib import Path

import numpy as np

from legged_wbc.tools.experiments.sweep_plan import BLAS_ENV

START_TOPIC = "legged-wbc-sweep-start"   # event a run logs on the scheduler when it starts on a worker


def _log_start(run: str) -> None:
    """Tell the scheduler that ``run`` starts here (counted by the client: a run that starts
    twice was retried once, after its worker died). Silent outside a Dask worker."""
    try:
        from distributed import get_worker

        get_worker().log_event(START_TOPIC, {"run": run, "pid": os.getpid()})
    except Exception:  # noqa: BLE001 - not on a worker (a direct call)
        pass


# ------------------------------------------------------------------------------------ the task
def _limit_threads() -> None:
    for k, v in BLAS_ENV.items():
        os.environ.setdefault(k, v)
    try:  # a worker of an existing cluster may have loaded BLAS already
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except ImportError:
        pass


def run_trial(task: dict) -> dict:
    """One run of a sweep (executed on a worker): the closed loop of ``task``'s scenario with its
    overrides. Returns ``status`` ok (``metrics``) or failed (``error``, ``traceback``); never raises
    (a dying worker is the scheduler's business)."""
    t0 = time.time()
    out = {"run": task["run"], "pid": os.getpid(), "host": os.uname().nodename, "started_unix": t0}
    _log_start(task["run"])
    try:
        _limit_threads()
        inject = task.get("inject")
        if inject == "raise":
            raise RuntimeError("injected failure (test)")
        if inject == "die":                 # the worker process dies in the middle of the run, once
            marker = Path(task["inject_marker"])
            if not marker.exists():
                marker.write_text(str(os.getpid()))
                time.sleep(0.5)
                os._exit(17)
        from legged_wbc.closed_loop import ClosedLoop
        from legged_wbc.scenario import load_scenario

        sc = load_scenario(task["scenario"], task["sets"])
        res = ClosedLoop(sc, task["controller"]).run(task["duration"])   # applies sc.physics() itself
        out.update(status="ok", metrics=res.metrics, fell=bool(res.fell), fall_reason=res.fall_reason or None,
                   diagnostics=run_diagnostics(res.series, *sc.eval_window))
    except Exception as exc:  # noqa: BLE001 - recorded, the sweep goes on
        out.update(status="failed", error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
    out["wall_s"] = time.time() - t0
    return out


DIAGNOSTICS = ("support_airborne_pct", "false_touchdowns")


def run_diagnostics(series: dict, t0: float, t1: float) -> dict:
    """Estimator-vs-truth figures of a run over ``[t0, t1]`` that explain barrier violations:
    ``support_airborne_pct``: leg-ticks in the estimated support set whose foot does not touch
    the floor (ground truth), in % of the support leg-ticks; ``false_touchdowns``: touchdowns
    declared (rising edges of the detector's flag) while the foot was in the air."""
    t = np.asarray(series["t"])
    w = (t >= t0) & (t <= t1)
    sup = np.asarray(series["support"], bool)[w]
    gt = np.asarray(series["contact_gt"], bool)[w]
    td = np.asarray(series["touchdown"], bool)
    rise = (td & ~np.vstack([np.zeros((1, td.shape[1]), bool), td[:-1]]))[w] if td.size else td
    n_sup = int(sup.sum())
    return {"support_airborne_pct": float(100.0 * np.count_nonzero(sup & ~gt) / n_sup) if n_sup else 0.0,
            "false_touchdowns": int(np.count_nonzero(rise & ~gt)) if td.size else 0}
