"""Robots described by their own URDF (+ SRDF): a short robot YAML names the files, the rest is found.

A robot file of this kind (``config/robots/go2.yaml``)::

    robot:
      kind: urdf
      urdf: package://example-robot-data/robots/go2_description/urdf/go2.urdf
      srdf: package://example-robot-data/robots/go2_description/srdf/go2.srdf
      imu_link: imu                      # optional (default: a link named imu / imu_link, else the base)
      overrides: {effort: {"*_calf_joint": 40.0}}   # optional, per joint name or fnmatch pattern
      armature: {"*": 0.01}              # optional (default 0)
      stance: {pose: standing}           # an SRDF group_state, or {joint: value} (default: standing)
      gait: {period: 0.5}                # optional, merged over the defaults
      contact: {friction: 0.8}

:func:`load_urdf_robot` gives a :class:`UrdfRobotConfig`, which has the attributes a generated
:class:`~legged_wbc.robot.RobotConfig` has that the model, the controller and the simulation read
(``leg_specs``, ``joint_table()``, ``foot``, ``standing_pose``, ...). What is found:

* legs: every SRDF ``end_effector`` is a leg, its ``group`` the leg's joints, its ``parent_link`` the
  foot link; the group's joints must be exactly the actuated joints on the URDF chain from the base to
  the foot link (a ConfigError line names the group otherwise). Without an SRDF: the leaves of the
  URDF tree reached through the most actuated joints. Joints of a leg are ordered base to foot.
* the foot point: the centre and radius of the foot link's collision sphere (the lowest one in the
  standing pose), else a sphere fitted to the lowest cap of its collision mesh / primitive.
* limits, effort, velocity from ``<limit>``, friction / damping from ``<dynamics>``, then the
  file's ``overrides``; placeholder values (a range of 2 pi or more, an effort of 1000 N m or more, no
  velocity) are listed in ``placeholders`` and replaced by defaults scaled from the robot's mass and
  leg length.

``package://NAME/rest`` resolves through ``AMENT_PREFIX_PATH`` (``<prefix>/share/NAME``),
``ROS_PACKAGE_PATH`` (a directory ``NAME`` in one of its entries) and the ``share`` folder of the
installed example-robot-data wheel; a relative path is relative to the robot file.

Pinocchio and MuJoCo load the same *prepared* URDF (``urdf_path()``), written to a cache directory
(``$XDG_CACHE_HOME/legged_wbc/urdf`` or ``~/.cache/legged_wbc/urdf``, the name keyed by a hash of
its text): mesh file names made absolute, Collada (``.dae``) meshes dropped (MuJoCo cannot read
them), continuous joints made revolute with the limits found, the joint limits written back, and
inertias that are not physical (not positive definite, violating the triangle inequality) repaired
the way MuJoCo's ``balanceinertia`` would; one line in ``repairs`` for each. Both models therefore
have the same masses; no mass is invented (a link without ``<inertial>`` stays massless, reported).
"""

from __future__ import annotations

import fnmatch
import hashlib
import math
import os
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from legged_wbc.description import ConfigError, FootGeometry, JointTable, LegSpec, load_yaml_file

G = 9.81
ACTUATED = ("revolute", "continuous", "prismatic")
PLACEHOLDER_RANGE = 2.0 * math.pi - 1e-6   # [rad] a range this wide is no real limit
PLACEHOLDER_EFFORT = 1000.0                # [N m] an effort this large is no real drive
DEFAULT_HALF_RANGE = 2.4                   # [rad] replacement range: standing value +- this
URDF_KEYS = {"kind", "name", "urdf", "srdf", "base_link", "imu_link", "overrides", "armature", "stance",
             "gait", "contact"}
OVERRIDE_KEYS = ("lower", "upper", "effort", "velocity", "coulomb_friction", "viscous_friction")
MUJOCO_COMPILER = ('<compiler angle="radian" strippath="false" fusestatic="false" discardvisual="false" '
                   'inertiafromgeom="false" balanceinertia="false" boundmass="0" boundinertia="0"/>')


# ---------------------------------------------------------------------------------------------
# files


def example_robot_data_share() -> Path | None:
    """The ``share`` folder of the installed example-robot-data wheel (``cmeel.prefix/share``), if any."""
    from importlib import metadata

    try:
        share = Path(str(metadata.distribution("example-robot-data").locate_file("cmeel.prefix/share")))
    except metadata.PackageNotFoundError:
        return None
    return share if share.is_dir() else None


def resolve_uri(uri: str, relative_to: Path | None = None) -> Path:
    """A file named by ``package://NAME/rest``, ``file://path``, an absolute path or a path relative
    to ``relative_to`` (a directory); ConfigError when a ``package://`` cannot be found."""
    if uri.startswith("file://"):
        uri = uri[len("file://"):]
    if not uri.startswith("package://"):
        p = Path(os.path.expanduser(uri))
        return p if p.is_absolute() or relative_to is None else (relative_to / p)
    pkg, _, rest = uri[len("package://"):].partition("/")
    roots = []
    for prefix in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep):
        if prefix:
            roots.append(Path(prefix, "share", pkg))
    for d in os.environ.get("ROS_PACKAGE_PATH", "").split(os.pathsep):
        if d:
            roots += [Path(d, pkg)] + ([Path(d)] if Path(d).name == pkg else [])
    erd = example_robot_data_share()
    if erd is not None:
        roots.append(erd / pkg)
    for r in roots:
        if (r / rest).exists():
            return r / rest
    raise ConfigError(f"{uri}: package {pkg!r} not found (AMENT_PREFIX_PATH, ROS_PACKAGE_PATH, example-robot-data)")


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base, "legged_wbc", "urdf")


