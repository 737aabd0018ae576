"""A resumed run is the uninterrupted run: the same history, exported weights and callback
files, wherever the interruption fell (issue 45). The oracle is the same fit run without
interruption, in a folder of its own."""

import csv
import json
import os

import keras
import numpy as np
import pytest

import sparktf
from sparktf.ml import TFEstimator
from tests.integration import data, interruptions
from tests.integration.test_faults import KillOnce

pytestmark = pytest.mark.timeout(600)


class Jitter(keras.layers.Layer):
    """Draws keras.random without a generator of its own: Keras's global one (found by
    review: it failed every fit, made again inside the traced step)."""

    def call(self, x, training=False):
        if training:
            return x * keras.random.uniform(keras.ops.shape(x), 0.9, 1.1)
        return x


def dropout_classifier(hparams):
    """Dropout and GaussianNoise with seeds, and a layer drawing from Keras's global seed
    generator: the steps draw from Keras's seed generators."""
    import keras
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((4,)), keras.layers.GaussianNoise(0.1, seed=5),
                              Jitter(), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dropout(0.3, seed=7),
                              keras.layers.Dense(3, activation="softmax")])
    model.compile(keras.optimizers.Adam(hparams["learningRate"]),
                  "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


class LoseTheRun(keras.callbacks.Callback):
    """Fails the fit once (a marker file says it did): at the end of epoch ``epoch`` (after
    the callbacks before it in the list wrote their files, before the checkpoint), or, with
    ``epoch=None``, at the end of training (after the last checkpoint, before the export
    and ``result.json``: the seconds in which a lost driver used to change the result)."""

    def __init__(self, marker, epoch=None):
        super().__init__()
        self.marker, self.at_epoch = marker, epoch

    def _lose(self, where):
        if not os.path.exists(self.marker):
            open(self.marker, "w").close()
            raise RuntimeError(f"the run is lost {where}")

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.at_epoch:
            self._lose(f"after epoch {epoch + 1}")

    def on_train_end(self, logs=None):
        if self.at_epoch is None:
            self._lose("during the export")


def _frame(spark):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(96, 4))
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0.5).astype(int)
    return data.frame(spark, [([float(v) for v in x], int(t)) for x, t in zip(X, y)],
                      "features array<double>, label int").repartition(2)


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def test_dropout_early_stopping_keep_best_and_csv_resume_exactly_after_two_losses(
        spark, tmp_path):
    """Lost after epoch 2 (CSVLogger has written it, its checkpoint is not), then lost again
    after the early stop's last checkpoint, before the export: the third fit exports what
    the uninterrupted fit exports. Before: the seed generators started afresh (Dropout),
    EarlyStopping counted its patience again and trained past the stop, keepBest exported
    the last epoch, and the CSV held epoch 2 twice."""
    frame = _frame(spark).cache()
    common = dict(modelFn=dropout_classifier, numWorkers=2, epochs=6, batchSize=16,
                  learningRate=0.02, shuffle=True, seed=11, validationFraction=0.25,
                  classWeight={0: 1.0, 1: 2.0, 2: 1.0}, keepBest="loss", keepBestMode="max",
                  modelDir=str(tmp_path / "m"))

    def callbacks(csv_path, *losses):
        # min_delta no epoch reaches: the run stops after epoch 3 (patience 2)
        return [keras.callbacks.CSVLogger(str(csv_path)),
                keras.callbacks.EarlyStopping(monitor="loss", min_delta=100.0, patience=2),
                *losses]

    whole = TFEstimator(runId="whole", callbacks=callbacks(tmp_path / "whole.csv"),
                        **common).fit(frame)
    lost = [LoseTheRun(str(tmp_path / "lost-1"), epoch=1), LoseTheRun(str(tmp_path / "lost-2"))]
    run = TFEstimator(runId="run", callbacks=callbacks(tmp_path / "run.csv", *lost), **common)
    with pytest.raises(sparktf.TaskFailedError, match="lost after epoch 2"):
        run.fit(frame)
    with pytest.raises(sparktf.TaskFailedError, match="lost during the export"):
        run.fit(frame)
    resumed = run.fit(frame)

    print("whole  ", whole.getHistory())
    print("resumed", resumed.getHistory())
    assert len(whole.getHistory()["loss"]) == 3  # stopped early, as the oracle did
    assert whole.getHistory()["best_epoch"] == [1]  # not the last: its checkpoint was kept
    assert resumed.getHistory().keys() == whole.getHistory().keys()
    for key, values in whole.getHistory().items():
        np.testing.assert_allclose(resumed.getHistory()[key], values, rtol=1e-6, err_msg=key)
    for a, b in zip(resumed.getKerasModel().get_weights(), whole.getKerasModel().get_weights(),
                    strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert _rows(tmp_path / "run.csv") == _rows(tmp_path / "whole.csv")
    assert [r[0] for r in _rows(tmp_path / "run.csv")] == ["epoch", "0", "1", "2"]
    # every epoch's worker times, the lost attempts' from the checkpoint (issue 54)
    assert resumed.getWorkerTimes()["epoch"] == whole.getWorkerTimes()["epoch"] == [1, 2, 3]


def broken(hparams):
    raise RuntimeError("modelFn ran: the job started")


def test_the_relaunch_wait_is_checked_before_the_first_job_in_sparks_time_syntax(spark):
    frame = _frame(spark)
    try:
        spark.conf.set("spark.sparktf.relaunchWait", "soon")
        with pytest.raises(sparktf.InvalidInputError, match="relaunchWait must be a time"):
            TFEstimator(modelFn=broken, numWorkers=1, maxRetries=1).fit(frame)
        spark.conf.set("spark.sparktf.relaunchWait", "1min")  # Spark's syntax: accepted
        with pytest.raises(sparktf.TaskFailedError, match="modelFn ran"):
            TFEstimator(modelFn=broken, numWorkers=1, maxRetries=1).fit(frame)
    finally:
        spark.conf.unset("spark.sparktf.relaunchWait")


def shaped(hparams, units, activation="relu"):
    import keras
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(units, activation),
                              keras.layers.Dense(3, activation="softmax")])
    model.compile(keras.optimizers.Adam(hparams["learningRate"]),
                  "sparse_categorical_crossentropy")
    return model


