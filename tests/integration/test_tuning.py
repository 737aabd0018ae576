"""HalvingSearch (issue 48) on a real local-cluster: the oracle is pyspark's
TrainValidationSplit on the same grid and rows; continuation is counted by what the
fits trained (a callback), not by what the search says."""

import json
import logging
import os

import keras
import numpy as np
import pytest
from pyspark.ml.evaluation import RegressionEvaluator
from pyspark.ml.tuning import ParamGridBuilder, TrainValidationSplit

import sparktf
from sparktf.ml import TFEstimator
from sparktf.ml.tuning import HalvingSearch, HalvingSearchModel, choice, logUniform
from sparktf.ml.tuning import journal as search_journal
from tests import conftest
from tests.integration import data, models

pytestmark = pytest.mark.timeout(900)


class EpochsTrained(keras.callbacks.Callback):
    """Rank 0 appends ``<learning rate> <epoch>`` for each epoch it trains to ``path``."""

    def __init__(self, path):
        super().__init__()
        self.path = path

    def on_epoch_begin(self, epoch, logs=None):
        if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 0:
            rate = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))
            with open(self.path, "a") as f:
                f.write(f"{rate:.6g} {epoch}\n")


def _trained(path) -> dict:
    found: dict = {}
    with open(path) as f:
        for line in f:
            rate, epoch = line.split()
            found.setdefault(float(rate), []).append(int(epoch))
    return found


@pytest.fixture(scope="module")
def linear_frame(spark):
    X, y = data.linear_rows(120, seed=3)
    return data.frame(spark, data.rows(X, y), "features array<double>, label double") \
        .repartition(2).cache()


def test_the_search_picks_what_train_validation_split_picks_training_no_epoch_twice(
        spark, linear_frame, tmp_path, caplog):
    """The same grid, rows and evaluator: every trial that reached maxEpochs scores what
    TrainValidationSplit scores for it (the same fit, continued across rungs, to float
    precision), and both pick the same learning rate. Each trial trained the epochs of the
    rungs it reached, each once."""
    caplog.set_level(logging.INFO, logger="sparktf")
    log = str(tmp_path / "epochs")
    est = TFEstimator(modelFn=models.linear, numWorkers=1, batchSize=30, shuffle=True, seed=2,
                      callbacks=[EpochsTrained(log)], modelDir=str(tmp_path / "m"))
    rates = [0.3, 0.1, 0.03, 0.001]
    grid = ParamGridBuilder().addGrid(est.learningRate, rates).build()
    evaluator = RegressionEvaluator(metricName="rmse")
    search = HalvingSearch(estimator=est, estimatorParamMaps=grid, evaluator=evaluator,
                           minEpochs=1, maxEpochs=4, reductionFactor=2, parallelism=2, seed=7)
    found = search.fit(linear_frame)
    trained = _trained(log)
    os.remove(log)

    tvs = TrainValidationSplit(estimator=est.copy({est.epochs: 4}), estimatorParamMaps=grid,
                               evaluator=evaluator, seed=7, parallelism=2).fit(linear_frame)
    records = {r["trial"]: r for r in found.trialRecords}
    print("search:", *records.values(), sep="\n")
    print("TrainValidationSplit:", tvs.validationMetrics)
    assert found.bestParams[est.learningRate] == rates[int(np.argmin(tvs.validationMetrics))]
    at_max = [r for r in records.values() if r["rungEpochs"] and r["rungEpochs"][-1] == 4]
    assert at_max, "some trial reached maxEpochs"
    for record in at_max:
        np.testing.assert_allclose(record["metrics"][-1], tvs.validationMetrics[record["trial"]],
                                   rtol=1e-6)
    for index, rate in enumerate(rates):  # no epoch twice; the epochs of its rungs
        record = records[index]
        assert trained[rate] == list(range(record["rungEpochs"][-1])), (rate, trained[rate])
        assert record["epochs"] == record["rungEpochs"][-1]
    assert sum(len(v) for v in trained.values()) < 4 * len(rates)
    assert sorted(len(r["rungEpochs"]) for r in records.values()) == [1, 1, 2, 3]
    text = caplog.text
    assert "promoted" in text and "stops at 1 epochs" in text
    frame = found.trials
    assert frame.count() == 4 and frame.filter("best").count() == 1
    assert {"learningRate", "epochs", "metrics", "stopReason"} <= set(frame.columns)
    both = found.bestModel.transform(found.transform(linear_frame).withColumnRenamed(
        "prediction", "by_search"))  # the same rows, however a collect orders them
    rows = both.select("by_search", "prediction").collect()
    np.testing.assert_allclose([r.by_search for r in rows], [r.prediction for r in rows])


