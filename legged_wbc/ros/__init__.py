"""ROS 2 plumbing of the stack, in rooms by what they do (each room's docstring says what it may import):

* :mod:`.io` - message I/O: topic names, stamps and ticks, message builders and readers, joint order,
  the command decoder, tick pairing, executors and a node process's ``main``, the value adapters, the
  checked wire encoding of what crosses a process boundary;
* :mod:`.recording` - bag files: the CDR layouts, the shared-memory rings, the rosbag2 writer, the
  recorder process fed through rings and the repair of a bag whose writer died;
* :mod:`.transport` - moving values between nodes: publishers / subscriptions (:mod:`.transport.endpoints`),
  the in-process bus and the host link joining two processes;
* :mod:`.nodekit` - what every node is built from: parameters, ``/diagnostics``, ``/tf``, background
  work, progress lines;
* :mod:`.tooling` - stand-ins for the ROS 2 tools not installable here: the launch-file runner, the
  parameter client, the stack monitor, the children's lifetime;
* :mod:`.stack` - the stack's processes: the containers, their composition, the recorder node and the
  console entry points.

Rooms import downwards only: ``io`` < ``recording`` < ``transport`` < ``nodekit`` < ``stack``, and
``tooling`` above ``io`` only (test ``test_layers``). This package (with the ``node`` modules of
``mujoco_bridge``, ``state_estimator`` and ``wbc_controller``) is the only one that imports rclpy; the
core in ``legged_wbc`` never does (tested). The flat module names of before (``legged_wbc.ros.host_link``,
...) still import, as aliases (:mod:`legged_wbc.moved`).
"""

from legged_wbc.moved import alias as _alias

_alias(__name__, {
    **{m: f"io.{m}" for m in ("adapters", "wire")},
    **{m: f"nodekit.{m}" for m in ("params", "diagnostics", "tf_publisher", "background", "progress")},
    **{m: f"transport.{m}" for m in ("intra_process", "host_link")},
    **{m: f"recording.{m}" for m in ("bag_process", "bag_writer", "bag_repair", "shm_ring", "cdr_layout")},
    **{m: f"tooling.{m}" for m in ("launcher", "param_client", "stack_monitor", "lifetime")},
    **{m: f"stack.{m}" for m in ("composition", "container", "entry", "recorder")},
    "io.endpoints": "transport.endpoints",
})
