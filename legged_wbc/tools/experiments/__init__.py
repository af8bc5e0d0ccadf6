"""Experiments: the paper's experiment through the ROS stack (:mod:`.experiment`), recordings
(:mod:`.recording`) and randomized sweeps on a Dask cluster (:mod:`.sweep` and its plan, tasks,
statistics and report).

May import: what :mod:`legged_wbc.tools.analysis` may, that room, and the ROS layer's launcher and
parameter plumbing (:mod:`legged_wbc.ros.tooling`, :mod:`legged_wbc.ros.nodekit`, :mod:`legged_wbc.ros.io`).
"""
