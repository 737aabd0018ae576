"""pyspark.ml stages: ``TFEstimator`` and ``TFModel``."""
