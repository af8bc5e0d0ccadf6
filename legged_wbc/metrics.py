"""Experiment metrics (docs/design.md, *Metrics*), computed from time series: the same functions serve the
headless runs (``legged-wbc run``) and the bags (``legged-wbc compare``).

Series (arrays over control ticks, 500 Hz):

* ``t`` (T,) [s]; ``theta`` (T, N) relative pitch [rad]; ``support`` (T, N) estimated support set;
* ``rp_err`` (T, 2) body roll / pitch error [rad]; ``tau`` (T, n) joint command torque [N m];
* ``qp_time_us`` (T,) QP time (build + solve + residual check) [us]; ``qp_accepted`` (T,) bool;
* ``base_pos`` (T, 3) ground-truth base position [m];
* optional ``tau_saturated`` (T, n) bool: the actuator clipped the applied torque of that joint at a
  physics step of that tick (``torque_saturation_pct``: their share of ticks x joints, in percent;
  None without the series);
* optional ``cbf_slack`` (T, N): the relative-pitch barrier's slack per leg [rad/s^2] (``cbf_slack``
  option; 0 where the hard barrier was solved): ``cbf_slack_max`` (largest ``|s|``) and
  ``cbf_slack_ticks`` (ticks with a slack != 0), None without the series;
* optional ``leg_distance`` (T,): the smallest capsule distance between neighbouring legs' links
  and from a foot to the body at the true joint positions [m] (``min_leg_distance_m``), and
  ``leg_contacts`` (T,): MuJoCo contacts between robot bodies at the tick (``leg_contacts``: the
  ticks with at least one); both over the window ``[t_start, t_end]`` (physics, whatever the QP
  did), None without the series.

Under a command schedule (:func:`command_metrics`, keys None without its series): ``cmd_target``
(T, 3) the command ``(vx, vy, wz)`` (heading frame) [m/s, m/s, rad/s], ``gait_paused`` (T,),
``base_vel_world`` / ``est_vel_world`` (T, 3) true and estimated base velocity [m/s], ``base_quat``.
"""

from __future__ import annotations

import math

import numpy as np

from legged_wbc.conventions import CONTROL_DT, CONTROL_PERIOD_NS  # noqa: F401  (the series' sample period)
from legged_wbc.terrain_metrics import foot_slips


def violation(theta: np.ndarray, theta_min: float, theta_max: float) -> np.ndarray:
    """Relative-pitch violation ``max(0, theta - theta_max, theta_min - theta)`` [rad]."""
    return np.maximum(0.0, np.maximum(theta - theta_max, theta_min - theta))


def first_violation_time(t: np.ndarray, theta: np.ndarray, support: np.ndarray, theta_min: float,
                         theta_max: float) -> float | None:
    v = violation(theta, theta_min, theta_max) * support
    idx = np.flatnonzero(np.any(v > 0, axis=1))
    return float(t[idx[0]]) if idx.size else None


