"""The test clients built on Foxglove's own npm libraries (``tools/foxglove_*``, pinned by their lock files)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def node_for(tool: Path, marker: str) -> str:
    """``node``'s path once ``tool``'s pinned packages are installed (``npm ci`` if ``node_modules/<marker>``
    is missing); the test is skipped where node or npm is not installed or the npm registry cannot be
    reached (any other failure of ``npm ci`` fails the test)."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    if not (tool / "node_modules" / marker).is_dir():
        npm = shutil.which("npm")
        if npm is None:
            pytest.skip("npm is not installed")
        r = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=tool, capture_output=True, text=True, timeout=600)
        unreachable = ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ETIMEDOUT", "ENETUNREACH")
        if r.returncode != 0 and any(code in r.stdout + r.stderr for code in unreachable):
            pytest.skip(f"npm ci: the npm registry is not reachable here ({(r.stdout + r.stderr).strip()[-200:]})")
        assert r.returncode == 0, r.stdout + r.stderr
    return node
