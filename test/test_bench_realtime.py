"""``legged-wbc bench realtime``: the process-tree CPU accounting, and a short realtime run end to end.

No wall-clock or CPU thresholds that depend on this machine's speed (a realtime run on shared
cores): structure, finiteness, consistency between the figures, and bounds the product promises."""

from domains import domain_id
import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest

from legged_wbc.tools.bench.bench_realtime import ProcessTree, proc_stat

REQUIRED = ("deadline_miss_pct", "command_latency_p50_us", "command_latency_p99_us", "fell", "max_violation_rad",
            "qp_failures", "cpu_per_tick_us", "utilization", "headless_per_tick_us", "overhead_ratio",
            "reference_p50_us", "loadavg", "cpu_count")

BUSY = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\ntime.sleep(30)\n"


def test_process_tree_counts_every_descendant():
    """A launched process that starts a busy grandchild via an interpreter and a named executable:
    all three are found by walking /proc, named, and the grandchild's CPU time is its own."""
    code = ("import subprocess, sys, time\n"
            f"subprocess.Popen([sys.executable, '-c', {BUSY.format(s=0.3)!r}])\n"
            "subprocess.Popen(['sleep', '30'])\n"
            "time.sleep(30)\n")
    root = subprocess.Popen([sys.executable, "-c", code])
    tree = ProcessTree(lambda: {"walking_container": root.pid})
    try:
        t_end = time.monotonic() + 20.0
        while time.monotonic() < t_end:
            tree.refresh()
            cpu = {tree.names[k]: v for k, v in tree.sample().items()}
            if len(cpu) == 3 and cpu.get("walking_container-child", 0.0) >= 0.3:
                break
            time.sleep(0.1)
        assert set(cpu) == {"walking_container", "walking_container-child", "sleep"}
        assert cpu["walking_container-child"] >= 0.3             # busy 0.3 s of CPU, counted where it ran
        assert cpu["walking_container"] < cpu["walking_container-child"]
        assert proc_stat(root.pid)[0] > 0                        # ppid
    finally:
        for pid, _ in tree.names:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        root.wait(timeout=10)


def _run_bench(env, *args) -> dict:
    p = subprocess.run([sys.executable, "-m", "legged_wbc.cli", "bench", "realtime", *args, "--json"], env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout)


def _check_common(res: dict, duration: float) -> None:
    assert set(REQUIRED) <= set(res)
    for k in ("deadline_miss_pct", "command_latency_p50_us", "command_latency_p99_us", "headless_per_tick_us",
              "overhead_ratio", "reference_p50_us"):
        assert isinstance(res[k], float) and math.isfinite(res[k]), (k, res[k])
    assert 0.0 <= res["deadline_miss_pct"] <= 100.0
    assert 0 < res["command_latency_p50_us"] <= res["command_latency_p99_us"]
    assert res["headless_per_tick_us"] > 0 and res["overhead_ratio"] > 0 and res["reference_p50_us"] > 0
    assert len(res["loadavg"]["before"]) == 3 and len(res["loadavg"]["after"]) == 3 and res["cpu_count"] >= 1

    # the default layout: the controller runs in walking_container, named as such (not by pid)
    assert res["control_process"] == "walking_container"
    cpu, util = res["cpu_per_tick_us"], res["utilization"]
    assert set(cpu) == set(util) and "walking_container" in cpu
    assert all(isinstance(v, float) and math.isfinite(v) for v in [*cpu.values(), *util.values()])
    assert cpu["walking_container"] > 0
    assert 0 < util["walking_container"] <= 2.0
    assert res["overhead_ratio"] == pytest.approx(cpu["walking_container"] / res["headless_per_tick_us"], rel=1e-12)

    # the walking window: after the first command, up to the end of the simulation, whole ticks
    w = res["window"]
    assert 0 < w["sim_start_s"] < w["sim_end_s"] == pytest.approx(duration)
    assert w["ticks"] == round(w["sim_s"] / 0.002) and w["ticks"] > 0 and w["wall_s"] > 0
    proc = res["processes"]["walking_container"]
    assert cpu["walking_container"] == pytest.approx(proc["cpu_s"] / w["ticks"] * 1e6, rel=1e-9)
    assert util["walking_container"] == pytest.approx(proc["cpu_s"] / w["wall_s"], rel=1e-9)
    # the headless loop ran the same scenario and duration (every tick unless it fell)
    if not res["headless"]["fell"]:
        assert res["headless"]["ticks"] == round(duration / 0.002)
    st = res["stack"]
    assert st["launch_exit_code"] == 0
    # ticks closed by the bridge (every tick but the last): all of them in a bag; through the monitor,
    # those after it matched the bridge's publishers (discovery may take the first tenths of a second)
    assert 0 < st["ticks_timed"] <= round(duration / 0.002) - 1


