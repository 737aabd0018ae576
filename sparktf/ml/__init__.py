"""pyspark.ml stages: ``TFEstimator`` trains, ``TFModel`` scores."""

from sparktf.ml.estimator import TFEstimator
from sparktf.ml.model import TFModel

__all__ = ["TFEstimator", "TFModel"]