def compute_metrics(series: dict, t_start: float, t_end: float, theta_min: float = -0.3, theta_max: float = 0.3,
                    fell: bool = False, pitch_legs=None) -> dict:
    """Table-3 metrics over ``[t_start, t_end]`` and the cycles whose QP was accepted.

    ``pitch_legs`` (bool per leg; None: every leg): the legs with the foot pitch joint, the only ones
    with a relative pitch (:attr:`legged_wbc.model.RobotModel.leg_has_pitch`). The relative-pitch
    metrics are over those legs; with some legs without it, ``relative_pitch_legs`` says how many have
    one, and with none the relative-pitch metrics are None (not a reassuring 0).

    ``window_s`` is the window actually evaluated: ``[t_start, min(t_end, end of the run)]``, None
    when the run ends before ``t_start`` (then ``samples`` is 0 and the metrics are None);
    ``window_requested_s`` is ``[t_start, t_end]``. ``disturbance_applied`` says whether the
    ``disturbance`` series (when given) is non-zero anywhere. Missing series give ``None`` for the
    metrics that need them (``missing`` lists them).

    ``whole_run`` (:data:`WHOLE_RUN_KEYS`, :func:`_whole_run`): the worst violation, falls, QP
    failures, saturation, slack and foot slip over every tick of the run, beside the window's figures
    (a violation at the stand-up or at the gait's start is outside the window; :func:`worst_of`)."""
    out: dict = {}
    missing = [k for k in ("t", "theta", "support", "rp_err", "tau", "qp_time_us", "qp_accepted", "base_pos")
               if k not in series or series[k] is None or len(series[k]) == 0]
    t = np.asarray(series["t"]) if "t" not in missing else np.zeros(0)
    win = (t >= t_start) & (t <= t_end)
    accepted = np.asarray(series["qp_accepted"], dtype=bool) if "qp_accepted" not in missing else np.ones(t.size, bool)
    ok = win & accepted
    slips = foot_slips(series, np.ones(t.size, bool))          # every leg's support stretches (whole run)
    if pitch_legs is not None and not np.all(pitch_legs):
        series = _pitch_legs_only(series, np.asarray(pitch_legs, dtype=bool))
        out["relative_pitch_legs"] = int(np.count_nonzero(pitch_legs))
        if not np.any(pitch_legs):
            missing = missing + ([] if "theta" in missing else ["theta"])
    out.update(_violation_metrics(series, missing, t, ok, theta_min, theta_max))
    if "rp_err" not in missing:
        e = np.asarray(series["rp_err"])[ok]
        out["rp_rmse_deg"] = float(np.degrees(math.sqrt(np.mean(np.sum(e**2, axis=1))))) if len(e) else None
    else:
        out["rp_rmse_deg"] = None
    out.update(_torque_metrics(series, missing, ok))
    out.update(_slack_metrics(series, ok))
    out.update(_leg_metrics(series, win))
    out.update(_qp_and_distance(series, missing, ok, win))
    out["fell"] = bool(fell)
    run_end = round(float(t[-1]) + CONTROL_DT, 9) if t.size else None
    if run_end is None or run_end <= t_start:
        out["window_s"] = None
    else:
        out["window_s"] = [float(t_start), float(min(t_end, run_end))]
    out["window_requested_s"] = [float(t_start), float(t_end)]
    out["samples"] = int(np.count_nonzero(ok))
    dist = series.get("disturbance")
    out["disturbance_applied"] = bool(np.any(np.asarray(dist) != 0)) if dist is not None and len(dist) else None
    out["whole_run"] = _whole_run(series, missing, t, accepted, theta_min, theta_max, fell, slips)
    if missing:
        out["missing"] = missing
    return out


# the whole run's figures (metrics.json ``whole_run``) beside the evaluation window's
WHOLE_RUN_KEYS = ("window_s", "max_violation_rad", "violation_rate_pct", "violation_ticks", "first_violation_time_s",
                  "fell", "qp_failures", "torque_saturation_pct", "cbf_slack_max", "foot_slip_max_m")


def _whole_run(series: dict, missing: list, t: np.ndarray, accepted: np.ndarray, theta_min: float,
               theta_max: float, fell: bool, slips: list) -> dict:
    """:data:`WHOLE_RUN_KEYS` over every tick of the run (stand-up and gait start included), over the
    cycles whose QP was accepted as in the window: the relative-pitch violation of the support legs
    (``violation_ticks``: ticks with one), falls, QP failures, the actuators' clipping, the barrier's
    slack and the largest foot slip (None without the series)."""
    out = dict.fromkeys(WHOLE_RUN_KEYS)
    if t.size:
        out["window_s"] = [float(t[0]), round(float(t[-1]) + CONTROL_DT, 9)]
    v = _violation_metrics(series, missing, t, accepted, theta_min, theta_max)
    out.update(max_violation_rad=v["max_violation_rad"], violation_rate_pct=v["violation_rate_pct"],
               first_violation_time_s=v["first_violation_time_s"])
    if "theta" not in missing and "support" not in missing and t.size:
        over = violation(np.asarray(series["theta"])[accepted], theta_min, theta_max) * \
            np.asarray(series["support"], dtype=bool)[accepted]
        out["violation_ticks"] = int(np.count_nonzero(np.any(over > 0, axis=1)))
    out["fell"] = bool(fell)
    out["qp_failures"] = int(np.count_nonzero(~accepted)) if "qp_accepted" not in missing else None
    out["torque_saturation_pct"] = _torque_metrics(series, missing, accepted)["torque_saturation_pct"]
    out["cbf_slack_max"] = _slack_metrics(series, accepted)["cbf_slack_max"]
    out["foot_slip_max_m"] = float(max(slips)) if slips else None
    return out


