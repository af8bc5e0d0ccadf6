"""``walking_container``: the walking stack's nodes composed in one process, intra-process handoff.

What rclcpp users do when a 500 Hz pipeline must not pay DDS per message: the MuJoCo bridge, the
state estimator, the whole-body controller and (with ``record``) the bag recorder run as separate
ROS 2 nodes (own names, parameters, topics, all visible to the graph: ``legged-wbc param set
wbc_controller ...`` works as with one process per node) in one process, and every message between
them is a function call (:mod:`legged_wbc.ros.transport.intra_process`). Messages go on DDS only for subscribers
outside the process. One control tick is then one call chain in the bridge's thread: sample ->
estimator -> controller -> command, with no wake-up or copy in between.

Parameters of the container node (everything else reaches the nodes by name, e.g. ``-p
scenario:=paper``, ``--params-file config/wbc_controller.yaml``): :class:`ContainerConfig`. The
recorder (``record``) stamps with the recorded ``/clock`` and writes its bag from a process of its own
(:mod:`legged_wbc.ros.recording.bag_process`: the control thread only packs each sample's numbers into shared
memory). In realtime mode the control thread runs ``SCHED_FIFO`` (``sched_priority``; without the
permission: one warning) and the process holds a CPU wake-up latency request
(``cpu_wakeup_latency_us``, default 0: idle CPUs poll instead of halting, so a tick does not start on
cold caches; without the permission: one warning); the thread switch interval is 0.5 ms (Python's 5 ms would let another
thread hold the GIL that long); ``gc.freeze()`` after start-up keeps collections to what the run made.

``sim_container`` and ``control_container`` (``layout:=split``) are the same container holding part of
the nodes, the bridge and the recorder or the estimator and the controller, joined by a host link
(:mod:`legged_wbc.ros.transport.host_link`). The control part runs its chain in the link's receiver thread and
ends when the sim part says bye or is gone.
Exit status: the bridge's (0 at the end of ``duration`` or on Ctrl-C / SIGTERM, after the bag is
closed), 2 for a bad parameter or configuration, 1 if a node raised or the recording failed (its recorder
process could not write, died, stalled or found its ring corrupt: one line, the bag repaired).
"""

from __future__ import annotations

import gc
import signal
import sys
import threading
from dataclasses import dataclass

from legged_wbc.params import param, validate
from legged_wbc.ros.stack.composition import (closing_stats, compose_nodes, drained, finalize_bus, pin_controller,
                                              run_control, run_sim, sim_now, teardown)
from legged_wbc.ros.io.executors import ignore_stop_signals

CONTAINER_NODE = "walking_container"
CONTAINER_NODES = {"all": CONTAINER_NODE, "sim": "sim_container", "control": "control_container"}
SWITCH_INTERVAL_S = 0.0005


