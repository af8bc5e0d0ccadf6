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

import yaml

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
        self._check_types()
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
        """A section of this node (or a wildcard one, for the types) in a ``--params-file`` of the
        process naming a parameter it does not declare (rclpy would ignore it), or giving one a value
        of a type it does not take (rcl keeps the type of the first file that gives a value, so a
        wrongly typed value after the defaults' file would be dropped silently):
        :class:`ParameterSchemaError`, one line naming the file, the node, the parameter (and the
        closest names, or the expected and the given type)."""
        fqn = self.node.get_fully_qualified_name()
        for path in params_files(sys.argv):
            try:
                sections = file_parameters(path)
            except ConfigError:
                continue                          # rcl read it (the process started): its reading stands
            for section, values in sections.items():
                own = section_matches(section, fqn, wildcards=False)
                if not (own or section_matches(section, fqn)):
                    continue
                for name, (given, text) in values.items():
                    spec = self.specs.get(name)
                    if own and (why := unknown_name(name, self.specs)) is not None:
                        raise ParameterSchemaError(f"params file {path}: {section}: {why}")
                    if spec is not None and (why := type_refusal(spec, given, text)) is not None:
                        node = section if own else f"{section} ({fqn})"
                        raise ParameterSchemaError(f"params file {path}: {node}: {why}")

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

    def _check_types(self) -> None:
        """A start-up value (parameter file, ``-p``) of a type the parameter does not take, after the
        conversions of :meth:`_fix_overrides`: :class:`ParameterSchemaError`, one line naming the node,
        the parameter, the expected and the given type (rclpy would refuse it with a traceback, or a
        value the node derives at start-up would silently replace it)."""
        Type = self._Parameter.Type
        names = {Type.BOOL: "bool", Type.INTEGER: "integer", Type.DOUBLE: "double", Type.STRING: "string",
                 Type.BYTE_ARRAY: "byte array", Type.BOOL_ARRAY: "bool array", Type.INTEGER_ARRAY: "integer array",
                 Type.DOUBLE_ARRAY: "double array", Type.STRING_ARRAY: "string array"}
        for name, p in self._overrides().items():
            spec = self.specs.get(name)
            if spec is None or p.type_ == Type.NOT_SET:
                continue
            given = names.get(p.type_, str(p.type_))
            text = str(list(p.value)) if given.endswith("array") else str(p.value)
            if (why := type_refusal(spec, given, text)) is not None:
                raise ParameterSchemaError(f"{self.node.get_fully_qualified_name()}: {why}")

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


# ROS's names of the parameter types (rcl's, as its messages say them) per schema type
ROS_TYPE_NAMES = {"bool": "bool", "int": "integer", "float": "double", "str": "string", "float_array": "double array",
                  "int_array": "integer array", "str_array": "string array", "bool_array": "bool array"}
# the types a start-up value may have per schema type: an integer for a double (as rclcpp takes it), a
# number or a boolean for a string (its text); an empty list is no value (rcl leaves it unset)
ACCEPTED_TYPES = {"bool": {"bool"}, "int": {"integer"}, "float": {"double", "integer"},
                  "str": {"string", "integer", "double", "bool"}, "float_array": {"double array", "integer array"},
                  "int_array": {"integer array"}, "str_array": {"string array"}, "bool_array": {"bool array"}}
_RCL_BOOL = {"y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON",
             "n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"}
_RCL_INT = re.compile(r"\s*[+-]?(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")
_RCL_DOUBLE = re.compile(r"\s*[+-]?((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|0[xX][0-9a-fA-F.]+([pP][+-]?\d+)?|"
                         r"inf(inity)?|nan(\([0-9A-Za-z_]*\))?)", re.IGNORECASE)
_STR_TAG = "tag:yaml.org,2002:str"
_RESOLVER = yaml.resolver.Resolver()        # YAML 1.1's implicit tags (what a plain scalar would be)
_RCL_SPECIAL = {".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF"}


def rcl_scalar_type(node) -> str:
    """The parameter type rcl gives a YAML scalar (a composed ``yaml.ScalarNode``): a quoted or
    ``!!str`` value is a string; else a YAML 1.1 boolean word is a bool, what ``strtol`` reads whole an
    integer, what ``strtod`` reads whole a double (``1e5``, ``.inf``), anything else a string."""
    if node.style in ("'", '"'):
        return "string"
    if node.style is None and node.tag == _STR_TAG and _RESOLVER.resolve(type(node), node.value,
                                                                            (True, False)) != _STR_TAG:
        return "string"                          # !!str 5
    return _plain_type(node.value)


def _plain_type(text: str) -> str:
    if text in _RCL_BOOL:
        return "bool"
    if _RCL_INT.fullmatch(text):
        t = text.strip()
        v = int(t, 8) if re.fullmatch(r"[+-]?0[0-7]+", t) else int(t, 0)
        if -(2 ** 63) <= v < 2 ** 63:
            return "integer"                     # out of range: strtol fails, strtod reads it
    if text in _RCL_SPECIAL:
        return "double"
    if _RCL_DOUBLE.fullmatch(text):
        low = text.lower()
        try:
            return "double" if math.isfinite(float(text)) or "inf" in low or "nan" in low else "string"
        except ValueError:
            return "double"                      # a hexadecimal float: strtod reads it
    return "string"


