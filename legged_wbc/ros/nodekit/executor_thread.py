"""A node's executor spinning in a thread of its own, beside the process's main loop (the bridge's physics).

The thread spins with :func:`legged_wbc.ros.io.spin_until` (never without a timeout: see there), so
:meth:`ExecutorThread.stop` ends it within :data:`legged_wbc.ros.io.SPIN_PERIOD`; the executor is then shut
down, before its owner destroys the node (the EventsExecutor holds the subscriptions' middleware callbacks).
"""

from __future__ import annotations

import threading

from legged_wbc.ros import io as ros_io


class ExecutorThread:
    """:func:`legged_wbc.ros.io.make_executor`'s executor with ``node`` added, spun by a daemon thread
    ``name`` from construction until :meth:`stop`."""

    def __init__(self, node, name: str = "executor"):
        self.executor = ros_io.make_executor()
        self.executor.add_node(node)
        self._spinning = threading.Event()
        self._spinning.set()
        self.thread = threading.Thread(target=ros_io.spin_until, name=name, daemon=True,
                                       args=(self.executor, lambda: not self._spinning.is_set()))
        self.thread.start()

    def stop(self, join_timeout: float = 2.0, shutdown_timeout: float = 1.0) -> None:
        """End the spinning (waiting at most ``join_timeout`` s for the thread) and shut the executor down
        (at most ``shutdown_timeout`` s)."""
        self._spinning.clear()
        self.thread.join(timeout=join_timeout)
        self.executor.shutdown(timeout_sec=shutdown_timeout)
