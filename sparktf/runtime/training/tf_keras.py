"""Training a tf_keras (Keras 2) model: its own ``fit`` works under MultiWorkerMirroredStrategy.

Each worker feeds its own shard through ``distribute_datasets_from_function``
(no re-batching, no auto-sharding), in the same number of steps per epoch as
every other worker. A callback adds what sparktf's own loop does for Keras 3
models: heartbeats, per-epoch progress on the driver, and checkpoints.
"""

from __future__ import annotations

import itertools
import time

import numpy as np

from sparktf._protocol import heartbeats
from sparktf.errors import InvalidInputError
from sparktf.runtime.feed import shards
from sparktf.runtime.training import checkpoint, summaries


def _dataset(strategy, shard, sizes, spec, bound, infos, shuffle: bool):
    """A distributed dataset yielding this worker's batches of ``sizes`` rows per epoch,
    forever, as ``(x, y[, sample_weight])``."""
    import tensorflow as tf

    def epoch_batches():
        shards.keep_freed_memory()
        for epoch in itertools.count():
            yield from spec.batches(shard, sizes, bound, epoch if shuffle else None, infos)

    def spec_of(a):  # a zero-row array, or a symbolic input unknown where rows vary
        if not isinstance(a, np.ndarray):
            return tf.TensorSpec(a.shape, tf.as_dtype(a.dtype))
        return tf.TensorSpec((None,) + a.shape[1:],
                             tf.string if a.dtype == object else tf.as_dtype(a.dtype))

    signature = tf.nest.map_structure(spec_of, spec.template(infos, bound))

    def make(_input_context):
        return tf.data.Dataset.from_generator(epoch_batches, output_signature=signature) \
            .prefetch(tf.data.AUTOTUNE)

    return strategy.distribute_datasets_from_function(make)


def fit(spec, ctx, strategy, model, bound, first_epoch: int, history: dict, plan,
        val_plan=None) -> dict:
    """Runs tf_keras' own fit from ``first_epoch`` over the steps of ``plan`` (and
    ``val_plan``, both ``training.StepPlan``); returns the complete history."""
    import tf_keras

    steps = plan.steps

    class SparktfHooks(tf_keras.callbacks.Callback):
        """Heartbeats, driver progress and per-epoch checkpoints."""

        def __init__(self):
            super().__init__()
            self.history = {k: list(v) for k, v in history.items()}
            self.summaries = summaries.EpochSummaries(spec.model_dir, ctx.isChief,
                                                      spec.summary_steps)
            self.beat = heartbeats.Heartbeat(ctx)
            self.epoch = first_epoch + 1
            self.started = time.monotonic()

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch + 1
            self.started = time.monotonic()
            self.beat("training", self.epoch, 0)

        def on_train_end(self, logs=None):
            self.summaries.close()

        def on_train_batch_end(self, batch, logs=None):
            self.beat("training", self.epoch, batch, force=False)
            self.summaries.write_step((self.epoch - 1) * steps + batch + 1,
                                      (logs or {}).get("loss"))

        def on_epoch_end(self, epoch, logs=None):
            # a vector metric (F1Score(average=None)) as a list: tf_keras's History keeps it
            logs = {k: float(v) if np.ndim(v) == 0 else np.asarray(v).tolist()
                    for k, v in (logs or {}).items()}
            for key, value in logs.items():
                self.history.setdefault(key, []).append(value)
            self.summaries.write(epoch + 1, logs)
            self.beat("checkpoint", epoch + 1)
            checkpoint.save(model, spec.model_dir, epoch + 1, self.history, ctx.isChief,
                            prune_older=not spec.evaluator)
            heartbeats.report_epoch(ctx, epoch + 1, spec.epochs, logs, sum(ctx.allNumRows),
                                 time.monotonic() - self.started)

    if spec.keep_best:
        raise InvalidInputError(f"keepBest={spec.keep_best!r} needs a Keras 3 model; this is "
                                "a tf_keras one: give it keras.callbacks.ModelCheckpoint("
                                "save_best_only=True) instead, or unset keepBest")
    hooks = SparktfHooks()
    validation = (_dataset(strategy, ctx.validationShard, val_plan.sizes, spec, bound,
                           ctx.feedSpec, False)
                  if val_plan is not None else None)
    model.fit(_dataset(strategy, ctx.shard, plan.sizes, spec, bound, ctx.feedSpec,
                       spec.shuffle),
              epochs=spec.epochs, initial_epoch=first_epoch, steps_per_epoch=steps,
              validation_data=validation,
              validation_steps=val_plan.steps if val_plan is not None else None,
              callbacks=[*spec.callbacks, hooks], verbose=0)
    return hooks.history
