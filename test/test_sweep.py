"""``legged-wbc sweep``: CI-sized sweeps on Dask LocalClusters (counts, keys, Ctrl-C + --resume,
failed and retried runs, bit-identical reproduce commands) and the statistics on known answers."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from legged_wbc.tools.experiments import sweep as sw

# the paper scenario compressed so that 2-3 s runs walk and have an evaluation window (t >= t_s)
SHORT = ["walk.gait_start=0.8", "walk.t_s=1.2", "stand_up.start=0.1", "stand_up.duration=0.6"]
SHORT_ARGS = [a for s in SHORT for a in ("--set", s)]
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cluster():
    """A LocalCluster shared by the tests that pass ``--scheduler`` (the same sweep, unchanged)."""
    distributed = pytest.importorskip("distributed")
    c = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                 dashboard_address="127.0.0.1:0", env=dict(sw.BLAS_ENV), silence_logs=40)
    yield c.scheduler_address
    c.close()


@pytest.fixture(scope="module")
def small_sweep(tmp_path_factory):
    """4 trials x 2 controllers of 3 s, through the CLI with its own LocalCluster of 2 workers."""
    from legged_wbc.cli import main

    out = tmp_path_factory.mktemp("sweep") / "s"
    rc = main(["sweep", "paper", "--trials", "4", "--duration", "3", "--out", str(out), "--workers", "2",
               "--dashboard", "127.0.0.1:0", "--seed", "3"] + SHORT_ARGS)
    return rc, out


COMMAND_METRICS = {"velocity_tracking_rmse_mps", "yaw_rate_tracking_rmse_radps", "estimated_velocity_rmse_mps"}


def test_small_sweep_counts_and_keys(small_sweep):
    rc, out = small_sweep
    assert rc == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["engine"] == "dask" and s["workers"] == 2
    assert s["trials"] == 4 and s["ran"] == 8 and s["runs"] == 8 and s["failed"] == 0 and s["retried"] == 0
    assert s["trials_complete"] == 4 and s["complete"] is True and s["interrupted"] is False
    assert s["wall_s"] > 0 and s["trials_per_hour"] > 0
    for name in ("damping", "cbf"):
        c = s["controllers"][name]
        for m in sw.METRICS:
            assert set(c[m]) >= {"mean", "median", "p95", "max", "ci95"}, m
            if m in COMMAND_METRICS:       # paper's forward walk is no velocity command: nothing to track
                assert c[m]["n"] == 0, m
                continue
            assert c[m]["n"] == 4, m
            lo, hi = c[m]["ci95"]
            assert lo <= c[m]["mean"] <= hi
        assert c["falls"] == 0 and c["qp_failures"] == 0
        assert len(c["worst"]) == 4 and c["worst"][0]["command"].startswith("legged-wbc run")
    for m in sw.METRICS:
        assert set(s["paired"][m]) >= {"mean", "ci95"}
    files = sorted(p.name for p in (out / "trials").glob("*.json"))
    assert files == [f"t{k:04d}-{n}.json" for k in range(4) for n in ("cbf", "damping")]
    rec = json.loads((out / "trials" / "t0002-cbf.json").read_text())
    assert rec["status"] == "ok" and rec["trial"] == 2 and set(rec["params"]) == set(sw.DEFAULT_RANDOMIZE)
    twin = json.loads((out / "trials" / "t0002-damping.json").read_text())
    assert twin["params"] == rec["params"]   # paired: the same draw for every controller
    assert "--set ground.friction=" in rec["command"] and "--set payload.mass_kg=" in rec["command"]
    report = (out / "report.md").read_text()
    assert "Worst 5 trials" in report and "legged-wbc run" in report
    for f in ("ecdf_max_violation.png", "violation_vs_disturbance.png", "violation_vs_friction.png"):
        assert (out / f).stat().st_size > 1000


def test_reproduce_command_gives_the_same_metrics(small_sweep, tmp_path):
    from legged_wbc.cli import main

    _, out = small_sweep
    rec = json.loads((out / "trials" / "t0001-cbf.json").read_text())
    argv = shlex.split(rec["command"])
    assert argv[:2] == ["legged-wbc", "run"]
    argv[argv.index("--out") + 1] = str(tmp_path / "repro")
    assert main(argv[1:]) == 0
    got = json.loads((tmp_path / "repro" / "metrics.json").read_text())
    want = {k: v for k, v in rec["metrics"].items() if k not in sw.TIMING_KEYS}
    assert {k: v for k, v in got.items() if k not in sw.TIMING_KEYS} == want


def _attacks(address: str) -> dict:
    """What another local user can do at a TLS endpoint ``tls://127.0.0.1:PORT`` of the sweep's cluster
    without its certificate: a Dask client over plain TCP, a Dask client with a certificate of its own,
    and a raw TLS connection with no certificate that sends bytes and reads; each outcome, as text."""
    import socket
    import ssl

    from distributed import Client
    from distributed.security import Security

    port = int(address.rsplit(":", 1)[1])
    out = {}
    for name, addr, sec in (("tcp", f"tcp://127.0.0.1:{port}", None), ("tls, own cert", address, Security.temporary())):
        try:
            c = Client(addr, security=sec, timeout="5s")
        except Exception as exc:  # noqa: BLE001 - refused, whatever the comm layer calls it
            out[name] = f"refused: {type(exc).__name__}"
        else:
            out[name] = f"CONNECTED: {c.submit(os.getpid).result(timeout=5)}"
            c.close()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, ctx.wrap_socket(raw) as tls:
            tls.sendall(b"\x00" * 64)
            data = tls.recv(1)
            out["tls, no cert"] = f"read {data!r}" if data else "refused: closed"
    except (OSError, ssl.SSLError) as exc:
        out["tls, no cert"] = f"refused: {type(exc).__name__}"
    return out


def test_local_cluster_refuses_clients_without_the_run_certificate():
    """The sweep's LocalCluster (scheduler and workers) speaks mutual TLS with this run's certificate:
    another local user's client over plain TCP, with a certificate of its own, or with none, is refused
    (no task submitted), while the sweep's own client runs tasks."""
    client, cluster = sw.open_cluster(1, None, "127.0.0.1:0")
    try:
        assert cluster.scheduler_address.startswith("tls://127.0.0.1:")
        assert client.submit(sum, [1, 2, 3]).result(timeout=30) == 6          # the sweep's client works
        workers = list(client.scheduler_info()["workers"])
        assert workers and all(w.startswith("tls://127.0.0.1:") for w in workers)
        for address in [cluster.scheduler_address] + workers:
            got = _attacks(address)
            assert set(got) == {"tcp", "tls, own cert", "tls, no cert"}
            assert all(v.startswith("refused") for v in got.values()), (address, got)
    finally:
        sw._close_cluster(client, cluster)