def broken_on_executors(hparams):
    if "TF_CONFIG" in os.environ:
        raise RuntimeError("a bug in this trial's modelFn")
    return models.linear(hparams)


def nan_model(hparams):
    model = models.linear(hparams)
    if hparams.get("kind") == "nan":
        inputs = keras.Input((3,))
        model = keras.Sequential([inputs, keras.layers.Dense(1),
                                  keras.layers.Lambda(lambda x: x * float("nan"))])
        model.compile(optimizer="adam", loss="mse")
    if hparams.get("kind") == "broken" and "TF_CONFIG" in os.environ:
        raise RuntimeError("a bug in this trial's modelFn")
    return model


def test_failed_and_nan_trials_are_recorded_and_stopped_and_all_failing_fails(
        spark, linear_frame, tmp_path):
    est = TFEstimator(modelFn=nan_model, numWorkers=1, batchSize=30, validationFraction=0.25,
                      learningRate=0.1)
    kinds = [{"kind": "ok"}, {"kind": "nan"}, {"kind": "broken"}, {"kind": "ok", "x": 1}]
    grid = ParamGridBuilder().addGrid(est.hyperParams, kinds).build()
    found = HalvingSearch(estimator=est, estimatorParamMaps=grid, metric="val_loss",
                          minEpochs=1, maxEpochs=2, reductionFactor=2).fit(linear_frame)
    records = {r["trial"]: r for r in found.trialRecords}
    print(*records.values(), sep="\n")
    assert records[1]["stopReason"].startswith("failed: its val_loss was nan")
    assert records[2]["stopReason"].startswith("failed: TaskFailedError")
    assert "a bug in this trial's modelFn" in records[2]["stopReason"]
    assert found.bestTrial in (0, 3) and records[found.bestTrial]["rungEpochs"] == [1, 2]

    everything_broken = ParamGridBuilder().addGrid(est.hyperParams, [
        {"kind": "broken"}, {"kind": "broken", "x": 2}]).build()
    with pytest.raises(sparktf.SparkTFError, match="Every trial of the search failed"):
        HalvingSearch(estimator=est, estimatorParamMaps=everything_broken, minEpochs=1,
                      maxEpochs=2).fit(linear_frame)


def decaying(hparams):
    """A learning rate decayed over the whole fit: the model depends on its epochs."""
    model = models.linear(hparams)
    model.compile(optimizer=keras.optimizers.Adam(keras.optimizers.schedules.CosineDecay(
        0.1, decay_steps=hparams["epochs"] * 4)), loss="mse")
    return model


def binary_iou(hparams):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, "sigmoid")])
    model.compile(keras.optimizers.SGD(hparams["learningRate"]), "binary_crossentropy",
                  metrics=[keras.metrics.BinaryIoU()])
    return model


def test_metric_mode_auto_maximises_what_keras_maximises(spark):
    """Issue 53 item 2: on val_binary_io_u the search kept the trial of the lower IoU
    (the maximised names had 'iou'; Keras names it 'io_u')."""
    X, y = data.linear_rows(160, seed=5)
    frame = data.frame(spark, data.rows(X, (y > 1.0).astype(float)),
                       "features array<double>, label double").repartition(2)
    est = TFEstimator(modelFn=binary_iou, numWorkers=1, batchSize=20, seed=1,
                      validationFraction=0.25)
    grid = [{est.learningRate: rate} for rate in (1e-7, 0.5)]
    found = HalvingSearch(estimator=est, estimatorParamMaps=grid, metric="val_binary_io_u",
                          minEpochs=1, maxEpochs=2, reductionFactor=2,
                          parallelism=2).fit(frame)
    print(*found.trialRecords, sep="\n")
    first = {r["trial"]: r["metrics"][0] for r in found.trialRecords}
    assert first[1] > first[0], "the trials' own IoUs after the first rung"
    assert found.bestTrial == 1 and found.bestParams[est.learningRate] == 0.5
    assert [len(r["rungEpochs"]) for r in found.trialRecords] == [1, 2]


