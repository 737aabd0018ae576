"""Porting a TensorFlow program: TensorFlow's distributed-training tutorials, their body in
``main(args, ctx)`` and nothing else changed, through ``sparktf.run`` on real executors
(``tutorials.py``). Keras 3's own ``model.fit`` under ``MultiWorkerMirroredStrategy``
equals Keras's single-process ``fit`` (full-batch steps); the parameter-server tutorial
runs in ``scripts/async_jobs.py`` (it needs more task slots than this session has)."""

import numpy as np
import pytest

import sparktf
from tests.integration import tutorials

EPOCHS = 3


def assert_float32_equal(actual, desired, err_msg=""):
    """Equal to float32 precision. Workers sum a gradient in halves where one process sums
    it whole, so each value may differ by a few float32 ulps of the largest term it was
    summed from, not of itself: an element near 0 among elements near 3 (a prediction of
    -0.0104 among others to -2.9 once differed by 2.1e-7, a run in many). The tolerance is
    relative to the array's scale, a 1e-6 of its largest element."""
    desired = np.asarray(desired, dtype=np.float64)
    scale = float(np.max(np.abs(desired))) if desired.size else 0.0
    np.testing.assert_allclose(actual, desired, rtol=1e-6, atol=max(1e-6 * scale, 1e-7),
                               err_msg=err_msg)


@pytest.fixture(scope="module")
def alone():
    return tutorials.keras_fit_alone(EPOCHS)


@pytest.mark.parametrize("workers", [1, 2])
def test_keras_3_fit_under_multi_worker_mirrored_strategy_equals_keras_fit_alone(
        spark, alone, workers):
    results = sparktf.run(spark, tutorials.keras_fit, {"epochs": EPOCHS}, numWorkers=workers)
    assert [r["workers"] for r in results] == [workers] * workers
    for rank, found in enumerate(results):
        for key in ("loss", "val_loss", "mae", "val_mae"):
            gap = np.abs(np.array(found["history"][key]) - alone["history"][key]).max()
            print(f"{workers} worker(s), rank {rank}, {key}: {found['history'][key]} "
                  f"(alone {alone['history'][key]}, largest difference {gap:.1e})")
            assert_float32_equal(found["history"][key], alone["history"][key])
        np.testing.assert_allclose(found["evaluate"], alone["evaluate"], rtol=1e-6)
        for mine, theirs in zip(found["weights"], alone["weights"]):
            assert_float32_equal(mine, theirs)
        assert_float32_equal(found["predict"], alone["predict"])
    assert alone["history"]["loss"][-1] < 0.7 * alone["history"]["loss"][0]  # it learns


# each path alone is the same code as with the other: both (2, 4), and the steps alone
@pytest.mark.parametrize("accumulate, steps_per_execution", [(None, 2), (2, 4)])
def test_keras_3_fit_accumulating_or_running_steps_per_execution_equals_keras_fit_alone(
        spark, accumulate, steps_per_execution):
    """Issue 54: Keras's own fit with gradient_accumulation_steps fails under any
    tf.distribute strategy on CPUs (its accumulate-or-apply cond holds a merge_call), and
    with steps_per_execution > 1 under MultiWorkerMirroredStrategy (its while loop);
    sparktf's task processes call Keras's one-step functions from Python (keras_fixes)."""
    args = {"epochs": EPOCHS, "accumulate": accumulate, "steps": 4,
            "steps_per_execution": steps_per_execution}
    expected = tutorials.keras_fit_alone(EPOCHS, accumulate=accumulate, steps=4,
                                         steps_per_execution=steps_per_execution)
    for found in sparktf.run(spark, tutorials.keras_fit, args, numWorkers=2):
        print("2 workers:", found["history"], "\nalone:", expected["history"])
        for key in ("loss", "val_loss", "mae", "val_mae"):
            assert_float32_equal(found["history"][key], expected["history"][key], err_msg=key)
        for mine, theirs in zip(found["weights"], expected["weights"], strict=True):
            assert_float32_equal(mine, theirs)


