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
