"""Randomized, paired sweeps of the headless closed loop on a Dask cluster (``legged-wbc sweep``).

A sweep is ``trials`` x ``controllers`` runs of one scenario. Trial ``k`` draws its parameters
(:func:`sample_trial`) from generators seeded by ``(seed, k, category)`` and gives the *same*
parameters to every controller, so the controllers are compared paired. The ranges live in
``config/sweeps/*.yaml`` (documented there and in ``docs/sweeps.md``). Each run is the exact
``legged-wbc run --controller C --scenario S --duration D --set k=v ...`` recorded with it.

Execution (:func:`run_sweep`): every run is one Dask task (:func:`run_trial`) on a
``distributed`` cluster, by default a ``LocalCluster`` of single-threaded worker processes (one
per core, BLAS threads 1, scheduler and dashboard on the loopback only), or an existing cluster
(``scheduler="tcp://host:8786"``). The client writes each finished run at once, atomically, to
``DIR/trials/tKKKK-NAME.json`` (parameters, metrics, reproduce command, status, error, retries);
``resume=True`` runs only the runs without a file. A run that raises is recorded as failed (its
error and traceback) and the sweep goes on; a run whose worker died is retried by the scheduler
(``distributed.scheduler.allowed-failures`` times) and its retries are counted. At the end (also
after Ctrl-C) the statistics of every run on disk (:func:`summarize`) go to ``DIR/summary.json``
and ``DIR/report.md`` with figures.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

RANDOMIZE = ("disturbance", "friction", "noise", "mass", "push", "terrain")   # index = the category's seed stream
# what --randomize means when not given: every category but terrain (the controller still assumes
# level ground, so a terrain sweep is asked for by name: --randomize terrain,...)
DEFAULT_RANDOMIZE = ("disturbance", "friction", "noise", "mass", "push")
METRICS = ("max_violation_rad", "violation_rate_pct", "rp_rmse_deg", "torque_rms_nm", "torque_max_nm",
           "distance_m", "qp_p99_us")
MODES = ("none", "damping", "cbf")
BARRIER_TARGET_RAD = 0.005          # the barrier's worst-case target (d / k_p,b of the paper)
BLAS_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "BLIS_NUM_THREADS": "1", "VECLIB_MAXIMUM_THREADS": "1", "NUMEXPR_NUM_THREADS": "1"}
# metrics that differ between two runs of the same trial only by machine timing
TIMING_KEYS = ("wall_time_s", "realtime_factor", "cpu_time_s", "realtime_factor_cpu", "qp_p99_us", "qp_over_2ms_pct")


class SweepError(RuntimeError):
    pass


# ------------------------------------------------------------------------------------ ranges
def load_ranges(name_or_path: str = "default") -> dict:
    """The ``sweep:`` block of ``config/sweeps/NAME.yaml`` (or a YAML path)."""
    from legged_wbc.robot import ConfigError, find_config, load_yaml_file

    try:
        p = find_config("sweeps", name_or_path, "sweep ranges")
        doc = load_yaml_file(p) or {}
    except ConfigError as exc:
        raise SweepError(str(exc)) from None
    if "sweep" not in doc or not isinstance(doc["sweep"], dict):
        raise SweepError(f"{p}: no 'sweep:' mapping")
    rng = doc["sweep"]
    for cat, spec in rng.items():
        if cat == "variants":
            continue
        if cat not in RANDOMIZE:
            raise SweepError(f"{p}: unknown category {cat!r} (known: {', '.join(RANDOMIZE)}, variants)")
        for key, dist in (spec or {}).items():
            if not isinstance(dist, dict) or len(dist) != 1 or next(iter(dist)) not in ("uniform", "choice"):
                raise SweepError(f"{p}: {cat}.{key}: expected {{uniform: [a, b]}} or {{choice: [...]}}")
            kind, val = next(iter(dist.items()))
            if kind == "uniform" and (len(val) != 2 or float(val[0]) > float(val[1])):
                raise SweepError(f"{p}: {cat}.{key}: uniform needs [low, high] with low <= high")
            if kind == "choice" and not val:
                raise SweepError(f"{p}: {cat}.{key}: empty choice")
    return rng


def _fmt(x) -> str:
    """A value as ``--set`` text that YAML parses back to the same value (no exponent notation)."""
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    if isinstance(x, (float, np.floating)):
        s = f"{float(x):.6f}".rstrip("0")
        return s + "0" if s.endswith(".") else s
    return str(x)


def _draw(rng: np.random.Generator, dist: dict):
    kind, val = next(iter(dist.items()))
    if kind == "uniform":
        return float(f"{rng.uniform(float(val[0]), float(val[1])):.6f}")
    return val[int(rng.integers(len(val)))]


def sample_trial(k: int, seed: int, randomize, ranges: dict, scenario, duration: float) -> dict:
    """Trial ``k``'s parameters: ``{"params": {category: {...}}, "sets": [key=value, ...]}``.

    Each category has its own generator ``default_rng([seed, k, index in RANDOMIZE])``."""
    from legged_wbc.robot import load_robot_config

    params: dict = {}
    sets: list[str] = []

    def gen(cat):
        return np.random.default_rng([int(seed), int(k), RANDOMIZE.index(cat)])

    walk_left = max(0.0, duration - scenario.t_s)   # walking time after t_s in this run [s]
    for cat in RANDOMIZE:
        if cat not in randomize:
            continue
        spec = ranges.get(cat)
        if not spec:
            raise SweepError(f"--randomize {cat}: the sweep ranges have no {cat!r} section")
        g = gen(cat)
        d = {key: _draw(g, dist) for key, dist in spec.items()}   # drawn in the YAML's order
        if cat == "disturbance":
            mag = float(f"{d.get('magnitude_factor', 1.0) * scenario.disturbance.torque_nm:.6f}")
            dur = float(d.get("duration", scenario.disturbance.duration))
            onset = float(f"{d.get('onset_fraction', 0.0) * max(0.0, walk_left - dur):.6f}")
            p = {"leg": str(d.get("leg", scenario.disturbance.leg)), "sign": int(d.get("sign", scenario.disturbance.sign)),
                 "torque_nm": mag, "start_offset": onset, "duration": dur}
            sets += ["disturbance.enabled=true"] + [f"disturbance.{a}={_fmt(b)}" for a, b in p.items()]
        elif cat == "friction":
            p = {"mu": float(d["mu"])}
            sets.append(f"ground.friction={_fmt(p['mu'])}")
        elif cat == "noise":
            p = {a: float(d.get(a, 0.0)) for a in ("joint_velocity", "gyro", "accel")}
            p["seed"] = int(g.integers(1, 2**31 - 1))
            sets += [f"noise.{a}={_fmt(b)}" for a, b in p.items()]
        elif cat == "mass":
            body = load_robot_config(scenario.robot).base_mass
            p = {"fraction": float(d["fraction"]), "mass_kg": float(f"{d['fraction'] * body:.6f}")}
            sets.append(f"payload.mass_kg={_fmt(p['mass_kg'])}")
        elif cat == "terrain":
            p, terrain_sets = _terrain_draw(d, g)
            sets += terrain_sets
        else:  # push
            sign = 1 if int(g.integers(2)) else -1
            dur = float(d.get("duration", 0.2))
            onset = float(f"{d.get('onset_fraction', 0.0) * max(0.0, walk_left - dur):.6f}")
            p = {"force_n": float(sign * d["force_n"]), "start_offset": onset, "duration": dur}
            sets += ["push.enabled=true"] + [f"push.{a}={_fmt(b)}" for a, b in p.items()]
        params[cat] = p
    return {"params": params, "sets": sets}


# keys of the terrain drawn for each kind (the others keep the scenario's)
_TERRAIN_KEYS = {"flat": (), "slope": ("angle_deg",), "steps": ("height_m",), "rough": ("amplitude_m",)}


def _terrain_draw(d: dict, g: np.random.Generator) -> tuple[dict, list[str]]:
    """A trial's terrain: its kind and that kind's size from the draws ``d``; a rough field gets a
    seed of its own. Returns ``(params, sets)``."""
    kind = str(d.get("kind", "flat"))
    p = {"kind": kind}
    for key in _TERRAIN_KEYS.get(kind, ()):
        if key in d:
            p[key] = float(d[key])
    if kind == "rough":
        p["seed"] = int(g.integers(0, 2**31 - 1))
    return p, [f"terrain.{a}={_fmt(b)}" for a, b in p.items()]


# ------------------------------------------------------------------------------------ plan
@dataclass
class Variant:
    name: str          # the name in the results (damping, cbf, or a variant from the ranges YAML)
    controller: str    # none / damping / cbf
    sets: list = field(default_factory=list)


def resolve_controllers(names, ranges: dict) -> list[Variant]:
    variants = ranges.get("variants") or {}
    out = []
    for n in names:
        n = n.strip()
        if not n:
            continue
        if n in MODES:
            out.append(Variant(n, n, []))
        elif n in variants:
            v = variants[n]
            ctl = str(v.get("controller", ""))
            if ctl not in MODES:
                raise SweepError(f"variant {n}: controller must be one of {MODES}, got {ctl!r}")
            out.append(Variant(n, ctl, [str(s) for s in v.get("set", [])]))
        else:
            raise SweepError(f"--controllers {n}: not one of {MODES} nor a variant of the ranges "
                             f"({sorted(variants) or 'none defined'})")
    if len({v.name for v in out}) != len(out):
        raise SweepError("--controllers: a name is given twice")
    if not out:
        raise SweepError("--controllers: none given")
    return out


def run_name(k: int, name: str) -> str:
    return f"t{k:04d}-{name}"


def reproduce_command(scenario_arg: str, controller: str, duration: float, sets: list[str], out: str) -> str:
    parts = ["legged-wbc", "run", "--controller", controller, "--scenario", scenario_arg,
             "--duration", _fmt(float(duration))]
    for s in sets:
        parts += ["--set", s]
    parts += ["--out", out, "--quiet"]
    return " ".join(shlex.quote(p) for p in parts)


def plan_runs(scenario_arg: str, trials: int, variants: list[Variant], seed: int, randomize, ranges: dict,
              duration: float | None, sets: list[str] | None) -> tuple[dict, list[dict]]:
    """``(meta, tasks)``: the sweep's description and one task per (trial, variant)."""
    from legged_wbc.robot import ConfigError
    from legged_wbc.scenario import load_scenario

    sets = list(sets or [])
    if Path(scenario_arg).suffix:      # a YAML path: absolute, so the reproduce commands work from anywhere
        scenario_arg = str(Path(scenario_arg).resolve())
    try:
        base = load_scenario(scenario_arg, sets)
    except ConfigError as exc:
        raise SweepError(str(exc)) from exc
    dur = float(duration) if duration else base.duration
    tasks = []
    for k in range(trials):
        tr = sample_trial(k, seed, randomize, ranges, base, dur)
        for v in variants:
            run_sets = sets + tr["sets"] + v.sets
            name = run_name(k, v.name)
            tasks.append({"run": name, "trial": k, "name": v.name, "controller": v.controller,
                          "scenario": scenario_arg, "duration": dur, "sets": run_sets, "params": tr["params"],
                          "command": reproduce_command(scenario_arg, v.controller, dur, run_sets, f"runs/repro/{name}")})
    if tasks:   # every run's scenario must load (a bad range or variant fails here, not on the cluster)
        for t in tasks[:len(variants)]:
            try:
                load_scenario(scenario_arg, t["sets"])
            except ConfigError as exc:
                raise SweepError(f"{t['run']}: {exc}") from exc
    meta = {"scenario": scenario_arg, "seed": int(seed), "randomize": [c for c in RANDOMIZE if c in randomize],
            "ranges": ranges, "duration": dur, "set": sets, "trials": int(trials),
            "controllers": {v.name: {"controller": v.controller, "set": v.sets} for v in variants}}
    return meta, tasks


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
START_TOPIC = "legged-wbc-sweep-start"   # event a run logs on the scheduler when it starts on a worker


