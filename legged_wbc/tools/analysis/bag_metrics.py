"""Runs -> series -> metrics: rosbag2 bags of the ROS stack and headless run directories.

:func:`load_run` reads either

* a **rosbag2 directory** (``metadata.yaml`` + MCAP or sqlite3 storage, as written by the stack's
  ``bag_recorder``) with ``rosbags.highlevel.AnyReader``, or
* a **headless run directory** (``legged-wbc run --out DIR``: ``log.npz`` + ``metrics.json``),

and returns a :class:`RunData` whose ``series`` has the keys of :mod:`legged_wbc.metrics` (and of
the headless ``log.npz`` where the bag has the data), so both kinds are evaluated by the same
:func:`legged_wbc.metrics.compute_metrics` (:func:`run_metrics`). How a bag becomes series: :mod:`.bag_series`;
the :class:`RunData` record and the topics: :mod:`.run_data`; the bag's size on disk: :mod:`.bag_files`.

The evaluation window is the scenario's (``custom_data`` ``scenario=NAME|PATH`` of the bag,
loaded with :func:`legged_wbc.scenario.load_scenario`) unless given; the relative-pitch bounds
are those of ``config/wbc_controller.yaml`` with the scenario's controller overrides (live
parameter changes during the run are not in the bag and not taken into account).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from legged_wbc.metrics import CONTROL_DT, command_metrics, compute_metrics, roll_pitch_from_quat_xyzw
from legged_wbc.terrain_metrics import KEYS as TERRAIN_KEYS, terrain_metrics
from legged_wbc.tools.analysis.bag_files import bag_size
from legged_wbc.tools.analysis.bag_series import read_bag_messages, series_from_messages
from legged_wbc.tools.analysis.run_data import (
    COMMAND_METRIC_TOPICS, METRIC_SOURCE_TOPICS, METRIC_TOPICS, SERIES_FOR_METRIC, T_BRIDGE_DIAG, T_GT_ODOM, TOPICS, RunData,
    RunInputError,
)


# ------------------------------------------------------------------------------------ input kinds
def is_bag_dir(path: Path) -> bool:
    return path.is_dir() and (path / "metadata.yaml").is_file()


def is_headless_dir(path: Path) -> bool:
    return (path.is_dir() and (path / "log.npz").is_file()) or (path.is_file() and path.suffix == ".npz")


def load_run(path: str | Path, label: str | None = None) -> RunData:
    """A bag directory or a headless run directory (``log.npz``); :class:`RunInputError` otherwise."""
    p = Path(path)
    if not p.exists():
        raise RunInputError(f"{p}: no such file or directory")
    if is_bag_dir(p):
        return load_bag(p, label)
    if is_headless_dir(p):
        return load_headless(p, label)
    if p.is_dir() and (any(p.glob("*.mcap")) or any(p.glob("*.db3"))):
        raise RunInputError(f"{p}: has bag storage files but no metadata.yaml (an unfinished recording? "
                            "the recorder writes metadata.yaml when it closes the bag)")
    what = "a directory" if p.is_dir() else "a file"
    raise RunInputError(f"{p}: not a rosbag2 bag (no metadata.yaml) nor a headless run directory (no log.npz); "
                        f"it is {what}")


def parse_custom_data(meta: dict) -> dict:
    info = meta.get("rosbag2_bagfile_information", meta) or {}
    cd = info.get("custom_data") or {}
    return {str(k): str(v) for k, v in cd.items()}


def _load_scenario_and_bounds(run: RunData) -> None:
    """Scenario (for window, fall limits, disturbance) and the controller's relative-pitch bounds."""
    from legged_wbc.robot import ConfigError
    from legged_wbc.scenario import load_scenario

    name = run.scenario_name
    if name and name != "none":
        p = Path(name)
        if p.suffix and not p.exists() and run.kind == "bag":
            # a moved experiment directory: DIR/bags/NAME recorded with scenario:=DIR/scenarios/NAME.yaml
            for cand in (run.path.parent / "scenarios" / p.name, run.path.parent.parent / "scenarios" / p.name):
                if cand.is_file():
                    run.notes.append(f"scenario {name} not found; using {cand}")
                    name = str(cand)
                    break
        try:
            run.scenario = load_scenario(name)
        except (ConfigError, OSError, ValueError) as exc:
            run.notes.append(f"scenario {name!r} could not be loaded ({exc}): no evaluation window, fall limits "
                             "or disturbance window from it")
    _set_bounds(run)


