"""Runs -> series -> metrics: rosbag2 bags of the ROS stack and headless run directories.

:func:`load_run` reads either

* a **rosbag2 directory** (``metadata.yaml`` + MCAP or sqlite3 storage, as written by the stack's
  ``bag_recorder``) with ``rosbags.highlevel.AnyReader``, or
* a **headless run directory** (``legged-wbc run --out DIR``: ``log.npz`` + ``metrics.json``),

and returns a :class:`RunData` whose ``series`` has the keys of :mod:`legged_wbc.metrics` (and of
the headless ``log.npz`` where the bag has the data), so both kinds are evaluated by the same
:func:`legged_wbc.metrics.compute_metrics` (:func:`run_metrics`).

Series of a bag, one row per control tick ``k`` (500 Hz, ``t = k * 2 ms``, exact), aligned by tick,
never by receive time (the recorder's receive stamps lag by up to a few ms):

====================  ==========================  =====================================================
series key            topic                       how the tick is found
====================  ==========================  =====================================================
``theta``,            ``/wbc/relative_pitch``     header stamp; ``position`` / ``velocity`` /
``theta_dot``,                                    ``effort`` (legs by name)
``cbf_active``
``qp_accepted``,      ``/wbc/diagnostics``        the ``tick`` field (fields by the ``wbc[...]`` label)
``qp_time_us``,
``cycle_time_us``,
``safe_stop``
``tau``               ``/joint_torque_cmd``       header stamp; ``effort`` (joints by name)
``support``,          ``/estimator/support``      header stamp; ``position`` / ``velocity``
``touchdown``
``est_pos``           ``/estimator/odom``         header stamp
``base_pos``,         ``/ground_truth/odom``      header stamp; ``rp_err`` = roll/pitch of the true
``base_quat``,                                    base orientation (the desired attitude is level,
``rp_err``                                        as in the headless loop)
``contact_gt``        ``/ground_truth/contacts``  no stamp: the i-th message is published with the i-th
                                                  ``/ground_truth/odom`` (same bridge step), paired by index
``disturbance``       ``/disturbance``            as above; the message stamped ``t_{k+1}`` holds the
                                                  torque applied during tick ``k`` (shifted back one tick)
====================  ==========================  =====================================================

The ticks are those the simulation stepped through: ``t_k`` < the end of the simulated time (the
last ``/ground_truth/odom`` stamp, else the last ``/bridge/diagnostics`` ``sim_time``). The
controller also answers the end-of-run sample, whose command is never applied; the headless loop
does not compute that tick, so it is dropped. Rows are the ticks the controller answered (the first
of ``/wbc/relative_pitch``, ``/joint_torque_cmd``, ``/wbc/diagnostics``, ``/estimator/support``,
``/ground_truth/odom`` found in the bag); a topic missing at some of them is reported (``gaps``).

Falls are detected as in the headless loop from the ground truth (base height below
``fall.min_height`` after the stand-up, tilt above ``fall.max_tilt_deg``); the bag has no
base-floor contact, so that criterion of the headless loop is not available. As in the headless
loop (which stops at a fall), the metrics of a run that fell cover the series up to the fall.
Deadline misses, stale / rejected commands and watchdog events come from the last
``/bridge/diagnostics`` sample (cumulative counters).

The evaluation window is the scenario's (``custom_data`` ``scenario=NAME|PATH`` of the bag,
loaded with :func:`legged_wbc.scenario.load_scenario`) unless given; the relative-pitch bounds
are those of ``config/wbc_controller.yaml`` with the scenario's controller overrides (live
parameter changes during the run are not in the bag and not taken into account).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from legged_wbc.metrics import CONTROL_DT, CONTROL_PERIOD_NS, compute_metrics, roll_pitch_from_quat_xyzw
from legged_wbc.terrain_metrics import terrain_metrics

T_PITCH = "/wbc/relative_pitch"
T_WBC_DIAG = "/wbc/diagnostics"
T_CMD = "/joint_torque_cmd"
T_SUPPORT = "/estimator/support"
T_EST_ODOM = "/estimator/odom"
T_GT_ODOM = "/ground_truth/odom"
T_GT_CONTACTS = "/ground_truth/contacts"
T_DIST = "/disturbance"
T_BRIDGE_DIAG = "/bridge/diagnostics"
T_JOINT_STATES = "/joint_states"
T_CMD_LATENCY = "/bridge/command_latency"
TOPICS = (T_PITCH, T_WBC_DIAG, T_CMD, T_SUPPORT, T_EST_ODOM, T_GT_ODOM, T_GT_CONTACTS, T_DIST, T_BRIDGE_DIAG,
          T_CMD_LATENCY)

# which topic each metric needs (for the "could not be computed" list)
METRIC_TOPICS = {
    "max_violation_rad": (T_PITCH, T_SUPPORT),
    "violation_rate_pct": (T_PITCH, T_SUPPORT),
    "first_violation_time_s": (T_PITCH, T_SUPPORT),
    "rp_rmse_deg": (T_GT_ODOM,),
    "torque_rms_nm": (T_CMD,),
    "torque_max_nm": (T_CMD,),
    "qp_p99_us": (T_WBC_DIAG,),
    "qp_over_2ms_pct": (T_WBC_DIAG,),
    "qp_failures": (T_WBC_DIAG,),
    "distance_m": (T_GT_ODOM,),
    "fell": (T_GT_ODOM,),
    "deadline_misses": (T_BRIDGE_DIAG,),
}
METRIC_SOURCE_TOPICS = (T_PITCH, T_SUPPORT, T_CMD, T_WBC_DIAG, T_GT_ODOM)
SERIES_FOR_METRIC = {
    "max_violation_rad": ("theta", "support"), "violation_rate_pct": ("theta", "support"),
    "first_violation_time_s": ("theta", "support"), "rp_rmse_deg": ("rp_err",), "torque_rms_nm": ("tau",),
    "torque_max_nm": ("tau",), "qp_p99_us": ("qp_time_us",), "qp_over_2ms_pct": ("qp_time_us",),
    "qp_failures": ("qp_accepted",), "distance_m": ("base_pos",),
}


class RunInputError(ValueError):
    """An input that is neither a rosbag2 directory nor a headless run directory, or unreadable."""


@dataclass
class RunData:
    """One run, from a bag or a headless run directory."""

    path: Path
    kind: str                      # "bag" | "headless"
    label: str                     # e.g. "cbf (bag)"
    controller: str | None         # none | damping | cbf
    scenario_name: str | None      # as recorded (name or YAML path)
    scenario: object | None        # legged_wbc.scenario.Scenario, if it could be loaded
    mode: str | None               # lockstep | realtime | headless
    series: dict
    theta_min: float = -0.3
    theta_max: float = 0.3
    fell: bool | None = False
    fall_reason: str | None = None
    fall_index: int | None = None  # series row of the fall (metrics stop there)
    sim_time_s: float | None = None
    wall_time_s: float | None = None
    bridge: dict = field(default_factory=dict)          # last /bridge/diagnostics sample
    custom_data: dict = field(default_factory=dict)
    missing_topics: list = field(default_factory=list)
    gaps: dict = field(default_factory=dict)            # topic -> ticks without a sample
    notes: list = field(default_factory=list)
    leg_names: list = field(default_factory=list)
    joint_names: list = field(default_factory=list)
    joint_effort: np.ndarray | None = None              # effort limit [N m] per joint_names entry
    headless_metrics: dict | None = None                # metrics.json of a headless run
    leg_joints: dict = field(default_factory=dict)      # leg name -> column indices of its joints in tau
    complete: np.ndarray | None = None                  # rows with every metric topic (None: all)
    command_latency_us: np.ndarray | None = None        # per closed tick (NaN: missed); bags of bridges that publish it

    def joints_of_leg(self, leg: int | str) -> list[int]:
        name = self.leg_names[leg] if isinstance(leg, int) and leg < len(self.leg_names) else leg
        return list(self.leg_joints.get(name, []))

    @property
    def disturbed_leg(self) -> int | None:
        sc = self.scenario
        if sc is None or not sc.disturbance.enabled or sc.disturbance.leg not in self.leg_names:
            return None
        return self.leg_names.index(sc.disturbance.leg)


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
def _stamp_ns(header) -> int:
    return int(header.stamp.sec) * 1_000_000_000 + int(header.stamp.nanosec)


def _label_fields(msg) -> list[str]:
    label = msg.layout.dim[0].label if msg.layout.dim else ""
    if "[" not in label or "]" not in label:
        return []
    return label[label.index("[") + 1: label.rindex("]")].split(",")


def _data(msg) -> np.ndarray:
    return np.asarray(msg.data, dtype=float)[int(msg.layout.data_offset):]


def _reorder(names: list[str], ref: list[str]) -> np.ndarray | None:
    if list(names) == list(ref):
        return None
    pos = {n: i for i, n in enumerate(names)}
    return np.array([pos[n] for n in ref])


def read_bag_messages(path: Path, topics=TOPICS) -> tuple[dict, dict]:
    """``({topic: [(log_ns, msg), ...]}, {topic: msgtype})`` for the topics present."""
    try:
        from rosbags.highlevel import AnyReader
        from rosbags.typesys import Stores, get_typestore
    except ImportError as exc:  # pragma: no cover - rosbags is a requirement
        raise RunInputError(f"reading bags needs the rosbags package ({exc})") from exc
    out: dict = {}
    types: dict = {}
    try:
        with AnyReader([path], default_typestore=get_typestore(Stores.ROS2_KILTED)) as reader:
            conns = [c for c in reader.connections if c.topic in topics]
            for c in reader.connections:
                types[c.topic] = c.msgtype
            for c in conns:
                out.setdefault(c.topic, [])
            if conns:
                for conn, t, raw in reader.messages(connections=conns):
                    out[conn.topic].append((t, reader.deserialize(raw, conn.msgtype)))
            out["__end_ns__"] = int(reader.end_time) - 1 if reader.message_count else None  # last log stamp
            # /joint_states: only the first message (joint names), the 1 kHz stream is not needed
            js = [c for c in reader.connections if c.topic == T_JOINT_STATES]
            if js:
                for conn, t, raw in reader.messages(connections=js):
                    out[T_JOINT_STATES] = [(t, reader.deserialize(raw, conn.msgtype))]
                    break
    except RunInputError:
        raise
    except Exception as exc:  # rosbags raises its own errors for unreadable/unsupported storage
        raise RunInputError(f"{path}: cannot read the bag ({type(exc).__name__}: {exc})") from exc
    return out, types


def load_bag(path: Path, label: str | None = None) -> RunData:
    import yaml

    try:
        meta = yaml.safe_load((path / "metadata.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise RunInputError(f"{path}: unreadable metadata.yaml ({exc})") from exc
    if "rosbag2_bagfile_information" not in meta:
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
    _series_from_messages(run, msgs)
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
        effort = {}
        for leg in cfg.legs:
            names = leg.joint_names(cfg.leg_type)
            effort.update(zip(names, cfg.leg_type.effort))
            if all(n in pos for n in names):
                run.leg_joints[leg.name] = [pos[n] for n in names]
        if run.joint_names and all(n in effort for n in run.joint_names):
            run.joint_effort = np.array([effort[n] for n in run.joint_names])
    except Exception as exc:  # noqa: BLE001 - names are for figures only
        run.notes.append(f"robot {robot!r}: joint/leg names unavailable ({exc})")
        for leg in run.leg_names:
            run.leg_joints[leg] = [i for i, n in enumerate(run.joint_names) if n.startswith(leg + "_")]


def _series_from_messages(run: RunData, msgs: dict) -> None:
    S: dict = {}
    # ---------------------------------------------------------------- names
    if msgs.get(T_PITCH):
        run.leg_names = list(msgs[T_PITCH][0][1].name)
    elif msgs.get(T_SUPPORT):
        run.leg_names = list(msgs[T_SUPPORT][0][1].name)
    elif msgs.get(T_GT_CONTACTS):
        run.leg_names = _label_fields(msgs[T_GT_CONTACTS][0][1])
    if msgs.get(T_JOINT_STATES):
        run.joint_names = list(msgs[T_JOINT_STATES][0][1].name)

    # ---------------------------------------------------------------- per-topic {tick: row}
    def by_stamp(topic, fn) -> dict:
        rows = {}
        for _, m in msgs.get(topic, []):
            ns = _stamp_ns(m.header)
            k, rem = divmod(ns, CONTROL_PERIOD_NS)
            if rem == 0:
                row = fn(m)
                if row is not None:    # None: a malformed message, skipped
                    rows[k] = row      # a re-sent tick (start-up) overwrites with identical content
        return rows

    legs = run.leg_names

    def legs_row(fields):
        def fn(m):
            idx = _reorder(list(m.name), legs)
            vals = [np.asarray(getattr(m, f), dtype=float) for f in fields]
            return [v if idx is None else v[idx] for v in vals]
        return fn

    pitch = by_stamp(T_PITCH, legs_row(("position", "velocity", "effort")))
    support = by_stamp(T_SUPPORT, legs_row(("position", "velocity")))
    est = by_stamp(T_EST_ODOM, lambda m: np.array([m.pose.pose.position.x, m.pose.pose.position.y,
                                                    m.pose.pose.position.z]))

    def gt_row(m):
        p, o = m.pose.pose.position, m.pose.pose.orientation
        return np.array([p.x, p.y, p.z, o.x, o.y, o.z, o.w])

    gt_list = [(_stamp_ns(m.header), gt_row(m)) for _, m in msgs.get(T_GT_ODOM, [])]
    gt = {ns // CONTROL_PERIOD_NS: row for ns, row in gt_list if ns % CONTROL_PERIOD_NS == 0}

    cmd_names: list[str] = []      # the joint order of the first well-formed command

    def cmd_row(m):                 # JointState: the joints by name
        names, eff = list(m.name), np.asarray(m.effort, dtype=float)
        if not names or eff.size != len(names):
            return None
        if not cmd_names:
            cmd_names.extend(names)
        elif sorted(names) != sorted(cmd_names):
            return None
        idx = _reorder(names, cmd_names)
        return eff if idx is None else eff[idx]

    cmd = by_stamp(T_CMD, cmd_row)
    wdiag = {}
    wfields: list[str] = []
    for _, m in msgs.get(T_WBC_DIAG, []):
        f = _label_fields(m)
        if "tick" not in f:
            continue
        wfields = f
        d = dict(zip(f, _data(m).tolist()))
        wdiag[int(d["tick"])] = d
    bdiag = []
    for _, m in msgs.get(T_BRIDGE_DIAG, []):
        bdiag.append(dict(zip(_label_fields(m), _data(m).tolist())))
    if bdiag:
        run.bridge = bdiag[-1]
    lat = [_data(m) for _, m in msgs.get(T_CMD_LATENCY, [])]
    if lat:
        pairs = np.concatenate(lat)
        run.command_latency_us = pairs[1::2].copy()

    # index-paired (no stamp): contacts and disturbance with /ground_truth/odom
    def paired(topic) -> dict:
        lst = msgs.get(topic, [])
        if not lst:
            return {}
        if len(lst) != len(gt_list):
            run.notes.append(f"{topic}: {len(lst)} messages vs {len(gt_list)} on {T_GT_ODOM}; aligned by receive "
                             "time instead of by index (approximate)")
            return {int(round(t / CONTROL_PERIOD_NS)): _data(m) for t, m in lst}
        return {ns // CONTROL_PERIOD_NS: _data(m) for (ns, _), (_, m) in zip(gt_list, lst)
                if ns % CONTROL_PERIOD_NS == 0}

    contacts = paired(T_GT_CONTACTS)
    dist_at = paired(T_DIST)

    # ---------------------------------------------------------------- tick grid
    sim_end_ns = None
    if gt_list:
        sim_end_ns = max(ns for ns, _ in gt_list)
    elif bdiag and "sim_time" in bdiag[-1]:
        sim_end_ns = int(round(max(b.get("sim_time", 0.0) for b in bdiag) * 1e9))
    elif msgs.get("__end_ns__") is not None:
        # log stamps are sim time (the recorder runs on /clock): the last one is the end of the run
        sim_end_ns = int(msgs["__end_ns__"])
        run.notes.append(f"end of the simulation taken from the bag's last receive stamp ({sim_end_ns * 1e-9:g} s; "
                         f"no {T_GT_ODOM} or {T_BRIDGE_DIAG})")
    # every tick some controller / estimator / ground-truth topic has (the recorder may have missed
    # the first ticks of a topic it subscribed to only on discovery: those are gaps, not a later start)
    present = set()
    for rows in (cmd, pitch, wdiag, support, gt):
        present.update(rows)
    ticks = np.array(sorted(present), dtype=int)
    if sim_end_ns is not None and ticks.size:
        kept = ticks[ticks * CONTROL_PERIOD_NS < sim_end_ns]
        if kept.size < ticks.size and kept.size:
            ticks = kept
    run.sim_time_s = sim_end_ns * 1e-9 if sim_end_ns is not None else (
        float((ticks[-1] + 1) * CONTROL_DT) if ticks.size else 0.0)
    T = ticks.size
    S["t"] = ticks * CONTROL_PERIOD_NS * 1e-9
    S["tick"] = ticks
    N = len(legs)

    def fill(rows: dict, topic: str, width: int, pick, dtype=float, default=np.nan):
        if not rows:
            return None
        a = np.full((T, width) if width else T, default, dtype=dtype)
        for i, k in enumerate(ticks):
            r = rows.get(int(k))
            if r is not None:
                a[i] = pick(r)
        return a

    if pitch:
        S["theta"] = fill(pitch, T_PITCH, N, lambda r: r[0])
        S["theta_dot"] = fill(pitch, T_PITCH, N, lambda r: r[1])
        S["cbf_active"] = fill(pitch, T_PITCH, N, lambda r: r[2] > 0.5, bool, False)
    if support:
        S["support"] = fill(support, T_SUPPORT, N, lambda r: r[0] > 0.5, bool, False)
        S["touchdown"] = fill(support, T_SUPPORT, N, lambda r: r[1] > 0.5, bool, False)
    if cmd:
        n = len(next(iter(cmd.values())))
        S["tau"] = fill(cmd, T_CMD, n, lambda r: r)
    if wdiag:
        for key, dst, dtype, default in (("qp_accepted", "qp_accepted", bool, True),
                                         ("qp_time_us", "qp_time_us", float, np.nan),
                                         ("cycle_time_us", "cycle_time_us", float, np.nan),
                                         ("safe_stop", "safe_stop", bool, False)):
            if key in wfields:
                S[dst] = fill(wdiag, T_WBC_DIAG, 0, lambda r, key=key: r[key], dtype, default)
    if gt:
        g = fill(gt, T_GT_ODOM, 7, lambda r: r)
        S["base_pos"] = g[:, :3]
        S["base_quat"] = g[:, 3:7]
        S["rp_err"] = roll_pitch_from_quat_xyzw(S["base_quat"])
    if est:
        S["est_pos"] = fill(est, T_EST_ODOM, 3, lambda r: r)
    if contacts:
        S["contact_gt"] = fill(contacts, T_GT_CONTACTS, N, lambda r: r > 0.5, bool, False)
    if dist_at:
        # the message stamped t_{k+1} holds the torque applied during tick k
        shifted = {k - 1: v for k, v in dist_at.items() if k >= 1}
        S["disturbance"] = fill(shifted, T_DIST, len(next(iter(dist_at.values()))), lambda r: r, float, 0.0)
    complete = np.ones(T, dtype=bool)
    for topic, rows in ((T_PITCH, pitch), (T_SUPPORT, support), (T_CMD, cmd), (T_WBC_DIAG, wdiag),
                        (T_GT_ODOM, gt), (T_EST_ODOM, est), (T_GT_CONTACTS, contacts)):
        if rows:
            has = np.fromiter((int(k) in rows for k in ticks), dtype=bool, count=T)
            if not has.all():
                run.gaps[topic] = int(np.count_nonzero(~has))
                if topic in METRIC_SOURCE_TOPICS:
                    complete &= has
    run.complete = complete
    run.wall_time_s = _wall_from_bridge(bdiag)
    run.series = {k: v for k, v in S.items() if v is not None}
    _detect_fall(run)


def _detect_fall(run: RunData) -> None:
    """Fall from the ground truth, with the headless loop's height and tilt criteria."""
    S, sc = run.series, run.scenario
    if "base_pos" not in S or "base_quat" not in S:
        run.fell = None
        return
    if sc is None:
        run.fell = False
        return
    t = S["t"]
    p = S["base_pos"]
    z = p[:, 2] - sc.terrain.height(p[:, 0], p[:, 1])     # above the terrain under the base
    qx, qy = S["base_quat"][:, 0], S["base_quat"][:, 1]
    tilt = np.degrees(np.arccos(np.clip(1 - 2 * (qx ** 2 + qy ** 2), -1.0, 1.0)))
    low = (z < sc.fall_min_height) & (t > sc.stand_up_start + sc.stand_up_duration)
    tilted = tilt > sc.fall_max_tilt_deg
    bad = np.flatnonzero(low | tilted)
    if bad.size:
        i = int(bad[0])
        run.fell, run.fall_index = True, i
        run.fall_reason = (f"base height {z[i]:.3f} m < {sc.fall_min_height} m at t={t[i]:.3f} s" if low[i] else
                           f"base tilt {tilt[i]:.1f} deg > {sc.fall_max_tilt_deg} deg at t={t[i]:.3f} s")
    else:
        run.fell = False


