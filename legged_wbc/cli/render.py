"""``legged-wbc render``: replay a recorded run offscreen into an MP4 and PNG snapshots."""

from __future__ import annotations

import sys

from legged_wbc.cli.argtypes import positive_float, positive_int


def cmd_render(args) -> int:
    from legged_wbc.tools.pictures.render import RenderError, RenderOptions, parse_size, render_run

    try:
        w, h = parse_size(args.size)
        opts = RenderOptions(fps=args.fps, width=w, height=h, start=args.start, end=args.end,
                             video=not args.no_video, strip=not args.no_strip, strip_frames=args.strip_frames,
                             strip_time=args.strip_time, compare_time=args.compare_time,
                             overlay=not args.no_overlay, camera=args.camera, shadows=not args.no_shadows,
                             robot=args.robot, progress=not args.quiet)
        res = render_run(args.run, args.out, compare=args.compare, opts=opts)
    except RenderError as exc:
        print(f"legged-wbc render: error: {exc}", file=sys.stderr)
        return 2
    for note in res.get("notes", []):
        print(f"note: {note}", file=sys.stderr)
    v = res.get("video")
    if v:
        print(f"wrote {v['file']}: {v['frames']} frames at {v['fps']:g} fps, {res['size'][0]}x{res['size'][1]}, "
              f"t = {v['start_s']:.2f}..{v['end_s']:.2f} s; {v['frames_per_s']:.1f} frames/s "
              f"({v['render_ms_per_frame']:.0f} ms/frame in OpenGL, {res['gl_backend']})")
    s = res.get("strip")
    if s:
        print(f"wrote {s['file']}: {len(s['times_s'])} frames over {s['cycle_s']:.2f} s from t = {s['times_s'][0]:.2f} s "
              f"(gait period {s['gait_period_s']:g} s)")
    c = res.get("compare")
    if c:
        print(f"wrote {c['file']}: {res['controller'] or '?'} vs {c['right']} at t = {c['time_s']:.3f} s")
    print(f"wrote {args.out}/render.json ({res['total_s']:.1f} s)")
    return 0


def register(sub) -> None:
    s = sub.add_parser("render", help="replay a run (log.npz or rosbag2) offscreen: MP4 video and PNG snapshots",
                       description="Replay the recorded ground-truth base pose and joint positions of a run "
                                   "offscreen with MuJoCo and write DIR/video.mp4, DIR/gait_strip.png (one gait "
                                   "cycle, paper Fig. 2), DIR/compare.png with --compare (paper Fig. 3) and "
                                   "DIR/render.json.")
    s.add_argument("run", help="headless run directory (log.npz) or rosbag2 directory (MCAP or sqlite3)")
    s.add_argument("--out", required=True, help="output directory")
    s.add_argument("--compare", metavar="OTHER_RUN", help="second run shown side by side at the same instant")
    s.add_argument("--compare-time", type=float, metavar="T",
                   help="instant of the comparison [s] (default: end of the scenario's push, else mid-run)")
    s.add_argument("--fps", type=positive_float, default=30.0, help="video frame rate (default 30)")
    s.add_argument("--size", default="640x480", help="frame size WxH, even numbers (default 640x480)")
    s.add_argument("--start", type=float, help="first instant [s] (default: start of the data)")
    s.add_argument("--end", type=float, help="last instant [s] (default: end of the data)")
    s.add_argument("--camera", default="track",
                   help="track (side view following the robot, default), iso (3/4 view) or a model camera name")
    s.add_argument("--strip-frames", type=positive_int, default=6, help="frames in the gait-cycle strip (default 6)")
    s.add_argument("--strip-time", type=float, metavar="T",
                   help="start of the strip's cycle [s] (default: middle complete gait cycle in the window)")
    s.add_argument("--no-video", action="store_true", help="snapshots only")
    s.add_argument("--no-strip", action="store_true", help="no gait-cycle strip")
    s.add_argument("--no-overlay", action="store_true", help="no time / controller / support overlay")
    s.add_argument("--no-shadows", action="store_true", help="faster software rendering without shadows")
    s.add_argument("--robot", help="robot config (default: from the run)")
    s.add_argument("--quiet", action="store_true", help="no progress line")
    s.set_defaults(func=cmd_render)
