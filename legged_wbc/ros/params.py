"""Declare ROS 2 parameters from a schema, with descriptions, ranges and validated live updates.

A *schema* is a list of entries, each one of

* a dict ``{"name", "type", "default", "min", "max", "choices", "description", "read_only"}``
  (the format of :func:`legged_wbc.params.schema`; ``type`` one of ``bool``, ``int``, ``float``,
  ``str``, ``float_array``, ``int_array``, ``str_array``, ``bool_array``; missing ``type`` is
  inferred from ``default``), or
* a :class:`ParamSpec`;

or a parameter dataclass *class* whose fields carry ``lo``/``hi``/``desc``/``choices`` metadata
(converted with :func:`legged_wbc.params.schema`).

:class:`NodeParameters` declares every entry on a node with a ``ParameterDescriptor`` (the
description, with units; ``FloatingPointRange``/``IntegerRange`` from ``min``/``max``; the allowed
choices listed in ``additional_constraints``; ``read_only``). Initial values come from the node's
parameter overrides (``--params-file config/<node>.yaml``, ``-p name:=value``) and are validated at
startup (an out-of-range value in a YAML file is an error naming the parameter). Live updates
(``legged-wbc param set NODE NAME VALUE``, or any ``SetParameters`` client) are checked by an
on-set-parameters callback: out-of-range, non-finite, wrong-choice or wrongly-typed values are
rejected with a reason that names the parameter and its range; accepted values are stored in
:attr:`NodeParameters.values` and the user's ``on_change(changed: dict)`` is called, so the node
picks the change up at its next cycle. rclpy's own descriptor check runs first for scalar ranges,
and its reason (``Parameter NAME out of range Min: a, Max: b, value: v``) also names both.

An integer given for a ``float`` parameter (``duration:=10`` on a command line, ``kp: 100`` in a
YAML file) is accepted and stored as a float, and a number for a ``str`` parameter as its text, as
users expect (start-up values only; live updates must have the declared type, which
``legged-wbc param set`` takes care of).
"""

from __future__ import annotations

import dataclasses
import math
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterable

TYPES = ("bool", "int", "float", "str", "float_array", "int_array", "str_array", "bool_array")


class ParameterSchemaError(ValueError):
    """A schema entry or an initial parameter value is invalid; the message names the parameter."""


@dataclass(frozen=True)
class ParamSpec:
    """One parameter: name, default, description (with units), type and limits."""

    name: str
    default: Any
    description: str = ""
    type: str | None = None
    min: float | None = None
    max: float | None = None
    choices: tuple | None = None
    read_only: bool = False

    def __post_init__(self):
        typ = self.type or infer_type(self.default)
        if typ not in TYPES:
            raise ParameterSchemaError(f"parameter {self.name}: unknown type {typ!r} (one of {TYPES})")
        object.__setattr__(self, "type", typ)
        if typ.endswith("_array") and isinstance(self.default, tuple):
            object.__setattr__(self, "default", list(self.default))
        if self.choices is not None:
            object.__setattr__(self, "choices", tuple(self.choices))
        err = self.check(self.coerce(self.default))
        if err:
            raise ParameterSchemaError(f"default of {err}")

    # ---------------------------------------------------------------- helpers
    def range_text(self) -> str:
        if self.choices:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        lo = "-inf" if self.min is None else f"{self.min:g}"
        hi = "inf" if self.max is None else f"{self.max:g}"
        return f"[{lo}, {hi}]"

    def coerce(self, value):
        """The value converted to this parameter's type (int -> float, tuple -> list); raises TypeError."""
        if self.type.endswith("_array"):
            if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
                raise TypeError(f"expected a list, got {value!r}")
            elem = self.type[: -len("_array")]
            return [_coerce_scalar(elem, x) for x in value]
        return _coerce_scalar(self.type, value)

    def check(self, value) -> str | None:
        """``None`` if ``value`` (already coerced) is allowed, else a reason naming the parameter."""
        values = value if self.type.endswith("_array") else [value]
        for k, v in enumerate(values):
            label = f"{self.name}[{k}]" if self.type.endswith("_array") else self.name
            if self.choices is not None and v not in self.choices:
                return f"{label}: {v!r} is not allowed, must be {self.range_text()} ({self.description})"
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                if isinstance(v, float) and math.isnan(v):
                    return f"{label}: NaN is not allowed, range {self.range_text()} ({self.description})"
                if (self.min is not None and v < self.min) or (self.max is not None and v > self.max):
                    return f"{label}: {v!r} out of range {self.range_text()} ({self.description})"
        return None

    def descriptor(self):
        from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor, ParameterType

        ptype = {
            "bool": ParameterType.PARAMETER_BOOL, "int": ParameterType.PARAMETER_INTEGER,
            "float": ParameterType.PARAMETER_DOUBLE, "str": ParameterType.PARAMETER_STRING,
            "float_array": ParameterType.PARAMETER_DOUBLE_ARRAY,
            "int_array": ParameterType.PARAMETER_INTEGER_ARRAY,
            "str_array": ParameterType.PARAMETER_STRING_ARRAY,
            "bool_array": ParameterType.PARAMETER_BOOL_ARRAY,
        }[self.type]
        d = ParameterDescriptor(name=self.name, type=ptype, description=self.description,
                                read_only=self.read_only)
        has_range = self.min is not None or self.max is not None
        if self.type == "float" and has_range:
            d.floating_point_range = [FloatingPointRange(
                from_value=-math.inf if self.min is None else float(self.min),
                to_value=math.inf if self.max is None else float(self.max), step=0.0)]
        elif self.type == "int" and has_range:
            d.integer_range = [IntegerRange(
                from_value=-(2**63) if self.min is None else int(math.ceil(self.min)),
                to_value=2**63 - 1 if self.max is None else int(math.floor(self.max)), step=0)]
        constraints = []
        if self.choices is not None:
            constraints.append("one of: " + ", ".join(str(c) for c in self.choices))
        if self.type.endswith("_array") and has_range:
            constraints.append(f"each element in {self.range_text()}")
        d.additional_constraints = "; ".join(constraints)
        return d


