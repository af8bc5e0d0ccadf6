"""``legged-wbc bench realtime``: the realtime ROS stack, the headless loop and the reference path, in one run.

:func:`bench_realtime` runs, one after the other,

1. **the stack**, exactly as the README's main command: the launch file ``walking_sim`` with
   ``controller:=cbf scenario:=S mode:=realtime duration:=D`` (and ``record:=<temp dir>`` with
   ``record``), through :class:`legged_wbc.ros.tooling.launcher.Launcher` (the process layout is the launch
   file's default), on the environment's ``ROS_DOMAIN_ID`` or, if unset, a random one in 101-230,
   with ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``;
2. **the headless loop** (:class:`legged_wbc.closed_loop.ClosedLoop`, what ``legged-wbc run`` runs)
   on the same scenario and duration, in a process of its own, after a short warm-up run (the
   compiled kernels loaded): the process CPU time of the loop alone per tick; then the same loop
   **paced by the wall clock** like the realtime bridge (10 s at most; it sleeps until each tick's
   time): ``headless_paced_per_tick_us``, the floor of any realtime process doing that work (a loop
   that sleeps 500 times a second meets cold caches every tick: ~2x the CPU on our VMs);
3. **the reference path** of ``bench cycle`` for 2 s of walking (:func:`legged_wbc.tools.bench.bench_cycle.bench_cycle`):
   its p50 per tick is the machine's speed index (``reference_p50_us``).

CPU time of the stack: every process the launcher started and every descendant of those (the
tree is walked through ``/proc`` every 0.5 s, so a process the stack spawns is found whatever the
layout), each read from ``/proc/<pid>/stat`` (``utime + stime``: all its threads). A
:class:`legged_wbc.ros.tooling.stack_monitor.StackMonitor` node subscribes to ``/bridge/diagnostics`` (10 per
sim second) and reads every process's CPU time when a sample arrives, so each CPU reading is paired
with the bridge's sim time. The **walking window** runs from the first sample after the first
command was applied (start-up, compilation and the wait for peers excluded) to the bridge's last
sample (published when ``duration`` is reached, before shutdown). Per process:
``cpu_per_tick_us`` = CPU time in the window / control ticks simulated in it (sim time / 2 ms), and
``utilization`` = CPU time / wall time of the window (1.0 = one core busy). ``overhead_ratio`` is the
control process's (the one that runs the controller: ``walking_container``, ``control_container``
with ``--layout split``, or ``wbc_controller`` with one process per node) CPU per tick over the
headless loop's; ``overhead_ratio_paced`` the same over the paced loop's (what the ROS plumbing costs
beyond pacing).

Real-time quality (``deadline_miss_pct``, ``command_latency_p50_us`` / ``_p99_us``) and the walk
(``fell``, ``max_violation_rad``, ``qp_failures``) are computed as ``legged-wbc compare`` computes
them (:func:`legged_wbc.tools.analysis.bag_metrics.run_metrics`), from

* with ``record``: the bag the stack recorded (then deleted): all six;
* without: the bridge's ``/bridge/diagnostics`` and ``/bridge/command_latency`` as the monitor took
  them (:data:`TIMING_TOPICS`, 10 messages per sim second each, every tick's command latency
  inside): the real-time quality, exactly as from a bag. The walk metrics are then None
  (``stack.walk_metrics_unavailable`` says why): they need the 500 Hz :data:`TICK_TOPICS`, and an
  outside subscriber to those changes what is measured. In the container a topic nobody outside
  subscribes to is not published on DDS at all; subscribed, the container publishes four more
  messages per tick on DDS (two of them, the controller's, before the command) and the bridge
  computes the ground truth. Measured (20 s runs, alternating, load 2.8-5.0): the container's CPU
  per tick 1191-1207 -> 1446-1558 us, command latency p50 703-751 -> 826-843 us, p99 919-1054 ->
  1340-1388 us. ``observe_walk`` (Python API) takes them anyway.
"""