def worst_of(m: dict, key: str):
    """The worse of the evaluation window's ``m[key]`` and the whole run's ``m["whole_run"][key]``
    (higher is worse; None when neither is known) and which it is: ``(value, "window" | "whole run")``."""
    w = m.get(key)
    r = (m.get("whole_run") or {}).get(key)
    if r is not None and (w is None or r > w):
        return r, "whole run"
    return w, "window"


def _qp_and_distance(series: dict, missing: list, ok, win) -> dict:
    """QP time p99 and share over 2 ms over the accepted cycles ``ok``, QP failures (the whole run),
    the distance walked over the window ``win``."""
    out: dict = {}
    if "qp_time_us" not in missing:
        qt = np.asarray(series["qp_time_us"])[ok]
        out["qp_p99_us"] = float(np.percentile(qt, 99)) if qt.size else None
        out["qp_over_2ms_pct"] = float(100.0 * np.count_nonzero(qt > 2000.0) / qt.size) if qt.size else None
    else:
        out["qp_p99_us"] = out["qp_over_2ms_pct"] = None
    out["qp_failures"] = (int(np.count_nonzero(~np.asarray(series["qp_accepted"], dtype=bool)))
                          if "qp_accepted" not in missing else None)
    if "base_pos" not in missing and np.any(win):
        bp = np.asarray(series["base_pos"])[win]
        out["distance_m"] = float(bp[-1, 0] - bp[0, 0])
    else:
        out["distance_m"] = None
    return out


def _pitch_legs_only(series: dict, legs: np.ndarray) -> dict:
    """``series`` with ``theta`` and ``support`` (the relative-pitch violation's inputs) of the legs
    ``legs`` only; ``rp_err`` (the base's roll / pitch error) as it is."""
    out = dict(series)
    for k in ("theta", "support"):
        if k in series and series[k] is not None and len(series[k]):
            out[k] = np.asarray(series[k])[:, legs]
    return out


def _violation_metrics(series: dict, missing: list, t: np.ndarray, ok, theta_min: float, theta_max: float) -> dict:
    """Relative-pitch bound violation of the support legs over the accepted cycles ``ok``."""
    out: dict = {}
    if "theta" not in missing and "support" not in missing:
        theta = np.asarray(series["theta"])
        sup = np.asarray(series["support"], dtype=bool)
        vs = violation(theta[ok], theta_min, theta_max)[sup[ok]]
        if np.any(ok):
            out["max_violation_rad"] = float(vs.max()) if vs.size else 0.0
            out["violation_rate_pct"] = float(100.0 * np.count_nonzero(vs > 0) / vs.size) if vs.size else 0.0
        else:                             # nothing evaluated: None, not a reassuring 0
            out.update(max_violation_rad=None, violation_rate_pct=None)
        out["first_violation_time_s"] = first_violation_time(t, theta, sup, theta_min, theta_max)
    else:
        out.update(max_violation_rad=None, violation_rate_pct=None, first_violation_time_s=None)
    return out


def _torque_metrics(series: dict, missing: list, ok) -> dict:
    """Torque RMS and peak over the accepted cycles ``ok``, and the share of actuator-clipped torques."""
    out: dict = {}
    if "tau" not in missing:
        tau = np.asarray(series["tau"])[ok]
        out["torque_rms_nm"] = float(np.sqrt(np.mean(tau**2))) if tau.size else None
        out["torque_max_nm"] = float(np.abs(tau).max()) if tau.size else None
    else:
        out["torque_rms_nm"] = out["torque_max_nm"] = None
    sat = series.get("tau_saturated")        # optional: (T, n) bool, the actuator clipped the torque
    if sat is not None and len(sat) and np.any(ok):
        s = np.asarray(sat, dtype=bool)[ok]
        out["torque_saturation_pct"] = float(100.0 * np.count_nonzero(s) / s.size) if s.size else None
    else:
        out["torque_saturation_pct"] = None
    return out


