"""The robot description's shared vocabulary, beneath every way of describing a robot: the error of a
bad configuration, a leg (:class:`LegSpec`), the per-joint table (:class:`JointTable`), the foot point
(:class:`FootGeometry`) and the one bounded YAML loader of every input file. :mod:`legged_wbc.robot`
(generated robots) and :mod:`legged_wbc.urdf_robot` (a robot's own URDF) both build on it; import
these names from :mod:`legged_wbc.robot`, which re-exports them."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml


class ConfigError(ValueError):
    """A configuration value is missing or out of range; the message names it."""


@dataclass(frozen=True)
class LegSpec:
    """One leg as the model, the controller and the simulation see it, whatever described the robot
    (a generated robot's ``leg_type`` or a URDF robot file).

    ``joints``: its 1-DoF joints from the base out (3 or 4); ``foot_link``: the link that carries the
    foot point; ``hip_xyz``: where the leg is attached in the base frame [m] (its first joint's
    origin; orders the legs around the body); ``has_pitch``: the leg has the foot pitch joint, the
    redundant DoF whose relative pitch the paper's tasks and barriers regulate (a 4-DoF leg of the
    paper's kind); a 3-DoF point-foot leg has none."""

    name: str
    joints: tuple[str, ...]
    foot_link: str
    hip_xyz: tuple[float, float, float]
    has_pitch: bool


@dataclass(frozen=True)
class JointTable:
    """Per-joint limits and drive data in the config's canonical joint order (``RobotConfig.joint_names``):
    position limits [rad], peak torque ``effort`` [N m], ``velocity`` limit [rad/s], ``armature``
    (reflected rotor inertia) [kg m^2], the drives' voltage line ``stall_torque`` [N m] /
    ``no_load_speed`` [rad/s] and friction ``coulomb_friction`` [N m] / ``viscous_friction`` [N m s/rad]
    (see :class:`legged_wbc.robot.ActuatorSpec`)."""

    names: tuple[str, ...]
    lower: np.ndarray
    upper: np.ndarray
    effort: np.ndarray
    velocity: np.ndarray
    armature: np.ndarray
    stall_torque: np.ndarray
    no_load_speed: np.ndarray
    coulomb_friction: np.ndarray
    viscous_friction: np.ndarray


@dataclass(frozen=True)
class FootGeometry:
    """Where the foot point sits on the foot link: ``offset`` in the foot-link frame [m]."""

    offset: np.ndarray = field(default_factory=lambda: np.zeros(3))
    radius: float = 0.0


# Bounds of every YAML input (scenario, robot, parameter and sweep files, a bag's metadata.yaml, ``--set``
# values): the project's files are a few kB; a YAML alias repeats its anchor's whole subtree, so a small
# file can stand for billions of nodes ("billion laughs"): the expanded node count is bounded too.
MAX_YAML_BYTES = 1 << 20        # 1 MiB
MAX_YAML_NODES = 100_000        # nodes after alias expansion (a scenario has ~100, a bag's metadata ~1000)


class _Refused(yaml.YAMLError):
    """A well-formed YAML document the loader will not build (too many nodes once expanded, recursive)."""


class _BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a document whose aliases expand to more than
    :data:`MAX_YAML_NODES` nodes, or refer to an enclosing node (a recursive structure)."""

    def get_single_node(self):
        node = super().get_single_node()
        if node is not None:
            _expanded_size(node, {}, set())
        return node


def _expanded_size(node, sizes: dict, open_ids: set) -> int:
    """Nodes in ``node``'s tree with every alias expanded (memoised per shared node, so linear in
    the document); raises ``yaml.YAMLError`` past :data:`MAX_YAML_NODES` or on a cycle."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_ids:
        raise _Refused("a recursive alias (a node that contains itself)")
    open_ids.add(key)
    n = 1
    if isinstance(node, yaml.MappingNode):
        n += sum(_expanded_size(k, sizes, open_ids) + _expanded_size(v, sizes, open_ids) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        n += sum(_expanded_size(v, sizes, open_ids) for v in node.value)
    open_ids.discard(key)
    if n > MAX_YAML_NODES:
        raise _Refused(f"more than {MAX_YAML_NODES} nodes once its aliases are expanded")
    sizes[key] = n
    return n


def load_yaml_text(text: str | bytes, source: str):
    """The one YAML parser of the project's inputs: ``yaml.safe_load`` semantics, bounded (size
    :data:`MAX_YAML_BYTES`, alias expansion :data:`MAX_YAML_NODES`), UTF-8 only. Every failure is one
    :class:`ConfigError` line naming ``source`` (a path, ``--set KEY``) and, for syntax, the line."""
    return _bounded(text, source, lambda t: yaml.load(t, Loader=_BoundedLoader))  # noqa: S506 - SafeLoader


def compose_yaml_file(path: str | Path):
    """The node tree (``yaml.compose``: scalars with their text, style and tag, as a YAML reader
    that types values itself needs them, e.g. rcl's for parameter files) of a file, with the bounds
    and the one-line errors of :func:`load_yaml_file`; None for an empty document."""
    return _bounded(_read_bounded(path), str(path), lambda t: yaml.compose(t, Loader=_BoundedLoader))


def _bounded(text: str | bytes, source: str, parse):
    """``parse(text)`` within the bounds of :func:`load_yaml_text`, every failure one ConfigError line."""
    if len(text) > MAX_YAML_BYTES:
        raise ConfigError(f"{source}: larger than {MAX_YAML_BYTES} bytes, the most a YAML input may be")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{source}: not UTF-8 text (byte 0x{text[exc.start]:02x} at offset {exc.start}): "
                              "not a YAML file") from None
    try:
        return parse(text)
    except _Refused as exc:
        raise ConfigError(f"{source}: refused: {exc} (YAML aliases / anchors)") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}:" if mark is not None else ""
        what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{source}:{where} YAML syntax error: {what}") from None
    except RecursionError:
        raise ConfigError(f"{source}: YAML nested too deeply") from None
    except ValueError as exc:        # an integer of more than 4300 digits (int()'s limit), a bad timestamp
        raise ConfigError(f"{source}: a value YAML cannot convert ({str(exc).split(':')[0]})") from None


def load_yaml_file(path: str | Path):
    """:func:`load_yaml_text` of a file; an unreadable, oversized, non-UTF-8 or malformed file is a
    ConfigError that names the file and the line (not ``<unicode string>``)."""
    return load_yaml_text(_read_bounded(path), str(path))


def _read_bounded(path: str | Path) -> bytes:
    """At most :data:`MAX_YAML_BYTES` + 1 bytes of a file (one more than allowed: refused as too large)."""
    p = Path(path)
    try:
        if not stat.S_ISREG(os.stat(p).st_mode):     # a FIFO would block the reader, a directory fail late
            raise ConfigError(f"{p}: not a regular file")
        with open(p, "rb") as fh:
            return fh.read(MAX_YAML_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read ({exc.strerror or exc})") from None
