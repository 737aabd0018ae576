"""The distributed train and eval steps over a user's compiled Keras 3 model.

Keras 3's own ``fit`` fails under ``MultiWorkerMirroredStrategy`` (PerReplica
values reach code that expects tensors), so the steps here call the compiled
model's own pieces (``compute_loss``, its optimizer, ``compute_metrics``) inside
``strategy.run``. The optimizer sums gradients across replicas, so each
replica's mean loss is weighted by its share of the global batch.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def check_compiled(model) -> None:
    """Raises ``TypeError`` unless ``model`` is a compiled Keras 3 or tf_keras model."""
    import keras

    from sparktf.runtime import tf_keras_fit
    if tf_keras_fit.is_tf_keras(model):
        tf_keras_fit.check_compiled(model)
        return
    if not isinstance(model, keras.Model):
        raise TypeError("modelFn must return a compiled keras.Model (Keras 3). "
                        f"Received: {type(model).__module__}.{type(model).__name__}")
    if getattr(model, "optimizer", None) is None or not getattr(model, "compiled", False):
        raise TypeError("modelFn returned a keras.Model that is not compiled. Call "
                        "model.compile(optimizer=..., loss=..., metrics=[...]) in modelFn "
                        "before returning it.")


def input_specs(model) -> list[tuple[tuple[int, ...] | None, str | None]]:
    """(shape without batch, dtype) of each model input, or (None, None) where unknown."""
    try:
        inputs = model.inputs
    except (AttributeError, ValueError):
        return []
    specs = []
    for tensor in inputs or []:
        shape = tuple(tensor.shape[1:])
        known = all(isinstance(d, int) for d in shape)
        specs.append((shape if known else None, getattr(tensor, "dtype", None)))
    return specs


def input_conversion(row_shape: tuple[int, ...], kind: str, spec
                     ) -> tuple[tuple[int, ...] | None, str | None]:
    """How a feature column feeds its model input ``spec`` = (shape, dtype): the row
    shape to reshape to and the dtype to cast to, each None when nothing is needed.

    A flat vector becomes e.g. ``[8, 8, 1]`` when that is the input's shape, and
    a scalar column becomes ``[1]``; integer and boolean columns (numpy ``kind``
    i, u, b) feeding float inputs are cast. One rule for numpy batches
    (``to_model_inputs``) and for input pipelines built in the graph.
    """
    shape, dtype = spec
    reshape = (shape if shape is not None and row_shape != shape
               and math.prod(shape) == math.prod(row_shape) else None)
    cast = (str(dtype) if dtype is not None and str(dtype).startswith("float")
            and kind in "iub" else None)
    return reshape, cast


def to_model_inputs(arrays: Sequence[np.ndarray], specs) -> object:
    """Feature arrays shaped and typed for the model's inputs (one array or a list),
    as ``input_conversion`` says."""
    out = []
    for i, arr in enumerate(arrays):
        reshape, cast = input_conversion(arr.shape[1:], arr.dtype.kind,
                                         specs[i] if i < len(specs) else (None, None))
        if reshape is not None:
            arr = arr.reshape((arr.shape[0],) + reshape)
        if cast is not None:
            arr = arr.astype(cast)
        out.append(arr)
    return out[0] if len(out) == 1 else out


def check_input_widths(arrays: Sequence[np.ndarray], specs, columns: Sequence[str]) -> None:
    """Raises ``ValueError`` naming the column whose width cannot fit the model input."""
    if specs and len(specs) != len(arrays):
        raise ValueError(f"The model has {len(specs)} input(s) but {len(arrays)} feature "
                         f"column(s) were given: {list(columns)}. Use inputCols with one "
                         "column per model input, in order.")
    for arr, (shape, _), name in zip(arrays, specs, columns):
        if shape is None:
            continue
        width = math.prod(arr.shape[1:]) if arr.ndim > 1 else 1
        if width != math.prod(shape):
            raise ValueError(f"Column '{name}' has {width} value(s) per row but the model "
                             f"input expects shape {list(shape)} ({math.prod(shape)} values). "
                             "Check the feature column or the model's input shape.")


def _loss(model, x, y, y_pred, training: bool):
    import tensorflow as tf

    # reduce_sum: an empty batch yields an empty loss tensor; its sum is 0
    return tf.reduce_sum(model.compute_loss(x=x, y=y, y_pred=y_pred, training=training))


def train_on_batch(model, x, y, weight=1.0):
    """One replica's step (inside ``strategy.run``): applies the gradients of
    ``weight * loss``, updates the metrics, returns the unweighted mean loss."""
    import tensorflow as tf

    with tf.GradientTape() as tape:
        y_pred = model(x, training=True)
        loss = _loss(model, x, y, y_pred, True)
        scaled = loss * weight
    grads = tape.gradient(scaled, model.trainable_variables)
    model.optimizer.apply_gradients(zip(grads, model.trainable_variables))
    model.compute_metrics(x, y, y_pred, sample_weight=None)
    return loss


def make_steps(strategy, model):
    """(train_step, eval_step) as tf.functions; each returns the local mean loss."""
    import tensorflow as tf

    @tf.function(reduce_retracing=True)
    def train_step(x, y, weight):
        return strategy.run(lambda x, y, w: train_on_batch(model, x, y, w), args=(x, y, weight))

    @tf.function(reduce_retracing=True)
    def eval_step(x, y):
        def replica(x, y):
            y_pred = model(x, training=False)
            model.compute_metrics(x, y, y_pred, sample_weight=None)
            return _loss(model, x, y, y_pred, False)
        return strategy.run(replica, args=(x, y))

    return train_step, eval_step


def local_value(strategy, per_replica) -> float:
    """This worker's value of a per-replica result (one replica per worker)."""
    return float(strategy.experimental_local_results(per_replica)[0])