def test_bench_realtime_smoke(ros_env):
    """3 s of paper through the realtime stack, not recording: CPU, utilization, real-time quality;
    the walk metrics are not measured (None, with the reason)."""
    res = _run_bench(ros_env, "--duration", "3")
    _check_common(res, 3.0)
    assert res["stack"]["launch_command"] == ("legged-wbc launch walking_sim controller:=cbf scenario:=paper "
                                              "mode:=realtime duration:=3")
    assert res["cpu_wakeup_latency_us"] == 0      # the containers' default request, held by the paced loop too
    held = os.geteuid() == 0 and os.path.exists("/dev/cpu_dma_latency")
    assert res["headless_paced"]["cpu_wakeup_latency_us"] == (0 if held else None)
    # idle pollers (auto: only without a cpuidle driver) run beside the stack and the paced loop alike, and are
    # not counted as the stack's load
    from legged_wbc.idle_poll import cpuidle_driver

    polled = cpuidle_driver() is None
    pollers = [n for n in res["utilization"] if n.startswith("idle_poller")]
    assert res["idle_poll"] == "auto" and len(pollers) == (len(os.sched_getaffinity(0)) if polled else 0), pollers
    assert res["headless_paced"]["idle_pollers"] == len(pollers)
    assert res["idle_poller_utilization"] == pytest.approx(sum(res["utilization"][n] for n in pollers))
    assert res["max_utilization"] == max(u for n, u in res["utilization"].items() if n not in pollers)
    assert all(res[k] is None for k in ("fell", "max_violation_rad", "qp_failures"))
    assert "--record" in res["stack"]["walk_metrics_unavailable"]
    assert res["stack"]["monitor"]["topics"] == ["/bridge/diagnostics", "/bridge/command_latency"]


@pytest.mark.slow
def test_bench_realtime_recording(ros_env):
    """7 s (the evaluation window opens at 6 s), recording: the walk metrics from the bag as well."""
    res = _run_bench(ros_env, "--duration", "7", "--record")
    _check_common(res, 7.0)
    assert "record:=" in res["stack"]["launch_command"]
    assert res["stack"]["ticks_timed"] == round(7.0 / 0.002) - 1       # the bag has every tick
    assert isinstance(res["fell"], bool)
    assert isinstance(res["qp_failures"], int) and res["qp_failures"] >= 0
    assert isinstance(res["max_violation_rad"], float) and res["max_violation_rad"] >= 0.0


def test_stack_monitor_takes_every_message(ros_env):
    """The monitor's stored topics: every message a 1 kHz publisher sends, in order (taken in batches)."""
    import rclpy
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState

    from legged_wbc.ros.tooling.stack_monitor import StackMonitor

    domain = domain_id()
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=domain)
    node = rclpy.create_node("publisher", context=ctx)
    pub = node.create_publisher(JointState, "/wbc/relative_pitch",
                                QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE))
    # a history of 100 messages for 800: only the periodic takes (every 20 ms, 20 messages) keep them all
    mon = StackMonitor(domain, record_topics=("/wbc/relative_pitch",), depth=100, take_period=0.02)
    try:
        # probes (position -1) until the monitor has one: both sides matched, nothing after is lost
        t_end = time.monotonic() + 20.0
        while not mon._taken["/wbc/relative_pitch"] and time.monotonic() < t_end:
            pub.publish(JointState(name=["lf"], position=[-1.0]))
            time.sleep(0.02)
        n = 800
        for i in range(n):
            msg = JointState(name=["lf"], position=[float(i)])
            msg.header.stamp.nanosec = i
            pub.publish(msg)
            time.sleep(0.001)
        time.sleep(0.5)
    finally:
        mon.close()
        node.destroy_node()
        rclpy.shutdown(context=ctx)
    got = [(t, m) for t, m in mon.messages()["/wbc/relative_pitch"] if m.position[0] >= 0]
    assert [m.header.stamp.nanosec for _, m in got] == list(range(n))
    assert [m.position[0] for _, m in got] == [float(i) for i in range(n)]
    assert all(t2 >= t1 > 0 for (t1, _), (t2, _) in zip(got, got[1:]))
