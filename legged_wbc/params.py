"""Validated, frozen parameter dataclasses (one schema for YAML, ROS parameters and the CLI).

A config class is a frozen dataclass whose fields are declared with :func:`param` (default,
range, choices, description with units). :func:`validate` (called from ``__post_init__``) raises
:class:`~legged_wbc.robot.ConfigError` naming the parameter; :func:`schema` lists the parameters
for ROS ``ParameterDescriptor`` declarations; :func:`from_flat` builds the dataclass from a flat
dict such as a ``ros__parameters`` block, rejecting unknown keys.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import yaml

from legged_wbc.robot import ConfigError


def param(default, lo: float | None = None, hi: float | None = None, desc: str = "", choices=None):
    if isinstance(default, list):
        default = tuple(default)
    return dataclasses.field(default=default, metadata={"lo": lo, "hi": hi, "desc": desc, "choices": choices})


def _check_scalar(name: str, v, meta) -> None:
    if isinstance(v, bool) or isinstance(v, str):
        return
    if not math.isfinite(float(v)) and not (meta["hi"] is None and v == math.inf):
        raise ConfigError(f"{name}: {v} is not finite")
    lo, hi = meta["lo"], meta["hi"]
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ConfigError(f"{name}: {v} out of range [{lo}, {hi}] ({meta['desc']})")


def validate(obj, prefix: str = "") -> None:
    for f in dataclasses.fields(obj):
        if not f.metadata:
            continue
        v = getattr(obj, f.name)
        name = prefix + f.name
        if f.metadata.get("choices") and v not in f.metadata["choices"]:
            raise ConfigError(f"{name}: {v!r} is not one of {list(f.metadata['choices'])} ({f.metadata['desc']})")
        if isinstance(v, tuple):
            for k, x in enumerate(v):
                _check_scalar(f"{name}[{k}]", x, f.metadata)
        else:
            _check_scalar(name, v, f.metadata)


def _coerce(f: dataclasses.Field, value, name: str):
    default = f.default
    try:
        if isinstance(default, bool):
            if isinstance(value, str):
                if value.lower() in ("true", "1", "yes"):
                    return True
                if value.lower() in ("false", "0", "no"):
                    return False
                raise ValueError(value)
            return bool(value)
        if isinstance(default, int):
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            return int(value)
        if isinstance(default, float):
            return float(value)
        if isinstance(default, tuple):
            if isinstance(value, str):
                value = yaml.safe_load(value)
            vals = list(value)
            if default and len(vals) != len(default) and not f.metadata.get("variable_length"):
                raise ConfigError(f"{name}: expected {len(default)} values, got {len(vals)}")
            if default and isinstance(default[0], str):
                return tuple(str(x) for x in vals)
            return tuple(float(x) for x in vals)
        return str(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{name}: cannot use {value!r} (expected {type(default).__name__})") from exc


def from_flat(cls, flat: dict[str, Any] | None = None, prefix: str = ""):
    """Build ``cls`` from a flat ``{name: value}`` dict; unknown names are an error."""
    flat = dict(flat or {})
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(flat) - set(known))
    if unknown:
        raise ConfigError(f"unknown parameter(s) {[prefix + u for u in unknown]}; known: {sorted(known)}")
    kwargs = {k: _coerce(known[k], v, prefix + k) for k, v in flat.items()}
    return cls(**kwargs)


def replace(obj, **changes):
    """``dataclasses.replace`` with coercion and validation (e.g. for live parameter updates)."""
    known = {f.name: f for f in dataclasses.fields(obj)}
    unknown = sorted(set(changes) - set(known))
    if unknown:
        raise ConfigError(f"unknown parameter(s) {unknown}")
    return dataclasses.replace(obj, **{k: _coerce(known[k], v, k) for k, v in changes.items()})


def schema(cls) -> list[dict]:
    out = []
    for f in dataclasses.fields(cls):
        if not f.metadata:
            continue
        d = f.default
        typ = "bool" if isinstance(d, bool) else "int" if isinstance(d, int) else "float" if isinstance(d, float) \
            else "str" if isinstance(d, str) else "str_array" if (isinstance(d, tuple) and d and isinstance(d[0], str)) \
            else "float_array"
        out.append({"name": f.name, "type": typ, "default": list(d) if isinstance(d, tuple) else d,
                    "min": f.metadata["lo"], "max": f.metadata["hi"], "choices": f.metadata["choices"],
                    "description": f.metadata["desc"]})
    return out


def load_ros_params(path: str | Path, node_name: str) -> dict:
    """The ``ros__parameters`` block of ``node_name`` in a standard ROS 2 parameter YAML."""
    from legged_wbc.robot import load_yaml_file

    d = load_yaml_file(path) or {}
    if not isinstance(d, dict):
        raise ConfigError(f"{path}: a parameter file must be a mapping of node names")
    for key in (node_name, f"/{node_name}", "/**"):
        if key in d and "ros__parameters" in d[key]:
            return dict(d[key]["ros__parameters"])
    raise ConfigError(f"{path}: no '{node_name}: ros__parameters:' block")
