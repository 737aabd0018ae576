"""The conformance cases: model kinds that TFEstimator must train exactly as Keras's ``fit``.

Each case builds a compiled model (shipped to executors by value, like ``models``)
and the data for it. The test trains it with ``TFEstimator`` and with
``model.fit(..., shuffle=False)`` on the same rows and compares every history value
and the predictions.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

ROWS = 240


def _seeded():
    import keras
    keras.utils.set_random_seed(0)
    return keras


def sequential_sgd(hp):
    """The regression scenario: plain SGD, where a wrong loss scale shows at once."""
    keras = _seeded()
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="tanh"),
                              keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
    return model


def functional_embedding(hp):
    """Two inputs, one of them integer ids through an Embedding; a classifier."""
    keras = _seeded()
    ids = keras.Input((1,), dtype="int32", name="ids")
    numbers = keras.Input((4,), name="numbers")
    embedded = keras.layers.Flatten()(keras.layers.Embedding(5, 3)(ids))
    hidden = keras.layers.Dense(8, activation="relu")(keras.layers.Concatenate()([embedded,
                                                                                  numbers]))
    model = keras.Model([ids, numbers], keras.layers.Dense(3, activation="softmax")(hidden))
    model.compile(optimizer=keras.optimizers.Adam(0.01),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def subclassed(hp):
    """A subclassed model: no variables until it is built."""
    keras = _seeded()

    class TwoLayers(keras.Model):
        def __init__(self):
            super().__init__()
            self.hidden = keras.layers.Dense(
                8, activation="tanh", kernel_initializer=keras.initializers.GlorotUniform(1))
            self.out = keras.layers.Dense(
                1, kernel_initializer=keras.initializers.GlorotUniform(2))

        def call(self, x):
            return self.out(self.hidden(x))

    model = TwoLayers()
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
    return model


def custom_train_step(hp, run_eagerly: bool = False):
    """A model with its own train_step, which also tracks the mean absolute prediction.
    ``run_eagerly``: compiled so, its step has a Python ``if`` on a tensor, which Keras's
    fit runs eagerly and sparktf must trace with autograph."""
    keras = _seeded()
    import tensorflow as tf

    class WithAbsPred(keras.Model):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.abs_pred = keras.metrics.Mean(name="abs_pred")

        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
                self._loss_tracker.update_state(loss * self.distribute_strategy
                                                .num_replicas_in_sync,
                                                sample_weight=tf.shape(y)[0])
                loss = self.optimizer.scale_loss(loss)
            grads = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
            if not run_eagerly or tf.shape(y)[0] > 0:  # a tensor as a Python bool
                self.abs_pred.update_state(tf.abs(y_pred))
            return self.compute_metrics(x, y, y_pred)

        @property
        def metrics(self):
            return [*super().metrics, self.abs_pred]

    inputs = keras.Input((4,))
    model = WithAbsPred(inputs, keras.layers.Dense(1)(keras.layers.Dense(8, "tanh")(inputs)))
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"],
                  run_eagerly=run_eagerly)
    return model


def custom_train_step_eager(hp):
    return custom_train_step(hp, run_eagerly=True)


def l2_regularized(hp):
    keras = _seeded()
    l2 = keras.regularizers.L2(0.01)
    model = keras.Sequential([keras.Input((4,)),
                              keras.layers.Dense(8, activation="tanh", kernel_regularizer=l2),
                              keras.layers.Dense(1, kernel_regularizer=l2)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
    return model


def batch_norm(hp):
    keras = _seeded()
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8),
                              keras.layers.BatchNormalization(), keras.layers.Activation("tanh"),
                              keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
    return model


def batch_norm_synchronized(hp):
    """The global batch's statistics on every worker: one process's on the same batch."""
    keras = _seeded()
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8),
                              keras.layers.BatchNormalization(synchronized=True),
                              keras.layers.Activation("tanh"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
    return model


def mixed_float16(hp):
    """Mixed precision: Keras wraps the optimizer in a LossScaleOptimizer."""
    keras = _seeded()
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="tanh"),
                                  keras.layers.Dense(1, dtype="float32")])
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
    finally:
        keras.mixed_precision.set_global_policy("float32")
    return model


def lr_schedule(hp):
    keras = _seeded()
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=1, decay_rate=0.7)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="tanh"),
                              keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(schedule), loss="mse", metrics=["mae"])
    return model


def ema(hp):
    """Exponential moving average of the weights: they replace the weights after fit."""
    keras = _seeded()
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="tanh"),
                              keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.05, use_ema=True, ema_momentum=0.5),
                  loss="mse", metrics=["mae"])
    return model


def weighted_classifier(hp):
    keras = _seeded()
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(3, activation="softmax")])
    model.compile(optimizer=keras.optimizers.SGD(0.2), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"], weighted_metrics=["accuracy"])
    return model


def f1_classifier(hp):
    """A vector metric: ``F1Score(average=None)`` is one value per class (left out when
    ``hp["f1"]`` is false, to compare the other values with a fit without it)."""
    keras = _seeded()
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(3, activation="softmax")])
    metrics = ["accuracy"]
    if hp.get("f1", True):
        metrics.append(keras.metrics.F1Score(average=None, threshold=0.5))
    model.compile(optimizer=keras.optimizers.SGD(0.2), loss="categorical_crossentropy",
                  metrics=metrics)
    return model


def tf_keras_f1_classifier(hp):
    """``f1_classifier`` built with tf_keras (Keras 2), which sparktf trains with its own fit."""
    import tf_keras
    tf_keras.utils.set_random_seed(0)
    model = tf_keras.Sequential([tf_keras.Input((4,)),
                                 tf_keras.layers.Dense(8, activation="relu"),
                                 tf_keras.layers.Dense(3, activation="softmax")])
    model.compile(optimizer=tf_keras.optimizers.SGD(0.2), loss="categorical_crossentropy",
                  metrics=["accuracy", tf_keras.metrics.F1Score(average=None, threshold=0.5)])
    return model


def halve_lr(epoch, lr):
    return lr * 0.5


@dataclasses.dataclass(frozen=True)
class Case:
    """One model kind: how to build it, its data, and what the fit is given."""

    name: str
    model_fn: Callable
    task: str = "regression"  # or "classification", "one_hot", "two_inputs"
    weights: bool = False  # a weightCol (Keras: sample_weight)
    class_weight: dict | None = None
    validation: bool = False
    callbacks: Callable[[], list] = lambda: []
    epochs: int = 4
    one_worker_only: bool = False  # batch statistics differ per worker (BatchNormalization)
    rtol: dict = dataclasses.field(default_factory=dict)  # workers -> tolerance, if not 1e-3
    floor: float = 1e-3  # values nearer zero are compared absolutely, at rtol x floor


def early_stopping():
    import keras
    return [keras.callbacks.EarlyStopping(monitor="loss", min_delta=1.0, patience=0)]


def lr_callback():
    import keras
    return [keras.callbacks.LearningRateScheduler(halve_lr)]


CASES = [
    Case("sequential", sequential_sgd),
    Case("functional, int embedding", functional_embedding, task="two_inputs"),
    Case("subclassed", subclassed),
    Case("own train_step", custom_train_step),
    Case("own train_step, run_eagerly", custom_train_step_eager),
    Case("L2-regularized", l2_regularized),
    Case("BatchNormalization", batch_norm, one_worker_only=True),
    Case("BatchNormalization(synchronized=True)", batch_norm_synchronized, validation=True),
    # fp16 activations round differently when the rows are split over workers: one fp16
    # step (~1e-3 near 1) in the predictions; the history itself agrees to ~3e-5
    Case("mixed_float16", mixed_float16, rtol={2: 2e-3}, floor=1.0),
    Case("lr schedule", lr_schedule),
    Case("EMA weights", ema),
    Case("LearningRateScheduler", sequential_sgd, callbacks=lr_callback),
    Case("sample weights + validation", weighted_classifier, task="classification",
         weights=True, validation=True),
    Case("class weights", weighted_classifier, task="classification",
         class_weight={0: 1.0, 1: 3.0, 2: 0.5}),
    Case("EarlyStopping", sequential_sgd, callbacks=early_stopping, epochs=8),
]


def data(case: Case, rows: int = ROWS) -> dict[str, np.ndarray]:
    """Columns for ``case``: features ``x`` (and ``ids``), ``label``, ``weight``, ``val``."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=(rows, 4)).astype(np.float32)
    out = {"x": x}
    if case.task == "regression":
        out["label"] = (x @ np.array([2.0, -3.0, 0.5, 1.0]) + 1.0).astype(np.float32)
    else:
        score = x[:, 0] + 0.5 * x[:, 1]
        out["label"] = np.digitize(score, [-0.5, 0.5]).astype(np.int64)
        if case.task == "one_hot":
            out["label"] = np.eye(3, dtype=np.float32)[out["label"]]
    if case.task == "two_inputs":
        out["ids"] = rng.integers(0, 5, rows).astype(np.int64)
        out["label"] = ((out["ids"] + (x[:, 0] > 0)) % 3).astype(np.int64)
    out["weight"] = rng.uniform(0.2, 3.0, rows).astype(np.float32)
    out["val"] = np.arange(rows) % 4 == 0 if case.validation else np.zeros(rows, bool)
    return out
