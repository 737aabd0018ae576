"""Keras 3's own ``model.fit`` under ``MultiWorkerMirroredStrategy``, in sparktf's task
processes: the one place where sparktf changes how Keras behaves.

Keras 3 (checked on ``CHECKED``) fails any ``fit``, ``evaluate`` or ``predict`` under
``MultiWorkerMirroredStrategy`` with more than one worker (keras-team/keras#20585), in
``keras/src/backend/tensorflow/trainer.py``, on two paths only that strategy takes:

1. ``_maybe_symbolic_build`` builds the model from a first batch, which it gets by
   reducing the distributed batch across workers (``strategy.reduce("MEAN", ...,
   axis=None)``): under that strategy, outside ``strategy.run``, that is ``ValueError:
   Attempt to convert a value (PerReplica:{...}) to a Tensor``. Only the batch's shapes
   and dtypes are used: this replica's own batch gives the same ones.
2. ``reduce_per_replica`` then averages each step's logs across workers and along axis 0
   (``strategy.reduce("MEAN", v, axis=0)``), which a scalar (the loss, a metric) has not:
   ``ValueError: Invalid reduction dimension 0 for input with 0 dimensions``; and a
   metric with a value per class (``F1Score(average=None)``) would become the mean of its
   elements. Under every other strategy Keras's mean is ``tf.reduce_mean(local_results,
   axis=0)``: element-wise across the replicas, a vector kept a vector. Every value, of
   any rank, is averaged that way here: ``strategy.reduce("MEAN", v, axis=None)``.

Everything else keeps Keras's own code: other strategies, ``reduction`` other than the
mean. ``apply()`` does nothing on Keras 2 (``tf_keras``, which has neither path) or where
Keras has changed these functions (their names or parameters):
``tests/integration/test_porting.py`` runs the failing program after ``undo()`` and fails
once a Keras release fixes it upstream, saying to remove this module.
"""

from __future__ import annotations

import inspect
import os

CHECKED = ("3.14.0", "3.15.1")

_applied = False


def apply() -> bool:
    """Applies both fixes in this process (once); whether they are in place."""
    global _applied
    if _applied:
        return True
    if os.environ.get("TF_USE_LEGACY_KERAS") in ("1", "true", "True"):  # as TensorFlow reads it
        return False
    try:
        from keras.src.backend.tensorflow import trainer
    except ImportError:
        return False
    build = getattr(trainer.TensorFlowTrainer, "_maybe_symbolic_build", None)
    reduce = getattr(trainer, "reduce_per_replica", None)
    multi_worker = getattr(trainer, "_collective_all_reduce_multi_worker", None)
    if build is None or reduce is None or multi_worker is None or \
            list(inspect.signature(build).parameters) != ["self", "iterator", "data_batch"] or \
            list(inspect.signature(reduce).parameters) != ["values", "strategy", "reduction"]:
        return False
    trainer.TensorFlowTrainer._maybe_symbolic_build = _symbolic_build_from_local(build,
                                                                                 multi_worker)
    trainer.reduce_per_replica = _mean_across_replicas(reduce, multi_worker)
    _applied = True
    return True


def undo(build: bool = True, reduce: bool = True) -> None:
    """Keras as released again in this process, for the first path (``build``), the
    second (``reduce``) or both: the upstream-fix test asks each path alone."""
    from keras.src.backend.tensorflow import trainer

    if build:
        fixed = trainer.TensorFlowTrainer._maybe_symbolic_build
        trainer.TensorFlowTrainer._maybe_symbolic_build = getattr(fixed, "__wrapped__", fixed)
    if reduce:
        trainer.reduce_per_replica = getattr(trainer.reduce_per_replica, "__wrapped__",
                                             trainer.reduce_per_replica)


def _symbolic_build_from_local(original, multi_worker):
    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        import tensorflow as tf

        strategy = self._distribute_strategy
        if strategy is None or iterator is None or not multi_worker(strategy):
            return original(self, iterator=iterator, data_batch=data_batch)
        for _, _, it in iterator:
            data_batch = tf.nest.map_structure(
                lambda v: strategy.experimental_local_results(v)[0]
                if isinstance(v, tf.distribute.DistributedValues) else v, next(it))
            break
        with strategy.scope():
            self._symbolic_build(data_batch=data_batch)

    _maybe_symbolic_build.__wrapped__ = original
    return _maybe_symbolic_build


def _mean_across_replicas(original, multi_worker):
    def reduce_per_replica(values, strategy, reduction):
        import tensorflow as tf

        if reduction not in ("auto", "mean") or not multi_worker(strategy):
            return original(values, strategy, reduction)
        return tf.nest.map_structure(lambda v: strategy.reduce("MEAN", v, axis=None), values)

    reduce_per_replica.__wrapped__ = original
    return reduce_per_replica
