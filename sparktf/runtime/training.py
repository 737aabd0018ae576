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

from sparktf.runtime import (checkpoint, feed, inference, keras_steps, signals, storage,
                             summaries, tf_keras_fit)

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
    weight_column: str | None = None  # Keras's sample_weight, for training and validation
    class_weight: dict | None = None  # Keras's class_weight: class index -> weight

    @property
    def validates_in_loop(self) -> bool:
        return self.has_validation and not self.evaluator

    @property
    def columns(self) -> list[str]:
        """The columns a task reads: the features, the label, then the weight if any."""
        return [*self.feature_columns, self.label_column,
                *([self.weight_column] if self.weight_column else [])]

    def batches(self, shard: feed.Shard, sizes, epoch: int | None = None, specs=()):
        """``shard`` as step data for ``train_step``/``test_step``, one batch of each of
        ``sizes`` rows: in order, or with ``epoch`` and ``shuffle``, shuffled with that
        epoch's own seed. ``specs``: the model inputs' (shape, dtype), to shape features."""
        seed = (None if epoch is None or not self.shuffle
                else (self.seed * 1_000_003 + epoch) % (2 ** 63))
        for batch in feed.step_batches(shard, sizes, self.columns, seed):
            yield self.step_data(batch, specs)

    def step_data(self, batch: dict, specs=()) -> tuple:
        """One batch of columns as ``(x, y[, sample_weight])``, as Keras's adapters give it."""
        x = keras_steps.to_model_inputs([batch[c] for c in self.feature_columns], specs)
        y = batch[self.label_column]
        weight = None
        if self.weight_column:
            weight = batch[self.weight_column].astype(np.float32)
        elif self.class_weight:
            weight = class_weights(y, self.class_weight)
        return keras_steps.step_data(x, y, weight)

    def template(self, feed_spec: dict, specs=()) -> tuple:
        """A zero-row batch with the columns' shapes and dtypes (``ctx.feedSpec``): what
        builds the model's variables before any row is read."""
        batch = {name: np.zeros((0, width) if width else (0,), dtype=np.dtype(dtype))
                 for name, (dtype, width) in feed_spec.items()}
        return self.step_data(batch, specs)


def class_weights(labels: np.ndarray, class_weight: dict) -> np.ndarray:
    """Keras's ``class_weight`` as per-row weights (its ``class_weight_to_sample_weights``):
    the class is the rounded label, or the arg-max of a one-hot row; unlisted classes 1."""
    classes = labels
    if classes.ndim > 1:
        classes = classes.argmax(-1) if classes.shape[-1] != 1 else classes[..., 0]
    classes = np.round(classes).astype(np.int64)
    table = np.ones(max(class_weight) + 2, dtype=np.float32)
    for key, value in class_weight.items():
        table[int(key)] = value
    inside = (classes >= 0) & (classes <= max(class_weight))
    return np.where(inside, table[np.clip(classes, 0, len(table) - 1)], 1.0).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class StepPlan:
    """One pass over rows spread over workers: how many each feeds at every step."""

    rows: np.ndarray  # [workers, steps], from feed.step_rows
    rank: int

    @classmethod
    def of(cls, all_rows: Sequence[int], rank: int, global_batch: int) -> "StepPlan":
        return cls(feed.step_rows(all_rows, global_batch), rank)

    @property
    def steps(self) -> int:
        return self.rows.shape[1]

    @property
    def sizes(self) -> list[int]:
        """This worker's batch size at each step."""
        return [int(n) for n in self.rows[self.rank]]

    @property
    def total_rows(self) -> int:
        return int(self.rows.sum())

    def factors(self, replicas_in_sync: int, local_replicas: int = 1) -> list[float]:
        """Each step's loss factor for this worker's replicas (see ``KerasSteps``):
        replicas x this replica's rows / the step's rows over every replica."""
        step_rows = self.rows.sum(axis=0)
        return [float(replicas_in_sync * mine / (local_replicas * total)) if total else 0.0
                for mine, total in zip(self.rows[self.rank], step_rows)]


def plan_steps(all_rows: Sequence[int], global_batch: int) -> int:
    """Steps per epoch so that every row is used once at ``global_batch`` rows a step."""
    return max(1, math.ceil(sum(all_rows) / global_batch))


