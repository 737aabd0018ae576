"""Keras is the oracle: TFEstimator.fit must give what ``model.fit`` gives on the same rows.

Full-batch steps (batchSize = every training row, shuffle=False) make synchronous
data-parallel training equal to single-process training, so on 2 workers over uneven
partitions every history value and the trained model's predictions must match
``model.fit(x, y, batch_size=len(x), shuffle=False)``. On 1 worker, mini-batches must
match as well. The table of differences is printed at the end of the run.
"""

import dataclasses

import numpy as np
import pytest

import sparktf
from sparktf.ml import TFEstimator, TFModel
from tests import conftest
from tests.integration import conformance, plan_oracle

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
            record = (i, columns["x"][i].tolist(), columns["label"][i].tolist(),
                      float(columns["weight"][i]), bool(columns["val"][i]))
            if case.task == "two_inputs":
                record += (int(columns["ids"][i]),)
            records.append((part, record))
    label = ("array<float>" if columns["label"].ndim > 1 else
             "long" if case.task != "regression" else "double")
    schema = (f"id long, x array<float>, label {label}, weight double, val boolean" +
              (", ids long" if case.task == "two_inputs" else ""))
    return plan_oracle.identity_partitioned(
        spark, [[r for p, r in records if p == part] for part in range(len(shares))], schema)


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
    # a vector metric's value stays a vector (Keras's History keeps the array)
    return model, {k: [np.asarray(v).tolist() for v in values] for k, values in history.items()}


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


VECTOR_METRIC = conformance.Case("F1Score(average=None)", conformance.f1_classifier,
                                 task="one_hot", validation=True, epochs=3)


def test_a_vector_metric_is_in_the_history_as_keras_fit_keeps_it(spark, tmp_path):
    """Issue 53: with ``F1Score(average=None)`` on 2 workers over 50:20 rows, the F1 values
    were left out of the history, and loss and accuracy came from the last step's
    per-worker logs averaged over the workers. The history must be Keras's, a vector
    per epoch, and every other value the one of the fit without the metric."""
    import glob

    import tensorflow as tf

    case = VECTOR_METRIC
    columns = conformance.data(case, rows=70)
    train_rows = int((~columns["val"]).sum())
    df = _frame(spark, case, columns, [5 / 7, 2 / 7])
    fitted = _estimator(case, 2, train_rows).setModelDir(str(tmp_path)).setRunId("f1").fit(df)
    history = fitted.getHistory()
    without = _estimator(case, 2, train_rows).setHyperParams({"f1": False}).fit(df)
    _, expected = _oracle(case, columns, train_rows)
    print("sparktf:", history, "\nKeras:  ", expected, "\nwithout F1:", without.getHistory())
    assert sorted(history) == sorted(expected) == [
        "accuracy", "f1_score", "loss", "val_accuracy", "val_f1_score", "val_loss"]
    for key, values in expected.items():
        np.testing.assert_allclose(history[key], values, rtol=1e-6, atol=1e-7, err_msg=key)
    assert np.shape(history["f1_score"]) == (case.epochs, 3)
    assert sorted(without.getHistory()) == ["accuracy", "loss", "val_accuracy", "val_loss"]
    for key, values in without.getHistory().items():  # the same arithmetic: ~exact
        np.testing.assert_allclose(history[key], values, rtol=1e-7, err_msg=key)
    # TensorBoard: a scalar per element (Keras's own TensorBoard callback fails on a vector)
    files = glob.glob(str(tmp_path / "**" / "logs" / "train" / "events.out.tfevents.*"),
                      recursive=True)
    logged = {}
    for event in tf.compat.v1.train.summary_iterator(files[0]):
        for value in event.summary.value:
            logged.setdefault(value.tag, []).append(float(tf.make_ndarray(value.tensor)))
    np.testing.assert_allclose([logged[f"epoch_f1_score/{i}"] for i in range(3)],
                               np.transpose(history["f1_score"]), rtol=1e-6)
    # the history as the finished run keeps it, and as the saved model does
    again = _estimator(case, 2, train_rows).setModelDir(str(tmp_path)).setRunId("f1").fit(df)
    assert again.getHistory() == history
    fitted.write().overwrite().save(str(tmp_path / "saved"))
    assert TFModel.load(str(tmp_path / "saved")).getHistory() == history


@pytest.mark.parametrize("path", ["evaluator side-car", "tf_keras's own fit"])
def test_a_vector_metric_is_in_the_history_from_the_evaluator_and_tf_keras(spark, path):
    """The evaluator side-car's validation and a tf_keras model's own fit give the history a
    vector metric as Keras does: on 1 worker, full-batch steps, Keras's fit is the oracle
    (before, the side-car left it out and tf_keras's fit failed on it)."""
    case = dataclasses.replace(VECTOR_METRIC, **(
        {"model_fn": conformance.tf_keras_f1_classifier} if path.startswith("tf_keras")
        else {}))
    columns = conformance.data(case, rows=70)
    train_rows = int((~columns["val"]).sum())
    df = _frame(spark, case, columns, [1.0])
    estimator = _estimator(case, 1, train_rows)
    if path == "evaluator side-car":
        estimator.setEvaluator(True)
    history = estimator.fit(df).getHistory()
    _, expected = _oracle(case, columns, train_rows)
    print(f"sparktf ({path}):", history, "\nKeras:", expected)
    assert sorted(history) == sorted(expected), (sorted(history), sorted(expected))
    assert np.shape(history["val_f1_score"]) == (case.epochs, 3)
    for key, values in expected.items():
        np.testing.assert_allclose(history[key], values, rtol=1e-6, atol=1e-7, err_msg=key)


def test_a_vector_metric_named_by_keep_best_or_a_search_is_refused_saying_why(spark):
    """keepBest and a search rank epochs or trials by one number: a vector metric (with
    Keras's direction, so "auto" accepts it) is refused naming it, not a bare TypeError
    from float(list)."""
    from sparktf.ml.tuning import HalvingSearch

    case = VECTOR_METRIC
    columns = conformance.data(case, rows=70)
    train_rows = int((~columns["val"]).sum())
    df = _frame(spark, case, columns, [1.0])
    with pytest.raises(sparktf.InvalidInputError, match="keepBest='val_f1_score' has a value "
                                                        "per element"):
        _estimator(case, 1, train_rows).setKeepBest("val_f1_score").fit(df)
    search = HalvingSearch(estimator=_estimator(case, 1, train_rows), numTrials=1,
                           paramDistributions={"f1": [True]}, metric="val_f1_score")
    with pytest.raises(sparktf.InvalidInputError, match="metric='val_f1_score' has a value "
                                                        "per element"):
        search.fit(df)
