"""Pictures: rendered frames and videos of a run (:mod:`.render`), the scene (:mod:`.scene_render`)
and the overlays drawn on it (:mod:`.overlays`).

May import: the core, the math packages, :mod:`legged_wbc.tools.analysis` and
:mod:`legged_wbc.tools.experiments`.
"""
