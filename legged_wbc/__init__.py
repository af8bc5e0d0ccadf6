"""legged_wbc core: robot description, Pinocchio dynamics and conventions (no ROS imports)."""