def write_cached(text: str, stem: str) -> Path:
    """``text`` in the cache directory as ``<stem>-<hash>.urdf`` (written once, atomically)."""
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    for d in (cache_dir(), Path(tempfile.gettempdir(), "legged_wbc_urdf")):
        out = d / f"{stem}-{digest}.urdf"
        try:
            if out.is_file() and out.read_text() == text:
                return out
            d.mkdir(parents=True, exist_ok=True)
            tmp = d / f".{out.name}.{os.getpid()}"
            tmp.write_text(text)
            os.replace(tmp, out)
            return out
        except OSError:
            continue
    raise ConfigError(f"cannot write the prepared URDF to {cache_dir()} or the temporary directory")


# ---------------------------------------------------------------------------------------------
# URDF tree and kinematics


def rpy_matrix(rpy) -> np.ndarray:
    r, p, y = (float(v) for v in rpy)
    cr, sr, cp, sp, cy, sy = math.cos(r), math.sin(r), math.cos(p), math.sin(p), math.cos(y), math.sin(y)
    return np.array([[cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
                     [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
                     [-sp, cp * sr, cp * cr]])


def axis_angle(axis: np.ndarray, a: float) -> np.ndarray:
    k = axis / np.linalg.norm(axis)
    K = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return np.eye(3) + math.sin(a) * K + (1 - math.cos(a)) * K @ K


def _floats(s: str | None, n: int, default: float = 0.0) -> np.ndarray:
    if s is None:
        return np.full(n, default)
    v = [float(x) for x in s.split()]
    if len(v) != n:
        raise ConfigError(f"URDF: expected {n} numbers, got {s!r}")
    return np.array(v)


def _origin(el) -> np.ndarray:
    """The 4x4 transform of an element's ``<origin>`` (identity without one)."""
    T = np.eye(4)
    o = el.find("origin") if el is not None else None
    if o is not None:
        T[:3, :3] = rpy_matrix(_floats(o.get("rpy"), 3))
        T[:3, 3] = _floats(o.get("xyz"), 3)
    return T


@dataclass
class UJoint:
    name: str
    type: str
    parent: str
    child: str
    origin: np.ndarray
    axis: np.ndarray
    el: object


class UrdfTree:
    """The links and joints of a URDF document (``ET`` element ``root``)."""

    def __init__(self, root, where: str):
        self.root_el, self.where = root, where
        self.links = {lk.get("name"): lk for lk in root.findall("link")}
        self.joints: dict[str, UJoint] = {}
        self.parent_joint: dict[str, UJoint] = {}
        self.children: dict[str, list[UJoint]] = {n: [] for n in self.links}
        for j in root.findall("joint"):
            uj = UJoint(j.get("name"), j.get("type"), j.find("parent").get("link"), j.find("child").get("link"),
                        _origin(j), _floats(j.find("axis").get("xyz") if j.find("axis") is not None else None, 3, 0)
                        if j.find("axis") is not None else np.array([1.0, 0, 0]), j)
            self.joints[uj.name] = uj
            self.parent_joint[uj.child] = uj
            self.children.setdefault(uj.parent, []).append(uj)
        roots = [n for n in self.links if n not in self.parent_joint]
        if len(roots) != 1:
            raise ConfigError(f"{where}: expected one root link, found {roots}")
        self.root = roots[0]

    def chain(self, base: str, link: str) -> list[UJoint]:
        """The joints from ``base`` to ``link`` (base first); ConfigError if ``link`` is not below ``base``."""
        out, cur = [], link
        while cur != base:
            j = self.parent_joint.get(cur)
            if j is None:
                raise ConfigError(f"{self.where}: link {link!r} is not below {base!r}")
            out.append(j)
            cur = j.parent
        return out[::-1]

    def actuated_chain(self, base: str, link: str) -> list[str]:
        return [j.name for j in self.chain(base, link) if j.type in ACTUATED]

    def transform(self, base: str, link: str, q: dict[str, float]) -> np.ndarray:
        """Pose of ``link`` in ``base``'s frame with joint values ``q`` (missing: 0)."""
        T = np.eye(4)
        for j in self.chain(base, link):
            T = T @ j.origin
            a = float(q.get(j.name, 0.0))
            if j.type in ("revolute", "continuous") and a:
                M = np.eye(4)
                M[:3, :3] = axis_angle(j.axis, a)
                T = T @ M
            elif j.type == "prismatic" and a:
                T[:3, 3] += T[:3, :3] @ (j.axis / np.linalg.norm(j.axis) * a)
        return T

    def welded(self, link: str) -> list[str]:
        """``link`` and every link attached to it through fixed joints only (one rigid body)."""
        out, todo = [], [link]
        while todo:
            cur = todo.pop()
            out.append(cur)
            todo += [j.child for j in self.children.get(cur, []) if j.type == "fixed"]
        return out

    def leaves(self) -> list[str]:
        return [n for n in self.links if not self.children.get(n)]


# ---------------------------------------------------------------------------------------------
# geometry: collision shapes as points


def read_stl(path: Path) -> np.ndarray:
    """Vertices (n, 3) of an STL file, binary or ASCII."""
    data = path.read_bytes()
    if len(data) >= 84:
        n = int(np.frombuffer(data[80:84], "<u4")[0])
        if 84 + 50 * n == len(data):
            dt = np.dtype([("n", "<f4", 3), ("v", "<f4", (3, 3)), ("a", "<u2")])
            return np.frombuffer(data[84:84 + 50 * n], dt)["v"].reshape(-1, 3).astype(float)
    pts = [ln.split()[1:4] for ln in data.decode("ascii", "replace").splitlines() if ln.strip().startswith("vertex")]
    if not pts:
        raise ConfigError(f"{path}: not an STL mesh")
    return np.array(pts, dtype=float)


def _mesh_path(filename: str, urdf_dir: Path) -> Path:
    return resolve_uri(filename, urdf_dir)


def collision_shapes(link_el, urdf_dir: Path) -> list[dict]:
    """The link's collision shapes: ``{kind, T (4x4 in the link frame), size / radius / points}``."""
    out = []
    for c in link_el.findall("collision"):
        g = c.find("geometry")
        if g is None or len(g) == 0:
            continue
        shape, T = g[0], _origin(c)
        if shape.tag == "sphere":
            out.append({"kind": "sphere", "T": T, "radius": float(shape.get("radius"))})
        elif shape.tag == "box":
            s = _floats(shape.get("size"), 3) / 2
            pts = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)]) * s
            out.append({"kind": "box", "T": T, "points": pts})
        elif shape.tag == "cylinder":
            r, h = float(shape.get("radius")), float(shape.get("length"))
            a = np.linspace(0, 2 * np.pi, 48, endpoint=False)
            ring = np.c_[r * np.cos(a), r * np.sin(a)]
            pts = np.vstack([np.c_[ring, np.full(48, z)] for z in (-h / 2, h / 2)])
            out.append({"kind": "cylinder", "T": T, "points": pts})
        elif shape.tag == "mesh":
            fn = shape.get("filename", "")
            if fn.lower().endswith(".stl"):
                scale = _floats(shape.get("scale"), 3, 1.0)
                out.append({"kind": "mesh", "T": T, "points": read_stl(_mesh_path(fn, urdf_dir)) * scale,
                            "file": fn})
            else:
                out.append({"kind": "unreadable", "T": T, "file": fn})
    return out


