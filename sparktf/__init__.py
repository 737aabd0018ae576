"""sparktf: distributed TensorFlow training and inference as ordinary pyspark.ml stages.

The public surface: ``sparktf.run`` runs a TensorFlow program on a cluster formed
inside one Spark barrier stage and hands each task a ``TaskContext``;
``sparktf.ml`` holds the ``TFEstimator`` / ``TFModel`` stages; the errors below;
``sparktf.tensorboard`` (the fits' TensorBoard server). Everything under
``sparktf._driver``, ``sparktf._protocol`` and ``sparktf._executor`` is internal
(see ARCHITECTURE.md). Importing sparktf does not import TensorFlow.
"""

from sparktf._driver.launch import run
from sparktf._executor.context import TaskContext
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

__all__ = ["run", "TaskContext", "SparkTFError", "InvalidInputError", "ClusterCapacityError",
           "ExecutorEnvironmentError", "ExecutorLostError", "JobTimeoutError",
           "ClusterFormationError", "TaskFailedError", "TaskStalledError", "__version__"]
