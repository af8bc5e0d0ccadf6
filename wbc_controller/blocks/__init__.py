"""The controller's QP, one module per paper concept (docs/design.md, *Whole-body controller*).

Each module holds the concept's compiled kernel(s) (numba, writing into preallocated arrays; the
fast cycle of :mod:`wbc_controller.kernels` calls them) and its plain numpy reference (the
specification: :class:`wbc_controller.oracle.ReferenceController` is made of these references,
and the tests compare kernel and reference to a few ulps of each quantity's scale):

* :mod:`.floating_base`: model quantities (``M``, ``h``, ``R``) and the 6 floating-base rows;
* :mod:`.contact`: the contact rows (``m_theta = 0``, force sums) and the contact state (``f_z``
  bounds);
* :mod:`.friction`: the friction pyramids;
* :mod:`.torque`: the final-torque rows and the command torque;
* :mod:`.cbf`: the relative-pitch control-barrier rows;
* :mod:`.joint_limits`, :mod:`.leg_collision`: joint-limit and leg-collision barrier rows (options);
* :mod:`.tasks`: body reference, body task, leg task targets and the cost;
* :mod:`.swing`: swing paths, swing starts, swing PD torques;
* :mod:`.compensation`: the null-space disturbance compensation.

Kernels take their settings as one named object ``par`` (fields read by name): the controller's
workspace record in the fast cycle, or :class:`wbc_controller.kernels.Params` (a named tuple built
from the configuration, :func:`wbc_controller.kernels.make_params`) anywhere else; the legs'
kinematics as :class:`legged_wbc.kinematics.LegBatch`.
"""
