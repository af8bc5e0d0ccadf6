"""What a sweep runs: the randomized categories and their ranges (``config/sweeps/*.yaml``), the
parameters trial ``k`` draws (:func:`sample_trial`), the controllers compared and the runs planned
(:func:`plan_runs`), each with the ``legged-wbc run`` command that reproduces it."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# index = the category's seed stream (new categories go at the end: the others' draws stay as they were)
RANDOMIZE = ("disturbance", "friction", "noise", "mass", "push", "terrain", "actuators", "delay", "command")
# what --randomize means when not given: the world and the disturbance, not the ground's shape (asked for
# by name: --randomize terrain,...) nor the drives and the latencies (--randomize actuators,delay) nor a
# velocity command schedule (--randomize default,command)
DEFAULT_RANDOMIZE = ("disturbance", "friction", "noise", "mass", "push")
METRICS = ("max_violation_rad", "violation_rate_pct", "rp_rmse_deg", "torque_rms_nm", "torque_max_nm",
           "distance_m", "qp_p99_us", "velocity_tracking_rmse_mps", "yaw_rate_tracking_rmse_radps",
           "estimated_velocity_rmse_mps")
# --randomize command: each segment's kind -> the axes it commands ("+vx": forward only, "-vx": backward
# only, "vy": either sign); a commanded axis gets a magnitude of COMMAND_MIN_FRACTION..1 of its range's bound
COMMAND_KINDS = {"forward": ("+vx",), "backward": ("-vx",), "sideways": ("vy",), "turn": ("wz",),
                 "arc": ("+vx", "wz"), "omni": ("vx", "vy", "wz"), "stop": ()}
COMMAND_MIN_FRACTION = 0.3
MODES = ("none", "damping", "cbf")
BARRIER_TARGET_RAD = 0.005          # the barrier's worst-case target (d / k_p,b of the paper)
BLAS_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "BLIS_NUM_THREADS": "1", "VECLIB_MAXIMUM_THREADS": "1", "NUMEXPR_NUM_THREADS": "1"}
# metrics that differ between two runs of the same trial only by machine timing
TIMING_KEYS = ("wall_time_s", "realtime_factor", "cpu_time_s", "realtime_factor_cpu", "qp_p99_us", "qp_over_2ms_pct")


class SweepError(RuntimeError):
    pass


# ------------------------------------------------------------------------------------ ranges
def load_ranges(name_or_path: str = "default") -> dict:
    """The ``sweep:`` block of ``config/sweeps/NAME.yaml`` (or a YAML path)."""
    from legged_wbc.robot import ConfigError, find_config, load_yaml_file

    try:
        p = find_config("sweeps", name_or_path, "sweep ranges")
        doc = load_yaml_file(p) or {}
    except ConfigError as exc:
        raise SweepError(str(exc)) from None
    if "sweep" not in doc or not isinstance(doc["sweep"], dict):
        raise SweepError(f"{p}: no 'sweep:' mapping")
    rng = doc["sweep"]
    for cat, spec in rng.items():
        if cat == "variants":
            continue
        if cat not in RANDOMIZE:
            raise SweepError(f"{p}: unknown category {cat!r} (known: {', '.join(RANDOMIZE)}, variants)")
        for key, dist in (spec or {}).items():
            if not isinstance(dist, dict) or len(dist) != 1 or next(iter(dist)) not in ("uniform", "choice"):
                raise SweepError(f"{p}: {cat}.{key}: expected {{uniform: [a, b]}} or {{choice: [...]}}")
            kind, val = next(iter(dist.items()))
            if kind == "uniform" and (len(val) != 2 or float(val[0]) > float(val[1])):
                raise SweepError(f"{p}: {cat}.{key}: uniform needs [low, high] with low <= high")
            if kind == "choice" and not val:
                raise SweepError(f"{p}: {cat}.{key}: empty choice")
        if cat == "command":
            _check_command_ranges(p, spec or {})
    return rng


def _check_command_ranges(p, spec: dict) -> None:
    """The ``command`` section: ``kind`` a choice of :data:`COMMAND_KINDS`, ``segment_s`` a positive
    uniform range [s], ``vx``, ``vy``, ``wz`` uniform ranges containing 0 [m/s, m/s, rad/s]."""
    for key in ("kind", "segment_s", "vx", "vy", "wz"):
        if key not in spec:
            raise SweepError(f"{p}: command.{key} missing (kind, segment_s, vx, vy, wz)")
    kinds = spec["kind"].get("choice")
    if not kinds or any(k not in COMMAND_KINDS for k in kinds):
        raise SweepError(f"{p}: command.kind: a choice of {', '.join(COMMAND_KINDS)}, got {spec['kind']!r}")
    for key in ("segment_s", "vx", "vy", "wz"):
        val = spec[key].get("uniform")
        if val is None:
            raise SweepError(f"{p}: command.{key}: expected {{uniform: [a, b]}}")
        lo, hi = float(val[0]), float(val[1])
        if (key == "segment_s" and lo <= 0) or (key != "segment_s" and not lo <= 0.0 <= hi):
            raise SweepError(f"{p}: command.{key}: {val} (segment_s > 0; a velocity range must contain 0)")


def _fmt(x) -> str:
    """A value as ``--set`` text that YAML parses back to the same value (no exponent notation)."""
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    if isinstance(x, (float, np.floating)):
        s = f"{float(x):.6f}".rstrip("0")
        return s + "0" if s.endswith(".") else s
    return str(x)


def _draw(rng: np.random.Generator, dist: dict):
    kind, val = next(iter(dist.items()))
    if kind == "uniform":
        return float(f"{rng.uniform(float(val[0]), float(val[1])):.6f}")
    return val[int(rng.integers(len(val)))]


def sample_trial(k: int, seed: int, randomize, ranges: dict, scenario, duration: float) -> dict:
    """Trial ``k``'s parameters: ``{"params": {category: {...}}, "sets": [key=value, ...]}``.

    Each category has its own generator ``default_rng([seed, k, index in RANDOMIZE])``."""
    params: dict = {}
    sets: list[str] = []

    def gen(cat):
        return np.random.default_rng([int(seed), int(k), RANDOMIZE.index(cat)])

    walk_left = max(0.0, duration - scenario.t_s)   # walking time after t_s in this run [s]
    for cat in RANDOMIZE:
        if cat not in randomize:
            continue
        spec = ranges.get(cat)
        if not spec:
            raise SweepError(f"--randomize {cat}: the sweep ranges have no {cat!r} section")
        g = gen(cat)
        if cat == "command":
            p, cat_sets = _command_draw(spec, g, scenario.gait_start, duration)
        else:
            d = {key: _draw(g, dist) for key, dist in spec.items()}   # drawn in the YAML's order
            p, cat_sets = _category_draw(cat, d, g, scenario, walk_left)
        params[cat] = p
        sets += cat_sets
    return {"params": params, "sets": sets}


def _push_scale(robot: str) -> float:
    """The push ranges are the hexapod's (config/sweeps: 95 kg); a URDF robot's pushes scale with its mass
    (the same velocity change), a generated robot's are taken as they are."""
    from legged_wbc.robot import load_robot_config
    from legged_wbc.robot_defaults import HEX_MASS

    cfg = load_robot_config(robot)
    return 1.0 if cfg.kind == "generated" else float(cfg.robot_mass) / HEX_MASS


