"""ROS 2 message <-> numpy conversions: the one place where message conventions are handled.

Every node of the stack converts through these helpers, so the conventions below hold everywhere.

Topics (names relative to the node namespace; the launch file runs everything in ``/``):

================================  ==============================  ===========================================
topic                             type                            content
================================  ==============================  ===========================================
``/joint_states``                 sensor_msgs/JointState          1 kHz; ``name`` = ``RobotModel.joint_names``
                                                                  (Pinocchio order); position [rad], velocity
                                                                  [rad/s], effort = applied motor torque [N m]
``/imu``                          sensor_msgs/Imu                 1 kHz; orientation base->world, stored
                                                                  ``x, y, z, w`` (ROS); angular velocity [rad/s]
                                                                  and linear acceleration (specific force,
                                                                  [m/s^2]) in the base frame (``frame_id`` =
                                                                  base link; the IMU is aligned with it)
``/clock``                        rosgraph_msgs/Clock             sim time, every physics step (1 kHz)
``/joint_torque_cmd``             sensor_msgs/JointState          torque command: name, effort [N m],
                                                                  stamp = the tick it answers, see below
``/disturbance``                  std_msgs/Float64MultiArray      extra joint torque applied by the sim [N m],
                                                                  joint_states.name order
``/ground_truth/odom``            nav_msgs/Odometry               evaluation only: pose of the base in
                                                                  ``world``; twist in the BASE frame
                                                                  (``child_frame_id``, as ROS specifies for
                                                                  Odometry; = Pinocchio's ``v[0:6]``)
``/ground_truth/contacts``        std_msgs/Float64MultiArray      evaluation only: 1.0/0.0 foot-floor contact
                                                                  per leg, robot-config leg order
``/bridge/diagnostics``           std_msgs/Float64MultiArray      bridge counters, fields in the dim label
================================  ==============================  ===========================================

Array layouts: every ``Float64MultiArray`` published by the stack is one-dimensional,
``layout.dim = [MultiArrayDimension(label=LABEL, size=len(data), stride=len(data))]`` and
``data_offset = 0``. ``LABEL`` says what the values are, their unit and their order, e.g.
``disturbance_torque_Nm[joint_states.name order]`` or ``foot_contact_0or1[lf,lm,lh,rf,rm,rh]``.

Torque command (``/joint_torque_cmd``, :func:`torque_command_msg`): a ``sensor_msgs/JointState``
with ``name`` = the joints, ``effort`` = their torques [N m] (position and velocity NaN) and
``header.stamp`` = the sim time of the control tick it answers. Control tick ``k`` is sim time
``k * control_period`` (``control_period`` = 2 physics steps = 0.002 s); the sensor sample of tick
``k`` is the one stamped exactly ``k * control_period`` (:func:`tick_from_stamp`; the samples in
between, at 1 kHz, have no tick), and its command carries the same stamp. The bridge pairs commands
with ticks by that stamp and maps the joints by name (:class:`TorqueCommandDecoder`); a bridge with
``command_timing: untimed`` (realtime only) ignores the stamp and applies the newest command, as a
hardware interface would. A ros2_control robot takes the same efforts from the controller's
optional ``forward_command_topic`` (``std_msgs/Float64MultiArray`` in a ``joints`` order). See
:mod:`mujoco_bridge.scheduler` for the lockstep protocol.

Time stamps: integer nanoseconds of sim time (``/clock``); use :func:`stamp_ns` /
:func:`time_msg` to convert, never floats, so tick arithmetic is exact.

Hardware stamps (``input_timing: sample`` of the estimator and the controller; the bridge emulates
them with ``sample_stamps: wall``): a robot stamps ``/joint_states`` and ``/imu`` with its own clock,
off the tick grid. :class:`SampleTicks` then picks the ticks (a joint state due by a schedule
advancing ``CONTROL_PERIOD_NS`` per tick, +- ``SAMPLE_TICK_TOLERANCE_NS``), the nodes pair by stamp
(:class:`TickSync` keyed by nanoseconds) and the command carries the sample's stamp, which a bridge
with ``command_timing: untimed`` uses only to time the answer.

Start-up: DDS drops what a volatile publisher sends before a subscriber is *matched*, so a node
should call :func:`wait_for_matched_subscribers` on its publishers before its first message of a
run (the bridge does before tick 0; a controller should before answering tick 0), or the recorder
may miss the beginning of that topic.

The package's modules, by job: :mod:`.topics` (names and labels), :mod:`.stamps` (time and ticks of
stamps), :mod:`.messages` (builders and readers), :mod:`.joint_order` (joint states by name, corrupt
samples rejected), :mod:`.command` (the torque command's decoder), :mod:`.ticks` (tick pairing and
scheduling), :mod:`.executors`
(executors, spin loop, a node process's ``main``). Their names are all importable from here. Publishers and
subscriptions (in-process when composed) and the start-up and closing waits are the transport's:
:mod:`legged_wbc.ros.transport.endpoints`.
"""

from __future__ import annotations

from legged_wbc.conventions import CONTROL_PERIOD_NS, PHYSICS_DT_NS, UNTIMED_TICK  # noqa: F401  (the stack's clock)
from legged_wbc.ros.io.topics import (  # noqa: F401
    TOPIC_JOINT_STATES, TOPIC_IMU, TOPIC_CLOCK, TOPIC_TORQUE_CMD, TOPIC_DISTURBANCE, TOPIC_GT_ODOM,
    TOPIC_GT_CONTACTS, TOPIC_BRIDGE_DIAGNOSTICS, TOPIC_EST_ODOM, TOPIC_EST_SUPPORT, TOPIC_EST_TAU_EXT,
    TOPIC_EST_DIAG, TOPIC_WBC_PITCH, TOPIC_WBC_DIAG, TOPIC_COMMAND_LATENCY, COMMAND_LATENCY_LABEL, WORLD_FRAME,
    JOINT_ORDER, DISTURBANCE_LABEL, contacts_label,
)
from legged_wbc.ros.io.stamps import (  # noqa: F401
    time_msg, stamp_ns, tick_from_stamp, clock_msg, dvec,
)
from legged_wbc.ros.io.messages import (  # noqa: F401
    joint_state_msg, fill_joint_state, imu_msg, fill_imu, imu_arrays, odometry_msg, fill_odometry,
    odometry_arrays, float64_array_msg, array_label, array_data, command_latency_msg, command_latency_arrays,
    contacts_msg, diagnostics_msg, diagnostics_dict, torque_command_msg, fill_torque_command,
)
from legged_wbc.ros.io.joint_order import (  # noqa: F401
    POSITION_MARGIN_RAD, VELOCITY_FACTOR, JointOrder, all_finite, joint_bounds,
)
from legged_wbc.ros.io.command import (  # noqa: F401
    CommandError, TorqueCommand, TorqueCommandDecoder,
)
from legged_wbc.ros.io.ticks import (  # noqa: F401
    TickSync, NewestTickRunner, INPUT_TIMINGS, SAMPLE_TICK_TOLERANCE_NS, IMU_MAX_AGE_NS, SampleTicks, TickOutputs,
)
from legged_wbc.ros.io.executors import (  # noqa: F401
    EXECUTOR_ENV, EXECUTORS, SPIN_PERIOD, executor_kind, ignore_stop_signals, make_executor, spin_until, spin_node,
)
