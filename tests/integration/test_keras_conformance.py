"""Keras is the oracle: TFEstimator.fit must give what ``model.fit`` gives on the same rows.

Full-batch steps (batchSize = every training row, shuffle=False) make synchronous
data-parallel training equal to single-process training, so on 2 workers over uneven
partitions every history value and the trained model's predictions must match
``model.fit(x, y, batch_size=len(x), shuffle=False)``. On 1 worker, mini-batches must
match as well. The table of differences is printed at the end of the run.
"""

import numpy as np
import pytest

from sparktf.ml import TFEstimator
from tests import conftest
from tests.integration import conformance

pytestmark = pytest.mark.timeout(600)

RTOL = 1e-3
PARTITIONS = {1: [1.0], 2: [2 / 3, 1 / 3]}  # uneven on purpose


def _frame(spark, case, columns, shares):
    """A DataFrame with one partition per share, each holding that share of the rows in
    their original order (an identity partitioner, so no hash can merge two shares)."""
    rows = len(columns["label"])
    bounds = np.round(np.cumsum([0, *shares]) * rows).astype(int)
    records = []
    for part, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:])):
        for i in range(start, stop):
            record = (i, columns["x"][i].tolist(), columns["label"][i].item(),
                      float(columns["weight"][i]), bool(columns["val"][i]))
            if case.task == "two_inputs":
                record += (int(columns["ids"][i]),)
            records.append((part, record))
    label = "long" if case.task != "regression" else "double"
    schema = (f"id long, x array<float>, label {label}, weight double, val boolean" +
              (", ids long" if case.task == "two_inputs" else ""))
    sc = spark.sparkContext
    rdd = sc.parallelize(records, 1).partitionBy(len(shares), lambda k: k).values()
    df = spark.createDataFrame(rdd, schema)
    assert df.rdd.glom().map(len).collect() == [int(b - a) for a, b in
                                                zip(bounds[:-1], bounds[1:])]
    return df


def _keras_inputs(case, columns, rows):
    x = columns["x"][rows]
    return [columns["ids"][rows][:, None], x] if case.task == "two_inputs" else x


def _oracle(case, columns, batch_size):
    train, val = ~columns["val"], columns["val"]
    model = case.model_fn({})
    kwargs = {}
    if case.weights:
        kwargs["sample_weight"] = columns["weight"][train]
    if case.class_weight:
        kwargs["class_weight"] = case.class_weight
    if case.validation:
        kwargs["validation_data"] = (_keras_inputs(case, columns, val), columns["label"][val],
                                     columns["weight"][val] if case.weights else None)
    history = model.fit(_keras_inputs(case, columns, train), columns["label"][train],
                        batch_size=batch_size, epochs=case.epochs, shuffle=False, verbose=0,
                        callbacks=case.callbacks(), **kwargs).history
    return model, {k: [float(v) for v in values] for k, values in history.items()}


def _estimator(case, workers, batch_size):
    params = dict(modelFn=case.model_fn, labelCol="label", numWorkers=workers,
                  epochs=case.epochs, batchSize=batch_size, shuffle=False,
                  callbacks=case.callbacks())
    if case.task == "two_inputs":
        params["inputCols"] = ["ids", "x"]
    else:
        params["featuresCol"] = "x"
    if case.weights:
        params["weightCol"] = "weight"
    if case.class_weight:
        params["classWeight"] = case.class_weight
    if case.validation:
        params["validationCol"] = "val"
    return TFEstimator(**params)


def _relative(a, b, floor: float) -> float:
    """max |a - b| / |b|, with |b| floored at ``floor`` for values near zero."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), floor))) if a.size else 0.0


def _scored(model, df, case):
    out = "prediction" if case.task == "regression" else "probability"
    rows = model.transform(df).orderBy("id").select(out).collect()
    return np.array([np.asarray(r[0].toArray() if hasattr(r[0], "toArray") else r[0])
                     for r in rows])


def _check(spark, case, workers, batch_size=None):
    columns = conformance.data(case)
    train_rows = int((~columns["val"]).sum())
    batch_size = batch_size or train_rows
    df = _frame(spark, case, columns, PARTITIONS[workers])
    fitted = _estimator(case, workers, batch_size).fit(df)
    oracle, expected = _oracle(case, columns, batch_size)
    history = fitted.getHistory()
    assert sorted(history) == sorted(expected), (history.keys(), expected.keys())
    differences = {}
    for key, values in expected.items():
        assert len(history[key]) == len(values), (key, history[key], values)
        differences[key] = _relative(history[key], values, case.floor)
    x_all = _keras_inputs(case, columns, np.ones(len(columns["label"]), bool))
    differences["predictions"] = _relative(_scored(fitted, df, case),
                                           oracle.predict(x_all, verbose=0).squeeze(),
                                           case.floor)
    worst = max(differences, key=differences.get)
    conftest.CONFORMANCE.append((case.name, workers, batch_size, worst, differences[worst]))
    rtol = case.rtol.get(workers, RTOL)
    for key, diff in differences.items():
        assert diff <= rtol, (f"{case.name} on {workers} worker(s): {key} differs from "
                              f"Keras's fit by {diff:.2e} relative (at most {rtol:g}): "
                              f"{history.get(key, 'predictions')} vs {expected.get(key)}. "
                              f"All differences: {differences}")


@pytest.mark.parametrize("case", conformance.CASES, ids=[c.name for c in conformance.CASES])
def test_full_batch_fit_equals_keras_fit(spark, case):
    # 2 workers over uneven partitions; BatchNormalization on 1 (each worker normalizes its
    # own rows). One worker's steps are also the mini-batch tests' below and the generated
    # cases' (tests/generated: 1-3 workers over any partitions, any batch size)
    _check(spark, case, 1 if case.one_worker_only else 2)


MINI_BATCH = [c for c in conformance.CASES if c.name in ("sequential",
                                                         "sample weights + validation")]


@pytest.mark.parametrize("case", MINI_BATCH, ids=[c.name for c in MINI_BATCH])
def test_mini_batch_fit_on_one_worker_equals_keras_fit(spark, case):
    _check(spark, case, 1, batch_size=64)
