"""What the tools say is true: ``teleop-example`` sends its zero on Ctrl-C (a ``/cmd_vel`` listener sees
it), ``foxglove:=`` with ``layout:=processes`` is refused in one line (nothing would serve it)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

CLI = [sys.executable, "-m", "legged_wbc.cli"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_teleop_sends_its_zero_on_ctrl_c(ros_env, sig):
    import rclpy
    from geometry_msgs.msg import Twist
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node

    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=int(ros_env["ROS_DOMAIN_ID"]))
    p = None
    try:
        node = Node("cmd_vel_listener", context=ctx)
        got = []
        node.create_subscription(Twist, "/cmd_vel", lambda m: got.append((m.linear.x, m.linear.y, m.angular.z)), 10)
        ex = SingleThreadedExecutor(context=ctx)
        ex.add_node(node)
        p = subprocess.Popen([*CLI, "teleop-example", "--vx", "0.1", "--wz", "0.2", "--rate", "20"], env=ros_env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60.0
        while len(got) < 5 and time.monotonic() < deadline and p.poll() is None:
            ex.spin_once(timeout_sec=0.05)
        assert len(got) >= 5 and set(got) == {(0.1, 0.0, 0.2)}, got
        p.send_signal(sig)
        deadline = time.monotonic() + 10.0
        while p.poll() is None and time.monotonic() < deadline:
            ex.spin_once(timeout_sec=0.05)
        for _ in range(20):                        # what is still on its way
            ex.spin_once(timeout_sec=0.05)
        _, err = p.communicate(timeout=10)
        assert p.returncode == 0 and "Traceback" not in err, (p.returncode, err[-2000:])
        assert got[-1] == (0.0, 0.0, 0.0), got[-5:]
        n = int(err.strip().splitlines()[-1].split()[1])
        assert f"teleop-example: {n} commands sent on /cmd_vel (the last one zero)" in err
        assert len(got) == n, (len(got), n)        # every one arrived (reliable, on loopback), the zero last
    finally:
        if p is not None and p.poll() is None:
            p.kill()
            p.communicate()
        rclpy.shutdown(context=ctx)


def test_foxglove_with_the_processes_layout_is_refused_in_one_line(capsys, tmp_path):
    from legged_wbc.cli import main

    rc = main(["launch", "walking_sim", "layout:=processes", "foxglove:=8765", "--dry-run"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.strip() == (
        "legged-wbc launch: foxglove:=8765: layout:=processes has no node that serves the live view (it is "
        "served from the container: use layout:=container or layout:=split)")
    for layout in ("container", "split"):
        assert main(["launch", "walking_sim", f"layout:={layout}", "foxglove:=8765", "--dry-run"]) == 0
        assert "foxglove:=8765" in capsys.readouterr().out
    assert main(["launch", "walking_sim", "layout:=processes", "foxglove:=0", "--dry-run"]) == 0
