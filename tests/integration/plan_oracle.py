"""Keras as the oracle for any step plan: the global batches sparktf trains on, rebuilt
from the step plan (docs/guide/training.md), trained by Keras's own ``fit``.

Synchronous data-parallel training over several workers equals Keras's ``fit`` over
the same global batches in the same order. The step plan (``shards.step_rows``, the guide
"How rows become steps") says which rows make each global step; ``PlannedBatches``
gives Keras exactly those batches, so every history value can be compared at float
precision for any row count, batch size, worker count and partition sizes.
"""

from __future__ import annotations

import numpy as np

from sparktf.runtime.feed import shards


def global_batches(worker_rows: list[np.ndarray], batch: int) -> list[np.ndarray]:
    """The row indices of each global step: every worker's slice of the step, in rank
    order. ``worker_rows``: each worker's training rows (indices), in the order it feeds
    them (its partition's order, ``shuffle=False``)."""
    plan = shards.step_rows([len(r) for r in worker_rows], batch)
    used = np.concatenate([np.zeros((len(worker_rows), 1), np.int64),
                           np.cumsum(plan, axis=1)], axis=1)
    return [np.concatenate([rows[used[w, k]:used[w, k + 1]]
                            for w, rows in enumerate(worker_rows)]).astype(np.int64)
            for k in range(plan.shape[1])]


def planned_batches(x, y, steps: list[np.ndarray], weights=None):
    """A ``keras.utils.PyDataset`` of the given global steps (x, y: arrays, or tuples or
    dicts of arrays for several inputs or outputs)."""
    import keras

    def take(values, index):
        if isinstance(values, dict):
            return {k: v[index] for k, v in values.items()}
        if isinstance(values, (tuple, list)):
            return tuple(v[index] for v in values)
        return values[index]

    class PlannedBatches(keras.utils.PyDataset):
        def __len__(self):
            return len(steps)

        def __getitem__(self, k):
            batch = (take(x, steps[k]), take(y, steps[k]))
            return batch if weights is None else (*batch, take(weights, steps[k]))

    return PlannedBatches()


def consecutive_steps(parts: list[int], batch: int) -> list[np.ndarray]:
    """The global steps of rows 0..n-1 held by the workers in consecutive runs of
    ``parts`` rows (an ``identity_partitioned`` frame, ``shuffle=False``)."""
    bounds = np.cumsum([0, *parts])
    return global_batches([np.arange(a, b) for a, b in zip(bounds[:-1], bounds[1:])], batch)


def keras_fit(model_fn, hparams: dict, x, y, steps, epochs: int, weights=None,
              validation_steps=None):
    """(model, history): Keras's own ``fit`` over the planned global ``steps``; with
    ``validation_steps`` (the held-out rows' global steps, from their own plan), those
    rows are evaluated after each epoch in those batches, as ``validation_data``."""
    model = model_fn(dict(hparams))
    validation = (planned_batches(x, y, validation_steps, weights)
                  if validation_steps else None)
    history = model.fit(planned_batches(x, y, steps, weights), epochs=epochs, shuffle=False,
                        verbose=0, validation_data=validation).history
    return model, {k: [float(v) for v in values] for k, values in history.items()}


def keras_history(model_fn, hparams: dict, x, y, steps, epochs: int, weights=None,
                  validation_steps=None) -> dict[str, list[float]]:
    """The history of ``keras_fit``."""
    return keras_fit(model_fn, hparams, x, y, steps, epochs, weights, validation_steps)[1]


def differences(ours: dict, keras: dict) -> dict[str, float]:
    """Largest relative difference of each history value (|a - b| / max(|b|, 1e-3))."""
    out = {}
    for key, expected in keras.items():
        got = np.asarray(ours.get(key, []), np.float64)
        want = np.asarray(expected, np.float64)
        if got.shape != want.shape:
            out[key] = float("inf")
            continue
        out[key] = float(np.max(np.abs(got - want) / np.maximum(np.abs(want), 1e-3)))
    return out


def identity_partitioned(spark, records_by_partition: list[list[tuple]], schema: str):
    """A DataFrame whose partition p holds ``records_by_partition[p]`` in that order (an
    identity partitioner, empty partitions kept), cached: the RDD's Python stages (the
    partitioner, the rows' pickling) run on the executors' Python workers once, when the
    check of its partitions fills the cache, not again at every action of the fit and
    the transforms on it."""
    from pyspark.sql import functions as F

    keyed = [(p, r) for p, records in enumerate(records_by_partition) for r in records]
    parts = len(records_by_partition)
    rdd = (spark.sparkContext.parallelize(keyed, 1)
           .partitionBy(parts, lambda k: k).values())
    df = spark.createDataFrame(rdd, schema).cache()
    sizes = dict(df.groupBy(F.spark_partition_id().alias("p")).count().collect())
    assert df.rdd.getNumPartitions() == parts
    assert [sizes.get(p, 0) for p in range(parts)] == [len(r) for r in records_by_partition]
    return df