class StopAfter(keras.callbacks.Callback):
    def __init__(self, epochs):
        super().__init__()
        self.epochs = epochs

    def on_epoch_end(self, epoch, logs=None):
        if epoch + 1 >= self.epochs:
            self.model.stop_training = True


def test_trials_their_callbacks_stopped_say_so_and_train_no_further(spark, linear_frame):
    """Found by review: a trial stopped by its callbacks in the last rung was 'trained to
    maxEpochs', and one stopped exactly at a rung was promoted to a job that trained
    nothing."""
    est = TFEstimator(modelFn=models.linear, numWorkers=1, batchSize=30,
                      validationFraction=0.25)
    grid = [{est.learningRate: r} for r in (0.3, 0.1, 0.01)]
    found = HalvingSearch(estimator=est.copy({est.callbacks: [StopAfter(2)]}), seed=1,
                          estimatorParamMaps=grid, minEpochs=1, maxEpochs=3,
                          parallelism=1).fit(linear_frame)
    [top] = [r for r in found.trialRecords if len(r["rungEpochs"]) == 2]
    print(top)
    assert top["epochs"] == 2 and top["stopReason"] == "stopped by its callbacks after 2 epochs"
    found = HalvingSearch(estimator=est.copy({est.callbacks: [StopAfter(2)]}), seed=1,
                          estimatorParamMaps=grid, minEpochs=2, maxEpochs=6,
                          parallelism=1).fit(linear_frame)
    print(found.trialRecords)
    assert [r["rungEpochs"] for r in found.trialRecords] == [[2], [2], [2]]
    assert {r["stopReason"] for r in found.trialRecords} == {
        "stopped by its callbacks after 2 epochs"}


def test_bad_searches_are_refused_before_any_job(spark, linear_frame):
    est = TFEstimator(modelFn=models.linear, numWorkers=1)
    grid = ParamGridBuilder().addGrid(est.epochs, [1, 2]).build()
    with pytest.raises(sparktf.InvalidInputError, match="set minEpochs and maxEpochs"):
        HalvingSearch(estimator=est, estimatorParamMaps=grid, maxEpochs=3).fit(linear_frame)
    with pytest.raises(sparktf.InvalidInputError, match="Received neither"):
        HalvingSearch(estimator=est, maxEpochs=3).fit(linear_frame)
    with pytest.raises(sparktf.InvalidInputError, match="needs numTrials"):
        HalvingSearch(estimator=est, paramDistributions={est.learningRate: logUniform(1e-3, 1)},
                      maxEpochs=3).fit(linear_frame)
    with pytest.raises(sparktf.InvalidInputError, match="minEpochs <= maxEpochs"):
        HalvingSearch(estimator=est, estimatorParamMaps=[{}], minEpochs=4,
                      maxEpochs=3).fit(linear_frame)
    with pytest.raises(sparktf.InvalidInputError, match="maxEpochs, which is unset and so "
                                                        "the estimator's epochs=1"):
        HalvingSearch(estimator=est, estimatorParamMaps=[{}], minEpochs=2).fit(linear_frame)
    with pytest.raises(sparktf.InvalidInputError, match="must not depend on hparams"):
        HalvingSearch(estimator=est.copy({est.modelFn: decaying}), estimatorParamMaps=[{}],
                      metric="loss", maxEpochs=3).fit(linear_frame)
    with pytest.raises(sparktf.InvalidInputError, match="holds out no rows"):
        HalvingSearch(estimator=est, estimatorParamMaps=[{}], metric="val_loss",
                      maxEpochs=2).fit(linear_frame)
    with pytest.raises(sparktf.InvalidInputError, match="set modelDir on the estimator"):
        HalvingSearch(estimator=est, estimatorParamMaps=[{}], metric="loss", maxEpochs=2,
                      runId="nightly").fit(linear_frame)
    with pytest.raises(sparktf.InvalidInputError, match="runId names a folder"):
        HalvingSearch(estimator=est, estimatorParamMaps=[{}], metric="loss", maxEpochs=2,
                      runId="../up").fit(linear_frame)
    with pytest.raises(sparktf.InvalidInputError, match="low < high and low > 0"):
        logUniform(0, 1)
    with pytest.raises(sparktf.InvalidInputError, match="Pipeline whose last stage"):
        HalvingSearch(estimator=RegressionEvaluator(), estimatorParamMaps=[{}]).fit(
            linear_frame)


