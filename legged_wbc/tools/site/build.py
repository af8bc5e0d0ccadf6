"""Build (strict) or serve the manual: what ``legged-wbc docs`` runs.

The site needs a source checkout (``mkdocs.yml`` and ``docs/`` next to the package) and the docs'
requirements (``mkdocs``, ``mkdocs-material``, ``mkdocstrings[python]``, pinned in ``requirements.txt``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


class SiteError(RuntimeError):
    """The site cannot be built here (no checkout, MkDocs missing): one line saying why."""


def config_file(repo: Path = REPO) -> Path:
    cfg = repo / "mkdocs.yml"
    if not cfg.is_file():
        raise SiteError(f"no mkdocs.yml in {repo}: the manual builds from a source checkout")
    return cfg


def _env(repo: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(repo), env.get("PYTHONPATH", "")) if p)
    env["NO_MKDOCS_2_WARNING"] = "1"        # Material's notice about MkDocs 2.0, printed on every build
    return env


def mkdocs_command(action: str, repo: Path, out: Path | None = None, addr: str = "127.0.0.1:8000") -> list[str]:
    """``python -m mkdocs build --strict -d OUT`` or ``... serve -a ADDR`` for ``repo``'s ``mkdocs.yml``."""
    cmd = [sys.executable, "-m", "mkdocs", action, "-f", str(config_file(repo))]
    if action == "build":
        cmd += ["--strict"] + (["-d", str(out)] if out is not None else [])
    else:
        cmd += ["--strict", "-a", addr]
    return cmd


def run(action: str, repo: Path = REPO, out: Path | None = None, addr: str = "127.0.0.1:8000",
        capture: bool = False) -> subprocess.CompletedProcess:
    """Run MkDocs; ``capture``: return its output instead of printing it."""
    try:
        import mkdocs  # noqa: F401
    except ImportError:
        raise SiteError("MkDocs is not installed: ./setup.sh (or pip install -r requirements.txt)") from None
    return subprocess.run(mkdocs_command(action, repo, out, addr), cwd=repo, env=_env(repo),
                          capture_output=capture, text=True)
