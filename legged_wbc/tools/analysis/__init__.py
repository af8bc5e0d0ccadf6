"""Analysis of runs and bags: a bag's files and series (:mod:`.bag_files`, :mod:`.bag_series`), the
Table 3 metrics of a bag (:mod:`.bag_metrics`), a headless run's data (:mod:`.run_data`), the
``compare`` report (:mod:`.compare`, :mod:`.compare_actuators`), model checks (:mod:`.checks`) and the
estimator's evaluation (:mod:`.eval_estimator`).

May import: the core, the math packages, the headless loop and :mod:`legged_wbc.ros.recording`.
"""