class Hold(keras.callbacks.Callback):
    """Holds its fit before the first epoch until the task's process is killed."""

    def on_train_begin(self, logs=None):
        import threading
        threading.Event().wait()


def _fails_beside_a_held_trial(linear_frame, tmp_path):
    """A search whose trial 1 raises the search's own error (a metric the history lacks:
    with metricMode set, the driver does not look for it in the model) while trial 0 is
    held (it never ends unless cancelled)."""
    est = TFEstimator(modelFn=models.linear, numWorkers=1, batchSize=30,
                      modelDir=str(tmp_path / "m"))
    grid = [{est.callbacks: [Hold()]}, {}]
    with pytest.raises(sparktf.InvalidInputError, match="'mse' is not in the fit's history"):
        HalvingSearch(estimator=est, estimatorParamMaps=grid, metric="mse", metricMode="min",
                      minEpochs=2, maxEpochs=2, parallelism=2).fit(linear_frame)


def test_an_error_of_the_search_not_of_a_trial_cancels_the_running_trials(
        spark, linear_frame, tmp_path):
    """A metric the history lacks is the search's error, not a trial's: raised, and the
    trial running beside it (held: it would never end) is cancelled, not awaited: its run
    never finishes. (It was a slow trial, which a delayed start let finish first.)"""
    _fails_beside_a_held_trial(linear_frame, tmp_path)
    [search] = os.listdir(tmp_path / "m")
    assert os.path.exists(tmp_path / "m" / search / "trial-001" / "result.json")
    assert not os.path.exists(tmp_path / "m" / search / "trial-000" / "result.json")


@pytest.mark.timeout(240)
def test_a_trial_that_starts_its_job_after_the_cancel_is_cancelled_too(
        spark, linear_frame, tmp_path, monkeypatch):
    """The race a fresh make test hung on: the search's error cancels its jobs while the
    held trial is still preparing its fit; its job, submitted after that cancel, must be
    cancelled too (it was not: the search waited for it forever). The held trial here
    starts its fit only once the search has cancelled."""
    import threading

    from sparktf._driver import sessions
    from sparktf.ml.tuning import trials

    cancelled = threading.Event()
    cancel, train = sessions.Session.cancel_tag, trials.Trials.train

    def cancel_tag(session, tag):
        cancel(session, tag)
        cancelled.set()

    def train_after_the_cancel(runner, index, epochs):
        if index == 0:  # the held trial
            cancelled.wait(120)
        return train(runner, index, epochs)

    monkeypatch.setattr(sessions.Session, "cancel_tag", cancel_tag)
    monkeypatch.setattr(trials.Trials, "train", train_after_the_cancel)
    _fails_beside_a_held_trial(linear_frame, tmp_path)
    assert cancelled.is_set()
    [search] = os.listdir(tmp_path / "m")
    assert not os.path.exists(tmp_path / "m" / search / "trial-000" / "result.json")


