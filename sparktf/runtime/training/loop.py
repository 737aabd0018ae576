"""The parts of a fit every training strategy shares: the compiled model built and resumed
from its last checkpoint, the epochs in the order of Keras's ``fit`` (``EpochRunner``),
Keras's validation pass, the export and the chief's answer to the driver."""

from __future__ import annotations

import collections
import time
from contextlib import nullcontext as _nothing

import numpy as np

from sparktf._protocol import heartbeats
from sparktf.runtime.feed import shards
from sparktf.runtime.training import (
    best,
    checkpoint,
    file_callbacks,
    keras_steps,
    model_kind,
    run_state,
    summaries,
)
from sparktf.runtime.training import bindings as binding
from sparktf.runtime.training.spec import StepPlan, TrainSpec


def resume(model, spec: TrainSpec) -> tuple[int, dict, dict]:
    """(first epoch, history so far, the checkpoint's state) from the last checkpoint of
    this fit, if any: the variables and Keras's random state put back as they were."""
    found = checkpoint.latest(spec.model_dir)
    if not found:
        return 0, {}, {}
    checkpoint.restore(model, spec.model_dir, found)
    run_state.restore_seeds(model, found.get("seeds"))
    print(f"sparktf: resuming after epoch {found['epoch']} from the last checkpoint",
          flush=True)
    return found["epoch"], found["history"], found


def build_model(spec: TrainSpec, feed_spec: dict):
    """The user's compiled model with every variable created (under the current scope):
    its layers', its metrics' and its optimizer's, as Keras's ``fit`` creates them; and
    its ``Bindings`` (which column feeds which input), checked against the columns."""
    model = spec.model_fn(dict(spec.hparams))
    keras_steps.check_compiled(model)
    bound = binding.bind(model, spec.feature_columns, spec.label_columns, feed_spec,
                         spec.spark_types, spec.missing_features)
    if keras_steps.is_tf_keras(model):
        model.optimizer.build(model.trainable_variables)
    else:
        keras_steps.build(model, spec.template(feed_spec, bound))
        run_state.global_seed_generator()
    return model, bound


def check_labels(model, spec: TrainSpec, ctx) -> None:
    """Refuses class labels outside the model's outputs before the first step."""
    if len(spec.label_columns) != 1:
        return
    lows, highs, integral = [], [], True
    for shard in (ctx.shard, ctx.validationShard):
        if shard is None or not shard.num_rows:
            continue
        for chunk in shards.read_chunks(shard, [spec.label_column]):
            labels = chunk[spec.label_column]
            if not isinstance(labels, np.ndarray) or labels.ndim != 1 or not len(labels):
                return  # array labels (of any length): nothing to index
            lows.append(float(labels.min()))
            highs.append(float(labels.max()))
            integral &= bool(np.all(np.mod(labels, 1) == 0))
    if lows:
        model_kind.check_class_labels(model, min(lows), max(highs), integral,
                                       spec.label_column)


