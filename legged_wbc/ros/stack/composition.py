"""How a container (:mod:`legged_wbc.ros.stack.container`) composes its part and runs it: the part's nodes
(:func:`compose_nodes`, the controller chained to the estimator), the bus finalized and the control part's
after-frame hook (used by the container's wiring), the control thread's scheduling, the sim part's loop (the
bridge's), the control part's wait (its chain runs in the host link's receiver thread), sim time as the part
knows it, and the orderly end (the bus's closing counters, the teardown)."""

from __future__ import annotations

import os
import struct
import threading
import time

from legged_wbc.idle_poll import start_idle_pollers, stop_idle_pollers
from legged_wbc.ros.nodekit import background
from legged_wbc.ros.io.topics import TOPIC_EST_ODOM, TOPIC_EST_SUPPORT, TOPIC_EST_TAU_EXT, TOPIC_JOINT_STATES

CPU_LATENCY_DEVICE = "/dev/cpu_dma_latency"


def hold_cpu_wakeup_latency(latency_us: int, log, device: str = CPU_LATENCY_DEVICE) -> int | None:
    """Ask the kernel (PM QoS) to keep every CPU's wake-up latency at most ``latency_us`` [us] for as long
    as the returned file descriptor stays open (process exit closes it): idle CPUs then skip the idle
    states that take longer to leave; 0 = they poll instead of halting (what real-time Linux set-ups do
    by holding this same device, or booting with ``idle=poll``). On our VMs a halted vCPU comes back to
    cold caches: the same tick costs ~1.5x the CPU after a halt (``docs/realtime.md``, *What a
    wake-up costs*). The price is power: idle CPUs spin. ``latency_us < 0``: no request (None).
    Without the permission (the device is root's): one warning, None."""
    if latency_us < 0:
        return None
    fd = None
    try:
        fd = os.open(device, os.O_WRONLY)
        os.write(fd, struct.pack("i", int(latency_us)))
    except OSError as exc:
        if fd is not None:
            os.close(fd)
        log.warning(f"no CPU wake-up latency request ({exc.strerror}: {device}); idle CPUs may halt between ticks")
        return None
    log.info(f"CPU wake-up latency held at <= {int(latency_us)} us ({device})")
    return fd


def release_cpu_wakeup_latency(fd: int | None) -> None:
    """End a :func:`hold_cpu_wakeup_latency` request (None: nothing to do)."""
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass


def set_realtime_scheduling(priority: int, cpu: int, log) -> None:
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
            background.set_control_thread(threading.get_native_id())   # its helpers run just below it
            log.info(f"control thread: SCHED_FIFO priority {priority}")
        except (OSError, AttributeError) as exc:
            log.warning(f"no realtime scheduling ({exc}); running with normal priority")


# the controller's inputs that a chained estimator hands over directly (WbcNode.take_estimate)
CHAINED_TOPICS = (TOPIC_JOINT_STATES, TOPIC_EST_ODOM, TOPIC_EST_SUPPORT, TOPIC_EST_TAU_EXT)
CHAIN = ("state_estimator", "wbc_controller")   # the nodes chain_controller chains, by name


def chain_controller(bus, estimator, controller, log=None) -> str | None:
    """Chain the co-located controller to the estimator, as ros2_control chains controllers: each tick
    the estimator hands its estimate to :meth:`WbcNode.take_estimate` by a call, after publishing its
    outputs as before, and the controller's four input subscriptions (:data:`CHAINED_TOPICS`) are
    withdrawn from ``bus`` (call before the bus is joined to a link and finalized). The topics stay the
    same for everyone else (the recorder, the bridge, outside subscribers); what goes is per tick the
    controller's four callbacks, their name lookups and checks and its tick assembly (the controller's
    own input checks still run). Same inputs, same order, same numbers: lockstep stays bit-identical.
    Only for ``input_timing: tick_grid`` on both nodes and the same joints and legs (else the topics
    pair the inputs by stamp). Returns None when chained, else why not (one line, also to ``log``)."""
    why_not = None
    if estimator.samples is not None or controller.samples is not None:
        why_not = "input_timing is sample (inputs are paired by stamp)"
    elif estimator.joint_names != controller.joint_names or estimator.leg_names != controller.leg_names:
        why_not = "the estimator and the controller have different joints or legs"
    else:
        bus.withdraw(controller, CHAINED_TOPICS)
        estimator.chained = controller
        controller.cmd_vel.to_topic = False     # the estimator reads the gait clock from it (no /wbc/gait_clock)
    if log is not None:
        log.info("wbc_controller chained to state_estimator" if why_not is None
                 else f"wbc_controller not chained to state_estimator: {why_not}")
    return why_not


# ----------------------------------------------------------------------------- composing and wiring a part
PART_NODES = {"all": ("bridge", "estimator", "controller", "recorder"), "sim": ("bridge", "recorder"),
              "control": ("estimator", "controller")}
