"""Any DataFrame trains: whatever chain of operations made it, the barrier stage runs.

Spark refuses barrier stages over some RDD chains (a union of coalesced frames, a
coalesce to the stage's own partition count) before any task starts; sparktf puts
a shuffle before the stage and never reports that as a lost executor.
"""

import logging

import pytest

import sparktf
from sparktf.ml import TFEstimator
from tests.integration import data, models

pytestmark = pytest.mark.timeout(600)


def _rows_per_task(args, ctx):
    return ctx.numRows


def _frames(spark, tmp_path):
    base = spark.range(0, 120, 1, 4).selectExpr("cast(id as double) as x")
    base.write.parquet(str(tmp_path / "scan"))  # 4 files: a file scan
    return {
        "union of coalesced": base.coalesce(1).union(base.coalesce(1)),
        "coalesce to the task count": base.coalesce(2),
        "limit": base.limit(60),
        "sample": base.sample(0.5, seed=3),
        "join": base.alias("l").join(base.alias("r"), "x"),
        "file scan": spark.read.parquet(str(tmp_path / "scan")),
    }


def test_run_takes_a_dataframe_made_by_any_chain(spark, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="sparktf")
    for name, df in _frames(spark, tmp_path).items():
        # one worker as well where a single input partition meets a single task
        for workers in (1, 2) if name in ("union of coalesced", "limit") else (2,):
            counts = sparktf.run(spark, _rows_per_task, None, numWorkers=workers, df=df)
            assert sum(counts) == df.count(), (name, workers, counts)
    assert "repartitions it into 2 partitions first" in caplog.text


def _union_of_coalesced(spark):
    X, y = data.linear_rows(300)
    df = spark.createDataFrame(data.rows(X, y), "features array<double>, label double")
    half = df.limit(150), df.subtract(df.limit(150))
    return half[0].coalesce(1).union(half[1].coalesce(1))


@pytest.mark.parametrize("workers,mode", [(1, "stream"), (2, "stream"), (2, "parquet")])
def test_fit_trains_on_a_union_of_coalesced_frames(spark, tmp_path, workers, mode):
    df = _union_of_coalesced(spark)
    model = TFEstimator(modelFn=models.linear, numWorkers=workers, epochs=2, batchSize=32,
                        learningRate=0.05, inputMode=mode,
                        modelDir=str(tmp_path / "m")).fit(df)
    history = model.getHistory()["loss"]
    assert len(history) == 2 and history[1] < history[0]
    assert model.transform(df).count() == 300


@pytest.mark.parametrize("mode,holdout", [("stream", False), ("stream", True),
                                          ("parquet", False)])
def test_a_fit_reads_an_uncached_input_once(spark, tmp_path, mode, holdout):
    """Every evaluation of the input's last step over the rows is counted (an accumulator in
    a UDF on top of a Parquet scan): the training stage (or the Parquet copy) reads it once,
    and the row checks ride on that pass; nothing else reads the input."""
    from pyspark.sql import functions as F

    X, y = data.linear_rows(300, seed=4)
    spark.createDataFrame(data.rows(X, y), "features array<double>, label double") \
        .repartition(3).write.parquet(str(tmp_path / "input"))
    reads = spark.sparkContext.accumulator(0)

    def counted(features):
        reads.add(1)
        return features

    counting = F.udf(counted, "array<double>")
    df = spark.read.parquet(str(tmp_path / "input")) \
        .withColumn("features", counting("features"))
    est = TFEstimator(modelFn=models.linear, numWorkers=2, epochs=1, batchSize=64,
                      inputMode=mode, modelDir=str(tmp_path / "m"),
                      validationFraction=0.2 if holdout else 0.0)
    est.fit(df)
    assert reads.value == len(X), f"the input was read {reads.value / len(X):g} times"


def test_shuffle_off_keeps_the_frames_order_through_the_added_shuffle(spark):
    """Issue 32: the repartition sparktf adds (a coalesce(1) frame cannot feed a barrier
    stage) delivered the rows in an order that changed between runs: shuffle=False must
    mean the frame's order, and the same fit the same history, equal to Keras's own."""
    import numpy as np

    rng = np.random.default_rng(5)
    x = rng.normal(size=(120, 4)).astype(np.float32)
    y = (x @ np.array([2.0, -3.0, 0.5, 1.0], np.float32) + 1.0).astype(np.float32)
    rows = [(float(y[i]), x[i].tolist()) for i in range(120)]
    df = spark.createDataFrame(rows, "label double, features array<float>").repartition(
        3).sortWithinPartitions("label").coalesce(1)
    ordered = df.collect()  # the frame's own order
    hp = {"width": 4}
    histories = [TFEstimator(modelFn=models.linear, hyperParams=hp, learningRate=0.05,
                             numWorkers=1, epochs=2, batchSize=86, shuffle=False,
                             seed=1).fit(df).getHistory() for _ in range(3)]
    keras_x = np.array([r.features for r in ordered], np.float32)
    keras_y = np.array([r.label for r in ordered], np.float32)
    expected = models.linear({**hp, "learningRate": 0.05}).fit(
        keras_x, keras_y, batch_size=86, epochs=2, shuffle=False, verbose=0).history
    for history in histories:
        np.testing.assert_allclose(history["loss"], expected["loss"], rtol=1e-5)


def test_the_added_shuffle_makes_every_task_even_with_fewer_rows_than_tasks(spark):
    """A range partitioning of one row made one partition for a 2-task barrier stage
    ("2 roles but 1 addresses"): the shuffle must give the stage all its tasks."""
    df = spark.createDataFrame([(1.0,)], "x double").coalesce(1)
    assert sorted(sparktf.run(spark, _rows_per_task, None, numWorkers=2, df=df)) == [0, 1]
