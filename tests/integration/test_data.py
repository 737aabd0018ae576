"""The tests' own frames (data.frame) against Spark's: ``createDataFrame`` from the same
list is the oracle for their rows, values, partitions and what Spark computes per row."""

import pytest
from pyspark.sql import functions as F

from tests.integration import data


@pytest.mark.parametrize("n", [0, 1, 5, 3000])
def test_a_frame_is_createDataFrame_of_its_list(spark, n):
    """The same partitions, rows, NaNs and nulls, and the same ``spark_partition_id()`` and
    ``monotonically_increasing_id()`` of every row (sparktf numbers rows with it); the rows
    are read by a job, as from any frame not held on the driver, and a barrier stage runs
    on the frame's own partitions, as sparktf's fit does where Spark lets it (found by
    review: a union of one scan per partition made every fit shuffle its rows first)."""
    rows = [(float(i) if i % 4 else float("nan"), i if i % 3 else None,
             [float("nan"), None] if i == 1 else [float(i)], {"k": float(i)} if i % 2 else None)
            for i in range(n)]
    schema = "x double, i bigint, a array<double>, m map<string,double>"
    expected, made = spark.createDataFrame(rows, schema), data.frame(spark, rows, schema)
    assert made.schema == expected.schema
    sizes = [e.rdd.glom().map(len).collect() for e in (expected, made)]
    print(n, "rows: partitions of", *sizes)
    assert sizes[0] == sizes[1]
    seen = [repr(e.select("*", F.spark_partition_id(), F.monotonically_increasing_id())
                 .collect()) for e in (expected, made)]
    assert seen[0] == seen[1]
    if n:
        tracker, group = spark.sparkContext.statusTracker(), f"data-{n}"
        spark.sparkContext.setJobGroup(group, "collect")
        try:
            made.collect()
        finally:
            spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
        assert tracker.getJobIdsForGroup(group), "collect ran no job: a driver-side relation"
        barrier = made.rdd.barrier().mapPartitions(lambda part: [sum(1 for _ in part)])
        assert barrier.collect() == sizes[0]