def train_main(spec: TrainSpec, ctx) -> dict | None:
    """What one task of ``fit`` does, by its role; the chief (and evaluator) report results.

    All-reduce workers train on their shards in lockstep; with parameter servers
    see ``ps_training``; the evaluator side-car is ``evaluation``.
    """
    from sparktf.runtime import cluster, evaluation, ps_training

    if ctx.jobName == cluster.EVALUATOR:
        return evaluation.evaluate_checkpoints(spec, ctx)
    result = ps_training.train(spec, ctx) if ctx.numPs else _all_reduce(spec, ctx)
    signals.Heartbeat(ctx).finished()
    return result


def _all_reduce(spec: TrainSpec, ctx) -> dict | None:
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    ctx.phase("strategy created")
    with strategy.scope():
        model = build_model(spec, ctx.feedSpec)
    ctx.phase("model built")
    _check_labels(model, spec, ctx)
    first_epoch, history = resume(model, spec)
    if tf_keras_fit.is_tf_keras(model):  # Keras 2 models keep their own fit
        workers = ctx.numWorkers
        history = tf_keras_fit.fit(
            spec, ctx, strategy, model, first_epoch, history,
            StepPlan.of(ctx.allNumRows[:workers], ctx.rank, spec.batch_size),
            StepPlan.of(ctx.allValidationRows[:workers], ctx.rank, spec.batch_size)
            if spec.validates_in_loop else None)
    else:
        history = _EpochLoop(spec, ctx, strategy, model).fit(first_epoch, history)
    ctx.phase("trained")
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
    with signals.Heartbeat(ctx).during("exporting", spec.epochs):
        exported, input_names = _export(model, spec, ctx)
    ctx.phase("exported")
    if not ctx.isChief:
        return None
    kind, from_logits = keras_steps.prediction_kind(model)
    return {"history": history, "export_dir": exported, "rows": int(sum(ctx.allNumRows)),
            "input_mapping": dict(zip(spec.feature_columns, input_names)),
            "prediction_kind": kind, "from_logits": from_logits}


def build_model(spec: TrainSpec, feed_spec: dict):
    """The user's compiled model with every variable created (under the current scope):
    its layers', its metrics' and its optimizer's, as Keras's ``fit`` creates them."""
    model = spec.model_fn(dict(spec.hparams))
    keras_steps.check_compiled(model)
    if tf_keras_fit.is_tf_keras(model):
        model.optimizer.build(model.trainable_variables)
    else:
        specs = keras_steps.input_specs(model)
        keras_steps.build(model, spec.template(feed_spec, specs))
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
    """The epochs of a fit, in the order of Keras's ``fit``: train, validate, callbacks,
    history; plus sparktf's summaries, checkpoint and progress after each epoch.
    Subclasses say how one epoch trains (``train_epoch``) and validates."""

    def __init__(self, spec: TrainSpec, ctx, model, steps: int, beat=None):
        self.spec, self.ctx, self.model, self.steps = spec, ctx, model, steps
        self.beat = beat or signals.Heartbeat(ctx)
        self.summaries = summaries.EpochSummaries(spec.model_dir, ctx.isChief,
                                                  spec.summary_steps)
        self.recorder = _EpochLogs()
        self.callbacks = callback_list([*spec.callbacks, self.recorder], model, spec.epochs,
                                       steps)
        self.rows_trained = 0  # in the last epoch, over all workers
        self.epoch = 0  # the epoch running (0-based)

    def train_epoch(self, epoch: int) -> dict[str, float]:
        raise NotImplementedError

    def validates(self) -> bool:
        return False

    def validate(self) -> dict[str, float]:
        return {}

    def validation_step(self, step: int) -> None:
        """After each validation step: a heartbeat, at most every few seconds."""
        self.beat("validation", self.epoch + 1, step, force=False)

    def agree_to_stop(self) -> bool:
        """Whether training stops now: ``model.stop_training`` as every worker sees it."""
        return bool(getattr(self.model, "stop_training", False))

    def fit(self, first_epoch: int = 0, history: dict | None = None) -> dict[str, list[float]]:
        """Runs epochs ``first_epoch`` .. ``epochs - 1``, checkpointing after each one."""
        history = collections.defaultdict(list, {k: list(v) for k, v in (history or {}).items()})
        self.model.stop_training = False
        self.callbacks.on_train_begin()
        logs: dict = {}
        for epoch in range(first_epoch, self.spec.epochs):
            self.epoch = epoch
            started = time.monotonic()
            self.model.reset_metrics()
            self.callbacks.on_epoch_begin(epoch)
            logs = self.train_epoch(epoch)
            if self.validates():
                self.beat("validation", epoch + 1)
                logs.update(self.validate())
            self.beat("callbacks", epoch + 1)
            self.callbacks.on_epoch_end(epoch, logs)
            logs = self.recorder.logs  # as the callbacks left them (e.g. + learning_rate)
            for key, value in logs.items():
                history[key].append(value)
            self.summaries.write(epoch + 1, logs)
            self.beat("checkpoint", epoch + 1)
            checkpoint.save(self.model, self.spec.model_dir, epoch + 1, dict(history),
                            self.ctx.isChief)
            signals.report_epoch(self.ctx, epoch + 1, self.spec.epochs, logs, self.rows_trained,
                                 time.monotonic() - started)
            if self.agree_to_stop():
                break
        _finalize(self.model)
        self.callbacks.on_train_end(logs)
        self.summaries.close()
        return dict(history)


