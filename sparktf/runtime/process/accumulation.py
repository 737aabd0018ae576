"""Keras's gradient accumulation (``optimizer.gradient_accumulation_steps``) under a
``tf.distribute`` strategy, with Keras's numbers and one gradient all-reduce per update.

Keras decides inside the traced step whether a step accumulates or applies
(``ops.cond`` in ``BaseOptimizer._backend_apply_gradients``), and the applying branch
all-reduces the gradients: on CPUs that all-reduce is a ``merge_call``, which TensorFlow
refuses inside a ``tf.cond`` ("merge_call called while defining a new graph"), so Keras's
own ``fit`` fails under every strategy on CPU. Whether a step applies depends only on the
optimizer's step counter, which the caller knows before the step: ``branch(optimizer,
update)`` makes the step's trace take that branch in Python, with no ``cond``. An
accumulating step then adds the worker's own gradients to its accumulators (a local
update: no collective at all), and an applying step all-reduces the accumulated
gradients once, then applies them as Keras does: ``(gradients + accumulated) /
steps``, clipped, with weight decay, then the accumulators zeroed. The caller traces one
step function per branch (``KerasSteps``) and calls the one the counter says.

Only the optimizer given is changed (an attribute of its own), nothing in Keras's
classes; a Keras whose optimizer lacks the methods this relies on is refused by
``check``, which names what it found.
"""

from __future__ import annotations

import contextlib

# the BaseOptimizer methods the applying branch calls, as Keras 3 has them
_USED = ("_backend_apply_gradients", "_backend_increment_gradient_accumulators",
         "_backend_reset_gradient_accumulators", "_backend_update_step", "_clip_gradients",
         "_apply_weight_decay", "_get_variable_index")


def steps(optimizer) -> int:
    """The optimizer's ``gradient_accumulation_steps``, 0 for none."""
    return int(getattr(optimizer, "gradient_accumulation_steps", None) or 0)


def check(optimizer) -> None:
    """Refuses what this module cannot run the way Keras does, saying what to do instead."""
    missing = [m for m in _USED if not hasattr(optimizer, m)]
    if missing:
        raise ValueError(
            f"gradient_accumulation_steps={steps(optimizer)} needs Keras 3's optimizer "
            f"methods {missing}, which this Keras lacks. Set batchSize to the accumulated "
            "batch (batchSize x gradient_accumulation_steps) and remove "
            "gradient_accumulation_steps from the optimizer.")
    if getattr(optimizer, "use_ema", False):
        raise ValueError(
            f"gradient_accumulation_steps={steps(optimizer)} with use_ema=True: sparktf "
            "runs Keras's accumulation under a tf.distribute strategy without the moving "
            "average. Remove one of the two, or set batchSize to the accumulated batch "
            "(batchSize x gradient_accumulation_steps) without accumulation.")
    if hasattr(optimizer, "inner_optimizer"):
        raise ValueError(
            f"gradient_accumulation_steps={steps(optimizer)} on a LossScaleOptimizer "
            "(mixed_float16): sparktf runs Keras's accumulation under a strategy for a plain "
            "optimizer only. Set batchSize to the accumulated batch (batchSize x "
            "gradient_accumulation_steps), or use mixed_bfloat16, which needs no loss "
            "scaling.")


def applies(optimizer) -> bool:
    """Whether the optimizer's next step applies the accumulated gradients (Keras:
    ``(iterations + 1) % steps == 0``, ``iterations`` counting every step)."""
    return (int(optimizer._iterations.numpy()) + 1) % steps(optimizer) == 0


@contextlib.contextmanager
def branch(optimizer, update: bool):
    """Within: a step traced takes the accumulating (``update`` False) or applying branch
    of ``optimizer``'s accumulation in Python."""
    vars(optimizer)["_backend_apply_gradients"] = _in_python(optimizer, update)
    try:
        yield
    finally:
        del vars(optimizer)["_backend_apply_gradients"]


def _in_python(optimizer, update: bool):
    def apply_gradients(grads, trainable_variables):
        accumulated = [optimizer._accumulated_gradients[optimizer._get_variable_index(v)]
                       for v in trainable_variables]
        if not update:
            optimizer._backend_increment_gradient_accumulators(grads, accumulated)
            return
        n = steps(optimizer)
        grads = [(g + a) / n for g, a in zip(grads, accumulated)]
        grads = optimizer._clip_gradients(grads)
        optimizer._apply_weight_decay(trainable_variables)
        optimizer._backend_update_step(grads, trainable_variables, optimizer.learning_rate)
        optimizer._backend_reset_gradient_accumulators()

    return apply_gradients