def _category_draw(cat: str, d: dict, g: np.random.Generator, scenario, walk_left: float) -> tuple[dict, list[str]]:
    """One category's parameters and ``--set`` list from its draws ``d`` (``walk_left``: walking time
    after ``t_s`` [s], where the disturbance and the push begin)."""
    from legged_wbc.robot import load_robot_config

    sets: list[str] = []
    if cat == "disturbance":
        mag = float(f"{d.get('magnitude_factor', 1.0) * scenario.disturbance.torque_nm:.6f}")
        dur = float(d.get("duration", scenario.disturbance.duration))
        onset = float(f"{d.get('onset_fraction', 0.0) * max(0.0, walk_left - dur):.6f}")
        p = {"leg": str(d.get("leg", scenario.disturbance.leg)), "sign": int(d.get("sign", scenario.disturbance.sign)),
             "torque_nm": mag, "start_offset": onset, "duration": dur}
        sets += ["disturbance.enabled=true"] + [f"disturbance.{a}={_fmt(b)}" for a, b in p.items()]
    elif cat == "friction":
        p = {"mu": float(d["mu"])}
        sets.append(f"ground.friction={_fmt(p['mu'])}")
    elif cat == "noise":
        p = {a: float(d.get(a, 0.0)) for a in ("joint_velocity", "gyro", "accel")}
        p["seed"] = int(g.integers(1, 2**31 - 1))
        sets += [f"noise.{a}={_fmt(b)}" for a, b in p.items()]
    elif cat == "mass":
        body = load_robot_config(scenario.robot).base_mass
        p = {"fraction": float(d["fraction"]), "mass_kg": float(f"{d['fraction'] * body:.6f}")}
        sets.append(f"payload.mass_kg={_fmt(p['mass_kg'])}")
    elif cat == "terrain":
        p, terrain_sets = _terrain_draw(d, g)
        sets += terrain_sets
    elif cat == "actuators":           # the drives' model (legged_wbc.scenario: ideal | realistic)
        p = {"model": str(d["model"])}
        sets.append(f"actuators={p['model']}")
    elif cat == "delay":               # sensor / command latency in control ticks
        p = {a: int(d.get(a, 0)) for a in ("sensor_delay_ticks", "command_delay_ticks")}
        sets += [f"{a}={b}" for a, b in p.items()]
    else:  # push
        sign = 1 if int(g.integers(2)) else -1
        dur = float(d.get("duration", 0.2))
        onset = float(f"{d.get('onset_fraction', 0.0) * max(0.0, walk_left - dur):.6f}")
        p = {"force_n": float(f"{sign * d['force_n'] * _push_scale(scenario.robot):.6f}"), "start_offset": onset,
             "duration": dur}
        sets += ["push.enabled=true"] + [f"push.{a}={_fmt(b)}" for a, b in p.items()]
    return p, sets


