"""sparktf: distributed TensorFlow training and inference as ordinary pyspark.ml stages.

``sparktf.run`` runs a TensorFlow program on a cluster formed inside one Spark
barrier stage; ``sparktf.ml`` holds the ``TFEstimator`` / ``TFModel`` stages.
Importing sparktf does not import TensorFlow.
"""

from sparktf.errors import (ClusterCapacityError, ClusterFormationError,
                            ExecutorEnvironmentError, ExecutorLostError, InvalidInputError,
                            JobTimeoutError,
                            SparkTFError, TaskFailedError, TaskStalledError)
from sparktf._driver.launch import run

__version__ = "0.1.0"

__all__ = ["run", "SparkTFError", "InvalidInputError", "ClusterCapacityError",
           "ExecutorEnvironmentError", "ExecutorLostError", "JobTimeoutError",
           "ClusterFormationError",
           "TaskFailedError", "TaskStalledError", "__version__"]
