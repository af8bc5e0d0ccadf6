"""``legged-wbc launch`` and ``legged-wbc param``: the ROS 2 command-line pieces we cannot pip-install.

* ``legged-wbc launch walking_sim [name:=value ...] [--dry-run] [--show-args]`` runs
  ``launch/walking_sim.launch.xml`` (or any launch file path) with :mod:`legged_wbc.launcher`.
* ``legged-wbc param get NODE NAME`` / ``param set NODE NAME VALUE`` / ``param list NODE`` /
  ``param describe NODE NAME`` talk to a running node through the standard ``rcl_interfaces``
  parameter services (what ``ros2 param`` does). ``VALUE`` is parsed as YAML and converted to the
  parameter's declared type (``100`` sets a double parameter to 100.0). A rejected ``set`` prints
  the node's reason and exits 1; an unreachable node exits 2.

Both use the environment's ``ROS_DOMAIN_ID``; ``ROS_AUTOMATIC_DISCOVERY_RANGE`` defaults to
``LOCALHOST``.
"""

from __future__ import annotations

import argparse
import os
import sys


# ------------------------------------------------------------------------------------ launch
def cmd_launch(args) -> int:
    from .launcher import LaunchError, describe_arguments, launch, load_launch, resolve_launch_file

    # the flags may also come after the launch arguments (argparse.REMAINDER keeps them there)
    rest = []
    for a in args.args:
        if a == "--dry-run":
            args.dry_run = True
        elif a == "--show-args":
            args.show_args = True
        elif a.startswith("-"):
            print(f"legged-wbc launch: unknown option {a}", file=sys.stderr)
            return 2
        else:
            rest.append(a)
    args.args = rest
    try:
        if args.show_args:
            plan = load_launch(resolve_launch_file(args.launch_file), {}, strict=False)
            print(describe_arguments(plan))
            return 0
        return launch(args.launch_file, args.args, dry_run=args.dry_run)
    except LaunchError as exc:
        print(f"legged-wbc launch: {exc}", file=sys.stderr)
        return 2


# ------------------------------------------------------------------------------------ param
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
        return self.call("describe", names=[name]).descriptors[0]

    def get(self, name: str):
        res = self.call("get", names=[name])
        if not res.values:
            raise KeyError(name)
        return res.values[0]

    def set(self, name: str, text: str):
        """Set from text; returns ``(successful, reason, value)``."""
        from rcl_interfaces.msg import Parameter as ParameterMsg

        d = self.describe(name)
        if d.type == 0:
            cur = self.get(name)
            if cur.type == 0:
                return False, f"parameter {name} is not declared on {self.target}", None
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


def cmd_param(args) -> int:
    try:
        with ParamClient(args.node, timeout=args.timeout) as pc:
            if args.action == "get":
                pv = pc.get(args.name)
                if pv.type == 0:
                    print(f"parameter {args.name} is not set on {pc.target}", file=sys.stderr)
                    return 1
                v = parameter_value_to_python(pv)
                print(f"{args.name}: {v!r}" if not args.value_only else v)
                return 0
            if args.action == "set":
                if args.value is None:
                    print("legged-wbc param set: VALUE missing", file=sys.stderr)
                    return 2
                try:
                    ok, reason, value = pc.set(args.name, args.value)
                except ValueError as exc:
                    print(f"Setting parameter failed: {args.name}: {exc}", file=sys.stderr)
                    return 1
                if ok:
                    print(f"Set parameter successful: {args.name} = {value!r}")
                    return 0
                print(f"Setting parameter failed: {reason}", file=sys.stderr)
                try:
                    print(describe_text(args.name, pc.describe(args.name)), file=sys.stderr)
                except TimeoutError:
                    pass
                return 1
            if args.action == "list":
                names = sorted(pc.call("list", prefixes=[], depth=0).result.names)
                for n in names:
                    print(n)
                return 0
            if args.action == "describe":
                print(describe_text(args.name, pc.describe(args.name)))
                return 0
    except TimeoutError as exc:
        print(f"legged-wbc param: {exc}", file=sys.stderr)
        return 2
    return 2


# ------------------------------------------------------------------------------------ registration
def register(sub) -> None:
    s = sub.add_parser("launch", help="run a ROS 2 XML launch file (e.g. walking_sim) with name:=value arguments",
                       description="Run launch/NAME.launch.xml (or a launch file path) like `ros2 launch`: "
                                   "each node in its own process, output prefixed [node], Ctrl-C stops all.")
    s.add_argument("launch_file", help="walking_sim, or a path to a .launch.xml file")
    s.add_argument("args", nargs=argparse.REMAINDER, metavar="name:=value",
                   help="launch arguments, e.g. controller:=cbf record:=bags/run1 duration:=10 "
                        "(see --show-args)")
    s.add_argument("--dry-run", action="store_true", help="print the node command lines and exit")
    s.add_argument("--show-args", action="store_true", help="list the launch file's arguments and exit")
    s.set_defaults(func=cmd_launch)

    s = sub.add_parser("param", help="get/set/list/describe parameters of a running node (live tuning)",
                       description="Live parameter access through the rcl_interfaces services, like `ros2 param`.")
    s.add_argument("action", choices=("get", "set", "list", "describe"))
    s.add_argument("node", help="node name, e.g. wbc_controller or /mujoco_bridge")
    s.add_argument("name", nargs="?", help="parameter name")
    s.add_argument("value", nargs="?", help="new value (set), parsed as YAML and converted to the declared type")
    s.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the node [s]")
    s.add_argument("--value-only", action="store_true", help="get: print only the value")

    def _run(args):
        if args.action in ("get", "set", "describe") and not args.name:
            print(f"legged-wbc param {args.action}: NAME missing", file=sys.stderr)
            return 2
        return cmd_param(args)

    s.set_defaults(func=_run)
