"""``legged-wbc bench cycle`` smoke test: keys, tick count, fast == reference on every tick.

No wall-clock thresholds here (shared machines): only structure and the torque agreement."""

import json
import subprocess
import sys

import pytest

from legged_wbc.tools.bench.bench_cycle import bench_cycle
from wbc_controller.controller import STAGES

STAT_KEYS = {"p50_us", "p99_us", "max_us"}


@pytest.fixture(scope="module")
def result():
    return bench_cycle(seconds=0.5, impl="fast", startup=False)


def test_keys_and_ticks(result):
    for key in ("estimator", "controller", "total"):
        assert set(result[key]) == STAT_KEYS
        assert all(result[key][k] > 0 for k in STAT_KEYS)
    assert set(result["stages"]) == {"estimator", *STAGES}
    assert all(set(v) == STAT_KEYS for v in result["stages"].values())
    assert result["ticks"] == 250                       # every tick of 0.5 s at 500 Hz
    assert {"p50_us", "p99_us"} <= set(result["reference"]["total"])
    assert result["speedup_total_p50"] > 0
    assert len(result["loadavg"]["before"]) == 3
    assert {"compile_s", "startup_s"} <= set(result)
    assert set(result["cpu"]) == {"estimator", "controller", "total"}
    # the stages add up to the controller call (up to the timer calls between them)
    s = sum(result["stages"][k]["p50_us"] for k in STAGES)
    assert s <= 1.5 * result["controller"]["p50_us"]


def test_fast_equals_reference_every_tick(result):
    assert result["max_torque_diff_rel"] <= 1e-9
    assert not result["fell"] and result["qp_failures"] == 0


def test_cli_json_reference_impl():
    """The CLI path with the reference as the loop's implementation (fast == reference then trivially)."""
    r = subprocess.run([sys.executable, "-m", "legged_wbc.cli", "bench", "cycle", "--json", "--seconds", "0.2",
                        "--impl", "reference", "--no-startup"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["impl"] == "reference" and res["ticks"] == 100
    assert res["max_torque_diff_rel"] == 0.0
    assert res["stages"]["estimator"]["p50_us"] > 0


@pytest.mark.slow
def test_startup_measurement_compiles_then_loads_from_cache():
    """Fresh processes on an empty numba cache: the first compiles (slower), the second loads."""
    from legged_wbc.tools.bench.bench_cycle import measure_startup

    s = measure_startup()
    assert s["startup_first_s"] > s["startup_s"] > 0 and s["compile_s"] > 0