def _set_bounds(run: RunData) -> None:
    from wbc_controller.config import load_wbc_config

    mode = run.controller if run.controller in ("none", "damping", "cbf") else "cbf"
    try:
        over = run.scenario.controller_overrides(mode) if run.scenario is not None else {"relative_pitch_mode": mode}
        cfg = load_wbc_config(overrides=over)
        run.theta_min, run.theta_max = float(cfg.theta_min), float(cfg.theta_max)
    except (ValueError, TypeError, OSError) as exc:
        run.notes.append(f"controller config could not be loaded ({exc}); bounds -0.3 / 0.3 rad assumed")


# ------------------------------------------------------------------------------------ headless
def load_headless(path: Path, label: str | None = None) -> RunData:
    from legged_wbc.closed_loop import load_log
    from legged_wbc.scenario import scenario_from_dict

    try:
        series, meta = load_log(path)
    except (OSError, ValueError, KeyError) as exc:
        raise RunInputError(f"{path}: cannot read the headless log ({exc})") from exc
    d = path if path.is_dir() else path.parent
    metrics = None
    if (d / "metrics.json").is_file():
        try:
            metrics = json.loads((d / "metrics.json").read_text())
        except ValueError:
            metrics = None
    run = RunData(path=path, kind="headless", label=label or f"{meta.get('controller', '?')} ({d.name}, headless)",
                  controller=meta.get("controller"), scenario_name=None, scenario=None, mode="headless",
                  series=dict(series), headless_metrics=metrics)
    try:
        run.scenario = scenario_from_dict(meta["scenario"])
        run.scenario_name = run.scenario.name
    except Exception as exc:  # noqa: BLE001 - an old log: metrics still computable with --window
        run.notes.append(f"scenario in log.npz unreadable ({exc})")
    _set_bounds(run)
    t = np.asarray(series.get("t", []))
    run.sim_time_s = float(t[-1] + CONTROL_DT) if len(t) else 0.0
    if metrics:
        run.fell = bool(metrics.get("fell", False))
        run.fall_reason = metrics.get("fall_reason")
        run.wall_time_s = metrics.get("wall_time_s")
        run.sim_time_s = metrics.get("sim_time_s", run.sim_time_s)
    if run.scenario is not None:
        _robot_names(run, run.scenario.robot, need_joint_names=True)
    if not run.leg_names and "theta" in series:
        run.leg_names = [f"leg{i}" for i in range(np.asarray(series["theta"]).shape[1])]
    if "rp_err" not in run.series and "base_quat" in run.series:
        run.series["rp_err"] = roll_pitch_from_quat_xyzw(run.series["base_quat"])
    return run


# ------------------------------------------------------------------------------------ bags
def load_bag(path: Path, label: str | None = None) -> RunData:
    from legged_wbc.robot import ConfigError, load_yaml_file

    try:
        meta = load_yaml_file(path / "metadata.yaml") or {}
    except ConfigError as exc:         # unreadable, binary, malformed, oversized: one line
        raise RunInputError(f"{path}: unreadable metadata.yaml ({exc})") from None
    if not isinstance(meta, dict) or "rosbag2_bagfile_information" not in meta:
        raise RunInputError(f"{path}: metadata.yaml is not rosbag2 metadata (no rosbag2_bagfile_information)")
    msgs, _ = read_bag_messages(path)
    return run_from_messages(path, msgs, parse_custom_data(meta), label)


