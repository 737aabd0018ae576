"""All-reduce training (MultiWorkerMirroredStrategy): every worker steps through its own
shard in lockstep, Keras's ``train_step`` under the strategy with the loss scaled so
that the step equals one over the global batch."""

from __future__ import annotations

from contextlib import nullcontext as _nothing

import numpy as np

from sparktf.runtime.process import step_times
from sparktf.runtime.training import export, keras_steps, loop, tf_keras
from sparktf.runtime.training.spec import StepPlan, TrainSpec


def train(spec: TrainSpec, ctx) -> dict | None:
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=communication(bool(tf.config.list_physical_devices("GPU"))))
    ctx.phase("strategy created")
    with strategy.scope():
        model, bound = loop.build_model(spec, ctx.feedSpec)
    ctx.phase("model built")
    loop.check_labels(model, spec, ctx)
    first_epoch, history, state = loop.resume(model, spec)
    if keras_steps.is_tf_keras(model):  # Keras 2 models keep their own fit
        workers = ctx.numWorkers
        history = tf_keras.fit(
            spec, ctx, strategy, model, bound, first_epoch, history,
            StepPlan.of(ctx.allNumRows[:workers], ctx.rank, spec.batch_size),
            StepPlan.of(ctx.allValidationRows[:workers], ctx.rank, spec.batch_size)
            if spec.validates_in_loop else None)
        workers = None
    else:
        runner = _EpochLoop(spec, ctx, strategy, model, bound)
        history = runner.fit(first_epoch, history, state)
        workers = runner.worker_times
    ctx.phase("trained")
    return export.chief_result(model, spec, ctx, history, bound, workers)


def communication(gpus: bool):
    """How the workers' collectives run: NCCL between GPUs, TensorFlow's own ring (over
    gRPC, through host memory) between CPUs. ``CommunicationImplementation.AUTO`` does not
    pick NCCL for GPUs by itself (TensorFlow's ``AssignCollectiveType`` takes NCCL only
    when an op or the session asks for it, which the strategy does not for AUTO), so
    GPUs would all-reduce through the hosts. Every worker of a fit has GPUs or none (one
    resource profile for the stage), so every worker chooses alike. Gradients go in one
    pack (``bytes_per_pack=0``, TensorFlow's default): the fewest messages a step."""
    import tensorflow as tf

    implementation = tf.distribute.experimental.CommunicationImplementation
    return tf.distribute.experimental.CommunicationOptions(
        implementation=implementation.NCCL if gpus else implementation.AUTO)


