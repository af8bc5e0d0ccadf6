"""A small runner for ROS 2 XML launch files (``launch``/``launch_ros`` are not installable from PyPI).

The launch files in ``launch/`` are standard ROS 2 XML: on a full ROS 2 install
``ros2 launch legged_wbc walking_sim.launch.xml`` runs them unchanged. This module implements the
subset they use:

* ``<launch>`` root; ``<arg name default description>`` (with ``<choice value/>`` children the value
  must be one of them, as in ROS 2); ``<let name value>``; ``<group>``
  (a conditional block; ``scoped`` is accepted, launch configurations stay global here);
* ``<node pkg exec name namespace output args ros_args on_exit sigterm_timeout sigkill_timeout>`` with
  ``<param from="FILE"/>``, ``<param name value/>`` and ``<remap from to/>`` children
  (``required="true"``, ROS 1 style, is accepted as an alias of ``on_exit="shutdown"``);
* ``if``/``unless`` on ``node``, ``group``, ``let``: the substituted text must be a boolean
  (``true``/``false``/``1``/``0``, any case), as in ROS 2;
* substitutions ``$(var X)``, ``$(env X [DEFAULT])``, ``$(optenv X [DEFAULT])``,
  ``$(find-pkg-share PKG)``, ``$(dirname)``, ``$(equals A B)`` / ``$(not-equals A B)`` (booleans and
  numbers compared by value, exactly as ROS 2 launch 3.7: :func:`launch_equals`; an empty quoted argument
  ``''`` is refused, since ROS 2 launch reads it as the text ``[]``), and ``$(eval EXPR)`` restricted to literals,
  comparisons, ``and``/``or``/``not``, arithmetic and ``A if C else B`` (no names, no calls);
  quoting and backslash escapes follow the ROS 2 substitution grammar.

Each node runs as its own process: the console script named ``exec`` (looked up next to
``sys.executable`` — the venv's ``bin`` — then ``<prefix>/lib/PKG`` on ``AMENT_PREFIX_PATH``, then
``PATH``) with ``--ros-args [-r __node:=NAME] [-r __ns:=NS] --params-file FILE -p NAME:=VALUE
-r FROM:=TO`` (``__node`` only when ``name=`` is given: ROS 2 applies it to every node of the
process, so a container is launched without it), as a direct child of the launcher (as ``ros2 launch``
does: the nodes of one launch are siblings, which is how the bridge knows the controller's handover,
:mod:`legged_wbc.ros.nodekit.launch_identity`; never through a wrapper process), in its own session (so a terminal Ctrl-C reaches only the launcher, which forwards
it once), with SIGTERM as its parent-death signal (``prctl(PR_SET_PDEATHSIG)``): a launcher that dies,
even by ``kill -9``, stops its nodes, which close their bags as on SIGTERM (the containers' recorder
processes in turn follow their container). The children's environment gets
``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` and ``PYTHONUNBUFFERED=1`` unless already set, and
``LEGGED_WBC_LINK_SECRET``: a random secret of this launch (never printed) that the two parts of
``layout:=split`` prove to each other on their host link. Output lines are prefixed ``[name]``; with
``output="log"`` they go to ``<log dir>/<name>.log`` instead.

Shutdown (like ``ros2 launch``): on Ctrl-C/SIGTERM, when a node with ``on_exit="shutdown"`` exits, or
when a node fails, every running node gets SIGINT, then SIGTERM after ``sigterm_timeout`` (default
5 s), then SIGKILL after ``sigkill_timeout`` more (default 5 s). A node stopped by a signal exits
``128 + signum`` (130 / 143, :mod:`legged_wbc.ros.tooling.lifetime`); that (or 0, or death by SIGINT /
SIGTERM) is a clean end only for a node the launcher sent that signal. Any other end the launch did not
ask for is a failure, one line naming the node and how it ended: a non-zero exit, a node stopped
from outside (exit 130 / 143, or killed by a signal), a node that had to be killed with SIGKILL, a node
that could not be started. The launcher exits 1 after a failure, else 130 after Ctrl-C (SIGINT), 143
after SIGTERM, else 0.
"""

from __future__ import annotations

import ast
import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from legged_wbc.ros.tooling.lifetime import die_with_parent

LINK_SECRET_ENV = "LEGGED_WBC_LINK_SECRET"   # the per-launch secret of the host link (legged_wbc.ros.transport.host_link)
STOP_EXITS = {128 + signal.SIGINT: signal.SIGINT, 128 + signal.SIGTERM: signal.SIGTERM}   # the nodes' convention


