"""The training task: what ``TFEstimator.fit`` runs on every worker.

``train_main`` reads top to bottom: build the compiled model under the
strategy, plan the steps every worker agrees on, run the epochs (train,
validate, callbacks, progress), export. The step functions live in
``keras_steps``; the data comes from the task's spilled shard (``feed``).
"""

from __future__ import annotations

import collections
import dataclasses
import math
import os
import tempfile
import time
from typing import Any, Callable, Sequence

import numpy as np

from sparktf.runtime import (checkpoint, feed, keras_steps, signals, storage, summaries,
                             tf_keras_fit)

EXPORT_DIR = "export"
SAVED_MODEL = "saved_model"
KERAS_FILE = "model.keras"


@dataclasses.dataclass(frozen=True)
class TrainSpec:
    """Everything the training task needs, frozen on the driver."""

    model_fn: Callable[[dict], Any]
    hparams: dict
    feature_columns: tuple[str, ...]
    label_column: str
    epochs: int
    batch_size: int
    model_dir: str
    shuffle: bool = True
    seed: int = 0
    has_validation: bool = False
    callbacks: tuple = ()
    evaluator: bool = False  # an evaluator side-car validates instead of the workers
    summary_steps: int = 0  # also log the training loss every this many steps (0: never)

    @property
    def validates_in_loop(self) -> bool:
        return self.has_validation and not self.evaluator

    @property
    def columns(self) -> list[str]:
        """The columns a task reads: the features, then the label."""
        return [*self.feature_columns, self.label_column]

    def batches(self, shard: feed.Shard, steps: int, epoch: int | None = None):
        """(feature arrays, label array) of ``shard`` in ``steps`` batches: in order, or
        with ``epoch`` and ``shuffle``, shuffled with that epoch's own seed."""
        seed = (None if epoch is None or not self.shuffle
                else (self.seed * 1_000_003 + epoch) % (2 ** 63))
        for batch in feed.step_batches(shard, steps, self.columns, seed):
            yield [batch[c] for c in self.feature_columns], batch[self.label_column]


def plan_steps(all_rows: Sequence[int], global_batch: int) -> int:
    """Steps per epoch so that every row is used once at about ``global_batch`` rows a step."""
    return max(1, math.ceil(sum(all_rows) / global_batch))


def step_weights(all_rows: Sequence[int], rank: int, steps: int) -> list[float]:
    """This worker's share of each step's global batch (its loss weight in that step)."""
    mine = feed.split_sizes(all_rows[rank], steps)
    totals = np.sum([feed.split_sizes(n, steps) for n in all_rows], axis=0)
    return [m / t if t else 0.0 for m, t in zip(mine, totals)]


def train_main(spec: TrainSpec, ctx) -> dict | None:
    """What one task of ``fit`` does, by its role; the chief (and evaluator) report results.

    All-reduce workers train on their shards in lockstep; with parameter servers
    see ``ps_training``; the evaluator side-car is ``evaluation``.
    """
    from sparktf.runtime import cluster, evaluation, ps_training

    if ctx.jobName == cluster.EVALUATOR:
        return evaluation.evaluate_checkpoints(spec, ctx)
    if ctx.numPs:
        return ps_training.train(spec, ctx)
    return _all_reduce(spec, ctx)


def _all_reduce(spec: TrainSpec, ctx) -> dict | None:
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = build_model(spec)
    _check_labels(model, spec, ctx)
    first_epoch, history = resume(model, spec)
    if tf_keras_fit.is_tf_keras(model):  # Keras 2 models keep their own fit
        history = tf_keras_fit.fit(
            spec, ctx, strategy, model, first_epoch, history,
            plan_steps(ctx.allNumRows, spec.batch_size),
            plan_steps(ctx.allValidationRows, spec.batch_size) if spec.validates_in_loop else 0)
    else:
        history = _EpochLoop(spec, ctx, strategy, model).fit(first_epoch, history)
    return chief_result(model, spec, ctx, history)


def resume(model, spec: TrainSpec) -> tuple[int, dict]:
    """(first epoch, history so far): from the last checkpoint of this fit, if any."""
    found = checkpoint.latest(spec.model_dir)
    if not found:
        return 0, {}
    checkpoint.restore(model, spec.model_dir, found)
    print(f"sparktf: resuming after epoch {found['epoch']} from the last checkpoint",
          flush=True)
    return found["epoch"], found["history"]