def rcl_value_type(node) -> str:
    """The parameter type rcl gives a value node: a scalar's (:func:`rcl_scalar_type`), a list's
    ``"<element type> array"`` (``"empty array"``; rcl refuses a list mixing types: ``"mixed array
    (integer, double)"``), ``"null"`` for no value at all."""
    if isinstance(node, yaml.SequenceNode):
        elems = []
        for v in node.value:                    # rcl reads a list of lists as one flat list
            elems += [rcl_value_type(v).removesuffix(" array")] if isinstance(v, yaml.SequenceNode) \
                else [rcl_scalar_type(v) if isinstance(v, yaml.ScalarNode) else "mapping"]
        kinds = list(dict.fromkeys(e for e in elems if e != "empty"))
        if not kinds:
            return "empty array"
        return f"{kinds[0]} array" if len(kinds) == 1 else f"mixed array ({', '.join(kinds)})"
    if isinstance(node, yaml.ScalarNode):
        return "null" if node.value == "" and node.style is None else rcl_scalar_type(node)
    return "mapping"


def file_parameters(path: str) -> dict[str, dict[str, tuple[str, str]]]:
    """``{section: {parameter name: (rcl type, value text)}}`` of a ROS 2 parameters YAML (nested names
    joined by dots; sections ``NODE: ros__parameters: {...}``), read by the project's bounded reader
    (:func:`legged_wbc.description.compose_yaml_file`: size, depth, aliases, UTF-8, a regular file);
    a file it refuses or that is not a mapping: :class:`ConfigError`, one line."""
    from legged_wbc.description import compose_yaml_file

    root = compose_yaml_file(path)
    if root is None:
        return {}
    if not isinstance(root, yaml.MappingNode):
        raise ConfigError(f"{path}: not a parameters file (a mapping of node names to ros__parameters)")
    _no_aliases(root, set(), path)
    out = {}
    for key, body in root.value:
        if not isinstance(body, yaml.MappingNode):
            continue
        for k, v in body.value:
            if isinstance(k, yaml.ScalarNode) and k.value == "ros__parameters" and isinstance(v, yaml.MappingNode):
                out[str(key.value)] = dict(_flat_values(v, ""))
    return out


def _no_aliases(node, seen: set, path) -> None:
    """A node met twice is a YAML alias (``*name``), which rcl does not read: a ConfigError."""
    if id(node) in seen:
        raise ConfigError(f"{path}: YAML anchors / aliases (&name, *name): ROS's parameter file reader does not "
                          "take them; write the values out")
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            _no_aliases(k, seen, path)
            _no_aliases(v, seen, path)
    elif isinstance(node, yaml.SequenceNode):
        for v in node.value:
            _no_aliases(v, seen, path)


def _flat_values(node, prefix: str):
    """``(dotted name, (rcl type, value text))`` of a ``ros__parameters`` mapping node."""
    for k, v in node.value:
        name = f"{prefix}{k.value}"
        if isinstance(v, yaml.MappingNode):
            yield from _flat_values(v, name + ".")
        else:
            text = v.value if isinstance(v, yaml.ScalarNode) else "[" + ", ".join(
                str(getattr(e, "value", "...")) for e in v.value) + "]"
            yield name, (rcl_value_type(v), text)


def type_refusal(spec: FieldSpec, given: str, text: str) -> str | None:
    """Why a start-up value of rcl type ``given`` (text ``text``) is not taken for ``spec``: ``parameter
    NAME: expected a double, given a string ('fast')``; None when it is (:data:`ACCEPTED_TYPES`)."""
    if given in ACCEPTED_TYPES[spec.type] or (given == "empty array" and spec.is_array):
        return None
    expected = f"parameter {spec.name}: expected {_a(ROS_TYPE_NAMES[spec.type])}"
    if given == "null":
        return f"{expected}, given no value (ROS refuses an empty value)"
    shown = text if len(text) <= 40 else text[:37] + "..."
    return f"{expected}, given {_a(given)} ({shown!r})"


def _a(type_name: str) -> str:
    return ("an " if type_name[0] in "aeiou" else "a ") + type_name


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


# ------------------------------------------------------------------------------------ a node process's start
def init_node_process(argv, name: str) -> bool:
    """``rclpy.init`` of a node's process (its own signal handling): False after one line on stderr when
    rcl refuses the command line (a parameter file rcl cannot read, a malformed ``-p``), as a bad
    parameter is (the caller exits 2), instead of an ``RCLError`` traceback."""
    import rclpy
    from rclpy.signals import SignalHandlerOptions

    argv = argv if argv is not None else sys.argv
    try:
        rclpy.init(args=argv, signal_handler_options=SignalHandlerOptions.NO)
    except Exception as exc:  # noqa: BLE001 - rclpy's RCLError (its module is private)
        if type(exc).__name__ != "RCLError":
            raise
        bad = [f for f in params_files(argv) if _unreadable(f) is not None]
        why = _unreadable(bad[0]) if bad else str(exc).splitlines()[0]
        print(f"{name}: {why}", file=sys.stderr, flush=True)
        return False
    return True


def _unreadable(path: str) -> str | None:
    """Why the project's bounded reader refuses a parameter file (one line), None when it reads it."""
    try:
        file_parameters(path)
    except ConfigError as exc:
        return f"params file {exc}"
    return None