def make(activation):
    def build(hparams):
        return shaped(hparams, 4, activation)
    return build


class Builder:
    def __init__(self, units):
        self.units = units

    def __call__(self, hparams):
        return shaped(hparams, self.units)


def test_a_run_recognises_its_model_by_what_it_builds(spark, tmp_path, caplog):
    """A partial, a callable instance and a closure are recognised by the model they
    build: a new object building the same model returns the finished run (before: refused
    as 'another function', their digest held a memory address); a closure over another
    activation is refused, saying so (before: accepted, mixing two models)."""
    import functools
    import logging

    caplog.set_level(logging.INFO, logger="sparktf")
    frame = _frame(spark).cache()
    common = dict(numWorkers=1, epochs=2, batchSize=32, modelDir=str(tmp_path / "m"))
    for run_id, fn, again in [
            ("partial", functools.partial(shaped, units=4), functools.partial(shaped, units=4)),
            ("instance", Builder(4), Builder(4))]:
        first = TFEstimator(runId=run_id, modelFn=fn, **common).fit(frame)
        returned = TFEstimator(runId=run_id, modelFn=again, **common).fit(frame)
        assert returned.getHistory() == first.getHistory()
        assert returned.getModelPath() == first.getModelPath()
        with pytest.raises(sparktf.InvalidInputError, match=r"builds another model \(.*8"):
            TFEstimator(runId=run_id, modelFn=Builder(8), **common).fit(frame)

    lost = LoseTheRun(str(tmp_path / "lost"), epoch=1)  # epoch 1 is checkpointed
    with pytest.raises(sparktf.TaskFailedError, match="lost after epoch 2"):
        TFEstimator(runId="closure", modelFn=make("relu"), callbacks=[lost], **common).fit(frame)
    with pytest.raises(sparktf.InvalidInputError, match='"relu" then, "tanh" now'):
        TFEstimator(runId="closure", modelFn=make("tanh"), **common).fit(frame)
    resumed = TFEstimator(runId="closure", modelFn=make("relu"), **common).fit(frame)
    assert len(resumed.getHistory()["loss"]) == 2


