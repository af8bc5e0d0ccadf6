"""The README and ``docs/`` speak of the product, not of how it was made: a figure names the commit or
date and the machine's speed index it was measured at, never a working "session" ("session 12", "the
session's start", "earlier sessions"). The one sense of the word the docs may use is the Linux one: a
process's own or new session (``setsid``, ``start_new_session``)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SESSION = re.compile(r"\b[Ss]essions?\b")
# the Linux sense: a process started in a new session, a process group's own session
LINUX_SESSION = re.compile(r"\b(?:new|own) sessions?\b")


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def session_mentions(text: str) -> list[str]:
    """Each line of ``text`` that speaks of a working session, as ``"line N: text"``."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if SESSION.search(LINUX_SESSION.sub("", line)):
            out.append(f"line {n}: {line.strip()}")
    return out


def test_the_finder_tells_a_working_session_from_a_linux_one():
    found = ["Session 10's figures", "(session 12, today's defaults)", "the code at the session's start",
             "Earlier sessions' figures", "on the session-10 VM", "of the last session"]
    for text in found:
        assert session_mentions(text), text
    kept = ["start_new_session=True", "in a new session (setsid)", "its own session", "sessionless",
            "commit e65062f, 2026-12-02, speed index 1611-2475 us"]
    for text in kept:
        assert not session_mentions(text), text


def test_readme_and_docs_name_no_session():
    files = doc_files()
    assert len(files) > 2 and all(p.is_file() for p in files)
    bad = {p.relative_to(ROOT).as_posix(): m for p in files if (m := session_mentions(p.read_text()))}
    assert not bad, "figures name their commit, date and speed index, not a session:\n" + "\n".join(
        f"{path} {line}" for path, lines in bad.items() for line in lines)