def run_from_messages(path: Path, msgs: dict, custom_data: dict, label: str | None = None) -> RunData:
    """A bag's :class:`RunData` from its messages, ``{topic: [(log_ns, msg), ...]}`` (rosbags' or rclpy's
    message objects), and its ``custom_data`` (``controller``, ``scenario``, ``mode``, ``robot``): what
    :func:`load_bag` does once it has read the bag; ``bench realtime`` passes the messages it took
    from the running stack. Topics absent from ``msgs`` are reported as missing."""
    cd = dict(custom_data)
    run = RunData(path=Path(path), kind="bag", label=label or f"{cd.get('controller', '?')} ({Path(path).name})",
                  controller=cd.get("controller"), scenario_name=cd.get("scenario"), scenario=None,
                  mode=cd.get("mode"), series={}, custom_data=cd)
    if not cd:
        run.notes.append("the bag has no custom_data (controller / scenario unknown): pass --window for the "
                         "evaluation window")
    _load_scenario_and_bounds(run)
    run.missing_topics = [t for t in TOPICS if not msgs.get(t)]
    series_from_messages(run, msgs)
    robot = cd.get("robot") or (run.scenario.robot if run.scenario is not None else "hexapod")
    _robot_names(run, robot, need_joint_names=not run.joint_names)
    return run


def _robot_names(run: RunData, robot: str, need_joint_names: bool) -> None:
    """Leg names (if unknown), joint names (headless logs have none: Pinocchio order) and each leg's
    joint columns, by name, from the robot config."""
    try:
        from legged_wbc.robot import load_robot_config

        cfg = load_robot_config(robot)
        if not run.leg_names:
            run.leg_names = list(cfg.leg_names)
        if need_joint_names:
            from legged_wbc.model import RobotModel

            run.joint_names = list(RobotModel(robot).joint_names)
        pos = {n: i for i, n in enumerate(run.joint_names)}
        tab = cfg.joint_table()
        effort = dict(zip(tab.names, tab.effort.tolist()))
        for leg in cfg.leg_specs:
            names = list(leg.joints)
            if all(n in pos for n in names):
                run.leg_joints[leg.name] = [pos[n] for n in names]
        if run.joint_names and all(n in effort for n in run.joint_names):
            run.joint_effort = np.array([effort[n] for n in run.joint_names])
    except Exception as exc:  # noqa: BLE001 - names are for figures only
        run.notes.append(f"robot {robot!r}: joint/leg names unavailable ({exc})")
        for leg in run.leg_names:
            run.leg_joints[leg] = [i for i, n in enumerate(run.joint_names) if n.startswith(leg + "_")]


# ------------------------------------------------------------------------------------ metrics
def eval_window(run: RunData, window: tuple[float, float] | None = None) -> tuple[float, float] | None:
    if window is not None:
        return float(window[0]), float(window[1])
    if run.scenario is not None:
        return run.scenario.eval_window
    return None


def _pitch_legs(run: RunData):
    """Which legs of the run's robot (its scenario's) have the foot pitch joint (None: unknown, every leg)."""
    if run.scenario is None:
        return None
    from legged_wbc.robot import load_robot_config

    try:
        specs = load_robot_config(run.scenario.robot).leg_specs
    except (ValueError, OSError):
        return None
    return [leg.has_pitch for leg in specs] if len(specs) == len(run.leg_names or specs) else None


def run_metrics(run: RunData, window: tuple[float, float] | None = None) -> dict:
    """The metrics of ``legged-wbc run``'s metrics.json (same keys, same function), plus the bridge's
    counters and ``unavailable`` (metric -> reason) for what the input lacks."""
    win = eval_window(run, window)
    S, sat_why = _metric_series(run)
    if win is None:
        win = (0.0, float(S["t"][-1]) if len(S.get("t", [])) else 0.0)
        run.notes.append("no scenario: evaluation window = the whole run (pass --window T0 T1)")
    m = compute_metrics(S, win[0], win[1], run.theta_min, run.theta_max, fell=bool(run.fell),
                        pitch_legs=_pitch_legs(run))
    if run.fell is None:
        m["fell"] = m["whole_run"]["fell"] = None
    # None where the run lacks the series (a bag: the feet's truth; a bag without /estimator/support: all)
    m.update(terrain_metrics(S, win[0], win[1]) if "support" in S else dict.fromkeys(TERRAIN_KEYS))
    m.update(command_metrics(S))       # every tick (as the headless loop), None without a command
    _add_run_fields(run, m)
    unavailable = _unavailable(run, m)
    if sat_why:
        unavailable["torque_saturation_pct"] = sat_why
    if run.fell is None:
        unavailable["fell"] = f"no {T_GT_ODOM}"
    if run.kind == "bag" and T_BRIDGE_DIAG in run.missing_topics:
        unavailable["deadline_misses"] = f"no {T_BRIDGE_DIAG}"
    _window_notes(run, m, S, win, unavailable)
    if unavailable:
        m["unavailable"] = unavailable
    if run.gaps:
        m["gaps"] = dict(run.gaps)
    if run.notes:
        m["notes"] = list(run.notes)
    return m