class LaunchError(RuntimeError):
    """The launch file or its arguments are invalid; the message says where."""


# ------------------------------------------------------------------------------------ substitutions
def _find_pkg_share(pkg: str) -> str:
    if pkg == "legged_wbc":
        from legged_wbc.robot import share_path

        return str(share_path("package.xml").parent)
    try:
        from ament_index_python.packages import get_package_share_directory

        return get_package_share_directory(pkg)
    except Exception as exc:
        raise LaunchError(f"$(find-pkg-share {pkg}): package not found ({exc})") from None


_ALLOWED_AST = (ast.Expression, ast.Constant, ast.Compare, ast.BoolOp, ast.UnaryOp, ast.BinOp, ast.IfExp,
                ast.And, ast.Or, ast.Not, ast.USub, ast.UAdd, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv,
                ast.Mod, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn, ast.Tuple,
                ast.List, ast.Load)


def safe_eval(expr: str) -> str:
    """``$(eval EXPR)`` for literal-only Python expressions; the result as launch text."""
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as exc:
        raise LaunchError(f"$(eval {expr}): not a valid expression ({exc.msg})") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in ("True", "False", "None"):
            continue
        if not isinstance(node, _ALLOWED_AST):
            raise LaunchError(f"$(eval {expr}): only literals, comparisons, boolean and arithmetic operators are "
                              f"supported here (found {type(node).__name__})")
    value = eval(compile(tree, "<launch eval>", "eval"), {"__builtins__": {}}, {"True": True, "False": False,
                                                                                 "None": None})
    return str(value)


class Substitutor:
    """Resolves ``$(...)`` substitutions in launch attribute text (ROS 2 grammar, subset)."""

    def __init__(self, configs: dict[str, str], launch_dir: Path):
        self.configs = configs
        self.launch_dir = launch_dir

    def __call__(self, text: str | None) -> str | None:
        if text is None:
            return None
        out, i = self._template(text, 0, None)
        return out

    # template: fragments until `end_quote` (None = end of text)
    def _template(self, s: str, i: int, end_quote: str | None) -> tuple[str, int]:
        out = []
        while i < len(s):
            c = s[i]
            if end_quote is not None and c == end_quote:
                return "".join(out), i + 1
            if c == "\\" and i + 1 < len(s):
                out.append(s[i + 1])
                i += 2
                continue
            if c == "$" and s.startswith("$(", i):
                val, i = self._substitution(s, i)
                out.append(val)
                continue
            out.append(c)
            i += 1
        if end_quote is not None:
            raise LaunchError(f"unterminated {end_quote} quote in {s!r}")
        return "".join(out), i

    def _substitution(self, s: str, i: int) -> tuple[str, int]:
        j = i + 2
        k = j
        while k < len(s) and (s[k].isalnum() or s[k] in "_-"):
            k += 1
        name = s[j:k]
        if not name:
            raise LaunchError(f"empty substitution name in {s!r}")
        args: list[str] = []
        i = k
        while True:
            if i >= len(s):
                raise LaunchError(f"unterminated $({name} ...) in {s!r}")
            if s[i] == ")":
                i += 1
                break
            if s[i] == " ":
                i += 1
                arg, i = self._argument(s, i)
                args.append(arg)
                continue
            raise LaunchError(f"unexpected {s[i]!r} in $({name} ...) of {s!r}")
        return self._resolve(name, args), i

    def _argument(self, s: str, i: int) -> tuple[str, int]:
        if i < len(s) and s[i] in "'\"":
            if s.startswith(s[i] * 2, i):
                raise LaunchError(f"empty quoted argument {s[i] * 2} in {s!r}: ROS 2 launch (3.7) reads it as the "
                                  "text '[]', not as empty; compare with a prefix instead, e.g. "
                                  "$(not-equals _$(var record) _)")
            return self._template(s, i + 1, s[i])
        out = []
        while i < len(s) and s[i] not in " )":
            if s[i] == "\\" and i + 1 < len(s):
                out.append(s[i + 1])
                i += 2
            elif s.startswith("$(", i):
                val, i = self._substitution(s, i)
                out.append(val)
            else:
                out.append(s[i])
                i += 1
        return "".join(out), i

    def _resolve(self, name: str, args: list[str]) -> str:
        if name == "var":
            if len(args) != 1:
                raise LaunchError("$(var NAME) takes one argument")
            if args[0] not in self.configs:
                raise LaunchError(f"$(var {args[0]}): launch argument {args[0]!r} is not declared or set")
            return self.configs[args[0]]
        if name in ("env", "optenv"):
            if not 1 <= len(args) <= 2:
                raise LaunchError(f"$({name} NAME [DEFAULT]) takes one or two arguments")
            if args[0] in os.environ:
                return os.environ[args[0]]
            if len(args) == 2:
                return args[1]
            if name == "optenv":
                return ""
            raise LaunchError(f"$(env {args[0]}): environment variable not set and no default given")
        if name == "find-pkg-share":
            if len(args) != 1:
                raise LaunchError("$(find-pkg-share PKG) takes one argument")
            return _find_pkg_share(args[0])
        if name == "dirname":
            return str(self.launch_dir)
        if name in ("equals", "not-equals"):
            if len(args) != 2:
                raise LaunchError(f"$({name} A B) takes two arguments")
            same = launch_equals(args[0], args[1])
            return "true" if same == (name == "equals") else "false"
        if name == "eval":
            if len(args) != 1:
                raise LaunchError("$(eval EXPR) takes one (quoted) argument")
            return safe_eval(args[0])
        raise LaunchError(f"substitution $({name} ...) is not supported by this launcher")