class EpochRunner:
    """The epochs of a fit, in the order of Keras's ``fit``: train, validate, callbacks,
    history; plus sparktf's summaries, checkpoint and progress after each epoch.
    Subclasses say how one epoch trains (``train_epoch``) and validates."""

    def __init__(self, spec: TrainSpec, ctx, model, steps: int, beat=None):
        self.spec, self.ctx, self.model, self.steps = spec, ctx, model, steps
        self.beat = beat or heartbeats.Heartbeat(ctx)
        self.summaries = summaries.EpochSummaries(spec.model_dir, ctx.isChief,
                                                  spec.summary_steps)
        self.recorder = _EpochLogs()
        self.callbacks = callback_list([*spec.callbacks, self.recorder], model, spec.epochs,
                                       steps)
        self.rows_trained = 0  # in the last epoch, over all workers
        self.epoch = 0  # the epoch running (0-based)
        # every worker's own and waited seconds in each epoch's training steps, where
        # measured (``step_times.epoch_figures``), this run's and a resumed one's
        self.worker_times: list[dict] = []
        self.times = None  # a ``step_times.StepTimes`` where the steps are timed
        self.best = None
        if spec.keep_best:
            self.best = best.keep_best(spec.keep_best, spec.keep_best_mode)
            self.best.set_model(model)
        # the callbacks whose attributes are part of the run's state: Keras's own
        self.stateful = [c for c in spec.callbacks if file_callbacks.carries_state(c)]

    def train_epoch(self, epoch: int) -> dict[str, float]:
        raise NotImplementedError

    def validates(self) -> bool:
        return False

    def epoch_workers(self) -> dict | None:
        """Every worker's own and waited seconds in the epoch just ended, from its
        ``on_epoch_begin`` to its ``on_epoch_end`` but for validation
        (``step_times.epoch_figures``), where the strategy's steps are timed."""
        return None

    def validate(self) -> dict[str, float]:
        return {}

    def validation_step(self, step: int) -> None:
        """After each validation step: a heartbeat, at most every few seconds."""
        self.beat("validation", self.epoch + 1, step, force=False)

    def agree_to_stop(self) -> bool:
        """Whether training stops now: ``model.stop_training`` as every worker sees it."""
        return bool(getattr(self.model, "stop_training", False))

    def fit(self, first_epoch: int = 0, history: dict | None = None,
            state: dict | None = None) -> dict[str, list[float]]:
        """Runs epochs ``first_epoch`` .. ``epochs - 1``, checkpointing after each one;
        ``state``: the checkpoint resumed from (``resume``), whose callbacks, best epoch
        and decision to stop carry on."""
        history = collections.defaultdict(list, {k: list(v) for k, v in (history or {}).items()})
        state = state or {}
        self.model.stop_training = False
        if first_epoch:
            file_callbacks.resume(self.spec.callbacks, history, first_epoch)
        self.callbacks.on_train_begin()
        self.initial = run_state.snapshot(self.stateful)  # as each attempt starts them
        if state:
            self._carry_on(state)
        logs: dict = {}
        # a callback that stopped the run before it was lost has the last word
        epochs = () if state.get("stopped") else range(first_epoch, self.spec.epochs)
        for epoch in epochs:
            self.epoch = epoch
            started = time.monotonic()
            self.model.reset_metrics()
            if self.times is not None:  # the epoch's own work: its callbacks included
                self.times.start()
            self.callbacks.on_epoch_begin(epoch)
            logs = self.train_epoch(epoch)
            if self.validates():
                self.beat("validation", epoch + 1)
                with self.times.excluded() if self.times is not None else _nothing():
                    logs.update(self.validate())
            self.beat("callbacks", epoch + 1)
            self.callbacks.on_epoch_end(epoch, logs)
            logs = self.recorder.logs  # as the callbacks left them (e.g. + learning_rate)
            workers = self.epoch_workers()
            if workers is not None:
                self.worker_times.append(workers)
                self.summaries.write_workers(epoch + 1, workers)
                heartbeats.report_workers(self.ctx, workers)
            for key, value in logs.items():
                history[key].append(value)
            if self.best is not None:
                self.best.on_epoch_end(epoch, logs)
            self.summaries.write(epoch + 1, logs)
            self.beat("checkpoint", epoch + 1)  # before the workers agree (a collective)
            stop = self.agree_to_stop()
            checkpoint.save(self.model, self.spec.model_dir, epoch + 1, dict(history),
                            self.ctx.isChief, prune_older=not self.spec.evaluator,
                            state=self._state(stop) if self.ctx.isChief else None,
                            keep=self.best.epoch if self.best is not None else None)
            heartbeats.report_epoch(self.ctx, epoch + 1, self.spec.epochs, logs, self.rows_trained,
                                 time.monotonic() - started)
            if stop:
                break
        _finalize(self.model)
        self.callbacks.on_train_end(logs)
        if self.best is not None:  # after the callbacks, as EarlyStopping restores its own
            self.best.restore(history)
        self.summaries.close()
        return dict(history)

    def _state(self, stopped: bool) -> dict:
        """The run's state after an epoch, beyond the variables (``run_state``)."""
        return {"seeds": run_state.seeds(self.model), "stopped": stopped,
                "callbacks": run_state.callbacks_state(self.stateful, self.initial),
                "best": self.best.state() if self.best is not None else None,
                "workers": self.worker_times}

    def _carry_on(self, state: dict) -> None:
        """The resumed checkpoint's callbacks and best epoch, as the lost attempt left them."""
        run_state.restore_callbacks(self.stateful, state.get("callbacks"))
        self.worker_times = list(state.get("workers") or [])
        kept = state.get("best")
        if self.best is not None and kept:
            self.best.resume(kept, _weights_at(self.model, self.spec, kept["epoch"], state))