class _EpochLogs:
    """Last in the callback list, like Keras's History: the epoch's logs as the other
    callbacks left them (``CallbackList`` hands them a copy of the loop's logs)."""

    def __new__(cls):
        import keras

        class EpochLogs(keras.callbacks.Callback):
            logs: dict = {}

            def on_epoch_end(self, epoch, logs=None):
                self.logs = dict(logs or {})

        return EpochLogs()


def _finalize(model) -> None:
    """What Keras's ``fit`` does after the last epoch: e.g. an EMA optimizer's averages
    become the weights."""
    import keras

    if isinstance(model.optimizer, keras.optimizers.Optimizer):
        model.optimizer.finalize_variable_values(model.trainable_weights)


class _EpochLoop(EpochRunner):
    """All-reduce epochs: every worker steps through its own shard in lockstep."""

    def __init__(self, spec: TrainSpec, ctx, strategy, model):
        workers = ctx.allNumRows[:ctx.numWorkers]  # workers take the first ranks
        self.plan = StepPlan.of(workers, ctx.rank, spec.batch_size)
        super().__init__(spec, ctx, model, self.plan.steps)
        self.strategy = strategy
        self.specs = keras_steps.input_specs(model)
        self.steps_fn = keras_steps.KerasSteps(strategy, model)
        self.factors = self.plan.factors(strategy.num_replicas_in_sync,
                                         keras_steps.replicas_per_worker(strategy))
        # batch logs are averaged over the workers (a collective) only when a callback
        # or the step summaries read them; each epoch's last step always is (custom logs)
        self.batch_logs = (keras_steps.overrides(spec.callbacks, keras_steps.TRAIN_BATCH_HOOKS)
                           or bool(spec.summary_steps))
        self.validation = (ValidationPass(self.steps_fn, spec, ctx.validationShard,
                                          StepPlan.of(ctx.allValidationRows[:ctx.numWorkers],
                                                      ctx.rank, spec.batch_size),
                                          self.callbacks)
                           if spec.validates_in_loop else None)

    def validates(self) -> bool:
        return self.validation is not None

    def train_epoch(self, epoch: int) -> dict[str, float]:
        logs: dict = {}
        hooks = self.batch_logs
        for step, data in enumerate(self.spec.batches(self.ctx.shard, self.plan.sizes, epoch,
                                                      self.specs)):
            if step == 0 and epoch == 0:
                keras_steps.check_input_widths(list(_features(data)), self.specs,
                                               self.spec.feature_columns)
            self.beat("training", epoch + 1, step, force=step == 0,
                      progress=lambda: self._progress(step, logs))
            if hooks:
                self.callbacks.on_train_batch_begin(step)
            logs = self.steps_fn.train(data, self.factors[step],
                                       reduce=hooks or step == self.steps - 1)
            if step == 0 and epoch == 0:
                self.ctx.phase("first step")
            if hooks:
                self.callbacks.on_train_batch_end(step, logs)
                self.summaries.write_step(epoch * self.steps + step + 1, logs.get("loss"))
                if self.steps_fn.any_worker(self.model.stop_training):
                    self.model.stop_training = True
                    break
        self.rows_trained = self.plan.total_rows
        return self.steps_fn.epoch_logs(logs)

    def validate(self) -> dict[str, float]:
        return self.validation.run(self.validation_step)

    def _progress(self, step: int, logs) -> dict:
        """The epoch so far for the driver's progress bar: ``step`` steps done, their rows
        over every worker, and this worker's last loss (its own replica's, not reduced)."""
        out = {"steps": self.steps, "epochs": self.spec.epochs,
               "rows": int(self.plan.rows[:, :step].sum())}
        loss = logs.get("loss") if isinstance(logs, dict) else None
        if loss is not None:
            out["loss"] = float(loss)
        return out

    def agree_to_stop(self) -> bool:
        stop = self.steps_fn.any_worker(getattr(self.model, "stop_training", False))
        self.model.stop_training = stop
        return stop