def _world_points(shape: dict) -> np.ndarray:
    T = shape["T"]
    return shape["points"] @ T[:3, :3].T + T[:3, 3]


@dataclass(frozen=True)
class FootFound:
    """One foot as found: the link, the point (foot-link frame) [m], radius [m] and how it was found."""

    link: str
    offset: tuple[float, float, float]
    radius: float
    how: str


def find_foot(link: str, link_el, urdf_dir: Path, R_up: np.ndarray) -> FootFound:
    """The foot point of ``link``; ``R_up``: the base's +z in the foot link's frame (standing pose)."""
    shapes = collision_shapes(link_el, urdf_dir)
    spheres = [s for s in shapes if s["kind"] == "sphere"]
    if spheres:
        low = min(spheres, key=lambda s: float(s["T"][:3, 3] @ R_up) - s["radius"])
        return FootFound(link, tuple(float(x) for x in low["T"][:3, 3]), low["radius"], "collision sphere")
    solids = [s for s in shapes if "points" in s]
    if not solids:
        kinds = ", ".join(s.get("file", s["kind"]) for s in shapes) or "none"
        return FootFound(link, (0.0, 0.0, 0.0), 0.0, f"no readable collision geometry ({kinds}): the link origin")
    pts = np.vstack([_world_points(s) for s in solids])
    c, r = fit_lower_sphere(pts, R_up)
    kind = "/".join(sorted({s["kind"] for s in solids}))
    return FootFound(link, tuple(float(x) for x in c), r, f"sphere fitted to the lowest cap of its collision {kind}")


def fit_lower_sphere(pts: np.ndarray, up: np.ndarray) -> tuple[np.ndarray, float]:
    """A sphere touching the lowest point of ``pts`` (along ``up``) fitted to the points near it:
    its radius the cap's curvature, bounded by half the shape's width across ``up``."""
    up = up / np.linalg.norm(up)
    h = pts @ up
    lat = pts - np.outer(h, up)
    half_width = 0.5 * float(np.max(np.ptp(lat, axis=0)))
    band = h - h.min() < 0.35 * half_width
    cap = pts[band]
    r = half_width
    if len(cap) >= 4:
        A = np.c_[2 * cap, np.ones(len(cap))]
        sol, *_ = np.linalg.lstsq(A, (cap ** 2).sum(1), rcond=None)
        c = sol[:3]
        rr = float(c @ up - h.min())
        if 0.2 * half_width <= rr <= 1.5 * half_width:
            r = min(rr, half_width)
            lat_c = c - (c @ up) * up
            # the centre above the cap's fitted centre, at r above the lowest point
            return lat_c + (h.min() + r) * up, float(r)
    lowest = pts[np.argmin(h)]
    return lowest + r * up, float(r)


# ---------------------------------------------------------------------------------------------
# SRDF


def parse_srdf(path: Path, tree: UrdfTree) -> tuple[dict, list[tuple[str, str, str]], dict, str | None]:
    """``(groups: name -> element, end effectors [(name, foot link, group)], group states: name -> {joint:
    value}, virtual joint's child link)``."""
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as exc:
        raise ConfigError(f"{path}: cannot read the SRDF ({exc})") from None
    groups = {g.get("name"): g for g in root.findall("group")}
    ees = [(e.get("name"), e.get("parent_link"), e.get("group")) for e in root.findall("end_effector")]
    states = {}
    for s in root.findall("group_state"):
        vals = {}
        for j in s.findall("joint"):
            v = j.get("value", "").split()
            if len(v) == 1:
                vals[j.get("name")] = float(v[0])
        states[s.get("name")] = vals
    vj = root.find("virtual_joint")
    return groups, ees, states, (vj.get("child_link") if vj is not None else None)


