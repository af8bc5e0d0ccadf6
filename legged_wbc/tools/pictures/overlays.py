"""Overlays drawn on rendered frames: text lines, the support pattern as dots, panel labels."""

from __future__ import annotations

import math

import numpy as np

from legged_wbc.tools.experiments.recording import Recording

SUPPORT_RGB = (46, 170, 80)
SWING_RGB = (240, 150, 40)
UNKNOWN_RGB = (150, 150, 150)
DISTURB_RGB = (220, 40, 40)


# ============================================================================ overlays
_FONTS: dict[int, object] = {}


def _font(size: int):
    from PIL import ImageFont

    size = int(size)
    if size not in _FONTS:
        try:
            _FONTS[size] = ImageFont.load_default(size=size)
        except TypeError:  # Pillow < 10.1: bitmap font of fixed size
            _FONTS[size] = ImageFont.load_default()
    return _FONTS[size]


def leg_layout(cfg) -> np.ndarray:
    """Nominal foot positions (x forward, y left) in the base frame, one row per leg [m] (a URDF robot: its
    hips', where its standing feet are below, near enough for the overlay's diagram)."""
    if getattr(cfg, "kind", "generated") != "generated":
        return np.array([leg.hip_xyz[:2] for leg in cfg.leg_specs], dtype=float)
    out = []
    for leg in cfg.legs:
        yaw = math.radians(leg.mount_yaw_deg)
        x, y = leg.mount_xyz[0], leg.mount_xyz[1]
        out.append((x + cfg.stance_reach * math.cos(yaw), y + cfg.stance_reach * math.sin(yaw)))
    return np.array(out)


def draw_overlay(frame: np.ndarray, lines: list[str], layout: np.ndarray | None = None,
                 leg_names: list[str] | None = None, support: np.ndarray | None = None,
                 disturbed: np.ndarray | None = None) -> np.ndarray:
    """Text lines at the top left and the support pattern as coloured dots (top view of the robot,
    front up; green = support, orange = swing, grey = unknown, red ring = disturbed leg)."""
    from PIL import Image, ImageDraw

    h, w = frame.shape[:2]
    img = Image.fromarray(frame)
    dr = ImageDraw.Draw(img, "RGBA")
    fs = max(10, h // 26)
    font = _font(fs)
    if lines:
        pad = max(3, fs // 3)
        widths = [dr.textlength(s, font=font) for s in lines]
        box_h = len(lines) * (fs + pad) + pad
        dr.rectangle([0, 0, max(widths) + 2 * pad, box_h], fill=(0, 0, 0, 120))
        for k, s in enumerate(lines):
            dr.text((pad, pad + k * (fs + pad)), s, fill=(255, 255, 255, 255), font=font)
    if layout is not None and leg_names:
        side = max(48, min(w, h) // 4)
        m = side * 0.18
        x0, y0 = w - side - 6, 6
        dr.rectangle([x0, y0, x0 + side, y0 + side], fill=(0, 0, 0, 110))
        # top view, front up: screen x = -y, screen y = -x
        ext = np.max(np.abs(layout)) or 1.0
        sc = (side / 2 - m) / ext
        cx, cy = x0 + side / 2, y0 + side / 2
        dr.rectangle([cx - 0.22 * side, cy - 0.32 * side, cx + 0.22 * side, cy + 0.32 * side],
             outline=(220, 220, 220, 200), width=1)
        r = max(4, side // 14)
        sfont = _font(max(8, int(r * 1.5)))
        for i, name in enumerate(leg_names):
            px, py = cx - layout[i, 1] * sc, cy - layout[i, 0] * sc
            if support is None:
                col = UNKNOWN_RGB
            else:
                col = SUPPORT_RGB if bool(support[i]) else SWING_RGB
            dr.ellipse([px - r, py - r, px + r, py + r], fill=col + (255,), outline=(255, 255, 255, 255))
            if disturbed is not None and bool(disturbed[i]):
                dr.ellipse([px - r - 3, py - r - 3, px + r + 3, py + r + 3], outline=DISTURB_RGB + (255,), width=2)
            tx = px - r - dr.textlength(name, font=sfont) - 2 if layout[i, 1] > 0 else px + r + 2
            dr.text((tx, py - r), name, fill=(255, 255, 255, 230), font=sfont)
    return np.asarray(img)


def _frame_lines(rec: Recording, t: float, extra: str | None = None) -> list[str]:
    sc = f" · {rec.scenario_name}" if rec.scenario_name else ""
    lines = [f"{rec.label}{sc}", f"t = {t:6.2f} s"]
    if extra:
        lines.append(extra)
    return lines


def _overlay(rec: Recording, frame: np.ndarray, t: float, layout: np.ndarray, extra: str | None = None) -> np.ndarray:
    sup = rec.support.at(t) if rec.support is not None else None
    dis = rec.disturbed.at(t) if rec.disturbed is not None else None
    return draw_overlay(frame, _frame_lines(rec, t, extra), layout, rec.leg_names, sup, dis)


def _label_panel(frame: np.ndarray, text: str) -> np.ndarray:
    from PIL import Image, ImageDraw

    img = Image.fromarray(frame)
    dr = ImageDraw.Draw(img, "RGBA")
    h = frame.shape[0]
    fs = max(10, h // 24)
    font = _font(fs)
    tw = dr.textlength(text, font=font)
    dr.rectangle([0, h - fs - 10, tw + 12, h], fill=(0, 0, 0, 140))
    dr.text((6, h - fs - 6), text, fill=(255, 255, 255, 255), font=font)
    return np.asarray(img)
