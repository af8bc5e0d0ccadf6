"""Analysis and experiment tools on top of the core: model checks (:mod:`.checks`), bag / run
metrics and reports (:mod:`.bag_metrics`, :mod:`.compare`), the paper's experiment
(:mod:`.experiment`), randomized sweeps (:mod:`.sweep`), rendering and the viewer
(:mod:`.render`, :mod:`.viewer`), the cycle benchmarks (:mod:`.bench_cycle`, :mod:`.bench_realtime`),
the estimator's evaluation (:mod:`.eval_estimator`), the kernels' warm-up (:mod:`.warmup`). None imports rclpy; ``experiment`` runs the ROS stack as
processes through :mod:`legged_wbc.ros.launcher`.
"""
