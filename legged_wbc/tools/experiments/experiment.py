"""``legged-wbc experiment paper``: the paper's protocol end to end, then the comparison report.

Protocol (docs/design.md, *Metrics*): WBC-0 (``controller none``) on the ``nominal`` scenario (no
disturbance; shown qualitatively: it drifts out of range while standing up / starting to walk),
WBC-D (``damping``) and WBC-CBF (``cbf``) on the ``paper`` scenario (the null-space disturbance
from ``t_s + 20 s`` for 3 s). Each run goes through the ROS stack in lockstep, as
``legged-wbc launch walking_sim controller:=C scenario:=S mode:=lockstep record:=DIR/bags/NAME
duration:=D`` (the launch file run by :mod:`legged_wbc.ros.tooling.launcher`, each run on its own random
``ROS_DOMAIN_ID`` in 101-230 with ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``), then
:func:`legged_wbc.tools.analysis.compare.compare` writes ``DIR/report/`` (report.md, metrics.json, figures).

Layout of ``DIR``::

    bags/wbc0, bags/wbcd, bags/cbf        rosbag2 (MCAP by default)   [--headless: runs/NAME, log.npz]
    scenarios/NAME.yaml                   the effective scenario of a run (when overridden / randomized)
    logs/NAME.log                         the launch output of a run (all nodes)
    report/                               report.md, metrics.json, *.png (+ summary.json with --repeat)
    experiment.json                       the plan: runs, scenarios, domain ids, exit codes, wall times

Scenario overrides (``--set key=value``, dotted keys of ``config/scenarios/*.yaml``) apply to every
run. The ROS nodes take a scenario by name or YAML path (``load_scenario`` accepts both; bridge,
estimator and controller all load it), so an overridden scenario is written to
``DIR/scenarios/NAME.yaml`` and passed as ``scenario:=PATH`` (the bag's custom_data then records
that path). Note: the ``estimator:`` block of a scenario is applied by the headless loop but not by
the ``state_estimator`` node (it reads ``config/estimator.yaml`` and its ROS parameters only), so
``--set estimator.*`` is refused for ROS runs.

``--repeat N --seed S``: N randomized disturbances (leg, sign, magnitude in ``--torque-range``,
start in ``--start-range`` seconds after ``t_s``; the same draw for WBC-D and WBC-CBF of a
repetition, so they are compared paired). WBC-0 runs once (no disturbance, deterministic). The
report adds, per controller, mean, spread and worst case (``summary.json``).

``--mode realtime``: the runs go through the stack paced by the wall clock (the launch file's
``mode:=realtime``); the report then adds each run's real-time quality (ticks commanded late,
command latency p50 / p99, latency histogram). ``--layout`` picks the launch file's process layout.

``--headless``: the same protocol with the in-process loop (:class:`legged_wbc.closed_loop.ClosedLoop`,
a few times faster than the lockstep ROS stack: no messages at all), for quick iterations.

An existing complete bag / run directory of the same name is reused (``--force`` re-records), so an
interrupted experiment can be resumed.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

PROTOCOL = (("wbc0", "none", "nominal"), ("wbcd", "damping", "paper"), ("cbf", "cbf", "paper"))
DOMAIN_RANGE = (101, 230)


@dataclass
class Job:
    name: str
    controller: str
    base_scenario: str
    overrides: list = field(default_factory=list)
    scenario_arg: str = ""          # what the nodes / headless loop get: a name or a YAML path
    duration: float = 0.0
    output: str = ""                # bag directory or headless run directory
    repetition: int | None = None
    randomized: dict = field(default_factory=dict)
    domain_id: int | None = None
    returncode: int | None = None
    wall_time_s: float | None = None
    skipped: bool = False


class ExperimentError(RuntimeError):
    pass


# ------------------------------------------------------------------------------------ planning
def _draw(rng: random.Random, legs: list[str], torque_range, start_range) -> dict:
    return {"disturbance.leg": rng.choice(legs), "disturbance.sign": rng.choice((-1, 1)),
            "disturbance.torque_nm": round(rng.uniform(*torque_range), 4),
            "disturbance.start_offset": round(rng.uniform(*start_range), 4)}


def plan(out: Path, sets: list[str] | None, duration: float | None, repeat: int = 0, seed: int = 0,
         controllers=("none", "damping", "cbf"), headless: bool = False, torque_range=None,
         start_range=None) -> list[Job]:
    """The runs of the protocol, with their effective scenarios written to ``out/scenarios``."""
    from legged_wbc.robot import ConfigError, load_robot_config
    from legged_wbc.scenario import dump_scenario, load_scenario
    from state_estimator.config import load_estimator_config

    sets = list(sets or [])
    if not any(s.split("=", 1)[0].strip() == "preset" for s in sets):
        sets.insert(0, "preset=paper")        # Table 3: the paper's method (the scenarios' default is robust)
    jobs: list[Job] = []
    sc_dir = out / "scenarios"
    for name, ctl, scn in PROTOCOL:
        if ctl not in controllers:
            continue
        try:
            base = load_scenario(scn, sets)
            load_estimator_config(overrides=base.estimator)   # the estimator node applies this block
        except ConfigError as exc:
            raise ExperimentError(str(exc)) from exc
        dur = float(duration) if duration else base.duration
        reps = [None] if (ctl == "none" or repeat <= 0) else list(range(repeat))
        for r in reps:
            over = list(sets)
            rnd = {}
            if r is not None:
                # one generator per repetition, so WBC-D and WBC-CBF of repetition r get the same draw
                legs = [x for x in load_robot_config(base.robot).leg_names]
                span = min(base.window, dur - base.t_s)
                d = base.disturbance.duration
                tr = torque_range or (0.5 * base.disturbance.torque_nm, 1.5 * base.disturbance.torque_nm)
                sr = start_range or (0.1 * max(0.0, span - d), 0.9 * max(0.0, span - d))
                rnd = _draw(random.Random(f"{seed}:{r}"), legs, tr, sr)
                over += [f"{k}={v}" for k, v in rnd.items()]
            jn = name if r is None else f"{name}_r{r:02d}"
            try:
                sc = load_scenario(scn, over)
            except ConfigError as exc:
                raise ExperimentError(f"{jn}: {exc}") from exc
            if over:
                sc_dir.mkdir(parents=True, exist_ok=True)
                p = (sc_dir / f"{jn}.yaml").resolve()
                p.write_text(f"# {jn}: {scn} with {' '.join(over)}\n" + dump_scenario(sc))
                arg = str(p)
            else:
                arg = scn
            outdir = out / ("runs" if headless else "bags") / jn
            jobs.append(Job(name=jn, controller=ctl, base_scenario=scn, overrides=over, scenario_arg=arg,
                            duration=dur, output=str(outdir.resolve()), repetition=r, randomized=rnd))
    if not jobs:
        raise ExperimentError(f"no run selected (controllers {list(controllers)})")
    return jobs


# ------------------------------------------------------------------------------------ running
def _bag_complete(p: Path) -> bool:
    return (p / "metadata.yaml").is_file()


def _prepare_output(job: Job, force: bool, marker: str) -> bool:
    """True if the run must be done; False if a complete previous result is reused."""
    p = Path(job.output)
    if p.exists():
        if force:
            shutil.rmtree(p)
        elif (p / marker).is_file():
            return False
        else:
            raise ExperimentError(f"{p} exists but is incomplete (no {marker}); delete it or pass --force")
    p.parent.mkdir(parents=True, exist_ok=True)
    return True


def run_ros(job: Job, out: Path, storage: str = "mcap", progress: bool = True, stream=None,
            mode: str = "lockstep", layout: str | None = None) -> int:
    """One run through the launch file (``mode`` lockstep or realtime; ``layout`` container or
    processes, None = the launch file's default), recording ``job.output``."""
    from legged_wbc.ros.tooling.launcher import Launcher, load_launch, resolve_launch_file

    stream = stream or sys.stdout
    job.domain_id = random.randint(*DOMAIN_RANGE)
    env = dict(os.environ)
    env["ROS_DOMAIN_ID"] = str(job.domain_id)
    env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")  # for the progress node
    args = {"controller": job.controller, "scenario": job.scenario_arg, "mode": mode,
            "record": job.output, "storage": storage, "duration": f"{job.duration:g}"}
    if layout:
        args["layout"] = layout
    plan_ = load_launch(resolve_launch_file("walking_sim"), args)
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    cmdline = "legged-wbc launch walking_sim " + " ".join(f"{k}:={v}" for k, v in args.items())
    print(f"[{job.name}] ROS_DOMAIN_ID={job.domain_id} {cmdline}", file=stream, flush=True)
    from legged_wbc.ros.nodekit.progress import BridgeProgress

    prog = BridgeProgress(job.domain_id, job.name, job.duration, stream) if progress else None
    t0 = time.monotonic()
    try:
        with open(logs / f"{job.name}.log", "w") as fh:
            fh.write(f"# ROS_DOMAIN_ID={job.domain_id} {cmdline}\n")
            fh.flush()
            rc = Launcher(plan_, out=fh, env=env).run()
    finally:
        if prog is not None:
            prog.close()
    job.wall_time_s = time.monotonic() - t0
    if rc == 0 and not _bag_complete(Path(job.output)):
        rc = 1
        print(f"[{job.name}] the launch ended but {job.output} has no metadata.yaml", file=stream, flush=True)
    return rc


def run_headless(job: Job, progress: bool = True) -> int:
    from legged_wbc.closed_loop import ClosedLoop, save_run
    from legged_wbc.scenario import load_scenario

    sc = load_scenario(job.scenario_arg)
    t0 = time.monotonic()
    res = ClosedLoop(sc, job.controller).run(job.duration, progress=progress)
    save_run(res, job.output)
    job.wall_time_s = time.monotonic() - t0
    return 0


def experiment(out: str | Path, *, duration: float | None = None, sets: list[str] | None = None,
               repeat: int = 0, seed: int = 0, headless: bool = False, storage: str = "mcap",
               controllers=("none", "damping", "cbf"), force: bool = False, progress: bool = True,
               torque_range=None, start_range=None, figures: bool = True, stream=None, mode: str = "lockstep",
               layout: str | None = None) -> int:
    stream = stream or sys.stdout
    if mode not in ("lockstep", "realtime"):
        raise ExperimentError(f"mode {mode!r}: lockstep or realtime")
    if headless and mode != "lockstep":
        raise ExperimentError("--headless runs as fast as it can: --mode realtime needs the ROS stack")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    jobs = plan(out, sets, duration, repeat, seed, controllers, headless, torque_range, start_range)
    total = len(jobs)
    print(f"experiment paper: {total} run(s) ({'headless' if headless else 'ROS ' + mode}) -> {out}",
          file=stream, flush=True)
    for j in jobs:
        extra = f"  [{', '.join(f'{k.split(chr(46))[-1]}={v}' for k, v in j.randomized.items())}]" if j.randomized else ""
        print(f"  {j.name:10s} {j.controller:8s} {j.base_scenario:8s} {j.duration:g} s{extra}", file=stream)
    t_all = time.monotonic()
    write_meta = partial(_write_meta, out / "experiment.json", jobs, headless, sets, repeat, seed)
    failed = _run_jobs(jobs, out, headless, force, progress, storage, stream, mode, layout, write_meta)
    if failed is None:
        return 130
    write_meta()
    done = [j for j in jobs if j.returncode == 0]
    if not done:
        print("no run completed: no report", file=stream, flush=True)
        return 1
    from legged_wbc.tools.analysis.compare import compare

    groups = None
    if repeat > 0:
        groups = {}
        for j in done:
            groups.setdefault(j.controller, []).append(Path(j.output).name)
    res = compare([j.output for j in done], out / "report", figures=figures, summary_groups=groups)
    print(f"report: {out / 'report' / 'report.md'} ({len(res['figures'])} figures); "
          f"total {time.monotonic() - t_all:.0f} s wall", file=stream, flush=True)
    _print_table(res, stream)
    if failed:
        print(f"failed runs: {', '.join(failed)}", file=stream, flush=True)
        return 1
    return 0


def _run_jobs(jobs: list, out: Path, headless: bool, force: bool, progress: bool, storage: str, stream,
              mode: str, layout: str | None, write_meta) -> list[str] | None:
    """Run (or reuse) every job, the experiment's metadata rewritten after each; the names of the
    failed ones, or None when interrupted (Ctrl-C)."""
    total = len(jobs)
    failed = []
    for i, job in enumerate(jobs, 1):
        marker = "log.npz" if headless else "metadata.yaml"
        if not _prepare_output(job, force, marker):
            job.skipped, job.returncode = True, 0
            print(f"[{i}/{total}] {job.name}: {job.output} already recorded, reused (--force re-records)",
                  file=stream, flush=True)
            continue
        print(f"[{i}/{total}] {job.name}: {job.controller} on {job.base_scenario}"
              f"{' (overridden)' if job.overrides else ''}, {job.duration:g} s", file=stream, flush=True)
        try:
            job.returncode = (run_headless(job, progress) if headless
                              else run_ros(job, out, storage, progress, stream, mode=mode, layout=layout))
        except KeyboardInterrupt:
            job.returncode = 130
            write_meta()
            print("interrupted", file=stream, flush=True)
            return None
        status = "ok" if job.returncode == 0 else f"FAILED (exit {job.returncode}; see logs/{job.name}.log)"
        print(f"[{i}/{total}] {job.name}: {status} in {job.wall_time_s:.0f} s wall", file=stream, flush=True)
        if job.returncode != 0:
            failed.append(job.name)
        write_meta()
    return failed


def _print_table(res: dict, stream) -> None:
    keys = ("max_violation_rad", "violation_rate_pct", "rp_rmse_deg", "torque_rms_nm", "torque_max_nm",
            "qp_p99_us", "qp_over_2ms_pct", "distance_m", "fell", "qp_failures", "deadline_misses")
    names = res["names"]
    print(f"{'':22s}" + "".join(f"{n[:14]:>15s}" for n in names), file=stream)
    for k in keys:
        cells = []
        for n in names:
            v = res["metrics"][n].get(k)
            cells.append(f"{v:15.4g}" if isinstance(v, float) else f"{str(v):>15s}")
        print(f"{k:22s}" + "".join(cells), file=stream)
    stream.flush()


def _write_meta(path: Path, jobs, headless, sets, repeat, seed) -> None:
    path.write_text(json.dumps({"protocol": "paper", "headless": headless, "set": list(sets or []),
                                "repeat": repeat, "seed": seed, "runs": [asdict(j) for j in jobs]}, indent=2) + "\n")