def group_joints(groups: dict, name: str, tree: UrdfTree, srdf: Path, seen=()) -> list[str]:
    """The joints of SRDF group ``name`` (its joints, links' parent joints, chains, subgroups)."""
    if name not in groups:
        raise ConfigError(f"{srdf}: group {name!r} is not defined")
    if name in seen:
        raise ConfigError(f"{srdf}: group {name!r} contains itself")
    out: list[str] = []
    for el in groups[name]:
        if el.tag == "joint":
            out.append(el.get("name"))
        elif el.tag == "link" and el.get("name") in tree.parent_joint:
            out.append(tree.parent_joint[el.get("name")].name)
        elif el.tag == "chain":
            out += [j.name for j in tree.chain(el.get("base_link"), el.get("tip_link"))]
        elif el.tag == "group":
            out += group_joints(groups, el.get("name"), tree, srdf, seen + (name,))
    return list(dict.fromkeys(out))


def legs_from_srdf(srdf: Path, tree: UrdfTree, base: str, groups: dict, ees: list) -> list[tuple[str, list[str], str]]:
    """``[(leg name, joints base to foot, foot link)]`` from the SRDF's end effectors, checked against the URDF."""
    legs = []
    for ee, foot, group in ees:
        if foot not in tree.links:
            raise ConfigError(f"{srdf}: end effector {ee!r}: parent_link {foot!r} is not a link of the URDF")
        gj = group_joints(groups, group, tree, srdf)
        unknown = [j for j in gj if j not in tree.joints]
        if unknown:
            raise ConfigError(f"{srdf}: group {group!r} (end effector {ee!r}) names joints not in the URDF: {unknown}")
        chain = tree.actuated_chain(base, foot)
        actuated = [j for j in gj if tree.joints[j].type in ACTUATED]
        off = [j for j in actuated if j not in chain]
        if off:
            raise ConfigError(f"{srdf}: group {group!r} (end effector {ee!r}): joint {off[0]!r} is not on the chain "
                              f"from {base!r} to {foot!r} ({', '.join(chain)})")
        missing = [j for j in chain if j not in actuated]
        if missing:
            raise ConfigError(f"{srdf}: group {group!r} (end effector {ee!r}) lacks {missing} of the chain "
                              f"from {base!r} to {foot!r}")
        name = ee[:-len("_foot")] if ee.endswith("_foot") and len(ee) > 5 else group
        legs.append((name, chain, foot))
    return legs


def legs_from_tree(tree: UrdfTree, base: str) -> list[tuple[str, list[str], str]]:
    """Legs without an SRDF: the leaves reached through the most actuated joints (one per last joint)."""
    depth = {lf: len(tree.actuated_chain(base, lf)) for lf in tree.leaves() if lf != base}
    best = max(depth.values(), default=0)
    if best == 0:
        return []
    by_last: dict[str, str] = {}
    for lf in sorted(depth):
        if depth[lf] == best:
            last = tree.actuated_chain(base, lf)[-1]
            prefer = tree.links[lf].find("collision") is not None
            if last not in by_last or (prefer and tree.links[by_last[last]].find("collision") is None):
                by_last[last] = lf
    return [(foot.lower().removesuffix("_foot") or foot, tree.actuated_chain(base, foot), foot)
            for foot in by_last.values()]


# ---------------------------------------------------------------------------------------------
# inertia checks


def check_inertia(m: float, I: np.ndarray) -> str | None:
    """Why ``(m, I)`` is not a physical rigid body (None if it is)."""
    if m <= 0:
        return None if not np.any(I) else "inertia without mass"
    if not np.allclose(I, I.T):
        return "not symmetric"
    ev = np.linalg.eigvalsh(I)
    if np.all(np.abs(ev) <= 1e-15):
        return "zero (a point mass)"
    if ev[0] <= 0:
        return ("rank-1" if np.sum(ev > 1e-12) <= 1 else "not positive definite") + f" (principal {_g(ev)})"
    if ev[0] + ev[1] < ev[2] * (1 - 1e-9):
        return f"violates the triangle inequality (principal {_g(ev)})"
    return None


def repair_inertia(I: np.ndarray) -> np.ndarray:
    """MuJoCo's ``balanceinertia``: the principal moments replaced by their mean, the axes kept (a
    tensor with no positive moment: a tiny sphere-like one)."""
    ev, V = np.linalg.eigh(0.5 * (I + I.T))
    mean = float(np.mean(np.abs(ev))) or 1e-9
    return V @ np.diag([mean] * 3) @ V.T


def _g(v) -> str:
    return "[" + ", ".join(f"{x:.3g}" for x in np.atleast_1d(v)) + "]"


# ---------------------------------------------------------------------------------------------
# the config