class _EpochLoop(loop.EpochRunner):
    """All-reduce epochs: every worker steps through its own shard in lockstep."""

    def __init__(self, spec: TrainSpec, ctx, strategy, model, bound):
        workers = ctx.allNumRows[:ctx.numWorkers]  # workers take the first ranks
        self.plan = StepPlan.of(workers, ctx.rank, spec.batch_size)
        super().__init__(spec, ctx, model, self.plan.steps)
        self.strategy = strategy
        self.bound = bound
        self.steps_fn = keras_steps.KerasSteps(strategy, model)
        # the state each worker keeps apart: non-trainable floats (not seed generators)
        self.per_worker = [v for v in model.non_trainable_variables
                           if np.dtype(v.dtype).kind == "f"]
        # and the gradients each worker accumulated so far (gradient_accumulation_steps):
        # the update sums them over the workers, which their mean on every worker keeps
        self.per_worker += list(getattr(model.optimizer, "_accumulated_gradients", None)
                                or [])
        self._same_state = None
        # each worker's own time apart from its wait in the all-reduce (before the step
        # is traced: the timing is part of it)
        self.times = (step_times.StepTimes(model.optimizer) if ctx.numWorkers > 1
                      else None)
        self._done = 0  # steps trained in the epoch
        self.shares = self.plan.shares
        # batch logs are averaged over the workers (a collective) only when a callback
        # or the step summaries read them; each epoch's last step always is (custom logs)
        self.batch_logs = (keras_steps.overrides(spec.callbacks, keras_steps.TRAIN_BATCH_HOOKS)
                           or bool(spec.summary_steps))
        self.validation = (loop.ValidationPass(self.steps_fn, spec, ctx.validationShard,
                                          StepPlan.of(ctx.allValidationRows[:ctx.numWorkers],
                                                      ctx.rank, spec.batch_size),
                                          self.callbacks, bound, ctx.feedSpec)
                           if spec.validates_in_loop else None)

    def validates(self) -> bool:
        return self.validation is not None

    def train_epoch(self, epoch: int) -> dict[str, float]:
        logs: dict = {}
        hooks = self.batch_logs
        reduced = hooks
        done = 0  # steps trained
        waiting = self.times.waiting if self.times is not None else _nothing
        for step, data in enumerate(self.spec.batches(self.ctx.shard, self.plan.sizes,
                                                      self.bound, epoch,
                                                      self.ctx.feedSpec, stand_in=True)):
            self.beat("training", epoch + 1, step, force=step == 0,
                      progress=lambda step=step, logs=logs: self._progress(step, logs))
            if hooks:
                self.callbacks.on_train_batch_begin(step)
            reduced = self.steps_fn.reduces(hooks, step == self.steps - 1)
            logs = self.steps_fn.train(data, self.shares[step], reduce=reduced)
            done = step + 1
            if step == 0 and epoch == 0:
                self.ctx.phase("first step")
            if hooks:
                self.callbacks.on_train_batch_end(step, logs)
                self.summaries.write_step(epoch * self.steps + step + 1, logs.get("loss"))
                with waiting():
                    stop = self.steps_fn.any_worker(self.model.stop_training)
                if stop:
                    self.model.stop_training = True
                    break
        self.rows_trained = self.plan.total_rows
        self._done = done
        with waiting():
            self.same_state()  # before validation, the callbacks and the checkpoint
        return self.steps_fn.epoch_logs(logs, reduced)

    def validate(self) -> dict[str, float]:
        return self.validation.run(self.validation_step)

    def epoch_workers(self) -> dict | None:
        pooled = (self.times.end_epoch(self.strategy, self.ctx, self.beat, "checkpoint",
                                       self.epoch + 1) if self.times is not None else None)
        if pooled is None:
            return None
        return step_times.epoch_figures(self.epoch + 1, *pooled, self._done,
                                        self.ctx.executors)

    def same_state(self) -> None:
        """Every worker's non-trainable state made one at the epoch's end: each worker's
        moving statistics (an unsynchronized ``BatchNormalization``) follow its own batches,
        the checkpoint keeps the chief's, and a resumed, relaunched or continued run would
        restore those on every worker. Each worker takes the mean over the workers, as the
        chief's value plus the mean of the others' differences from it, so state that is
        already the same everywhere (frozen weights, synchronized statistics) stays the
        same to the bit. Validation, the checkpoint and the export then hold one state."""
        if self.ctx.numWorkers < 2 or not self.per_worker:
            return
        if self._same_state is None:
            self._same_state = _state_mean(self.strategy, self.per_worker,
                                           self.ctx.numWorkers)
        self._same_state(np.bool_(self.ctx.isChief))

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


def _state_mean(strategy, variables: list, workers: int):
    """A function of ``is_chief`` that sets each of ``variables`` on every worker to
    chief + sum(worker - chief) / workers (two all-reduces a variable)."""
    import tensorflow as tf

    def reduce(values):
        return [strategy.reduce("SUM", v, axis=None) for v in values]

    @tf.function(autograph=False)
    def same(is_chief):
        own = [tf.identity(v.value) for v in variables]
        chief = reduce(strategy.run(
            lambda: [tf.where(is_chief, x, tf.zeros_like(x)) for x in own]))
        moved = reduce(strategy.run(lambda: [x - c for x, c in zip(own, chief)]))
        for v, c, d in zip(variables, chief, moved):
            v.assign(c + d / tf.cast(workers, c.dtype))

    return same
