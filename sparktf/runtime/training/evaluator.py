"""The evaluator side-car: validation of each checkpoint outside the training loop.

The evaluator (``TFEstimator(evaluator=True)``) is one more task of the barrier
stage, outside TensorFlow's cluster. It holds the validation rows and evaluates
each checkpoint as the chief commits it, while training goes on: it waits for
the next one with one blocking request to the driver (which hears of every
committed epoch), restores it into its own copy of the model, and evaluates.
The chief keeps every checkpoint while an evaluator runs; the evaluator removes
those it has read (all but the newest ``checkpoint.KEEP``), so however far it
falls behind, it evaluates every epoch. Its metrics reach the driver in its
result and join the model's history.
"""

from __future__ import annotations

import collections

from sparktf._protocol.client import EventClient
from sparktf.runtime.training import checkpoint, keras_steps, loop, summaries
from sparktf.runtime.training.spec import TrainSpec


def evaluate_checkpoints(spec: TrainSpec, ctx) -> dict:
    """The evaluator's loop: each committed checkpoint, in order, until training is over."""
    import tensorflow as tf

    shard = ctx.validationShard
    if shard is None or not shard.num_rows:
        raise ValueError("The evaluator received no validation rows. Set validationFraction "
                         "or validationCol so that some rows are held out.")
    model, bound = loop.build_model(spec, ctx.feedSpec)
    validate = loop.Validator(model, spec, bound, ctx.feedSpec)
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
                logs = keras_steps.history_values(validate(shard))
                history["epoch"].append(epoch)
                for key, value in logs.items():
                    history[key].append(value)
                ctx.emit("log", line=f"evaluator: epoch {epoch} " + " ".join(
                    f"{tag}={number:.4f}" for key, value in logs.items()
                    for tag, number in summaries.elements(key, value)))
            done = max(done, int(notice["epoch"]))
            checkpoint.prune(spec.model_dir, done)
            if notice["finished"]:
                return {"evaluation": dict(history)}