def launch_equals(left: str, right: str) -> bool:
    """``$(equals A B)`` of ROS 2 launch (``launch/substitutions/equals_substitution.py``, 3.7.1): two
    booleans (``true``/``false``/``1``/``0``, any case) by value, else two numbers by ``math.isclose``,
    else the text; no stripping."""
    def is_bool(t):
        return t.lower() in ("true", "false", "1", "0")

    def is_float(t):
        try:
            float(t)
            return True
        except ValueError:
            return False

    if is_bool(left) and is_bool(right):
        return (left.lower() in ("true", "1")) == (right.lower() in ("true", "1"))
    if is_float(left) and is_float(right):
        return math.isclose(float(left), float(right))
    return left == right


def to_bool(text: str, where: str) -> bool:
    t = text.strip().lower()
    if t in ("true", "1"):
        return True
    if t in ("false", "0"):
        return False
    raise LaunchError(f"{where}: condition must be true/false/1/0, got {text!r}")


# ------------------------------------------------------------------------------------ description
@dataclass
class NodeAction:
    """One ``<node>`` after substitution: what to run."""

    pkg: str
    exec: str
    name: str
    namespace: str = ""
    output: str = "screen"
    extra_args: list[str] = field(default_factory=list)
    ros_extra: list[str] = field(default_factory=list)    # ros_args="...": right after --ros-args
    params_files: list[str] = field(default_factory=list)
    params: list[tuple[str, str]] = field(default_factory=list)
    remaps: list[tuple[str, str]] = field(default_factory=list)
    shutdown_on_exit: bool = False
    rename: bool = True      # name= given: remap the node name (ROS 2: of every node in the process)
    sigterm_timeout: float = 5.0
    sigkill_timeout: float = 5.0

    def ros_args(self) -> list[str]:
        out = ["--ros-args", *self.ros_extra] + (["-r", f"__node:={self.name}"] if self.rename else [])
        if self.namespace:
            ns = self.namespace if self.namespace.startswith("/") else "/" + self.namespace
            out += ["-r", f"__ns:={ns}"]
        # ROS 2 applies parameter sources in order: files first, then the single values after them
        for f in self.params_files:
            out += ["--params-file", f]
        for k, v in self.params:
            out += ["-p", f"{k}:={v if v != '' else repr('')}"]   # rcl parses an empty value as an error
        for a, b in self.remaps:
            out += ["-r", f"{a}:={b}"]
        return out

    def command(self, executable: str | None = None) -> list[str]:
        return [executable or resolve_executable(self.pkg, self.exec), *self.extra_args, *self.ros_args()]


@dataclass
class LaunchPlan:
    path: Path
    arguments: dict[str, tuple[str | None, str]]   # declared args: name -> (default, description)
    configs: dict[str, str]                        # final launch configurations
    nodes: list[NodeAction]


