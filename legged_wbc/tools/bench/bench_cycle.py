"""Benchmarks on closed-loop walking.

``legged-wbc bench qp``: every QP of a few seconds of real closed-loop walking, solved by each
backend in one run (same machine, same moment), against a high-accuracy reference solution.
Per backend: p50/p99/max solve-call time [us], failures (not optimal, or residual/violation above
the controller's acceptance tolerance), the largest normalized residual, and the largest torque
difference from the reference relative to the reference's largest |tau|. Also the whole controller
cycle (model update + QP build + solve + torque) measured during the walk.

``legged-wbc bench cycle``: every control tick of closed-loop walking timed (wall clock, and the
thread CPU time of the same calls), per stage, for the selected implementation, with shadow
reference estimator and controller fed the same inputs in the same run (timed too) and the torque
difference between the two on every tick; see :func:`bench_cycle`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np

from wbc_controller.qp import INF, make_backend

BENCH_BACKENDS = ("daqp", "proxqp", "osqp", "qpsolvers-osqp")
REFERENCE = "qpsolvers-daqp"


def collect_instances(scenario: str = "paper", seconds: float = 3.0, start: float = 4.0, mode: str = "cbf",
                      overrides: list[str] | None = None):
    """Run the closed loop up to ``start + seconds`` and copy the QP of every cycle after ``start``."""
    from legged_wbc.closed_loop import ClosedLoop
    from legged_wbc.scenario import load_scenario

    # put the disturbance inside the collected window so barrier-active QPs are in the set
    over = [f"disturbance.start_offset={start + 0.5 * seconds - 6.0}"] + list(overrides or [])
    sc = load_scenario(scenario, over)
    loop = ClosedLoop(sc, mode)
    ctl = loop.ctl
    instances, cycle_us = [], []
    real_update = ctl.update

    def hooked(inp):
        out = real_update(inp)
        if inp.t >= start:
            instances.append(ctl.problem.copy())
            cycle_us.append(out.diag.cycle_time_us)
        return out

    ctl.update = hooked
    res = loop.run(start + seconds, progress=False)
    tau_min, _ = ctl.tau_bounds()
    return instances, np.array(cycle_us), ctl, res


def torque_of(p, x, ctl, tau_min) -> np.ndarray:
    """Command torque implied by ``x`` (tau rows: ``C_tau x = tau - h - tau_sw``, ``l_tau = tau_min - h - tau_sw``)."""
    r = slice(ctl.row_tau, ctl.row_tau + ctl.n)
    return p.C[r] @ x + tau_min - p.l[r]


def bench_qp(seconds: float = 3.0, backends=BENCH_BACKENDS, scenario: str = "paper", tol: float = 1e-6) -> dict:
    instances, cycle_us, ctl, _ = collect_instances(scenario, seconds)
    if not instances:
        raise RuntimeError("no QP instances collected")
    tau_min, _ = ctl.tau_bounds()
    p0 = instances[0]
    ref_be = make_backend(REFERENCE, p0.n, p0.n_eq, p0.n_in, tol=1e-10, max_iter=10000)
    refs, binding = [], 0
    rc = slice(ctl.row_cbf, ctl.row_cbf + ctl.N)
    for p in instances:
        r = ref_be.solve(p)
        refs.append(torque_of(p, r.x, ctl, tau_min) if r.optimal else None)
        Cx = p.C[rc] @ r.x
        binding += bool(np.any((p.u[rc] < INF) & (Cx >= p.u[rc] - 1e-6 * np.maximum(1, np.abs(p.u[rc]))))
                        or np.any((p.l[rc] > -INF) & (Cx <= p.l[rc] + 1e-6 * np.maximum(1, np.abs(p.l[rc])))))
    out = {"instances": len(instances), "variables": p0.n, "equalities": p0.n_eq, "inequalities": p0.n_in,
           "active_cbf_instances": int(binding),
           "reference": REFERENCE, "selected": ctl.cfg.solver, "backends": {}}
    for name in backends:
        be = make_backend(name, p0.n, p0.n_eq, p0.n_in, tol=tol, max_iter=ctl.cfg.solver_max_iter)
        times, fails, max_res, max_dtau = [], 0, 0.0, 0.0
        for p, tref in zip(instances, refs):
            t0 = time.perf_counter()
            r = be.solve(p)
            times.append((time.perf_counter() - t0) * 1e6)
            eq, viol = p.residuals(r.x) if np.all(np.isfinite(r.x)) else (np.inf, np.inf)
            if not r.optimal or max(eq, viol) > ctl.cfg.residual_tol:
                fails += 1
                continue
            max_res = max(max_res, eq, viol)
            if tref is not None:
                tau = torque_of(p, r.x, ctl, tau_min)
                max_dtau = max(max_dtau, float(np.abs(tau - tref).max() / max(1.0, np.abs(tref).max())))
        t = np.array(times)
        out["backends"][name] = {"p50_us": float(np.percentile(t, 50)), "p99_us": float(np.percentile(t, 99)),
                                 "max_us": float(t.max()), "failures": fails, "max_residual": max_res,
                                 "max_torque_diff": max_dtau}
    out["cycle"] = {"p50_us": float(np.percentile(cycle_us, 50)), "p99_us": float(np.percentile(cycle_us, 99))}
    sel, naive = out["backends"].get(out["selected"]), out["backends"].get("qpsolvers-osqp")
    out["speedup_vs_naive_p50"] = (naive["p50_us"] / sel["p50_us"]) if sel and naive else None
    return out


# ---------------------------------------------------------------------------- bench cycle
def _stats(us) -> dict:
    a = np.asarray(us, dtype=float)
    if a.size == 0:
        return {"p50_us": None, "p99_us": None, "max_us": None}
    return {"p50_us": float(np.percentile(a, 50)), "p99_us": float(np.percentile(a, 99)), "max_us": float(a.max())}


class _TickRecorder:
    """Per-tick wall times [us] of the loop's estimator and controller and of their shadow
    reference twins, recorded from ``start`` [s] on (the shadows run on every tick, so their state
    follows the loop's from t = 0)."""

    def __init__(self, start: float, stages):
        self.start = start
        self.recording = False
        self.t = []
        self.est, self.ctl, self.est_ref, self.ctl_ref = [], [], [], []
        self.est_cpu, self.ctl_cpu = [], []       # thread CPU time of the same calls [us]
        self.stages = {k: [] for k in stages}
        self.ref_solve = []
        self.ref_qp = []
        self.ref_cycle = []
        self.dtau = []
        self.dstate = []


class _ShadowedEstimator:
    """Runs the loop's estimator, then the shadow reference estimator on a copy of the same sample."""

    def __init__(self, main, shadow, rec: _TickRecorder):
        self._main, self._shadow, self._rec = main, shadow, rec

    def update(self, t, *sample, **kw):
        """The estimator's ``update`` (``kw``: its keywords, e.g. ``gait_clock``, given to both)."""
        clock, cpu = time.perf_counter, time.thread_time
        copies = [np.array(x, copy=True) for x in sample]
        c0 = cpu()
        t0 = clock()
        out = self._main.update(t, *sample, **kw)
        t1 = clock()
        c1 = cpu()
        ref = self._shadow.update(t, *copies, **kw)
        t2 = clock()
        rec = self._rec
        rec.recording = t >= rec.start
        if rec.recording:
            rec.t.append(t)
            rec.est.append((t1 - t0) * 1e6)
            rec.est_cpu.append((c1 - c0) * 1e6)
            rec.est_ref.append((t2 - t1) * 1e6)
            rec.dstate.append(float(max(np.abs(out.q - ref.q).max(), np.abs(out.v - ref.v).max())))
        return out

    def __getattr__(self, name):
        return getattr(self._main, name)


class _ShadowedController:
    """Runs the loop's controller, then the shadow reference controller on the same input."""

    def __init__(self, main, shadow, rec: _TickRecorder):
        self._main, self._shadow, self._rec = main, shadow, rec

    def update(self, inp):
        clock, cpu = time.perf_counter, time.thread_time
        c0 = cpu()
        t0 = clock()
        out = self._main.update(inp)
        t1 = clock()
        c1 = cpu()
        ref = self._shadow.update(inp)
        t2 = clock()
        rec = self._rec
        if rec.recording:
            rec.ctl.append((t1 - t0) * 1e6)
            rec.ctl_cpu.append((c1 - c0) * 1e6)
            rec.ctl_ref.append((t2 - t1) * 1e6)
            stage = getattr(self._main, "stage_us", None)
            for k, lst in rec.stages.items():
                if k != "estimator":
                    lst.append(stage[k] if stage else np.nan)
            rec.ref_solve.append(ref.diag.solve_time_us)
            rec.ref_qp.append(ref.diag.qp_time_us)
            rec.ref_cycle.append(ref.diag.cycle_time_us)
            rec.dtau.append(float(np.abs(out.tau - ref.tau).max() / max(1.0, float(np.abs(ref.tau).max()))))
        return out

    def __getattr__(self, name):
        return getattr(self._main, name)


STARTUP_CODE = r"""
import json, sys, time
t0 = time.perf_counter()
from legged_wbc.closed_loop import ClosedLoop
from legged_wbc.scenario import load_scenario
t1 = time.perf_counter()
ClosedLoop(load_scenario(sys.argv[1]), "cbf", impl="fast")
print(json.dumps({"import_s": t1 - t0, "construct_s": time.perf_counter() - t1}))
"""


def measure_startup(scenario: str = "paper") -> dict:
    """Start-up of a fast closed loop (imports + controller/estimator construction) in fresh
    processes: first with an empty numba cache (``compile_s``: the kernels are compiled), then
    again from that cache (``startup_s``). The cache is a temporary directory."""
    import tempfile

    out = {}
    with tempfile.TemporaryDirectory(prefix="wbc-numba-cache-") as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        for key in ("first", "cached"):
            r = subprocess.run([sys.executable, "-c", STARTUP_CODE, scenario], env=env, capture_output=True,
                               text=True, check=True)
            out[key] = json.loads(r.stdout.strip().splitlines()[-1])
    first = out["first"]["import_s"] + out["first"]["construct_s"]
    cached = out["cached"]["import_s"] + out["cached"]["construct_s"]
    return {"compile_s": first - cached, "startup_first_s": first, "startup_s": cached}


def bench_cycle(seconds: float = 4.0, impl: str = "fast", scenario: str = "paper", startup: bool = True) -> dict:
    """Closed-loop walking on ``scenario`` (gait start to gait start + ``seconds``; the disturbance
    window opens in the middle of it), every control tick timed [us]: the loop's estimator update,
    the controller's stages (input check, model = Pinocchio + leg kinematics, QP build, QP solve
    (with DAQP: including the solution's residual check and torque), check + torque (acceptance and
    diagnostics)), the controller call and estimator + controller. The
    reference implementation (the oracles ``state_estimator.oracle`` and ``wbc_controller.oracle``) runs
    as a shadow on the same samples and states in the same run, timed the same way;
    ``max_torque_diff_rel = max_ticks |tau - tau_ref|_inf / max(1, |tau_ref|_inf)``."""
    from legged_wbc.closed_loop import ClosedLoop, make_controller, make_estimator
    from legged_wbc.scenario import load_scenario

    from wbc_controller.controller import STAGES

    from legged_wbc.gait import GaitConfig
    from legged_wbc.robot import load_robot_config

    base = load_scenario(scenario)
    start = float(GaitConfig.from_dict(base.gait_dict(load_robot_config(base.robot).gait)).start_time)
    over = [f"disturbance.start_offset={start + 0.5 * seconds - base.eval_window[0]}"]
    load_before = os.getloadavg()
    loop = ClosedLoop(load_scenario(scenario, over), "cbf", impl=impl)
    shadow_est = make_estimator(loop.rm, loop.gait_cfg, loop.ecfg, "reference")
    shadow_est.reset(loop.q0)
    shadow_ctl = make_controller(loop.rm, loop.wcfg, loop.gait_cfg, "reference")
    shadow_ctl.reset(loop.q0)
    rec = _TickRecorder(start, ("estimator",) + STAGES)
    loop.est = _ShadowedEstimator(loop.est, shadow_est, rec)
    loop.ctl = _ShadowedController(loop.ctl, shadow_ctl, rec)
    wall0 = time.perf_counter()
    res = loop.run(start + seconds, progress=False)
    wall = time.perf_counter() - wall0
    out = _summary(rec, res, impl, scenario, seconds, start, wall, load_before, os.getloadavg())
    if startup:
        out.update(measure_startup(scenario))
    else:
        out.update({"compile_s": None, "startup_first_s": None, "startup_s": None})
    return out


def _summary(rec: _TickRecorder, res, impl: str, scenario: str, seconds: float, start: float, wall: float,
             load_before, load_after) -> dict:
    """``bench cycle``'s JSON (see :func:`bench_cycle`) from the recorded ticks."""
    from legged_wbc.closed_loop import estimator_accepts_impl
    from wbc_controller.controller import STAGES

    n = len(rec.ctl)
    est, ctl = np.array(rec.est[:n]), np.array(rec.ctl)
    est_ref, ctl_ref = np.array(rec.est_ref[:n]), np.array(rec.ctl_ref)
    stages = {"estimator": _stats(est)}
    for k in STAGES:
        stages[k] = _stats(rec.stages[k]) if impl == "fast" else _stats([])
    total, total_ref = est + ctl, est_ref + ctl_ref
    out = {
        "impl": impl, "scenario": scenario, "seconds": seconds, "window_s": [start, start + seconds],
        "ticks": int(n), "estimator_impl_keyword": estimator_accepts_impl(),
        "estimator": _stats(est), "controller": _stats(ctl), "total": _stats(total), "stages": stages,
        # thread CPU time of the same calls: what the loop itself costs, without the time the
        # process was descheduled (other jobs on the machine); compare with the wall figures above
        "cpu": {"estimator": _stats(rec.est_cpu[:n]), "controller": _stats(rec.ctl_cpu),
                "total": _stats(np.array(rec.est_cpu[:n]) + np.array(rec.ctl_cpu))},
        "reference": {"estimator": _stats(est_ref), "controller": _stats(ctl_ref), "total": _stats(total_ref),
                      # from the reference controller's own diagnostics (its cycle is not split further):
                      # model = Pinocchio + leg kinematics (+ the diagnostics at the end), build + check
                      # = QP build + residual check + torque, solve = the solver call
                      "stages": {"model": _stats(np.array(rec.ref_cycle) - np.array(rec.ref_qp)),
                                 "qp_build_check": _stats(np.array(rec.ref_qp) - np.array(rec.ref_solve)),
                                 "qp_solve": _stats(rec.ref_solve)}},
        "speedup_total_p50": float(np.percentile(total_ref, 50) / np.percentile(total, 50)) if n else None,
        "speedup_controller_p50": float(np.percentile(ctl_ref, 50) / np.percentile(ctl, 50)) if n else None,
        "max_torque_diff_rel": float(max(rec.dtau)) if rec.dtau else None,
        "max_estimate_diff": float(max(rec.dstate)) if rec.dstate else None,
        "fell": bool(res.fell), "qp_failures": int(res.metrics.get("qp_failures", 0) or 0),
        "wall_s": wall, "cpu_count": os.cpu_count(),
        "loadavg": {"before": list(load_before), "after": list(load_after)},
    }
    return out