@dataclass(frozen=True)
class UrdfRobotConfig:
    """A robot described by its URDF (+ SRDF) and a short robot YAML: what a generated
    :class:`~legged_wbc.robot.RobotConfig` gives its consumers (see the module docstring)."""

    name: str
    urdf: str                               # the prepared URDF both models load (absolute path)
    source_urdf: str                        # the robot's own URDF file
    srdf: str | None
    base_link: str
    leg_specs: tuple[LegSpec, ...]
    table: JointTable
    foot: FootGeometry                      # one for all feet (their mean; ``feet`` has each)
    feet: tuple[FootFound, ...]
    standing_pose: dict                     # joint name -> [rad]
    standing_source: str                    # where the standing pose came from
    stance_height: float                    # [m] base origin above the ground, standing, feet down
    foot_heights: tuple[float, ...]         # [m] each foot's lowest point in the base frame, standing
    friction: float
    gait: dict
    imu_link: str | None
    imu_xyz: tuple[float, float, float]
    imu_rotation: tuple                     # 3x3 nested tuples: the IMU link's axes in the base frame
    base_links: tuple[str, ...]             # the base link and the links welded to it (fixed joints)
    base_size: tuple[float, float, float]   # [m] the bounding box of their collision geometry
    base_bottom: float                      # [m] how far the base collision reaches below its origin
    robot_mass: float                       # [kg] every link's mass
    leg_length: float                       # [m] hip to foot point, standing (mean over legs)
    placeholders: list = field(default_factory=list)
    repairs: list = field(default_factory=list)
    source: str = ""

    kind = "urdf"

    @property
    def base_mass(self) -> float:
        """[kg] the base link's own mass (its URDF ``<inertial>``; 0 without one): what a scenario's payload
        is a fraction of, as the generated robots' ``base.mass``."""
        root = ET.parse(self.urdf).getroot()
        for link in root.iter("link"):
            if link.get("name") == self.base_link:
                m = link.find("inertial/mass")
                return float(m.get("value")) if m is not None else 0.0
        return 0.0

    @property
    def n_legs(self) -> int:
        return len(self.leg_specs)

    @property
    def leg_names(self) -> list[str]:
        return [leg.name for leg in self.leg_specs]

    @property
    def joint_names(self) -> list[str]:
        return [j for leg in self.leg_specs for j in leg.joints]

    @property
    def foot_links(self) -> list[str]:
        return [leg.foot_link for leg in self.leg_specs]

    def joint_table(self) -> JointTable:
        return self.table

    @property
    def base_half_height(self) -> float:
        """How far the base reaches below its origin [m] (its collision's bounding box)."""
        return self.base_bottom

    def urdf_path(self) -> Path:
        return Path(self.urdf)


def _override(table: dict, d: dict, what: str, names: list[str], where: str) -> None:
    """Apply ``{joint name or fnmatch pattern: value}`` of ``what`` to ``table[what]`` (dict name -> value)."""
    if not isinstance(d, dict):
        raise ConfigError(f"{where}.{what}: expected a mapping joint -> value, got {d!r}")
    for pat, val in d.items():
        hit = [n for n in names if fnmatch.fnmatchcase(n, str(pat))]
        if not hit:
            raise ConfigError(f"{where}.{what}: {pat!r} matches no leg joint")
        try:
            v = float(val)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}.{what}.{pat}: must be a number, got {val!r}") from None
        for n in hit:
            table[what][n] = v


def _read(path: Path, what: str):
    try:
        return ET.parse(path).getroot()
    except (ET.ParseError, OSError) as exc:
        raise ConfigError(f"{path}: cannot read the {what} ({exc})") from None


def default_robot_dict(urdf: str | Path, srdf: str | Path | None) -> dict:
    """A robot file's mapping made from the files alone (``legged-wbc check-robot --all-example-robot-data``)."""
    d = {"kind": "urdf", "urdf": str(urdf)}
    if srdf:
        d["srdf"] = str(srdf)
    return d


_PRINTED: set = set()


def load_urdf_robot(path: str | Path, data: dict | None = None, verbose: bool = True) -> UrdfRobotConfig:
    """The :class:`UrdfRobotConfig` of a robot YAML (``kind: urdf``); ``data``: its already parsed
    mapping. Repairs are printed once per process (stderr) when ``verbose``."""
    p = Path(path)
    d = load_yaml_file(p) if data is None else data
    if isinstance(d, dict) and "robot" in d:
        d = d["robot"]
    if not isinstance(d, dict):
        raise ConfigError(f"{p}: a robot config must be a mapping with a 'robot:' key")
    try:
        cfg = build_config(d, p.parent, str(p))
    except ConfigError as exc:
        raise ConfigError(str(exc) if str(exc).startswith(str(p)) else f"{p}: {exc}") from None
    if verbose and cfg.repairs and cfg.urdf not in _PRINTED:
        _PRINTED.add(cfg.urdf)
        for line in cfg.repairs:
            print(f"{cfg.name}: {line}", file=sys.stderr)
    return cfg