def broken_on_executors(hparams):
    import os
    if "TF_CONFIG" in os.environ:  # a task's process, not the driver
        raise RuntimeError("a bug in modelFn")
    return shaped(hparams, 4)


def test_a_run_that_trained_nothing_starts_afresh_with_a_fixed_model_fn(spark, tmp_path):
    frame = _frame(spark)
    common = dict(numWorkers=1, epochs=1, batchSize=32, modelDir=str(tmp_path / "m"),
                  runId="first-try")
    with pytest.raises(sparktf.TaskFailedError, match="a bug in modelFn"):
        TFEstimator(modelFn=broken_on_executors, **common).fit(frame)
    fixed = TFEstimator(modelFn=Builder(6), **common).fit(frame)  # another model, no epoch yet
    assert len(fixed.getHistory()["loss"]) == 1


def test_a_result_cut_short_by_a_lost_driver_and_a_folder_named_with_a_hash(
        spark, tmp_path, monkeypatch):
    """result.json is replaced in one step: a driver lost while writing it leaves none, and
    the next fit exports again (before: a file cut short, a raw JSONDecodeError). A
    file:// modelDir whose folder is named 'run#3' is that folder (before: the '#3' was
    taken for a URL fragment: IsADirectoryError)."""
    frame = _frame(spark)
    model_dir = "file://" + str(tmp_path / "run#3")
    common = dict(modelFn=Builder(4), numWorkers=1, epochs=2, batchSize=32,
                  modelDir=model_dir, runId="nightly")

    interruptions.lose_while_writing_result(monkeypatch)
    with pytest.raises(interruptions.Lost):
        TFEstimator(**common).fit(frame)
    monkeypatch.undo()
    again = TFEstimator(**common).fit(frame)
    assert len(again.getHistory()["loss"]) == 2
    assert os.path.isdir(tmp_path / "run#3" / "nightly" / "checkpoints")
    returned = TFEstimator(**common).fit(frame)
    assert returned.getHistory() == again.getHistory()
    assert returned.transform(frame).count() == frame.count()


def test_a_run_owned_by_a_live_fit_is_refused_and_a_dead_owners_is_taken(spark, tmp_path):
    import subprocess
    import sys

    from sparktf.ml import runs

    frame = _frame(spark)
    common = dict(modelFn=Builder(4), numWorkers=1, epochs=1, batchSize=32,
                  modelDir=str(tmp_path / "m"), runId="shared")
    run_dir = str(tmp_path / "m" / "shared")
    with runs.owned(run_dir):  # another fit of this driver trains it
        with pytest.raises(sparktf.InvalidInputError, match="being trained by another fit"):
            TFEstimator(**common).fit(frame)
    # another driver on this machine holds it, then dies without letting go
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from sparktf.ml import runs\n"
         f"with runs.owned({run_dir!r}):\n    print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(sparktf.InvalidInputError, match=f"process {holder.pid} on"):
            TFEstimator(**common).fit(frame)
    finally:
        holder.kill()
        holder.wait()
    assert os.path.exists(os.path.join(run_dir, "lock.json"))  # stale: its owner is gone
    assert len(TFEstimator(**common).fit(frame).getHistory()["loss"]) == 1
    assert not os.path.exists(os.path.join(run_dir, "lock.json"))


