"""Bag files: fixed CDR layouts of the recorded messages (:mod:`.cdr_layout`), the shared-memory rings
that feed the recorder process (:mod:`.shm_ring`, their own records: :mod:`.ring_records`), the rosbag2
writer and its parameters (:mod:`.bag_writer`), the recorder process (:mod:`.bag_process`) and the
repair of a bag whose writer died (:mod:`.bag_repair`). The recorder *node* is in :mod:`legged_wbc.ros.stack`.

May import: the core and :mod:`legged_wbc.ros.io`.
"""