def build_config(d: dict, here: Path, source: str) -> UrdfRobotConfig:
    """The config of a robot mapping ``d`` (``here``: the directory relative paths start from)."""
    unknown = sorted(set(d) - URDF_KEYS)
    if unknown:
        raise ConfigError(f"robot: unknown keys {unknown} for kind: urdf (known: {sorted(URDF_KEYS)})")
    urdf_file, root, tree, srdf_file, (groups, ees, states, vbase) = _read_files(d, here)
    base = str(d.get("base_link") or vbase or tree.root)
    if base not in tree.links:
        raise ConfigError(f"base link {base!r} not in {urdf_file}")
    legs = legs_from_srdf(srdf_file, tree, base, groups, ees) if ees else legs_from_tree(tree, base)
    if not legs:
        raise ConfigError(f"no legs found in {srdf_file or urdf_file}")
    names = [j for _, js, _ in legs for j in js]
    repairs: list[str] = []
    pose, how_pose = _standing_pose(d, states, names, srdf_file or urdf_file, repairs)
    tab = _joint_values(d, tree, names)
    mass = sum(float(lk.find("inertial/mass").get("value")) for lk in tree.links.values()
               if lk.find("inertial/mass") is not None)
    feet, hips, heights, leg_len = _legs_standing(tree, base, legs, pose, urdf_file.parent)
    placeholders = _replace_placeholders(tab, names, pose, mass, leg_len, repairs)
    text, prep_repairs = prepare_urdf(root, tree, urdf_file, names, tab)
    repairs = prep_repairs + repairs
    name = str(d.get("name") or root.get("name") or urdf_file.stem)
    cached = write_cached(text, "".join(c if c.isalnum() or c in "-_" else "_" for c in name))
    foot = _one_foot(feet, repairs)
    imu_link = d.get("imu_link") or next((n for n in ("imu", "imu_link") if n in tree.links), None)
    if imu_link is not None and imu_link not in tree.links:
        raise ConfigError(f"robot.imu_link: {imu_link!r} is not a link of {urdf_file}")
    Timu = tree.transform(base, imu_link, {}) if imu_link else np.eye(4)
    base_links, base_size, base_bottom = _base_box(tree, base, urdf_file.parent, repairs)
    leg_specs = tuple(LegSpec(name=ln, joints=tuple(js), foot_link=ft, hip_xyz=tuple(float(x) for x in h),
                              has_pitch=False) for (ln, js, ft), h in zip(legs, hips))
    arr = lambda k: np.array([tab[k][n] for n in names], dtype=float)  # noqa: E731
    table = JointTable(names=tuple(names), lower=arr("lower"), upper=arr("upper"), effort=arr("effort"),
                       velocity=arr("velocity"), armature=arr("armature"), stall_torque=arr("effort"),
                       no_load_speed=arr("velocity"), coulomb_friction=arr("coulomb_friction"),
                       viscous_friction=arr("viscous_friction"))
    friction = float((d.get("contact") or {}).get("friction", 0.8))
    if not 0 < friction <= 10:
        raise ConfigError(f"robot.contact.friction: must be in (0, 10], got {friction}")
    return UrdfRobotConfig(
        name=name, urdf=str(cached), source_urdf=str(urdf_file), srdf=str(srdf_file) if srdf_file else None,
        base_link=base, leg_specs=leg_specs, table=table, foot=foot, feet=tuple(feet),
        standing_pose=pose, standing_source=how_pose, stance_height=-float(np.mean(heights)),
        foot_heights=tuple(heights), friction=friction, gait=default_gait(leg_specs, leg_len, d.get("gait")),
        imu_link=imu_link, imu_xyz=tuple(float(x) for x in Timu[:3, 3]),
        imu_rotation=tuple(tuple(float(x) for x in r) for r in Timu[:3, :3]), base_links=tuple(base_links),
        base_size=base_size, base_bottom=base_bottom, robot_mass=mass, leg_length=leg_len,
        placeholders=placeholders, repairs=repairs, source=source)


def _read_files(d: dict, here: Path):
    """``(urdf file, its root element, its tree, srdf file or None, parse_srdf's 4-tuple)``."""
    if "urdf" not in d:
        raise ConfigError("robot.urdf: missing (the robot's URDF file)")
    urdf_file = resolve_uri(str(d["urdf"]), here)
    if not urdf_file.is_file():
        raise ConfigError(f"robot.urdf: {urdf_file} not found")
    root = _read(urdf_file, "URDF")
    tree = UrdfTree(root, str(urdf_file))
    srdf_file = resolve_uri(str(d["srdf"]), here) if d.get("srdf") else None
    if srdf_file is not None and not srdf_file.is_file():
        raise ConfigError(f"robot.srdf: {srdf_file} not found")
    return urdf_file, root, tree, srdf_file, (parse_srdf(srdf_file, tree) if srdf_file else ({}, [], {}, None))


def _standing_pose(d: dict, states: dict, names: list[str], where, repairs: list) -> tuple[dict, str]:
    """The standing pose (joint -> value, every leg joint) and where it came from."""
    stance = d.get("stance", {}) or {}
    spec = stance.get("pose", "standing") if isinstance(stance, dict) else stance
    if isinstance(spec, dict):
        try:
            pose, how = {str(k): float(v) for k, v in spec.items()}, "the robot file"
        except (TypeError, ValueError):
            raise ConfigError(f"robot.stance.pose: joint values must be numbers, got {spec!r}") from None
    elif spec in states:
        pose, how = dict(states[spec]), f"SRDF group_state {spec!r}"
    else:
        pose, how = {}, "none found: all joints at 0"
        repairs.append(f"standing pose {spec!r} not in {where}: all leg joints at 0")
    return {n: float(pose.get(n, 0.0)) for n in names}, how


def _joint_values(d: dict, tree: UrdfTree, names: list[str]) -> dict:
    """Per joint limits, drive and friction values: the URDF's ``<limit>`` / ``<dynamics>``, then the
    file's ``overrides`` and ``armature``; ``{what: {joint: value}}``."""
    tab = {k: {} for k in OVERRIDE_KEYS}
    for n in names:
        j = tree.joints[n]
        lim, dyn = j.el.find("limit"), j.el.find("dynamics")
        g = (lambda e, k: float(e.get(k, 0.0)) if e is not None else 0.0)  # noqa: E731
        lo, hi = g(lim, "lower"), g(lim, "upper")
        if j.type == "continuous" or lo >= hi:
            lo, hi = -math.inf, math.inf
        tab["lower"][n], tab["upper"][n] = lo, hi
        tab["effort"][n], tab["velocity"][n] = g(lim, "effort"), g(lim, "velocity")
        tab["coulomb_friction"][n], tab["viscous_friction"][n] = g(dyn, "friction"), g(dyn, "damping")
    overrides = d.get("overrides") or {}
    if not isinstance(overrides, dict):
        raise ConfigError(f"robot.overrides: expected a mapping, got {overrides!r}")
    for what, od in overrides.items():
        if what not in OVERRIDE_KEYS:
            raise ConfigError(f"robot.overrides.{what}: unknown (known: {list(OVERRIDE_KEYS)})")
        _override(tab, od, what, names, "robot.overrides")
    a = d.get("armature", 0.0)
    tab["armature"] = {n: 0.0 if isinstance(a, dict) else float(a) for n in names}
    if isinstance(a, dict):
        _override(tab, a, "armature", names, "robot")
    return tab


