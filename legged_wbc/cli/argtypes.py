"""Argument types and the parser class of ``legged-wbc``: a bad value is one line, exit status 2.

``argparse`` prints the usage block and then ``error: ...``; :class:`OneLineParser` prints only
``legged-wbc <command>: argument --x: <what is wrong>`` (``--help`` still shows the usage). The
types below check what ``type=float`` lets through (negative or zero durations, NaN, inf).
"""

from __future__ import annotations

import argparse
import math


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line (subparsers inherit the class)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message}\n")


def _number(text: str, kind=float):
    try:
        v = kind(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'}, got {text!r}") \
            from None
    if kind is float and not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"must be finite, got {text}")
    return v


def positive_float(text: str) -> float:
    """A finite number > 0 (durations [s], tolerances, ranges)."""
    v = _number(text)
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return v


def nonneg_float(text: str) -> float:
    v = _number(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return v


def finite_float(text: str) -> float:
    return _number(text)


def positive_int(text: str) -> int:
    v = _number(text, int)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return v


def nonneg_int(text: str) -> int:
    v = _number(text, int)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return v


def check_out_dir(path, option: str = "--out") -> None:
    """A ConfigError (one line, exit status 2) unless ``path`` is a directory this process can write
    in, or can be created as one: checked before a run, so a long run does not end in a traceback
    on ``--out /etc/hostname``. Nothing is created (a probe file in the directory, or in its nearest
    existing ancestor, is opened unlinked and closed)."""
    import tempfile
    from pathlib import Path

    from legged_wbc.robot import ConfigError

    p = Path(path)
    probe = p
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        why = "exists and is not a directory" if probe == p else f"{probe} is not a directory"
        raise ConfigError(f"{option} {p}: {why}")
    try:
        tempfile.TemporaryFile(dir=probe).close()
    except OSError as exc:
        raise ConfigError(f"{option} {p}: cannot write in {probe} ({exc.strerror or exc})") from None
