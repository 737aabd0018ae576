"""Keras is the oracle for every column kind: strings, text, sequences, big ids, nested
arrays, PNG bytes and several labels train as ``model.fit`` trains on the same rows, and
score through ``transform``, SQL and a streaming query as ``model.predict`` scores them.

Full-batch steps (batchSize = every row, shuffle=False) make data-parallel training equal
to one process, so on 2 workers over uneven partitions every history value and every
prediction must match within 1e-3 relative. The table is printed at the end.
"""

import numpy as np
import pytest

from sparktf.ml import TFEstimator
from tests import conftest
from tests.integration import data_kinds, plan_oracle

pytestmark = pytest.mark.timeout(600)

RTOL = 1e-3
FLOOR = 1e-3  # values nearer zero are compared absolutely, at RTOL x FLOOR
PARTITIONS = {1: [1.0], 2: [2 / 3, 1 / 3]}  # uneven on purpose


def _frame(spark, kind, rows, shares):
    """One partition per share, each holding that share of the rows in order."""
    bounds = np.round(np.cumsum([0, *shares]) * len(rows)).astype(int)
    return plan_oracle.identity_partitioned(
        spark, [[(i, *rows[i]) for i in range(start, stop)]
                for start, stop in zip(bounds[:-1], bounds[1:])], "id bigint, " + kind.schema)


def _relative(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), FLOOR))) if a.size else 0.0


def _keras_x(x: dict):
    """What Keras's fit takes: bytes (image files) as a string tensor, not numpy objects."""
    import tensorflow as tf

    x = {k: tf.constant(list(v)) if v.dtype == object and isinstance(v[0], bytes) else v
         for k, v in x.items()}
    return next(iter(x.values())) if len(x) == 1 else x


def _oracle(kind, x, y, weight):
    model = kind.model_fn({})
    history = model.fit(_keras_x(x), y, sample_weight=weight, batch_size=data_kinds.ROWS,
                        epochs=kind.epochs, shuffle=False, verbose=0).history
    predicted = model.predict(_keras_x(x), batch_size=data_kinds.ROWS, verbose=0)
    predicted = predicted if isinstance(predicted, (list, tuple)) else [predicted]
    if isinstance(predicted, dict):
        predicted = list(predicted.values())
    return ({k: [float(v) for v in values] for k, values in history.items()},
            [np.asarray(p).reshape(len(p), -1) for p in predicted])


def _scored(frame, columns):
    rows = frame.orderBy("id").select(*columns).collect()
    return [np.array([np.asarray(r[c].toArray() if hasattr(r[c], "toArray") else r[c],
                                 np.float64).reshape(-1) for r in rows]) for c in columns]


_FITS: dict = {}


def _fit(spark, kind, workers=2):
    """The kind's fit (once per module: the streaming test scores with it too)."""
    if kind.name not in _FITS:
        rows, x, y, weight = data_kinds.data(kind)
        df = _frame(spark, kind, rows, PARTITIONS[workers])
        fitted = TFEstimator(modelFn=kind.model_fn, numWorkers=workers, epochs=kind.epochs,
                             batchSize=len(rows), shuffle=False, verbose=0,
                             **kind.params).fit(df)
        if kind.output_mapping:
            fitted.setOutputMapping(kind.output_mapping)
        _FITS[kind.name] = df, fitted, _oracle(kind, x, y, weight)
    return _FITS[kind.name]


# 2 workers over uneven partitions (one worker, 1-3 over any partitions: tests/generated)
@pytest.mark.parametrize("kind", data_kinds.KINDS, ids=[k.name for k in data_kinds.KINDS])
def test_fit_and_scoring_equal_keras(spark, kind):
    workers = 2
    df, fitted, (expected, predicted) = _fit(spark, kind, workers)
    history = fitted.getHistory()
    assert sorted(history) == sorted(expected), (history.keys(), expected.keys())
    differences = {key: _relative(history[key], values) for key, values in expected.items()}
    scored = _scored(fitted.transform(df), kind.outputs)
    for column, mine, keras_values in zip(kind.outputs, scored, predicted):
        differences[f"transform {column}"] = _relative(_comparable(mine, keras_values),
                                                       keras_values)
    differences["SQL"] = _relative(_sql(spark, fitted, df, kind), predicted[0])
    worst = max(differences, key=differences.get)
    conftest.DATA_KINDS.append((kind.name, workers, worst, differences[worst]))
    for key, diff in differences.items():
        assert diff <= RTOL, (f"{kind.name} on {workers} worker(s): {key} differs from "
                              f"Keras by {diff:.2e} relative. All: {differences}")


def _comparable(scored, predicted):
    """A sigmoid classifier's probability column holds [1 - p, p]; Keras predicts p."""
    return scored[:, 1:] if scored.shape[1] == 2 and predicted.shape[1] == 1 else scored


def _sql(spark, fitted, df, kind):
    """``SELECT tf_predict(...)``: the first output; for a classifier the class index, which
    must be the arg-max of the probabilities ``transform`` gives (then those are compared)."""
    model = fitted.copy()
    if kind.output_mapping:
        first = next(iter(kind.output_mapping))
        model.setOutputMapping({first: kind.output_mapping[first]})
    spark.udf.register("tf_predict", model.udf())
    df.createOrReplaceTempView("kind_rows")
    args = ", ".join(kind.sql_inputs)
    rows = spark.sql(f"SELECT id, tf_predict({args}) AS p FROM kind_rows ORDER BY id").collect()
    values = np.array([r["p"] for r in rows], np.float64)
    if kind.outputs == ("probability",):  # the SQL value is the arg-max class
        probability = _scored(fitted.transform(df), ["probability"])[0]
        assert values.tolist() == probability.argmax(axis=1).astype(float).tolist()
        return probability[:, 1:] if probability.shape[1] == 2 else probability
    return values[:, None]


# a stream runs transform's own Arrow UDF: the kinds whose columns reach it differently
# (names, nested arrays, binary, length None, a struct of several outputs); the others
# (text, int64 ids, length 10) feed as these do
STREAMED = [k for k in data_kinds.KINDS if k.name in (
    "strings + ints + floats by name", "array<array<float>> images", "binary PNG files",
    "variable-length ids, length None", "two labels, two outputs, weights")]


@pytest.mark.parametrize("kind", STREAMED, ids=[k.name for k in STREAMED])
def test_a_streaming_query_scores_each_kind_as_transform_does(spark, kind, tmp_path):
    batch, model, _ = _fit(spark, kind)
    source = str(tmp_path / "source")
    batch.write.parquet(source)
    stream = spark.readStream.schema(batch.schema).parquet(source)
    name = "scored_" + kind.model_fn.__name__
    query = (model.transform(stream).writeStream.format("memory").queryName(name)
             .outputMode("append").start())
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    streamed = _scored(spark.table(name), kind.outputs)
    for mine, expected in zip(streamed, _scored(model.transform(batch), kind.outputs)):
        np.testing.assert_allclose(mine, expected, rtol=1e-6)