def resolve_executable(pkg: str, exe: str) -> str:
    """The console script ``exe``: next to ``sys.executable``, in ``<prefix>/lib/<pkg>``, or on PATH."""
    cand = Path(sys.executable).parent / exe
    if cand.is_file() and os.access(cand, os.X_OK):
        return str(cand)
    for prefix in filter(None, os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep)):
        cand = Path(prefix, "lib", pkg, exe)
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    found = shutil.which(exe)
    if found:
        return found
    raise LaunchError(f"executable {exe!r} of package {pkg!r} not found (next to {sys.executable}, "
                      "in AMENT_PREFIX_PATH or on PATH)")


def parse_launch_args(items: list[str]) -> dict[str, str]:
    """``["name:=value", ...]`` -> dict (the ``ros2 launch`` argument syntax)."""
    out = {}
    for it in items:
        if ":=" not in it:
            raise LaunchError(f"launch argument {it!r}: expected name:=value")
        k, v = it.split(":=", 1)
        if not k:
            raise LaunchError(f"launch argument {it!r}: empty name")
        out[k] = v
    return out


def load_launch(path: str | Path, args: dict[str, str] | None = None, *, strict: bool = True) -> LaunchPlan:
    """Parse and evaluate a launch file with ``args``; unknown arguments are an error when ``strict``."""
    path = Path(path).resolve()
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        raise LaunchError(f"{path}: {exc}") from None
    if root.tag != "launch":
        raise LaunchError(f"{path}: root element must be <launch>, got <{root.tag}>")
    given = dict(args or {})
    r = _LaunchReader(path, dict(given))
    r.walk(root)
    unknown = sorted(set(given) - set(r.declared))
    if strict and unknown:
        known = ", ".join(f"{k} (default {v[0]!r})" for k, v in r.declared.items())
        raise LaunchError(f"{path.name}: unknown launch argument(s) {unknown}; declared: {known}")
    return LaunchPlan(path=path, arguments=r.declared, configs=r.configs, nodes=r.nodes)


class _LaunchReader:
    """Evaluates a launch file's elements in order: arguments and ``let`` into ``configs``, the declared
    arguments into ``declared`` (name -> (default, description)), the enabled nodes into ``nodes``."""

    def __init__(self, path: Path, configs: dict[str, str]):
        self.path = path
        self.configs = configs
        self.declared: dict[str, tuple[str | None, str]] = {}
        self.nodes: list[NodeAction] = []
        self.sub = Substitutor(configs, path.parent)

    def where(self, el) -> str:
        return f"{self.path.name}: <{el.tag}{(' name=' + repr(el.get('name'))) if el.get('name') else ''}>"

    def enabled(self, el) -> bool:
        c_if, c_unless = el.get("if"), el.get("unless")
        if c_if is not None and c_unless is not None:
            raise LaunchError(f"{self.where(el)}: both if and unless given")
        if c_if is not None:
            return to_bool(self.sub(c_if), self.where(el))
        if c_unless is not None:
            return not to_bool(self.sub(c_unless), self.where(el))
        return True

    def walk(self, parent) -> None:
        for el in parent:
            if not isinstance(el.tag, str):  # comments
                continue
            if el.tag == "arg":
                self.arg(el)
            elif not self.enabled(el):
                continue
            elif el.tag == "let":
                self.configs[el.get("name")] = self.sub(el.get("value", ""))
            elif el.tag == "group":
                self.walk(el)
            elif el.tag == "node":
                self.nodes.append(self.node_action(el))
            else:
                raise LaunchError(f"{self.where(el)}: element <{el.tag}> is not supported by this launcher")

    def arg(self, el) -> None:
        configs, sub = self.configs, self.sub
        name = el.get("name")
        if not name:
            raise LaunchError(f"{self.where(el)}: <arg> needs a name")
        default = el.get("default")
        desc = el.get("description", "")
        if el.get("value") is not None:  # <arg name value/>: a fixed value
            configs[name] = sub(el.get("value"))
        elif name not in configs:
            if default is None:
                raise LaunchError(f"{self.path.name}: required launch argument {name!r} not given "
                                  f"({desc})" if desc else f"{self.path.name}: required launch argument {name!r}")
            configs[name] = sub(default)
        choices = [c.get("value") for c in el if isinstance(c.tag, str) and c.tag == "choice"]
        if choices and configs[name] not in choices:
            raise LaunchError(f"launch argument {name}:={configs[name]!r} is not one of "
                              f"{', '.join(choices)}")
        self.declared[name] = (default, desc)

    def node_action(self, el) -> NodeAction:
        sub, where = self.sub, self.where
        pkg, exe = sub(el.get("pkg")), sub(el.get("exec"))
        if not pkg or not exe:
            raise LaunchError(f"{where(el)}: <node> needs pkg and exec")
        name = sub(el.get("name")) or exe
        on_exit = sub(el.get("on_exit"))
        if on_exit not in (None, "shutdown"):
            raise LaunchError(f"{where(el)}: on_exit={on_exit!r} (only 'shutdown' is supported)")
        required = to_bool(sub(el.get("required")), where(el)) if el.get("required") is not None else False
        a = NodeAction(pkg=pkg, exec=exe, name=name, namespace=sub(el.get("namespace")) or "",
                       output=sub(el.get("output")) or "screen",
                       extra_args=(sub(el.get("args")) or "").split(),
                       ros_extra=(sub(el.get("ros_args")) or "").split(),
                       shutdown_on_exit=on_exit == "shutdown" or required,
                       rename=el.get("name") is not None)
        for attr in ("sigterm_timeout", "sigkill_timeout"):
            if el.get(attr) is not None:
                setattr(a, attr, float(sub(el.get(attr))))
        for ch in el:
            if isinstance(ch.tag, str):
                self.node_child(el, ch, a)
        return a

    def node_child(self, el, ch, a: NodeAction) -> None:
        """A ``<param>`` or ``<remap>`` of the node ``el`` into its action ``a``."""
        sub, where = self.sub, self.where
        if ch.tag == "param":
            if ch.get("from") is not None:
                f = Path(sub(ch.get("from")))
                if not f.is_file():
                    raise LaunchError(f"{where(el)}: parameter file {f} "
                                      + ("is not a regular file" if f.exists() else "not found"))
                a.params_files.append(str(f))
            else:
                pname, value = ch.get("name"), ch.get("value")
                if pname is None or value is None:
                    raise LaunchError(f"{where(el)}: <param> needs from=, or name= and value=")
                a.params.append((sub(pname), sub(value)))
        elif ch.tag == "remap":
            a.remaps.append((sub(ch.get("from")), sub(ch.get("to"))))
        else:
            raise LaunchError(f"{where(el)}: <{ch.tag}> inside <node> is not supported by this launcher")


