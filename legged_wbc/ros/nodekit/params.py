"""ROS 2 parameters declared from a config dataclass (see :mod:`legged_wbc.params`), validated on every change.

:class:`NodeParameters` takes a node and a config dataclass *class* (fields declared with
:func:`legged_wbc.params.param` / :func:`~legged_wbc.params.group`). It declares every field
(dotted names for groups) with a ``ParameterDescriptor``: the description with its unit,
``FloatingPointRange`` / ``IntegerRange`` from the range, the choices (and, for arrays, the element
range) in ``additional_constraints``, ``read_only`` for fields not declared ``live``. Start-up values
come from the node's parameter overrides (``--params-file config/<node>.yaml``, ``-p name:=value``)
and are validated by the core validator (:meth:`legged_wbc.params.FieldSpec.coerce`, then the
dataclass's ``__post_init__`` cross-field checks): a bad value is a :class:`ParameterSchemaError`
naming the parameter. The node gets the typed, frozen config as :attr:`NodeParameters.config`.

Live updates (``legged-wbc param set NODE NAME VALUE``, ``ros2 param set``, any ``SetParameters``
client) are checked in an on-set-parameters callback with the same validator: a read-only field,
an out-of-range, non-finite, wrongly-typed or wrong-choice value, or a combination the dataclass
refuses is rejected with a reason naming the parameter. An accepted update replaces ``config``
atomically (after rclpy stored the values, in the post-set callback) and calls
``on_change(new_config, changed_names)``; the node applies it at its next tick.

An integer given for a ``float`` parameter (``duration:=10``, ``kp: 100`` in a YAML file) is stored
as a float, and a number for a ``str`` parameter as its text (start-up values only; live updates
must have the declared type, which ``legged-wbc param set`` takes care of).
"""

from __future__ import annotations

import types

import dataclasses
import difflib
import math
import re
import sys
import threading
from typing import Any, Callable, Mapping

from legged_wbc import params as core
from legged_wbc.params import FieldSpec
from legged_wbc.robot import ConfigError


class ParameterSchemaError(ConfigError):
    """A schema entry or a start-up parameter value is invalid; the message names the parameter."""


