"""``walking_container``: the walking stack's nodes composed in one process, intra-process handoff.

What rclcpp users do when a 500 Hz pipeline must not pay DDS per message: the MuJoCo bridge, the
state estimator, the whole-body controller and (with ``record``) the bag recorder run as separate
ROS 2 nodes (own names, parameters, topics, all visible to the graph: ``legged-wbc param set
wbc_controller ...`` works as with one process per node) in one process, and every message between
them is a function call (:mod:`legged_wbc.ros.intra_process`). Messages go on DDS only for subscribers
outside the process. One control tick is then one call chain in the bridge's thread: sample ->
estimator -> controller -> command, with no wake-up or copy in between.

Parameters of the container node ``walking_container`` (everything else is passed through to the
nodes by name, e.g. ``-p scenario:=paper``, ``--params-file config/wbc_controller.yaml``):

* ``record`` (str): bag directory; empty = no recorder. The recorder stamps with the recorded
  ``/clock`` (``stamp_source: clock_topic``): no node needs ``use_sim_time``, so no ``/clock``
  subscription goes through DDS.
* ``sched_priority`` (int): realtime mode only, ``SCHED_FIFO`` priority of the control thread (the
  bridge's, which runs the whole chain); 0 = normal scheduling. Without the permission the container
  says so once and goes on with normal scheduling.
* ``cpu``: realtime mode only, CPU to pin the control thread to (-1 = no pinning).

The recorder's bag is written by a process of its own (``writer_process``, :mod:`legged_wbc.ros.bag_process`:
the control thread only packs each message's numbers into shared memory), and the interpreter's thread
switch interval is 0.5 ms (Python's default 5 ms would let another thread hold the GIL for up to 5 ms
while the control thread waits). The garbage collector is frozen after start-up (``gc.freeze()``: the start-up objects are never
scanned again), so a collection during the run only looks at what the run allocated.
Exit status: the bridge's (0 at the end of ``duration`` or on Ctrl-C / SIGTERM, after the bag is
closed), 2 for a bad parameter or configuration, 1 if a node raised.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
from dataclasses import dataclass

from legged_wbc.params import param, validate

CONTAINER_NODE = "walking_container"
SWITCH_INTERVAL_S = 0.0005


def _set_realtime_scheduling(priority: int, cpu: int, log) -> None:
    """SCHED_FIFO / CPU pinning of the calling thread; fail soft (one line) without permission."""
    if cpu >= 0:
        try:
            os.sched_setaffinity(0, {cpu})
            log.info(f"control thread pinned to CPU {cpu}")
        except (OSError, AttributeError) as exc:
            log.warning(f"could not pin the control thread to CPU {cpu}: {exc}")
    if priority > 0:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
            log.info(f"control thread: SCHED_FIFO priority {priority}")
        except (OSError, AttributeError) as exc:
            log.warning(f"no realtime scheduling ({exc}); running with normal priority")


@dataclass(frozen=True)
class ContainerConfig:
    """Parameters of the container node itself (all read-only: they shape the process at start-up)."""

    record: str = param("", desc="bag directory to record to; empty = no recorder", live=False)
    sched_priority: int = param(10, 0, 99, "realtime mode: SCHED_FIFO priority of the control thread; 0 = off",
                                live=False)
    cpu: int = param(-1, -1, 1023, "realtime mode: CPU the control thread is pinned to; -1 = none", live=False)

    def __post_init__(self):
        validate(self)


def main(argv: list[str] | None = None) -> int:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter
    from rclpy.signals import SignalHandlerOptions

    from legged_wbc.ros.intra_process import IntraProcessBus
    from legged_wbc.robot import ConfigError
    from legged_wbc.ros.params import NodeParameters, ParameterSchemaError

    rclpy.init(args=argv if argv is not None else sys.argv, signal_handler_options=SignalHandlerOptions.NO)
    nodes: list = []
    executor = spin = recorder = None
    rc = 0
    try:
        container = rclpy.create_node(CONTAINER_NODE)
        nodes.append(container)
        P = NodeParameters(container, ContainerConfig).config
        record = P.record
        log = container.get_logger()

        from legged_wbc.ros.recorder import _make_node_class as recorder_class
        from mujoco_bridge.node import _make_node_class as bridge_class
        from state_estimator.node import _make_node_class as estimator_class
        from wbc_controller.node import _make_node_class as controller_class

        bus = IntraProcessBus(defer_raw=True)   # the recorder's copies after each sample's control chain
        with bus.active():
            # tick 0 goes out once the estimator and controller (and the recorder) subscribe: in-process
            bridge = bridge_class()(parameter_overrides=[
                Parameter("startup_min_subscribers", value=3 if record else 2),
                Parameter("startup_wait_all_topics", value=bool(record))])
            nodes.append(bridge)
            nodes.append(estimator_class()())
            nodes.append(controller_class()())
            if record:
                recorder = recorder_class()(parameter_overrides=[Parameter("output", value=record),
                                                                 Parameter("stamp_source", value="clock_topic"),
                                                                 Parameter("writer_process", value=True)])
                recorder.poll_gate(force=True)      # no start-up order in-process (bus.finalize)
                nodes.append(recorder)
        if recorder is not None and hasattr(recorder.bag, "flush"):
            sink = recorder.bag

            def _after_sample():
                bus.flush()         # the recorder's deferred records, then one publication to its process
                sink.flush()

            bridge.after_sample = _after_sample
        else:
            bridge.after_sample = bus.flush
        external = bus.finalize()
        if recorder is not None:
            recorder.subscribe_topics(bus.published_topics())
            recorder.start_discovery_timer()
        local = bus.local_topics()
        log.info(f"composed {', '.join(n.get_name() for n in nodes[1:])}; in-process topics: "
                 + ", ".join(f"{t} -> {'/'.join(s)}" for t, s in sorted(local.items()))
                 + (f"; through DDS: {', '.join(sorted(set(external)))}" if external else ""))

        executor = SingleThreadedExecutor()   # parameters, services, timers, outside subscriptions
        for n in nodes:
            executor.add_node(n)
        spin = threading.Thread(target=executor.spin, name="executor", daemon=True)
        spin.start()

        def _stop(signum, frame):
            bridge.request_stop()

        signal.signal(signal.SIGINT, _stop)
        signal.signal(signal.SIGTERM, _stop)
        if not bridge.lockstep:
            _set_realtime_scheduling(P.sched_priority, P.cpu, log)
        gc.collect()
        gc.freeze()
        # the GIL passes between threads (the bag writer, the executor) every 0.5 ms instead of 5 ms:
        # the control thread never waits long for it
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        rc = bridge.run()
        bus.flush()
        stats = bus.stats()
        log.info(f"in-process deliveries {stats['local_deliveries']}, DDS publications {stats['dds_published']}, "
                 f"callback errors {stats['callback_errors']}")
        if stats["callback_errors"]:
            rc = rc or 1
    except (ParameterSchemaError, ConfigError) as exc:
        print(f"{CONTAINER_NODE}: {exc}", file=sys.stderr)
        rc = 2
    finally:
        if recorder is not None:
            recorder.close()                # every message was written synchronously: nothing to drain
        if executor is not None:
            executor.shutdown(timeout_sec=1.0)
        if spin is not None:
            spin.join(timeout=2.0)
        for n in reversed(nodes):
            viewer = getattr(n, "viewer", None)
            if viewer is not None:
                try:
                    viewer.close()
                except Exception:
                    pass
            n.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    return rc


if __name__ == "__main__":
    sys.exit(main())
