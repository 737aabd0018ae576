"""Generated interruptions (issue 45): a fit is lost at a generated point (inside an
epoch, between a callback's file write and the checkpoint, during the export, while the
driver writes ``result.json``), over generated settings (Dropout or not, ``keepBest``,
``EarlyStopping``, ``CSVLogger``, validation by fraction or column, shuffle, class
weights, 1-3 workers, a run first finished to fewer epochs and then asked for more),
then resumed by ``runId`` (the loss was the user's or the driver's) or relaunched by
``maxRetries`` (its process was killed). The oracle is the same
fit never interrupted: history, exported weights and the CSV file must be equal.

``make test`` runs a seeded 2; ``make fuzz`` (``SPARKTF_FUZZ=1``) 100 drawn afresh.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import tempfile
import uuid

import keras
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sparktf
from sparktf.ml import TFEstimator
from sparktf.runtime import storage
from tests.generated.conftest import budget
from tests.integration import interruptions

pytestmark = pytest.mark.timeout(3600)

ROWS = 96


def classifier(hp):
    import keras

    keras.utils.set_random_seed(0)
    layers = [keras.Input((4,)), keras.layers.Dense(8, activation="relu")]
    if hp["dropout"]:
        layers.append(keras.layers.Dropout(0.3, seed=7))
    layers.append(keras.layers.Dense(3, activation="softmax"))
    model = keras.Sequential(layers)
    model.compile(keras.optimizers.Adam(hp["learningRate"]),
                  "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


class Lose(keras.callbacks.Callback):
    """Loses the fit once (the first time the marker file is missing) at ``point``:
    ``("epoch", k)`` at the end of epoch k, after the callbacks before it wrote their files
    and before the checkpoint; ``("batch", k, s)`` after step s of epoch k; ``("end",)``
    after the last checkpoint, before the export. ``kill``: SIGKILL the process of rank
    ``rank`` (a platform failure, relaunched); else raise on it (the user's, not retried)."""

    def __init__(self, point, marker, kill, rank):
        super().__init__()
        self.point, self.marker, self.kill, self.rank = tuple(point), marker, kill, rank

    def _lose(self, where):
        rank = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
        if rank != self.rank or os.path.exists(self.marker):
            return
        open(self.marker, "w").close()
        if self.kill:
            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError(f"the run is lost {where}")

    def on_train_batch_end(self, batch, logs=None):
        if self.point[0] == "batch" and self.point[1:] == (self._epoch, batch):
            self._lose(f"in epoch {self._epoch + 1}")

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        if self.point == ("epoch", epoch):
            self._lose(f"after epoch {epoch + 1}")

    def on_train_end(self, logs=None):
        if self.point == ("end",):
            self._lose("during the export")


@st.composite
def cases(draw):
    epochs = draw(st.integers(2, 4))
    workers = draw(st.integers(1, 3))
    validation = draw(st.sampled_from([None, "fraction", "column"]))
    case = {
        "epochs": epochs, "workers": workers, "validation": validation,
        "batch": draw(st.sampled_from([8, 16, 32, ROWS])),
        "dropout": draw(st.booleans()), "shuffle": draw(st.booleans()),
        "class_weight": draw(st.booleans()),
        "keep_best": draw(st.sampled_from([None, "loss", *(["val_loss"] if validation
                                                            else [])])),
        "patience": draw(st.sampled_from([None, 1, 2])),
        "seed": draw(st.integers(0, 1000)),
        "save_every": draw(st.sampled_from([None, 2, 3])),
        # the run finished fewer epochs first, then was asked for all (issue 48's promotion)
        "first_epochs": draw(st.sampled_from([None, *range(1, epochs)])),
    }
    steps = max(1, -(-ROWS * 3 // 4 // case["batch"]))  # fewest steps an epoch has
    point = draw(st.one_of(
        st.tuples(st.just("epoch"), st.integers(0, epochs - 1)),
        st.tuples(st.just("batch"), st.integers(0, epochs - 1), st.integers(0, steps - 1)),
        st.just(("end",)), st.just(("result",))))
    case["point"] = list(point)
    # a killed process is relaunched (maxRetries); the driver's loss cannot be a kill
    case["kill"] = point[0] != "result" and draw(st.booleans())
    case["rank"] = draw(st.integers(0, workers - 1)) if case["kill"] else 0
    return case


def _frame(spark):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(ROWS, 4))
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0.5).astype(int)
    flag = rng.random(ROWS) < 0.25
    return spark.createDataFrame(
        [([float(v) for v in x], int(t), bool(f)) for x, t, f in zip(X, y, flag)],
        "features array<double>, label int, held boolean")


def _estimator(case, folder, name, lose, epochs=None):
    callbacks = [keras.callbacks.CSVLogger(os.path.join(folder, f"{name}.csv"))]
    if case["save_every"]:  # a file every few steps, counted across epochs
        callbacks.append(keras.callbacks.ModelCheckpoint(
            os.path.join(folder, name + "-{epoch}-{batch}.weights.h5"),
            save_weights_only=True, save_freq=case["save_every"]))
    if case["patience"] is not None:  # a min_delta no epoch reaches: stops at patience + 1
        callbacks.append(keras.callbacks.EarlyStopping(monitor="loss", min_delta=100.0,
                                                       patience=case["patience"]))
    callbacks.append(lose)
    params = dict(modelFn=classifier, hyperParams={"dropout": case["dropout"]},
                  numWorkers=case["workers"], epochs=epochs or case["epochs"],
                  batchSize=case["batch"], learningRate=0.02, shuffle=case["shuffle"],
                  seed=case["seed"], callbacks=callbacks, modelDir=os.path.join(folder, "m"),
                  runId=name, maxRetries=1 if case["kill"] else 0)
    if case["validation"] == "fraction":
        params["validationFraction"] = 0.25
    elif case["validation"] == "column":
        params["validationCol"] = "held"
    if case["class_weight"]:
        params["classWeight"] = {0: 1.0, 1: 2.0, 2: 0.5}
    if case["keep_best"]:
        params["keepBest"] = case["keep_best"]
    return TFEstimator(**params)


def _weights(case, path):
    model = classifier({"dropout": case["dropout"], "learningRate": 0.01})
    model.load_weights(path)
    return model.get_weights()


def _numbers(rows):
    """CSVLogger's rows as floats ('NA', Keras's mark of a value an epoch lacks: NaN)."""
    return np.array([[float("nan") if v == "NA" else float(v) for v in r] for r in rows])


def _csv(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


@settings(max_examples=budget(2, 100))
@given(case=cases())
def test_a_fit_lost_anywhere_resumes_into_the_uninterrupted_fit(spark, case):
    print(case)
    folder = tempfile.mkdtemp(prefix="sparktf-test-interrupted-")
    try:
        _lose_and_compare(spark, case, folder)
    finally:
        storage.remove_dir(folder)


def _lose_and_compare(spark, case, folder):
    frame = _frame(spark)
    point = case["point"] if case["point"] != ["result"] else ["never"]
    never = os.path.join(folder, "never")
    open(never, "w").close()
    whole = _estimator(case, folder, "whole", Lose(point, never, False, 0)).fit(frame)

    if case["first_epochs"]:  # finished first, then continued to the case's epochs
        _estimator(case, folder, "run", Lose(point, never, False, 0),
                   case["first_epochs"]).fit(frame)
    lost = Lose(point, os.path.join(folder, f"lost-{uuid.uuid4().hex}"), case["kill"],
                case["rank"])
    run = _estimator(case, folder, "run", lost)
    if case["kill"]:
        resumed = run.fit(frame)  # relaunched from the last checkpoint
    elif case["point"] == ["result"]:
        with pytest.MonkeyPatch.context() as monkeypatch:
            interruptions.lose_while_writing_result(monkeypatch)
            with pytest.raises(interruptions.Lost):
                run.fit(frame)
        resumed = run.fit(frame)
    else:
        try:
            resumed = run.fit(frame)  # a point the fit never reached (EarlyStopping)
        except sparktf.TaskFailedError as e:
            assert "the run is lost" in str(e)
            resumed = run.fit(frame)

    ours, expected = resumed.getHistory(), whole.getHistory()
    print("whole  ", expected, "\nresumed", ours)
    assert ours.keys() == expected.keys()
    for key, values in expected.items():
        np.testing.assert_allclose(ours[key], values, rtol=1e-6, err_msg=key)
    for a, b in zip(resumed.getKerasModel().get_weights(), whole.getKerasModel().get_weights(),
                    strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    ran, oracle = (_csv(os.path.join(folder, f"{n}.csv")) for n in ("run", "whole"))
    assert [r[0] for r in ran] == [r[0] for r in oracle]
    assert ran[0] == oracle[0]
    np.testing.assert_allclose(_numbers(ran[1:]), _numbers(oracle[1:]), rtol=1e-6)
    saved = {name: sorted(n.split("-", 1)[1] for n in os.listdir(folder)
                          if n.endswith(".h5") and n.startswith(f"{name}-"))
             for name in ("run", "whole")}
    assert saved["run"] == saved["whole"]  # saved at the same steps
    for key in saved["run"]:
        ours, theirs = (_weights(case, os.path.join(folder, f"{n}-{key}"))
                        for n in ("run", "whole"))
        for a, b in zip(ours, theirs, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7, err_msg=key)
