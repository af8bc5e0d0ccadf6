"""A synchronous client of a node's ``rcl_interfaces`` parameter services (``legged-wbc param``)."""

from __future__ import annotations

import os


TYPE_NAMES = {0: "not set", 1: "bool", 2: "integer", 3: "double", 4: "string", 5: "byte array",
              6: "bool array", 7: "integer array", 8: "double array", 9: "string array"}


def _node_name(name: str) -> str:
    return name if name.startswith("/") else "/" + name


def parameter_value_to_python(pv):
    """``rcl_interfaces/ParameterValue`` -> Python value (None if not set)."""
    from rcl_interfaces.msg import ParameterType as T

    return {
        T.PARAMETER_NOT_SET: lambda: None,
        T.PARAMETER_BOOL: lambda: pv.bool_value,
        T.PARAMETER_INTEGER: lambda: pv.integer_value,
        T.PARAMETER_DOUBLE: lambda: pv.double_value,
        T.PARAMETER_STRING: lambda: pv.string_value,
        T.PARAMETER_BYTE_ARRAY: lambda: list(pv.byte_array_value),
        T.PARAMETER_BOOL_ARRAY: lambda: list(pv.bool_array_value),
        T.PARAMETER_INTEGER_ARRAY: lambda: list(pv.integer_array_value),
        T.PARAMETER_DOUBLE_ARRAY: lambda: list(pv.double_array_value),
        T.PARAMETER_STRING_ARRAY: lambda: list(pv.string_array_value),
    }[pv.type]()


def value_for_type(text: str, ptype: int):
    """Parse ``text`` (YAML) into a value of parameter type ``ptype``; raises ValueError."""
    import yaml
    from rcl_interfaces.msg import ParameterType as T

    if ptype == T.PARAMETER_STRING:
        return text
    try:
        v = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"cannot parse {text!r}: {exc}") from None

    def scalar(x, t):
        if t == T.PARAMETER_BOOL:
            if isinstance(x, bool):
                return x
        elif t == T.PARAMETER_INTEGER:
            if isinstance(x, int) and not isinstance(x, bool):
                return x
            if isinstance(x, float) and x.is_integer():
                return int(x)
        elif t == T.PARAMETER_DOUBLE:
            if isinstance(x, (int, float)) and not isinstance(x, bool):
                return float(x)
            if isinstance(x, str) and x.strip().lower() in ("nan", ".nan", "inf", "-inf", ".inf", "-.inf"):
                return float(x.strip().lower().replace(".", ""))
        elif t == T.PARAMETER_STRING:
            return str(x)
        raise ValueError(f"{text!r} is not a valid {TYPE_NAMES.get(t, t)}")

    elem = {T.PARAMETER_BOOL_ARRAY: T.PARAMETER_BOOL, T.PARAMETER_INTEGER_ARRAY: T.PARAMETER_INTEGER,
            T.PARAMETER_DOUBLE_ARRAY: T.PARAMETER_DOUBLE, T.PARAMETER_STRING_ARRAY: T.PARAMETER_STRING}
    if ptype in elem:
        if not isinstance(v, list):
            raise ValueError(f"{text!r} is not a list (use [a, b, ...])")
        return [scalar(x, elem[ptype]) for x in v]
    if ptype in (T.PARAMETER_BOOL, T.PARAMETER_INTEGER, T.PARAMETER_DOUBLE):
        return scalar(v, ptype)
    raise ValueError(f"setting parameters of type {TYPE_NAMES.get(ptype, ptype)} is not supported")


class UnknownParameter(LookupError):
    """The node has no parameter of that name (the message says which node, and the closest names)."""