def _command_draw(spec: dict, g: np.random.Generator, gait_start: float, duration: float) -> tuple[dict, list[str]]:
    """A velocity command schedule (scenario key ``commands``; heading frame, REP 103): zero until the
    gait start, then segments of ``segment_s`` [s] until ``duration``, each of a kind drawn from
    ``kind`` (:data:`COMMAND_KINDS`; ``stop``: zero, the gait stops and the robot stands) with each
    commanded axis ``COMMAND_MIN_FRACTION..1`` x its range's bound on its side. Returns
    ``({"segments": [{t, kind, vx, vy, wz}, ...]}, ["commands=[...]"])``."""
    entries = [{"t": 0.0, "kind": "stand", "vx": 0.0, "vy": 0.0, "wz": 0.0}]
    t = float(gait_start)
    while t < duration:
        kind = str(_draw(g, spec["kind"]))
        seg = float(_draw(g, spec["segment_s"]))
        e = {"t": float(f"{t:.6f}"), "kind": kind, "vx": 0.0, "vy": 0.0, "wz": 0.0}
        for ax in COMMAND_KINDS[kind]:
            name = ax.lstrip("+-")
            sign = {"+": 1.0, "-": -1.0}.get(ax[0]) or (1.0 if int(g.integers(2)) else -1.0)
            lo, hi = (float(x) for x in spec[name]["uniform"])
            bound = hi if sign > 0 else -lo
            e[name] = float(f"{sign * g.uniform(COMMAND_MIN_FRACTION, 1.0) * bound:.6f}") + 0.0
        entries.append(e)
        t += seg
    text = ", ".join("{" + ", ".join(f"{k}: {_fmt(e[k])}" for k in ("t", "vx", "vy", "wz")) + "}" for e in entries)
    return {"segments": entries}, [f"commands=[{text}]"]


# keys of the terrain drawn for each kind (the others keep the scenario's)
_TERRAIN_KEYS = {"flat": (), "slope": ("angle_deg",), "steps": ("height_m",), "rough": ("amplitude_m",)}