def test_a_custom_training_loop_trains_the_same_model_on_every_worker(spark, tmp_path):
    results = sparktf.run(spark, tutorials.custom_loop,
                          {"epochs": 4, "model_dir": str(tmp_path)}, numWorkers=2)
    print([r["losses"] for r in results])
    assert results[0]["losses"] == results[1]["losses"]  # one loss, reduced across workers
    assert results[0]["losses"][-1] < results[0]["losses"][0] / 2
    assert [r["chief"] for r in results] == [True, False]
    import tensorflow as tf
    restored = tutorials.build_and_compile_model()
    tf.train.Checkpoint(model=restored).read(results[0]["checkpoint"]).expect_partial()
    x, y = tutorials.make_data()
    print("restored model's mse:", float(np.mean((restored.predict(x, verbose=0) - y) ** 2)))
    assert float(np.mean((restored.predict(x, verbose=0) - y) ** 2)) < results[0]["losses"][0]


F1_ROWS, F1_WORKERS = 48, 2


def f1_data(copies: int = 1):
    """Rows of three classes (one-hot labels), ``copies`` times over."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(F1_ROWS, 4)).astype("float32")
    y = np.eye(3, dtype="float32")[np.digitize(x[:, 0] + 0.5 * x[:, 1], [-0.5, 0.5])]
    return np.concatenate([x] * copies), np.concatenate([y] * copies)


def f1_fit(strategy, train, validation, epochs: int) -> dict:
    """Keras's fit of a classifier with ``F1Score(average=None)`` (a value per class); its
    history and every batch's logs as callbacks see them, vectors as lists."""
    import keras

    class BatchLogs(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.seen = {"train": [], "test": []}

        def on_train_batch_end(self, batch, logs=None):
            self.seen["train"].append(_lists(logs))

        def on_test_batch_end(self, batch, logs=None):
            self.seen["test"].append(_lists(logs))

    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                                  keras.layers.Dense(3, activation="softmax")])
        model.compile(optimizer=keras.optimizers.SGD(0.2), loss="categorical_crossentropy",
                      metrics=["accuracy", keras.metrics.F1Score(average=None, threshold=0.5)])
    logs = BatchLogs()
    history = model.fit(train, validation_data=validation, epochs=epochs, steps_per_epoch=2,
                        validation_steps=1, callbacks=[logs], verbose=0)
    return {"history": _lists(history.history), "batches": logs.seen}


def _lists(logs: dict) -> dict:
    return {k: np.asarray(v).tolist() for k, v in (logs or {}).items()}


def keras_fit_with_f1(args, ctx):
    """On every worker the same rows, so that each worker's own running metrics (what a
    step's logs hold under any strategy: Keras averages them across the replicas) are those
    of the whole global batch, and the batch logs can equal one process's."""
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    x, y = f1_data()

    def rows(_input_context):
        return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(F1_ROWS)

    return f1_fit(strategy, strategy.distribute_datasets_from_function(rows),
                  strategy.distribute_datasets_from_function(rows), args["epochs"])


def test_keras_3_fit_keeps_a_vector_metric_a_vector_in_every_batch_s_logs(spark):
    """Issue 53: under MultiWorkerMirroredStrategy the batch logs' F1Score(average=None)
    was the mean of its elements (0.1005 where one process has [0.0, 0.3103, 0.0]): the
    keras#20585 fix reduced a vector along axis 0. Keras's fit alone on the same rows (the
    global batch: every worker's rows) is the oracle, history and batch logs."""
    import tensorflow as tf

    results = sparktf.run(spark, keras_fit_with_f1, {"epochs": EPOCHS}, numWorkers=F1_WORKERS)
    x, y = f1_data(copies=F1_WORKERS)
    batches = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(len(x))
    alone = f1_fit(tf.distribute.get_strategy(), batches, batches, EPOCHS)
    print("alone:", alone, "\nrank 0:", results[0])
    assert np.shape(alone["batches"]["train"][0]["f1_score"]) == (3,)
    for rank, found in enumerate(results):
        assert found.keys() == alone.keys()
        for part in ("train", "test"):
            assert len(found["batches"][part]) == len(alone["batches"][part]), part
            for mine, theirs in zip(found["batches"][part], alone["batches"][part]):
                assert mine.keys() == theirs.keys(), (rank, part, mine, theirs)
                for key in theirs:
                    assert np.shape(mine[key]) == np.shape(theirs[key]), (rank, part, key)
                    assert_float32_equal(mine[key], theirs[key],
                                         err_msg=f"rank {rank}, {part} batch {key}")
        assert found["history"].keys() == alone["history"].keys()
        for key, values in alone["history"].items():
            assert_float32_equal(found["history"][key], values,
                                 err_msg=f"rank {rank}, history {key}")


