"""ROS 2 plumbing: message conversion (:mod:`.io`), parameters (:mod:`.params`), the in-process
bus and the container (:mod:`.intra_process`, :mod:`.container`), the rosbag2 recorder
(:mod:`.recorder`) and the launch-file runner (:mod:`.launcher`).

The only package (with the ``node`` modules of ``mujoco_bridge``, ``state_estimator`` and
``wbc_controller``) that imports rclpy; the core in ``legged_wbc`` never does (tested).
"""
