"""Bad input is refused early (before any barrier stage where possible) and clearly."""

import math
import os
import stat

import pytest
from pyspark.ml.linalg import Vectors

import sparktf
from sparktf.ml import TFEstimator, TFModel, fit_checks
from tests.integration import models

pytestmark = pytest.mark.timeout(300)


def uncompiled(hparams):
    import keras
    return keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])


def not_a_model(hparams):
    return "a string"


def accumulating(hparams):
    """Accumulation with an optimizer's moving average: not under a strategy."""
    import keras
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1, gradient_accumulation_steps=2,
                                                 use_ema=True),
                  loss="mse")
    return model


def _est(**kw):
    base = dict(modelFn=models.linear, hyperParams={"width": 2}, numWorkers=2, epochs=1)
    return TFEstimator(**{**base, **kw})


def _stages(spark):
    return len(spark.sparkContext.statusTracker().getActiveStageIds())


@pytest.mark.parametrize("ddl,rows,fragment", [
    ("features array<double>, label double", [([1.0, 2.0], None)],
     "Column 'label' has 1 null value"),
    ("features array<double>, label double", [(None, 1.0)], "Column 'features' has 1 null"),
    ("features array<double>, label double", [([1.0, 2.0], math.nan)],
     "'label' has 1 NaN or infinite"),
    ("features array<double>, label double", [([1.0, 2.0], math.inf)], "NaN or infinite"),
    ("features string, label double", [("a", 1.0)],
     r"Column 'features' \(Spark type string\) cannot feed the model: input '.*' declares "
     r"dtype float32 and shape \(2,\)"),
    ("features map<string, double>, label double", [({"a": 1.0}, 1.0)],
     "'features' has type map<string,double>"),
    ("features struct<a:double>, label double", [((1.0,), 1.0)],
     "'features' has type struct<a:double>"),
])
def test_bad_columns_and_values_are_refused_on_the_driver(spark, ddl, rows, fragment):
    df = spark.createDataFrame(rows, ddl)
    with pytest.raises(sparktf.InvalidInputError, match=fragment):
        _est().fit(df)


def test_missing_column_and_empty_dataframe(spark):
    df = spark.createDataFrame([([1.0, 2.0], 1.0)], "x array<double>, label double")
    with pytest.raises(sparktf.InvalidInputError, match="The DataFrame has no 'features' "
                                                        "column and inputCols is not set"):
        _est().fit(df)
    with pytest.raises(sparktf.InvalidInputError, match="'features' is not in the DataFrame"):
        _est(featuresCol="features").fit(df)
    empty = spark.createDataFrame([], "features array<double>, label double")
    with pytest.raises(sparktf.InvalidInputError, match="has no rows"):
        _est().fit(empty)


def test_every_kind_of_empty_frame_is_refused_as_empty(spark, tmp_path):
    """Spark plans a frame it knows to be empty (filter(false), limit(0)) with no partition
    at all, so the barrier stage starts no task: still the empty frame's error, not a lost
    event channel, on 1 and 2 workers, in both input modes, and through the tuners."""
    from pyspark.ml.evaluation import RegressionEvaluator
    from pyspark.ml.tuning import CrossValidator, ParamGridBuilder

    from sparktf.ml.tuning import HalvingSearch

    df = spark.createDataFrame([([1.0, 2.0], 1.0)] * 8, "features array<double>, label double")
    frames = {"createDataFrame([])": spark.createDataFrame([], df.schema),
              "filter(false)": df.filter("false"), "limit(0)": df.limit(0)}
    # a frame planned with no partition is refused at once; one with empty partitions
    # (createDataFrame([]) kept as it is on 2 workers: the test above) by its tasks
    cases = [(1, "createDataFrame([])", "stream"), (1, "filter(false)", "parquet"),
             (2, "filter(false)", "stream"), (1, "limit(0)", "stream"),
             (2, "limit(0)", "parquet")]
    for workers, name, mode in cases:
        with pytest.raises(sparktf.InvalidInputError, match="has no rows"):
            _est(numWorkers=workers, inputMode=mode,
                 modelDir=str(tmp_path / f"{workers}{mode}")).fit(frames[name])

    def main(args, ctx):
        return ctx.numRows

    frames["two empty partitions"] = spark.createDataFrame(spark.sparkContext.parallelize(
        [], 2), df.schema)
    for workers, name in [(1, "filter(false)"), (2, "limit(0)"), (2, "two empty partitions")]:
        # sparktf.run too, whether Spark planned partitions or not
        with pytest.raises(sparktf.InvalidInputError, match="given to sparktf.run has no rows"):
            sparktf.run(spark, main, numWorkers=workers, df=frames[name])
    est = _est(numWorkers=1, validationFraction=0.25)
    grid = ParamGridBuilder().addGrid(est.learningRate, [0.1, 0.01]).build()
    with pytest.raises(sparktf.InvalidInputError, match="has no rows"):
        HalvingSearch(estimator=est, estimatorParamMaps=grid).fit(frames["filter(false)"])
    with pytest.raises(sparktf.InvalidInputError, match="has no rows"):
        CrossValidator(estimator=_est(numWorkers=1), estimatorParamMaps=grid, numFolds=2,
                       evaluator=RegressionEvaluator()).fit(frames["limit(0)"])