def chief_result(model, spec: TrainSpec, ctx, history: dict) -> dict | None:
    """Exports the trained model; the chief's answer to the driver (None elsewhere)."""
    exported, input_names = _export(model, spec, ctx)
    if not ctx.isChief:
        return None
    kind, from_logits = keras_steps.prediction_kind(model)
    return {"history": history, "export_dir": exported, "rows": int(sum(ctx.allNumRows)),
            "input_mapping": dict(zip(spec.feature_columns, input_names)),
            "prediction_kind": kind, "from_logits": from_logits}


def build_model(spec: TrainSpec):
    """The user's compiled model with its optimizer's variables (under the current scope)."""
    model = spec.model_fn(dict(spec.hparams))
    keras_steps.check_compiled(model)
    model.optimizer.build(model.trainable_variables)
    return model


def _check_labels(model, spec: TrainSpec, ctx) -> None:
    """Refuses class labels outside the model's outputs before the first step."""
    lows, highs, integral = [], [], True
    for shard in (ctx.shard, ctx.validationShard):
        if shard is None or not shard.num_rows:
            continue
        for chunk in feed.read_chunks(shard, [spec.label_column]):
            labels = chunk[spec.label_column]
            if labels.ndim != 1 or not len(labels):
                return  # array labels: nothing to index
            lows.append(float(labels.min()))
            highs.append(float(labels.max()))
            integral &= bool(np.all(np.mod(labels, 1) == 0))
    if lows:
        keras_steps.check_class_labels(model, min(lows), max(highs), integral,
                                       spec.label_column)


class EpochRunner:
    """The epochs of a fit: train, validate, callbacks, history, summaries, checkpoint,
    progress. Subclasses say how one epoch trains (``train_epoch``) and validates."""

    def __init__(self, spec: TrainSpec, ctx, model, steps: int, beat=None):
        self.spec, self.ctx, self.model, self.steps = spec, ctx, model, steps
        self.beat = beat or signals.Heartbeat(ctx)
        self.summaries = summaries.EpochSummaries(spec.model_dir, ctx.isChief,
                                                  spec.summary_steps)
        self.callbacks = callback_list(spec.callbacks, model, spec.epochs, steps)
        self.rows_trained = 0  # in the last epoch, over all workers

    def train_epoch(self, epoch: int) -> dict[str, float]:
        raise NotImplementedError

    def validates(self) -> bool:
        return False

    def validate(self) -> dict[str, float]:
        return {}

    def fit(self, first_epoch: int = 0, history: dict | None = None) -> dict[str, list[float]]:
        """Runs epochs ``first_epoch`` .. ``epochs - 1``, checkpointing after each one."""
        history = collections.defaultdict(list, {k: list(v) for k, v in (history or {}).items()})
        self.callbacks.on_train_begin()
        for epoch in range(first_epoch, self.spec.epochs):
            started = time.monotonic()
            self.callbacks.on_epoch_begin(epoch)
            logs = self.train_epoch(epoch)
            if self.validates():
                self.beat("validation", epoch + 1)
                logs.update(self.validate())
            self.beat("callbacks", epoch + 1)
            self.callbacks.on_epoch_end(epoch, logs)
            for key, value in logs.items():
                history[key].append(value)
            self.summaries.write(epoch + 1, logs)
            self.beat("checkpoint", epoch + 1)
            checkpoint.save(self.model, self.spec.model_dir, epoch + 1, dict(history),
                            self.ctx.isChief)
            signals.report_epoch(self.ctx, epoch + 1, self.spec.epochs, logs, self.rows_trained,
                                 time.monotonic() - started)
            if getattr(self.model, "stop_training", False):
                break
        self.callbacks.on_train_end(dict((k, v[-1]) for k, v in history.items()))
        self.summaries.close()
        return dict(history)


