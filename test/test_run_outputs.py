"""What `legged-wbc run` writes tells the truth: the evaluated window of a short run, whether the
disturbance was applied, plain progress lines when stdout is not a terminal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def _run(tmp_path, *args):
    out = tmp_path / "run"
    r = subprocess.run([str(BIN / "legged-wbc"), "run", "--controller", "cbf", "--scenario", "paper", "--out",
                        str(out), *args], capture_output=True, text=True, timeout=600)
    return r, json.loads((out / "metrics.json").read_text()) if (out / "metrics.json").exists() else None


def test_short_run_says_what_was_evaluated(tmp_path):
    # 8 s of paper: the window (t_s = 6 s .. 52 s) is cut at 8 s; the disturbance (26 s) never came
    r, m = _run(tmp_path, "--duration", "8", "--set", "disturbance.start_offset=20")
    assert r.returncode == 0, r.stderr
    assert m["window_s"] == [6.0, 8.0] and m["window_requested_s"] == [6.0, 52.0]
    assert m["samples"] == 1000 and m["disturbance_applied"] is False
    assert "metrics over 6 - 8 s only" in r.stderr and "disturbance_applied false" in r.stderr
    # plain progress lines in a pipe (one every 5 sim seconds), no carriage returns
    assert "\r" not in r.stdout
    progress = [ln for ln in r.stdout.splitlines() if ln.startswith("[cbf] t=")]
    assert len(progress) == 2, r.stdout          # t = 0 and t = 5 s


def test_run_ending_before_the_window(tmp_path):
    r, m = _run(tmp_path, "--duration", "1")
    assert r.returncode == 0, r.stderr
    assert m["window_s"] is None and m["samples"] == 0
    assert m["max_violation_rad"] is None and m["violation_rate_pct"] is None and m["torque_rms_nm"] is None
    assert "before the evaluation window" in r.stderr


def test_disturbance_applied_when_the_run_reaches_it(tmp_path):
    r, m = _run(tmp_path, "--duration", "7.5", "--set", "disturbance.start_offset=0.5",
                "--set", "disturbance.duration=0.5")
    assert r.returncode == 0, r.stderr
    assert m["disturbance_applied"] is True and "disturbance_applied false" not in r.stderr


def test_a_failed_write_leaves_no_complete_looking_output(tmp_path):
    """The disk filling up while the run writes its output (here: a file size limit of 20 kB, which
    metrics.json fits and log.npz does not): one line, exit 1, and neither metrics.json nor log.npz
    nor a temporary file left; a run into the same directory afterwards writes both."""
    import resource
    import signal

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)       # write() fails with EFBIG instead of a kill
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))

    out = tmp_path / "run"
    args = [str(BIN / "legged-wbc"), "run", "--controller", "cbf", "--scenario", "paper", "--duration", "0.5",
            "--quiet", "--out", str(out)]
    r = subprocess.run(args, capture_output=True, text=True, timeout=600, preexec_fn=small_files)
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip().splitlines() == [f"legged-wbc run: cannot write {out} (File too large): no metrics.json, "
                                             "no log.npz"]
    assert list(out.iterdir()) == []
    r = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["log.npz", "metrics.json"]
    assert (out / "log.npz").stat().st_size > 20_000


def test_out_in_an_unwritable_directory_is_refused_before_the_run(tmp_path):
    """--out where nothing can be created: one line, exit 2, before any simulation."""
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    target = locked / "run" if os.geteuid() != 0 else Path("/proc/1/run")   # root writes through 0555
    try:
        r = subprocess.run([str(BIN / "legged-wbc"), "run", "--out", str(target)], capture_output=True, text=True,
                           timeout=120)
    finally:
        locked.chmod(0o755)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"legged-wbc run: --out {target}: cannot write in "), lines
    assert not target.exists()
