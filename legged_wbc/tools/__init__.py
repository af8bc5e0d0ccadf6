"""Tools on top of the core, in rooms by what they do (none imports rclpy at module level):

* :mod:`.analysis` - runs and bags: metrics, series, ``compare`` reports, model checks, the estimator's
  evaluation;
* :mod:`.experiments` - the paper's experiment through the ROS stack, recordings, randomized sweeps;
* :mod:`.bench` - the cycle and real-time benchmarks, the slow-CPU emulation, the kernels' warm-up;
* :mod:`.pictures` - rendered frames, scenes and overlays;
* :mod:`.site` - the manual as a site: generated pages (API reference, parameter tables), the build.

Rooms import downwards only: ``analysis`` < ``experiments`` < ``pictures``, ``analysis`` < ``bench``
(test ``test_layers``). The flat module names of before (``legged_wbc.tools.compare``, ...) still
import, as aliases (:mod:`legged_wbc.moved`).
"""

from legged_wbc.moved import alias as _alias

_alias(__name__, {
    **{m: f"analysis.{m}" for m in ("compare", "compare_actuators", "bag_files", "bag_metrics", "bag_series",
                                     "run_data", "checks", "eval_estimator")},
    **{m: f"experiments.{m}" for m in ("experiment", "recording", "sweep", "sweep_plan", "sweep_report",
                                        "sweep_stats", "sweep_task")},
    **{m: f"bench.{m}" for m in ("bench_cycle", "bench_realtime", "slow_cpu", "warmup")},
    **{m: f"pictures.{m}" for m in ("render", "scene_render", "overlays")},
})
