"""The kinds of fitted model that MLflow, CrossValidator and persistence are tested with
besides the single-output numeric one: several outputs, string inputs fed by name, and
VectorAssembler features (dense and sparse vectors). Tiny frames, one epoch."""

from __future__ import annotations

import dataclasses

from pyspark.ml.evaluation import RegressionEvaluator
from pyspark.ml.feature import VectorAssembler

from sparktf.ml import TFEstimator
from tests.integration import data, data_kinds, models


@dataclasses.dataclass(frozen=True)
class ModelKind:
    name: str
    params: dict  # TFEstimator Params besides workers, epochs and batch
    inputs: tuple  # the columns the model reads (what a pyfunc is given)
    outputs: tuple  # the columns transform adds, in order
    label: str  # the label an evaluator compares with ``prediction``
    prediction: str


KINDS = {kind.name: kind for kind in [
    ModelKind("two outputs", {"modelFn": data_kinds.two_outputs, "featuresCol": "features",
                              "labelCols": ["price", "dear"]},
              ("features",), ("dear_prediction", "price_prediction"), "price",
              "price_prediction"),
    ModelKind("strings", {"modelFn": data_kinds.structured, "labelCol": "label"},
              ("city", "rooms", "area"), ("prediction",), "label", "prediction"),
    ModelKind("assembled", {"modelFn": models.linear, "featuresCol": "features"},
              ("features",), ("prediction",), "label", "prediction"),
]}


def frame(spark, kind: ModelKind, rows: int = 48):
    """A small frame holding the kind's inputs and labels."""
    if kind.name == "assembled":
        X, y = data.linear_rows(rows, seed=4)
        X[::4] = 0.0  # VectorAssembler gives all-zero rows as SparseVectors
        df = data.frame(spark, [(*map(float, x), float(t)) for x, t in zip(X, y)],
                        "a double, b double, c double, label double")
        return VectorAssembler(inputCols=["a", "b", "c"], outputCol="features").transform(df)
    source = next(k for k in data_kinds.KINDS if k.model_fn is kind.params["modelFn"])
    spark_rows, *_ = data_kinds.data(source, rows)
    return data.frame(spark, spark_rows, source.schema)


def estimator(kind: ModelKind, **params) -> TFEstimator:
    return TFEstimator(**{**kind.params, "numWorkers": 2, "epochs": 1, "batchSize": 8,
                          "learningRate": 0.05, "verbose": 0, **params})


def evaluator(kind: ModelKind) -> RegressionEvaluator:
    return RegressionEvaluator(labelCol=kind.label, predictionCol=kind.prediction)
