"""Before a launch starts anything: every parameter that a params file of a node names is one a node of
that process declares (what ``docs/parameters.md`` promises; rclpy itself ignores unknown names).

A section keyed by a node's name (``wbc_controller:``, ``/wbc_controller:``) is checked against that
node's parameters; a wildcard section (``/**:``, ``/*:``) against those of every node of the launch it
matches (as in ROS, each node takes the names it declares: a name one of them declares is fine); a section naming no node of the stack is an error too
(``wbc_controler:``). One line names the file, the section, the parameter and the closest names. A value
of a type the parameter does not take (``k_dtheta: "fast"``; typed as rcl types it, an integer taken
for a double as rclcpp does) is one line naming the node, the parameter, the expected and the given
type, and a file the project's bounded YAML reader refuses (size, depth, aliases, not UTF-8, not a
mapping, not a regular file) one line naming it. Each node
checks its own sections again at start-up (:meth:`legged_wbc.ros.nodekit.params.NodeParameters`), which
covers ``ros2 launch`` and hand-started nodes.
"""

from __future__ import annotations

import difflib
import os
import tempfile
from pathlib import Path

from legged_wbc.params import schema
from legged_wbc.robot import ConfigError
from legged_wbc.ros.nodekit.params import file_parameters, section_matches, type_refusal, unknown_name

# the nodes each executable of the stack hosts (the containers: whichever of them it composes)
PROCESS_NODES = {
    "walking_container": ("walking_container", "mujoco_bridge", "state_estimator", "wbc_controller", "bag_recorder"),
    "sim_container": ("sim_container", "mujoco_bridge", "bag_recorder"),
    "control_container": ("control_container", "state_estimator", "wbc_controller"),
    "mujoco_bridge": ("mujoco_bridge",), "state_estimator": ("state_estimator",),
    "wbc_controller": ("wbc_controller",), "bag_recorder": ("bag_recorder",),
}


def node_parameters() -> dict[str, dict]:
    """``{node name: {parameter name: FieldSpec}}`` for every node of the stack."""
    from legged_wbc.ros.recording.bag_writer import RecorderConfig
    from legged_wbc.ros.stack.container import CONTAINER_NODES, ContainerConfig
    from mujoco_bridge.config import BridgeConfig
    from state_estimator.config import EstimatorNodeConfig
    from wbc_controller.config import WbcNodeConfig

    names = {cls: {f.name: f for f in schema(cls)} for cls in (ContainerConfig, BridgeConfig, EstimatorNodeConfig,
                                                                  WbcNodeConfig, RecorderConfig)}
    out = {n: names[ContainerConfig] for n in CONTAINER_NODES.values()}
    out.update(mujoco_bridge=names[BridgeConfig], state_estimator=names[EstimatorNodeConfig],
               wbc_controller=names[WbcNodeConfig], bag_recorder=names[RecorderConfig])
    return out


def _process_nodes(action) -> dict[str, str]:
    """``{fully qualified node name: node}`` of one launched process (a ``NodeAction``)."""
    ns = "/" + action.namespace.strip("/") if action.namespace.strip("/") else ""
    nodes = PROCESS_NODES.get(action.exec, ())
    if action.rename and len(nodes) == 1:
        return {f"{ns}/{action.name}": nodes[0]}
    return {f"{ns}/{n}": n for n in nodes}


def check_section(path: str, section: str, names, nodes: dict[str, str], known: dict[str, dict]) -> str | None:
    """One line if ``section`` of the file ``path`` names an unknown node or parameter for the nodes of
    ``nodes`` (fully qualified name -> stack node: a process's for a node's section, the launch's for a
    wildcard), or gives a parameter a value of a type it does not take (``names``: ``{name: (rcl
    type, text)}``; the node, the parameter, the expected and the given type), else None."""
    hit = [n for fqn, n in nodes.items() if section_matches(section, fqn)]
    if "*" not in section and not hit:
        bare = section.strip("/").rsplit("/", 1)[-1]
        if bare in known:
            return None                          # a node of another process of the launch
        close = difflib.get_close_matches(bare, list(known), n=3, cutoff=0.6)
        return (f"params file {path}: section {section!r} names no node of the stack"
                + (f" (closest: {', '.join(close)})" if close else ""))
    union = set().union(*(known[n] for n in hit)) if hit else set()
    for name in names:
        if hit and (why := unknown_name(name, union)) is not None:
            return f"params file {path}: {section}: {why}"
    if isinstance(names, dict):
        for name, (given, text) in names.items():
            for n in dict.fromkeys(hit):
                spec = known[n].get(name)
                if spec is not None and (why := type_refusal(spec, given, text)) is not None:
                    node = section if section.strip("/") == n else f"{section} ({n})"
                    return f"params file {path}: {node}: {why}"
    return None