@dataclass(frozen=True)
class ContainerConfig:
    """Parameters of the container node itself (all read-only: they shape the process at start-up)."""

    record: str = param("", desc="bag directory to record to; empty = no recorder", live=False)
    sched_priority: int = param(10, 0, 99, "realtime mode: SCHED_FIFO priority of the control thread; 0 = off",
                                live=False)
    cpu: int = param(-1, -1, 1023, "realtime mode: CPU the control thread is pinned to; -1 = none", live=False)
    cpu_wakeup_latency_us: int = param(0, -1, 100000, "realtime mode: PM QoS request held while running (at most this "
                                       "CPU wake-up latency [us], /dev/cpu_dma_latency; 0 = idle CPUs poll); -1 = none",
                                       live=False)
    link: str = param("walking", desc="name of the host link joining a sim and a control part (per ROS domain)",
                      live=False)
    link_timeout: float = param(120.0, 0.0, 3600.0, "wait at most this long for the linked part to connect [s] (a "
                                "first run compiles ~75 s; a connected one proves the launch's secret within 5 s); "
                                "0 = forever", live=False)
    idle_poll: str = param("auto", choices=("auto", "always", "never"), live=False, desc="realtime, with the "
                           "bridge: SCHED_IDLE spinners keep idle CPUs from halting (idle_poll.py); auto: no cpuidle")
    chain: bool = param(True, live=False, desc="the controller takes the co-located estimator's estimate by a call "
                        "(ros2_control's chained controllers) instead of through its input topics")
    mode: str = param("lockstep", choices=("lockstep", "realtime"), live=False,
                      desc="the bridge's timing (the control part schedules its chain thread in realtime mode)")
    foxglove: int = param(0, 0, 65535, live=False, desc="serve the stack live over the Foxglove WebSocket protocol on "
                          "127.0.0.1:PORT (8765 the usual; legged_wbc/ros/stack/foxglove.py); 0 = off; layout:=container, or split "
                          "(the sim part serves)")
    foxglove_control: bool = param(False, live=False, desc="Foxglove clients may set parameters and publish /cmd_vel "
                                   "(the protocol authenticates nobody: any local user or web page could); "
                                   "false: a read-only view")
    wbc: bool = param(True, live=False, desc="compose the whole-body controller; false (controller:=external): an "
                      "outside node commands the bridge (its command_source: first) and subscribes /joint_states")

    def __post_init__(self):
        validate(self)


def _wire(bus, bridge, recorder, P, log, stop, node, nodes=()):
    """Join the linked part, finalize the bus, subscribe the recorder (split: ask the control part to
    record its own topics), set the per-sample flush. Returns the control part's
    :class:`~legged_wbc.ros.recording.bag_process.PeerRecorder` (it records this part's topics if the sim part
    asks; ``node``: the container's), else None."""
    peer = None
    if bus.link is not None:
        log.info(f"host link {P.link!r}: joining the {'control' if bridge is not None else 'sim'} part")
        if bridge is None:
            from legged_wbc.ros.recording.bag_process import PeerRecorder

            peer = PeerRecorder(bus, node)
            bus.link.on_record, bus.link.after_frame = peer.start, drained(bus, peer.flush)
        bus.connect_link(P.link_timeout, stop)
    pin_controller(bridge, nodes, bus)              # torque commands from the launch's own controller only
    external = finalize_bus(bus, node)
    recorded_there = []
    if recorder is not None:
        recorder.subscribe_topics(bus.published_topics())
        if bus.link is not None:
            recorded_there = recorder.record_linked_part(bus)
        recorder.start_discovery_timer()
    from legged_wbc.ros.stack.foxglove import serve

    serve(nodes, bus)                               # foxglove:=PORT: the live view of this part's ``nodes``
    if bridge is not None:
        flushes = [bus.flush]                       # the recorder's deferred records
        if recorder is not None and hasattr(recorder.bag, "flush"):
            flushes.append(recorder.bag.flush)      # then one publication to the recorder process
        link_flush = None
        if bus.link is not None:
            # the bridge's thread batches: one frame a tick (the samples between ticks go with the next tick's),
            # sent once the tick's control inputs are out: the control chain runs meanwhile on the other core
            bus.link.batching()
            link_flush, steps_per_tick = bus.link.flush, bridge.cfg.control_period_steps

            def _after_control_inputs(step: int) -> None:
                if step % steps_per_tick == 0:
                    link_flush()

            bridge.after_control_inputs = _after_control_inputs

        inbox, drain = bus._inbox, bus.drain_outside

        def _after_sample():
            if inbox:                               # messages from publishers outside the process
                drain()
            if link_flush is not None and bridge._last_step % steps_per_tick == 0:
                link_flush()                        # anything published after the inputs (none today)
            for f in flushes:
                f()

        bridge.after_sample = _after_sample
    local = bus.local_topics()
    linked = bus.linked_topics()
    log.info("in-process topics: " + ", ".join(f"{t} -> {'/'.join(s)}" for t, s in sorted(local.items()))
             + (f"; over the host link: {', '.join(linked)}" if linked else "")
             + (f"; recorded by the control part: {', '.join(recorded_there)}" if recorded_there else "")
             + (f"; through DDS: {', '.join(sorted(set(external)))}" if external else ""))
    return peer


