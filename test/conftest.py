from domains import domain_id
import os

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
    rclpy.init(context=ctx, domain_id=domain_id())
    yield ctx
    rclpy.shutdown(context=ctx)


@pytest.fixture
def ros_env() -> dict:
    """The environment of a ROS process a test starts: loopback discovery, a domain of its own."""
    env = dict(os.environ)
    env["ROS_DOMAIN_ID"] = str(domain_id())
    env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    env["PYTHONUNBUFFERED"] = "1"
    return env
