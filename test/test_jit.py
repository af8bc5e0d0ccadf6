"""The numba kernels' first-run compile: ``setup.sh``'s warm-up step (``python -m legged_wbc.tools.bench.warmup``)
fills the cache with everything a run needs, and a process says so in one line exactly when it has
to compile (``legged_wbc.jit``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from legged_wbc import jit

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("legged_wbc", "mujoco_bridge", "state_estimator", "wbc_controller")


def test_every_kernel_module_is_warmed_and_announces():
    """Every module that defines numba kernels is in the warm-up table (so setup.sh compiles it)
    and registers for the compile notice."""
    found = set()
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            src = path.read_text()
            if re.search(r"^\s*from numba import .*\bn?jit\b|^\s*@(numba\.)?n?jit\b", src, re.M):
                mod = ".".join(path.relative_to(ROOT).with_suffix("").parts)
                found.add(mod)
                assert "announce_compiles(__name__)" in src, f"{mod} does not register for the compile notice"
    assert found == set(jit.KERNEL_MODULES)


def test_notice_only_for_a_real_compile_of_a_registered_module(monkeypatch, capsys):
    from numba import njit

    monkeypatch.setattr(jit, "_announced", False)
    monkeypatch.setattr(jit, "_modules", set(jit._modules))

    def f(x):
        return x + 1

    njit(cache=False)(f)(1)                      # this test module is not registered: silent
    assert capsys.readouterr().err == "" and not jit.announced()
    jit.announce_compiles(__name__)
    g = njit(cache=False)(lambda x: x * 2)       # defined here: its __module__ is this module
    g(1)
    g(2)                                         # same signature: no compile
    g(1.5)                                       # a second compile: still one line per process
    assert capsys.readouterr().err == jit.NOTICE + "\n" and jit.announced()


def _run(args, cache: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    r = subprocess.run(args, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert jit.NOTICE not in r.stdout
    return r


def test_after_the_warm_up_step_a_run_compiles_nothing(tmp_path):
    """setup.sh's warm-up step on the checkout's own cache (quick when run_tests.sh's setup.sh has
    filled it), then a headless run: it loads every kernel it calls from the cache, silently."""
    cache = os.environ.get("NUMBA_CACHE_DIR")
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-m", "legged_wbc.tools.bench.warmup"], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-m", "legged_wbc.cli", "run", "--duration", "0.2", "--quiet",
                        "--out", str(tmp_path / "run")], env=env, cwd=tmp_path, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    assert jit.NOTICE not in r.stderr, f"the run compiled kernels the warm-up did not (cache {cache or '__pycache__'})"


@pytest.mark.slow
def test_setup_warm_up_covers_the_run_and_the_notice_tells_a_compile(tmp_path):
    """A fresh cache: the warm-up step compiles (one line); then a headless run compiles nothing
    (silent) and the warm-up step is silent too; with the estimator's cache entries removed, the
    run has to compile again and says so, once. ~30 s of CPU (two compiles): 127 s on the shared
    2-core machine at load 6, hence slow."""
    cache = tmp_path / "numba-cache"
    cache.mkdir()
    warm = [sys.executable, "-m", "legged_wbc.tools.bench.warmup"]
    run = [sys.executable, "-m", "legged_wbc.cli", "run", "--duration", "0.2", "--quiet", "--out", str(tmp_path / "run")]

    assert _run(warm, cache, tmp_path).stderr.count(jit.NOTICE) == 1
    keyed = cache / jit.kernel_sources_digest()                               # under the sources' digest
    cached = sorted(p.name for p in keyed.iterdir())
    # every package with kernels cached there (numba names a directory <package dir>_<hash of its path>)
    assert sorted({c.rsplit("_", 1)[0] for c in cached}) == ["blocks", "legged_wbc", "state_estimator",
                                                             "wbc_controller"], cached
    assert jit.NOTICE not in _run(run, cache, tmp_path).stderr
    assert jit.NOTICE not in _run(warm, cache, tmp_path).stderr

    for d in keyed.glob("state_estimator_*"):
        shutil.rmtree(d)
    assert _run(run, cache, tmp_path).stderr.count(jit.NOTICE) == 1


def test_the_cache_is_keyed_on_every_kernel_source(tmp_path):
    """numba keys a kernel on its own file only: a block module edited under a kernel that calls it
    must not leave the old machine code in use. The cache directory is named after a digest of every
    kernel module: the same sources give the same name, one changed block another."""
    for mod in jit.KERNEL_MODULES:
        rel = Path(*mod.split(".")).with_suffix(".py")
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(jit.ROOT / rel, tmp_path / rel)
    assert jit.kernel_sources_digest(tmp_path) == jit.kernel_sources_digest()
    assert Path(jit.CACHE_DIR).name == jit.kernel_sources_digest()
    friction = tmp_path / "wbc_controller" / "blocks" / "friction.py"
    friction.write_text(friction.read_text() + "\n# an edit\n")
    assert jit.kernel_sources_digest(tmp_path) != jit.kernel_sources_digest()
