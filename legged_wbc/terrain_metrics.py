"""Terrain metrics of a headless run (``metrics.json``; ``docs/terrain.md``).

From the loop's series (500 Hz ticks) over the evaluation window ``[t0, t1]``:

* ``normal_error_deg_{mean,max}``: angle between the estimator's support-plane normal
  (``normal_est``) and the true one (``normal_true``: the mean of the terrain's surface normals
  under the estimated support feet, at their ground-truth positions; :func:`true_normals`), over
  the ticks with at least one support foot;
* ``early_touchdowns``: touchdowns the estimator saw during a swing-down (before the nominal end of
  the swing), ``early_touchdown_lead_ms_mean``: how long before the nominal end, on average;
* ``late_touchdowns``: swing-downs that ended without contact (the leg was kept out of the support
  set), ``late_touchdown_delay_ms_mean`` the mean delay of those whose contact was then seen, and
  ``late_fallbacks`` those that reached the extension limit (joined the support set unseen);
* ``foot_slip_m`` / ``foot_slip_max_m``: per stretch of a foot in the estimated support set, the
  largest displacement of its ground-truth position (sphere centre, world) from where it entered
  it; the mean over the stretches and the largest.

Stretches and episodes are counted when they begin inside the window. Missing series give None.
"""

from __future__ import annotations

import math

import numpy as np

from legged_wbc.conventions import CONTROL_DT
from legged_wbc.gait import SWING_DOWN

KEYS = ("normal_error_deg_mean", "normal_error_deg_max", "early_touchdowns", "early_touchdown_lead_ms_mean",
        "late_touchdowns", "late_touchdown_delay_ms_mean", "late_fallbacks", "foot_slip_m", "foot_slip_max_m")


def true_normals(terrain, foot_pos, support) -> np.ndarray:
    """``(T, 3)``: per tick, the normalized mean of the surface normals under the support feet (world z
    where no foot is in support). ``foot_pos`` (T, N, 3) world, ``support`` (T, N) bool."""
    n = terrain.normal(foot_pos[..., 0], foot_pos[..., 1])          # (T, N, 3)
    s = np.asarray(support, dtype=bool)[..., None]
    m = np.where(s, n, 0.0).sum(axis=1)
    m[~s[..., 0].any(axis=1)] = (0.0, 0.0, 1.0)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def _runs(mask: np.ndarray):
    """``(start, end)`` index pairs (end exclusive) of the True runs of a 1-D bool array."""
    d = np.diff(np.concatenate(([0], mask.astype(np.int8), [0])))
    return zip(np.flatnonzero(d == 1), np.flatnonzero(d == -1))


def terrain_metrics(series: dict, t0: float, t1: float) -> dict:
    """The metrics of the module docstring (None where a series is missing or nothing was counted)."""
    out = dict.fromkeys(KEYS)
    t = np.asarray(series.get("t", np.zeros(0)))
    if t.size == 0:
        return out
    win = (t >= t0) & (t <= t1)
    sup = np.asarray(series["support"], dtype=bool)
    ne, nt = series.get("normal_est"), series.get("normal_true")
    if ne is not None and nt is not None and len(ne) == t.size:
        c = np.clip(np.einsum("ij,ij->i", np.asarray(ne), np.asarray(nt)), -1.0, 1.0)
        err = np.degrees(np.arccos(c))[win & sup.any(axis=1)]
        if err.size:
            out["normal_error_deg_mean"], out["normal_error_deg_max"] = float(err.mean()), float(err.max())
    phase, td = series.get("phase"), series.get("touchdown")
    if phase is not None and td is not None:
        phase, td = np.asarray(phase), np.asarray(td, dtype=bool)
        leads = []
        for i in range(td.shape[1]):
            for a, _ in _runs(td[:, i]):
                if not win[a]:
                    continue
                e = a
                while e < t.size and phase[e, i] == SWING_DOWN:
                    e += 1
                leads.append((e - a) * CONTROL_DT * 1e3)
        out["early_touchdowns"] = len(leads)
        out["early_touchdown_lead_ms_mean"] = float(np.mean(leads)) if leads else None
    late, ev = series.get("late"), series.get("late_event")
    if late is not None and ev is not None:
        late, ev = np.asarray(late, dtype=bool), np.asarray(ev)
        n_late, delays, fallbacks = 0, [], 0
        for i in range(late.shape[1]):
            for a, b in _runs(late[:, i]):
                if not win[a]:
                    continue
                n_late += 1
                if b < t.size and ev[b, i] == 1:
                    delays.append((b - a + 1) * CONTROL_DT * 1e3)
                elif b < t.size and ev[b, i] == 2:
                    fallbacks += 1
        out["late_touchdowns"], out["late_fallbacks"] = n_late, fallbacks
        out["late_touchdown_delay_ms_mean"] = float(np.mean(delays)) if delays else None
    slips = foot_slips(series, win)
    if slips:
        out["foot_slip_m"], out["foot_slip_max_m"] = float(np.mean(slips)), float(max(slips))
    return out


def foot_slips(series: dict, win: np.ndarray) -> list[float]:
    """Per stretch of a foot in the estimated support set that begins where ``win`` (bool per tick)
    is true: the largest displacement of its ground-truth position from where it entered [m]
    (empty without ``foot_pos_gt`` / ``support``)."""
    fp, sup = series.get("foot_pos_gt"), series.get("support")
    if fp is None or sup is None or len(fp) != len(win) or len(sup) != len(win):
        return []
    fp, sup = np.asarray(fp), np.asarray(sup, dtype=bool)
    slips = []
    for i in range(sup.shape[1]):
        for a, b in _runs(sup[:, i]):
            if win[a]:
                slips.append(float(np.linalg.norm(fp[a:b, i] - fp[a, i], axis=1).max()))
    return slips


def angle_deg(a, b) -> float:
    """Angle [deg] between two unit vectors."""
    return math.degrees(math.acos(max(-1.0, min(1.0, float(np.dot(a, b))))))