# ------------------------------------------------------------------------------------ metrics
def eval_window(run: RunData, window: tuple[float, float] | None = None) -> tuple[float, float] | None:
    if window is not None:
        return float(window[0]), float(window[1])
    if run.scenario is not None:
        return run.scenario.eval_window
    return None


def run_metrics(run: RunData, window: tuple[float, float] | None = None) -> dict:
    """The metrics of ``legged-wbc run``'s metrics.json (same keys, same function), plus the bridge's
    counters and ``unavailable`` (metric -> reason) for what the input lacks."""
    win = eval_window(run, window)
    S = run.series
    T = len(S.get("t", []))

    def rows(mask_or_slice):
        return {k: (v[mask_or_slice] if isinstance(v, np.ndarray) and v.shape[:1] == (T,) else v)
                for k, v in S.items()}

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
        S = rows(keep)
    if win is None:
        win = (0.0, float(S["t"][-1]) if len(S.get("t", [])) else 0.0)
        run.notes.append("no scenario: evaluation window = the whole run (pass --window T0 T1)")
    m = compute_metrics(S, win[0], win[1], run.theta_min, run.theta_max, fell=bool(run.fell))
    if run.fell is None:
        m["fell"] = None
    m.update(terrain_metrics(S, win[0], win[1]))   # None where the run lacks the series (a bag: the feet's truth)
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
        for k in ("deadline_misses", "stale_commands", "rejected_commands", "watchdog_events", "commands_applied"):
            m[k] = int(b[k]) if k in b else None
        m.update(realtime_quality(run))
        m.update(bag_size(run.path, run.sim_time_s))
    else:
        for k in ("deadline_misses", "stale_commands", "rejected_commands", "watchdog_events"):
            m[k] = None  # no transport, no deadlines in the headless loop (not applicable)
        m.update(realtime_quality(run))
    unavailable = {}
    missing_series = set(m.get("missing", []))
    for metric, keys in SERIES_FOR_METRIC.items():
        if any(k in missing_series for k in keys):
            why = [t for t in METRIC_TOPICS.get(metric, ()) if t in run.missing_topics] if run.kind == "bag" else []
            unavailable[metric] = ("no " + ", ".join(why)) if why else "series " + ", ".join(
                k for k in keys if k in missing_series) + " missing"
    if sat_why:
        unavailable["torque_saturation_pct"] = sat_why
    if run.fell is None:
        unavailable["fell"] = f"no {T_GT_ODOM}"
    if run.kind == "bag" and T_BRIDGE_DIAG in run.missing_topics:
        unavailable["deadline_misses"] = f"no {T_BRIDGE_DIAG}"
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
    if unavailable:
        m["unavailable"] = unavailable
    if run.gaps:
        m["gaps"] = dict(run.gaps)
    if run.notes:
        m["notes"] = list(run.notes)
    return m


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
    ``command_latency_p50_us`` / ``_p99_us`` / ``_max_us`` over the answered ticks, ``ticks_timed``.
    None where the bag has no latency topic (bridges before it existed)."""
    lat = run.command_latency_us
    keys = ("deadline_miss_pct", "command_latency_p50_us", "command_latency_p99_us", "command_latency_max_us")
    if lat is None or lat.size == 0:
        return {**{k: None for k in keys}, "ticks_timed": 0}
    ok = lat[np.isfinite(lat)]
    return {"deadline_miss_pct": 100.0 * float(np.count_nonzero(~np.isfinite(lat))) / lat.size,
            "command_latency_p50_us": float(np.percentile(ok, 50)) if ok.size else None,
            "command_latency_p99_us": float(np.percentile(ok, 99)) if ok.size else None,
            "command_latency_max_us": float(ok.max()) if ok.size else None,
            "ticks_timed": int(lat.size)}


def bag_size(path: Path, sim_time_s: float | None) -> dict:
    """``bag_mb`` (the storage files, MB = 1e6 bytes), ``bag_mb_per_sim_s`` (per simulated second) and
    ``bag_compression`` (MCAP chunk compression: ``zstd`` or ``none``; None for sqlite3)."""
    from legged_wbc.ros.bag_writer import bag_size_bytes

    p = Path(path)
    if not p.is_dir():
        return {"bag_mb": None, "bag_mb_per_sim_s": None, "bag_compression": None}
    mb = bag_size_bytes(p) / 1e6
    kinds: set = set()
    for f in sorted(p.glob("*.mcap")):
        kinds |= mcap_chunk_compressions(f)
    compression = "+".join(sorted(k or "none" for k in kinds)) or None
    return {"bag_mb": mb, "bag_mb_per_sim_s": mb / sim_time_s if sim_time_s else None, "bag_compression": compression}


def mcap_chunk_compressions(path: Path) -> set[str]:
    """The compression names of an MCAP file's chunks ("" = uncompressed), from the records' headers
    (opcode, length; a Chunk's compression string follows its 28 bytes of times, size and CRC); the
    records are skipped, not read. Empty for an unreadable file."""
    out: set[str] = set()
    try:
        with open(path, "rb") as fh:
            if fh.read(8) != b"\x89MCAP0\r\n":
                return out
            while True:
                head = fh.read(9)
                if len(head) < 9 or head[0] in (0x0F, 0x02):   # DataEnd, Footer: the summary follows
                    return out
                op, length = head[0], int.from_bytes(head[1:], "little")
                start = fh.tell()
                if op == 0x06:
                    fixed = fh.read(32)
                    n = int.from_bytes(fixed[28:32], "little")
                    out.add(fh.read(n).decode("utf-8", "replace"))
                fh.seek(start + length)
    except OSError:
        return out


def _wall_from_bridge(bdiag: list[dict]) -> float | None:
    """Wall time of the simulation estimated from the bridge diagnostics: each sample's
    ``realtime_factor`` is sim seconds per wall second since the previous sample (the bag's own
    stamps are sim time)."""
    wall, prev = 0.0, None
    for b in bdiag:
        st, rtf = b.get("sim_time"), b.get("realtime_factor")
        if st is None or rtf is None:
            return None
        if prev is not None and st > prev:
            if rtf <= 0:
                if st - prev > 1e-9 and b is not bdiag[-1]:
                    return None
            else:
                wall += (st - prev) / rtf
        prev = st
    return wall if wall > 0 else None
