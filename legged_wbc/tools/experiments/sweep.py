"""Randomized, paired sweeps of the headless closed loop on a Dask cluster (``legged-wbc sweep``).

A sweep is ``trials`` x ``controllers`` runs of one scenario. Trial ``k`` draws its parameters
(:func:`sample_trial`) from generators seeded by ``(seed, k, category)`` and gives the *same*
parameters to every controller, so the controllers are compared paired. The ranges live in
``config/sweeps/*.yaml`` (documented there and in ``docs/sweeps.md``). Each run is the exact
``legged-wbc run --controller C --scenario S --duration D --set k=v ...`` recorded with it.

Execution (:func:`run_sweep`): every run is one Dask task (:func:`run_trial`) on a
``distributed`` cluster, by default a ``LocalCluster`` of single-threaded worker processes (one
per core, BLAS threads 1, scheduler and dashboard on the loopback only, mutual TLS with a certificate
of this run: no other local user can connect), or an existing cluster
(``scheduler="tcp://host:8786"``). The client writes each finished run at once, atomically, to
``DIR/trials/tKKKK-NAME.json`` (parameters, metrics, reproduce command, status, error, retries);
``resume=True`` runs only the runs without a file. A run that raises is recorded as failed (its
error and traceback) and the sweep goes on; a run whose worker died is retried by the scheduler
(``distributed.scheduler.allowed-failures`` times) and its retries are counted. At the end (also
after Ctrl-C) the statistics of every run on disk (:func:`summarize`) go to ``DIR/summary.json``
and ``DIR/report.md`` with figures.

The modules: :mod:`.sweep_plan` (ranges, trials, controllers, the runs), :mod:`.sweep_task` (one run
on a worker), :mod:`.sweep_stats` (statistics), :mod:`.sweep_report` (figures, report); this one: the
sweep's execution on the cluster and its files.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import traceback
from pathlib import Path

import numpy as np

from legged_wbc.tools.experiments.sweep_plan import (  # noqa: F401  (the sweep's vocabulary, as `legged-wbc sweep` uses it)
    BLAS_ENV, COMMAND_KINDS, DEFAULT_RANDOMIZE, METRICS, RANDOMIZE, TIMING_KEYS, SweepError, load_ranges, plan_runs,
    resolve_controllers, sample_trial,
)
from legged_wbc.tools.experiments.sweep_report import print_summary, report_md, write_figures
from legged_wbc.tools.experiments.sweep_stats import bootstrap_ci, describe, summarize  # noqa: F401
from legged_wbc.tools.experiments.sweep_task import START_TOPIC, run_diagnostics, run_trial  # noqa: F401


# ------------------------------------------------------------------------------------ files
def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def load_results(out: Path) -> dict[str, dict]:
    """Every run file of ``out/trials`` (unreadable ones, e.g. a foreign partial file, are skipped)."""
    res = {}
    d = Path(out) / "trials"
    if not d.is_dir():
        return res
    for p in sorted(d.glob("t*.json")):
        try:
            r = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        res[r.get("run", p.stem)] = r
    return res


def _meta_compatible(old: dict, new: dict) -> str | None:
    for k in ("scenario", "seed", "randomize", "ranges", "duration", "set"):
        if old.get(k) != new.get(k):
            return f"{k} differs (was {old.get(k)!r}, now {new.get(k)!r})"
    for n, v in new["controllers"].items():
        if n in old.get("controllers", {}) and old["controllers"][n] != v:
            return f"controller {n} defined differently (was {old['controllers'][n]}, now {v})"
    return None


# ------------------------------------------------------------------------------------ progress
class Progress:
    """``done / failed / retried / ETA``: one updating line on a TTY, plain lines otherwise."""

    def __init__(self, total: int, already: int, stream=None, min_interval: float = 0.0):
        self.total, self.already = total, already
        self.stream = stream or sys.stdout
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.t0 = time.monotonic()
        self.done = self.failed = self.retried = 0
        self.min_interval = min_interval
        self._last = -1e9

    def line(self) -> str:
        n = self.already + self.done
        el = time.monotonic() - self.t0
        left = self.total - n
        eta = (el / self.done * left) if self.done else float("nan")
        rate = self.done / el * 3600 if el > 0 else 0.0
        eta_s = "?" if math.isnan(eta) else f"{int(eta // 60)}m{int(eta % 60):02d}s"
        return (f"[sweep] {n}/{self.total} runs done ({self.done} now), {self.failed} failed, {self.retried} retried, "
                f"{rate:.0f} runs/h, elapsed {int(el // 60)}m{int(el % 60):02d}s, ETA {eta_s}")

    def update(self, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self._last < self.min_interval:
            return
        self._last = now
        if self.tty:
            self.stream.write("\r" + self.line() + "\x1b[K" + ("\n" if final else ""))
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()

    def note(self, text: str) -> None:
        self.stream.write(("\r\x1b[K" if self.tty else "") + text + "\n")
        self.stream.flush()


# ------------------------------------------------------------------------------------ the cluster

def _quiet_workers():
    """Worker plugin of our LocalCluster: the workers ignore SIGINT, so a Ctrl-C in the terminal
    (sent to the whole process group) reaches the client alone, which cancels and shuts the
    cluster down itself (no KeyboardInterrupt tracebacks from every worker). A WorkerPlugin
    subclass: ``register_plugin`` refuses duck-typed plugins (a TypeError)."""
    from distributed.diagnostics.plugin import WorkerPlugin

    class QuietWorkers(WorkerPlugin):
        name = "legged-wbc-sweep-sigint"

        def setup(self, worker=None):
            import signal
            import threading

            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGINT, signal.SIG_IGN)

    return QuietWorkers()


def open_cluster(workers: int | None, scheduler: str | None, dashboard: str = "127.0.0.1:8787"):
    """``(client, cluster or None)``: an existing scheduler (its TLS settings from Dask's config,
    ``distributed.comm.tls.*``: ``docs/sweeps.md``), or a LocalCluster of single-threaded worker
    processes on the loopback that only this sweep can use: scheduler, nannies and workers speak
    mutual TLS (``tls://``) with a certificate made for this run and held in memory
    (``Security.temporary()``), so another local user (a plain ``tcp://`` connection, or TLS without
    that certificate) cannot connect, submit tasks or run code in the workers."""
    from distributed import Client, LocalCluster
    from distributed.security import Security

    if scheduler:
        return Client(scheduler, timeout="30s"), None
    n = workers or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))
    security = Security.temporary()
    cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1", protocol="tls://",
                           security=security, dashboard_address=dashboard, env=dict(BLAS_ENV), silence_logs=40)
    client = Client(cluster, security=security)
    client.register_plugin(_quiet_workers())
    return client, cluster


def _dashboard(client) -> str | None:
    try:
        link = client.dashboard_link
    except Exception:  # noqa: BLE001 - no dashboard (bokeh missing, or disabled)
        return None
    try:
        info = client.scheduler_info()
        if "dashboard" not in info.get("services", {}) and "bokeh" not in info.get("services", {}):
            return None
    except Exception:  # noqa: BLE001
        pass
    return link


def run_sweep(scenario: str, trials: int, out: str | Path, *, controllers=("damping", "cbf"), seed: int = 0,
              randomize=DEFAULT_RANDOMIZE, duration: float | None = None, workers: int | None = None,
              scheduler: str | None = None, resume: bool = False, ranges: str = "default",
              sets: list[str] | None = None, dashboard: str = "127.0.0.1:8787", figures: bool = True,
              inject: dict | None = None, stream=None) -> int:
    """The sweep (see the module doc). Returns 0 when it completed (failed runs included), 130
    when interrupted (finished runs on disk, summary of them written), 2 on a usage error."""
    stream = stream or sys.stdout
    out = Path(out)
    try:
        meta, tasks, variants, done = _prepare(scenario, trials, out, controllers, seed, randomize, duration,
                                               resume, ranges, sets)
    except SweepError as exc:
        print(f"legged-wbc sweep: {exc}", file=sys.stderr)
        return 2
    _atomic_write(out / "sweep.json", json.dumps(meta, indent=2) + "\n")
    todo = [t for t in tasks if t["run"] not in done]
    for t in todo:
        key = (t["trial"], t["name"])
        if inject and key in inject:
            t["inject"] = inject[key]
            t["inject_marker"] = str((out / f".inject-{t['run']}").resolve())
    print(f"legged-wbc sweep: {scenario}, {trials} trials x {len(variants)} controllers "
          f"({', '.join(v.name for v in variants)}), randomized: {', '.join(meta['randomize']) or 'nothing'}, "
          f"{meta['duration']:g} s each, seed {seed} -> {out}", file=stream)
    if resume:
        print(f"  --resume: {len(tasks) - len(todo)} of {len(tasks)} runs already on disk, {len(todo)} to run",
              file=stream)
    stream.flush()
    wall0 = time.monotonic()
    load0 = os.getloadavg()
    state = {"ran": 0, "retried_now": 0, "workers": 0, "dashboard": None, "interrupted": False,
             "engine": "dask", "scheduler": scheduler or "LocalCluster"}
    prog = Progress(len(tasks), len(tasks) - len(todo), stream, min_interval=0.2 if getattr(stream, "isatty", lambda: False)() else 0.0)
    _run_on_cluster(todo, out, prog, state, workers, scheduler, dashboard, stream)
    _write_summary(out, meta, variants, state, time.monotonic() - wall0, load0, figures, stream)
    return 130 if state["interrupted"] else 0


def _prepare(scenario, trials, out: Path, controllers, seed, randomize, duration, resume, ranges, sets):
    """``(meta, tasks, variants, done)`` of a sweep, its directory made; :class:`SweepError` on a usage
    error (a bad option, a directory holding another sweep or, without ``resume``, finished runs)."""
    rng = load_ranges(ranges)
    variants = resolve_controllers(controllers, rng)
    bad = [c for c in randomize if c not in RANDOMIZE]
    if bad:
        raise SweepError(f"--randomize {bad[0]}: not one of {', '.join(RANDOMIZE)}")
    if trials < 1:
        raise SweepError("--trials: must be >= 1")
    meta, tasks = plan_runs(scenario, trials, variants, seed, randomize, rng, duration, sets)
    out.mkdir(parents=True, exist_ok=True)
    (out / "trials").mkdir(exist_ok=True)
    done = load_results(out)
    meta_path = out / "sweep.json"
    if done and not resume:
        raise SweepError(f"{out} already holds {len(done)} finished run(s): pass --resume to run the missing "
                         "ones, or choose another --out")
    if resume and meta_path.is_file():
        why = _meta_compatible(json.loads(meta_path.read_text()), meta)
        if why:
            raise SweepError(f"--resume: {out} holds another sweep: {why}")
    return meta, tasks, variants, done


def _run_on_cluster(todo: list[dict], out: Path, prog: Progress, state: dict, workers, scheduler, dashboard,
                    stream) -> None:
    """Run ``todo`` on the cluster (opened here, closed at the end); Ctrl-C / SIGTERM end it early
    (``state["interrupted"]``), the finished runs on disk."""
    client = cluster = None
    with StopSignals() as stop:
        try:
            if todo:
                client, cluster = open_cluster(workers, scheduler, dashboard)
                try:
                    state["workers"] = len(client.scheduler_info().get("workers", {}))
                except Exception:  # noqa: BLE001
                    state["workers"] = workers or 0
                state["dashboard"] = _dashboard(client)
                print(f"  dask: {state['workers']} worker(s) at {client.scheduler.address}"
                      + (f", dashboard {state['dashboard']}" if state["dashboard"] else ", no dashboard"),
                      file=stream)
                stream.flush()
                _execute(client, todo, out, prog, state, stop.requested)
        except KeyboardInterrupt:
            stop.requested.set()
        finally:
            _close_cluster(client, cluster)
    if stop.requested.is_set():
        state["interrupted"] = True
        prog.note(f"interrupted: {prog.already + prog.done} of {prog.total} runs on disk in {out / 'trials'}; "
                  "--resume runs the rest")


def _close_cluster(client, cluster) -> None:
    if client is not None:
        try:
            client.close(timeout=10)
        except Exception:  # noqa: BLE001
            pass
    if cluster is not None:
        try:
            cluster.close(timeout=20)
        except Exception:  # noqa: BLE001
            pass


def _write_summary(out: Path, meta: dict, variants, state: dict, wall: float, load0, figures: bool, stream) -> None:
    """``summary.json``, ``report.md`` (and figures) of every run on disk; the summary printed."""
    results = load_results(out)
    names = [v.name for v in variants]
    summary = summarize(results, names, meta)
    summary.update(engine="dask", scheduler=state["scheduler"], workers=state["workers"], dashboard=state["dashboard"],
                   ran=state["ran"], retried_now=state["retried_now"], wall_s=wall,
                   trials_per_hour=(state["ran"] / len(variants)) / (wall / 3600.0) if wall > 0 and state["ran"] else None,
                   runs_per_hour=state["ran"] / (wall / 3600.0) if wall > 0 and state["ran"] else None,
                   load_avg_start=list(load0), load_avg_end=list(os.getloadavg()), cpus=os.cpu_count(),
                   interrupted=state["interrupted"], complete=summary["runs"] >= summary["runs_planned"])
    _atomic_write(out / "summary.json", json.dumps(summary, indent=2, default=_json_default) + "\n")
    figs = write_figures(results, names, meta, out) if figures else []
    _atomic_write(out / "report.md", report_md(summary, results, names, meta, figs))
    print_summary(summary, names, stream)
    print(f"wrote {out / 'summary.json'} and {out / 'report.md'}", file=stream)


class StopSignals:
    """Ctrl-C or SIGTERM (a batch system, ``kill``) during the sweep: the first one sets ``requested``,
    which the run loop polls every 0.1 s (it cancels what has not finished; the finished runs stay on
    disk and are summarized); a second one raises KeyboardInterrupt. A flag rather than an exception
    raised by the handler: an exception raised while a destructor runs in the main thread (a dask
    Future's ``__del__``) would be dropped by Python; a flag cannot be lost. A signal the process was started with ignored (a background job) stays ignored.
    Handlers are installed from the main thread only, and restored at the end."""

    def __init__(self):
        import threading

        self.requested = threading.Event()
        self._old: dict = {}

    def __enter__(self) -> "StopSignals":
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                if signal.getsignal(s) is not signal.SIG_IGN:
                    self._old[s] = signal.signal(s, self._on_signal)
        return self

    def _on_signal(self, signum, frame) -> None:
        if self.requested.is_set():
            raise KeyboardInterrupt
        self.requested.set()

    def __exit__(self, *exc) -> None:
        import signal

        for s, handler in self._old.items():
            signal.signal(s, handler)


def _execute(client, todo: list[dict], out: Path, prog: Progress, state: dict, stop) -> None:
    """Submit ``todo``, record each run as it finishes, until all are done or ``stop`` is set."""
    from distributed import as_completed

    starts: dict[str, int] = {}

    def on_start(event):
        _, msg = event
        starts[msg["run"]] = starts.get(msg["run"], 0) + 1

    try:
        client.subscribe_topic(START_TOPIC, on_start)
    except Exception:  # noqa: BLE001 - retries are then not counted
        pass
    import uuid

    token = uuid.uuid4().hex[:8]            # keys unique on a shared cluster
    futs = {}
    for t in todo:
        f = client.submit(run_trial, t, key=f"sweep-{token}-{t['run']}", pure=False, retries=0)
        futs[f.key] = (f, t)
    prog.update()
    try:
        for fut in _finished(as_completed([f for f, _ in futs.values()]), prog, stop):
            _, task = futs[fut.key]
            _record(fut, task, max(0, starts.get(task["run"], 0) - 1), out, prog, state)  # retries: started again
            fut.release()                                                                    # after its worker died
    finally:
        # interrupted: cancel what has not finished (finished runs are on disk already)
        pending = [f for f, _ in futs.values() if not f.done()]
        if pending:
            try:
                client.cancel(pending)
            except Exception:  # noqa: BLE001
                pass


def _finished(ac, prog: Progress, stop):
    """Futures done so far, without blocking for long (the live line keeps ticking), until all are
    done or ``stop`` (a threading.Event) is set."""
    tick = 1.0 if prog.tty else 60.0        # refresh of the live line (TTY) / heartbeat line (log)
    last = time.monotonic()
    while not ac.is_empty() and not stop.is_set():
        if ac.has_ready():
            for fut in ac.next_batch(block=False):
                yield fut
                last = time.monotonic()
            continue
        time.sleep(0.1)
        if time.monotonic() - last >= tick:
            last = time.monotonic()
            prog.update(final=False)


def _record(fut, task: dict, retries: int, out: Path, prog: Progress, state: dict) -> None:
    """Write a finished run's file (a failed future: a failed run), count it, report it."""
    try:
        res = fut.result()
    except Exception as exc:  # noqa: BLE001 - e.g. KilledWorker: the task killed too many workers
        res = {"run": task["run"], "status": "failed", "error": f"{type(exc).__name__}: {exc}",
               "traceback": "".join(traceback.format_exception(exc))}
    rec = {k: task[k] for k in ("run", "trial", "name", "controller", "scenario", "duration", "params",
                                "sets", "command")}
    rec.update({k: v for k, v in res.items() if k != "run"})
    rec["retries"] = int(retries)
    _atomic_write(out / "trials" / f"{task['run']}.json", json.dumps(rec, indent=2, default=_json_default) + "\n")
    state["ran"] += 1
    state["retried_now"] += int(retries)
    prog.done += 1
    prog.failed += rec["status"] != "ok"
    prog.retried += int(retries)
    if rec["status"] != "ok":
        prog.note(f"  {task['run']}: FAILED: {rec.get('error')}")
    elif rec.get("fell"):
        prog.note(f"  {task['run']}: fell ({rec.get('fall_reason')})")
    prog.update(final=prog.already + prog.done == prog.total)


def _json_default(o):
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (tuple, set)):
        return list(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")
