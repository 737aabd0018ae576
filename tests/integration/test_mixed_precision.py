"""Mixed precision on several workers (issue 54): ``mixed_float16`` (Keras wraps the
optimizer in a ``LossScaleOptimizer``: its dynamic scale is state a resume must keep) and
``mixed_bfloat16`` (no loss scaling), set in ``modelFn``, with a half-precision output
layer. On 2 workers with full-batch steps the history equals Keras's single-process
``fit`` under the same policy to that precision; a fit lost after an epoch resumes into
the uninterrupted one to the bit; the export scores in float32."""

import os

import keras
import numpy as np
import pytest
from pyspark.sql import types as T

import sparktf
from sparktf.ml import TFEstimator
from tests.integration import data

ROWS, EPOCHS = 128, 3
# a few roundings of each precision (float16: 2^-11 relative, bfloat16: 2^-8); measured
# 2.4e-4 and 1.0e-3
TOLERANCE = {"mixed_float16": 2e-3, "mixed_bfloat16": 8e-3}


def mixed(hp):
    import keras

    keras.utils.set_random_seed(0)
    keras.mixed_precision.set_global_policy(hp["policy"])
    try:
        # the output layer in the policy's half precision too (Keras's guide makes it
        # float32): the export must still score in float32
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, activation="tanh"),
                                  keras.layers.Dense(1)])
        model.compile(keras.optimizers.SGD(0.1), "mse", metrics=["mae"])
    finally:
        keras.mixed_precision.set_global_policy("float32")
    return model


class LoseAfter(keras.callbacks.Callback):
    """Fails the fit once after epoch ``epoch`` (a marker file says it did)."""

    def __init__(self, marker, epoch):
        super().__init__()
        self.marker, self.epoch = marker, epoch

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.epoch and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            raise RuntimeError(f"the run is lost after epoch {epoch + 1}")


def _data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, 4)).astype("float32")
    return x, (np.tanh(x @ np.array([1.0, -2.0, 0.5, 3.0])) + 0.5).astype("float32")


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_on_two_workers_equals_keras_resumes_exactly_and_scores_float32(
        spark, tmp_path, policy):
    x, y = _data()
    alone = mixed({"policy": policy})
    expected = alone.fit(x, y, batch_size=ROWS, epochs=EPOCHS, shuffle=False,
                         verbose=0).history
    frame = data.frame(spark, [(x[i].tolist(), float(y[i])) for i in range(ROWS)],
                       "features array<float>, label float").repartition(2).cache()
    common = dict(modelFn=mixed, hyperParams={"policy": policy}, numWorkers=2,
                  batchSize=ROWS, epochs=EPOCHS, shuffle=False, verbose=0,
                  modelDir=str(tmp_path / "m"))
    whole = TFEstimator(runId="whole", **common).fit(frame)
    history = whole.getHistory()
    gaps = {k: float(np.max(np.abs(np.subtract(history[k], expected[k])) /
                            np.abs(expected[k]))) for k in ("loss", "mae")}
    print(f"{policy}: sparktf {history}\nKeras alone {expected}\nlargest relative "
          f"differences {gaps}")
    for key in ("loss", "mae"):
        np.testing.assert_allclose(history[key], expected[key], rtol=TOLERANCE[policy],
                                   err_msg=key)
    assert history["loss"][-1] < history["loss"][0]  # it learns
    trained = whole.getKerasModel()
    # Keras's loss scaling under mixed_float16 (compile wraps the optimizer), as here
    assert (type(alone.optimizer).__name__ == "LossScaleOptimizer") == (
        policy == "mixed_float16")

    # lost after epoch 1, resumed: the uninterrupted fit, to the bit. mixed_float16 only:
    # its LossScaleOptimizer's scale and counter are state of their own; mixed_bfloat16
    # keeps float32 variables and no more state than a float32 fit (test_resume_exact)
    if policy == "mixed_float16":
        _resumes_into(frame, common, tmp_path, history, trained)

    # the export scores in float32 (its signature's output; the model's is half), what
    # the trained model predicts
    import tensorflow as tf

    outputs = tf.saved_model.load(whole.getModelPath()).signatures[
        "serving_default"].structured_outputs
    assert [o.dtype for o in outputs.values()] == [tf.float32], outputs
    assert trained.outputs[0].dtype == policy.split("_")[1]
    scored = whole.transform(frame)
    assert scored.schema["prediction"].dataType == T.DoubleType()  # as pyspark.ml's
    got = np.array([r.prediction for r in scored.orderBy("features").collect()])
    rows = np.array([r.features for r in frame.orderBy("features").collect()], "float32")
    want = trained.predict(rows, verbose=0).reshape(-1).astype("float32")
    print(f"{policy}: largest |transform - predict| {np.abs(got - want).max():.1e}")
    np.testing.assert_allclose(got, want, rtol=TOLERANCE[policy] / 4, atol=1e-3)


