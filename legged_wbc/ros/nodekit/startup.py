"""The bridge's start-up wait on the ROS graph: its scheduler's ports ``peers_missing`` and ``settle_peers``
(:class:`mujoco_bridge.scheduler.BridgePorts`; the scheduler waits, logs and times out, this reads the graph).

Tick 0 is published once the peers that must not miss it are there: ``startup_min_subscribers`` matched
``/joint_states`` subscriptions, a command publisher (lockstep), and with ``startup_wait_all_topics`` a
matched subscription on every published topic (:class:`mujoco_bridge.config.BridgeConfig`).
"""

from __future__ import annotations

from legged_wbc.ros.transport import endpoints


class StartupPeers:
    """For the bridge ``node`` (its ``cfg``, read at each call): ``samples`` (the ``/joint_states``
    publisher), ``commands`` (the torque command subscription, whose publishers are counted when
    ``wait_for_commands``) and every one of its ``publishers``."""

    def __init__(self, node, samples, commands, publishers: list, wait_for_commands: bool):
        self.node, self.samples, self.commands, self.publishers = node, samples, commands, publishers
        self.wait_for_commands = wait_for_commands

    def missing(self) -> str | None:
        """None once the peers are there, else what is missing (one line for the log)."""
        cfg = self.node.cfg
        subs, need = self.samples.get_subscription_count(), cfg.startup_min_subscribers
        pubs = self.node.count_publishers(self.commands.topic_name) if self.wait_for_commands else 1
        unmatched = [p.topic_name for p in self.publishers if p.get_subscription_count() < 1] \
            if cfg.startup_wait_all_topics else []
        if subs >= need and pubs >= 1 and not unmatched:
            return None
        return f"{subs}/{need} /joint_states subscribers, {pubs} command publishers, unmatched topics {unmatched}"

    def settle(self) -> None:
        """Wait (at most 2 s) until every subscriber the graph knows (the recorder's on all topics) is
        matched, so that no sample is dropped; a warning if one is not."""
        if not endpoints.wait_for_matched_subscribers(self.node, self.publishers, timeout=2.0):
            self.node.get_logger().warning("start-up: some subscriptions did not match within 2 s")