def normalize_schema(cls) -> list[FieldSpec]:
    """The :class:`FieldSpec` list of a config dataclass class (dotted names for groups)."""
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise ParameterSchemaError(f"parameters are declared from a config dataclass class, got {cls!r}")
    out = core.schema(cls)
    names = [p.name for p in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ParameterSchemaError(f"duplicate parameter(s) in schema: {dup}")
    return out


def descriptor(spec: FieldSpec):
    """The ``rcl_interfaces/ParameterDescriptor`` of one field."""
    from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor, ParameterType

    ptype = {
        "bool": ParameterType.PARAMETER_BOOL, "int": ParameterType.PARAMETER_INTEGER,
        "float": ParameterType.PARAMETER_DOUBLE, "str": ParameterType.PARAMETER_STRING,
        "float_array": ParameterType.PARAMETER_DOUBLE_ARRAY, "int_array": ParameterType.PARAMETER_INTEGER_ARRAY,
        "str_array": ParameterType.PARAMETER_STRING_ARRAY, "bool_array": ParameterType.PARAMETER_BOOL_ARRAY,
    }[spec.type]
    d = ParameterDescriptor(name=spec.name, type=ptype, description=spec.description, read_only=spec.read_only)
    has_range = spec.min is not None or spec.max is not None
    if spec.type == "float" and has_range:
        d.floating_point_range = [FloatingPointRange(
            from_value=-math.inf if spec.min is None else float(spec.min),
            to_value=math.inf if spec.max is None else float(spec.max), step=0.0)]
    elif spec.type == "int" and has_range:
        d.integer_range = [IntegerRange(
            from_value=-(2**63) if spec.min is None else int(math.ceil(spec.min)),
            to_value=2**63 - 1 if spec.max is None else int(math.floor(spec.max)), step=0)]
    constraints = []
    if spec.choices is not None:
        constraints.append("one of: " + ", ".join(str(c) for c in spec.choices))
    if spec.is_array and has_range:
        constraints.append(f"each element in {spec.range_text()}")
    if spec.is_array and not spec.variable_length:
        constraints.append(f"exactly {len(spec.default)} values")
    if spec.unit:
        constraints.append(f"unit: {spec.unit}")
    d.additional_constraints = "; ".join(constraints)
    return d


def _ros_value(spec: FieldSpec, value):
    return list(value) if spec.is_array else value


class NodeParameters:
    """Parameters of one node, declared from a config dataclass class and validated on every change.

    ``config``: the accepted typed config; ``values``: the accepted values by name (arrays as lists).
    ``on_change(new_config, changed_names)`` is called from the executor thread after an accepted
    live update. ``startup(config) -> {name: value}``: values the node derives at start-up from the
    others (e.g. a scenario's references), applied on top of the file / command line before
    declaring, read-only fields included. Cross-field checks live in the dataclass's ``__post_init__``.
    """

    def __init__(self, node, schema: type, on_change: Callable | None = None,
                 startup: Callable[[Any], Mapping[str, Any]] | None = None):
        from rclpy.parameter import Parameter

        self.node = node
        self.specs: dict[str, FieldSpec] = {p.name: p for p in normalize_schema(schema)}
        self.cls = schema
        self.on_change = on_change
        self._lock = threading.Lock()
        self._Parameter = Parameter
        self._fix_overrides()
        self._check_files()
        if startup is not None:
            self._apply_startup(startup)
        values = {}
        for spec in self.specs.values():
            values[spec.name] = self._declare(spec)
        try:
            self.config = core.from_flat(self.cls, values)
        except ValueError as exc:
            raise ParameterSchemaError(str(exc)) from None
        self.values: dict[str, Any] = values
        self._pending: tuple | None = None
        node.add_on_set_parameters_callback(self._on_set)
        node.add_post_set_parameters_callback(self._post_set)

    # ---------------------------------------------------------------- access
    def __getitem__(self, name: str):
        return self.values[name]

    def get(self, name: str, default=None):
        return self.values.get(name, default)

    def as_dict(self) -> dict:
        return dict(self.values)

    # ---------------------------------------------------------------- start-up
    def _overrides(self) -> dict:
        o = getattr(self.node, "_parameter_overrides", None)
        return o if isinstance(o, dict) else {}

    def _declare(self, spec: FieldSpec):
        Parameter, node = self._Parameter, self.node
        try:
            if spec.is_array and not spec.default:
                # rclpy infers BYTE_ARRAY from an empty list, and a parameter declared by type only
                # stays uninitialized (get_parameter raises): declare it with a one-element value
                # of the right type, then empty it unless a file / the command line gave one
                d = descriptor(spec)
                placeholder = {"str_array": [""], "float_array": [0.0], "int_array": [0],
                               "bool_array": [False]}[spec.type]
                overridden = spec.name in self._overrides()
                if not overridden and spec.read_only:
                    d.read_only = False      # emptied below, then made read-only again
                p = node.declare_parameter(spec.name, placeholder, d)
                if not overridden:
                    node.set_parameters([Parameter(spec.name, Parameter.Type(d.type), [])])
                    if spec.read_only:
                        node._descriptors[spec.name].read_only = True
                    p = node.get_parameter(spec.name)
            else:
                p = node.declare_parameter(spec.name, _ros_value(spec, spec.default), descriptor(spec))
        except Exception as exc:  # InvalidParameterValueException / TypeException
            raise ParameterSchemaError(f"parameter {spec.name}: {exc}") from exc
        value = p.value
        if spec.is_array:
            value = list(value) if value is not None else []
        try:
            return _ros_value(spec, spec.coerce(value))
        except ConfigError as exc:
            raise ParameterSchemaError(str(exc)) from None

    def _check_files(self) -> None:
        """A section of this node in a ``--params-file`` of the process naming a parameter it does not
        declare: :class:`ParameterSchemaError` naming it and the closest names (rclpy would ignore it)."""
        fqn = self.node.get_fully_qualified_name()
        for path in params_files(sys.argv):
            for section, names in file_sections(path).items():
                if section_matches(section, fqn, wildcards=False):
                    for name in names:
                        if (why := unknown_name(name, self.specs)) is not None:
                            raise ParameterSchemaError(f"params file {path}: {section}: {why}")

    def _start_value(self, spec: FieldSpec):
        p = self._overrides().get(spec.name)
        if p is None or p.value is None:
            return spec.default
        return list(p.value) if spec.is_array else p.value

    def _apply_startup(self, startup) -> None:
        try:
            # the start values as plain attributes: the file's values may hold only with the startup's
            # (a robot's stand height), so the schema's cross-field checks run once, on the result
            start = {n: self._start_value(s) for n, s in self.specs.items()}
            extra = core.flatten(dict(startup(_namespace(start)) or {}))
            cfg = core.from_flat(self.cls, {**start, **extra})
        except ValueError as exc:
            raise ParameterSchemaError(str(exc)) from None
        flat = core.to_flat(cfg)
        overrides = self._overrides()
        for name in extra:
            overrides[name] = self._Parameter(name, value=_ros_value(self.specs[name], flat[name]))

    def _fix_overrides(self) -> None:
        """Turn integer overrides of float parameters (``duration:=10``) into floats before declaring."""
        Parameter = self._Parameter
        overrides = self._overrides()
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

    # ---------------------------------------------------------------- live updates
    def check(self, changes: Mapping[str, Any]):
        """Validate ``{name: value}`` as a live update: ``(new_config_or_None, {name: value}, reason_or_None)``."""
        changed = {}
        for name, value in changes.items():
            spec = self.specs.get(name)
            if spec is None:
                continue  # not ours (e.g. use_sim_time): rclpy validates it
            if spec.read_only:
                return None, {}, f"{name} is read-only (set it at start-up: parameter file or -p {name}:=...)"
            if spec.is_array and value is not None and not isinstance(value, str):
                value = list(value)
            try:
                changed[name] = spec.coerce(value)
            except ConfigError as exc:
                return None, {}, str(exc)
        new = None
        if changed:
            try:
                new = core.replace(self.config, **changed)
            except ValueError as exc:
                return None, {}, str(exc)
        return new, changed, None

    def _on_set(self, params):
        from rcl_interfaces.msg import SetParametersResult

        new, changed, reason = self.check({p.name: p.value for p in params})
        if reason is not None:
            return SetParametersResult(successful=False, reason=reason)
        with self._lock:
            self._pending = (new, changed) if changed else None
        return SetParametersResult(successful=True)

    def _post_set(self, params):
        with self._lock:
            pending, self._pending = self._pending, None
            if pending is None:
                return
            new, changed = pending
            values = dict(self.values)
            values.update({k: _ros_value(self.specs[k], v) for k, v in changed.items()})
            self.values = values  # atomic swaps: readers see the old or the new, never a mix
            self.config = new
        for name in changed:
            self.node.get_logger().info(f"parameter {name} := {values[name]!r}")
        if self.on_change is not None:
            self.on_change(new, list(changed))


# ------------------------------------------------------------------------------------ sim time in a container
SIM_TIME_FEED_PERIOD_S = 0.01


def feed_sim_time(nodes, now_ns: Callable[[], int | None], period_s: float = SIM_TIME_FEED_PERIOD_S):
    """The clocks of the co-located ``nodes`` that have ``use_sim_time`` true follow ``now_ns()`` (sim time
    [ns], None while unknown), set every ``period_s`` from the process's background thread, instead of
    each node's rclpy ``TimeSource`` taking ``/clock`` (1 kHz) through DDS in the executor thread, which
    would hold the GIL away from the control thread. The nodes stay ROS-time nodes (``use_sim_time``
    reads true; ``node.get_clock().now()`` is sim time, e.g. the ``/diagnostics`` stamps), at most
    ``period_s`` of wall time behind. Returns the background job (None when no node uses sim time)."""
    from rosgraph_msgs.msg import Clock

    from legged_wbc.ros.io import time_msg
    from legged_wbc.ros.nodekit import background

    sources = []
    for n in nodes:
        ts = getattr(n, "_time_source", None)
        if ts is None or not ts.ros_time_is_active:
            continue
        if ts._clock_sub is not None:          # its /clock subscription through DDS: replaced by the feed
            n.destroy_subscription(ts._clock_sub)
            ts._clock_sub = None
        sources.append(ts)
    if not sources:
        return None
    last = [None]

    def feed():
        t = now_ns()
        if t is None or t == last[0]:
            return
        last[0] = t
        msg = Clock(clock=time_msg(int(t)))
        for ts in sources:
            ts.clock_callback(msg)

    return background.for_node(nodes[0], period_s, feed, name="sim time feed")


# ------------------------------------------------------------------------------------ parameter files
ROS_PARAMETERS = ("use_sim_time", "start_type_description_service")   # every rclpy node declares these
ROS_PREFIXES = ("qos_overrides.",)


def params_files(argv) -> list[str]:
    """The ``--params-file FILE`` arguments inside ``--ros-args`` of a process's ``argv``."""
    out, ros = [], False
    for i, a in enumerate(argv):
        if a == "--ros-args":
            ros = True
        elif a == "--":
            ros = False
        elif ros and a == "--params-file" and i + 1 < len(argv):
            out.append(argv[i + 1])
    return out


def _flat_names(body, prefix: str = "") -> list[str]:
    out = []
    for k, v in (body or {}).items():
        name = f"{prefix}{k}"
        out += _flat_names(v, name + ".") if isinstance(v, dict) else [name]
    return out


def file_sections(path: str) -> dict[str, list[str]]:
    """``{section: [parameter names]}`` of a ROS 2 parameters YAML (nested names joined by dots); a file
    rcl itself cannot read is left to rcl (which refuses it at start-up)."""
    import yaml

    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return {}
    out = {}
    for section, body in (data or {}).items() if isinstance(data, dict) else ():
        if isinstance(body, dict) and isinstance(body.get("ros__parameters"), dict):
            out[str(section)] = _flat_names(body["ros__parameters"])
    return out


def section_matches(section: str, fqn: str, wildcards: bool = True) -> bool:
    """Does the section key (``/wbc_controller``, ``wbc_controller``, ``/**``, ``/*/x``) apply to the node
    ``fqn`` (``/ns/name``), as rcl matches them (``*`` one name token, ``**`` any number)? Without
    ``wildcards`` only a key naming this node counts."""
    key = section if section.startswith("/") else "/" + section
    if "*" not in key:
        return key == fqn
    if not wildcards:
        return False
    rx = "".join("(/[^/]+)*" if part == "**" else "/" + re.escape(part).replace("\\*", "[^/]*")
                 for part in key.strip("/").split("/"))
    return re.fullmatch(rx, fqn) is not None


def unknown_name(name: str, known) -> str | None:
    """Why ``name`` is not a parameter of ``known`` (names): one line with the closest names; None if it is."""
    if name in known or name in ROS_PARAMETERS or name.startswith(ROS_PREFIXES):
        return None
    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.6)
    return f"unknown parameter {name!r}" + (f" (closest: {', '.join(close)})" if close else "")


def _namespace(flat: dict) -> types.SimpleNamespace:
    """Dotted names ``{"a.b": 1, "c": 2}`` as attributes ``ns.a.b``, ``ns.c`` (a config's fields read by
    name, before the config itself is built)."""
    root: dict = {}
    for name, value in flat.items():
        cur = root
        *heads, last = name.split(".")
        for h in heads:
            cur = cur.setdefault(h, {})
        cur[last] = value

    def build(d: dict) -> types.SimpleNamespace:
        return types.SimpleNamespace(**{k: build(v) if isinstance(v, dict) else v for k, v in d.items()})
    return build(root)