@pytest.mark.parametrize("evaluator", [False, True], ids=["fraction", "evaluator"])
def test_a_frame_computed_in_another_order_each_time_gives_the_same_fit(spark, evaluator):
    """The frame's rows come in another order each time Spark computes it (a shuffle whose
    blocks arrive in any order; here sorted by a draw made anew each time): the held-out
    rows and the batches are still the same, so two fits give one history. Before, the
    split was rand() over the rows' positions and the order was the arrival order."""
    import random

    from pyspark.sql import functions as F

    draw = F.udf(lambda: random.random(), "double").asNondeterministic()
    frame = _frame(spark).orderBy(draw())
    fit = dict(modelFn=Builder(4), numWorkers=1 if evaluator else 2, epochs=1, batchSize=8,
               shuffle=True, seed=5, validationFraction=0.25, evaluator=evaluator,
               learningRate=0.05)
    first, second = (TFEstimator(**fit).fit(frame).getHistory() for _ in range(2))
    print(first, second, sep="\n")
    assert first == second


class EpochsTrained(keras.callbacks.Callback):
    """Rank 0 appends each epoch it trains to ``path``: what a fit trained, not what its
    history says."""

    def __init__(self, path):
        super().__init__()
        self.path = path

    def on_epoch_begin(self, epoch, logs=None):
        import json
        if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 0:
            with open(self.path, "a") as f:
                f.write(f"{epoch}\n")


def _trained(path):
    with open(path) as f:
        epochs = [int(line) for line in f]
    os.remove(path)
    return epochs