def _coerce_scalar(t: str, value):
    if t == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"expected a number, got {value!r}")
        return float(value)
    if t == "int":
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"expected an integer, got {value!r}")
        return value
    if t == "bool":
        if not isinstance(value, bool):
            raise TypeError(f"expected true/false, got {value!r}")
        return value
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


def infer_type(default) -> str:
    if isinstance(default, bool):
        return "bool"
    if isinstance(default, int):
        return "int"
    if isinstance(default, float):
        return "float"
    if isinstance(default, str):
        return "str"
    if isinstance(default, (list, tuple)):
        if not default:
            raise ParameterSchemaError("cannot infer the type of an empty list default; give 'type'")
        return infer_type(default[0]) + "_array"
    raise ParameterSchemaError(f"cannot infer a parameter type from {default!r}")


def normalize_schema(schema) -> list[ParamSpec]:
    """A list of :class:`ParamSpec` from dicts, ParamSpecs or a parameter dataclass class."""
    if isinstance(schema, type) and dataclasses.is_dataclass(schema):
        from legged_wbc.params import schema as dataclass_schema

        schema = dataclass_schema(schema)
    out: list[ParamSpec] = []
    for entry in schema:
        if isinstance(entry, ParamSpec):
            out.append(entry)
        elif isinstance(entry, dict):
            out.append(ParamSpec(
                name=entry["name"], default=entry["default"], description=entry.get("description", ""),
                type=entry.get("type"), min=entry.get("min"), max=entry.get("max"),
                choices=entry.get("choices"), read_only=bool(entry.get("read_only", False))))
        else:
            raise ParameterSchemaError(f"schema entry {entry!r}: expected a dict or ParamSpec")
    names = [p.name for p in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ParameterSchemaError(f"duplicate parameter(s) in schema: {dup}")
    return out


class NodeParameters:
    """Parameters of one node, declared from a schema and validated on every change.

    ``values`` always holds the accepted values (plain Python types). ``on_change(changed)`` is
    called (from the executor thread) with ``{name: new_value}`` after a live update was accepted.
    ``validate(candidate) -> reason | None`` may reject a combination of values (the full
    candidate dict is passed).
    """

    def __init__(self, node, schema, on_change: Callable[[dict], None] | None = None,
                 validate: Callable[[dict], str | None] | None = None):
        from rclpy.parameter import Parameter

        self.node = node
        self.specs = {p.name: p for p in normalize_schema(schema)}
        self.on_change = on_change
        self.validate = validate
        self._lock = threading.Lock()
        self._fix_overrides()
        values = {}
        for spec in self.specs.values():
            try:
                if spec.type.endswith("_array") and not spec.default:
                    # rclpy infers BYTE_ARRAY from an empty list, and a parameter declared by type only
                    # stays uninitialized (get_parameter raises): declare it with a one-element value
                    # of the right type, then empty it unless a file / the command line gave one
                    ptype = Parameter.Type(spec.descriptor().type)
                    placeholder = {"str_array": [""], "float_array": [0.0], "int_array": [0],
                                   "bool_array": [False]}[spec.type]
                    overridden = spec.name in getattr(node, "_parameter_overrides", {})
                    p = node.declare_parameter(spec.name, placeholder, spec.descriptor())
                    if not overridden:
                        node.set_parameters([Parameter(spec.name, ptype, [])])
                        p = node.get_parameter(spec.name)
                else:
                    p = node.declare_parameter(spec.name, spec.default, spec.descriptor())
            except Exception as exc:  # InvalidParameterValueException / TypeException
                raise ParameterSchemaError(f"parameter {spec.name}: {exc}") from exc
            value = p.value
            if spec.type.endswith("_array"):
                value = list(value) if value is not None else []
            try:
                value = spec.coerce(value)
            except TypeError as exc:
                raise ParameterSchemaError(f"parameter {spec.name}: {exc}") from exc
            err = spec.check(value)
            if err:
                raise ParameterSchemaError(err)
            values[spec.name] = value
        if validate is not None:
            err = validate(dict(values))
            if err:
                raise ParameterSchemaError(err)
        self.values: dict[str, Any] = values
        self._pending: dict[str, Any] = {}
        node.add_on_set_parameters_callback(self._on_set)
        node.add_post_set_parameters_callback(self._post_set)
        self._Parameter = Parameter

    # ---------------------------------------------------------------- access
    def __getitem__(self, name: str):
        return self.values[name]

    def get(self, name: str, default=None):
        return self.values.get(name, default)

    def as_dict(self) -> dict:
        return dict(self.values)

    # ---------------------------------------------------------------- internals
    def _fix_overrides(self) -> None:
        """Turn integer overrides of float parameters (``duration:=10``) into floats before declaring."""
        from rclpy.parameter import Parameter

        overrides = getattr(self.node, "_parameter_overrides", None)
        if not isinstance(overrides, dict):
            return
        for name, spec in self.specs.items():
            p = overrides.get(name)
            if p is None:
                continue
            if spec.type == "float" and p.type_ == Parameter.Type.INTEGER:
                overrides[name] = Parameter(name, Parameter.Type.DOUBLE, float(p.value))
            elif spec.type == "str" and p.type_ not in (Parameter.Type.STRING, Parameter.Type.NOT_SET):
                # `-p output:=2024` or `record:=123` would otherwise be an integer
                text = p.value if not isinstance(p.value, bool) else str(p.value).lower()
                overrides[name] = Parameter(name, Parameter.Type.STRING, str(text))
            elif spec.type == "float_array" and p.type_ == Parameter.Type.INTEGER_ARRAY:
                overrides[name] = Parameter(name, Parameter.Type.DOUBLE_ARRAY, [float(x) for x in p.value])

    def _on_set(self, params):
        from rcl_interfaces.msg import SetParametersResult

        candidate = dict(self.values)
        changed = {}
        for p in params:
            spec = self.specs.get(p.name)
            if spec is None:
                continue  # not ours (e.g. use_sim_time): rclpy validates it
            if spec.read_only:
                return SetParametersResult(successful=False, reason=f"{p.name} is read-only (set it at startup)")
            value = p.value
            if spec.type.endswith("_array") and value is not None:
                value = list(value)
            try:
                value = spec.coerce(value)
            except TypeError as exc:
                return SetParametersResult(successful=False, reason=f"{p.name}: {exc} ({spec.type})")
            err = spec.check(value)
            if err:
                return SetParametersResult(successful=False, reason=err)
            candidate[p.name] = value
            changed[p.name] = value
        if changed and self.validate is not None:
            err = self.validate(candidate)
            if err:
                return SetParametersResult(successful=False, reason=err)
        with self._lock:
            self._pending = changed
        return SetParametersResult(successful=True)

    def _post_set(self, params):
        with self._lock:
            changed, self._pending = self._pending, {}
            if not changed:
                return
            new = dict(self.values)
            new.update(changed)
            self.values = new  # atomic swap: readers see the old or the new dict, never a mix
        for name, value in changed.items():
            self.node.get_logger().info(f"parameter {name} := {value!r}")
        if self.on_change is not None:
            self.on_change(dict(changed))


def declare(node, schema: Iterable, on_change=None, validate=None) -> NodeParameters:
    """Shorthand for :class:`NodeParameters`."""
    return NodeParameters(node, schema, on_change=on_change, validate=validate)