def _sigint_disposition(pid: int) -> str:
    """'ignored' / 'caught' / 'default': SIGINT's disposition in process ``pid`` (Linux)."""
    masks = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                 if line.startswith(("SigIgn", "SigCgt")))
    bit = 1 << (signal.SIGINT - 1)
    return ("ignored" if int(masks["SigIgn"], 16) & bit else "caught" if int(masks["SigCgt"], 16) & bit
            else "default")


def test_sigint_then_resume_runs_only_the_missing(tmp_path, cluster):
    out = tmp_path / "s"
    cmd = [sys.executable, "-m", "legged_wbc.cli", "sweep", "paper", "--trials", "5", "--duration", "2",
           "--out", str(out), "--workers", "2", "--dashboard", "127.0.0.1:0", "--no-figures"] + SHORT_ARGS
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    # Ctrl-C's default action in the sweep, whatever the test runner has: a suite started in the background
    # (`./run_tests.sh &`) ignores SIGINT, the children inherit that, and the sweep rightly keeps it ignored
    p = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and len(list((out / "trials").glob("*.json"))) < 2 and p.poll() is None:
            time.sleep(0.05)
        assert p.poll() is None, p.communicate()[0]
        disposition = _sigint_disposition(p.pid)
        p.send_signal(signal.SIGINT)
        log = p.communicate(timeout=60)[0]
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, f"SIGINT {disposition} in the sweep; log:\n{log}"
    assert "interrupted" in log
    before = {f.name: f.read_text() for f in (out / "trials").glob("*.json")}
    assert 2 <= len(before) < 10, log
    s = json.loads((out / "summary.json").read_text())   # the finished runs are summarized too
    assert s["runs"] == len(before) and s["interrupted"] is True

    from legged_wbc.cli import main

    rc = main(["sweep", "paper", "--trials", "5", "--duration", "2", "--out", str(out), "--scheduler", cluster,
               "--resume", "--no-figures"] + SHORT_ARGS)
    assert rc == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["ran"] == 10 - len(before) and s["runs"] == 10 and s["complete"] is True
    after = {f.name: f.read_text() for f in (out / "trials").glob("*.json")}
    assert len(after) == 10
    assert all(after[k] == v for k, v in before.items())    # finished runs were not re-run
    # without --resume an existing sweep directory is refused
    assert main(["sweep", "paper", "--trials", "5", "--duration", "2", "--out", str(out), "--scheduler", cluster]
                + SHORT_ARGS) == 2


