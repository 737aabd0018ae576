"""Validation outside the training loop: the evaluator side-car, and the PS chief's pass.

The evaluator (``TFEstimator(evaluator=True)``) is one more task of the barrier
stage, outside TensorFlow's cluster. It holds the validation rows and evaluates
each checkpoint as the chief commits it, while training goes on: it waits for
the next one with one blocking request to the driver (which hears of every
committed epoch), restores it into its own copy of the model, and evaluates.
Its metrics reach the driver in its result and join the model's history.
"""

from __future__ import annotations

import collections

from sparktf.runtime import checkpoint, feed, keras_steps, training
from sparktf.runtime.events import EventClient


class Validator:
    """Validates ``model`` in this process alone; its test step is traced once, then reused."""

    def __init__(self, model, spec: training.TrainSpec):
        import tensorflow as tf

        self.model, self.spec = model, spec
        # the default strategy: this process alone
        self.steps = keras_steps.KerasSteps(tf.distribute.get_strategy(), model)
        self.callbacks = training.callback_list(spec.callbacks, model, spec.epochs, 1)

    def __call__(self, shard: feed.Shard, progress=None) -> dict[str, float]:
        """``val_loss`` and the compiled metrics (``val_`` prefixed) on ``shard``;
        ``progress(step)`` after each step."""
        plan = training.StepPlan.of([shard.num_rows], 0, self.spec.batch_size)
        return training.ValidationPass(self.steps, self.spec, shard, plan,
                                       self.callbacks).run(progress)


def evaluate_checkpoints(spec: training.TrainSpec, ctx) -> dict:
    """The evaluator's loop: each committed checkpoint, in order, until training is over."""
    import tensorflow as tf

    shard = ctx.validationShard
    if shard is None or not shard.num_rows:
        raise ValueError("The evaluator received no validation rows. Set validationFraction "
                         "or validationCol so that some rows are held out.")
    model = training.build_model(spec, ctx.feedSpec)
    validate = Validator(model, spec)
    history: dict[str, list] = collections.defaultdict(list)
    done = 0
    with EventClient.from_environment(ctx.rank) as channel:
        while True:
            notice = channel.request({"kind": "await_epoch", "after": done})
            if notice is None:
                raise RuntimeError("The evaluator lost the driver's event channel.")
            for epoch in range(done + 1, int(notice["epoch"]) + 1):
                try:
                    checkpoint.restore(model, spec.model_dir, checkpoint.at_epoch(epoch))
                except (OSError, tf.errors.NotFoundError):
                    ctx.emit("log", line=f"evaluator: skipped epoch {epoch}: its checkpoint "
                                         "was already replaced by newer ones")
                    continue
                logs = validate(shard)
                history["epoch"].append(epoch)
                for key, value in logs.items():
                    history[key].append(value)
                ctx.emit("log", line=f"evaluator: epoch {epoch} " + " ".join(
                    f"{k}={v:.4f}" for k, v in logs.items()))
            done = max(done, int(notice["epoch"]))
            if notice["finished"]:
                return {"evaluation": dict(history)}