def _terrain_draw(d: dict, g: np.random.Generator) -> tuple[dict, list[str]]:
    """A trial's terrain: its kind and that kind's size from the draws ``d``; a rough field gets a
    seed of its own. Returns ``(params, sets)``."""
    kind = str(d.get("kind", "flat"))
    p = {"kind": kind}
    for key in _TERRAIN_KEYS.get(kind, ()):
        if key in d:
            p[key] = float(d[key])
    if kind == "rough":
        p["seed"] = int(g.integers(0, 2**31 - 1))
    return p, [f"terrain.{a}={_fmt(b)}" for a, b in p.items()]


# ------------------------------------------------------------------------------------ plan
@dataclass
class Variant:
    name: str          # the name in the results (damping, cbf, or a variant from the ranges YAML)
    controller: str    # none / damping / cbf
    sets: list = field(default_factory=list)


def resolve_controllers(names, ranges: dict) -> list[Variant]:
    variants = ranges.get("variants") or {}
    out = []
    for n in names:
        n = n.strip()
        if not n:
            continue
        if n in MODES:
            out.append(Variant(n, n, []))
        elif n in variants:
            v = variants[n]
            ctl = str(v.get("controller", ""))
            if ctl not in MODES:
                raise SweepError(f"variant {n}: controller must be one of {MODES}, got {ctl!r}")
            out.append(Variant(n, ctl, [str(s) for s in v.get("set", [])]))
        else:
            raise SweepError(f"--controllers {n}: not one of {MODES} nor a variant of the ranges "
                             f"({sorted(variants) or 'none defined'})")
    if len({v.name for v in out}) != len(out):
        raise SweepError("--controllers: a name is given twice")
    if not out:
        raise SweepError("--controllers: none given")
    return out


def run_name(k: int, name: str) -> str:
    return f"t{k:04d}-{name}"


def reproduce_command(scenario_arg: str, controller: str, duration: float, sets: list[str], out: str) -> str:
    parts = ["legged-wbc", "run", "--controller", controller, "--scenario", scenario_arg,
             "--duration", _fmt(float(duration))]
    for s in sets:
        parts += ["--set", s]
    parts += ["--out", out, "--quiet"]
    return " ".join(shlex.quote(p) for p in parts)


def plan_runs(scenario_arg: str, trials: int, variants: list[Variant], seed: int, randomize, ranges: dict,
              duration: float | None, sets: list[str] | None) -> tuple[dict, list[dict]]:
    """``(meta, tasks)``: the sweep's description and one task per (trial, variant)."""
    from legged_wbc.robot import ConfigError
    from legged_wbc.scenario import load_scenario

    sets = list(sets or [])
    if Path(scenario_arg).suffix:      # a YAML path: absolute, so the reproduce commands work from anywhere
        scenario_arg = str(Path(scenario_arg).resolve())
    try:
        base = load_scenario(scenario_arg, sets)
    except ConfigError as exc:
        raise SweepError(str(exc)) from exc
    dur = float(duration) if duration else base.duration
    tasks = []
    for k in range(trials):
        tr = sample_trial(k, seed, randomize, ranges, base, dur)
        for v in variants:
            run_sets = sets + tr["sets"] + v.sets
            name = run_name(k, v.name)
            tasks.append({"run": name, "trial": k, "name": v.name, "controller": v.controller,
                          "scenario": scenario_arg, "duration": dur, "sets": run_sets, "params": tr["params"],
                          "command": reproduce_command(scenario_arg, v.controller, dur, run_sets, f"runs/repro/{name}")})
    if tasks:   # every run's scenario must load (a bad range or variant fails here, not on the cluster)
        for t in tasks[:len(variants)]:
            try:
                load_scenario(scenario_arg, t["sets"])
            except ConfigError as exc:
                raise SweepError(f"{t['run']}: {exc}") from exc
    meta = {"scenario": scenario_arg, "seed": int(seed), "randomize": [c for c in RANDOMIZE if c in randomize],
            "ranges": ranges, "duration": dur, "set": sets, "trials": int(trials),
            "controllers": {v.name: {"controller": v.controller, "set": v.sets} for v in variants}}
    return meta, tasks
