"""Data sets the integration tests generate or load from installed packages."""

import numpy as np

COEFFICIENTS = np.array([2.0, -3.0, 0.5])
INTERCEPT = 1.0


def digits_split():
    """scikit-learn's digits (shipped with the package), scaled, 75/25 split."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).astype("float32")
    return train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)


def linear_rows(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = X @ COEFFICIENTS + INTERCEPT
    return X, y


def rows(X, y):
    return [([float(v) for v in x], float(t)) for x, t in zip(X, y)]


LOCAL_RELATION = "spark.sql.execution.arrow.localRelationThreshold"


def frame(spark, rows, schema: str):
    """``spark.createDataFrame(rows, schema)`` (a DDL string): the same rows, values (a NaN
    stays a NaN, a None a null) and partitions (``_sizes``), made in Spark's JVM from Arrow
    record batches, one per partition, so that no Python worker of the executors runs.
    ``createDataFrame`` from a Python list runs a Python stage on the executors at every
    action on the frame, in their default ``python3`` (the tests set no ``PYSPARK_PYTHON``),
    where pyspark's per-task ``importlib.invalidate_caches()`` rereads pyspark.zip's
    directory (~0.2 s of CPU a task): a tenth of the CPU of a module of fits
    (tests/integration/test_estimator.py), none of it sparktf's.

    The frame is a union of RDD scans, as a frame from a list or a file is, not the
    driver-side ``LocalRelation`` that small Arrow data becomes: on one, ``collect`` starts
    no job and the optimizer evaluates ``spark_partition_id()`` and
    ``monotonically_increasing_id()`` as if every row were in partition 0. pyspark 3.5
    makes no frame from an Arrow table: there, and for no rows, this is ``createDataFrame``
    itself."""
    import functools

    import pyarrow as pa
    import pyspark
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import _parse_datatype_string

    rows = [tuple(r) for r in rows]
    if int(pyspark.__version__.split(".")[0]) < 4 or not rows:  # (a union of empty
        return spark.createDataFrame(rows, schema)  # scans runs one: its partitions go)
    struct = _parse_datatype_string(schema)
    arrow = to_arrow_schema(struct)
    before = spark.conf.get(LOCAL_RELATION, None)
    spark.conf.set(LOCAL_RELATION, "0")  # an RDD however small
    pieces, start = [], 0
    try:
        for p, size in enumerate(_sizes(len(rows), spark.sparkContext.defaultParallelism)):
            part = rows[start:start + size]
            start += size
            if part:
                pieces.append(spark.createDataFrame(pa.Table.from_arrays(
                    [pa.array([r[j] for r in part], type=field.type)
                     for j, field in enumerate(arrow)], schema=arrow), struct))
            else:  # Arrow sends no empty batch: an empty partition of a range (one of
                # its own: a union of identical empty plans runs one of them)
                pieces.append(spark.range(p, p + 1, 1, 1).where(F.col("id") < p).select(
                    *[F.lit(None).cast(f.dataType).alias(f.name) for f in struct]))
    finally:
        if before is None:
            spark.conf.unset(LOCAL_RELATION)
        else:
            spark.conf.set(LOCAL_RELATION, before)
    return functools.reduce(lambda a, b: a.union(b), pieces)


def _sizes(n: int, slices: int) -> list[int]:
    """The partition sizes of ``createDataFrame`` from a list of ``n`` rows: pyspark's
    ``parallelize`` pickles them in batches of ``max(1, min(n // slices, 1024))`` rows, and
    the JVM slices the list of batches into ``slices`` partitions (batch ``b`` of ``m`` in
    partition ``p`` where ``p * m // slices <= b < (p + 1) * m // slices``): 1 row gives
    [0, 1] on 2 partitions, 5 give [2, 3], 3,000 give [1024, 1976]."""
    batch = max(1, min(n // slices, 1024))
    batches = [min(batch, n - b) for b in range(0, n, batch)]
    m = len(batches)
    return [sum(batches[p * m // slices:(p + 1) * m // slices]) for p in range(slices)]