def _slack_metrics(series: dict, ok) -> dict:
    """The relative-pitch barrier's slack over the accepted cycles ``ok``: its largest value and the
    ticks it was used on (None without the series)."""
    slack = series.get("cbf_slack")         # optional: (T, N), the CBF rows' slacks
    if slack is not None and len(slack) and np.any(ok):
        s = np.abs(np.asarray(slack, dtype=float)[ok])
        return {"cbf_slack_max": float(s.max()) if s.size else 0.0,
                "cbf_slack_ticks": int(np.count_nonzero(s.max(axis=1) > 0)) if s.size else 0}
    return {"cbf_slack_max": None, "cbf_slack_ticks": None}


def _leg_metrics(series: dict, win) -> dict:
    """``min_leg_distance_m`` and ``leg_contacts`` over the window ``win`` (module docstring)."""
    out: dict = {"min_leg_distance_m": None, "leg_contacts": None}
    dist, con = series.get("leg_distance"), series.get("leg_contacts")
    if dist is not None and len(dist) and np.any(win):
        out["min_leg_distance_m"] = float(np.min(np.asarray(dist, dtype=float)[win]))
    if con is not None and len(con) and np.any(win):
        out["leg_contacts"] = int(np.count_nonzero(np.asarray(con)[win] > 0))
    return out


def roll_pitch_from_quat_xyzw(quat: np.ndarray) -> np.ndarray:
    """Roll and pitch (ZYX Euler) of base->world quaternions ``(T, 4)`` ``xyzw`` [rad]."""
    x, y, z, w = np.asarray(quat).T
    roll = np.arctan2(2 * (w * x + y * z), 1 - 2 * (x * x + y * y))
    pitch = np.arcsin(np.clip(2 * (w * y - z * x), -1.0, 1.0))
    return np.stack([roll, pitch], axis=-1)


SETTLE_S = 1.0      # a command segment is steady this long after the command changed [s]


def _yaw(base_quat: np.ndarray) -> np.ndarray:
    """Yaw [rad] (ZYX) of base -> world quaternions ``xyzw`` (T, 4)."""
    x, y, z, w = np.asarray(base_quat, dtype=float).T
    return np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))


def heading_velocity(base_vel_world: np.ndarray, base_quat: np.ndarray) -> np.ndarray:
    """The base's horizontal velocity in its heading frame (world velocity turned by ``-yaw``) [m/s],
    (T, 2), from world velocities (T, 3) and base -> world quaternions ``xyzw`` (T, 4)."""
    yaw = _yaw(base_quat)
    v = np.asarray(base_vel_world, dtype=float)
    c, s = np.cos(yaw), np.sin(yaw)
    return np.stack([c * v[:, 0] + s * v[:, 1], -s * v[:, 0] + c * v[:, 1]], axis=-1)


def yaw_rate(t: np.ndarray, base_quat: np.ndarray) -> np.ndarray:
    """The base's yaw rate [rad/s] (T,): the time derivative of its unwrapped yaw (central differences)."""
    yaw = np.unwrap(_yaw(base_quat))
    return np.gradient(yaw, np.asarray(t, dtype=float)) if len(yaw) > 1 else np.zeros(len(yaw))


def steady_ticks(t: np.ndarray, target: np.ndarray) -> np.ndarray:
    """The ticks (bool, (T,)) of the command's steady parts: each segment of ``target`` (T, 3) held
    constant, from :data:`SETTLE_S` [s] after it began."""
    steady = np.zeros(len(t), bool)
    starts = np.flatnonzero(np.r_[True, np.any(target[1:] != target[:-1], axis=1)])
    for a, b in zip(starts, np.r_[starts[1:], len(t)]):
        steady[a:b] = t[a:b] >= t[a] + SETTLE_S
    return steady


