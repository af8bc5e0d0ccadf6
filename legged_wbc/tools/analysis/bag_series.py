"""A rosbag2 bag -> per-tick series: the messages read with ``rosbags`` (:func:`read_bag_messages`)
and turned into the series of :mod:`legged_wbc.metrics` (:func:`series_from_messages`).

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
``est_pos``,          ``/estimator/odom``         header stamp; the twist (base frame, REP 105) turned
``est_vel_world``                                 into the world by the estimated orientation
``base_pos``,         ``/ground_truth/odom``      header stamp; ``rp_err`` = roll/pitch of the true
``base_quat``,                                    base orientation (the desired attitude is level,
``rp_err``,                                       as in the headless loop); ``base_vel_world``: the
``base_vel_world``                                twist (base frame) turned by the true orientation
``cmd_target``,       the scenario's ``commands``  every tick from 0 through the controller's command
``cmd_filtered``,     or ``/cmd_vel``              filter and gait clock (:func:`command_series`)
``gait_tau``,
``gait_paused``,
``cmd_ref``
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
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from legged_wbc.metrics import CONTROL_DT, CONTROL_PERIOD_NS, roll_pitch_from_quat_xyzw
from legged_wbc.tools.analysis.run_data import (
    METRIC_SOURCE_TOPICS, OPTIONAL_TOPICS, T_BRIDGE_DIAG, T_CMD, T_CMD_LATENCY, T_CMD_VEL, T_DIST, T_EST_ODOM,
    T_GAIT_CLOCK, T_GT_CONTACTS, T_GT_ODOM, T_JOINT_STATES, T_PITCH, T_SUPPORT, T_WBC_DIAG, TOPICS, RunData, RunInputError,
)


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


def read_bag_messages(path: Path, topics=TOPICS + OPTIONAL_TOPICS) -> tuple[dict, dict]:
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


def series_from_messages(run: RunData, msgs: dict) -> None:
    """Fill ``run``'s names, per-tick series, bridge counters, command latencies, gaps and fall from a
    bag's messages ``{topic: [(log_ns, msg), ...]}`` (see the module docstring)."""
    _names_from_messages(run, msgs)
    legs = run.leg_names
    pitch = _by_stamp(msgs, T_PITCH, _legs_row(legs, ("position", "velocity", "effort")))
    support = _by_stamp(msgs, T_SUPPORT, _legs_row(legs, ("position", "velocity")))
    est = _by_stamp(msgs, T_EST_ODOM, _odom_row)
    gt_list = [(_stamp_ns(m.header), _odom_row(m)) for _, m in msgs.get(T_GT_ODOM, [])]
    gt = {ns // CONTROL_PERIOD_NS: row for ns, row in gt_list if ns % CONTROL_PERIOD_NS == 0}
    cmd = _by_stamp(msgs, T_CMD, _command_row_reader())
    wdiag, wfields = _wbc_diagnostics(msgs)
    bdiag = _bridge_diagnostics(run, msgs)
    # index-paired (no stamp): contacts and disturbance with /ground_truth/odom
    contacts = _paired(run, msgs, T_GT_CONTACTS, gt_list)
    dist_at = _paired(run, msgs, T_DIST, gt_list)
    ticks = _tick_grid(run, msgs, gt_list, bdiag, (cmd, pitch, wdiag, support, gt))
    S: dict = {"t": ticks * CONTROL_PERIOD_NS * 1e-9, "tick": ticks}
    N = len(legs)
    if pitch:
        S["theta"] = _fill(pitch, ticks, N, lambda r: r[0])
        S["theta_dot"] = _fill(pitch, ticks, N, lambda r: r[1])
        S["cbf_active"] = _fill(pitch, ticks, N, lambda r: r[2] > 0.5, bool, False)
    if support:
        S["support"] = _fill(support, ticks, N, lambda r: r[0] > 0.5, bool, False)
        S["touchdown"] = _fill(support, ticks, N, lambda r: r[1] > 0.5, bool, False)
    if cmd:
        S["tau"] = _fill(cmd, ticks, len(next(iter(cmd.values()))), lambda r: r)
    if wdiag:
        for key, dtype, default in (("qp_accepted", bool, True), ("qp_time_us", float, np.nan),
                                    ("cycle_time_us", float, np.nan), ("safe_stop", bool, False)):
            if key in wfields:
                S[key] = _fill(wdiag, ticks, 0, lambda r, key=key: r[key], dtype, default)
    if gt:
        g = _fill(gt, ticks, 10, lambda r: r)
        S["base_pos"], S["base_quat"], S["base_vel_world"] = g[:, :3], g[:, 3:7], g[:, 7:10]
        S["rp_err"] = roll_pitch_from_quat_xyzw(S["base_quat"])
    if est:
        e = _fill(est, ticks, 10, lambda r: r)
        S["est_pos"], S["est_vel_world"] = e[:, :3], e[:, 7:10]
    if contacts:
        S["contact_gt"] = _fill(contacts, ticks, N, lambda r: r > 0.5, bool, False)
    if dist_at:
        # the message stamped t_{k+1} holds the torque applied during tick k
        shifted = {k - 1: v for k, v in dist_at.items() if k >= 1}
        S["disturbance"] = _fill(shifted, ticks, len(next(iter(dist_at.values()))), lambda r: r, float, 0.0)
    run.complete = _gaps(run, ticks, ((T_PITCH, pitch), (T_SUPPORT, support), (T_CMD, cmd), (T_WBC_DIAG, wdiag),
                                      (T_GT_ODOM, gt), (T_EST_ODOM, est), (T_GT_CONTACTS, contacts)))
    run.wall_time_s = _wall_from_bridge(bdiag)
    S.update(command_series(run, msgs, ticks))
    run.series = {k: v for k, v in S.items() if v is not None}
    _detect_fall(run)


def _names_from_messages(run: RunData, msgs: dict) -> None:
    """Leg names from the first relative-pitch, support or contacts message; joint names from
    ``/joint_states``."""
    if msgs.get(T_PITCH):
        run.leg_names = list(msgs[T_PITCH][0][1].name)
    elif msgs.get(T_SUPPORT):      # the legs, then the support plane's normal (support_plane_normal_x, ...)
        run.leg_names = [n for n in msgs[T_SUPPORT][0][1].name if not n.startswith("support_plane")]
    elif msgs.get(T_GT_CONTACTS):
        run.leg_names = _label_fields(msgs[T_GT_CONTACTS][0][1])
    if msgs.get(T_JOINT_STATES):
        run.joint_names = list(msgs[T_JOINT_STATES][0][1].name)


def _by_stamp(msgs: dict, topic: str, fn) -> dict:
    """``{tick: fn(msg)}`` of a topic's messages stamped on a control tick."""
    rows = {}
    for _, m in msgs.get(topic, []):
        ns = _stamp_ns(m.header)
        k, rem = divmod(ns, CONTROL_PERIOD_NS)
        if rem == 0:
            row = fn(m)
            if row is not None:    # None: a malformed message, skipped
                rows[k] = row      # a re-sent tick (start-up) overwrites with identical content
    return rows


def _legs_row(legs: list[str], fields):
    """A row reader of a JointState-shaped per-leg message: ``fields`` in ``legs`` order (by name)."""
    def fn(m):
        idx = _reorder(list(m.name), legs)
        vals = [np.asarray(getattr(m, f), dtype=float) for f in fields]
        return [v if idx is None else v[idx] for v in vals]
    return fn


def _odom_row(m) -> np.ndarray:
    """``[p_world(3), quat_xyzw(4), v_world(3)]`` of an Odometry (its twist is in the base frame, ROS's
    and Pinocchio's convention: turned into the world by the pose's orientation)."""
    p, o, v = m.pose.pose.position, m.pose.pose.orientation, m.twist.twist.linear
    x, y, z, w = o.x, o.y, o.z, o.w
    R = np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                  [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                  [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])
    return np.concatenate([[p.x, p.y, p.z, x, y, z, w], R @ np.array([v.x, v.y, v.z])])


# ------------------------------------------------------------------------------------ commands
def command_series(run: RunData, msgs: dict, ticks: np.ndarray) -> dict:
    """The command series of the headless log (``cmd_target``, ``cmd_filtered`` (T, 3) ``(vx, vy, wz)``
    [m/s, m/s, rad/s] heading frame, ``gait_tau`` [s], ``gait_paused``, ``cmd_ref`` (T, 3) the body
    reference's ``(x, y, yaw)`` [m, m, rad] world) at ``ticks``, or ``{}`` without a command. A bag
    holds the command only as its input: the controller's :class:`Commander` (its limits from the
    scenario's controller settings) is run again over every tick from 0, fed by the scenario's
    ``commands`` (exactly what the controller computed, in lockstep) or, for a scenario without
    them, by the bag's ``/cmd_vel`` (each message applied at the first tick at or after its receive
    stamp, as the controller takes the newest message at its next tick; the schedule rules until the
    first message, as in the controller). A recorded ``/wbc/gait_clock`` (live commands) gives the gait
    clock. The body reference starts at the origin, yaw 0 (the stance configuration every run starts
    in); under a scenario without ``commands`` the forward walk drives before the first ``/cmd_vel``
    (the command series read zero there, and the reference the controller carries over from the walk is
    not re-computed: ``cmd_ref`` is approximate then)."""
    from wbc_controller.blocks.command import CMD_PX, CMD_PY, CMD_SIZE, CMD_YAW, CommandReference

    sc = run.scenario
    live = sorted(((int(t), _twist(m)) for t, m in msgs.get(T_CMD_VEL, [])), key=lambda x: x[0])
    if sc is None or ticks.size == 0 or not (sc.raw.get("commands") or live):
        return {}
    cm = _commander(sc, run.controller, live=not sc.raw.get("commands"))
    run.command_source = " then ".join(
        (["scenario commands"] if cm.schedule is not None else []) + ([T_CMD_VEL] if live else []))
    K = int(ticks[-1]) + 1
    out = {"cmd_target": np.zeros((K, 3)), "cmd_filtered": np.zeros((K, 3)), "gait_tau": np.zeros(K),
           "gait_paused": np.zeros(K, bool), "cmd_ref": np.zeros((K, 3))}
    ref, arr, j = CommandReference(), np.zeros(CMD_SIZE), 0
    ref.reset((0.0, 0.0), 0.0)
    for k in range(K):
        t = (k * CONTROL_PERIOD_NS) * 1e-9
        if j < len(live) and live[j][0] < k * CONTROL_PERIOD_NS:      # the newest message, at the next tick
            while j + 1 < len(live) and live[j + 1][0] < k * CONTROL_PERIOD_NS:
                j += 1
            cm.schedule = None                                        # the live command takes over
            cm.set(*live[j][1], t)
            j += 1
        cmd = cm.tick(t)
        ref.advance(t, cmd, arr)
        out["cmd_target"][k] = cm.filter.effective_target(t)
        out["cmd_filtered"][k] = (cmd.vx, cmd.vy, cmd.wz)
        out["gait_tau"][k], out["gait_paused"][k] = cmd.tau, cmd.paused
        out["cmd_ref"][k] = arr[[CMD_PX, CMD_PY, CMD_YAW]]
    _recorded_gait_clock(msgs, out)
    return {k: v[ticks] for k, v in out.items()}


def _recorded_gait_clock(msgs: dict, out: dict) -> None:
    """Under a live command the controller publishes its gait clock (``/wbc/gait_clock``, ``[t, tau,
    paused]`` each tick): where the bag has it, it replaces the re-computed ``gait_tau``, ``gait_paused``."""
    K = len(out["gait_tau"])
    for _, m in msgs.get(T_GAIT_CLOCK, []):
        d = _data(m)
        if d.size == 3 and np.all(np.isfinite(d)):
            k = int(round(d[0] / CONTROL_DT))
            if 0 <= k < K:
                out["gait_tau"][k], out["gait_paused"][k] = d[1], d[2] > 0.5


def _commander(sc, controller: str | None, live: bool):
    """The controller's :class:`Commander` under scenario ``sc``: its command limits from the controller
    settings of the run (``controller``'s mode with the scenario's overrides), the scenario's gait;
    fed by the scenario's ``commands``, or by nothing (``live``: the caller sets the commands)."""
    from legged_wbc.gait import GaitConfig, GaitScheduler
    from legged_wbc.robot import load_robot_config
    from wbc_controller.blocks.command import Commander, CommandLimits, CommandSchedule
    from wbc_controller.config import load_wbc_config

    mode = controller if controller in ("none", "damping", "cbf") else "cbf"
    wcfg = load_wbc_config(overrides=sc.controller_overrides(mode), robot=sc.robot)
    rcfg = load_robot_config(sc.robot)
    gait = GaitScheduler(GaitConfig.from_dict(sc.gait_dict(rcfg.gait)), rcfg.leg_names)
    schedule = None if live else CommandSchedule(
        [(float(e["t"]), float(e["vx"]), float(e["vy"]), float(e["wz"])) for e in sc.raw["commands"]])
    return Commander(CommandLimits.from_config(wcfg), gait, schedule)


def _twist(m) -> tuple[float, float, float]:
    """``(vx, vy, wz)`` of a ``geometry_msgs`` Twist or TwistStamped."""
    tw = m.twist if hasattr(m, "header") else m
    return float(tw.linear.x), float(tw.linear.y), float(tw.angular.z)


def _command_row_reader():
    """A row reader of ``/joint_torque_cmd`` (a JointState: the joints by name), in the joint order of
    the first well-formed command; a command with other joints or one effort per name missing: None."""
    cmd_names: list[str] = []

    def cmd_row(m):
        names, eff = list(m.name), np.asarray(m.effort, dtype=float)
        if not names or eff.size != len(names):
            return None
        if not cmd_names:
            cmd_names.extend(names)
        elif sorted(names) != sorted(cmd_names):
            return None
        idx = _reorder(names, cmd_names)
        return eff if idx is None else eff[idx]
    return cmd_row


def _wbc_diagnostics(msgs: dict) -> tuple[dict, list[str]]:
    """``({tick: {field: value}}, fields)`` of ``/wbc/diagnostics`` (keyed by its ``tick`` field)."""
    wdiag = {}
    wfields: list[str] = []
    for _, m in msgs.get(T_WBC_DIAG, []):
        f = _label_fields(m)
        if "tick" not in f:
            continue
        wfields = f
        d = dict(zip(f, _data(m).tolist()))
        wdiag[int(d["tick"])] = d
    return wdiag, wfields


def _bridge_diagnostics(run: RunData, msgs: dict) -> list[dict]:
    """The ``/bridge/diagnostics`` samples as dicts (the last one -> ``run.bridge``); the command
    latencies of ``/bridge/command_latency`` -> ``run.command_latency_us``."""
    bdiag = []
    for _, m in msgs.get(T_BRIDGE_DIAG, []):
        bdiag.append(dict(zip(_label_fields(m), _data(m).tolist())))
    if bdiag:
        run.bridge = bdiag[-1]
    lat = [_data(m) for _, m in msgs.get(T_CMD_LATENCY, [])]
    if lat:
        pairs = np.concatenate(lat)
        run.command_latency_us = pairs[1::2].copy()
        run.command_latency_ticks = pairs[0::2].copy()
    return bdiag


def _paired(run: RunData, msgs: dict, topic: str, gt_list: list) -> dict:
    """``{tick: data}`` of a topic without stamp, its i-th message paired with the i-th ground-truth odometry."""
    lst = msgs.get(topic, [])
    if not lst:
        return {}
    if len(lst) != len(gt_list):
        run.notes.append(f"{topic}: {len(lst)} messages vs {len(gt_list)} on {T_GT_ODOM}; aligned by receive "
                         "time instead of by index (approximate)")
        return {int(round(t / CONTROL_PERIOD_NS)): _data(m) for t, m in lst}
    return {ns // CONTROL_PERIOD_NS: _data(m) for (ns, _), (_, m) in zip(gt_list, lst)
            if ns % CONTROL_PERIOD_NS == 0}


def _tick_grid(run: RunData, msgs: dict, gt_list: list, bdiag: list[dict], rowsets) -> np.ndarray:
    """The ticks of the series (any of ``rowsets`` has them, before the end of the simulated time);
    sets ``run.sim_time_s``."""
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
    for rows in rowsets:
        present.update(rows)
    ticks = np.array(sorted(present), dtype=int)
    if sim_end_ns is not None and ticks.size:
        kept = ticks[ticks * CONTROL_PERIOD_NS < sim_end_ns]
        if kept.size < ticks.size and kept.size:
            ticks = kept
    run.sim_time_s = sim_end_ns * 1e-9 if sim_end_ns is not None else (
        float((ticks[-1] + 1) * CONTROL_DT) if ticks.size else 0.0)
    return ticks


def _fill(rows: dict, ticks: np.ndarray, width: int, pick, dtype=float, default=np.nan):
    """One series: ``pick(row)`` at each tick that has a row, ``default`` elsewhere (None: no rows)."""
    if not rows:
        return None
    T = ticks.size
    a = np.full((T, width) if width else T, default, dtype=dtype)
    for i, k in enumerate(ticks):
        r = rows.get(int(k))
        if r is not None:
            a[i] = pick(r)
    return a


def _gaps(run: RunData, ticks: np.ndarray, topic_rows) -> np.ndarray:
    """Count each topic's missing ticks in ``run.gaps``; returns the rows every metric topic has."""
    T = ticks.size
    complete = np.ones(T, dtype=bool)
    for topic, rows in topic_rows:
        if rows:
            has = np.fromiter((int(k) in rows for k in ticks), dtype=bool, count=T)
            if not has.all():
                run.gaps[topic] = int(np.count_nonzero(~has))
                if topic in METRIC_SOURCE_TOPICS:
                    complete &= has
    return complete


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