def describe_arguments(plan: LaunchPlan) -> str:
    lines = [f"Arguments of {plan.path.name} (name:=value):"]
    for k, (default, desc) in plan.arguments.items():
        lines.append(f"  {k}: {desc}" + (f" (default: {default!r})" if default is not None else " (required)"))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ running
FASTDDS_PROFILES_ENV = "FASTDDS_DEFAULT_PROFILES_FILE"


def child_env(base: dict | None = None) -> dict:
    """The nodes' environment: ``base`` (default ours), loopback discovery and unbuffered output unless set,
    the package's Fast DDS profile (``config/fastdds_launch.xml``: deeper shared-memory buffers, so a
    subscriber descheduled for a while, the recorder, loses nothing) unless a profile file is set or
    another middleware chosen, and a new link secret (``LINK_SECRET_ENV``: 32 random bytes as hex) for
    this launch."""
    env = dict(os.environ if base is None else base)
    env.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    env.setdefault("PYTHONUNBUFFERED", "1")
    fast_dds = env.get("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp").startswith("rmw_fastrtps")
    if fast_dds and not env.get(FASTDDS_PROFILES_ENV):
        env[FASTDDS_PROFILES_ENV] = _find_pkg_share("legged_wbc") + "/config/fastdds_launch.xml"
    env[LINK_SECRET_ENV] = secrets.token_hex(32)
    return env


def ending_signal(rc: int) -> int | None:
    """The signal that ended a node with exit status ``rc``: it killed it (``rc`` < 0), or the node stopped on
    it (130 / 143, :mod:`legged_wbc.ros.tooling.lifetime`); None for an exit code of the node's own."""
    return -rc if rc < 0 else STOP_EXITS.get(rc)


def how_ended(rc: int, asked: bool) -> str:
    """How a node with exit status ``rc`` ended, in words, when a signal ended it (``asked``: the launcher
    sent that signal); empty for an exit code of its own."""
    sig = ending_signal(rc)
    if sig is None:
        return ""
    name = signal.Signals(sig).name if sig in signal.valid_signals() else f"signal {sig}"
    return f"{'killed' if rc < 0 else 'stopped'} by {name}" + ("" if asked else " from outside")