def test_stop_signals_first_sets_the_flag_second_interrupts_ignored_stays_ignored():
    runner = signal.signal(signal.SIGINT, signal.default_int_handler)   # the runner's may be SIG_IGN (`&`)
    try:
        _stop_signals_cases()
    finally:
        signal.signal(signal.SIGINT, runner)


def _stop_signals_cases():
    before = signal.getsignal(signal.SIGINT)
    with sw.StopSignals() as stop:
        os.kill(os.getpid(), signal.SIGTERM)     # the handler runs at the next bytecode of the main thread
        time.sleep(0.01)
        assert stop.requested.is_set()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)
    assert signal.getsignal(signal.SIGINT) is before      # restored
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)   # started as a background job: stays ignored
    try:
        with sw.StopSignals() as stop:
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)
            assert not stop.requested.is_set()
    finally:
        signal.signal(signal.SIGINT, old)


def test_failed_run_is_recorded_and_dead_worker_retried(tmp_path, cluster):
    out = tmp_path / "s"
    rc = sw.run_sweep("paper", 2, out, duration=1.0, scheduler=cluster, sets=SHORT, figures=False,
                      randomize=("friction", "noise"), inject={(0, "cbf"): "raise", (1, "damping"): "die"})
    assert rc == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["ran"] == 4 and s["failed"] == 1 and s["retried"] == 1
    assert s["controllers"]["cbf"]["failed"] == 1 and s["controllers"]["cbf"]["ok"] == 1
    bad = json.loads((out / "trials" / "t0000-cbf.json").read_text())
    assert bad["status"] == "failed" and "injected failure" in bad["error"] and "Traceback" in bad["traceback"]
    died = json.loads((out / "trials" / "t0001-damping.json").read_text())
    assert died["status"] == "ok" and died["retries"] == 1
    assert "t0000-cbf" in (out / "report.md").read_text()


def test_trials_are_paired_and_streams_independent():
    from legged_wbc.scenario import load_scenario

    sc = load_scenario("paper")
    rng = sw.load_ranges("default")
    a = sw.sample_trial(5, 11, sw.RANDOMIZE, rng, sc, sc.duration)
    b = sw.sample_trial(5, 11, ("friction", "push"), rng, sc, sc.duration)
    assert a["params"]["friction"] == b["params"]["friction"] and a["params"]["push"] == b["params"]["push"]
    assert 0.4 <= a["params"]["friction"]["mu"] <= 1.0
    assert abs(a["params"]["mass"]["fraction"]) <= 0.15
    assert 0.5 * 3.0 <= a["params"]["disturbance"]["torque_nm"] <= 2.0 * 3.0
    assert a != sw.sample_trial(6, 11, sw.RANDOMIZE, rng, sc, sc.duration)
    for s in a["sets"]:                          # every value round-trips through --set
        load_scenario("paper", [s])
    sc2 = load_scenario("paper", a["sets"])
    assert sc2.friction == a["params"]["friction"]["mu"] and sc2.payload_kg == a["params"]["mass"]["mass_kg"]
    assert sc2.push.enabled and sc2.disturbance.torque_nm == a["params"]["disturbance"]["torque_nm"]