def test_arrays_longer_than_the_input_fail_with_the_column_named(spark):
    """Shorter rows are padded (pad_sequences, post); a longer one is never truncated."""
    df = spark.createDataFrame([([1.0, 2.0], 1.0), ([1.0], 0.0), ([1.0, 2.0, 3.0], 0.0)],
                               "features array<double>, label double").repartition(1)
    with pytest.raises(sparktf.InvalidInputError, match="'features' has a row of length 3, "
                                                        "longer than the model input's "
                                                        "declared length 2"):
        _est(numWorkers=1).fit(df)
    _est(numWorkers=1).fit(df.where("size(features) <= 2"))


def test_class_labels_outside_the_model_outputs(spark):
    rows = [([0.1] * 64, 12)] * 20
    df = spark.createDataFrame(rows, "features array<double>, label long")
    est = TFEstimator(modelFn=models.digits_mlp, numWorkers=2, epochs=1)
    with pytest.raises(sparktf.TaskFailedError,
                       match=r"values from 12 to 12, but the model has 10 output classes"):
        est.fit(df)


@pytest.mark.parametrize("fn,fragment", [
    (uncompiled, "not compiled"), (not_a_model, "compiled keras.Model"),
    (accumulating, r"gradient_accumulation_steps=2 with use_ema=True.* set batchSize")])
def test_model_fn_must_return_a_compiled_keras_model(spark, fn, fragment):
    df = spark.createDataFrame([([1.0, 2.0], 1.0)] * 8, "features array<double>, label double")
    with pytest.raises(sparktf.TaskFailedError, match=fragment):
        _est(modelFn=fn).fit(df)


