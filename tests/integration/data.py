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
BATCH_ROWS = "spark.sql.execution.arrow.maxRecordsPerBatch"


def frame(spark, rows, schema: str):
    """``spark.createDataFrame(rows, schema)`` (a DDL string): the same rows, values (a NaN
    stays a NaN, a None a null) and partitions (``_sizes``), made in Spark's JVM from one
    Arrow table of a record batch per partition, so that no Python worker of the executors
    runs. ``createDataFrame`` from a Python list runs a Python stage on the executors at
    every action on the frame, in their default ``python3`` (the tests set no
    ``PYSPARK_PYTHON``), where pyspark's per-task ``importlib.invalidate_caches()`` rereads
    pyspark.zip's directory (~0.2 s of CPU a task): a tenth of the CPU of a module of fits
    (tests/integration/test_estimator.py), none of it sparktf's.

    The frame is one scan of an RDD of those partitions, as a frame from a list is: not the
    driver-side ``LocalRelation`` that small Arrow data becomes (on one, ``collect`` starts
    no job and the optimizer evaluates ``spark_partition_id()`` and
    ``monotonically_increasing_id()`` as if every row were in partition 0), and not a union
    of scans (a barrier stage refuses one, and sparktf's fit would shuffle the rows first).
    Arrow sends no empty batch: where a partition would be empty (fewer rows than
    partitions), and on pyspark 3.5 (no frame from an Arrow table), this is
    ``createDataFrame`` itself. Rows are converted by pyarrow: looser than
    ``createDataFrame`` (1.5 into a bigint is 1), and a naive datetime is taken as UTC."""
    import pyarrow as pa
    import pyspark
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import _parse_datatype_string

    rows = [tuple(r) for r in rows]
    sizes = _sizes(len(rows), spark.sparkContext.defaultParallelism)
    if int(pyspark.__version__.split(".")[0]) < 4 or 0 in sizes:
        return spark.createDataFrame(rows, schema)
    struct = _parse_datatype_string(schema)
    arrow = to_arrow_schema(struct)
    batches, start = [], 0
    for size in sizes:
        part = rows[start:start + size]
        start += size
        batches.append(pa.RecordBatch.from_arrays(
            [pa.array([r[j] for r in part], type=field.type) for j, field in enumerate(arrow)],
            schema=arrow))
    settings = {LOCAL_RELATION: "0", BATCH_ROWS: str(max(sizes))}  # an RDD, a batch a part
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        return spark.createDataFrame(pa.Table.from_batches(batches, schema=arrow), struct)
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


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