def _log_start(run: str) -> None:
    """Tell the scheduler that ``run`` starts here (counted by the client: a run that starts
    twice was retried once, after its worker died). Silent outside a Dask worker."""
    try:
        from distributed import get_worker

        get_worker().log_event(START_TOPIC, {"run": run, "pid": os.getpid()})
    except Exception:  # noqa: BLE001 - not on a worker (a direct call)
        pass


class _QuietWorkers:
    """Worker plugin of our LocalCluster: the workers ignore SIGINT, so a Ctrl-C in the terminal
    (sent to the whole process group) reaches the client alone, which cancels and shuts the
    cluster down itself (no KeyboardInterrupt tracebacks from every worker)."""

    name = "legged-wbc-sweep-sigint"

    def setup(self, worker=None):
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)

    def teardown(self, worker=None):
        pass


def open_cluster(workers: int | None, scheduler: str | None, dashboard: str = "127.0.0.1:8787"):
    """``(client, cluster or None)``: an existing scheduler, or a LocalCluster of single-threaded
    worker processes on the loopback."""
    from distributed import Client, LocalCluster

    if scheduler:
        return Client(scheduler, timeout="30s"), None
    n = workers or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))
    cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                           dashboard_address=dashboard, env=dict(BLAS_ENV), silence_logs=40)
    client = Client(cluster)
    try:
        client.register_plugin(_QuietWorkers())
    except Exception:  # noqa: BLE001 - cosmetic
        pass
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
    except SweepError as exc:
        print(f"legged-wbc sweep: {exc}", file=sys.stderr)
        return 2
    _atomic_write(meta_path, json.dumps(meta, indent=2) + "\n")
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
    client = cluster = None
    old_term = _term_as_interrupt()
    prog = Progress(len(tasks), len(tasks) - len(todo), stream, min_interval=0.2 if getattr(stream, "isatty", lambda: False)() else 0.0)
    try:
        if todo:
            client, cluster = open_cluster(workers, scheduler, dashboard)
            try:
                state["workers"] = len(client.scheduler_info().get("workers", {}))
            except Exception:  # noqa: BLE001
                state["workers"] = workers or 0
            state["dashboard"] = _dashboard(client)
            print(f"  dask: {state['workers']} worker(s) at {client.scheduler.address}"
                  + (f", dashboard {state['dashboard']}" if state["dashboard"] else ", no dashboard"), file=stream)
            stream.flush()
            _execute(client, todo, out, prog, state)
    except KeyboardInterrupt:
        state["interrupted"] = True
        prog.note(f"interrupted: {prog.already + prog.done} of {len(tasks)} runs on disk in {out / 'trials'}; "
                  "--resume runs the rest")
    finally:
        _restore_term(old_term)
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
    wall = time.monotonic() - wall0
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
    return 130 if state["interrupted"] else 0