from __future__ import annotations

import math
import os
import random
import re
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from legged_wbc.conventions import CONTROL_DT
from legged_wbc.idle_poll import POLLER_NAME

CONTROL_PROCESSES = ("walking_container", "control_container", "wbc_controller")   # the process that runs the controller
TIMING_TOPICS = ("/bridge/diagnostics", "/bridge/command_latency")   # 10 messages per sim second each
TICK_TOPICS = ("/wbc/relative_pitch", "/wbc/diagnostics", "/estimator/support", "/ground_truth/odom")  # 500 Hz
WALK_METRICS = ("fell", "max_violation_rad", "qp_failures")     # need TICK_TOPICS (or the bag)
DOMAIN_RANGE = (101, 230)
REFERENCE_SECONDS = 2.0
DEFAULT_CPU_LATENCY_US = 0       # the containers' default PM QoS request (ContainerConfig.cpu_wakeup_latency_us)
PACED_SECONDS = 10.0              # the paced headless loop runs this long (or the duration, if shorter)
SAMPLE_PERIOD_S = 0.5
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PYTHON_NAMES = ("python", "python3")
_COMM_LEN = 15                      # the kernel keeps this many characters of a process name


class BenchError(RuntimeError):
    """The benchmark could not measure what it reports (one line: why)."""


