"""What ``TFEstimator.fit`` refuses before any job runs (``check``): settings that
contradict one another, and columns that cannot feed the model; each error says what was
wrong and how to fix it, in the house form (``Received: ...``)."""

from __future__ import annotations

import os

from pyspark.sql import DataFrame

from sparktf import tensorboard
from sparktf._driver import checks, sessions
from sparktf._driver import schema as schema_checks
from sparktf._driver.resources import TaskResources
from sparktf.errors import InvalidInputError
from sparktf.ml import runs
from sparktf.runtime import training


def check(est, dataset: DataFrame, features: list[str]) -> None:
    """What a fit refuses before any job runs: settings that contradict one another, and
    columns that cannot feed the model (``est``: the ``TFEstimator``)."""
    checks.framework_env(os.environ)  # before inputMode="parquet"'s copy, too
    if est.getModelFn() is None:
        raise InvalidInputError("TFEstimator needs modelFn: a callable hparams -> compiled "
                                "keras.Model. Received: modelFn=None")
    if est.getEvaluator() and not holds_out_rows(est):
        raise InvalidInputError("evaluator=True evaluates on held-out rows: set "
                                "validationFraction or validationCol as well. Received: "
                                "evaluator=True with no validation rows")
    training.file_callbacks.check(est.getCallbacks())
    if est.getRunId() is not None:
        runs.check_name(est.getRunId())
        if not est.isSet(est.modelDir):
            raise InvalidInputError(
                "runId names a folder under modelDir, where the run outlives this "
                f"driver: set modelDir as well. Received: runId={est.getRunId()!r} "
                "with modelDir unset")
    best = est.getKeepBest()
    if best is not None and best.startswith("val_") and not holds_out_rows(est):
        raise InvalidInputError(f"keepBest={best!r} is a validation value: set "
                                "validationFraction or validationCol as well")
    if best is not None and (est.getEvaluator() or est.getNumPs()):
        raise InvalidInputError(f"keepBest={best!r} works in the training loop of "
                                "numPs=0 without evaluator=True; unset one of them")
    if est.getTensorboard():
        tensorboard.check_available()
    resources = TaskResources.checked(est.getTaskCpus(), est.getTaskGpus())
    if resources is not None:  # inputMode="parquet" on a classic session: an RDD's stage
        resources.check_stage(est.getInputMode() != "parquet" or
                              sessions.is_connect(dataset.sparkSession))
    schema_checks.check_feedable(dataset.schema, features, "feature")
    labels = est.labelColumns()
    for label in labels:
        schema_checks.check_label(dataset.schema, label)
    _check_default_outputs(est, labels)
    if len(labels) > 1 and est.getClassWeight() is not None:
        raise InvalidInputError(
            "classWeight applies to a model with a single output (Keras's fit refuses "
            "class_weight with several outputs too): fold the class weights into a "
            f"weightCol. Received: classWeight={est.getClassWeight()}, labelCols={labels}")
    if est.isSet(est.validationCol) and est.getValidationFraction() > 0:
        raise InvalidInputError("Set either validationCol or validationFraction, not both. "
                                f"Received: validationCol={est.getValidationCol()!r}, "
                                f"validationFraction={est.getValidationFraction()}")
    if est.isSet(est.validationCol):
        schema_checks.check_validation_column(dataset.schema, est.getValidationCol())
    weight = est.getWeightColOrNone()
    if weight is not None:
        if est.getClassWeight() is not None:
            raise InvalidInputError(
                "Set either weightCol or classWeight, not both (Keras refuses "
                "sample_weight with class_weight too). Fold the class weights into the "
                f"weight column. Received: weightCol={weight!r}, "
                f"classWeight={est.getClassWeight()}")
        schema_checks.check_weight_column(dataset.schema, weight)
    if est.getMinWorkers() > est.getNumWorkers():
        raise InvalidInputError(
            "minWorkers is the fewest workers a relaunch may continue with: at most "
            f"numWorkers. Received: minWorkers={est.getMinWorkers()}, "
            f"numWorkers={est.getNumWorkers()}")
    if est.getBatchSize() < est.getNumWorkers():
        raise InvalidInputError(
            f"batchSize is the global batch, shared by the workers: it must be at least "
            f"numWorkers. Received: batchSize={est.getBatchSize()}, "
            f"numWorkers={est.getNumWorkers()}")

def _check_default_outputs(est, labels: list[str]) -> None:
    """Several outputs without outputMapping score to '<output>_<predictionCol>': a
    label column of that form could be overwritten, so it is refused."""
    suffix = "_" + est.getPredictionCol()
    clashing = [c for c in labels if c.endswith(suffix)] if len(labels) > 1 else []
    if clashing and not est.getOutputMapping():
        raise InvalidInputError(
            f"The label column '{clashing[0]}' could be the default output column of an "
            f"output named '{clashing[0][:-len(suffix)]}' (several outputs score to "
            f"'<output>{suffix}'). Rename the column, or set predictionCol or "
            f"outputMapping. Received: labelCols={labels}")


def holds_out_rows(est) -> bool:
    """Whether some rows are held out for validation (validationCol or a fraction)."""
    return est.isSet(est.validationCol) or est.getValidationFraction() > 0
