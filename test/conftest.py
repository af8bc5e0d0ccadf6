import os
import random

import pytest

os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")


@pytest.fixture(scope="session")
def hexapod():
    from legged_wbc.model import RobotModel

    return RobotModel("hexapod")


@pytest.fixture(scope="session")
def quadruped():
    from legged_wbc.model import RobotModel

    return RobotModel("quadruped")


@pytest.fixture
def ros_context():
    """An rclpy context of its own on a random domain (nodes driven directly, without spinning)."""
    import rclpy

    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=random.randint(120, 199))
    yield ctx
    rclpy.shutdown(context=ctx)