def test_a_pipeline_sampled_trials_mlflow_child_runs_and_persistence(spark, tmp_path):
    mlflow = pytest.importorskip("mlflow", reason="pip install 'sparktf[mlflow]'")
    from pyspark.ml import Pipeline, PipelineModel
    from pyspark.ml.feature import StandardScaler
    from pyspark.ml.functions import array_to_vector, vector_to_array

    X, y = data.linear_rows(120, seed=4)
    frame = data.frame(spark, data.rows(X, y), "raw array<double>, label double") \
        .select(array_to_vector("raw").alias("raw"), "label").cache()
    scaler = StandardScaler(inputCol="raw", outputCol="features")
    est = TFEstimator(modelFn=models.linear, numWorkers=1, batchSize=30,
                      validationFraction=0.25, hyperParams={"width": 3})
    pipeline = Pipeline(stages=[scaler, est])
    search = HalvingSearch(estimator=pipeline, numTrials=4, seed=5, minEpochs=1, maxEpochs=3,
                           paramDistributions={est.learningRate: logUniform(1e-3, 0.3),
                                               "units": choice([4, 8]),
                                               scaler.withMean: [True, False]})
    with conftest.mlflow_experiment(tmp_path, "sparktf-search"):
        with mlflow.start_run() as parent:
            found = search.fit(frame)
        _check_runs(mlflow.MlflowClient(), parent, found)
        served = mlflow.pyfunc.load_model(f"runs:/{parent.info.run_id}/model",
                                       dst_path=str(tmp_path))  # the best
        scaled = found.bestModel.stages[0].transform(frame).select("features").toPandas()
        np.testing.assert_allclose(
            served.predict(scaled)["prediction"].tolist(),
            [r.prediction for r in found.bestModel.transform(frame).collect()], rtol=1e-6)
    assert isinstance(found.bestModel, PipelineModel)
    assert isinstance(found.bestModel.stages[-1], sparktf.ml.TFModel)

    found.write().save(str(tmp_path / "found"))
    loaded = HalvingSearchModel.load(str(tmp_path / "found"))
    assert loaded.trialRecords == json.loads(json.dumps(found.trialRecords))
    assert {p.name: v for p, v in loaded.bestParams.items()} == \
        {p.name: v for p, v in found.bestParams.items()}
    scored = found.transform(frame).select(vector_to_array("features")[0], "prediction")
    assert loaded.transform(frame).select(vector_to_array("features")[0], "prediction") \
        .collect() == scored.collect()

    search.write().save(str(tmp_path / "search"))
    again = HalvingSearch.load(str(tmp_path / "search"))
    assert again.getOrDefault("numTrials") == 4 and again.getMaxEpochs() == 3
    assert [type(s).__name__ for s in again.getEstimator().getStages()] == \
        ["StandardScaler", "TFEstimator"]
    assert sorted(str(k) if isinstance(k, str) else k.name
                  for k in again.getParamDistributions()) == ["learningRate", "units",
                                                              "withMean"]
    assert again.trial_maps() == search.trial_maps() or \
        [{p.name: v for p, v in m.items()} for m in again.trial_maps()] == \
        [{p.name: v for p, v in m.items()} for m in search.trial_maps()]
    assert "reductionFactor" in again.explainParams()
    assert again.copy().getEstimator() is not again.getEstimator()
    fitted = Pipeline(stages=[search]).fit(frame)  # a stage of a Pipeline itself
    assert fitted.transform(frame).count() == frame.count()