# ------------------------------------------------------------------------------------ /proc
def proc_stat(pid: int) -> tuple[int, float, int, str] | None:
    """``(ppid, cpu seconds (utime + stime, all threads), start time [clock ticks], comm)`` of a
    process, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read().decode(errors="replace")
    except OSError:
        return None
    lp, rp = raw.find("("), raw.rfind(")")
    comm, rest = raw[lp + 1: rp], raw[rp + 2:].split()
    # rest[0] = state (field 3), rest[1] = ppid (4), rest[11] = utime (14), rest[12] = stime (15),
    # rest[19] = starttime (22)
    return int(rest[1]), (int(rest[11]) + int(rest[12])) / _CLK_TCK, int(rest[19]), comm


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        return []


def process_name(pid: int, comm: str, root: str) -> str:
    """A readable name of a process of the launch: its ``comm`` (a console script's name, e.g.
    ``bag_recorder``, or what the process set with ``prctl(PR_SET_NAME)``), or for a bare interpreter
    its ROS node name (``__node:=``), module (``-m``), script, the module of ``-c "from M import ..."``
    (``resource_tracker``), else ``<root>-child`` (e.g. a ``multiprocessing`` child of the launched node
    ``root``: its cmdline does not name it)."""
    args = _cmdline(pid)
    if not comm.startswith(_PYTHON_NAMES):
        if len(comm) == _COMM_LEN:            # the kernel cut the name: the script's own (control_container)
            full = next((Path(a).name for a in args[:2] if Path(a).name.startswith(comm)), None)
            return full or comm
        return comm
    for a in args:
        if a.startswith("__node:="):
            return a.split(":=", 1)[1]
    for i, a in enumerate(args[1:], 1):
        if a == "-m" and i + 1 < len(args):
            return args[i + 1].rsplit(".", 1)[-1]
        if a == "-c":
            if i + 1 < len(args) and POLLER_NAME in args[i + 1]:   # an idle poller before it renamed itself
                return POLLER_NAME
            m = re.search(r"from\s+([\w.]+)\s+import", args[i + 1] if i + 1 < len(args) else "")
            module = m.group(1).rsplit(".", 1)[-1] if m else ""
            return module if module and module != "spawn" else f"{root}-child"
        if not a.startswith("-"):
            return Path(a).name
    return f"{root}-child"


class ProcessTree:
    """The processes of a launch: ``roots()`` -> ``{name: pid}`` (the launcher's nodes) and all their
    descendants (found by scanning ``/proc`` in :meth:`refresh`). A process is keyed by
    ``(pid, start time)``, so a reused pid is a new process; ``names`` maps it to its
    :func:`process_name` (not unique: :func:`unique_names`)."""

    def __init__(self, roots):
        self.roots = roots
        self.names: dict[tuple[int, int], str] = {}
        self.lock = threading.Lock()

    def refresh(self) -> None:
        roots = dict(self.roots())
        if not roots:
            return
        children: dict[int, list[int]] = {}
        stats: dict[int, tuple] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            st = proc_stat(int(entry))
            if st is not None:
                stats[int(entry)] = st
                children.setdefault(st[0], []).append(int(entry))
        # (pid, its name if a root, the root it descends from)
        found: list[tuple[int, str | None, str]] = [(pid, name, name) for name, pid in roots.items() if pid in stats]
        i = 0
        while i < len(found):
            found.extend((c, None, found[i][2]) for c in children.get(found[i][0], []))
            i += 1
        with self.lock:
            for pid, name, root in found:
                key = (pid, stats[pid][2])
                if key not in self.names:
                    self.names[key] = name or process_name(pid, stats[pid][3], root)

    def sample(self) -> dict[tuple[int, int], float]:
        """CPU seconds of every known process still alive."""
        with self.lock:
            keys = list(self.names)
        out = {}
        for key in keys:
            st = proc_stat(key[0])
            if st is not None and st[2] == key[1]:
                out[key] = st[1]
        return out


def unique_names(names: dict) -> dict:
    """``{key: name}`` with repeated names numbered in key order (``name``, ``name#2``, ...)."""
    out, seen = {}, {}
    for key in sorted(names):
        base = names[key]
        seen[base] = seen.get(base, 0) + 1
        out[key] = base if seen[base] == 1 else f"{base}#{seen[base]}"
    return out


class CpuSampler:
    """Samples a :class:`ProcessTree` every ``period`` s in a thread (and whenever :meth:`at` is called:
    the monitor's diagnostics callback), keeping every sample ``(wall monotonic, {key: cpu s})``."""

    def __init__(self, tree: ProcessTree, period: float = SAMPLE_PERIOD_S):
        self.tree, self.period = tree, period
        self.periodic: list[tuple[float, dict]] = []
        self.self_cpu: list[tuple[float, float]] = []   # the bench's own process (launcher + monitor)
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="cpu_sampler", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self.tree.refresh()
            self.periodic.append((time.monotonic(), self.tree.sample()))

    def at(self) -> tuple[dict, float]:
        """CPU of the stack's processes and of this process, now."""
        return self.tree.sample(), time.process_time()

    def seen_between(self, key, t0: float, t1: float) -> bool:
        return any(t0 < ts <= t1 and key in sample for ts, sample in self.periodic)

    def last_before(self, key, t: float) -> float | None:
        for ts, sample in reversed(self.periodic):
            if ts <= t and key in sample:
                return sample[key]
        return None

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(timeout=2.0)


# ------------------------------------------------------------------------------------ the stack
def choose_domain() -> int:
    env = os.environ.get("ROS_DOMAIN_ID", "").strip()
    return int(env) if env.isdigit() else random.randint(*DOMAIN_RANGE)


class _Tee:
    """The launcher's output stream: every line to ``stream`` (stderr), prefixed as the launcher does."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> None:
        if self.stream is not None:
            self.stream.write(text)

    def flush(self) -> None:
        if self.stream is not None:
            self.stream.flush()


def run_stack(scenario: str, duration: float, record: bool, domain_id: int, stream=None,
              observe_walk: bool = False, layout: str | None = None, cpu_latency_us: int | None = None,
              idle_poll: str = "auto") -> dict:
    """Step 1 of the module docstring: the launch, its CPU per process over the walking window, its
    metrics. ``observe_walk`` (without ``record``): the monitor also takes :data:`TICK_TOPICS` for the
    walk metrics, at the cost the module docstring gives."""
    tmp = Path(tempfile.mkdtemp(prefix="bench_realtime_"))
    try:
        return _run_stack(scenario, duration, record, domain_id, stream, observe_walk, tmp / "bag", layout,
                          cpu_latency_us, idle_poll)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run_stack(scenario, duration, record, domain_id, stream, observe_walk, bag: Path, layout=None,
               cpu_latency_us=None, idle_poll="auto") -> dict:
    from legged_wbc.ros.tooling.launcher import Launcher, load_launch, resolve_launch_file
    from legged_wbc.ros.tooling.stack_monitor import StackMonitor

    args = {"controller": "cbf", "scenario": scenario, "mode": "realtime", "duration": f"{duration:g}"}
    if layout:
        args["layout"] = layout
    if cpu_latency_us is not None and cpu_latency_us != DEFAULT_CPU_LATENCY_US:   # else the launch file's default
        args["cpu_wakeup_latency_us"] = str(int(cpu_latency_us))
    if idle_poll != "auto":
        args["idle_poll"] = idle_poll
    if record:
        args["record"] = str(bag)
    plan = load_launch(resolve_launch_file("walking_sim"), args)
    env = dict(os.environ)
    env["ROS_DOMAIN_ID"] = str(domain_id)
    env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"   # the monitor's context reads it
    command = "legged-wbc launch walking_sim " + " ".join(f"{k}:={v}" for k, v in args.items())
    if stream is not None:
        stream.write(f"[bench] ROS_DOMAIN_ID={domain_id} {command}\n")
        stream.flush()
    launcher = Launcher(plan, out=_Tee(stream), env=env)
    tree = ProcessTree(launcher.pids)
    sampler = CpuSampler(tree)
    diag_samples: list[tuple[float, dict, dict, float]] = []   # (wall, bridge fields, stack cpu, own cpu)
    walking = []

    def on_diag(now: float, fields: dict) -> None:
        if not walking and fields.get("commands_applied", 0) > 0:
            tree.refresh()                 # every process of the stack known before the window opens
            walking.append(True)
        cpu, own = sampler.at()
        diag_samples.append((now, fields, cpu, own))

    topics = () if record else TIMING_TOPICS + (TICK_TOPICS if observe_walk else ())
    monitor = StackMonitor(domain_id, on_diag, record_topics=topics)
    sampler.start()
    t0 = time.monotonic()
    try:
        rc = launcher.run()
    finally:
        sampler.stop()
        monitor.drain()
        monitor.close()
    if rc == 130:                            # Ctrl-C: the launcher stopped the stack; stop here too
        raise KeyboardInterrupt
    msgs = None if record else monitor.messages()
    wall_total = time.monotonic() - t0
    out = {"launch_command": command, "launch_exit_code": rc, "domain_id": domain_id,
           "wall_s": wall_total, "monitor": {"topics": list(topics) or [TIMING_TOPICS[0]],
                                             "errors": monitor.callback_errors}}
    out.update(_window_cpu(diag_samples, tree, sampler))
    _add_walk_metrics(out, msgs, topics, record, observe_walk, bag, rc, scenario, stream)
    return out


def _add_walk_metrics(out: dict, msgs, topics, record: bool, observe_walk: bool, bag: Path, rc: int, scenario,
                      stream) -> None:
    """The walk's metrics into ``out``: from the recorded bag (``record``) or from the messages the
    monitor took (``msgs``; the tick topics only with ``observe_walk``), with what the monitor missed."""
    from legged_wbc.tools.analysis import bag_metrics

    if msgs is not None:
        # every 500 Hz topic should hold every tick of the walk (and tick 0, re-sent while starting)
        counts = {t: len(v) for t, v in msgs.items()}
        short = {t: n for t, n in counts.items() if t in TICK_TOPICS and n < out["window"]["ticks"]}
        out["monitor"].update(messages=counts, complete=not short)
        if short and stream is not None:
            stream.write(f"[bench] warning: the monitor missed messages of the walk ({short} for "
                         f"{out['window']['ticks']} ticks in the window): the walk metrics cover less\n")
    if record:
        if not (bag / "metadata.yaml").is_file():
            raise BenchError(f"the stack exited ({rc}) without closing its bag {bag}")
        run = bag_metrics.load_run(bag)
        out["metrics_source"] = "the bag the stack recorded (record:=, deleted after)"
    else:
        run = bag_metrics.run_from_messages(
            Path("stack_monitor"), msgs,
            {"controller": "cbf", "scenario": scenario, "mode": "realtime"})
        out["metrics_source"] = ("the stack's " + ", ".join(topics) +
                                 " as the bench's monitor node received them (DDS)")
    out["metrics"] = bag_metrics.run_metrics(run)
    if not record and not observe_walk:
        out["metrics"].update({k: None for k in WALK_METRICS})
        out["walk_metrics_unavailable"] = (
            "not measured without --record: they come from the 500 Hz topics " + ", ".join(TICK_TOPICS) +
            ", which the container publishes outside only for a subscriber there; taking them from the "
            "bench costs the control process about a quarter more CPU per tick and ~100 us more command "
            "latency at the median, ~350 us at p99 (docs/realtime.md), so the bench does not")


def _window_cpu(diag_samples, tree: ProcessTree, sampler: CpuSampler) -> dict:
    walk = [s for s in diag_samples if s[1].get("commands_applied", 0) > 0]
    if len(walk) < 2:
        raise BenchError(f"the bridge reported {len(walk)} diagnostics sample(s) after the first command: no "
                         "walking window to measure (see the stack's output above)")
    (w0, f0, c0, own0), (w1, f1, c1, own1) = walk[0], walk[-1]
    ticks = int(round((f1["sim_time"] - f0["sim_time"]) / CONTROL_DT))
    wall = w1 - w0
    if ticks <= 0 or wall <= 0:
        raise BenchError(f"empty walking window ({ticks} ticks in {wall:.3f} s)")
    alive = {key: name for key, name in tree.names.items()   # not e.g. a start-up helper gone before
             if key in c0 or key in c1 or sampler.seen_between(key, w0, w1)}
    per_tick, util, cpu_s, pids = {}, {}, {}, {}
    for key, name in sorted(unique_names(alive).items(), key=lambda kv: kv[1]):
        # a process gone before a reading counts with its last periodic sample; one born in the window from 0
        end = c1.get(key)
        if end is None:
            end = sampler.last_before(key, w1)
        if end is None:
            continue
        start = c0.get(key)
        if start is None:
            start = sampler.last_before(key, w0) or 0.0
        used = end - start
        cpu_s[name], pids[name] = used, key[0]
        per_tick[name] = used / ticks * 1e6
        util[name] = used / wall
    return {"cpu_per_tick_us": per_tick, "utilization": util,
            "processes": {n: {"pid": pids[n], "cpu_s": cpu_s[n]} for n in per_tick},
            "bench_process": {"cpu_per_tick_us": (own1 - own0) / ticks * 1e6, "utilization": (own1 - own0) / wall},
            "window": {"ticks": ticks, "sim_s": f1["sim_time"] - f0["sim_time"], "wall_s": wall,
                       "sim_start_s": f0["sim_time"], "sim_end_s": f1["sim_time"]}}


# ------------------------------------------------------------------------------------ headless + reference
def headless_and_reference(scenario: str, duration: float, reference_seconds: float = REFERENCE_SECONDS,
                           cpu_latency_us: int = DEFAULT_CPU_LATENCY_US, idle_poll: str = "auto") -> dict:
    """Steps 2 and 3 of the module docstring (run in a process of its own by :func:`bench_realtime`)."""
    import warnings

    warnings.filterwarnings("ignore")   # solver deprecation / sparse-conversion chatter
    from legged_wbc.closed_loop import ClosedLoop
    from legged_wbc.scenario import load_scenario
    from legged_wbc.tools.bench.bench_cycle import bench_cycle

    ClosedLoop(load_scenario(scenario), "cbf").run(0.1, progress=False)   # warm-up: compiled kernels loaded
    res = ClosedLoop(load_scenario(scenario), "cbf").run(duration, progress=False)
    ticks = len(res.series["t"])
    cpu = float(res.extra["cpu_time_s"])
    paced = _paced_headless(scenario, min(duration, PACED_SECONDS), cpu_latency_us, idle_poll)
    ref = bench_cycle(seconds=reference_seconds, impl="fast", scenario=scenario, startup=False)
    return {"headless": {"ticks": ticks, "cpu_s": cpu, "wall_s": float(res.wall_time_s), "fell": bool(res.fell),
                         "per_tick_us": cpu / ticks * 1e6 if ticks else None},
            "headless_paced": paced,
            "reference": {"p50_us": ref["reference"]["total"]["p50_us"], "ticks": ref["ticks"],
                          "window_s": ref["window_s"], "fast_total_p50_us": ref["total"]["p50_us"]}}


def _paced_headless(scenario: str, seconds: float, cpu_latency_us: int = DEFAULT_CPU_LATENCY_US,
                    idle_poll: str = "auto") -> dict:
    """The headless loop paced by the wall clock as the realtime bridge paces it (each tick starts at its
    scheduled time, the loop sleeps in between): its CPU per tick. On our VMs a loop that sleeps 500
    times a second comes back to cold caches every tick, and the same work costs ~2x the CPU of the loop
    run flat out (~1.5x with idle CPUs polling); this is the floor of any realtime process doing that
    work, ROS or not. It holds the same CPU wake-up latency request as the stack's containers
    (``cpu_latency_us``; -1 none) and the same idle pollers (``idle_poll``), so that the two compare."""
    import logging

    from legged_wbc.closed_loop import ClosedLoop
    from legged_wbc.idle_poll import start_idle_pollers, stop_idle_pollers
    from legged_wbc.ros.stack.composition import hold_cpu_wakeup_latency, release_cpu_wakeup_latency
    from legged_wbc.scenario import load_scenario

    log = logging.getLogger("bench_realtime")
    qos = hold_cpu_wakeup_latency(cpu_latency_us, log)
    pollers = start_idle_pollers(idle_poll, log)
    try:
        return _paced_loop(ClosedLoop(load_scenario(scenario), "cbf"), seconds) | {
            "cpu_wakeup_latency_us": cpu_latency_us if qos is not None else None,
            "idle_pollers": len(pollers.cpus) if pollers is not None else 0}
    finally:
        stop_idle_pollers(pollers)
        release_cpu_wakeup_latency(qos)


def _paced_loop(loop, seconds: float) -> dict:
    """``loop`` run ``seconds`` with each tick started at its wall-clock time: ticks, CPU, wall time."""
    start = []

    def pace(_loop, t, *_):
        now = time.monotonic()
        if not start:
            start.append(now - t)
        wait = start[0] + t - now
        if wait > 0:
            time.sleep(wait)

    res = loop.run(seconds, progress=False, on_tick=pace)
    ticks = len(res.series["t"])
    cpu = float(res.extra["cpu_time_s"])
    return {"ticks": ticks, "cpu_s": cpu, "wall_s": float(res.wall_time_s),
            "per_tick_us": cpu / ticks * 1e6 if ticks else None}


def _child(conn, *args) -> None:
    try:
        conn.send(("ok", headless_and_reference(*args)))
    except BaseException as exc:  # noqa: BLE001 - reported by the parent
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def run_headless_and_reference(scenario: str, duration: float, cpu_latency_us: int = DEFAULT_CPU_LATENCY_US,
                               idle_poll: str = "auto") -> dict:
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_child, args=(child, scenario, duration, REFERENCE_SECONDS, cpu_latency_us, idle_poll),
                    name="bench_headless")
    p.start()
    child.close()
    try:
        status, value = parent.recv()
    except EOFError:
        status, value = "error", "the headless process died"
    p.join()
    if status != "ok":
        raise BenchError(f"headless loop / reference: {value}")
    return value


# ------------------------------------------------------------------------------------ all of it
def is_idle_poller(name: str) -> bool:
    """A process name of :mod:`legged_wbc.idle_poll`'s pollers (``idle_poller``, ``idle_poller#2``, ...)."""
    return name.split("#", 1)[0] == POLLER_NAME


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def bench_realtime(duration: float = 52.0, scenario: str = "paper", record: bool = False, stream=None,
                   observe_walk: bool = False, layout: str | None = None,
                   cpu_latency_us: int = DEFAULT_CPU_LATENCY_US, idle_poll: str = "auto") -> dict:
    """The module docstring's three measurements, one after the other; the result's keys are
    ``legged-wbc bench realtime --json``'s. ``stream`` gets the stack's output (None: discarded)."""
    from legged_wbc.scenario import load_scenario

    load_scenario(scenario)   # a bad name or file: one line (ConfigError) before anything starts
    load_before = os.getloadavg()
    stack = run_stack(scenario, duration, record, choose_domain(), stream=stream, observe_walk=observe_walk,
                      layout=layout, cpu_latency_us=cpu_latency_us, idle_poll=idle_poll)
    if stream is not None:
        stream.write("[bench] headless loop and reference path ...\n")
        stream.flush()
    other = run_headless_and_reference(scenario, duration, cpu_latency_us, idle_poll)
    load_after = os.getloadavg()
    m = stack["metrics"]
    control = next((n for n in CONTROL_PROCESSES if n in stack["cpu_per_tick_us"]), None)
    headless = other["headless"]["per_tick_us"]
    paced = other["headless_paced"]["per_tick_us"]
    ctl_cpu = stack["cpu_per_tick_us"].get(control) if control else None
    return {
        "scenario": scenario, "duration_s": duration, "record": record,
        "deadline_miss_pct": m.get("deadline_miss_pct"),
        "command_latency_p50_us": m.get("command_latency_p50_us"),
        "command_latency_p99_us": m.get("command_latency_p99_us"),
        "fell": m.get("fell"),
        "max_violation_rad": m.get("max_violation_rad"),
        "qp_failures": m.get("qp_failures"),
        "realtime_factor": m.get("realtime_factor"),
        "controller_waits": m.get("controller_waits"),
        "cpu_per_tick_us": stack["cpu_per_tick_us"],
        "utilization": stack["utilization"],
        "headless_per_tick_us": headless,
        "overhead_ratio": ctl_cpu / headless if _finite(ctl_cpu) and _finite(headless) and headless > 0 else None,
        "headless_paced_per_tick_us": paced,
        "overhead_ratio_paced": ctl_cpu / paced if _finite(ctl_cpu) and _finite(paced) and paced > 0 else None,
        "reference_p50_us": other["reference"]["p50_us"],
        "cpu_wakeup_latency_us": cpu_latency_us,
        "idle_poll": idle_poll,
        # the stack's processes without the idle pollers (idle time spent spinning, not load): the largest share
        # of a core any of them took, and the pollers' own share in all
        "max_utilization": max((u for n, u in stack["utilization"].items() if not is_idle_poller(n)), default=None),
        "idle_poller_utilization": sum(u for n, u in stack["utilization"].items() if is_idle_poller(n)),
        "loadavg": {"before": list(load_before), "after": list(load_after)},
        "cpu_count": os.cpu_count(),
        "control_process": control,
        "window": stack["window"],
        "processes": stack["processes"],
        "bench_process": stack["bench_process"],
        "headless": other["headless"],
        "headless_paced": other["headless_paced"],
        "reference": other["reference"],
        "stack": _stack_details(stack, m),
    }


def _stack_details(stack: dict, m: dict) -> dict:
    """The result's ``stack`` entry: how the stack ran and the metrics beyond the headline ones."""
    return {"launch_command": stack["launch_command"], "launch_exit_code": stack["launch_exit_code"],
            "domain_id": stack["domain_id"], "wall_s": stack["wall_s"],
            "metrics_source": stack["metrics_source"], "monitor": stack["monitor"],
            **({"walk_metrics_unavailable": stack["walk_metrics_unavailable"]}
               if "walk_metrics_unavailable" in stack else {}),
            "command_latency_max_us": m.get("command_latency_max_us"), "ticks_timed": m.get("ticks_timed"),
            "ticks_dropped": m.get("ticks_dropped"),
            "deadline_misses": m.get("deadline_misses"), "watchdog_events": m.get("watchdog_events"),
            "commands_clamped": m.get("commands_clamped"), "commands_foreign": m.get("commands_foreign"),
            "sim_time_s": m.get("sim_time_s"), "distance_m": m.get("distance_m"),
            "violation_rate_pct": m.get("violation_rate_pct"), "fall_reason": m.get("fall_reason"),
            **({"unavailable": m["unavailable"]} if m.get("unavailable") else {}),
            **({"notes": m["notes"]} if m.get("notes") else {})}


def print_summary(res: dict, out=None) -> None:
    out = out or sys.stdout

    def f(v, fmt="{:.0f}"):
        return "-" if v is None else fmt.format(v)

    st, w = res["stack"], res["window"]
    lb, la = res["loadavg"]["before"][0], res["loadavg"]["after"][0]
    print(f"bench realtime: scenario {res['scenario']}, {res['duration_s']:g} s, "
          f"{'recording' if res['record'] else 'not recording'}; load {lb:.2f} -> {la:.2f} on {res['cpu_count']} cores",
          file=out)
    print(f"stack: {st['launch_command']} (exit {st['launch_exit_code']}, ROS_DOMAIN_ID {st['domain_id']})", file=out)
    print(f"walking window: t = {w['sim_start_s']:.1f} - {w['sim_end_s']:.1f} s sim, {w['ticks']} ticks in "
          f"{w['wall_s']:.1f} s wall", file=out)
    print(f"{'process':24s} {'CPU us/tick':>12s} {'utilization':>12s}", file=out)
    for name, v in res["cpu_per_tick_us"].items():
        mark = "  <- control" if name == res["control_process"] else (
            "  (idle CPU spent polling, not load)" if is_idle_poller(name) else "")
        print(f"{name:24s} {v:12.0f} {res['utilization'][name]:12.3f}{mark}", file=out)
    bp = res["bench_process"]
    print(f"{'(bench: launcher+monitor)':24s} {bp['cpu_per_tick_us']:12.0f} {bp['utilization']:12.3f}", file=out)
    print(f"headless loop: {f(res['headless_per_tick_us'])} us CPU/tick ({res['headless']['ticks']} ticks); "
          f"overhead ratio (control process / headless): {f(res['overhead_ratio'], '{:.2f}')}", file=out)
    print(f"headless loop paced at real time: {f(res['headless_paced_per_tick_us'])} us CPU/tick; control process / "
          f"paced loop: {f(res['overhead_ratio_paced'], '{:.2f}')}", file=out)
    print(f"reference path p50 (speed index): {f(res['reference_p50_us'])} us/tick", file=out)
    print(f"deadline misses {f(res['deadline_miss_pct'], '{:.3g}')} %, command latency p50 / p99 "
          f"{f(res['command_latency_p50_us'])} / {f(res['command_latency_p99_us'])} us "
          f"(max {f(st['command_latency_max_us'])}); real-time factor {f(res['realtime_factor'], '{:.2f}')}x, "
          f"{f(res['controller_waits'])} waits for the controller", file=out)
    if "walk_metrics_unavailable" in st:
        print("walk (fell, max violation, QP failures): not measured without --record", file=out)
    else:
        print(f"walk: fell {res['fell']}{' (' + st['fall_reason'] + ')' if st.get('fall_reason') else ''}, "
              f"max violation {f(res['max_violation_rad'], '{:.4g}')} rad, QP failures {res['qp_failures']}",
              file=out)
    print(f"metrics from {st['metrics_source']}", file=out)
