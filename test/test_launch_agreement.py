"""The launch file means the same under both launchers: every condition of ``walking_sim.launch.xml``
evaluated by the project's launcher and by a port of ROS 2 launch's own rules, for the argument
combinations users type; the two must start the same processes.

The port (``_Real*`` below) follows ROS 2 ``launch`` 3.7.1 and ``launch_ros`` 0.28.0:
``launch/share/launch/frontend/grammar.lark`` and ``launch/frontend/parse_substitution.py`` (a quoted
template with no fragment, ``''``, becomes an empty list), ``launch/substitutions/equals_substitution.py``
(``EqualsSubstitution.__init__``: an argument that is not a substitution is ``str()``-ed, and
``launch/utilities/type_utils.py``'s ``is_substitution([])`` is False, so ``''`` is the text ``'[]'``;
``perform``: booleans, then floats by ``math.isclose``, then text: the launcher's :func:`launch_equals`,
checked against that rule by hand and against the real one where installed), ``not_equals_substitution.py``,
``launch/conditions/evaluate_condition_expression_impl.py`` (``strip().lower()`` in true/1/false/0).
Checked against the real packages from those sources (``launch`` 3.7.1, ``launch_xml``, ``launch_ros``
0.28.0 on ``PYTHONPATH``, lark, osrf_pycommon, an ament index holding ``launch`` and ``legged_wbc``):
``test_the_port_matches_the_real_launch`` runs when they import (all 36 combinations agreed, and the
real launch started ``bag_recorder`` without ``record:=`` from the former file); CI has no ``launch``
(not on PyPI) and runs the port.
"""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET

import pytest

from legged_wbc.ros.tooling import launcher as L

LAUNCH = L.resolve_launch_file("walking_sim")


# ------------------------------------------------------------------------------------ the port
class _RealText(str):
    """A TextSubstitution."""


def _real_parse(s: str, i: int = 0, quote: str | None = None):
    """grammar.lark: a template -> list of fragments (text or ('sub', name, [args])), up to ``quote``."""
    out, buf = [], ""
    while i < len(s):
        c = s[i]
        if quote is not None and c == quote:
            break
        if quote is None and c in " )" and _real_parse.in_args:
            break
        if c == "\\" and i + 1 < len(s):
            buf += s[i + 1]
            i += 2
        elif s.startswith("$(", i):
            if buf:
                out.append(_RealText(buf))
                buf = ""
            sub, i = _real_substitution(s, i)
            out.append(sub)
        else:
            buf += c
            i += 1
    if buf:
        out.append(_RealText(buf))
    return out, i


_real_parse.in_args = False


def _real_substitution(s: str, i: int):
    j = i + 2
    while j < len(s) and (s[j].isalnum() or s[j] in "_-"):
        j += 1
    name, args = s[i + 2:j], []
    while s[j] == " ":
        j += 1
        if s[j] in "'\"":
            q = s[j]
            frags, j = _real_parse(s, j + 1, q)   # single/double_quoted_template: fragments, maybe none
            args.append(frags)
            j += 1
        else:
            old, _real_parse.in_args = _real_parse.in_args, True
            frags, j = _real_parse(s, j)
            _real_parse.in_args = old
            args.append(frags)
    assert s[j] == ")", s
    return ("sub", name, args), j + 1


def _real_is_substitution(x) -> bool:
    """type_utils.is_substitution: a Substitution, or a non-empty list holding at least one."""
    return isinstance(x, list) and len(x) > 0 and all(isinstance(a, (tuple, str)) for a in x) \
        and any(isinstance(a, (tuple, _RealText)) for a in x)


def _real_perform(frags, configs) -> str:
    return "".join(_real_perform_one(f, configs) for f in frags)


def _real_perform_one(f, configs) -> str:
    if isinstance(f, str):
        return str(f)
    _, name, args = f
    if name == "var":
        return configs[_real_perform(args[0], configs)]
    if name in ("equals", "not-equals"):
        # EqualsSubstitution.__init__: a non-substitution argument is str()-ed: [] -> '[]'
        left, right = (_real_perform(a, configs) if _real_is_substitution(a) else str(a) for a in args)
        same = L.launch_equals(left, right)       # EqualsSubstitution.perform: the one copy, in the launcher
        return str(same if name == "equals" else not same).lower()
    if name == "find-pkg-share":
        return "/share/" + _real_perform(args[0], configs)
    raise AssertionError(f"the port has no $({name})")


def _real_condition(el, configs) -> bool:
    """Action.parse if/unless + evaluate_condition_expression."""
    for attr, want in (("if", True), ("unless", False)):
        text = el.get(attr)
        if text is not None:
            value = _real_perform(_real_parse(text)[0], configs).strip().lower()
            assert value in ("true", "1", "false", "0"), (attr, text, value)
            return (value in ("true", "1")) == want
    return True


def real_launch_nodes(args: dict[str, str]) -> list[str]:
    """The executables ROS 2 launch starts for ``args``, by the port's rules."""
    configs = dict(args)
    started = []

    def walk(parent):
        for el in parent:
            if not isinstance(el.tag, str):
                continue
            if el.tag == "arg":
                if el.get("name") not in configs:
                    configs[el.get("name")] = _real_perform(_real_parse(el.get("default"))[0], configs)
            elif not _real_condition(el, configs):
                continue
            elif el.tag == "let":
                configs[el.get("name")] = _real_perform(_real_parse(el.get("value"))[0], configs)
            elif el.tag == "group":
                walk(el)
            elif el.tag == "node":
                started.append(el.get("exec"))

    walk(ET.parse(LAUNCH).getroot())
    return started