def _check_runs(client, parent, found):
    """A child run per trial with its Params, per-epoch metrics and stop reason; the
    parent has the search's Params, the best metric and the best model."""
    children = client.search_runs([parent.info.experiment_id],
                                  f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert len(children) == len(found.trialRecords)
    for child in children:
        record = found.trialRecords[int(child.data.tags["trial"])]
        assert child.data.tags["stopReason"] == record["stopReason"]
        assert child.data.params["epochs_trained"] == str(record["epochs"])
        assert child.data.params["learningRate"] == str(record["params"]["learningRate"])
        losses = client.get_metric_history(child.info.run_id, "loss")
        assert [m.step for m in losses] == list(range(1, record["epochs"] + 1))
        np.testing.assert_allclose([m.value for m in losses], record["history"]["loss"])
    logged = client.get_run(parent.info.run_id)
    assert "best_metric" in logged.data.metrics and "search.maxEpochs" in logged.data.params


def test_autolog_makes_the_parent_run_and_trial_fits_open_no_runs_of_their_own(
        spark, linear_frame, tmp_path):
    """``mlflow.pyspark.ml.autolog()`` opens a run around the search's fit (the trials'
    fits, in the search's threads, are nested fits that autolog leaves alone): that run is
    the parent, with a child run per trial, and no trial opens a run of its own."""
    mlflow = pytest.importorskip("mlflow", reason="pip install 'sparktf[mlflow]'")
    autolog = pytest.importorskip("mlflow.pyspark.ml").autolog

    est = TFEstimator(modelFn=models.linear, numWorkers=1, batchSize=30,
                      validationFraction=0.25)
    grid = ParamGridBuilder().addGrid(est.learningRate, [0.3, 0.1, 0.01, 0.001]).build()
    search = HalvingSearch(estimator=est, estimatorParamMaps=grid, metric="val_loss",
                           minEpochs=1, maxEpochs=2, reductionFactor=2, parallelism=2)
    autolog(log_models=False, silent=True)
    try:
        with conftest.mlflow_experiment(tmp_path, "sparktf-autolog") as experiment:
            found = search.fit(linear_frame)
            client = mlflow.MlflowClient()
            runs = client.search_runs([experiment])
            top = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
            assert len(top) == 1, [(r.info.run_id, r.data.tags) for r in runs]
            [parent] = top
            assert mlflow.active_run() is None  # autolog's run ended with the fit
            assert parent.info.status == "FINISHED"
            _check_runs(client, parent, found)
            assert len(runs) == 1 + len(found.trialRecords)
    finally:
        autolog(disable=True)


class Lost(BaseException):
    """The driver is gone (as if killed): nothing after it runs."""


def test_a_search_lost_with_its_driver_resumes_into_the_uninterrupted_search(
        spark, linear_frame, tmp_path, monkeypatch, caplog):
    """runId: the driver lost twice, once after it wrote a job's start (the job had not
    begun) and once before it wrote a finished job's result; the third fit of the search
    replays its journal and ends with the uninterrupted search's trials, metrics and best
    model, each epoch trained once (a job whose fit finished before the loss returns its
    run's result)."""
    caplog.set_level(logging.INFO, logger="sparktf")
    rates = [0.3, 0.1, 0.03, 0.001]

    def search(name):
        est = TFEstimator(modelFn=models.linear, numWorkers=1, batchSize=30, shuffle=True,
                          seed=2, validationFraction=0.25, modelDir=str(tmp_path / "m"),
                          callbacks=[EpochsTrained(str(tmp_path / name))])
        grid = ParamGridBuilder().addGrid(est.learningRate, rates).build()
        return HalvingSearch(estimator=est, estimatorParamMaps=grid, metric="val_loss",
                             minEpochs=1, maxEpochs=4, reductionFactor=2, parallelism=1,
                             seed=7, runId=f"search-{name}")

    whole = search("whole").fit(linear_frame)
    record, decisions = search_journal.Journal.record, iter(range(1, 100))

    def lost_after_3_and_at_8(journal, kind, trial, **values):
        n = next(decisions)
        if n == 8:  # a report: the trial's fit finished, the decision is not written
            raise Lost(f"the driver is lost before it writes decision {n} ({kind})")
        record(journal, kind, trial, **values)
        if n == 3:  # a start: the job is written, its fit not begun
            raise Lost(f"the driver is lost after it wrote decision {n} ({kind})")

    monkeypatch.setattr(search_journal.Journal, "record", lost_after_3_and_at_8)
    lost = search("lost")
    for _ in range(2):
        with pytest.raises(Lost):
            lost.copy().fit(linear_frame)
    resumed = lost.copy().fit(linear_frame)
    assert next(decisions) > 10  # it went on recording after the second loss

    print("whole:  ", *whole.trialRecords, sep="\n")
    print("resumed:", *resumed.trialRecords, sep="\n")
    resumed_lines = [line for line in caplog.text.splitlines() if "resumes from" in line]
    assert len(resumed_lines) == 2 and all("1 job that was running" in line
                                           for line in resumed_lines), resumed_lines
    for a, b in zip(resumed.trialRecords, whole.trialRecords, strict=True):
        assert {k: v for k, v in a.items() if k not in ("metrics", "history")} == \
            {k: v for k, v in b.items() if k not in ("metrics", "history")}
        np.testing.assert_allclose(a["metrics"], b["metrics"], rtol=1e-6)
        for key in b["history"]:
            np.testing.assert_allclose(a["history"][key], b["history"][key], rtol=1e-6)
    assert resumed.bestTrial == whole.bestTrial
    trained_whole, trained_lost = _trained(tmp_path / "whole"), _trained(tmp_path / "lost")
    assert trained_lost == trained_whole, (trained_lost, trained_whole)  # each epoch once
    # both models score the same rows (two collects of a repartitioned frame need not
    # return its rows in the same order)
    both = whole.transform(resumed.transform(linear_frame).withColumnRenamed("prediction",
                                                                             "resumed"))
    rows = both.select("resumed", "prediction").collect()
    np.testing.assert_allclose([r.resumed for r in rows], [r.prediction for r in rows],
                               rtol=1e-6)

    # the same runId asked otherwise: refused, naming what differs (what every trial's fit
    # shares, too, which no trial's run may have been asked yet)
    other = lost.copy()
    other.getEstimator().setBatchSize(20)
    with pytest.raises(sparktf.InvalidInputError, match=r"other settings.*estimator\.batchSize: "
                                                        r"30 then, 20 now"):
        other.fit(linear_frame)
    with pytest.raises(sparktf.InvalidInputError, match=r"seed: 7 then, 8 now"):
        lost.copy({lost.seed: 8}).fit(linear_frame)