def test_a_run_asked_for_more_epochs_continues_from_its_checkpoint_as_one_fit(spark, tmp_path):
    """What successive halving promotes a trial with (issue 48): a finished run asked for
    more epochs trains only the epochs it lacks, from its last checkpoint, and ends as the
    fit asked for them from the start (Dropout, shuffled batches, held-out rows, keepBest,
    ReduceLROnPlateau's counters). Before: refused, epochs was a setting it could not
    change. The earlier result's model stays as it was; fewer epochs are refused."""
    frame = _frame(spark).cache()
    log = str(tmp_path / "epochs")
    common = dict(modelFn=dropout_classifier, numWorkers=2, batchSize=16, learningRate=0.02,
                  shuffle=True, seed=11, validationFraction=0.25, keepBest="val_loss",
                  modelDir=str(tmp_path / "m"))

    def callbacks():
        return [keras.callbacks.ReduceLROnPlateau("loss", factor=0.5, patience=1,
                                                  min_delta=100.0),
                EpochsTrained(log)]

    whole = TFEstimator(runId="whole", epochs=6, callbacks=callbacks(), **common).fit(frame)
    assert _trained(log) == [0, 1, 2, 3, 4, 5]
    first = TFEstimator(runId="run", epochs=2, callbacks=callbacks(), **common).fit(frame)
    assert _trained(log) == [0, 1]
    scored = first.transform(frame).select("probability").collect()
    more = TFEstimator(runId="run", epochs=4, callbacks=callbacks(), **common).fit(frame)
    assert _trained(log) == [2, 3]
    most = TFEstimator(runId="run", epochs=6, callbacks=callbacks(), **common).fit(frame)
    assert _trained(log) == [4, 5]

    print("whole    ", whole.getHistory())
    print("continued", most.getHistory())
    assert most.getHistory().keys() == whole.getHistory().keys()
    for key, values in whole.getHistory().items():
        np.testing.assert_allclose(most.getHistory()[key], values, rtol=1e-6, err_msg=key)
    assert whole.getHistory()["learning_rate"][-1] < 0.02  # the plateau's counters carried
    for a, b in zip(most.getKerasModel().get_weights(), whole.getKerasModel().get_weights(),
                    strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert len({first.getModelPath(), more.getModelPath(), most.getModelPath()}) == 3
    assert first.transform(frame).select("probability").collect() == scored

    returned = TFEstimator(runId="run", epochs=6, callbacks=callbacks(), **common).fit(frame)
    assert returned.getModelPath() == most.getModelPath() and not os.path.exists(log)
    with pytest.raises(sparktf.InvalidInputError, match="trained 6 epochs already"):
        TFEstimator(runId="run", epochs=4, callbacks=callbacks(), **common).fit(frame)


def test_a_run_finished_by_an_older_sparktf_continues_after_a_failed_continuation(
        spark, tmp_path):
    """Found by review: run.json and result.json of an older sparktf (epochs among the
    Params, none in the result); a continuation to more epochs fails, and the next fit of
    those epochs returned the old result as if it had trained them."""
    frame = _frame(spark)
    common = dict(modelFn=Builder(4), numWorkers=1, batchSize=32, modelDir=str(tmp_path / "m"),
                  runId="old")
    TFEstimator(epochs=2, **common).fit(frame)
    run_dir = tmp_path / "m" / "old"
    for name, change in (("run.json", lambda r: {"params": {**r["params"], "epochs": 2},
                                                 "model": r["model"]}),
                         ("result.json", lambda r: {k: v for k, v in r.items()
                                                    if k != "epochs"})):
        path = run_dir / name
        record = json.loads(path.read_text())
        path.write_text(json.dumps(change(record)))
    with pytest.raises(sparktf.TaskFailedError, match="lost after epoch 3"):
        TFEstimator(epochs=4, callbacks=[LoseTheRun(str(tmp_path / "lost"), epoch=2)],
                    **common).fit(frame)
    continued = TFEstimator(epochs=4, **common).fit(frame)
    assert len(continued.getHistory()["loss"]) == 4


def batch_norm(hparams):
    """Per-worker non-trainable state: each worker's moving statistics follow its own
    batches (unsynchronized BatchNormalization)."""
    import keras
    keras.utils.set_random_seed(4)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8),
                              keras.layers.BatchNormalization(momentum=0.5),
                              keras.layers.Activation("relu"),
                              keras.layers.Dense(3, activation="softmax")])
    model.compile(keras.optimizers.Adam(hparams["learningRate"]),
                  "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def test_batch_normalization_on_two_workers_resumes_relaunches_and_continues_exactly(
        spark, tmp_path):
    """Each worker's moving statistics drift apart within an epoch; the checkpoint kept
    the chief's and every worker restored those, so val_loss after a resume differed
    (issue 53). Lost after epoch 2 and resumed, relaunched by maxRetries, and continued
    from 2 to 3 epochs: each equals the uninterrupted fit, val_* included."""
    frame = _frame(spark).cache()
    common = dict(modelFn=batch_norm, numWorkers=2, batchSize=16, learningRate=0.05,
                  validationFraction=0.25, seed=3, modelDir=str(tmp_path / "m"))
    whole = TFEstimator(runId="whole", epochs=3, **common).fit(frame)
    run = TFEstimator(runId="lost", epochs=3, **common,
                      callbacks=[LoseTheRun(str(tmp_path / "lost"), epoch=1)])
    with pytest.raises(sparktf.TaskFailedError, match="lost after epoch 2"):
        run.fit(frame)
    resumed = run.fit(frame)
    relaunched = TFEstimator(runId="relaunched", epochs=3, maxRetries=1, **common,
                             callbacks=[KillOnce(str(tmp_path), at=2)]).fit(frame)
    assert os.path.exists(tmp_path / "killed")  # rank 1 was killed as epoch 3 began
    TFEstimator(runId="continued", epochs=2, **common).fit(frame)
    continued = TFEstimator(runId="continued", epochs=3, **common).fit(frame)
    for name, model in [("resumed", resumed), ("relaunched", relaunched),
                        ("continued", continued)]:
        print(f"whole {whole.getHistory()}\n{name} {model.getHistory()}")
        assert model.getHistory().keys() == whole.getHistory().keys()
        for key, values in whole.getHistory().items():
            np.testing.assert_allclose(model.getHistory()[key], values, rtol=1e-6,
                                       err_msg=f"{name}: {key}")
        for a, b in zip(model.getKerasModel().get_weights(),
                        whole.getKerasModel().get_weights(), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7, err_msg=name)