@dataclass
class _Proc:
    action: NodeAction
    popen: subprocess.Popen | None = None
    reader: threading.Thread | None = None
    returncode: int | None = None
    sent: set = field(default_factory=set)   # the signals we sent it (asking it to stop)
    crashed: bool = False
    last_line: str = ""       # its last line of output: the "why" of the summary when it dies

    @property
    def signalled(self) -> bool:
        return bool(self.sent)


class Launcher:
    """Runs the nodes of a :class:`LaunchPlan` and supervises them (see the module docstring)."""

    def __init__(self, plan: LaunchPlan, *, out=None, log_dir: str | Path | None = None, env: dict | None = None):
        self.plan = plan
        self.out = out or sys.stdout
        self.log_dir = Path(log_dir) if log_dir else None
        self.env = child_env(env)
        self.procs = [_Proc(a) for a in plan.nodes]
        self._lock = threading.Lock()
        self._shutdown_reason: str | None = None
        self._stopped_by = 0          # the first SIGINT / SIGTERM the launcher received
        self._sigint_count = 0

    def say(self, text: str) -> None:
        with self._lock:
            self.out.write(f"[launch] {text}\n")
            self.out.flush()

    def _pump(self, p: _Proc) -> None:
        prefix = f"[{p.action.name}] "
        logf = None
        if p.action.output == "log":
            d = self.log_dir or Path(os.environ.get("ROS_LOG_DIR", Path.home() / ".ros" / "log")) / \
                time.strftime("legged_wbc_launch_%Y-%m-%d-%H-%M-%S")
            d.mkdir(parents=True, exist_ok=True)
            logf = open(d / f"{p.action.name}.log", "w")
        try:
            for raw in iter(p.popen.stdout.readline, b""):
                line = raw.decode(errors="replace").rstrip("\n")
                if line.strip():
                    p.last_line = line.strip()
                if logf is not None:
                    logf.write(line + "\n")
                    logf.flush()
                    if p.action.output != "both":
                        continue
                with self._lock:
                    self.out.write(prefix + line + "\n")
                    self.out.flush()
        finally:
            if logf is not None:
                logf.close()

    def start(self) -> None:
        """Start the nodes. Called by :meth:`run` only: the parent-death signal fires when the thread that
        started a child ends, and ``run``'s thread lives until every child has ended."""
        pdeathsig = die_with_parent(signal.SIGTERM)
        for p in self.procs:
            if self._shutdown_reason:
                break
            a = p.action
            try:
                cmd = a.command()
                p.popen = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, env=self.env, start_new_session=True,
                                           preexec_fn=pdeathsig)
            except (LaunchError, OSError, subprocess.SubprocessError) as exc:
                p.crashed = True
                p.returncode = -1
                self.say(f"cannot start {a.name}: {exc}")
                if a.shutdown_on_exit:
                    self.request_shutdown(f"required node {a.name} could not start")
                continue
            self.say(f"started {a.name} [pid {p.popen.pid}]: {' '.join(cmd)}")
            p.reader = threading.Thread(target=self._pump, args=(p,), daemon=True)
            p.reader.start()

    def request_shutdown(self, reason: str) -> None:
        if self._shutdown_reason is None:
            self._shutdown_reason = reason
            self.say(f"shutting down: {reason}")

    def _on_signal(self, signum, frame) -> None:
        self._stopped_by = self._stopped_by or signum
        if signum == signal.SIGINT:
            self._sigint_count += 1
        self.request_shutdown(f"{signal.Signals(signum).name} received")
        if self._sigint_count >= 2:  # impatient user: escalate at once
            for p in self.running():
                self._signal(p, signal.SIGTERM)

    def pids(self) -> dict[str, int]:
        """``{node name: pid}`` of the node processes started so far (e.g. for ``bench realtime``'s CPU sampling)."""
        return {p.action.name: p.popen.pid for p in self.procs if p.popen is not None}

    def running(self) -> list[_Proc]:
        return [p for p in self.procs if p.popen is not None and p.returncode is None]

    def _signal(self, p: _Proc, sig) -> None:
        p.sent.add(int(sig))
        try:
            p.popen.send_signal(sig)
        except ProcessLookupError:
            pass

    def _reap(self) -> None:
        for p in self.running():
            rc = p.popen.poll()
            if rc is None:
                continue
            p.returncode = rc
            if p.reader is not None:
                p.reader.join(timeout=1.0)
            name, sig = p.action.name, ending_signal(rc)
            if signal.SIGKILL in p.sent:
                p.crashed = True
                self.say(f"process {name} did not stop within {p.action.sigterm_timeout + p.action.sigkill_timeout:g} s "
                         f"of SIGINT and SIGTERM: killed by SIGKILL (exit code {rc})")
            elif rc == 0 or sig in p.sent:    # ended as asked (a stop signal from outside is not one we sent)
                self.say(f"process {name} finished (exit code {rc})")
            else:
                p.crashed = True
                how = how_ended(rc, sig in p.sent)
                self.say(f"process {name} died with exit code {rc}" + (f" ({how})" if how else ""))
                self.request_shutdown(f"{name} {how or f'failed (exit code {rc})'}")
            if p.action.shutdown_on_exit and not p.signalled:
                self.request_shutdown(f"{name} exited and is marked on_exit=shutdown")

    def _stop_all(self) -> None:
        """SIGINT to every running node; SIGTERM after its sigterm_timeout; SIGKILL after sigkill_timeout more."""
        self._reap()                  # a node that ended on its own is not counted as one we stopped
        t0 = time.monotonic()
        stage: dict[int, int] = {}
        for p in self.running():
            self._signal(p, signal.SIGINT)
            stage[id(p)] = 0
        while self.running():
            self._reap()
            now = time.monotonic() - t0
            for p in self.running():
                st = stage.get(id(p), 0)
                if st == 0 and now > p.action.sigterm_timeout:
                    self.say(f"{p.action.name} still running {p.action.sigterm_timeout:g} s after SIGINT: SIGTERM")
                    self._signal(p, signal.SIGTERM)
                    stage[id(p)] = 1
                elif st == 1 and now > p.action.sigterm_timeout + p.action.sigkill_timeout:
                    self.say(f"{p.action.name} still running after SIGTERM: SIGKILL")
                    self._signal(p, signal.SIGKILL)
                    stage[id(p)] = 2
            time.sleep(0.02)
        self._reap()

    def run(self) -> int:
        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.start()
            while self._shutdown_reason is None:
                self._reap()
                if not self.running():
                    break
                time.sleep(0.05)
            self._stop_all()
        finally:
            for s, h in old.items():
                signal.signal(s, h)
        crashed = [p for p in self.procs if p.crashed]
        if crashed:
            for p in self.procs:
                if p.reader is not None:
                    p.reader.join(timeout=1.0)       # its last lines are read
            why = "; ".join(f"{p.action.name} (exit {p.returncode}): {p.last_line}" if p.last_line
                            else f"{p.action.name} (exit {p.returncode})" for p in crashed)
            self.say(f"crashed: {why}")
            return 1
        return 128 + self._stopped_by if self._stopped_by else 0