def test_unwritable_model_dir_is_refused_before_training(spark, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    os.chmod(locked, stat.S_IRUSR | stat.S_IXUSR)
    df = spark.createDataFrame([([1.0, 2.0], 1.0)], "features array<double>, label double")
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("running as a user that can write anywhere")
        with pytest.raises(sparktf.InvalidInputError, match="modelDir is not writable"):
            _est(modelDir=str(locked / "m")).fit(df)
    finally:
        os.chmod(locked, stat.S_IRWXU)


def test_a_file_where_model_dir_should_be_is_refused(spark, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    df = spark.createDataFrame([([1.0, 2.0], 1.0)], "features array<double>, label double")
    with pytest.raises(sparktf.InvalidInputError, match="modelDir is not writable"):
        _est(modelDir=str(blocker / "m")).fit(df)


def test_bad_counts_and_slots(spark):
    with pytest.raises(sparktf.InvalidInputError, match="numWorkers must be >= 1"):
        _est(numWorkers=0)
    df = spark.createDataFrame([([1.0, 2.0], 1.0)], "features array<double>, label double")
    with pytest.raises(sparktf.ClusterCapacityError, match="needs 3 concurrent task slots"):
        _est(numWorkers=3).fit(df)
    with pytest.raises(sparktf.InvalidInputError, match="minWorkers must be >= 1"):
        _est(minWorkers=0)
    # minWorkers only lets a relaunch continue with fewer: the first attempt takes all
    with pytest.raises(sparktf.ClusterCapacityError, match="needs 3 concurrent task slots"):
        _est(numWorkers=3, minWorkers=1).fit(df)
    with pytest.raises(sparktf.InvalidInputError, match="minWorkers=3, numWorkers=2"):
        _est(numWorkers=2, minWorkers=3).fit(df)
    assert _est(numWorkers=2).getMinWorkers() == 2  # unset: numWorkers


def test_sparse_vector_features_of_one_size_are_accepted(spark):
    df = spark.createDataFrame([(Vectors.sparse(2, [0], [1.0]), 1.0),
                                (Vectors.dense([0.0, 1.0]), 0.0)] * 10, ["features", "label"])
    assert len(_est(epochs=2).fit(df).getHistory()["loss"]) == 2


def test_scoring_with_a_missing_savedmodel_is_refused(spark, tmp_path):
    df = spark.createDataFrame([([1.0, 2.0],)], "features array<double>")
    with pytest.raises(sparktf.InvalidInputError, match="No SavedModel at modelPath"):
        TFModel(modelPath=str(tmp_path / "nothing")).transform(df)


def test_parameter_servers_count_against_the_slots_too(spark):
    # 2 workers + the chief + 1 parameter server on a cluster of 2 slots
    with pytest.raises(sparktf.ClusterCapacityError, match="needs 4 concurrent task slots"):
        sparktf.run(spark, lambda a, c: None, numWorkers=2, numPs=1)


def test_an_unpicklable_model_fn_is_refused_before_any_job(spark):
    import threading
    lock = threading.Lock()

    def build(hparams):
        with lock:
            return models.linear(hparams)

    df = spark.createDataFrame([([1.0, 2.0], 1.0)], "features array<double>, label double")
    with pytest.raises(sparktf.InvalidInputError, match="picklable"):
        _est(modelFn=build).fit(df)


def test_cpu_fallback_is_logged(spark, caplog):
    import logging
    caplog.set_level(logging.INFO, logger="sparktf")
    sparktf.run(spark, lambda a, c: None, numWorkers=1)
    assert any("runs on CPU: Spark schedules no GPUs" in r.getMessage()
               for r in caplog.records)


@pytest.mark.parametrize("ddl,rows,kw,fragment", [
    ("features array<double>, label double, w double", [([1.0, 2.0], 1.0, -1.0)],
     {"weightCol": "w"}, "'w' has 1 negative, NaN or infinite"),
    ("features array<double>, label double, w double", [([1.0, 2.0], 1.0, math.nan)],
     {"weightCol": "w"}, "'w' has 1 negative, NaN or infinite"),
    ("features array<double>, label double, w double", [([1.0, 2.0], 1.0, None)],
     {"weightCol": "w"}, "Column 'w' has 1 null"),
    ("features array<double>, label double, w string", [([1.0, 2.0], 1.0, "a")],
     {"weightCol": "w"}, "'w' has type string"),
    ("features array<double>, label double, w array<double>", [([1.0, 2.0], 1.0, [1.0])],
     {"weightCol": "w"}, "must hold one number per row"),
    ("features array<double>, label double, w double", [([1.0, 2.0], 1.0, 1.0)],
     {"weightCol": "nope"}, "weight column 'nope' is not in the DataFrame"),
    ("features array<double>, label double, w double", [([1.0, 2.0], 1.0, 1.0)],
     {"weightCol": "w", "classWeight": {0: 1.0}}, "either weightCol or classWeight"),
    ("features array<double>, label double", [([1.0, 2.0], 1.0)],
     {"batchSize": 1}, "batchSize is the global batch"),
    # found by review: a null flag was taken as a training row, silently
    ("features array<double>, label double, v boolean",
     [([1.0, 2.0], 1.0, True), ([1.0, 2.0], 1.0, False), ([1.0, 2.0], 1.0, None)],
     {"validationCol": "v"}, r"validationCol='v' is null in 1 row\(s\)"),
    # second review: 'train'/'valid' strings were cast to null (a misleading message)
    ("features array<double>, label double, v string", [([1.0, 2.0], 1.0, "valid")],
     {"validationCol": "v"}, "validation column 'v' has type string; it must be boolean"),
])
def test_bad_weights_are_refused_on_the_driver(spark, ddl, rows, kw, fragment):
    df = spark.createDataFrame(rows, ddl)
    with pytest.raises(sparktf.InvalidInputError, match=fragment):
        _est(**kw).fit(df)


@pytest.mark.parametrize("value,fragment", [
    ({}, "non-empty dict"), ([1.0], "non-empty dict"), ({"a": 1.0}, "class indices"),
    ({-1: 1.0}, "class indices"), ({0: -2.0}, "finite numbers >= 0"),
    ({0: math.inf}, "finite numbers >= 0"), ({0.5: 1.0}, "class indices"),
])
def test_bad_class_weights_are_refused_when_set(value, fragment):
    with pytest.raises(sparktf.InvalidInputError, match=fragment):
        TFEstimator(classWeight=value)
    assert TFEstimator(classWeight={"1": 2, 0: 0.5}).getClassWeight() == {1: 2.0, 0: 0.5}


def test_what_keras_refuses_with_several_outputs_is_refused_before_any_job(spark):
    df = spark.createDataFrame([([1.0, 2.0], 1.0, 0)], "features array<double>, a double, b int")
    jobs = spark.sparkContext.statusTracker().getJobIdsForGroup()
    with pytest.raises(sparktf.InvalidInputError, match="classWeight applies to a model with a "
                                                        "single output"):
        _est(labelCols=["a", "b"], classWeight={0: 1.0, 1: 2.0}).fit(df)
    with pytest.raises(sparktf.InvalidInputError, match="labelCols must be a non-empty list"):
        _est(labelCols="a")
    with pytest.raises(sparktf.InvalidInputError, match="label column 'c' is not in"):
        _est(labelCols=["a", "c"]).fit(df)
    clashing = df.withColumnRenamed("b", "a_prediction")  # a default output column's name
    with pytest.raises(sparktf.InvalidInputError, match="'a_prediction' could be the default "
                                                        "output column"):
        _est(labelCols=["a", "a_prediction"]).fit(clashing)
    fit_checks.check(_est(labelCols=["a", "a_prediction"], predictionCol="hat"),
                     clashing, ["features"])  # another predictionCol, or an outputMapping
    fit_checks.check(_est(labelCols=["a", "a_prediction"], outputMapping={"x": "y"}),
                     clashing, ["features"])
    assert spark.sparkContext.statusTracker().getJobIdsForGroup() == jobs


@pytest.mark.parametrize("mode", ["stream", "parquet"])
def test_a_dataframe_whose_own_plan_fails_is_reported_with_sparks_reason(spark, mode):
    """Found by the second review: a cast that fails in the frame's plan (ANSI mode) was
    reported as "failed before any task reported an error. Spark said: An error occurred
    while calling o212.collectToPython", or as an empty DataFrame."""
    from pyspark.sql import functions as F
    rows = [([1.0, 2.0], "1.5")] * 7 + [([1.0, 2.0], "abc")]
    df = spark.createDataFrame(rows, "features array<double>, s string").repartition(2)
    with pytest.raises(sparktf.InvalidInputError,
                       match=r"Spark could not compute the DataFrame given to TFEstimator.fit"
                             r".*\[CAST_INVALID_INPUT\] The value 'abc'"):
        _est(inputMode=mode).fit(df.withColumn("label", F.col("s").cast("double")))


def test_a_file_deleted_under_a_parquet_mode_fit_is_named(spark, tmp_path):
    """Found by the third review: a file of the frame deleted after it was read raised a
    bare FileNotFoundError in parquet mode (stream mode names Spark's reason)."""
    spark.createDataFrame([([1.0, 2.0], 1.0)] * 8, "features array<double>, label double") \
        .repartition(2).write.parquet(str(tmp_path / "p"))
    df = spark.read.parquet(str(tmp_path / "p"))
    os.remove(sorted(f for f in df.inputFiles())[0].replace("file://", ""))
    with pytest.raises(sparktf.InvalidInputError, match="A file of the DataFrame given to "
                                                        "fit is gone: .*part-"):
        _est(inputMode="parquet").fit(df)
