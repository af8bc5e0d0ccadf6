"""``legged-wbc launch``, ``legged-wbc param`` and ``legged-wbc example-controller``: the ROS 2 command-line
pieces we cannot pip-install, and the example outside controller.

* ``legged-wbc launch walking_sim [name:=value ...] [--dry-run] [--show-args]`` runs
  ``launch/walking_sim.launch.xml`` (or any launch file path) with :mod:`legged_wbc.ros.tooling.launcher`.
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
import sys


# ------------------------------------------------------------------------------------ launch
def cmd_launch(args) -> int:
    from legged_wbc.ros.tooling.launcher import LaunchError, describe_arguments, launch, load_launch, resolve_launch_file

    from legged_wbc.ros.stack.params_check import check_launch

    # the flags may also come after the launch arguments (argparse.REMAINDER keeps them there)
    rest, ros = [], None
    for a in args.args:
        if ros is not None:
            ros.append(a)
        elif a == "--ros-args":
            ros = []
        elif a == "--dry-run":
            args.dry_run = True
        elif a == "--show-args":
            args.show_args = True
        elif a.startswith("-"):
            print(f"legged-wbc launch: unknown option {a}", file=sys.stderr)
            return 2
        else:
            rest.append(a)
    if ros is not None:
        more, why = ros_args_as_launch_args(ros)
        if why:
            print(f"legged-wbc launch: {why}", file=sys.stderr)
            return 2
        rest += more
    args.args = rest
    _check_file_arguments(rest)
    try:
        if args.show_args:
            plan = load_launch(resolve_launch_file(args.launch_file), {}, strict=False)
            print(describe_arguments(plan))
            return 0
        return launch(args.launch_file, args.args, dry_run=args.dry_run, check=check_launch)
    except LaunchError as exc:
        print(f"legged-wbc launch: {exc}", file=sys.stderr)
        return 2


def ros_args_as_launch_args(ros: list[str]) -> tuple[list[str], str | None]:
    """``--ros-args`` given to ``legged-wbc launch`` as the launch arguments they mean (every node gets them):
    ``--log-level L`` -> ``log_level:=L``, ``--params-file F`` -> ``params_file:=F``, ``-p use_sim_time:=B``
    -> ``use_sim_time:=B``; anything else: (``[]``, one line saying what to use instead)."""
    out, i = [], 0
    while i < len(ros):
        a, v = ros[i], ros[i + 1] if i + 1 < len(ros) else None
        if a in ("--log-level", "--params-file") and v is not None and not v.startswith("-"):
            out.append(f"{'log_level' if a == '--log-level' else 'params_file'}:={v}")
        elif a in ("-p", "--param") and v is not None and v.startswith("use_sim_time:="):
            out.append(v)
        else:
            return [], (f"--ros-args {' '.join(ros[i:i + 2])}: not taken here; the launch arguments are "
                        "log_level:=LEVEL, params_file:=PATH (any node's parameters, /** for all), "
                        "use_sim_time:=true|false (see --show-args)")
        i += 2
    return out, None


def cmd_example_controller(args) -> int:
    """``legged-wbc example-controller``: the example node, its ``stance`` the robot's nominal one."""
    from legged_wbc.model import RobotModel
    from legged_wbc.ros.stack.example_controller import main as example

    stance = ", ".join(f"{q:.6f}" for q in RobotModel(args.robot).stance_joint_positions())
    ros = list(args.ros_args)
    if "--ros-args" not in ros:
        ros.append("--ros-args")
    ros[ros.index("--ros-args") + 1:ros.index("--ros-args") + 1] = ["-p", f"stance:=[{stance}]"]
    return example(["legged-wbc", *ros])


def _check_file_arguments(launch_args: list[str]) -> None:
    """``scenario:=`` and ``robot:=`` loaded (and checked) here, before any node starts: a bad file is
    one line and exit status 2 from the launcher, not one line per node and a crashed launch."""
    from legged_wbc.robot import load_robot_config
    from legged_wbc.scenario import load_scenario

    for a in launch_args:
        name, sep, value = a.partition(":=")
        if sep and value not in ("", "none"):
            if name == "scenario":
                load_scenario(value)
            elif name == "robot":
                load_robot_config(value)


# ------------------------------------------------------------------------------------ param
def cmd_param(args) -> int:
    from legged_wbc.ros.tooling.param_client import ParamClient, UnknownParameter, describe_text, parameter_value_to_python

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
                except (TimeoutError, UnknownParameter):
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
    except UnknownParameter as exc:      # like `ros2 param`: one line, exit 1
        print(f"legged-wbc param {args.action}: {exc}", file=sys.stderr)
        return 1
    except TimeoutError as exc:
        print(f"legged-wbc param: {exc}", file=sys.stderr)
        return 2
    return 2


# ------------------------------------------------------------------------------------ registration
def register(sub) -> None:
    s = sub.add_parser("launch", help="run a ROS 2 XML launch file (e.g. walking_sim) with name:=value arguments",
                       description="Run launch/NAME.launch.xml (or a launch file path) like 'ros2 launch': "
                                   "one process per <node> of the file (walking_sim: one container process "
                                   "hosting every node by default, layout:=processes for one process per node), "
                                   "output prefixed [node], Ctrl-C stops all.")
    s.add_argument("launch_file", help="walking_sim, or a path to a .launch.xml file")
    s.add_argument("args", nargs=argparse.REMAINDER, metavar="name:=value",
                   help="launch arguments, e.g. controller:=cbf record:=bags/run1 duration:=10 "
                        "(see --show-args)")
    s.add_argument("--dry-run", action="store_true", help="print the node command lines and exit")
    s.add_argument("--show-args", action="store_true", help="list the launch file's arguments and exit")
    s.set_defaults(func=cmd_launch)

    s = sub.add_parser("example-controller", help="run the example outside controller (a joint PD holding the "
                       "stance) for walking_sim controller:=external",
                       description="A plain rclpy node answering every control tick's /joint_states sample with a "
                                   "/joint_torque_cmd (the command protocol: the manual, docs/own-controller.md). Its source, "
                                   "legged_wbc/ros/stack/example_controller.py, is the example to copy. ROS arguments "
                                   "after --ros-args (e.g. -p kp:=400.0).")
    s.add_argument("--robot", default="hexapod", help="robot config whose nominal stance to stand in")
    s.add_argument("ros_args", nargs=argparse.REMAINDER, help="--ros-args ... (parameters kp, kd, stance, "
                   "rise_time; remaps)")
    s.set_defaults(func=cmd_example_controller)

    s = sub.add_parser("param", help="get/set/list/describe parameters of a running node (live tuning)",
                       description="Live parameter access through the rcl_interfaces services, like 'ros2 param'.")
    s.add_argument("action", choices=("get", "set", "list", "describe"),
                   help="get NAME, set NAME VALUE, list (every parameter name), describe NAME (type, range, "
                        "description)")
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