def all_sum(strategy, values: Sequence[float]) -> np.ndarray:
    """Element-wise sum of ``values`` over all workers (one all-reduce)."""
    import tensorflow as tf

    local = tf.constant(np.asarray(values, dtype=np.float64))
    reduced = strategy.reduce("SUM", strategy.run(lambda: tf.identity(local)), axis=None)
    return reduced.numpy() / replicas_per_worker(strategy)


def replicas_per_worker(strategy) -> int:
    """Local replicas (devices) of this worker; each sees the worker's whole batch."""
    return max(1, len(strategy.extended.worker_devices))


def metric_results(model, prefix: str = "") -> dict[str, float]:
    """The compiled metrics, aggregated over all workers (their variables sync on read)."""
    logs = {}
    for name, value in model.get_metrics_result().items():
        if name == "loss":  # Keras' own loss tracker is not fed by compute_loss
            continue
        value = np.asarray(value)
        if value.ndim == 0:
            logs[prefix + name] = float(value)
    return logs


def prediction_kind(model) -> tuple[str, bool]:
    """('regression' | 'binary' | 'multiclass' | 'auto', from_logits) from the compiled loss."""
    loss = getattr(model, "loss", None)
    if isinstance(loss, (dict, list, tuple)) or loss is None:
        return "auto", False
    name = loss if isinstance(loss, str) else getattr(loss, "name", None) or \
        getattr(loss, "__name__", type(loss).__name__)
    config = loss.get_config() if hasattr(loss, "get_config") else {}
    from_logits = bool(config.get("from_logits", False))
    name = str(name).lower()
    if "binary" in name:
        return "binary", from_logits
    if "categorical" in name:
        return "multiclass", from_logits
    return "regression", False


def check_class_labels(model, labels_min: float, labels_max: float, all_integers: bool,
                       column: str) -> None:
    """Raises ``ValueError`` if class labels cannot index the model's output classes."""
    kind, _ = prediction_kind(model)
    try:
        width = int(model.outputs[0].shape[-1])
    except (AttributeError, IndexError, TypeError, ValueError):
        return
    if kind != "multiclass" or width < 2 or "sparse" not in str(model.loss).lower():
        return
    if not all_integers or labels_min < 0 or labels_max >= width:
        raise ValueError(f"Label column '{column}' holds values from {labels_min:g} to "
                         f"{labels_max:g}, but the model has {width} output classes: labels "
                         f"must be integers in [0, {width - 1}]. Re-index the labels (e.g. "
                         "StringIndexer) or widen the output layer.")
