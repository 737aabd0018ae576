"""TFEstimator.fit on a real local-cluster Spark with real TensorFlow."""

import json
import logging
import os
import re
import time

import keras
import numpy as np
import pytest
from pyspark.ml.evaluation import MulticlassClassificationEvaluator
from pyspark.ml.feature import OneHotEncoder, VectorAssembler
from pyspark.ml.functions import array_to_vector

import sparktf
from sparktf.ml import TFEstimator, TFModel
from tests import conftest
from tests.integration import data, models, plan_oracle

pytestmark = pytest.mark.timeout(600)


def _epoch_rows(caplog):
    return [int(m.group(1)) for r in caplog.records
            for m in [re.search(r"epoch \d+/\d+ .*\((\d+) rows", r.getMessage())] if m]


def _consecutive(spark, records: list, parts: list[int], schema: str):
    """``records`` in consecutive partitions of ``parts`` rows, in order (with
    ``shuffle=False`` each worker feeds one partition: ``plan_oracle.consecutive_steps``)."""
    bounds = np.cumsum([0, *parts])
    return plan_oracle.identity_partitioned(
        spark, [records[a:b] for a, b in zip(bounds[:-1], bounds[1:])], schema)


def _assert_equal_histories(ours: dict, keras: dict):
    diffs = plan_oracle.differences(ours, keras)
    print(f"\nlargest relative difference per value against Keras's fit: {diffs}")
    assert set(ours) == set(keras) and max(diffs.values()) < 2e-4, (ours, keras)


def test_regression_from_vectors_equals_keras_on_the_same_global_batches(spark, tmp_path,
                                                                           caplog):
    caplog.set_level(logging.INFO, logger="sparktf")
    X, y = data.linear_rows(400)
    parts = [150, 250]
    df = _consecutive(spark, data.rows(X, y), parts, "x array<double>, label double")
    df = df.withColumn("features", array_to_vector("x"))
    est = TFEstimator(modelFn=models.linear, numWorkers=2, epochs=3, batchSize=64,
                      learningRate=0.05, shuffle=False, modelDir=str(tmp_path / "m"))
    model = est.fit(df)
    assert isinstance(model, TFModel)
    export = os.path.dirname(model.getModelPath())
    assert export.startswith(str(tmp_path / "m" / "fit-")) and export.endswith("export")
    assert os.path.isdir(os.path.join(export, "saved_model"))
    keras_model, keras_history = plan_oracle.keras_fit(
        models.linear, {"learningRate": 0.05}, X, y, plan_oracle.consecutive_steps(parts, 64),
        epochs=3)
    _assert_equal_histories(model.getHistory(), keras_history)
    inside = os.path.join(export, "saved_model", "assets.extra", "sparktf_model.keras")
    exported = keras.saving.load_model(inside).get_weights()  # travels with the SavedModel
    for ours, theirs in zip(exported, keras_model.get_weights(), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-6)
    assert _epoch_rows(caplog) == [400] * 3  # every row, every epoch


def test_a_layer_whose_state_syncs_on_read_exports_on_two_workers(spark):
    """Found by the review of a chief-only export (not kept): a layer's on-read state is
    all-reduced when the SavedModel is written, so every worker exports with the chief;
    a chief exporting alone waited for workers that had left (a hang)."""
    X, y = data.linear_rows(200)
    df = data.frame(spark, data.rows(X, y), "features array<double>, label double")
    model = TFEstimator(modelFn=models.linear_with_on_read_state, numWorkers=2, epochs=1,
                        batchSize=50).fit(df)
    shift = [w for w in model.getKerasModel().weights if w.name == "shift"]
    assert len(shift) == 1
    assert np.abs(shift[0].numpy()).max() > 0  # the workers' last batch means, averaged
    assert model.transform(df).count() == 200