def test_terrain_is_randomized_by_name_only_and_each_trial_is_one_kind():
    from legged_wbc.scenario import load_scenario

    sc = load_scenario("paper")
    rng = sw.load_ranges("default")
    assert "terrain" not in sw.DEFAULT_RANDOMIZE
    base = sw.sample_trial(3, 11, sw.DEFAULT_RANDOMIZE, rng, sc, sc.duration)
    with_t = sw.sample_trial(3, 11, sw.RANDOMIZE, rng, sc, sc.duration)
    others = {k: v for k, v in with_t["params"].items() if k not in ("terrain", "actuators", "delay", "command")}
    assert others == base["params"]                                 # other streams unchanged
    kinds = {}
    for k in range(40):
        tr = sw.sample_trial(k, 5, ("terrain",), rng, sc, sc.duration)
        t = tr["params"]["terrain"]
        kinds[t["kind"]] = kinds.get(t["kind"], 0) + 1
        ter = load_scenario("paper", tr["sets"]).terrain            # every draw is a valid terrain
        assert ter.kind == t["kind"]
        if t["kind"] == "slope":
            assert -20.0 <= ter.angle_deg <= 20.0 and ter.height_m == 0.0
        elif t["kind"] == "steps":
            assert -0.10 <= ter.height_m <= 0.10
        elif t["kind"] == "rough":
            assert 0.01 <= ter.amplitude_m <= 0.05 and ter.seed == t["seed"]
    assert set(kinds) == {"flat", "slope", "steps", "rough"}


def test_actuators_and_delay_are_randomized_by_name_and_reach_the_scenario():
    """--randomize actuators,delay: the drives' model and the latencies, drawn per trial from streams of
    their own (adding them leaves every other category's draws as they were); every draw is a valid
    scenario that carries them; the actuator ranges reach paper_full's 80 N m and no further."""
    from legged_wbc.scenario import load_scenario

    sc = load_scenario("paper")
    rng = sw.load_ranges("default")
    assert not {"actuators", "delay"} & set(sw.DEFAULT_RANDOMIZE)
    base = sw.sample_trial(4, 11, sw.DEFAULT_RANDOMIZE + ("terrain",), rng, sc, sc.duration)
    full = sw.sample_trial(4, 11, sw.RANDOMIZE, rng, sc, sc.duration)
    assert {k: v for k, v in full["params"].items() if k not in ("actuators", "delay", "command")} == base["params"]
    seen = {"model": set(), "sensor": set(), "command": set()}
    for k in range(40):
        tr = sw.sample_trial(k, 5, ("actuators", "delay"), rng, sc, sc.duration)
        a, d = tr["params"]["actuators"], tr["params"]["delay"]
        got = load_scenario("paper", tr["sets"])
        assert got.actuators == a["model"] and got.sensor_delay_ticks == d["sensor_delay_ticks"]
        assert got.command_delay_ticks == d["command_delay_ticks"]
        seen["model"].add(a["model"]); seen["sensor"].add(d["sensor_delay_ticks"]); seen["command"].add(d["command_delay_ticks"])
    assert seen == {"model": {"ideal", "realistic"}, "sensor": {0, 1, 2, 3, 4}, "command": {0, 1}}
    full80 = load_scenario("paper_full")
    act = sw.load_ranges("actuators")
    mags = [sw.sample_trial(k, 7, ("disturbance",), act, full80, full80.duration)["params"]["disturbance"]["torque_nm"]
            for k in range(60)]
    assert 3.0 - 1e-6 <= min(mags) and max(mags) <= 80.0 and max(mags) > 60.0