class _EpochLoop(EpochRunner):
    """All-reduce epochs: every worker steps through its own shard in lockstep."""

    def __init__(self, spec: TrainSpec, ctx, strategy, model):
        super().__init__(spec, ctx, model, plan_steps(ctx.allNumRows, spec.batch_size))
        self.strategy = strategy
        self.specs = keras_steps.input_specs(model)
        self.train_step, self.eval_step = keras_steps.make_steps(strategy, model)
        replicas = keras_steps.replicas_per_worker(strategy)
        self.weights = [w / replicas for w in step_weights(ctx.allNumRows, ctx.rank,
                                                           self.steps)]
        self.val_steps = (plan_steps(ctx.allValidationRows, spec.batch_size)
                          if spec.validates_in_loop else 0)

    def validates(self) -> bool:
        return bool(self.val_steps)

    def train_epoch(self, epoch: int) -> dict[str, float]:
        import tensorflow as tf

        self.model.reset_metrics()
        loss_sum, rows = 0.0, 0
        for step, (features, label) in enumerate(self.spec.batches(self.ctx.shard, self.steps,
                                                                   epoch)):
            if step == 0 and epoch == 0:
                keras_steps.check_input_widths(features, self.specs, self.spec.feature_columns)
            self.beat("training", epoch + 1, step, force=step == 0)
            self.callbacks.on_train_batch_begin(step)
            x = keras_steps.to_model_inputs(features, self.specs)
            out = self.train_step(x, label, tf.constant(self.weights[step], tf.float32))
            n = len(label)
            loss = keras_steps.local_value(self.strategy, out)
            self.summaries.write_step(epoch * self.steps + step + 1, loss)
            loss_sum += loss * n
            rows += n
            self.callbacks.on_train_batch_end(step)
        self.beat("all-reduce", epoch + 1)
        total_loss, total_rows = keras_steps.all_sum(self.strategy, [loss_sum, rows])
        self.rows_trained = int(total_rows)
        return {"loss": float(total_loss / max(total_rows, 1)),
                **keras_steps.metric_results(self.model)}

    def validate(self) -> dict[str, float]:
        return validation_logs(self.strategy, self.model, self.eval_step, self.spec,
                               self.ctx.validationShard, self.val_steps, across_workers=True)


def validation_logs(strategy, model, eval_step, spec: TrainSpec, shard: feed.Shard,
                    steps: int, across_workers: bool) -> dict[str, float]:
    """``val_loss`` and the ``val_`` metrics of ``model`` on ``shard`` in ``steps`` batches;
    ``across_workers``: summed over every worker of ``strategy`` (all of them call this)."""
    specs = keras_steps.input_specs(model)
    model.reset_metrics()
    sums = np.zeros(2)  # loss x rows, rows
    for features, label in spec.batches(shard, steps):
        out = eval_step(keras_steps.to_model_inputs(features, specs), label)
        sums += (keras_steps.local_value(strategy, out) * len(label), len(label))
    loss_sum, rows = keras_steps.all_sum(strategy, sums) if across_workers else sums
    return {"val_loss": float(loss_sum / max(rows, 1)),
            **keras_steps.metric_results(model, prefix="val_")}


def callback_list(callbacks, model, epochs: int, steps: int):
    import keras

    return keras.callbacks.CallbackList(list(callbacks), add_history=False,
                                        add_progbar=False, model=model, epochs=epochs,
                                        steps=steps, verbose=0)


def _export(model, spec: TrainSpec, ctx) -> tuple[str, list[str]]:
    """Every worker exports (the chief's copy is kept): SavedModel for serving, .keras file.

    Returns the export URI and the serving signature's input names in model-input order.
    """
    import tensorflow as tf

    target = storage.join(spec.model_dir, EXPORT_DIR)
    with tempfile.TemporaryDirectory(prefix="sparktf-export-") as local:
        if tf_keras_fit.is_tf_keras(model):
            model.export(os.path.join(local, SAVED_MODEL))
        else:
            model.export(os.path.join(local, SAVED_MODEL), verbose=False)
        model.save(os.path.join(local, KERAS_FILE))
        signature = tf.saved_model.load(os.path.join(local, SAVED_MODEL)).signatures[
            "serving_default"]
        names = list(signature.structured_input_signature[1])
        if ctx.isChief:
            storage.put_dir(local, target)
    return target, _order_inputs(names, [getattr(t, "name", "") for t in model.inputs])


def _order_inputs(signature_names: list[str], model_names: list[str]) -> list[str]:
    """Signature input names in the model's input order (matched by name when possible)."""
    if len(signature_names) == 1 or set(model_names) != set(signature_names):
        return sorted(signature_names)
    return list(model_names)