NODE_NAMES = {"bridge": "/mujoco_bridge", "estimator": "/state_estimator", "controller": "/wbc_controller",
              "recorder": "/bag_recorder"}


def part_nodes(part: str, wbc: bool) -> tuple:
    """The nodes of ``part`` (:data:`PART_NODES`), without the controller when an outside one commands."""
    return tuple(n for n in PART_NODES[part] if wbc or n != "controller")


def compose_nodes(P, part: str, bus, log) -> tuple[list, object, object]:
    """Construct this part's nodes on ``bus``: ``(nodes, bridge or None, recorder or None)``."""
    from rclpy.parameter import Parameter

    want = part_nodes(part, P.wbc)
    record = P.record if "recorder" in want else ""
    nodes, bridge, recorder = [], None, None
    with bus.active():
        if "bridge" in want:
            if "estimator" in want or "controller" in want:
                import legged_wbc.model  # noqa: F401  (loaded for them anyway: the bridge's stance is computed here)
            from mujoco_bridge.node import MujocoBridge

            # tick 0 once the estimator, the controller unless chained or the outside one (and the recorder)
            # subscribe, here, linked or through DDS
            bridge = MujocoBridge(parameter_overrides=[
                Parameter("startup_min_subscribers", value=(1 if P.chain and P.wbc else 2) + bool(record)),
                Parameter("startup_wait_all_topics", value=bool(record))])
            nodes.append(bridge)
        if "estimator" in want:
            from state_estimator.node import EstimatorNode

            nodes.append(EstimatorNode())
        if "controller" in want:
            from wbc_controller.node import WbcNode

            nodes.append(WbcNode())
        if record:
            from legged_wbc.ros.stack.recorder import BagRecorder

            # split: the control part records its own topics (bag_process.PeerRecorder), not through the link
            recorder = BagRecorder(own_publications_only=bus.link is not None, ring_rates=ring_rates(bridge, bus),
                                   parameter_overrides=[Parameter("output", value=record),
                                                        Parameter("stamp_source", value="clock_topic"),
                                                        Parameter("writer_process", value=True)])
            recorder.poll_gate(force=True)      # no start-up order in-process (bus.finalize)
            nodes.append(recorder)
        if P.foxglove and part in ("all", "sim"):
            from legged_wbc.ros.stack.foxglove import FoxgloveBridge

            # split: the sim part serves; the control part's topics over the link, its nodes' parameters
            # through their services
            remote = [] if part == "all" else [NODE_NAMES[n] for n in part_nodes("control", P.wbc)]
            nodes.append(FoxgloveBridge(P.foxglove, control=P.foxglove_control, remote_nodes=remote))
    if P.chain and "estimator" in want and "controller" in want:
        chain_controller(bus, *(next(n for n in nodes if n.get_name() == name) for name in CHAIN), log=log)
    return nodes, bridge, recorder


def pin_controller(bridge, nodes, bus) -> None:
    """The bridge takes torque commands from the launch's own controller only, by identity, never from a
    DDS publisher whatever its name (:meth:`mujoco_bridge.command_source.CommandSources.pin`): the controller
    composed here (its in-process publisher), or in the sim part of ``layout:=split`` the control part's over
    the host link (call after :meth:`~legged_wbc.ros.transport.intra_process.IntraProcessBus.connect_link`).
    Nothing with an outside controller (``wbc: false``: ``command_source`` decides)."""
    if bridge is None:
        return
    ctrl = next((n for n in nodes if n.get_name() == "wbc_controller"), None)
    if ctrl is not None:
        bridge.cmd_sources.pin(ctrl.pub_cmd, ctrl.get_fully_qualified_name(), os.getpid())
    elif bus.link is not None and (lp := bus.link_publisher(bridge.sub_cmd.topic_name)) is not None:
        bridge.cmd_sources.pin(lp, NODE_NAMES["controller"], bus.link.peer_pid,
                               how="over the host link from this launch's control part")


def ring_rates(bridge, bus) -> tuple | None:
    """The recording rings' rates [bytes per second of recording]: this process's ring and the linked part's
    (:func:`~legged_wbc.ros.io.topics.recorded_bytes_per_s` for the bridge's robot), or None without a bridge."""
    from legged_wbc.ros.io.topics import recorded_bytes_per_s

    if bridge is None:
        return None
    n, legs = bridge.n, len(bridge.leg_names)
    if bus.link is None:
        return recorded_bytes_per_s(("sim", "control"), n, legs), None
    return recorded_bytes_per_s(("sim",), n, legs), recorded_bytes_per_s(("control",), n, legs)


def finalize_bus(bus, node) -> list[str]:
    """Finalize the bus (with the in-process subscriptions' shadows, for publishers outside the process) and
    have the process's background thread wake the shadows whose topic has such a publisher (every 50 ms).
    Returns the topics subscribed through DDS only."""
    external = bus.finalize()
    background.for_node(node, 0.05, bus.check_outside, "publishers outside")
    return external


