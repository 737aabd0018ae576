"""How ``KerasSteps`` calls a step (issue 54): the trace ``tf.function`` would run for a
batch's shapes, looked up once per shape and called directly. The traces are the ones a
call makes: a step that reads the static batch size (``x.shape[0]``) traces with it while
every batch is the same size, as under ``tf.function`` and Keras's ``fit`` on arrays
(from the review: tracing with the batch dimension unknown from the start refused it)."""

import numpy as np


def _model():
    import keras

    class Reshaping(keras.Model):
        def train_step(self, data):
            x, y = data[:2]
            flat = keras.ops.reshape(x, (x.shape[0] * 4,))  # the static batch size
            return super().train_step((keras.ops.reshape(flat, (-1, 4)), y))

    keras.utils.set_random_seed(0)
    inputs = keras.Input((4,))
    model = Reshaping(inputs, keras.layers.Dense(1)(inputs))
    model.compile(keras.optimizers.SGD(0.1), "mse")
    return model


def test_a_step_reading_the_static_batch_size_runs_and_traces_once_per_shape():
    import tensorflow as tf

    from sparktf.runtime.training import keras_steps

    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        model = _model()
    steps = keras_steps.KerasSteps(strategy, model)
    rng = np.random.default_rng(0)
    losses = []
    for _ in range(3):
        x = rng.normal(size=(8, 4)).astype("float32")
        losses.append(float(steps.train((x, x.sum(1, keepdims=True)), 1.0, reduce=True)["loss"]))
    traced = steps._functions[("train", True, None)]
    assert traced.experimental_get_tracing_count() == 1
    assert len(steps._traced) == 1 and np.isfinite(losses).all()
    # Keras's own steps on the same model and batches: the same weights after them
    alone = _model()
    rng = np.random.default_rng(0)
    for _ in losses:
        x = rng.normal(size=(8, 4)).astype("float32")
        alone.train_on_batch(x, x.sum(1, keepdims=True))
    for mine, theirs in zip(model.get_weights(), alone.get_weights(), strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=1e-6)
