"""Stand-ins for the ROS 2 tools that are not installable from PyPI: the XML launch-file runner
(:mod:`.launcher`), a parameter client (:mod:`.param_client`), the stack monitor (:mod:`.stack_monitor`)
and the launched children's lifetime (:mod:`.lifetime`: they die with their parent).

May import: the core and :mod:`legged_wbc.ros.io`.
"""