def keras_fit_as_released(args, ctx):
    from sparktf.runtime.process import keras_fixes
    keras_fixes.undo(build=args["path"] == "build", reduce=args["path"] == "reduce",
                     steps=args["path"] in ("accumulate", "steps_per_execution"))
    return tutorials.keras_fit(args, ctx)


@pytest.mark.parametrize("path, error", [("build", "PerReplica"),
                                         ("reduce", "Invalid reduction dimension 0"),
                                         ("accumulate", "merge_call"),
                                         ("steps_per_execution", "InvalidArgumentError")])
def test_keras_still_fails_without_each_of_sparktf_s_fixes(spark, path, error):
    """keras-team/keras#20585: when one of these fails, Keras has fixed that path of its fit
    under MultiWorkerMirroredStrategy upstream: remove that fix from
    sparktf/runtime/process/keras_fixes.py (and its case here) for the Keras versions
    that have it."""
    import keras
    with pytest.raises(sparktf.TaskFailedError, match=error):
        sparktf.run(spark, keras_fit_as_released, {
            "epochs": 1, "path": path, "accumulate": 2 if path == "accumulate" else None,
            "steps_per_execution": 2 if path == "steps_per_execution" else 1}, numWorkers=2)
    print(f"Keras {keras.__version__} still fails fit without the {path} fix")


def test_a_keras_backend_other_than_tensorflow_is_refused_before_any_job(spark, monkeypatch):
    from sparktf.ml import TFEstimator
    from tests.integration import data, models

    X, y = data.linear_rows(40)
    df = data.frame(spark, data.rows(X, y), "features array<double>, label double")
    jobs = spark.sparkContext.statusTracker().getJobIdsForGroup()
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    with pytest.raises(sparktf.InvalidInputError, match="KERAS_BACKEND='jax'.*Unset it"):
        sparktf.run(spark, tutorials.keras_fit, {"epochs": 1}, numWorkers=1)
    for mode in ("stream", "parquet"):  # parquet: before its copy is written (review)
        with pytest.raises(sparktf.InvalidInputError, match="KERAS_BACKEND='jax'"):
            TFEstimator(modelFn=models.linear, numWorkers=1, inputMode=mode).fit(df)
    assert spark.sparkContext.statusTracker().getJobIdsForGroup() == jobs


def test_parameter_servers_with_an_evaluator_run_main_on_every_task_or_are_refused():
    """Found by the review: the evaluator ran the chief's program (every task's main but
    the ps and worker ones), which then took the chief's address."""
    with pytest.raises(sparktf.InvalidInputError, match="allTasks=True and branch on "
                                                        "ctx.jobName"):
        sparktf.run(None, tutorials.parameter_servers, {}, numWorkers=1, numPs=1,
                    evaluator=True)


def framework(args, ctx):
    import os

    import tensorflow as tf
    return {"TF_USE_LEGACY_KERAS": os.environ.get("TF_USE_LEGACY_KERAS"),
            "tf.keras": tf.keras.Sequential.__module__}


def test_tf_use_legacy_keras_set_on_the_driver_reaches_every_task(spark, monkeypatch):
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1")
    found = sparktf.run(spark, framework, numWorkers=2)
    print(found)
    assert [f["TF_USE_LEGACY_KERAS"] for f in found] == ["1", "1"]
    assert all(f["tf.keras"].startswith("tf_keras") for f in found)
    monkeypatch.delenv("TF_USE_LEGACY_KERAS")
    assert all(not f["tf.keras"].startswith("tf_keras")
               for f in sparktf.run(spark, framework, numWorkers=2))
