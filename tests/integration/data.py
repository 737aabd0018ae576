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


ARROW = "spark.sql.execution.arrow.pyspark.enabled"
FALLBACK = "spark.sql.execution.arrow.pyspark.fallback.enabled"


def frame(spark, rows, schema: str):
    """``spark.createDataFrame(rows, schema)`` (a DDL string), its rows in order in as
    many partitions (``defaultParallelism``; sizes a row apart at most, the extra rows in
    the first ones, not the last), made through Arrow from pandas: Spark's JVM reads the
    rows, and no Python worker of the executors runs. ``createDataFrame`` from a Python
    list runs a Python stage on the executors at every action on the frame, in their
    default ``python3`` (the tests set no ``PYSPARK_PYTHON``), where pyspark's per-task
    ``importlib.invalidate_caches()`` rereads pyspark.zip's directory (~0.2 s of CPU a
    task): a tenth of the CPU of a module of fits (tests/integration/test_estimator.py),
    none of it sparktf's. Arrow is on for this call only (the frames sparktf makes and
    scores are as a user's), without its fallback to the Python path, so that a column
    kind Arrow cannot hold fails here."""
    import pandas as pd
    from pyspark.sql.types import _parse_datatype_string

    struct = _parse_datatype_string(schema)
    table = pd.DataFrame([tuple(r) for r in rows], columns=struct.fieldNames())
    before = {k: spark.conf.get(k, None) for k in (ARROW, FALLBACK)}
    spark.conf.set(ARROW, "true")
    spark.conf.set(FALLBACK, "false")
    try:
        return spark.createDataFrame(table, struct)
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
