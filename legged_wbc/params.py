"""One parameter schema: typed, frozen config dataclasses for YAML files, ROS parameters and the CLI.

A config class is a frozen dataclass whose fields are declared with :func:`param` (default, range,
choices, unit, description, live or read-only) or :func:`group` (a nested config dataclass: its
fields get dotted names, ``touchdown.gamma_land``). ``__post_init__`` calls :func:`validate`, which
coerces and checks every field and raises :class:`~legged_wbc.robot.ConfigError` naming the
parameter. Everything else works on the class:

* :func:`schema` -> a list of :class:`FieldSpec` (dotted name, type, default, min, max, choices,
  description, unit, read_only) -- what ``legged_wbc.ros.nodekit.params`` turns into ROS
  ``ParameterDescriptor``s;
* :func:`from_flat` / :func:`to_flat` / :func:`replace` between a config object and
  ``{dotted_name: value}`` (unknown names are an error naming them);
* :func:`load_node_config` -- the one loader of the standard ``node: ros__parameters:`` YAML files.

Coercion is strict and the same everywhere (:meth:`FieldSpec.coerce`): a ``bool`` takes a real
boolean or the text ``true``/``false`` (any case), nothing else (not ``yes``, ``1``); an ``int`` an
integral number; a ``float`` any finite number (``inf`` only when the declared bound is ``inf``,
``NaN`` never); arrays have the default's length unless declared ``variable_length``; ``choices``
restrict the value (each element, for arrays). Text (a CLI ``--set`` value) is parsed as YAML for
numbers and arrays.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from legged_wbc.robot import ConfigError

TYPES = ("bool", "int", "float", "str", "float_array", "int_array", "str_array", "bool_array")
_PY = {bool: "bool", int: "int", float: "float", str: "str"}
# names a ros__parameters block may hold that belong to ROS itself, not to a node's schema
ROS_RESERVED = ("use_sim_time",)
ROS_RESERVED_PREFIXES = ("qos_overrides.",)


def param(default, lo: float | None = None, hi: float | None = None, desc: str = "", choices=None,
          unit: str = "", live: bool = True, variable_length: bool | None = None, type: str | None = None):
    """A config dataclass field.

    ``lo``/``hi``: inclusive range (each element of an array); ``choices``: allowed values;
    ``unit``: e.g. ``"N m"`` (shown in the description as ``[N m]``); ``live``: takes effect on the
    next tick when changed at runtime (``False``: read-only, set at start-up); ``variable_length``:
    arrays of any length (default: the default's length; an empty default is variable);
    ``type``: one of :data:`TYPES`, needed only for an empty array default (``"str_array"``)."""
    if isinstance(default, list):
        default = tuple(default)
    typ = type or _infer_type(default)
    if typ not in TYPES:
        raise ConfigError(f"param: unknown type {typ!r} (one of {TYPES})")
    if variable_length is None:
        variable_length = typ.endswith("_array") and len(default) == 0
    meta = {"lo": lo, "hi": hi, "desc": desc, "choices": tuple(choices) if choices is not None else None,
            "unit": unit, "live": bool(live), "variable_length": bool(variable_length), "type": typ}
    return dataclasses.field(default=default, metadata={"param": meta})


def group(cls):
    """A nested config dataclass field (its parameters are ``<field>.<name>``)."""
    return dataclasses.field(default_factory=cls, metadata={"group": cls})


def _infer_type(default) -> str:
    if isinstance(default, tuple):
        if not default:
            raise ConfigError("param: an empty array default needs type='str_array' (or another *_array)")
        return _infer_type(default[0]) + "_array"
    t = _PY.get(type(default))
    if t is None:
        raise ConfigError(f"param: cannot infer a parameter type from {default!r}")
    return t


@dataclass(frozen=True)
class FieldSpec:
    """One parameter of a config class (what :func:`schema` lists)."""

    name: str                       # dotted name, e.g. "touchdown.gamma_land"
    type: str                       # one of TYPES
    default: Any
    min: float | None = None
    max: float | None = None
    choices: tuple | None = None
    description: str = ""           # with the unit appended as " [unit]"
    unit: str = ""
    read_only: bool = False
    variable_length: bool = False

    @property
    def live(self) -> bool:
        return not self.read_only

    @property
    def is_array(self) -> bool:
        return self.type.endswith("_array")

    def range_text(self) -> str:
        if self.choices:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        lo = "-inf" if self.min is None else f"{self.min:g}"
        hi = "inf" if self.max is None else f"{self.max:g}"
        return f"[{lo}, {hi}]"

    # ---------------------------------------------------------------- the one validator
    def coerce(self, value):
        """``value`` converted to this parameter's type and checked; raises ``ConfigError`` naming it.
        Arrays come back as tuples."""
        if self.is_array:
            if isinstance(value, str):
                value = _parse_text(value)
            if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
                raise ConfigError(f"{self.name}: expected a list, got {value!r}")
            vals = list(value)
            if not self.variable_length and len(vals) != len(self.default):
                raise ConfigError(f"{self.name}: expected {len(self.default)} values, got {len(vals)}")
            elem = self.type[: -len("_array")]
            return tuple(self._scalar(elem, x, f"{self.name}[{k}]") for k, x in enumerate(vals))
        return self._scalar(self.type, value, self.name)

    def _scalar(self, t: str, v, label: str):
        if t == "bool":
            if isinstance(v, str) and v.strip().lower() in ("true", "false"):
                return v.strip().lower() == "true"
            if not isinstance(v, bool):
                raise ConfigError(f"{label}: expected true/false, got {v!r}")
            return v
        if t == "str":
            if not isinstance(v, str):
                raise ConfigError(f"{label}: expected a string, got {v!r}")
            out = v
        else:
            if isinstance(v, str):
                parsed = _parse_text(v)
                if isinstance(parsed, str):      # YAML 1.1 reads "1e5" (no dot) as a string
                    try:
                        parsed = float(parsed.strip())
                    except ValueError:
                        raise ConfigError(f"{label}: expected a number, got {v!r}") from None
                v = parsed
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ConfigError(f"{label}: expected {'an integer' if t == 'int' else 'a number'}, got {v!r}")
            if t == "int":
                if isinstance(v, float):
                    if not v.is_integer():
                        raise ConfigError(f"{label}: expected an integer, got {v!r}")
                    v = int(v)
                out = int(v)
            else:
                out = float(v)
                if math.isnan(out) or (out == math.inf and self.max != math.inf) or \
                        (out == -math.inf and self.min != -math.inf):
                    raise ConfigError(f"{label}: must be finite, got {out!r} ({self.description})")
            if (self.min is not None and out < self.min) or (self.max is not None and out > self.max):
                raise ConfigError(f"{label}: {out!r} out of range {self.range_text()} ({self.description})")
        if self.choices is not None and out not in self.choices:
            raise ConfigError(f"{label}: {out!r} is not allowed, must be {self.range_text()} ({self.description})")
        return out


def _parse_text(text: str):
    """A value's text as YAML (the project's bounded loader); text that is not YAML stays text."""
    from legged_wbc.robot import load_yaml_text

    try:
        return load_yaml_text(text, "value")
    except ConfigError:
        return text


def _spec_of(f: dataclasses.Field, name: str) -> FieldSpec:
    m = f.metadata["param"]
    desc = m["desc"] + (f" [{m['unit']}]" if m["unit"] else "")
    return FieldSpec(name=name, type=m["type"], default=f.default, min=m["lo"], max=m["hi"], choices=m["choices"],
                     description=desc, unit=m["unit"], read_only=not m["live"], variable_length=m["variable_length"])


def _prefix_of(obj_or_cls) -> str:
    p = getattr(obj_or_cls, "_prefix", "") or ""
    return p + "." if p and not p.endswith(".") else p


@functools.lru_cache(maxsize=None)
def _fields(cls, prefix: str = "") -> tuple:
    """``(dotted name, field, FieldSpec | None, group class | None)`` for each parameter field;
    built once per class and prefix (declarations do not change), not on every construction."""
    out = []
    for f in dataclasses.fields(cls):
        if "param" in f.metadata:
            out.append((prefix + f.name, f, _spec_of(f, prefix + f.name), None))
        elif "group" in f.metadata:
            out.append((prefix + f.name, f, None, f.metadata["group"]))
    return tuple(out)


def schema(cls, prefix: str = "") -> list[FieldSpec]:
    """Every parameter of ``cls`` (groups flattened to dotted names), in declaration order."""
    out: list[FieldSpec] = []
    for name, _f, spec, grp in _fields(cls, prefix):
        out.extend([spec] if spec is not None else schema(grp, name + "."))
    return out


def specs(cls) -> dict[str, FieldSpec]:
    """:func:`schema` as ``{name: FieldSpec}``."""
    return {s.name: s for s in schema(cls)}


def validate(obj, prefix: str | None = None) -> None:
    """Coerce and check every field of ``obj`` in place (call it from ``__post_init__``)."""
    prefix = _prefix_of(obj) if prefix is None else prefix
    for name, f, spec, grp in _fields(type(obj), prefix):
        v = getattr(obj, f.name)
        if spec is not None:
            v2 = spec.coerce(v)
            if v2 is not v:
                object.__setattr__(obj, f.name, v2)
        elif not isinstance(v, grp):
            raise ConfigError(f"{name}: expected a {grp.__name__}, got {type(v).__name__}")


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings -> dotted names (``{"touchdown": {"n_land": 3}}`` -> ``{"touchdown.n_land": 3}``)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, name + "."))
        else:
            out[name] = v
    return out


def from_flat(cls, flat: Mapping[str, Any] | None = None, prefix: str = ""):
    """Build ``cls`` from ``{dotted name: value}`` (nested mappings accepted too); missing names take
    their defaults, unknown names are a ``ConfigError`` naming them."""
    flat = flatten(flat or {})
    known = specs(cls)
    unknown = sorted(set(flat) - set(known))
    if unknown:
        raise ConfigError(f"unknown parameter(s) {[prefix + u for u in unknown]} (known: {sorted(known)})")
    return _build(cls, {k: known[k].coerce(v) for k, v in flat.items()}, "")


def _build(cls, flat: dict, prefix: str):
    kwargs = {}
    for name, f, spec, grp in _fields(cls, prefix):
        if spec is not None:
            if name in flat:
                kwargs[f.name] = flat[name]
        elif any(k.startswith(name + ".") for k in flat):
            kwargs[f.name] = _build(grp, flat, name + ".")
    return cls(**kwargs)


def to_flat(obj) -> dict[str, Any]:
    """``{dotted name: value}`` of every parameter of ``obj`` (arrays as tuples)."""
    out: dict[str, Any] = {}

    def walk(o, prefix):
        for name, f, spec, _grp in _fields(type(o), prefix):
            v = getattr(o, f.name)
            if spec is not None:
                out[name] = v
            else:
                walk(v, name + ".")

    walk(obj, "")
    return out


def replace(obj, **flat):
    """A validated copy of ``obj`` with some parameters changed (dotted names:
    ``replace(cfg, **{"touchdown.n_land": 3})``); cross-field checks run in ``__post_init__``."""
    values = to_flat(obj)
    values.update(flatten(flat))
    return from_flat(type(obj), values)


def changed_names(old, new) -> list[str]:
    """The parameters whose values differ between two configs of the same class."""
    a, b = to_flat(old), to_flat(new)
    return [k for k in a if a[k] != b[k]]


def subset(obj, cls):
    """A ``cls`` built from the fields of ``obj`` that ``cls`` has (node config -> math config)."""
    return cls(**{f.name: getattr(obj, f.name) for f in dataclasses.fields(cls) if f.init})


# ------------------------------------------------------------------------------------ YAML
def ros_params_block(path: str | Path, node_name: str) -> dict:
    """The ``ros__parameters`` block of ``node_name`` (or ``/node_name``, ``/**``) in a standard ROS 2
    parameter YAML, flattened to dotted names. YAML errors name the file and the line."""
    from legged_wbc.robot import load_yaml_file

    d = load_yaml_file(path) or {}
    if not isinstance(d, Mapping):
        raise ConfigError(f"{path}: a parameter file must be a mapping of node names")
    for key in (node_name, f"/{node_name}", "/**"):
        block = d.get(key)
        if isinstance(block, Mapping) and "ros__parameters" in block:
            params = block["ros__parameters"] or {}
            if not isinstance(params, Mapping):
                raise ConfigError(f"{path}: {key}.ros__parameters must be a mapping")
            return flatten(params)
    raise ConfigError(f"{path}: no '{node_name}: ros__parameters:' block")


def _strip_reserved(flat: dict) -> dict:
    return {k: v for k, v in flat.items()
            if k not in ROS_RESERVED and not k.startswith(ROS_RESERVED_PREFIXES)}


def load_node_config(cls, path: str | Path, node_name: str, overrides: Mapping[str, Any] | None = None):
    """``cls`` from the ``node_name: ros__parameters:`` block of ``path``, then ``overrides``
    (dotted names or nested mappings). Unknown names, bad types and out-of-range values raise a
    ``ConfigError`` naming the parameter (and the file)."""
    flat = _strip_reserved(ros_params_block(path, node_name))
    try:
        cfg = from_flat(cls, flat)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return replace(cfg, **dict(overrides)) if overrides else cfg