def _legs_standing(tree: UrdfTree, base: str, legs: list, pose: dict, urdf_dir: Path):
    """``(feet found, hips [base frame], feet's lowest points' heights [base frame], mean hip-to-foot length)``
    in the standing pose."""
    feet, hips, heights, lengths = [], [], [], []
    for _, js, foot in legs:
        T = tree.transform(base, foot, pose)
        ff = find_foot(foot, tree.links[foot], urdf_dir, T[:3, :3].T @ np.array([0.0, 0.0, 1.0]))
        hip = tree.transform(base, tree.joints[js[0]].child, pose)[:3, 3]
        pf = T[:3, :3] @ np.array(ff.offset) + T[:3, 3]
        feet.append(ff)
        hips.append(hip)
        lengths.append(float(np.linalg.norm(pf - hip)))
        heights.append(float(pf[2] - ff.radius))
    return feet, hips, heights, float(np.mean(lengths))


def _replace_placeholders(tab: dict, names: list[str], pose: dict, mass: float, leg_len: float,
                          repairs: list) -> list[str]:
    """Flag and replace placeholder limits (see the module docstring); the lines flagged."""
    placeholders = []
    eff_default = round(0.5 * mass * G * leg_len, 1)
    vel_default = round(4.0 * math.sqrt(G / max(leg_len, 1e-3)), 1)
    for n in names:
        lo, hi = tab["lower"][n], tab["upper"][n]
        if hi - lo >= PLACEHOLDER_RANGE:
            q0 = pose[n]
            nlo, nhi = max(lo, q0 - DEFAULT_HALF_RANGE), min(hi, q0 + DEFAULT_HALF_RANGE)
            placeholders.append(f"{n}: range [{lo:.4g}, {hi:.4g}] rad (>= 2 pi) -> [{nlo:.3f}, {nhi:.3f}] "
                                f"(standing {q0:.3f} +- {DEFAULT_HALF_RANGE})")
            tab["lower"][n], tab["upper"][n] = nlo, nhi
        if tab["effort"][n] >= PLACEHOLDER_EFFORT or tab["effort"][n] <= 0:
            placeholders.append(f"{n}: effort {tab['effort'][n]:g} N m -> {eff_default:g} "
                                f"(half the weight at the leg length: 0.5 m g L)")
            tab["effort"][n] = eff_default
        if tab["velocity"][n] <= 0:
            placeholders.append(f"{n}: velocity {tab['velocity'][n]:g} rad/s -> {vel_default:g} (4 sqrt(g / L))")
            tab["velocity"][n] = vel_default
        if not tab["lower"][n] < tab["upper"][n]:
            raise ConfigError(f"joint {n}: lower {tab['lower'][n]} must be < upper {tab['upper'][n]}")
        if not tab["lower"][n] <= pose[n] <= tab["upper"][n]:
            repairs.append(f"standing pose: {n} = {pose[n]:.4g} outside [{tab['lower'][n]:.4g}, "
                           f"{tab['upper'][n]:.4g}]")
    return placeholders


def _one_foot(feet: list[FootFound], repairs: list) -> FootGeometry:
    """One foot geometry for all: their mean; the spread reported past 2 mm."""
    off = np.mean([f.offset for f in feet], axis=0)
    rad = float(np.mean([f.radius for f in feet]))
    diff = max(float(np.abs(np.array(f.offset) - off).max()) for f in feet)
    rdiff = max(abs(f.radius - rad) for f in feet)
    if diff > 2e-3 or rdiff > 2e-3:
        repairs.append(f"feet differ (offsets by up to {diff * 1e3:.1f} mm from their mean, radii "
                       f"{rdiff * 1e3:.1f} mm): the mean is used for all")
    return FootGeometry(offset=off, radius=rad)


def _base_box(tree: UrdfTree, base: str, urdf_dir: Path, repairs: list):
    """``(links welded to the base, bounding box size of their collision geometry, how far it reaches
    below the base origin)``, in the base frame."""
    base_links = tree.welded(base)
    pts = []
    for lk in base_links:
        T = tree.transform(base, lk, {})
        for sh in collision_shapes(tree.links[lk], urdf_dir):
            if sh["kind"] == "unreadable":
                continue
            P = (_world_points(sh) if "points" in sh else
                 sh["T"][:3, 3] + sh["radius"] * np.vstack([np.eye(3), -np.eye(3)]))
            pts.append(P @ T[:3, :3].T + T[:3, 3])
    if not pts:
        repairs.append(f"base {base!r}: no readable collision geometry (nothing of the base touches the ground)")
        return base_links, (0.0, 0.0, 0.0), 0.0
    P = np.vstack(pts)
    return base_links, tuple(float(x) for x in np.ptp(P, axis=0)), float(-P[:, 2].min())


