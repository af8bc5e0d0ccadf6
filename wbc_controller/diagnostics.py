"""The fields of the controller's ``/wbc/diagnostics`` array (``Float64MultiArray``, label
``wbc[<fields>]``), in order: defined here, below the node, so that the ROS layer's readers
(:mod:`legged_wbc.ros.nodekit.diagnostics`) and the tools name them without importing the node.

Units: times in microseconds, residuals in the QP's units, attitude errors [rad], the rest counts or flags.
"""

DIAG_FIELDS = ("tick", "qp_accepted", "qp_time_us", "solve_time_us", "cycle_time_us", "qp_iterations",
               "eq_residual", "ineq_violation", "consecutive_failures", "total_failures", "safe_stop",
               "rejected_inputs", "err_roll", "err_pitch", "skipped_ticks",
               # velocity command (legged_wbc.ros.nodekit.cmd_vel): /cmd_vel rules (1/0), commands clamped to the
               # limits, /cmd_vel messages rejected, the filtered command vx, vy [m/s] (heading frame), wz [rad/s],
               # the gait clock tau [s] and paused (1/0) (under a command; else 0)
               "cmd_live", "cmd_clamped", "cmd_rejected", "cmd_vx", "cmd_vy", "cmd_wz", "gait_tau", "gait_paused")
