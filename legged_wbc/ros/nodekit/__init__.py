"""What every node of the stack is built from: declared parameters with ranges and live validation
(:mod:`.params`), the ``/diagnostics`` status (:mod:`.diagnostics`), the REP-105 transforms
(:mod:`.tf_publisher`), work kept off the control path (:mod:`.background`), progress lines
(:mod:`.progress`), the executor thread beside a main loop (:mod:`.executor_thread`), the node behind a DDS
publisher (:mod:`.publisher_names`) and the bridge's start-up wait on the graph (:mod:`.startup`).

May import: the core, the math packages' plain modules, :mod:`legged_wbc.ros.io` and
:mod:`legged_wbc.ros.transport` (publishers go through its endpoints).
"""
