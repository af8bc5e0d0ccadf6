"""``legged-wbc bench qp``: every QP of a few seconds of real closed-loop walking, solved by each
backend in one run (same machine, same moment), against a high-accuracy reference solution.

Per backend: p50/p99/max solve-call time [us], failures (not optimal, or residual/violation above
the controller's acceptance tolerance), the largest normalized residual, and the largest torque
difference from the reference relative to the reference's largest |tau|. Also the whole controller
cycle (model update + QP build + solve + torque) measured during the walk.
"""

from __future__ import annotations

import json
import time

import numpy as np

from .qp import INF, make_backend

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


def cmd_bench(args) -> int:
    if args.what != "qp":
        print(f"unknown benchmark {args.what!r}")
        return 2
    import warnings

    warnings.filterwarnings("ignore")  # solver deprecation / sparse-conversion chatter
    res = bench_qp(seconds=args.seconds, backends=args.backends or BENCH_BACKENDS, scenario=args.scenario)
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    print(f"{res['instances']} QPs ({res['variables']} variables, {res['equalities']} equalities, "
          f"{res['inequalities']} inequalities; {res['active_cbf_instances']} with a binding CBF row) from closed-loop "
          f"walking; reference {res['reference']} at 1e-10")
    print(f"{'backend':16s} {'p50 us':>8s} {'p99 us':>8s} {'max us':>8s} {'fail':>5s} {'max resid':>10s} {'max dtau':>10s}")
    for name, b in res["backends"].items():
        mark = " <- selected" if name == res["selected"] else ""
        print(f"{name:16s} {b['p50_us']:8.0f} {b['p99_us']:8.0f} {b['max_us']:8.0f} {b['failures']:5d} "
              f"{b['max_residual']:10.2e} {b['max_torque_diff']:10.2e}{mark}")
    print(f"whole controller cycle: p50 {res['cycle']['p50_us']:.0f} us, p99 {res['cycle']['p99_us']:.0f} us; "
          f"speed-up of {res['selected']} vs naive qpsolvers-osqp (p50): {res['speedup_vs_naive_p50']:.1f}x")
    return 0


def register(sub) -> None:
    s = sub.add_parser("bench", help="benchmarks that print numbers (bench qp)")
    s.add_argument("what", choices=["qp"], help="qp: QP backends on closed-loop walking instances")
    s.add_argument("--seconds", type=float, default=3.0, help="seconds of walking to collect QPs from")
    s.add_argument("--scenario", default="paper")
    s.add_argument("--backends", nargs="*", help=f"default: {' '.join(BENCH_BACKENDS)}")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_bench)
