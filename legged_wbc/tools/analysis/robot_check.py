"""``legged-wbc check-robot``: what was found in (and repaired of) a robot described by its own URDF,
and whether the stack can walk it.

:func:`check_robot` loads the robot file, builds both models from the prepared URDF (Pinocchio
free-flyer, the MuJoCo spec of :func:`legged_wbc.mujoco_model.build_spec`) and lists the legs, the
feet, the masses, the limits by joint position in the leg, the placeholders and repairs, the IMU,
the standing height and the gait; ``problems`` are what keeps it from walking (no legs, a leg of
other than 3 or 4 joints, actuated joints outside the legs, the models' masses disagreeing, the
standing pose's feet not on one plane, a model that does not build). :func:`example_robot_data_table`
runs it on every quadruped of the installed example-robot-data (an SRDF with four ``*leg*`` groups
as end effectors), each with a robot file made from the SRDF alone.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np

MASS_RTOL = 1e-9           # Pinocchio vs MuJoCo total mass
PLANE_TOL = 0.01           # [m] the standing feet's lowest points within this of each other (or 3 % of the leg)
JOINT_COUNTS = (3, 4)      # joints per leg the controller handles


def check_config(cfg) -> dict:
    """The check of a loaded :class:`~legged_wbc.urdf_robot.UrdfRobotConfig`."""
    problems: list[str] = []
    res = {"robot": cfg.name, "urdf": cfg.source_urdf, "srdf": cfg.srdf, "prepared_urdf": cfg.urdf,
           "base_link": cfg.base_link, "problems": problems}
    res["legs"] = [{"name": lg.name, "joints": list(lg.joints), "foot_link": lg.foot_link,
                    "hip_xyz": [round(x, 4) for x in lg.hip_xyz]} for lg in cfg.leg_specs]
    bad = [f"{lg.name} ({len(lg.joints)})" for lg in cfg.leg_specs if len(lg.joints) not in JOINT_COUNTS]
    if bad:
        problems.append(f"legs of other than 3 or 4 joints: {', '.join(bad)}")
    res["feet"] = [{"link": f.link, "offset": [round(x, 5) for x in f.offset], "radius": round(f.radius, 5),
                    "how": f.how} for f in cfg.feet]
    res["foot"] = {"offset": [round(float(x), 5) for x in cfg.foot.offset], "radius": round(cfg.foot.radius, 5)}
    if cfg.foot.radius <= 0:
        problems.append("no foot geometry found (radius 0)")
    res["mass"] = _masses(cfg, problems)
    # limits by position in the leg
    t = cfg.joint_table()
    idx = {n: k for k, n in enumerate(t.names)}
    limits = []
    for pos in range(max(len(lg.joints) for lg in cfg.leg_specs)):
        ks = [idx[lg.joints[pos]] for lg in cfg.leg_specs if len(lg.joints) > pos]
        limits.append({"joint": pos + 1, "names": [t.names[k] for k in ks],
                       "lower": [float(t.lower[k]) for k in ks], "upper": [float(t.upper[k]) for k in ks],
                       "effort": sorted({float(t.effort[k]) for k in ks}),
                       "velocity": sorted({float(t.velocity[k]) for k in ks})})
    res["limits"] = limits
    res["placeholders"] = list(cfg.placeholders)
    res["repairs"] = list(cfg.repairs)
    res["imu"] = {"link": cfg.imu_link, "xyz": list(cfg.imu_xyz), "rotation": [list(r) for r in cfg.imu_rotation]}
    res["standing"] = {"from": cfg.standing_source, "height": cfg.stance_height,
                       "foot_heights": list(cfg.foot_heights), "leg_length": cfg.leg_length}
    spread = float(np.ptp(cfg.foot_heights))
    if spread > max(PLANE_TOL, 0.03 * cfg.leg_length):
        problems.append(f"the standing pose's feet are not on one plane (lowest points {spread * 100:.1f} cm apart)")
    if cfg.stance_height <= cfg.base_half_height:
        problems.append(f"standing, the base ({cfg.base_half_height:.3f} m below its origin) is not above the feet "
                        f"(height {cfg.stance_height:.3f} m)")
    res["gait"] = dict(cfg.gait)
    res["base"] = {"size": list(cfg.base_size), "below_origin": cfg.base_half_height}
    return res


def _masses(cfg, problems: list) -> dict:
    """The total mass of both models of the prepared URDF (a problem if they differ, or if actuated
    joints are in no leg, or if MuJoCo's model does not build)."""
    import mujoco
    import pinocchio as pin

    from legged_wbc.mujoco_model import build_spec

    pm = pin.buildModelFromUrdf(cfg.urdf, pin.JointModelFreeFlyer())
    m_pin = float(sum(i.mass for i in pm.inertias))
    extra = [pm.names[j] for j in range(2, pm.njoints) if pm.names[j] not in set(cfg.joint_names)]
    if extra:
        problems.append(f"actuated joints in no leg: {', '.join(extra)}")
    try:
        m_mj = float(np.sum(build_spec(cfg).compile().body_mass))
    except (ValueError, mujoco.FatalError) as exc:
        m_mj = float("nan")
        problems.append(f"MuJoCo model does not build: {str(exc).splitlines()[0]}")
    if not abs(m_pin - m_mj) <= MASS_RTOL * max(m_pin, 1.0):
        problems.append(f"masses disagree: Pinocchio {m_pin:.6g} kg, MuJoCo {m_mj:.6g} kg")
    return {"file": cfg.robot_mass, "pinocchio": m_pin, "mujoco": m_mj}


def check_robot(path: str | Path, data: dict | None = None) -> dict:
    """Load ``path`` (a robot file; or ``data``, its mapping, relative to ``path``'s directory) and
    check it; a ConfigError of loading (e.g. no legs, a wrong SRDF) is raised."""
    from legged_wbc.urdf_robot import load_urdf_robot

    return check_config(load_urdf_robot(path, data=data, verbose=False))


def _fmt_list(v, nd=3) -> str:
    return "[" + ", ".join(f"{x:.{nd}f}" for x in v) + "]"


def report_text(res: dict) -> str:
    """The check as text (``legged-wbc check-robot``)."""
    out = [f"{res['robot']}: {res['urdf']}" + (f" + {res['srdf']}" if res["srdf"] else " (no SRDF)"),
           f"  prepared URDF (both models): {res['prepared_urdf']}", f"  base link: {res['base_link']}",
           f"  legs ({len(res['legs'])}):"]
    for lg in res["legs"]:
        out.append(f"    {lg['name']:4s} {' -> '.join(lg['joints'])} -> foot {lg['foot_link']}  hip {_fmt_list(lg['hip_xyz'])}")
    f = res["foot"]
    out.append(f"  feet: point {_fmt_list(f['offset'], 4)} in the foot link, radius {f['radius']:.4f} m "
               f"({res['feet'][0]['how']})")
    ms = res["mass"]
    out.append(f"  mass: Pinocchio {ms['pinocchio']:.6g} kg, MuJoCo {ms['mujoco']:.6g} kg (file {ms['file']:.6g} kg)")
    for lim in res["limits"]:
        rng = sorted({(round(a, 3), round(b, 3)) for a, b in zip(lim["lower"], lim["upper"])})
        out.append(f"  joint {lim['joint']} ({', '.join(lim['names'][:2])}...): range "
                   f"{' '.join(f'[{a:g}, {b:g}]' for a, b in rng)} rad, effort {lim['effort']} N m, "
                   f"velocity {lim['velocity']} rad/s")
    out.append(f"  placeholders ({len(res['placeholders'])}):" + ("" if res["placeholders"] else " none"))
    out += [f"    {p}" for p in res["placeholders"]]
    out.append(f"  repairs ({len(res['repairs'])}):" + ("" if res["repairs"] else " none"))
    out += [f"    {r}" for r in res["repairs"]]
    imu = res["imu"]
    out.append(f"  IMU: {imu['link'] or '(base origin)'} at {_fmt_list(imu['xyz'], 4)} in the base frame"
               + ("" if np.allclose(imu["rotation"], np.eye(3)) else
                  f", rotated {_fmt_list(np.ravel(imu['rotation']), 2)} (data reported in the base frame)"))
    st = res["standing"]
    out.append(f"  standing ({st['from']}): base {st['height']:.4f} m above the ground, feet' lowest points "
               f"{_fmt_list(st['foot_heights'])} m, hip to foot {st['leg_length']:.3f} m")
    g = res["gait"]
    out.append(f"  gait: groups {g['groups']}, period {g['period']} s, duty {g['duty']}")
    out.append("  OK: can walk" if not res["problems"] else "  cannot walk: " + "; ".join(res["problems"]))
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# every quadruped of example-robot-data


def example_robot_data_quadrupeds() -> list[tuple[str, Path, list[Path]]]:
    """``(name, srdf, candidate URDFs)`` of every SRDF of the installed example-robot-data with four
    end effectors whose groups are legs (``*leg*``); the URDFs of its description folder, the one
    with the SRDF's name first."""
    from legged_wbc.urdf_robot import example_robot_data_share

    share = example_robot_data_share()
    if share is None:
        return []
    out = []
    for srdf in sorted((share / "example-robot-data" / "robots").glob("*/srdf/*.srdf")):
        try:
            ees = ET.parse(srdf).getroot().findall("end_effector")
        except ET.ParseError:
            continue
        if sum("leg" in (e.get("group") or "") for e in ees) != 4:
            continue
        desc = srdf.parent.parent
        urdfs = sorted(list(desc.glob("urdf/*.urdf")) + list(desc.glob("robots/*.urdf")),
                       key=lambda u: (u.stem != srdf.stem, u.name))
        out.append((f"{desc.name.removesuffix('_description')}/{srdf.stem}", srdf, urdfs))
    return out


def example_robot_data_table() -> tuple[list[dict], str]:
    """Rows (one per quadruped) and the table text; a robot's URDF is the first candidate its SRDF's
    legs are found in."""
    from legged_wbc.robot import ConfigError
    from legged_wbc.urdf_robot import default_robot_dict

    rows = []
    for name, srdf, urdfs in example_robot_data_quadrupeds():
        row = {"robot": name, "srdf": str(srdf), "urdf": None, "problems": []}
        err = None
        here = srdf.parent / "robot.yaml"          # no such file: relative paths would start here
        for u in urdfs:
            try:
                res = check_robot(here, data={"robot": default_robot_dict(u, srdf)})
            except ConfigError as exc:
                err = err or str(exc).removeprefix(f"{here}: ")
                continue
            row.update(res, robot=name, urdf=u.name)
            break
        else:
            row["problems"] = [err or "no URDF"]
        rows.append(row)
    return rows, table_text(rows)


def table_text(rows: list[dict]) -> str:
    hdr = (f"{'robot':24s} {'urdf':20s} {'legs':>4s} {'jts':>5s} {'foot':>6s} {'r[mm]':>6s} {'mass pin/mj [kg]':>17s} "
           f"{'stand[m]':>8s} {'plc':>3s} {'rep':>3s}  gait / status")
    out = [hdr, "-" * len(hdr)]
    for r in rows:
        if "legs" not in r:
            out.append(f"{r['robot']:24s} {'-':20s} {'':>4s} {'':>5s} {'':>6s} {'':>6s} {'':>17s} {'':>8s} {'':>3s} "
                       f"{'':>3s}  cannot load: {r['problems'][0]}")
            continue
        jts = "/".join(sorted({str(len(lg["joints"])) for lg in r["legs"]}))
        how = r["feet"][0]["how"]
        foot = "sphere" if how.startswith("collision sphere") else ("mesh" if "mesh" in how else
                                                                    ("none" if how.startswith("no ") else "prim"))
        m = r["mass"]
        status = ("OK" if not r["problems"] else "cannot walk: " + "; ".join(r["problems"]))
        g = r["gait"]
        out.append(f"{r['robot']:24s} {r['urdf']:20s} {len(r['legs']):4d} {jts:>5s} {foot:>6s} "
                   f"{r['foot']['radius'] * 1e3:6.1f} {m['pinocchio']:8.3f}/{m['mujoco']:<8.3f} "
                   f"{r['standing']['height']:8.3f} {len(r['placeholders']):3d} {len(r['repairs']):3d}  "
                   f"T={g['period']}s {status}")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# standing: does the controller hold it up


def stand_test(robot_file: str | Path, seconds: float, data: dict | None = None) -> dict:
    """Stand the robot up from a crouch (the robot's own heights, :mod:`legged_wbc.robot_defaults`) and
    hold it ``seconds`` [s] in the headless loop (WBC-CBF, no command): ``{"stood": bool, "fall_reason",
    "drift_m"}`` (the base's horizontal drift while standing). ``data``: the robot file's mapping, written
    to a temporary file when given (a robot made from its SRDF alone)."""
    import tempfile

    import yaml

    from legged_wbc.closed_loop import ClosedLoop
    from legged_wbc.scenario import load_scenario

    with tempfile.TemporaryDirectory() as tmp:
        if data is not None:
            robot_file = Path(tmp) / "robot.yaml"
            robot_file.write_text(yaml.safe_dump(data))
        sets = [f"robot={robot_file}", "commands=[{t: 0, vx: 0, vy: 0, wz: 0}]", f"duration={1.5 + seconds}",
                "walk.gait_start=1.5", "walk.t_s=1.5", f"evaluation.window={seconds}"]
        res = ClosedLoop(load_scenario("go2_trot", sets), "cbf").run(1.5 + seconds, progress=False)
    bp = np.asarray(res.series["base_pos"])
    t = np.asarray(res.series["t"])
    still = bp[t >= 1.5, :2]
    drift = float(np.max(np.linalg.norm(still - still[0], axis=1))) if len(still) else None
    return {"stood": not res.fell, "fall_reason": res.fall_reason or None, "drift_m": drift}