def command_metrics(series: dict) -> dict:
    """Velocity tracking under a command schedule (series ``cmd_target`` (T, 3), ``gait_paused`` (T,),
    ``base_vel_world``, ``base_quat``, ``base_pos``, ``est_vel_world``; all None without them):
    ``velocity_tracking_rmse_mps`` and ``yaw_rate_tracking_rmse_radps`` over the steady parts of all
    segments (:func:`steady_ticks`), ``estimated_velocity_rmse_mps`` (the estimated horizontal
    world velocity against the ground truth, every tick), ``standing_drift_m`` (the largest horizontal
    base displacement within a stretch of zero command and a paused gait; None if there was none) and
    ``command_segments``: the first two per segment of the schedule (its steady part: ``t`` [s], the
    ``target`` ``[vx, vy, wz]``, ``velocity_rmse_mps``, ``yaw_rate_rmse_radps``), so a walk's forward,
    sideways and turning parts can each be read off."""
    keys = ("velocity_tracking_rmse_mps", "yaw_rate_tracking_rmse_radps", "estimated_velocity_rmse_mps",
            "standing_drift_m", "command_segments")
    need = ("t", "cmd_target", "gait_paused", "base_vel_world", "base_quat", "base_pos", "est_vel_world")
    if any(series.get(k) is None or not len(series[k]) for k in need):
        return dict.fromkeys(keys)
    target = np.asarray(series["cmd_target"], dtype=float)
    steady = steady_ticks(np.asarray(series["t"], dtype=float), target)
    v = heading_velocity(series["base_vel_world"], series["base_quat"])
    wz = yaw_rate(series["t"], series["base_quat"])
    out = dict.fromkeys(keys)
    if steady.any():
        out["velocity_tracking_rmse_mps"] = float(np.sqrt(np.mean(np.sum((v - target[:, :2])[steady] ** 2, axis=1))))
        out["yaw_rate_tracking_rmse_radps"] = float(np.sqrt(np.mean((wz - target[:, 2])[steady] ** 2)))
    e = np.asarray(series["est_vel_world"], dtype=float)[:, :2] - np.asarray(series["base_vel_world"])[:, :2]
    out["estimated_velocity_rmse_mps"] = float(np.sqrt(np.mean(np.sum(e**2, axis=1))))
    standing = np.asarray(series["gait_paused"], dtype=bool) & np.all(target == 0.0, axis=1)
    pos = np.asarray(series["base_pos"], dtype=float)[:, :2]
    edges = np.flatnonzero(np.diff(np.r_[0, standing.astype(np.int8), 0]))
    drift = [float(np.max(np.hypot(*(pos[a:b] - pos[a]).T))) for a, b in zip(edges[::2], edges[1::2])]
    out["standing_drift_m"] = max(drift) if drift else None
    out["command_segments"] = _segments(np.asarray(series["t"], dtype=float), target, steady, v, wz)
    return out


def _segments(t, target, steady, v, wz) -> list:
    """Per command segment with a steady part: its times, target and tracking errors (:func:`command_metrics`)."""
    out = []
    starts = np.flatnonzero(np.r_[True, np.any(target[1:] != target[:-1], axis=1)])
    for a, b in zip(starts, np.r_[starts[1:], len(t)]):
        m = np.zeros(len(t), bool)
        m[a:b] = steady[a:b]
        if not m.any():
            continue
        ev = (v - target[:, :2])[m]
        out.append({"t": [round(float(t[a]), 3), round(float(t[b - 1]), 3)],
                    "target": [float(x) for x in target[a]],
                    "velocity_rmse_mps": float(np.sqrt(np.mean(np.sum(ev ** 2, axis=1)))),
                    "yaw_rate_rmse_radps": float(np.sqrt(np.mean((wz - target[:, 2])[m] ** 2)))})
    return out


def whole_run_line(m: dict) -> str:
    """The whole run's figures (``m["whole_run"]``) on one line, e.g. ``0 - 8 s: max violation 0.0252 rad
    (38 ticks, first at 3.17 s), no fall, 0 QP failures, 0 % torque clipped, foot slip max 0.004 m``."""
    w = m.get("whole_run") or {}

    def num(v, fmt):
        return "n/a" if v is None else fmt.format(v)

    span = w.get("window_s")
    parts = [f"{span[0]:g} - {span[1]:g} s:" if span else "no ticks:"]
    mv = w.get("max_violation_rad")
    viol = f"max violation {num(mv, '{:.4g}')} rad"
    if mv:
        viol += f" ({w.get('violation_ticks')} ticks, first at {num(w.get('first_violation_time_s'), '{:.3f}')} s)"
    parts.append(viol + ",")
    fell = w.get("fell")
    parts.append(("fell," if fell else "no fall,") if fell is not None else "fall n/a,")
    parts.append(f"{num(w.get('qp_failures'), '{:d}')} QP failures,")
    parts.append(f"{num(w.get('torque_saturation_pct'), '{:.3g}')} % torque clipped,")
    parts.append(f"foot slip max {num(w.get('foot_slip_max_m'), '{:.3g}')} m")
    return " ".join(parts)