def _metric_series(run: RunData) -> tuple[dict, str | None]:
    """The series the metrics see: with ``tau_saturated`` derived where the run lacks it, without the
    rows after a fall and the rows some metric topic misses (noted); and why the saturation is
    unavailable, if it is."""
    S = run.series
    T = len(S.get("t", []))
    sat_why = None
    if "tau_saturated" not in S:
        S = dict(S)
        sat_why = _add_ideal_saturation(run, S)
    keep = np.ones(T, dtype=bool)
    if run.fall_index is not None:
        keep[run.fall_index + 1:] = False
    if run.complete is not None and not run.complete.all():
        bad = ~run.complete
        t = S["t"]
        note = (f"{int(np.count_nonzero(bad))} tick(s) between t = {t[bad][0]:g} and {t[bad][-1]:g} s lack a sample "
                f"of some metric topic ({', '.join(k for k in run.gaps if k in METRIC_SOURCE_TOPICS)}): "
                "excluded from the metrics")
        if note not in run.notes:
            run.notes.append(note)
        keep &= run.complete
    if not keep.all():
        S = {k: (v[keep] if isinstance(v, np.ndarray) and v.shape[:1] == (T,) else v) for k, v in S.items()}
    return S, sat_why


# the bridge's counters a bag's last /bridge/diagnostics sample gives (None for the headless loop)
BRIDGE_COUNTERS = ("deadline_misses", "stale_commands", "rejected_commands", "watchdog_events", "controller_waits",
                   "commands_clamped", "commands_foreign")


def _add_run_fields(run: RunData, m: dict) -> None:
    """What the run is (source, kind, mode, controller, scenario, times, bounds) and the bridge's
    counters and command timing, into the metrics ``m``."""
    m.update(sim_time_s=run.sim_time_s, wall_time_s=run.wall_time_s,
             realtime_factor=(run.sim_time_s / run.wall_time_s) if run.sim_time_s and run.wall_time_s else None,
             controller=run.controller, scenario=run.scenario.name if run.scenario is not None else run.scenario_name,
             fall_reason=run.fall_reason,
             terrain=run.scenario.terrain.summary() if run.scenario is not None else None)
    m["source"] = str(run.path)
    m["kind"] = run.kind
    m["mode"] = run.mode
    m["theta_bounds_rad"] = [run.theta_min, run.theta_max]
    if run.kind == "bag":
        b = run.bridge
        for k in BRIDGE_COUNTERS + ("commands_applied",):
            m[k] = int(b[k]) if k in b else None      # a field the bridge that wrote the bag did not have yet
        m.update(realtime_quality(run))
        m.update(bag_size(run.path, run.sim_time_s))
        m["command_source"] = run.command_source     # where the command series came from (None: no command)
    else:
        for k in BRIDGE_COUNTERS:
            m[k] = None  # no transport, no deadlines in the headless loop (not applicable)
        m.update(realtime_quality(run))


def _unavailable(run: RunData, m: dict) -> dict:
    """metric -> why the run cannot give it (the topic or series it lacks)."""
    unavailable = {}
    missing_series = set(m.get("missing", []))
    no_pitch = m.get("relative_pitch_legs") == 0      # the robot's legs have no foot pitch joint
    for metric, keys in SERIES_FOR_METRIC.items():
        if no_pitch and "theta" in keys:
            unavailable[metric] = "no relative pitch: the robot's legs have no foot pitch joint"
        elif any(k in missing_series for k in keys):
            why = [t for t in METRIC_TOPICS.get(metric, ()) if t in run.missing_topics] if run.kind == "bag" else []
            unavailable[metric] = ("no " + ", ".join(why)) if why else "series " + ", ".join(
                k for k in keys if k in missing_series) + " missing"
    if "cmd_target" in run.series:     # a run under a command whose truth or estimate the bag lacks
        for metric, topics in COMMAND_METRIC_TOPICS.items():
            why = [t for t in topics if t in run.missing_topics]
            if m.get(metric) is None and why:
                unavailable[metric] = "no " + ", ".join(why)
    return unavailable