def _resumes_into(frame, common, tmp_path, history, trained):
    run = TFEstimator(runId="run", callbacks=[LoseAfter(str(tmp_path / "lost"), 0)], **common)
    with pytest.raises(sparktf.TaskFailedError, match="lost after epoch 1"):
        run.fit(frame)
    resumed = run.fit(frame)
    assert resumed.getHistory() == history
    for a, b in zip(resumed.getKerasModel().get_weights(), trained.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


def overflowing(hp):
    import keras

    keras.utils.set_random_seed(0)
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, activation="tanh"),
                                  keras.layers.Dense(1, dtype="float32")])
        model.compile(keras.optimizers.SGD(1e-4), "mse")
    finally:
        keras.mixed_precision.set_global_policy("float32")
    return model


@pytest.mark.timeout(300)  # before: it hung
def test_a_step_that_overflows_on_one_worker_only_is_skipped_by_every_worker(spark):
    """Keras decides on each worker's own gradients whether a step overflowed: the worker
    whose gradients did skipped the step, the other waited for it in the all-reduce, and
    the fit hung at its first step. Every worker now takes the decision of one process on
    the whole batch: the loss scale halves until the steps fit, as Keras's alone."""
    from tests.integration import plan_oracle

    x, y = _data()
    y[ROWS // 2:] *= 300.0  # worker 1's rows: errors whose scaled gradients overflow
    alone = overflowing({})
    expected = alone.fit(x, y, batch_size=ROWS, epochs=8, shuffle=False, verbose=0).history
    half = ROWS // 2
    frame = plan_oracle.identity_partitioned(
        spark, [[(x[i].tolist(), float(y[i])) for i in range(a, a + half)] for a in (0, half)],
        "features array<float>, label float")
    fitted = TFEstimator(modelFn=overflowing, numWorkers=2, batchSize=ROWS, epochs=8,
                         shuffle=False, verbose=0).fit(frame)
    history = fitted.getHistory()
    print(f"sparktf {history['loss']}\nalone   {expected['loss']}")
    assert len(set(expected["loss"])) > 1  # some steps were skipped, then some applied
    np.testing.assert_allclose(history["loss"], expected["loss"], rtol=2e-3)


def _keras_fit_overflowing(args, ctx):
    """Keras's own fit under MultiWorkerMirroredStrategy, worker 1's rows overflowing."""
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    x, y = _data()
    y[ROWS // 2:] *= 300.0
    half = slice(0, ROWS // 2) if ctx.rank == 0 else slice(ROWS // 2, ROWS)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    # each worker its own half: 64 rows a step over both (32 each), 2 steps an epoch
    data = (tf.data.Dataset.from_tensor_slices((x[half], y[half])).batch(64).repeat()
            .with_options(options))
    with strategy.scope():
        model = overflowing({})
    return model.fit(data, epochs=6, steps_per_epoch=2, verbose=0).history["loss"]


@pytest.mark.timeout(300)  # before: it hung
def test_sparktf_run_keras_fit_overflowing_on_one_worker_only_finishes(spark):
    losses = sparktf.run(spark, _keras_fit_overflowing, numWorkers=2)
    print(losses)
    assert losses[0] == losses[1] and len(losses[0]) == 6  # one decision on every worker
    assert len(set(losses[0])) > 1  # skipped steps, then applied ones