def test_command_schedules_drawn_within_the_envelope_and_followed_by_the_loop():
    """--randomize command: a schedule per trial from a stream of its own (the other categories' draws
    unchanged), zero until the gait start, then segments of 3-6 s to the end, each kind's axes on their
    side of the ranges' bounds (the hexapod's tested envelope) and at least 0.3 of them; every draw is a
    valid scenario and the headless loop's command is the drawn one (cmd_target at each segment's start)."""
    from legged_wbc.closed_loop import ClosedLoop
    from legged_wbc.scenario import load_scenario

    sc = load_scenario("paper")
    rng = sw.load_ranges("default")
    base = sw.sample_trial(2, 11, sw.DEFAULT_RANDOMIZE, rng, sc, 25.0)
    withc = sw.sample_trial(2, 11, sw.DEFAULT_RANDOMIZE + ("command",), rng, sc, 25.0)
    assert {k: v for k, v in withc["params"].items() if k != "command"} == base["params"]
    kinds = set()
    for k in range(60):
        tr = sw.sample_trial(k, 3, ("command",), rng, sc, 25.0)
        seg = tr["params"]["command"]["segments"]
        assert seg[0] == {"t": 0.0, "kind": "stand", "vx": 0.0, "vy": 0.0, "wz": 0.0} and seg[1]["t"] == sc.gait_start
        dts = np.diff([e["t"] for e in seg[1:]])
        assert np.all((dts >= 3.0 - 1e-6) & (dts <= 6.0 + 1e-6)) and 25.0 - 6.0 <= seg[-1]["t"] < 25.0
        for e in seg[1:]:
            kinds.add(e["kind"])
            axes = {a.lstrip("+-"): a for a in sw.COMMAND_KINDS[e["kind"]]}
            for name, (lo, hi) in (("vx", (-0.1, 0.2)), ("vy", (-0.1, 0.1)), ("wz", (-0.3, 0.3))):
                v = e[name]
                if name not in axes:
                    assert v == 0.0, e
                    continue
                assert lo <= v <= hi and abs(v) >= 0.3 * min(abs(lo), hi) - 1e-9, e
                assert not axes[name].startswith("+") or v > 0
                assert not axes[name].startswith("-") or v < 0
        got = load_scenario("paper", tr["sets"]).raw["commands"]
        assert [(c["t"], c["vx"], c["vy"], c["wz"]) for c in got] == [(e["t"], e["vx"], e["vy"], e["wz"]) for e in seg]
    assert kinds == set(sw.COMMAND_KINDS)
    tr = next(t for t in (sw.sample_trial(k, 3, ("command",), rng, sc, 9.0) for k in range(50))
              if len(t["params"]["command"]["segments"]) >= 3 and t["params"]["command"]["segments"][1]["kind"] != "stop")
    seg = tr["params"]["command"]["segments"]
    res = ClosedLoop(load_scenario("paper", tr["sets"]), "cbf").run(seg[2]["t"] + 0.01)
    S = res.series
    for e in seg[:3]:
        k = int(np.searchsorted(S["t"], e["t"]))        # the first tick at or after the segment's start
        assert list(S["cmd_target"][k]) == [e["vx"], e["vy"], e["wz"]], (e, S["cmd_target"][k])
    assert not res.fell


def test_randomize_default_names_the_default_categories(monkeypatch):
    """``--randomize default,command``: the default categories plus the command schedule (what the
    CLI hands the sweep; the sweep itself is not started)."""
    import argparse

    from legged_wbc.cli import sweep as cli

    seen = {}
    monkeypatch.setattr(sw, "run_sweep", lambda *a, **kw: seen.update(kw) or 0)
    ns = argparse.Namespace(randomize="default,command", scenario="paper", trials=1, out="x", controllers="cbf",
                            seed=0, duration=None, workers=None, scheduler=None, resume=False, ranges="default",
                            set=None, dashboard="", no_figures=True)
    assert cli.cmd_sweep(ns) == 0
    assert seen["randomize"] == sw.DEFAULT_RANDOMIZE + ("command",)