def default_gait(legs: tuple[LegSpec, ...], leg_length: float, given) -> dict:
    """Four legs: a trot (diagonal pairs by the hips' positions), with the crawl (one leg at a time, each
    diagonal pair's legs in turn, duty 0.8, twice the period) selectable by name (``gaits``: a scenario's
    ``gait.type``); others: one leg at a time around the body. Period scaled from the leg length (0.5 s
    for a go2-size leg, 0.34 m hip to foot), duty 0.6."""
    hips = np.array([lg.hip_xyz[:2] for lg in legs])
    c = hips.mean(axis=0)
    names = [lg.name for lg in legs]
    if len(legs) == 4:
        first = int(np.argmax((hips - c) @ np.array([1.0, 1.0])))          # front left
        dots = (hips - c) @ (hips[first] - c)
        partner = int(np.argmin(dots))
        rest = [k for k in range(4) if k not in (first, partner)]
        front_right = max(rest, key=lambda k: hips[k, 0])
        groups = [[names[first], names[partner]], [names[front_right], names[[k for k in rest if k != front_right][0]]]]
        duty = 0.6
    else:
        order = np.argsort(np.arctan2(hips[:, 1] - c[1], hips[:, 0] - c[0]))
        groups = [[names[k]] for k in order]
        duty = 0.8
    period = round(max(0.3, 1.45 * leg_length) * 20) / 20
    gait = {"groups": groups, "period": period, "duty": duty, "start_time": 1.0}
    if len(legs) == 4:
        (a, b), (c_, d) = groups
        gait["gaits"] = {"trot": {"groups": groups, "period": period, "duty": duty},
                         "crawl": {"groups": [[a], [d], [b], [c_]], "period": 2 * period, "duty": 0.8}}
    if given:
        if not isinstance(given, dict):
            raise ConfigError(f"robot.gait: expected a mapping, got {given!r}")
        unknown = sorted(set(given) - set(gait))
        if unknown:
            raise ConfigError(f"robot.gait: unknown keys {unknown}")
        gait.update(given)
    return gait


def prepare_urdf(root, tree: UrdfTree, urdf_file: Path, names: list[str], tab: dict) -> tuple[str, list[str]]:
    """The URDF text both models load, and a line per repair (see the module docstring)."""
    import copy

    root = copy.deepcopy(root)
    repairs: list[str] = []
    dropped_visual = 0
    for lk in root.findall("link"):
        dropped_visual += _prepare_meshes(lk, urdf_file, repairs)
        _prepare_inertia(lk, tree, repairs)
    if dropped_visual:
        repairs.append(f"{dropped_visual} visual meshes MuJoCo cannot read (Collada .dae) dropped")
    for j in root.findall("joint"):
        n = j.get("name")
        if n not in tab["lower"]:
            continue
        if j.get("type") == "continuous":
            j.set("type", "revolute")
            repairs.append(f"joint {n}: continuous made revolute (limits [{tab['lower'][n]:.3f}, {tab['upper'][n]:.3f}])")
        lim = j.find("limit")
        if lim is None:
            lim = ET.SubElement(j, "limit")
        for k in ("lower", "upper", "effort", "velocity"):
            lim.set(k, repr(float(tab[k][n])))
    for old in root.findall("mujoco"):
        root.remove(old)
    root.append(ET.fromstring(f"<mujoco>{MUJOCO_COMPILER}</mujoco>"))
    text = ('<?xml version="1.0"?>\n<!-- prepared by legged_wbc from ' + str(urdf_file) + ' -->\n'
            + ET.tostring(root, encoding="unicode") + "\n")
    return text, repairs


def _prepare_meshes(lk, urdf_file: Path, repairs: list) -> int:
    """Mesh file names made absolute, meshes MuJoCo cannot read dropped (a line per collision one);
    the number of visual meshes dropped."""
    dropped = 0
    for tag in ("visual", "collision"):
        for el in list(lk.findall(tag)):
            m = el.find("geometry/mesh")
            if m is None:
                continue
            fn = m.get("filename", "")
            if not fn.lower().endswith((".stl", ".obj")):
                lk.remove(el)
                if tag == "visual":
                    dropped += 1
                else:
                    repairs.append(f"link {lk.get('name')}: collision mesh {Path(fn).name} dropped "
                                   "(MuJoCo reads STL / OBJ, not this)")
                continue
            m.set("filename", str(resolve_uri(fn, urdf_file.parent).resolve()))
    return dropped


def _prepare_inertia(lk, tree: UrdfTree, repairs: list) -> None:
    """A link's inertia checked and repaired in place (a line per repair; no mass invented)."""
    name = lk.get("name")
    ine = lk.find("inertial")
    if ine is None:
        if any(j.child == name and j.type in ACTUATED for j in tree.joints.values()):
            repairs.append(f"link {name}: no <inertial> on a moving link (massless in both models)")
        elif name == tree.root or lk.findall("collision"):
            repairs.append(f"link {name}: no <inertial> (massless in both models; no mass invented)")
        return
    m_el, i_el = ine.find("mass"), ine.find("inertia")
    mass = float(m_el.get("value")) if m_el is not None else 0.0
    ks = ("ixx", "ixy", "ixz", "iyy", "iyz", "izz")
    v = {k: float(i_el.get(k, 0.0)) if i_el is not None else 0.0 for k in ks}
    I = np.array([[v["ixx"], v["ixy"], v["ixz"]], [v["ixy"], v["iyy"], v["iyz"]], [v["ixz"], v["iyz"], v["izz"]]])
    why = check_inertia(mass, I)
    if why is None:
        return
    if mass <= 0:
        for k in ks:
            i_el.set(k, "0")
        repairs.append(f"link {name}: {why}: inertia set to 0")
        return
    if i_el is None:
        i_el = ET.SubElement(ine, "inertia")
    J = repair_inertia(I)
    for k, (r, c) in zip(ks, ((0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2))):
        i_el.set(k, repr(float(J[r, c])))
    repairs.append(f"link {name}: inertia {why}: principal moments set to their mean "
                   f"{np.trace(J) / 3:.3g} (mass {mass:g} kg kept)")