def drained(bus, then):
    """The control part's hook after each frame: the messages from publishers outside the process (in the
    chain's thread, between frames), then ``then()``."""
    inbox, drain = bus._inbox, bus.drain_outside

    def _after_frame():
        if inbox:
            drain()
        then()

    return _after_frame


# ----------------------------------------------------------------------------- running it
def run_control(bus, P, log, stop_event) -> int:
    """The control part: the link's receiver thread runs the estimator -> controller chain; this
    thread waits until the sim part says bye (or is gone) or a signal. Realtime: a chain that fell behind
    works on the newest frame (``newest_only``); lockstep: on every frame, in order. There the simulation
    waits for this part's command, so nothing piles up, except when an outside controller commands
    (``controller:=external``): the simulation then goes on without this part, whose estimator skipped
    ~18 % of the ticks as stale (4,079 of 5,001) and left the bag's ``/estimator/*`` that incomplete."""
    link = bus.link
    realtime = P.mode == "realtime"
    qos = hold_cpu_wakeup_latency(P.cpu_wakeup_latency_us, log) if realtime else None
    try:
        link.start(on_start=(lambda: set_realtime_scheduling(P.sched_priority, P.cpu, log)) if realtime else None,
                   batch_replies=True, newest_only=realtime)
        while not (link.closed.wait(0.1) or stop_event.is_set()):
            pass
    finally:
        release_cpu_wakeup_latency(qos)
    ended = link.closed.is_set()
    link.close()                              # no more frames: the receiver thread is done (and so is recording)
    log.info("the sim part ended" if ended else "stopped")
    return 0


def run_sim(bridge, link, P, log) -> int:
    """The bridge's loop in this thread (realtime: SCHED_FIFO). With a host link: in lockstep a receiver
    thread delivers the control part's frames (the bridge waits for each command anyway); in realtime
    the bridge's thread reads them itself before each physics step (``poll_inputs``), so nothing in
    this process wakes up for a command, and a command's latency runs to its frame's send time."""
    if link is not None:
        if bridge.lockstep:
            link.start()
        else:
            bridge.ports.poll_inputs, bridge.source_time = link.poll, link.frame_time
            bridge.ports.wait_inputs = link.wait_readable   # when the world waits for its controller
    qos = pollers = None
    if not bridge.lockstep:
        qos = hold_cpu_wakeup_latency(P.cpu_wakeup_latency_us, log)
        # the machine's idle CPUs, for every part: the part with the bridge runs from the first to the last tick
        pollers = start_idle_pollers(P.idle_poll, log)
        set_realtime_scheduling(P.sched_priority, P.cpu, log)
    try:
        rc = bridge.run()
    finally:
        stop_idle_pollers(pollers)
        release_cpu_wakeup_latency(qos)
    if link is not None:
        link.flush()
        link.bye()                            # the control part answers the last sample, then says bye
        t_end = time.monotonic() + 2.0
        while not link.closed.wait(0.005) and time.monotonic() < t_end:
            if not bridge.lockstep:
                link.poll()                   # its last frames (the recorder's), then its bye
        if not link.closed.is_set():
            log.warning("the control part did not say bye within 2 s")
    return rc


def sim_now(bridge, nodes):
    """Sim time [ns] as this part knows it (None before the first sample): the bridge's last sample, or
    (the control part) the estimator's last complete tick (``input_timing: sample``: its newest /imu stamp)."""
    from legged_wbc.conventions import CONTROL_PERIOD_NS, PHYSICS_DT_NS

    if bridge is not None:
        return lambda: bridge._last_step * PHYSICS_DT_NS if bridge._last_step >= 0 else None
    est = next((n for n in nodes if n.get_name() == "state_estimator"), None)

    def now():
        if est is None:
            return None
        if est.samples is not None:
            return est._imu[0] if est._imu is not None else None
        return est.sync.last_tick * CONTROL_PERIOD_NS if est.sync.last_tick >= 0 else None

    return now


def closing_stats(bus, link, log, rc: int) -> int:
    """Flush the bus, log its counters (and the host link's); a callback error makes the exit code 1."""
    bus.flush()
    stats = bus.stats()
    log.info(f"in-process deliveries {stats['local_deliveries']}, DDS publications {stats['dds_published']}, "
             f"callback errors {stats['callback_errors']}, from publishers outside {stats['outside_messages']} "
             f"(dropped {stats['outside_dropped']}; own publications through DDS dropped {stats['own_copies']})"
             + (f"; {link.stats()}" if link is not None else ""))
    if stats["callback_errors"]:
        rc = rc or 1
    return rc


def teardown(nodes, link, recorder, executor, spin, peer=None) -> None:
    """Close the link, this part's recording (the control part's ring; the sim part's bag: the recorder
    process drains), the executor and the nodes."""
    if link is not None:
        link.close()
    if peer is not None:
        peer.close()                    # the control part: its last records, then its ring closed
    if recorder is not None:
        recorder.close()                # every message was handed to the recorder process: it drains
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