def test_bootstrap_ci_of_a_known_distribution():
    rng = np.random.default_rng(1)
    x = rng.normal(1.0, 2.0, 400)
    lo, hi = sw.bootstrap_ci(x, n_boot=20000, seed=2)
    half = 1.96 * x.std(ddof=1) / np.sqrt(x.size)     # normal theory: mean +- 1.96 s / sqrt(n)
    assert lo < x.mean() < hi
    assert abs((hi - lo) / 2 - half) < 0.05 * half
    assert abs((lo + hi) / 2 - x.mean()) < 0.1 * half
    # coverage of the true mean over repeated samples ~95 %
    hits = 0
    for i in range(200):
        y = rng.exponential(1.0, 60)
        lo, hi = sw.bootstrap_ci(y, n_boot=2000, seed=i)
        hits += lo <= 1.0 <= hi
    assert 0.88 <= hits / 200 <= 0.99
    assert sw.bootstrap_ci([]) is None and sw.bootstrap_ci([3.0]) == [3.0, 3.0]
    d = sw.describe(list(range(1, 101)) + [None])
    assert d["mean"] == 50.5 and d["median"] == 50.5 and d["max"] == 100 and d["n"] == 100
    assert d["p95"] == pytest.approx(95.05)


def test_summary_paired_difference_on_known_results():
    rng = np.random.default_rng(4)
    n = 50
    base = rng.uniform(0.0, 0.01, n)
    results = {}
    for k in range(n):
        for name, v, fell in (("damping", base[k] + 0.1, k == 7), ("cbf", base[k], False)):
            m = {key: 1.0 for key in sw.METRICS}
            m.update(max_violation_rad=float(v), qp_failures=2 if (name == "cbf" and k < 3) else 0, fell=fell)
            results[f"t{k:04d}-{name}"] = {"run": f"t{k:04d}-{name}", "trial": k, "name": name, "status": "ok",
                                           "metrics": m, "fell": fell, "params": {}, "command": "x"}
    results["t0049-cbf"]["status"] = "failed"
    meta = {"trials": n, "scenario": "paper", "seed": 0, "randomize": [], "duration": 1.0}
    s = sw.summarize(results, ["damping", "cbf"], meta)
    p = s["paired"]["max_violation_rad"]
    assert p["mean"] == pytest.approx(0.1) and p["ci95"][0] == pytest.approx(0.1) and p["n"] == n - 1
    c = s["controllers"]
    assert c["damping"]["falls"] == 1 and c["cbf"]["falls"] == 0
    assert c["cbf"]["qp_failures"] == 6 and c["cbf"]["qp_failure_runs"] == 3 and c["cbf"]["failed"] == 1
    assert c["cbf"]["max_violation_rad"]["max"] == pytest.approx(base[:49].max())
    assert s["failed"] == 1 and s["paired_names"] == ["damping", "cbf"]
    assert c["damping"]["worst"][0]["max_violation_rad"] == pytest.approx(base.max() + 0.1)


def test_run_diagnostics_on_hand_made_series():
    t = np.arange(10) * 0.1
    sup = np.zeros((10, 2), bool)
    gt = np.zeros((10, 2), bool)
    td = np.zeros((10, 2), bool)
    sup[2:8, 0] = True
    gt[4:10, 0] = True            # leg 0 in support 2 ticks before its foot lands
    td[2:4, 0] = True             # flagged (one rising edge) while in the air: a false touchdown
    sup[:, 1] = gt[:, 1] = True   # leg 1 stands
    d = sw.run_diagnostics({"t": t, "support": sup, "contact_gt": gt, "touchdown": td}, 0.0, 1.0)
    assert d == {"support_airborne_pct": pytest.approx(100.0 * 2 / 16), "false_touchdowns": 1}


def test_wilson_interval_known_answers():
    """Falls and runs over the target are counts out of n: the Wilson score interval (known values)."""
    from legged_wbc.tools.experiments.sweep_stats import wilson_ci

    lo, hi = wilson_ci(0, 100)
    assert lo == 0.0 and hi == pytest.approx(0.0370, abs=5e-5)
    lo, hi = wilson_ci(1, 100)
    assert lo == pytest.approx(0.00177, abs=5e-5) and hi == pytest.approx(0.0545, abs=5e-5)
    lo, hi = wilson_ci(15, 15)
    assert hi == 1.0 and lo == pytest.approx(0.796, abs=5e-4)
    assert wilson_ci(0, 0) is None
