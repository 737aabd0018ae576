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
            np.testing.assert_allclose(found["history"][key], alone["history"][key],
                                       rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(found["evaluate"], alone["evaluate"], rtol=1e-6)
        for mine, theirs in zip(found["weights"], alone["weights"]):
            np.testing.assert_allclose(mine, theirs, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(found["predict"], alone["predict"], rtol=1e-6, atol=1e-7)
    assert alone["history"]["loss"][-1] < 0.7 * alone["history"]["loss"][0]  # it learns


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


def keras_fit_as_released(args, ctx):
    from sparktf.runtime.process import keras_fixes
    keras_fixes.undo(build=args["path"] == "build", reduce=args["path"] == "reduce")
    return tutorials.keras_fit(args, ctx)


@pytest.mark.parametrize("path, error", [("build", "PerReplica"),
                                         ("reduce", "Invalid reduction dimension 0")])
def test_keras_still_fails_without_each_of_sparktf_s_fixes(spark, path, error):
    """keras-team/keras#20585: when one of these fails, Keras has fixed that path of its fit
    under MultiWorkerMirroredStrategy upstream: remove that fix from
    sparktf/runtime/process/keras_fixes.py (and its case here) for the Keras versions
    that have it."""
    import keras
    with pytest.raises(sparktf.TaskFailedError, match=error):
        sparktf.run(spark, keras_fit_as_released, {"epochs": 1, "path": path}, numWorkers=2)
    print(f"Keras {keras.__version__} still fails fit without the {path} fix")


def test_a_keras_backend_other_than_tensorflow_is_refused_before_any_job(spark, monkeypatch):
    from sparktf.ml import TFEstimator
    from tests.integration import data, models

    X, y = data.linear_rows(40)
    df = spark.createDataFrame(data.rows(X, y), "features array<double>, label double")
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