def _term_as_interrupt():
    """SIGTERM (a batch system, ``kill``) ends the sweep like Ctrl-C: finished runs stay on disk
    and are summarized. Returns the previous handler (None if not in the main thread)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum, frame):
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, handler)


def _restore_term(old) -> None:
    import signal

    if old is not None:
        signal.signal(signal.SIGTERM, old)


def _execute(client, todo: list[dict], out: Path, prog: Progress, state: dict) -> None:
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
    ac = as_completed([f for f, _ in futs.values()])
    tick = 1.0 if prog.tty else 60.0        # refresh of the live line (TTY) / heartbeat line (log)
    last = time.monotonic()

    def finished():
        """Futures done so far, without blocking for long (the live line keeps ticking)."""
        nonlocal last
        while not ac.is_empty():
            if ac.has_ready():
                yield from ac.next_batch(block=False)
                continue
            time.sleep(0.1)
            if time.monotonic() - last >= tick:
                last = time.monotonic()
                prog.update(final=False)

    try:
        for fut in finished():
            f, task = futs[fut.key]
            retries = max(0, starts.get(task["run"], 0) - 1)     # started again after its worker died
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
            last = time.monotonic()
            fut.release()
    finally:
        # interrupted: cancel what has not finished (finished runs are on disk already)
        pending = [f for f, _ in futs.values() if not f.done()]
        if pending:
            try:
                client.cancel(pending)
            except Exception:  # noqa: BLE001
                pass


def _json_default(o):
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (tuple, set)):
        return list(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


# ------------------------------------------------------------------------------------ statistics
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
    ctl = {}
    for n in names:
        ok = [r for r in by[n].values() if r.get("status") == "ok"]
        c = {m: describe([_metric(r, m) for r in ok]) for m in METRICS}
        c["diagnostics"] = {k: describe([(r.get("diagnostics") or {}).get(k) for r in ok]) for k in DIAGNOSTICS}
        c["runs"] = len(by[n])
        c["ok"] = len(ok)
        c["failed"] = len(by[n]) - len(ok)
        c["falls"] = sum(1 for r in ok if r.get("fell") or (r.get("metrics") or {}).get("fell"))
        c["qp_failures"] = int(sum(int((r.get("metrics") or {}).get("qp_failures") or 0) for r in ok))
        c["qp_failure_runs"] = sum(1 for r in ok if int((r.get("metrics") or {}).get("qp_failures") or 0) > 0)
        c["barrier_ok"] = (c["max_violation_rad"]["max"] is not None and c["max_violation_rad"]["max"] <= BARRIER_TARGET_RAD
                           and c["falls"] == 0)
        worst = sorted(ok, key=lambda r: -(_metric(r, "max_violation_rad") or 0.0))[:5]
        c["worst"] = [{"run": r["run"], "trial": r["trial"], "max_violation_rad": _metric(r, "max_violation_rad"),
                       "fell": bool(r.get("fell")), "params": r.get("params"), "command": r.get("command")} for r in worst]
        ctl[n] = c

    def paired(a: str, b: str) -> dict:
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

    pairs = {}
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            pairs[f"{a}-{b}"] = paired(a, b)
    if "damping" in names and "cbf" in names:
        main = ("damping", "cbf")
    elif len(names) >= 2:
        main = (names[0], names[1])
    else:
        main = None
    if main and f"{main[0]}-{main[1]}" not in pairs:
        pairs[f"{main[0]}-{main[1]}"] = paired(*main)
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


# ------------------------------------------------------------------------------------ figures, report
def _param(r: dict, cat: str, key: str):
    return ((r.get("params") or {}).get(cat) or {}).get(key)


def write_figures(results: dict, names: list[str], meta: dict, out: Path) -> list[str]:
    try:
        from legged_wbc.tools.compare import _plt, _save_figure

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
    for key, title in (("falls", "falls"), ("qp_failures", "QP failures (ticks)"), ("qp_failure_runs", "runs with a QP failure"),
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
