"""The ``mujoco_bridge`` node's parameters: one frozen, validated dataclass (the schema of
:func:`legged_wbc.params.param`: names, types, defaults, ranges, units, descriptions, live or read-only).

Values come from ``config/mujoco_bridge.yaml`` (``mujoco_bridge: ros__parameters:``) and the command
line; live ones (``legged-wbc param set /mujoco_bridge NAME VALUE``) act from the next control tick
(realtime: the next physics step), see :mod:`mujoco_bridge.scheduler`. ``startup_timeout`` is only
used while starting, hence read-only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from legged_wbc import params as P
from legged_wbc.params import param, validate
from legged_wbc.robot import ConfigError, share_path
from mujoco_bridge.command_source import check_command_source

NODE_NAME = "mujoco_bridge"


@dataclass(frozen=True)
class BridgeConfig:
    """All ``mujoco_bridge`` parameters."""

    robot: str = param("hexapod", desc="robot config name or YAML path (config/robot_<name>.yaml)", live=False)
    mode: str = param("lockstep", desc="timing: lockstep (wait for each tick's command) or realtime "
                      "(wall-clock paced)", choices=("lockstep", "realtime"), live=False)
    duration: float = param(0.0, 0.0, 1e7, "stop after this many sim seconds; 0 = run until stopped", unit="s")
    initial_height: float = param(0.0, 0.0, 2.0, "initial base height of the stance pose; 0 = the scenario's, "
                                  "else the robot config's stance height", unit="m", live=False)
    control_period_steps: int = param(2, 1, 100, "physics steps (1 ms each) per control tick", live=False)
    watchdog_timeout: float = param(0.5, 0.001, 3600.0, "no valid command for this long -> joint damping "
                                    "(lockstep: wall seconds waiting for a tick's command; realtime: sim seconds)",
                                    unit="s")
    watchdog_damping: float = param(5.0, 0.0, 1e4, "joint damping applied by the watchdog", unit="N m s/rad")
    startup_timeout: float = param(60.0, 0.0, 86400.0, "wall seconds to wait for subscribers and the first "
                                   "command before the watchdog engages; 0 = wait forever", unit="s", live=False)
    startup_min_subscribers: int = param(1, 0, 1000, "matched /joint_states subscriptions to wait for before "
                                         "publishing tick 0", live=False)
    startup_wait_all_topics: bool = param(False, desc="also wait until every published topic has a matched "
                                          "subscription before tick 0 (set when a recorder runs, so no topic "
                                          "misses its first samples)", live=False)
    republish_period: float = param(1.0, 0.01, 3600.0, "start-up only: re-publish the tick-0 samples after this "
                                    "many wall seconds without the tick-0 command", unit="s")
    command_timing: str = param("stamped", desc="stamped = pair each torque command with the control tick its "
                                "stamp names; untimed = ignore stamps, apply the newest command (realtime only, "
                                "like a hardware interface)", choices=("stamped", "untimed"), live=False)
    sample_stamps: str = param("sim", desc="stamps of /joint_states and /imu: sim = sim time (tick k at k * 2 ms); "
                               "wall = ROS time at publication (on the physics' clock if the sim runs behind), like a ros2_control robot "
                               "(needs mode realtime and command_timing untimed; ground truth keeps sim time)",
                               choices=("sim", "wall"), live=False)
    realtime_factor: float = param(1.0, 0.01, 100.0, "realtime mode: sim seconds per wall second")
    early_intermediate_steps: bool = param(True, desc="realtime mode: a physics step whose sample falls between "
                                           "control ticks runs as soon as the command it applies is there instead "
                                           "of in its own 1 ms slot (tick samples keep their slots: one wake-up per "
                                           "tick instead of two, ~100-200 us of CPU a tick on our VMs)", live=False)
    max_command_age_ticks: int = param(2, -1, 1000, "realtime mode: a physics step never applies a command that "
                                       "answers a tick more than this many ticks older than the one it may answer: "
                                       "the simulated world waits for its controller (real-time factor < 1, waits "
                                       "counted) instead of running on stale torques; -1 = never wait (a robot "
                                       "cannot)", unit="ticks")
    ground_truth_decimation: int = param(2, 1, 1000, "publish /ground_truth/* and /disturbance every N physics "
                                         "steps")
    tf_rate: float = param(10.0, 0.0, 500.0, "rate of /tf world -> base_link_ground_truth (the simulation's true "
                           "base pose, evaluation only; taken off the physics thread); 0 = none",
                           unit="Hz wall", live=False)
    diagnostics_period: float = param(0.1, 0.001, 3600.0, "period of /bridge/diagnostics", unit="s sim")
    progress_period: float = param(10.0, 0.0, 86400.0, "log a progress line (sim time, real-time factor, "
                                   "deadline misses, command latency) every this many wall seconds; 0 = never",
                                   unit="s")
    qos_depth: int = param(200, 1, 100000, "history depth of the reliable publishers", unit="messages", live=False)
    scenario: str = param("none", desc="disturbance scenario name (none = no disturbance)", live=False)
    command_source: str = param("first", desc="whose /joint_torque_cmd the bridge applies: first = the first "
                                "publisher of the run with a well-formed command; launch = the launch's own "
                                "wbc_controller process, by the publisher GID it hands over at start-up "
                                "(layout:=processes); a node name (/my_controller) = that node's first publisher "
                                "(a second one of that name is an alarm); link = the host link's peer "
                                "(layout:=split); any other publisher's commands are dropped and counted "
                                "(commands_foreign). A container that composes the controller follows it by "
                                "identity, whatever this says", live=False)
    viewer: bool = param(False, desc="open the MuJoCo passive viewer (needs a display)", live=False)
    noise_joint_velocity: float = param(0.0, 0.0, 100.0, "white noise std of joint velocities", unit="rad/s",
                                        live=False)
    noise_gyro: float = param(0.0, 0.0, 100.0, "white noise std of the gyro", unit="rad/s", live=False)
    noise_accel: float = param(0.0, 0.0, 1000.0, "white noise std of the accelerometer", unit="m/s^2", live=False)
    noise_seed: int = param(0, 0, 2**31 - 1, "seed of the sensor noise", live=False)

    def __post_init__(self):
        validate(self)
        if (why := check_command_source(self.command_source)) is not None:
            raise ConfigError(why)
        if self.mode == "lockstep" and self.command_timing == "untimed":
            raise ConfigError("command_timing: untimed needs mode: realtime (lockstep pairs commands with ticks)")
        if self.sample_stamps == "wall" and self.mode != "realtime":
            raise ConfigError("sample_stamps: wall needs mode: realtime (wall stamps are hardware emulation)")
        if self.sample_stamps == "wall" and self.command_timing != "untimed":
            raise ConfigError("sample_stamps: wall needs command_timing: untimed (commands carry wall stamps, "
                              "not ticks)")

    @property
    def lockstep(self) -> bool:
        return self.mode == "lockstep"


def default_config_path() -> Path:
    return share_path("config", "mujoco_bridge.yaml")


def load_bridge_config(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None) -> BridgeConfig:
    """The bridge's config from ``mujoco_bridge: ros__parameters:`` in ``path`` (default
    ``config/mujoco_bridge.yaml``), then ``overrides``; ``ConfigError`` naming the parameter."""
    return P.load_node_config(BridgeConfig, Path(path) if path is not None else default_config_path(), NODE_NAME,
                              overrides)


__all__ = ["BridgeConfig", "ConfigError", "NODE_NAME", "default_config_path", "load_bridge_config"]