def resolve_launch_file(name: str) -> Path:
    """``walking_sim`` -> ``<share>/launch/walking_sim.launch.xml``; a path is used as given."""
    p = Path(name)
    if p.suffix in (".xml",) or os.sep in name or p.exists():
        if not p.exists():
            raise LaunchError(f"launch file {p} not found")
        return p
    from legged_wbc.robot import share_path

    for cand in (share_path("launch", f"{name}.launch.xml"), share_path("launch", f"{name}.xml")):
        if cand.exists():
            return cand
    raise LaunchError(f"no launch file {name!r} in {share_path('launch')}")


def launch(name: str, args: list[str] | dict[str, str], *, dry_run: bool = False, out=None, check=None) -> int:
    """Run a launch file by name or path with ``name:=value`` arguments; returns the exit status.
    ``check(plan) -> str | None``: a problem found before any node starts (a :class:`LaunchError`)."""
    path = resolve_launch_file(name)
    plan = load_launch(path, args if isinstance(args, dict) else parse_launch_args(args))
    if check is not None and (why := check(plan)) is not None:
        raise LaunchError(why)
    out = out or sys.stdout
    if dry_run:
        for a in plan.nodes:
            try:
                exe = resolve_executable(a.pkg, a.exec)
            except LaunchError as exc:
                exe = f"<{exc}>"
            out.write(f"[{a.name}]{' (on_exit=shutdown)' if a.shutdown_on_exit else ''} "
                      f"{' '.join(a.command(exe))}\n")
        return 0
    return Launcher(plan, out=out).run()