def check_plan(plan) -> str | None:
    """The first unknown node or parameter in the params files of a launch plan's nodes (one line), or None."""
    known = node_parameters()
    every = {fqn: n for action in plan.nodes for fqn, n in _process_nodes(action).items()}
    seen = set()
    for action in plan.nodes:
        nodes = _process_nodes(action)
        if not nodes:
            continue                               # not one of ours: its parameters are its business
        for path in action.params_files:
            try:
                sections = file_parameters(path)
            except ConfigError as exc:
                return f"params file {exc}"
            for section, names in sections.items():
                if (path, section, tuple(nodes)) in seen:
                    continue
                seen.add((path, section, tuple(nodes)))
                where = every if "*" in section else nodes
                if (why := check_section(path, section, names, where, known)) is not None:
                    return why
    return None


def check_arguments(plan) -> str | None:
    """The launch arguments before anything starts (one line, or None): every ``-p NAME:=VALUE`` the
    launch gives a node of the stack (``duration:=``, ``watchdog_timeout:=``, ...) through the
    parameter's own validator (type, range, choices: what the node would refuse after the start);
    ``record:=`` a directory that can be created; ``foxglove:=`` only where a node serves it."""
    cfg = plan.configs
    if cfg.get("layout") == "processes" and cfg.get("foxglove", "0").strip() not in ("0", ""):
        return (f"foxglove:={cfg['foxglove']}: layout:=processes has no node that serves the live view "
                "(it is served from the container: use layout:=container or layout:=split)")
    if (why := _record_target(cfg.get("record", ""))) is not None:
        return f"record:={cfg['record']}: {why}"
    known = node_parameters()
    for action in plan.nodes:
        for name, value in action.params:
            for node in _hosted_nodes(action):
                spec = known[node].get(name)
                if spec is None:
                    continue
                try:
                    spec.coerce(value)
                except ConfigError as exc:
                    return f"{name}:={value} ({node}): {exc}"
    return None


CONTAINER_PARTS = {"walking_container": "all", "sim_container": "sim", "control_container": "control"}
PART_NODE_NAMES = {"bridge": "mujoco_bridge", "estimator": "state_estimator", "controller": "wbc_controller",
                   "recorder": "bag_recorder"}


def _hosted_nodes(action) -> list[str]:
    """The stack's nodes one launched process runs with its parameters: a container composes its part's
    nodes without the controller under an outside one (``wbc:=false``) and the recorder only with
    ``record:=`` (:func:`legged_wbc.ros.stack.composition.part_nodes`)."""
    part = CONTAINER_PARTS.get(action.exec)
    if part is None:
        return list(dict.fromkeys(_process_nodes(action).values()))
    from legged_wbc.ros.stack.composition import part_nodes

    given = dict(action.params)
    wbc = given.get("wbc", "true").strip().lower() != "false"
    nodes = [PART_NODE_NAMES[n] for n in part_nodes(part, wbc)
             if n != "recorder" or given.get("record", "").strip() not in ("", "''")]
    return [action.exec] + nodes


def _record_target(record: str) -> str | None:
    """Why a bag cannot be created at ``record`` (it exists; no directory above it can take it), or None."""
    if not record.strip():
        return None
    p = Path(record).expanduser()
    if p.exists() or p.is_symlink():
        return "exists already (a bag is written into a new directory; rosbag2 never overwrites one)"
    up = p.absolute().parent
    while not up.exists():
        up = up.parent
    if not up.is_dir():
        return f"{up} is not a directory"
    try:                         # as root, access() says yes to anything: a directory made and removed says
        os.rmdir(tempfile.mkdtemp(prefix=".legged-wbc-record-check-", dir=up))
    except OSError as exc:
        return f"cannot create a directory in {up} ({exc.strerror or exc})"
    return None


def check_launch(plan) -> str | None:
    """What ``legged-wbc launch`` checks before starting anything: the arguments, then the parameter files."""
    return check_arguments(plan) or check_plan(plan)
