"""sparktf: distributed TensorFlow training and inference as ordinary pyspark.ml stages.

The public surface: ``sparktf.run`` runs a TensorFlow program on a cluster formed
inside one Spark barrier stage and hands each task a ``TaskContext``;
``sparktf.ml`` holds the ``TFEstimator`` / ``TFModel`` stages; the errors below;
``sparktf.tensorboard`` (the fits' TensorBoard server). Everything under
``sparktf._driver``, ``sparktf._protocol`` and ``sparktf.runtime`` is internal
(see ARCHITECTURE.md). Importing sparktf does not import TensorFlow, nor, until
``run`` or ``TaskContext`` is first used, PySpark's ML and SQL modules: every executor
process imports this package on its way to ``sparktf.runtime`` (a task's Python worker,
each spare before its TensorFlow import), where ``pyspark.ml`` would cost half a second
on the cold path.
"""

import importlib

from sparktf.errors import (
                            ClusterCapacityError,
                            ClusterFormationError,
                            ExecutorEnvironmentError,
                            ExecutorLostError,
                            InvalidInputError,
                            JobTimeoutError,
                            SparkTFError,
                            TaskFailedError,
                            TaskStalledError,
)

__version__ = "0.1.0"

_LAZY = {"run": "sparktf._driver.launch", "TaskContext": "sparktf.runtime.process.context"}


def __getattr__(name: str):
    """``run`` and ``TaskContext``, imported when first used (PEP 562)."""
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'sparktf' has no attribute {name!r}")

__all__ = ["run", "TaskContext", "SparkTFError", "InvalidInputError", "ClusterCapacityError",
           "ExecutorEnvironmentError", "ExecutorLostError", "JobTimeoutError",
           "ClusterFormationError", "TaskFailedError", "TaskStalledError", "__version__"]