class ParamClient:
    """Synchronous client of one node's parameter services."""

    def __init__(self, node_name: str, timeout: float = 5.0):
        os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
        import rclpy
        from rcl_interfaces.srv import DescribeParameters, GetParameters, ListParameters, SetParameters

        self._rclpy = rclpy
        self._own_context = not rclpy.ok()
        if self._own_context:
            rclpy.init(args=[])
        self.node = rclpy.create_node(f"legged_wbc_param_{os.getpid()}", start_parameter_services=False,
                                      enable_rosout=False)
        self.target = _node_name(node_name)
        self.timeout = timeout
        self.clients = {
            "get": self.node.create_client(GetParameters, f"{self.target}/get_parameters"),
            "set": self.node.create_client(SetParameters, f"{self.target}/set_parameters"),
            "list": self.node.create_client(ListParameters, f"{self.target}/list_parameters"),
            "describe": self.node.create_client(DescribeParameters, f"{self.target}/describe_parameters"),
        }
        self._types = {"get": GetParameters, "set": SetParameters, "list": ListParameters,
                       "describe": DescribeParameters}

    def close(self) -> None:
        self.node.destroy_node()
        if self._own_context and self._rclpy.ok():
            self._rclpy.shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def call(self, which: str, **fields):
        client = self.clients[which]
        if not client.wait_for_service(timeout_sec=self.timeout):
            raise TimeoutError(f"node {self.target} not reachable ({which}_parameters service not available "
                               f"within {self.timeout:g} s; ROS_DOMAIN_ID={os.environ.get('ROS_DOMAIN_ID', '0')})")
        req = self._types[which].Request(**fields)
        fut = client.call_async(req)
        self._rclpy.spin_until_future_complete(self.node, fut, timeout_sec=self.timeout)
        if not fut.done():
            raise TimeoutError(f"node {self.target}: no answer to {which}_parameters within {self.timeout:g} s")
        return fut.result()

    def describe(self, name: str):
        """The descriptor of ``name``; raises :class:`UnknownParameter` if the node has no such parameter."""
        res = self.call("describe", names=[name])
        if not res.descriptors:      # rclpy answers an undeclared name with an empty list
            raise UnknownParameter(self._unknown(name))
        return res.descriptors[0]

    def get(self, name: str):
        """The value of ``name``; raises :class:`UnknownParameter` if the node has no such parameter."""
        res = self.call("get", names=[name])
        if not res.values:
            raise UnknownParameter(self._unknown(name))
        return res.values[0]

    def _unknown(self, name: str) -> str:
        """``parameter X is not declared on /node`` (+ the closest declared names)."""
        import difflib

        try:
            names = list(self.call("list", prefixes=[], depth=0).result.names)
        except TimeoutError:
            names = []
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
        return (f"parameter {name} is not declared on {self.target}"
                + (f" (did you mean {', '.join(close)}?)" if close else f" ({len(names)} parameters: "
                   f"legged-wbc param list {self.target.lstrip('/')})" if names else ""))

    def set(self, name: str, text: str):
        """Set from text; returns ``(successful, reason, value)``."""
        from rcl_interfaces.msg import Parameter as ParameterMsg

        d = self.describe(name)
        if d.type == 0:
            cur = self.get(name)
            if cur.type == 0:
                raise UnknownParameter(self._unknown(name))
            ptype = cur.type
        else:
            ptype = d.type
        value = value_for_type(text, ptype)
        from rclpy.parameter import Parameter

        p: ParameterMsg = Parameter(name, Parameter.Type(ptype), value).to_parameter_msg()
        res = self.call("set", parameters=[p]).results[0]
        return res.successful, res.reason, value


def describe_text(name: str, d) -> str:
    lines = [f"{name}: {TYPE_NAMES.get(d.type, d.type)}" + (" (read-only)" if d.read_only else "")]
    if d.description:
        lines.append(f"  description: {d.description}")
    if d.floating_point_range:
        r = d.floating_point_range[0]
        lines.append(f"  range: [{r.from_value:g}, {r.to_value:g}]" + (f" step {r.step:g}" if r.step else ""))
    if d.integer_range:
        r = d.integer_range[0]
        lines.append(f"  range: [{r.from_value}, {r.to_value}]" + (f" step {r.step}" if r.step else ""))
    if d.additional_constraints:
        lines.append(f"  constraints: {d.additional_constraints}")
    return "\n".join(lines)