def _weights_at(model, spec: TrainSpec, epoch: int, resumed: dict) -> list:
    """The model's weights after ``epoch`` (its checkpoint, kept for ``keepBest``); the
    model is left as the checkpoint ``resumed`` has it."""
    if epoch == resumed["epoch"]:
        return model.get_weights()
    checkpoint.restore(model, spec.model_dir, checkpoint.at_epoch(epoch))
    weights = model.get_weights()
    checkpoint.restore(model, spec.model_dir, resumed)
    return weights


class _EpochLogs:
    """Last in the callback list, like Keras's History: the epoch's logs as the other
    callbacks left them (``CallbackList`` hands them a copy of the loop's logs), a vector
    metric's array as a list (``keras_steps.history_values``)."""

    def __new__(cls):
        import keras

        class EpochLogs(keras.callbacks.Callback):
            logs: dict = {}

            def on_epoch_end(self, epoch, logs=None):
                self.logs = keras_steps.history_values(logs)

        return EpochLogs()


def _finalize(model) -> None:
    """What Keras's ``fit`` does after the last epoch: e.g. an EMA optimizer's averages
    become the weights."""
    import keras

    if isinstance(model.optimizer, keras.optimizers.Optimizer):
        model.optimizer.finalize_variable_values(model.trainable_weights)


def features(data: tuple) -> tuple:
    x = data[0]
    return x if isinstance(x, tuple) else (x,)


class ValidationPass:
    """Keras's ``evaluate`` inside ``fit``: ``test_step`` over the validation rows, then
    the metrics over every worker, ``val_`` prefixed."""

    def __init__(self, steps_fn, spec: TrainSpec, shard: shards.Shard, plan: StepPlan,
                 callbacks, bound: binding.Bindings, infos: dict):
        self.steps_fn, self.spec, self.shard, self.plan = steps_fn, spec, shard, plan
        self.callbacks = callbacks
        self.hooks = keras_steps.overrides(spec.callbacks, keras_steps.TEST_BATCH_HOOKS)
        self.bound, self.infos = bound, infos

    def run(self, progress=None) -> dict[str, float]:
        """``progress(step)`` is called after each step (heartbeats)."""
        model = self.steps_fn.model
        model.reset_metrics()
        self.callbacks.on_test_begin()
        logs: dict = {}
        shares = self.plan.shares
        reduced = bool(self.hooks)
        for step, data in enumerate(self.spec.batches(self.shard, self.plan.sizes, self.bound,
                                                      infos=self.infos, stand_in=True)):
            if self.hooks:
                self.callbacks.on_test_batch_begin(step)
            reduced = self.steps_fn.reduces(bool(self.hooks), step == self.plan.steps - 1)
            logs = self.steps_fn.test(data, shares[step], reduce=reduced)
            if self.hooks:
                self.callbacks.on_test_batch_end(step, logs)
            if progress is not None:
                progress(step)
        logs = self.steps_fn.epoch_logs(logs, reduced)
        self.callbacks.on_test_end(logs)
        return {f"val_{name}": value for name, value in logs.items()}


def callback_list(callbacks, model, epochs: int, steps: int):
    import keras

    return keras.callbacks.CallbackList(list(callbacks), add_history=False,
                                        add_progbar=False, model=model, epochs=epochs,
                                        steps=steps, verbose=0)


class Validator:
    """Validates ``model`` in this process alone; its test step is traced once, then reused."""

    def __init__(self, model, spec: TrainSpec, bound: binding.Bindings, infos: dict):
        import tensorflow as tf

        self.model, self.spec, self.bound, self.infos = model, spec, bound, infos
        # the default strategy: this process alone
        self.steps = keras_steps.KerasSteps(tf.distribute.get_strategy(), model)
        self.callbacks = callback_list(spec.callbacks, model, spec.epochs, 1)

    def __call__(self, shard: shards.Shard, progress=None) -> dict[str, float]:
        """``val_loss`` and the compiled metrics (``val_`` prefixed) on ``shard``;
        ``progress(step)`` after each step."""
        plan = StepPlan.of([shard.num_rows], 0, self.spec.batch_size)
        return ValidationPass(self.steps, self.spec, shard, plan, self.callbacks, self.bound,
                              self.infos).run(progress)
