"""MuJoCo side of the stack: the simulation core (``sim``, no ROS) and the bridge node (``node``)."""