def main_sim(argv: list[str] | None = None) -> int:
    """``sim_container``: the bridge and the recorder; the other part of ``layout:=split``."""
    return main(argv, part="sim")


def main_control(argv: list[str] | None = None) -> int:
    """``control_container``: the state estimator and the controller; the other part of ``layout:=split``."""
    return main(argv, part="control")


def main(argv: list[str] | None = None, part: str = "all") -> int:
    """``walking_container`` (``part="all"``), ``sim_container`` or ``control_container``."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from legged_wbc.robot import ConfigError
    from legged_wbc.ros.transport.host_link import HostLink, LinkError, LinkStopped
    from legged_wbc.ros.transport.intra_process import IntraProcessBus
    from legged_wbc.ros.nodekit.params import NodeParameters, ParameterSchemaError, feed_sim_time, init_node_process

    if not init_node_process(argv, CONTAINER_NODES[part]):
        return 2
    nodes: list = []
    executor = spin = recorder = link = peer = None
    rc = 0
    stop_event = threading.Event()
    try:
        container = rclpy.create_node(CONTAINER_NODES[part])
        nodes.append(container)
        P = NodeParameters(container, ContainerConfig).config
        log = container.get_logger()
        if part != "all":
            link = HostLink(P.link, part, log=log.info)
        bus = IntraProcessBus(defer_raw=True, link=link)   # the recorder's copies after each sample's chain
        more, bridge, recorder = compose_nodes(P, part, bus, log)
        nodes += more

        def _stop(signum, frame):
            stop_event.set()
            if bridge is not None:
                bridge.request_stop()

        signal.signal(signal.SIGINT, _stop)
        signal.signal(signal.SIGTERM, _stop)
        peer = _wire(bus, bridge, recorder, P, log, stop_event.is_set, container, nodes)
        feed_sim_time(nodes, sim_now(bridge, nodes))     # use_sim_time: the clocks follow the simulation
        log.info(f"composed {', '.join(n.get_name() for n in nodes[1:])}"
                 + (f" ({part} part of host link {P.link!r})" if link is not None else ""))

        executor = SingleThreadedExecutor()   # parameters, services, timers, outside subscriptions
        for n in nodes:
            executor.add_node(n)
        spin = threading.Thread(target=executor.spin, name="executor", daemon=True)
        spin.start()
        gc.collect()
        gc.freeze()
        # the GIL passes between threads (the executor, the link's receiver) every 0.5 ms instead of 5 ms:
        # the control thread never waits long for it
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        rc = run_control(bus, P, log, stop_event) if bridge is None else run_sim(bridge, link, P, log)
        rc = closing_stats(bus, link, log, rc)
    except (ParameterSchemaError, ConfigError, LinkError) as exc:
        print(f"{CONTAINER_NODES[part]}: {exc}", file=sys.stderr)
        rc = 0 if isinstance(exc, LinkStopped) else 2     # a stop while waiting is a stop (130 / 143: entry)
    finally:
        teardown(nodes, link, recorder, executor, spin, peer)
        if rclpy.ok():
            rclpy.shutdown()
        ignore_stop_signals()   # everything is closed: a late stop signal must not make this an exit -2
    return _recording_said(recorder, part, rc)


def _recording_said(recorder, part: str, rc: int) -> int:
    """A failed recording (the recorder's one line) said last, the line a launcher quotes: rc 1 unless
    already a failure."""
    if recorder is None or not recorder.failure:
        return rc
    print(f"{CONTAINER_NODES[part]}: {recorder.failure}", file=sys.stderr, flush=True)
    return rc or 1


if __name__ == "__main__":
    sys.exit(main())
