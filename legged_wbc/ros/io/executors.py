"""Executors of the stack's processes, the spin loop and a node process's ``main``."""

from __future__ import annotations

from legged_wbc.ros.io.ticks import NewestTickRunner


# ----------------------------------------------------------------------------- node entry point
EXECUTOR_ENV = "LEGGED_WBC_EXECUTOR"
EXECUTORS = ("events", "single")
SPIN_PERIOD = 0.1   # [s wall] longest time the spin loops stay in the executor without looking at their stop flag


def executor_kind(kind: str | None = None) -> str:
    """The executor the stack's processes use: ``kind``, else ``$LEGGED_WBC_EXECUTOR``, else ``events``.

    * ``events``: rclpy's ``rclpy.experimental.EventsExecutor`` (C++ event queue fed by the middleware's
      new-message callbacks; a fraction of the CPU per message of the wait-set executor).
    * ``single``: ``rclpy.executors.SingleThreadedExecutor`` (rebuilds a wait set for every callback)."""
    import os

    kind = (kind or os.environ.get(EXECUTOR_ENV) or "events").strip().lower()
    if kind not in EXECUTORS:
        raise ValueError(f"{EXECUTOR_ENV}={kind!r}: expected one of {', '.join(EXECUTORS)}")
    return kind


def make_executor(kind: str | None = None, context=None):
    """A new executor of :func:`executor_kind` ``kind``. Spin it with :func:`spin_until` only."""
    if executor_kind(kind) == "events":
        from rclpy.experimental import EventsExecutor

        return EventsExecutor(context=context)
    from rclpy.executors import SingleThreadedExecutor

    return SingleThreadedExecutor(context=context)


def spin_until(executor, done, period: float = SPIN_PERIOD) -> None:
    """Run ``executor``'s callbacks until ``done()`` is true, waiting at most ``period`` s at a time.

    Never call ``spin()``, ``spin_once()`` or ``spin_until_future_complete()`` of rclpy's EventsExecutor
    without a timeout: its event queue then waits with the deadline ``steady_clock::time_point::max()``,
    which does not block in rclpy 9.1.2's wheel: the queue thread busy-loops (~70 % of a core while
    idle) holding the queue's mutex, so the middleware threads that enqueue new messages and
    ``shutdown()`` starve on that mutex (throughput collapses, publishers see no acknowledgements,
    ``shutdown(timeout_sec=...)`` never returns) and Python signal handlers never get to run: the
    "lost messages and hung at shutdown" of the EventsExecutor (``test/test_executors.py``). A finite
    timeout blocks normally. ``spin_once`` of either executor runs at most one callback (for the
    EventsExecutor one subscription's ready messages) and returns at the latest after ``period``.
    An exception from a callback propagates; do not keep spinning an EventsExecutor after one: it
    takes exactly the announced number of messages per event, so the rest of the failed batch stays
    in the reader behind every later message (the last ones of a run are then never taken)."""
    while not done():
        executor.spin_once(timeout_sec=period)


def ignore_stop_signals() -> None:
    """For a process's last steps, once its work is saved (the bag closed): SIGINT and SIGTERM are
    ignored. A launcher that shuts the stack down while this process is exiting on its own (its peer
    left) would otherwise kill it as Python finalizes (Python gives the signals their default action
    back then, for handlers it set itself, but leaves an ignored signal ignored): a clean exit reported
    as "exit code -2"."""
    import signal

    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)


_NODE_INIT: list = []      # the process's rclpy.init check (set_node_init), if any


def set_node_init(init) -> None:
    """The ``init(argv, name) -> bool`` :func:`spin_node` calls instead of a bare ``rclpy.init``
    (the node executables' entry sets :func:`legged_wbc.ros.nodekit.params.init_node_process`: a command
    line rcl refuses is one line and exit 2, not a traceback)."""
    _NODE_INIT[:] = [init]


def spin_node(make_node, argv=None) -> int:
    """``main()`` of a node: init, spin ``make_node()`` until Ctrl-C / SIGTERM / shutdown, clean up.
    The node is in a process of its own: if it has a :class:`NewestTickRunner` ``ticks``, its
    worker is started (when behind, the newest tick first).

    The executor is :func:`make_executor`'s (``$LEGGED_WBC_EXECUTOR``: ``events`` by default, or
    ``single``). SIGINT and SIGTERM only set a flag that the spin loop reads at least every
    :data:`SPIN_PERIOD` (nothing is raised inside a callback); then the executor is shut down before
    the node is destroyed (the EventsExecutor holds the subscriptions' middleware callbacks).
    Returns 0, ``128 + signum`` when a SIGINT / SIGTERM stopped it (130 / 143: the stack's convention for
    a node stopped by a signal), 2 for a bad parameter or configuration."""
    import os
    import signal
    import sys

    import rclpy
    from rclpy.executors import ExternalShutdownException

    if _NODE_INIT:
        if not _NODE_INIT[0](argv, os.path.basename(sys.argv[0])):
            return 2
    else:
        from rclpy.signals import SignalHandlerOptions

        rclpy.init(args=argv if argv is not None else sys.argv, signal_handler_options=SignalHandlerOptions.NO)
    stop: list[int] = []
    old = {s: signal.signal(s, lambda signum, frame: stop.append(signum)) for s in (signal.SIGINT, signal.SIGTERM)}
    node = executor = None
    try:
        try:
            node = make_node()
        except Exception as exc:     # a bad parameter / scenario / robot file: one line, exit 2
            from legged_wbc.robot import ConfigError    # (a ParameterSchemaError is one)

            if not isinstance(exc, ConfigError):
                raise
            print(f"{os.path.basename(sys.argv[0])}: {exc}", file=sys.stderr, flush=True)
            return 2
        if isinstance(getattr(node, "ticks", None), NewestTickRunner):
            node.ticks.start_worker()
        executor = make_executor()
        executor.add_node(node)
        spin_until(executor, lambda: bool(stop) or not rclpy.ok())
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if executor is not None:
            executor.shutdown(timeout_sec=1.0)
        if node is not None:
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
        for s, h in old.items():
            signal.signal(s, h)
    return 128 + stop[0] if stop else 0
