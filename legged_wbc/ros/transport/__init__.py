"""Moving values between nodes: a node's publishers and subscriptions, in-process when composed
(:mod:`.endpoints`), the intra-process bus (:mod:`.intra_process`) and the host link that joins the
buses of two processes (:mod:`.host_link`).

May import: the core, :mod:`legged_wbc.ros.io` and :mod:`legged_wbc.ros.recording` (message types by
name, the ring naming scheme).
"""