# ------------------------------------------------------------------------------------ the combinations
def _declared() -> set[str]:
    return {a.get("name") for a in ET.parse(LAUNCH).getroot().iter("arg")}


def combinations():
    """Each layout x record / no record x controller cbf / external (x foxglove off / on, when declared)."""
    axes = [("layout", ["container", "split", "processes"]), ("record", [None, "bags/run1"]),
            ("controller", [None, "cbf", "external"])]
    if "foxglove" in _declared():
        axes.append(("foxglove", [None, "8765"]))
    for values in itertools.product(*(v for _, v in axes)):
        yield {k: v for (k, _), v in zip(axes, values) if v is not None}


def project_nodes(args: dict[str, str]) -> list[str]:
    return [n.exec for n in L.load_launch(LAUNCH, args).nodes]


@pytest.mark.parametrize("args", list(combinations()), ids=lambda a: " ".join(f"{k}:={v}" for k, v in a.items()))
def test_both_launchers_start_the_same_processes(args):
    ours, real = project_nodes(args), real_launch_nodes(args)
    assert ours == real, f"{args}: legged-wbc launch starts {ours}, ros2 launch {real}"
    assert ("bag_recorder" in ours) == ("record" in args and args.get("layout") == "processes")
    assert ("wbc_controller" in ours) == (args.get("layout") == "processes" and args.get("controller") != "external")


def test_the_table():
    """The agreement table (docs: launcher agreement): layout x record x controller -> processes."""
    rows = {}
    for a in combinations():
        if "foxglove" in a:
            continue
        rows[(a["layout"], "record" in a, a.get("controller", "cbf"))] = project_nodes(a)
    assert rows[("processes", False, "cbf")] == ["mujoco_bridge", "state_estimator", "wbc_controller"]
    assert rows[("processes", True, "external")] == ["mujoco_bridge", "state_estimator", "bag_recorder"]
    assert rows[("split", True, "external")] == ["sim_container", "control_container"]
    assert rows[("container", False, "cbf")] == ["walking_container"]


def test_the_old_condition_meant_always_under_ros2_launch(tmp_path):
    """``$(not-equals $(var record) '')``: ROS 2 launch compares with the text '[]' (always true: the issue's
    recorder without record:=); the project's launcher now refuses it in one line instead of disagreeing."""
    f = tmp_path / "old.launch.xml"
    f.write_text("""<launch><arg name="record" default=""/>
      <node pkg="p" exec="rec" if="$(not-equals $(var record) '')"/></launch>""")
    global LAUNCH
    saved, LAUNCH = LAUNCH, f
    try:
        assert real_launch_nodes({}) == ["rec"]          # no record:=, and yet the recorder
    finally:
        LAUNCH = saved
    with pytest.raises(L.LaunchError, match=r"reads it as the text '\[\]'"):
        L.load_launch(f, {})


# EqualsSubstitution.perform (launch 3.7.1) by hand: booleans (any case) by value, then floats by
# math.isclose (nan is not close to nan), then the text; nothing stripped
EQUALS = [("1", "true", True), ("0", "False", True), ("2", "true", False), ("1", "1.0", True), (" 1", "1", True),
          (" true", "true", False), ("", "", True), ("nan", "nan", False), ("_", "_x", False), ("1e3", "1000", True)]


@pytest.mark.parametrize("a,b,same", EQUALS)
def test_equals_is_ros2_launchs(a, b, same):
    assert L.launch_equals(a, b) is same


def test_equals_matches_the_real_launch():
    """With ROS 2 launch importable: its own ``EqualsSubstitution`` gives the same for every pair."""
    subs = pytest.importorskip("launch.substitutions")
    from launch import LaunchContext

    for a, b, _ in EQUALS:
        assert (subs.EqualsSubstitution(a, b).perform(LaunchContext()) == "true") == L.launch_equals(a, b), (a, b)


def real_launch_started(args: dict[str, str], path=None) -> list[str]:
    """The executables the real ROS 2 launch (``launch`` + ``launch_xml`` + ``launch_ros``) starts for ``args``:
    its own parser, substitutions and conditions (``find-pkg-share legged_wbc`` needs the package in an
    ament index, ``AMENT_PREFIX_PATH``)."""
    import launch
    from launch.frontend import Parser
    from launch.utilities import perform_substitutions
    from launch_xml.entity import Entity

    import launch_ros  # noqa: F401  (exposes <node>)

    desc = Parser().parse_description(Entity(ET.parse(str(path or LAUNCH)).getroot()))
    ctx = launch.LaunchContext()
    for k, v in args.items():
        ctx.launch_configurations[k] = v
    out = []

    def visit(entities):
        for e in entities:
            if e.condition is not None and not e.condition.evaluate(ctx):
                continue
            if type(e).__name__ == "Node":
                out.append(perform_substitutions(ctx, e.node_executable))
                continue
            visit(e.visit(ctx) or [])

    visit(desc.entities)
    return out


def test_the_port_matches_the_real_launch():
    """With ROS 2 launch importable (built from source; not on PyPI): the real parser and substitutions
    agree with the port for every combination."""
    pytest.importorskip("launch_xml")
    pytest.importorskip("launch_ros")
    for args in combinations():
        assert real_launch_started(args) == real_launch_nodes(args), args
