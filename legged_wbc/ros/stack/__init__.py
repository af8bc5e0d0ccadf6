"""The stack's processes: the containers that compose the nodes in one or two processes
(:mod:`.container`, :mod:`.composition`), the recorder node (:mod:`.recorder`), the live Foxglove server
(:mod:`.foxglove`, ``foxglove:=PORT``) and the console entry points of every node and container (:mod:`.entry`).

May import: anything below it (every other room of :mod:`legged_wbc.ros`) and the node modules.
"""
