"""Analysis and experiment tools on top of the core: model checks (:mod:`.checks`), bag / run
metrics and reports (:mod:`.bag_metrics`, :mod:`.compare`), the paper's experiment
(:mod:`.experiment`), randomized sweeps (:mod:`.sweep`), rendering and the viewer
(:mod:`.render`, :mod:`.viewer`). None imports rclpy; ``experiment`` runs the ROS stack as
processes through :mod:`legged_wbc.ros.launcher`.
"""
