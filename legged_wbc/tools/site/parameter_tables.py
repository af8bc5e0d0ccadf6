"""The parameter tables of the manual, generated from the one parameter schema at build time.

The nodes and their config classes are the table of ``docs/parameters.md`` (*One schema per node*);
each class's :func:`legged_wbc.params.schema` gives the rows: name, type, default, range or choices,
live or read-only, description with its unit. Nothing is copied by hand, so a new or changed
parameter shows in the manual at the next build.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from legged_wbc.params import FieldSpec, schema

# | `node` | `module.Class` (...) | `file` |
_ROW = re.compile(r"^\|\s*`(?P<node>[a-z_]+)`\s*\|\s*`(?P<cls>[A-Za-z_][\w.]*)`[^|]*\|\s*(?P<file>[^|]*)\|\s*$")


def node_classes(parameters_md: str | Path) -> list[tuple[str, str, str]]:
    """``(node, "module.Class", file)`` for each row of the node table in ``docs/parameters.md``."""
    out = []
    for line in Path(parameters_md).read_text().splitlines():
        m = _ROW.match(line.strip())
        if m:
            out.append((m["node"], m["cls"], m["file"].strip()))
    return out


def load_class(dotted: str):
    """The class named ``module.Class``."""
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _value(v) -> str:
    if isinstance(v, tuple):
        v = list(v)
    if isinstance(v, bool):
        v = "true" if v else "false"
    text = repr(v) if isinstance(v, str) else str(v)
    return f"`{_cell(text)}`" if text != "" else ""


def _range(spec: FieldSpec) -> str:
    if spec.choices:
        return ", ".join(_value(c) for c in spec.choices)
    if spec.min is None and spec.max is None:
        return ""
    return _cell(spec.range_text())


def table(cls) -> str:
    """The Markdown table of every parameter of ``cls`` (groups as dotted names), in declaration order."""
    rows = ["| parameter | type | default | range | live | description |", "|---|---|---|---|---|---|"]
    for s in schema(cls):
        rows.append(f"| `{s.name}` | {s.type} | {_value(s.default)} | {_range(s)} | "
                    f"{'live' if s.live else 'start-up'} | {_cell(s.description)} |")
    return "\n".join(rows)


def page(parameters_md: str | Path) -> str:
    """One section per node of ``docs/parameters.md``'s table: its class, file and table."""
    parts = []
    for node, dotted, file in node_classes(parameters_md):
        cls = load_class(dotted)
        n = len(schema(cls))
        parts.append(f"## `{node}`\n\n`{dotted}`, {n} parameters; file: {file}.\n\n{table(cls)}\n")
    return "\n".join(parts)