def _features(data: tuple) -> tuple:
    x = data[0]
    return x if isinstance(x, tuple) else (x,)


class ValidationPass:
    """Keras's ``evaluate`` inside ``fit``: ``test_step`` over the validation rows, then
    the metrics over every worker, ``val_`` prefixed."""

    def __init__(self, steps_fn, spec: TrainSpec, shard: feed.Shard, plan: StepPlan,
                 callbacks):
        self.steps_fn, self.spec, self.shard, self.plan = steps_fn, spec, shard, plan
        self.callbacks = callbacks
        self.hooks = keras_steps.overrides(spec.callbacks, keras_steps.TEST_BATCH_HOOKS)
        self.specs = keras_steps.input_specs(steps_fn.model)

    def run(self, progress=None) -> dict[str, float]:
        """``progress(step)`` is called after each step (heartbeats)."""
        model = self.steps_fn.model
        model.reset_metrics()
        self.callbacks.on_test_begin()
        logs: dict = {}
        for step, data in enumerate(self.spec.batches(self.shard, self.plan.sizes,
                                                      specs=self.specs)):
            if self.hooks:
                self.callbacks.on_test_batch_begin(step)
            logs = self.steps_fn.test(data, reduce=self.hooks or step == self.plan.steps - 1)
            if self.hooks:
                self.callbacks.on_test_batch_end(step, logs)
            if progress is not None:
                progress(step)
        logs = self.steps_fn.epoch_logs(logs)
        self.callbacks.on_test_end(logs)
        return {f"val_{name}": value for name, value in logs.items()}


def callback_list(callbacks, model, epochs: int, steps: int):
    import keras

    return keras.callbacks.CallbackList(list(callbacks), add_history=False,
                                        add_progbar=False, model=model, epochs=epochs,
                                        steps=steps, verbose=0)


def _export(model, spec: TrainSpec, ctx) -> tuple[str, list[str]]:
    """Every worker exports (the chief's copy is kept): SavedModel for serving, .keras file.

    Returns the export URI and the serving signature's input names in model-input order.
    """
    target = storage.join(spec.model_dir, EXPORT_DIR)
    with tempfile.TemporaryDirectory(prefix="sparktf-export-") as local:
        if tf_keras_fit.is_tf_keras(model):
            model.export(os.path.join(local, SAVED_MODEL))
        else:
            model.export(os.path.join(local, SAVED_MODEL), verbose=False)
        model.save(os.path.join(local, KERAS_FILE))
        names = list(inference.describe(os.path.join(local, SAVED_MODEL),
                                        "serving_default")[0])
        if ctx.isChief:
            storage.put_dir(local, target)
    return target, _order_inputs(names, _input_names(model))


def _input_names(model) -> list[str]:
    """The model's input names in order; none known for a subclassed model."""
    try:
        return [getattr(t, "name", "") for t in model.inputs or []]
    except (AttributeError, ValueError):
        return []


def _order_inputs(signature_names: list[str], model_names: list[str]) -> list[str]:
    """Signature input names in the model's input order (matched by name when possible)."""
    if len(signature_names) == 1 or set(model_names) != set(signature_names):
        return sorted(signature_names)
    return list(model_names)