def test_digits_fit_and_scores_equal_keras_on_the_same_global_batches(spark):
    Xtr, Xte, ytr, yte = data.digits_split()
    parts = [len(Xtr) // 2, len(Xtr) - len(Xtr) // 2]
    train = _consecutive(spark, [(x.tolist(), int(t)) for x, t in zip(Xtr, ytr)], parts,
                         "features array<float>, label long")
    test = data.frame(spark, [(i, x.tolist(), int(t)) for i, (x, t) in
                      enumerate(zip(Xte, yte))],
                     "id long, features array<float>, label long")
    est = TFEstimator(modelFn=models.digits_mlp, numWorkers=2, epochs=3, batchSize=64,
                      learningRate=3e-3, shuffle=False, seed=3)
    model = est.fit(train)
    keras_model, keras_history = plan_oracle.keras_fit(
        models.digits_mlp, {"learningRate": 3e-3}, Xtr, ytr,
        plan_oracle.consecutive_steps(parts, 64), epochs=3)
    _assert_equal_histories(model.getHistory(), keras_history)
    scored = model.transform(test)
    assert scored.columns == ["id", "features", "label", "prediction", "probability",
                              "rawPrediction"]
    rows = sorted(scored.select("id", "prediction", "probability").collect(),
                  key=lambda r: r.id)
    expected = keras_model.predict(Xte, verbose=0)
    np.testing.assert_allclose([r.probability.toArray() for r in rows], expected, atol=1e-5)
    distributed = MulticlassClassificationEvaluator(metricName="accuracy").evaluate(scored)
    single = float((expected.argmax(1) == yte).mean())
    print(f"accuracy: sparktf {distributed:.4f}, Keras {single:.4f}")
    assert abs(distributed - single) <= 1 / len(yte)  # a near tie may fall either way


def test_sparse_vectors_arrays_and_validation_metrics(spark):
    rng = np.random.default_rng(1)
    cats = rng.integers(0, 3, 600)
    values = rng.normal(size=600)
    label = values * 2 + np.array([0.0, 1.0, -1.0])[cats]
    df = data.frame(spark, [(int(c), float(v), float(t)) for c, v, t in
                    zip(cats, values, label)], "cat long, v double, label double")
    onehot = OneHotEncoder(inputCols=["cat"], outputCols=["cat_vec"], dropLast=False).fit(df)
    df = VectorAssembler(inputCols=["cat_vec", "v"], outputCol="features").transform(
        onehot.transform(df))  # sparse rows from the encoder, dense or sparse after assembly
    est = TFEstimator(modelFn=models.linear, hyperParams={"width": 4}, numWorkers=2,
                      epochs=30, batchSize=32, learningRate=0.05, validationFraction=0.2,
                      seed=5)
    history = est.fit(df).getHistory()
    assert set(history) == {"loss", "mae", "val_loss", "val_mae"}
    assert history["val_loss"][-1] < 0.05


def test_multi_input_model_with_input_cols_equals_keras(spark):
    X, y = data.linear_rows(300)
    parts = [100, 200]
    df = _consecutive(spark, [(i, [float(a), float(b)], float(c), float(t))
                              for i, ((a, b, c), t) in enumerate(zip(X, y))], parts,
                      "id long, ab array<double>, c double, label double")
    est = TFEstimator(modelFn=models.two_inputs, inputCols=["ab", "c"], numWorkers=2,
                      epochs=3, batchSize=32, learningRate=0.05, shuffle=False)
    model = est.fit(df)
    assert model.getInputMapping() == {"ab": "a", "c": "b"}
    inputs = {"a": X[:, :2], "b": X[:, 2:]}
    keras_model, keras_history = plan_oracle.keras_fit(
        models.two_inputs, {"learningRate": 0.05}, inputs, y,
        plan_oracle.consecutive_steps(parts, 32), epochs=3)
    _assert_equal_histories(model.getHistory(), keras_history)
    scored = sorted(model.transform(df).select("id", "prediction").collect(),
                    key=lambda r: r.id)
    np.testing.assert_allclose([r.prediction for r in scored],
                               keras_model.predict(inputs, verbose=0)[:, 0],
                               rtol=1e-4, atol=1e-5)


def test_ten_to_one_partition_skew_uses_every_row_as_keras_does(spark, caplog):
    caplog.set_level(logging.INFO, logger="sparktf")
    X, y = data.linear_rows(1100, seed=2)
    skewed = _consecutive(spark, data.rows(X, y), [1000, 100],
                          "features array<double>, label double")
    est = TFEstimator(modelFn=models.linear, numWorkers=2, epochs=3, batchSize=50,
                      learningRate=0.05, shuffle=False)
    model = est.fit(skewed)
    assert _epoch_rows(caplog) == [1100] * 3
    _assert_equal_histories(model.getHistory(), plan_oracle.keras_history(
        models.linear, {"learningRate": 0.05}, X, y,
        plan_oracle.consecutive_steps([1000, 100], 50), epochs=3))


class RecordEpochs(keras.callbacks.Callback):
    """Writes one file per (rank, epoch) into a shared folder."""

    def __init__(self, folder):
        super().__init__()
        self.folder = folder

    def on_epoch_end(self, epoch, logs=None):
        rank = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
        with open(os.path.join(self.folder, f"rank{rank}-epoch{epoch}.json"), "w") as f:
            json.dump(logs, f)


def test_callbacks_get_epoch_hooks_on_every_worker(spark, tmp_path):
    X, y = data.linear_rows(400)
    df = data.frame(spark, data.rows(X, y), "features array<double>, label double")
    est = TFEstimator(modelFn=models.linear, numWorkers=2, epochs=3, batchSize=32,
                      callbacks=[RecordEpochs(str(tmp_path))])
    history = est.fit(df).getHistory()
    files = sorted(os.listdir(tmp_path))
    assert files == [f"rank{r}-epoch{e}.json" for r in (0, 1) for e in range(3)]
    with open(tmp_path / "rank1-epoch2.json") as f:
        assert json.load(f)["loss"] == pytest.approx(history["loss"][2])


class StopOnOneWorker(keras.callbacks.Callback):
    """Asks to stop on worker 1 only: after epoch ``epoch`` (or its batch ``batch``)."""

    def __init__(self, epoch, batch=None):
        super().__init__()
        self.epoch, self.batch = epoch, batch

    def _mine(self):
        return json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 1

    def on_epoch_end(self, epoch, logs=None):
        if self.batch is None and epoch == self.epoch and self._mine():
            self.model.stop_training = True

    def on_train_batch_end(self, batch, logs=None):
        if self.batch is not None and batch == self.batch and self._mine():
            self.model.stop_training = True


class RecordBatchLogs(keras.callbacks.Callback):
    """Keeps every batch's logs (TerminateOnNaN-style callbacks read them)."""

    seen: list = []

    def on_train_batch_end(self, batch, logs=None):
        RecordBatchLogs.seen.append(dict(logs or {}))
        assert set(logs) == {"loss", "mae"} and np.isfinite(logs["loss"]), logs


@pytest.mark.parametrize("stop,epochs_run", [(StopOnOneWorker(1), 2),
                                             (StopOnOneWorker(0, batch=2), 1)])
def test_one_worker_asking_to_stop_stops_every_worker_at_the_same_point(spark, stop,
                                                                        epochs_run):
    X, y = data.linear_rows(400)
    df = data.frame(spark, data.rows(X, y), "features array<double>, label double")
    est = TFEstimator(modelFn=models.linear, numWorkers=2, epochs=6, batchSize=32,
                      callbacks=[stop, RecordBatchLogs()], stallTimeout=120.0)
    history = est.fit(df).getHistory()  # a worker left behind would stall: no timeout here
    assert len(history["loss"]) == epochs_run


def test_tf_keras_models_train_with_their_own_fit(spark, tmp_path):
    X, y = data.linear_rows(1200)
    df = data.frame(spark, data.rows(X, y), "features array<double>, label double")
    est = TFEstimator(modelFn=models.tf_keras_linear, numWorkers=2, epochs=10, batchSize=64,
                      learningRate=0.1, validationFraction=0.1, seed=2,
                      modelDir=str(tmp_path / "m"))
    model = est.fit(df)
    history = model.getHistory()
    assert {"loss", "mae", "val_loss", "val_mae"} <= set(history)
    assert len(history["loss"]) == 10 and history["loss"][-1] < 0.01
    scored = model.transform(df).select("label", "prediction").toPandas()
    np.testing.assert_allclose(scored["prediction"], scored["label"], atol=0.2)


def test_tf_keras_takes_tokens_of_any_length_and_an_input_named_grosse(spark):
    """Found by the second review: a tf_keras model's dataset was typed from its first
    batch (a later, longer batch failed), and an input named größe failed at export."""
    import tensorflow as tf
    seqs = [[1, 2, 3], [4], [5, 6, 7, 8, 9, 1, 2], [3, 3]] * 6
    rows = [(s, float(i % 3), float(len(s))) for i, s in enumerate(seqs)]
    df = data.frame(spark, rows, "tokens array<int>, `größe` double, label double")
    model = TFEstimator(modelFn=models.tf_keras_tokens_and_size, inputCols=["größe", "tokens"],
                        numWorkers=2, epochs=2, batchSize=4, verbose=0).fit(df)
    mapping = model.getInputMapping()
    assert mapping["tokens"] == "tokens" and mapping["größe"].isascii(), mapping
    assert all(np.isfinite(model.getHistory()["loss"]))
    serve = tf.saved_model.load(model.getModelPath()).signatures["serving_default"]
    scored = model.transform(df.limit(8)).collect()
    alone = [float(next(iter(serve(tokens=tf.constant([r.tokens], tf.int32), **{
        mapping["größe"]: tf.constant([[r["größe"]]], tf.float32)}).values()))[0, 0])
        for r in scored]
    np.testing.assert_allclose([r.prediction for r in scored], alone, rtol=1e-5, atol=1e-6)


def test_tensorboard_event_files_hold_the_epoch_scalars(spark, tmp_path):
    import glob

    import tensorflow as tf

    X, y = data.linear_rows(400)
    df = data.frame(spark, data.rows(X, y), "features array<double>, label double")
    model = TFEstimator(modelFn=models.linear, numWorkers=2, epochs=3, batchSize=32,
                        validationFraction=0.2, seed=4, summarySteps=4,
                        modelDir=str(tmp_path / "m")).fit(df)
    fit_dir = os.path.dirname(os.path.dirname(model.getModelPath()))
    history = model.getHistory()
    found = {}
    for split, prefix in (("train", ""), ("validation", "val_")):
        files = glob.glob(os.path.join(fit_dir, "logs", split, "events.out.tfevents.*"))
        assert len(files) == 1, files
        scalars = found[split] = {}
        for event in tf.compat.v1.train.summary_iterator(files[0]):
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append(
                    (event.step, float(tf.make_ndarray(value.tensor))))
        assert {"epoch_loss", "epoch_mae"} <= set(scalars), scalars.keys()
        assert [step for step, _ in scalars["epoch_loss"]] == [1, 2, 3]
        np.testing.assert_allclose([v for _, v in scalars["epoch_loss"]],
                                   history[prefix + "loss"], rtol=1e-5)
    # summarySteps=4: the training loss every 4th global step (~10 steps an epoch, 3 epochs)
    steps = [step for step, _ in found["train"]["batch_loss"]]
    assert len(steps) >= 6 and steps == list(range(4, 4 * len(steps) + 1, 4)), steps
    assert all(np.isfinite(v) for _, v in found["train"]["batch_loss"])
    assert "batch_loss" not in found["validation"]
    # each worker's own and waited seconds an epoch (issue 54), as getWorkerTimes has them
    files = glob.glob(os.path.join(fit_dir, "logs", "workers", "events.out.tfevents.*"))
    assert len(files) == 1, files
    workers: dict = {}
    for event in tf.compat.v1.train.summary_iterator(files[0]):
        for value in event.summary.value:
            workers.setdefault(value.tag, []).append(
                (event.step, float(tf.make_ndarray(value.tensor))))
    times = model.getWorkerTimes()
    for key in ("own_seconds", "wait_seconds"):
        for rank in (0, 1):
            assert workers[f"{key}/rank_{rank}"] == [
                (epoch, pytest.approx(epoch_times[rank], rel=1e-6))
                for epoch, epoch_times in zip(times["epoch"], times[key])]


def test_tensorboard_server_shows_the_fits_until_stopped(spark, tmp_path, caplog):
    import urllib.error
    import urllib.request

    from sparktf import tensorboard

    caplog.set_level(logging.INFO, logger="sparktf")
    X, y = data.linear_rows(200)
    df = data.frame(spark, data.rows(X, y), "features array<double>, label double")
    model_dir = str(tmp_path / "m")
    model = TFEstimator(modelFn=models.linear, numWorkers=2, epochs=2, batchSize=32,
                        modelDir=model_dir, tensorboard=True).fit(df)
    url = tensorboard.running()[model_dir]
    assert any(url in r.getMessage() for r in caplog.records)  # the URL is printed
    fit_name = os.path.basename(os.path.dirname(os.path.dirname(model.getModelPath())))
    # TensorBoard rescans its logdir every 5 s (no blocking way to wait for a scan):
    # ask again until the fit's run shows, for at most 30 s
    deadline, runs = time.monotonic() + 30, []
    while f"{fit_name}/logs/train" not in runs and time.monotonic() < deadline:
        with urllib.request.urlopen(url + "data/runs", timeout=30) as response:
            runs = json.loads(response.read())
        if f"{fit_name}/logs/train" not in runs:
            time.sleep(1)
    assert f"{fit_name}/logs/train" in runs, runs
    loaders = conftest.pids_with(f"--logdir={model_dir}")  # TensorBoard's data server
    assert loaders, "TensorBoard started no data server (tensorboard-data-server missing?)"
    tensorboard.stop(model_dir)
    assert model_dir not in tensorboard.running()
    # nothing answers any more: the connection is refused, or (gVisor's network stack,
    # measured: 131 of 200 tries right after a listener closes) reset unanswered
    with pytest.raises((urllib.error.URLError, ConnectionResetError)):
        urllib.request.urlopen(url, timeout=5)
    assert conftest.wait_gone(loaders, 30) == []


def test_parquet_input_mode_equals_stream_mode_and_keras_and_reuses_its_copy(spark, tmp_path,
                                                                             caplog):
    caplog.set_level(logging.INFO, logger="sparktf")
    X, y = data.linear_rows(600, seed=6)
    source = str(tmp_path / "table")
    data.frame(spark, data.rows(X, y), "features array<double>, label double") \
        .write.parquet(source)
    df = spark.read.parquet(source)
    # full-batch steps: whichever worker reads which rows, each step is Keras's step
    common = dict(modelFn=models.linear, numWorkers=2, epochs=3, batchSize=600,
                  learningRate=0.05, seed=9, modelDir=str(tmp_path / "m"))
    stream = TFEstimator(inputMode="stream", **common).fit(df).getHistory()
    parquet_est = TFEstimator(inputMode="parquet", **common)
    parquet = parquet_est.fit(df).getHistory()
    keras_history = plan_oracle.keras_history(models.linear, {"learningRate": 0.05}, X, y,
                                              [np.arange(600)], epochs=3)
    _assert_equal_histories(stream, keras_history)
    _assert_equal_histories(parquet, keras_history)
    written = [r.getMessage() for r in caplog.records if "writes the training data" in
               r.getMessage()]
    assert len(written) == 1
    copies = os.listdir(tmp_path / "m" / "data")
    assert len(copies) == 1
    parquet_est.setEpochs(1).fit(df)  # the same files again: the copy is reused
    assert any("reuses the copy" in r.getMessage() for r in caplog.records)
    assert os.listdir(tmp_path / "m" / "data") == copies


def test_parquet_input_mode_never_trains_on_a_stale_copy(spark, tmp_path, caplog):
    """A table whose files changed is copied again; a frame that is not a file scan gets
    a copy of its own, removed after the fit."""
    caplog.set_level(logging.INFO, logger="sparktf")
    source, folder = str(tmp_path / "table"), tmp_path / "m" / "data"
    est = TFEstimator(modelFn=models.linear, numWorkers=2, epochs=1, batchSize=64,
                      learningRate=0.05, inputMode="parquet", modelDir=str(tmp_path / "m"))
    X, _ = data.linear_rows(400, seed=1)

    def table(label):
        data.frame(spark, data.rows(X, np.full(len(X), label)),
                   "features array<double>, label double") \
            .write.mode("overwrite").parquet(source)
        return spark.read.parquet(source)

    before = est.fit(table(0.0)).getHistory()["loss"][0]
    after = est.fit(table(100.0)).getHistory()["loss"][0]
    assert before < 10 and after > 5000, (before, after)  # the new labels were trained on
    assert any("input files changed" in r.getMessage() for r in caplog.records)
    assert len(os.listdir(folder)) == 1  # replaced, not added
    in_memory = data.frame(spark, data.rows(X, np.full(len(X), 3.0)),
                           "features array<double>, label double")
    assert est.fit(in_memory).getHistory()["loss"][0] > 1
    assert len(os.listdir(folder)) == 1  # its own copy is gone


class _Snapshots(keras.callbacks.Callback):
    """The weights after each epoch."""

    def __init__(self):
        super().__init__()
        self.weights = []

    def on_epoch_end(self, epoch, logs=None):
        self.weights.append(self.model.get_weights())


def test_keep_best_file_callbacks_and_early_stopping_keep_what_keras_keeps(spark, tmp_path,
                                                                          tmp_path_factory):
    """keepBest='loss' exports the best epoch's weights (the history names it), Keras's file
    callbacks write once, from the chief, what Keras's fit writes, and
    EarlyStopping(restore_best_weights=True) exports the restored weights, as Keras's fit
    leaves them on the same global batches (an Adam step of 0.5: the epochs' loss goes up
    and down)."""
    import glob
    import tempfile
    X, y = data.linear_rows(120)
    parts, batch, rate = [60, 60], 40, 0.5
    df = _consecutive(spark, data.rows(X, y), parts, "features array<double>, label double")
    steps = plan_oracle.consecutive_steps(parts, batch)
    common = dict(modelFn=models.linear, numWorkers=2, epochs=5, batchSize=batch,
                  learningRate=rate, shuffle=False)

    snapshots = _Snapshots()
    keras_model = models.linear({"learningRate": rate})
    keras_csv = str(tmp_path_factory.mktemp("keras") / "keras.csv")
    keras_history = keras_model.fit(plan_oracle.planned_batches(X, y, steps), epochs=5,
                                    shuffle=False, verbose=0, callbacks=[
                                        snapshots, keras.callbacks.CSVLogger(keras_csv)]).history
    best = int(np.argmin(keras_history["loss"])) + 1
    assert best < 5, keras_history  # the data make the best epoch not the last
    private = set(glob.glob(os.path.join(tempfile.gettempdir(), "sparktf-callbacks-*")))
    files = [keras.callbacks.ModelCheckpoint(str(tmp_path / "best.keras"), monitor="loss",
                                             save_best_only=True),
             keras.callbacks.ModelCheckpoint(str(tmp_path / "w-{epoch}.weights.h5"),
                                             save_weights_only=True),
             keras.callbacks.CSVLogger(str(tmp_path / "log.csv")),
             keras.callbacks.TensorBoard(str(tmp_path / "tb"))]
    kept = TFEstimator(keepBest="loss", callbacks=files, **common).fit(df)
    history = kept.getHistory()
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["best.keras", "log.csv", "tb", *[f"w-{e}.weights.h5" for e in range(1, 6)]])
    with open(tmp_path / "log.csv") as f, open(keras_csv) as g:
        logged, by_keras = ([line.split(",") for line in h.read().splitlines()] for h in (f, g))
    assert logged[0] == by_keras[0] and len(logged) == len(by_keras) == 6  # Keras's columns
    loss = logged[0].index("loss")
    np.testing.assert_allclose([float(r[loss]) for r in logged[1:]],
                               [float(r[loss]) for r in by_keras[1:]], rtol=1e-5)
    best_file = keras.saving.load_model(str(tmp_path / "best.keras")).get_weights()
    last = models.linear({"learningRate": rate})
    last.load_weights(str(tmp_path / "w-5.weights.h5"))
    # the other worker wrote to a folder of its own, gone with its task
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "sparktf-callbacks-*"))) <= private
    assert history.pop("best_epoch") == [best]
    _assert_equal_histories(history, {k: [float(v) for v in vs]
                                      for k, vs in keras_history.items()})
    for exported, saved, theirs in zip(kept.getKerasModel().get_weights(), best_file,
                                       snapshots.weights[best - 1], strict=True):
        np.testing.assert_allclose(exported, theirs, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(saved, theirs, rtol=1e-4, atol=1e-6)
    for saved, theirs in zip(last.get_weights(), snapshots.weights[-1], strict=True):
        np.testing.assert_allclose(saved, theirs, rtol=1e-4, atol=1e-6)

    def stopping():
        return keras.callbacks.EarlyStopping(monitor="loss", patience=1,
                                             restore_best_weights=True)
    keras_model = models.linear({"learningRate": rate})
    stopped = keras_model.fit(plan_oracle.planned_batches(X, y, steps), epochs=5,
                              shuffle=False, verbose=0, callbacks=[stopping()]).history
    ours = TFEstimator(callbacks=[stopping()], **common).fit(df)
    assert len(ours.getHistory()["loss"]) == len(stopped["loss"]) < 5
    for mine, theirs in zip(ours.getKerasModel().get_weights(), keras_model.get_weights(),
                            strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-6)


def test_keep_best_without_validation_rows_and_backup_and_restore_are_refused(spark,
                                                                              tmp_path):
    df = data.frame(spark, data.rows(*data.linear_rows(8)),
                    "features array<double>, label double")
    with pytest.raises(sparktf.InvalidInputError, match="keepBest='val_loss' is a validation"):
        TFEstimator(modelFn=models.linear, keepBest="val_loss").fit(df)
    # a value whose direction Keras cannot give: refused on the driver, not in the task
    with pytest.raises(sparktf.InvalidInputError, match=r"logs no 'mse'.*Set "
                                                        r"keepBestMode='max' or"):
        TFEstimator(modelFn=models.linear, keepBest="mse").fit(df)
    assert TFEstimator(modelFn=models.linear, keepBest="mae").fit(df).getHistory()[
        "best_epoch"] == [1]
    backup = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))
    with pytest.raises(sparktf.InvalidInputError, match="BackupAndRestore cannot restore"):
        TFEstimator(modelFn=models.linear, callbacks=[backup]).fit(df)