def _window_notes(run: RunData, m: dict, S: dict, win, unavailable: dict) -> None:
    """A run without an accepted cycle in the window (``unavailable``), or one that ends before the
    window does (a note)."""
    t = S.get("t")
    if t is not None and len(t):
        end = float(t[-1])
        if m.get("samples", 0) == 0:
            unavailable.setdefault("window", f"the run ({float(t[0]):g} - {end + CONTROL_DT:g} s) has no accepted "
                                             f"cycle in the evaluation window {win[0]:g} - {win[1]:g} s")
        elif end + CONTROL_DT < win[1] - 1e-9:
            note = (f"the run ends at {end + CONTROL_DT:g} s, before the end of the evaluation window "
                    f"({win[1]:g} s): metrics over {win[0]:g} - {end + CONTROL_DT:g} s")
            if note not in run.notes:
                run.notes.append(note)


def _add_ideal_saturation(run: RunData, S: dict) -> str | None:
    """``tau_saturated`` for a run that has no such series (a bag, an older headless log), where it
    follows from the commands: with ``actuators: ideal`` MuJoCo clamps the applied torque to the
    joint's effort limit, and the torque applied during tick ``k`` is the command of tick ``k - N``
    (``N``: ``command_delay_ticks``; before it, damping within the limits), so the flag is
    ``|tau[k - N]| > effort``, as the headless loop logs it. With ``actuators: realistic`` the
    clipping depends on the joint velocity at every physics step, which a bag does not hold: returns
    why the metric is unavailable (None when the series was added or is not needed)."""
    sc = run.scenario
    if sc is None or "tau" not in S:
        return None
    if getattr(sc, "actuators", "ideal") != "ideal":
        return ("actuators: realistic: the torque clipping depends on the joint velocity at every physics "
                "step, not in the bag (the headless loop logs it)")
    tau, eff = np.asarray(S["tau"], dtype=float), run.joint_effort
    if eff is None or tau.ndim != 2 or tau.shape[1] != eff.size or "t" not in S:
        return None
    ticks = np.rint(np.asarray(S["t"]) / CONTROL_DT).astype(int)
    row = {int(k): i for i, k in enumerate(ticks)}
    lag = int(getattr(sc, "command_delay_ticks", 0))
    src = np.array([row.get(int(k) - lag, -1) if k >= lag else -1 for k in ticks], dtype=int)
    sat = np.zeros(tau.shape, dtype=bool)
    have = src >= 0
    with np.errstate(invalid="ignore"):
        sat[have] = np.abs(tau[src[have]]) > eff     # NaN (a gap): not counted
    S["tau_saturated"] = sat
    return None


def realtime_quality(run: RunData) -> dict:
    """Command timing of a bag (``/bridge/command_latency``; see ``mujoco_bridge.timing``):
    ``deadline_miss_pct`` (% of closed ticks whose command missed its deadline; lockstep has none),
    ``command_latency_p50_us`` / ``_p99_us`` / ``_max_us`` over the answered ticks, ``ticks_timed``
    (the simulated ticks closed) and ``ticks_dropped`` (control periods the bridge dropped from its
    schedule in stalls, each a miss: they count in ``deadline_miss_pct``'s numerator and denominator).
    None where the bag has no latency topic (bridges before it existed)."""
    lat = run.command_latency_us
    keys = ("deadline_miss_pct", "command_latency_p50_us", "command_latency_p99_us", "command_latency_max_us")
    if lat is None or lat.size == 0:
        return {**{k: None for k in keys}, "ticks_timed": 0, "ticks_dropped": 0}
    ticks = run.command_latency_ticks
    dropped = int(np.count_nonzero(ticks < 0)) if ticks is not None else 0
    ok = lat[np.isfinite(lat)]
    return {"deadline_miss_pct": 100.0 * float(np.count_nonzero(~np.isfinite(lat))) / lat.size,
            "command_latency_p50_us": float(np.percentile(ok, 50)) if ok.size else None,
            "command_latency_p99_us": float(np.percentile(ok, 99)) if ok.size else None,
            "command_latency_max_us": float(ok.max()) if ok.size else None,
            "ticks_timed": int(lat.size) - dropped, "ticks_dropped": dropped}
