"""A progress line from a running ROS stack's ``/bridge/diagnostics`` (used by ``legged-wbc experiment``)."""

from __future__ import annotations

import sys
import threading
import time


class BridgeProgress:
    """Prints the simulation's progress from ``/bridge/diagnostics`` (10 Hz sim time), read by a
    small node in its own rclpy context on the run's domain. Optional: without rclpy, silent."""

    def __init__(self, domain_id: int, label: str, total: float, stream=None):
        self.label, self.total, self.stream = label, total, stream or sys.stdout
        self.t0 = time.monotonic()
        self.last_print = -1e9
        self.last = None
        self.ctx = self.node = self.executor = self.thread = None
        try:
            import rclpy
            from rclpy.executors import SingleThreadedExecutor
            from rclpy.qos import QoSProfile, ReliabilityPolicy
            from std_msgs.msg import Float64MultiArray

            from legged_wbc.ros import io as ros_io

            self.ctx = rclpy.Context()
            rclpy.init(context=self.ctx, domain_id=domain_id,
                       signal_handler_options=rclpy.signals.SignalHandlerOptions.NO)
            self.node = rclpy.create_node("experiment_progress", context=self.ctx)
            self._diag = ros_io.diagnostics_dict
            self.node.create_subscription(Float64MultiArray, "/bridge/diagnostics", self._on_diag,
                                          QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE))
            self.executor = SingleThreadedExecutor(context=self.ctx)
            self.executor.add_node(self.node)
            self.thread = threading.Thread(target=self._spin, daemon=True)
            self.thread.start()
        except Exception as exc:  # noqa: BLE001 - progress is cosmetic
            print(f"[{label}] (no progress display: {exc})", file=self.stream, flush=True)
            self.close()

    def _spin(self):
        try:
            self.executor.spin()
        except Exception:  # noqa: BLE001 - context shut down
            pass

    def _on_diag(self, msg) -> None:
        d = self._diag(msg)
        st = float(d.get("sim_time", 0.0))
        self.last = d
        wall = time.monotonic() - self.t0
        if wall - self.last_print < 10.0 and st < self.total - 1e-9:
            return
        self.last_print = wall
        rate = st / wall if wall > 0 else 0.0
        eta = (self.total - st) / rate if rate > 0 else float("nan")
        print(f"[{self.label}] sim {st:6.1f} / {self.total:g} s  ({rate:.3f}x real time, "
              f"{wall:5.0f} s elapsed, ~{eta:4.0f} s left)  misses {int(d.get('deadline_misses', 0))}  "
              f"watchdog {int(d.get('watchdog_events', 0))}", file=self.stream, flush=True)

    def close(self) -> None:
        try:
            if self.executor is not None:
                self.executor.shutdown(timeout_sec=1.0)
            if self.node is not None:
                self.node.destroy_node()
            if self.ctx is not None and self.ctx.ok():
                self.ctx.shutdown()
        except Exception:  # noqa: BLE001
            pass
        if self.thread is not None:
            self.thread.join(timeout=2.0)
