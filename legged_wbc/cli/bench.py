"""``legged-wbc bench qp|cycle|realtime``: benchmarks that print numbers (see :mod:`legged_wbc.tools.bench.bench_cycle` and
:mod:`legged_wbc.tools.bench.bench_realtime`)."""

from __future__ import annotations

import json
import sys

from .argtypes import positive_float

# the backends ``bench qp`` times by default (``legged_wbc.tools.bench.bench_cycle.BENCH_BACKENDS``, which a test
# holds equal): named here so that building the parser loads no solver, numba or Pinocchio
BENCH_BACKENDS = ("daqp", "proxqp", "osqp", "qpsolvers-osqp")


def print_cycle(res: dict) -> None:
    print(f"bench cycle: impl={res['impl']} scenario={res['scenario']} ticks={res['ticks']} "
          f"(t = {res['window_s'][0]:.1f}-{res['window_s'][1]:.1f} s, disturbance inside), "
          f"load {res['loadavg']['before'][0]:.2f} -> {res['loadavg']['after'][0]:.2f} on {res['cpu_count']} cores")
    print(f"{'stage':24s} {'p50 us':>8s} {'p99 us':>8s} {'max us':>8s}")
    rows = [(f"stage {k}", v) for k, v in res["stages"].items()]
    rows += [("controller", res["controller"]), ("total (est + ctl)", res["total"]),
             ("controller, CPU time", res["cpu"]["controller"]), ("total, CPU time", res["cpu"]["total"]),
             ("reference model", res["reference"]["stages"]["model"]),
             ("reference build + check", res["reference"]["stages"]["qp_build_check"]),
             ("reference qp_solve", res["reference"]["stages"]["qp_solve"]),
             ("reference estimator", res["reference"]["estimator"]),
             ("reference controller", res["reference"]["controller"]),
             ("reference total", res["reference"]["total"])]
    for name, st in rows:
        if st["p50_us"] is None:
            continue
        print(f"{name:24s} {st['p50_us']:8.0f} {st['p99_us']:8.0f} {st['max_us']:8.0f}")
    print(f"speed-up of the total (p50): {res['speedup_total_p50']:.2f}x; max |tau - tau_ref| / max(1, |tau_ref|): "
          f"{res['max_torque_diff_rel']:.2e}")
    if res.get("compile_s") is not None:
        print(f"start-up: {res['startup_first_s']:.2f} s with an empty numba cache (compile {res['compile_s']:.2f} s), "
              f"{res['startup_s']:.2f} s cached")


def cmd_realtime(args) -> int:
    from legged_wbc.ros.tooling.launcher import LaunchError
    from legged_wbc.tools.bench.bench_realtime import BenchError, bench_realtime, print_summary

    try:
        res = bench_realtime(duration=52.0 if args.duration is None else args.duration, scenario=args.scenario,
                             record=args.record, stream=sys.stderr, layout=args.layout,
                             cpu_latency_us=args.cpu_wakeup_latency_us, idle_poll=args.idle_poll)
    except (BenchError, LaunchError) as exc:
        print(f"legged-wbc bench realtime: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print_summary(res)
    return 0 if res["stack"]["launch_exit_code"] == 0 else 1


def cmd_bench(args) -> int:
    if args.what not in ("qp", "cycle", "realtime"):
        print(f"unknown benchmark {args.what!r}")
        return 2
    if args.slowdown > 1.0:          # the whole benchmark on an emulated slower machine
        from legged_wbc.tools.bench.slow_cpu import slow_cpus

        try:
            with slow_cpus(args.slowdown):
                return _run_bench(args)
        except PermissionError as exc:
            print(f"legged-wbc bench: --slowdown: {exc}", file=sys.stderr)
            return 2
    return _run_bench(args)


def _run_bench(args) -> int:
    if args.what == "realtime":
        return cmd_realtime(args)
    import warnings

    from legged_wbc.tools.bench.bench_cycle import bench_cycle, bench_qp

    warnings.filterwarnings("ignore")  # solver deprecation / sparse-conversion chatter
    if args.what == "cycle":
        res = bench_cycle(seconds=4.0 if args.seconds is None else args.seconds, impl=args.impl,
                          scenario=args.scenario, startup=not args.no_startup)
        if args.json:
            print(json.dumps(res, indent=2))
        else:
            print_cycle(res)
        return 0
    res = bench_qp(seconds=3.0 if args.seconds is None else args.seconds, backends=args.backends or BENCH_BACKENDS,
                   scenario=args.scenario)
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
    s = sub.add_parser("bench", help="benchmarks that print numbers (bench qp, bench cycle, bench realtime)")
    s.add_argument("what", choices=["qp", "cycle", "realtime"], help="qp: QP backends on closed-loop walking "
                   "instances; cycle: every control tick of closed-loop walking timed per stage, against the "
                   "reference path; realtime: the realtime ROS stack (CPU per tick of each of its processes, "
                   "deadlines, latency), the headless loop and the reference path in one run")
    s.add_argument("--seconds", type=positive_float, default=None,
                   help="seconds of walking (qp: to collect QPs from, default 3; cycle: timed, default 4)")
    s.add_argument("--impl", choices=["fast", "reference"], default="fast",
                   help="cycle: implementation of the loop's estimator and controller (the shadow is the reference)")
    s.add_argument("--no-startup", action="store_true", help="cycle: skip the start-up / numba compile measurement")
    s.add_argument("--duration", type=positive_float, default=None,
                   help="realtime: simulated seconds of the stack and the headless loop (default 52)")
    s.add_argument("--record", action="store_true", help="realtime: the stack records a bag (record:=, a temporary "
                   "directory), the metrics are read from it")
    s.add_argument("--scenario", default="paper", help="scenario the states come from (cycle, qp) / the stack walks "
                   "(realtime)")
    s.add_argument("--layout", choices=["container", "split", "processes"], default=None,
                   help="realtime: the launch file's layout (default: the launch file's default)")
    s.add_argument("--cpu-wakeup-latency-us", type=int, default=0, metavar="US",
                   help="realtime: the containers' PM QoS CPU wake-up latency request (launch argument "
                   "cpu_wakeup_latency_us; default 0: idle CPUs poll), held by the paced headless loop too; -1 = none")
    s.add_argument("--idle-poll", choices=["auto", "always", "never"], default="auto",
                   help="realtime: keep idle CPUs from halting with SCHED_IDLE spinning processes (launch argument "
                   "idle_poll; auto: only where there is no cpuidle driver), around the paced headless loop too")
    s.add_argument("--slowdown", type=positive_float, default=1.0,
                   help="run on an emulated machine this many times slower: SCHED_FIFO tasks take 1 - 1/FACTOR of "
                   "every CPU in 0.3 ms slices (legged_wbc.tools.bench.slow_cpu; needs root)")
    s.add_argument("--backends", nargs="*", help=f"qp: the backends timed (default: {' '.join(BENCH_BACKENDS)})")
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s.set_defaults(func=cmd_bench)
