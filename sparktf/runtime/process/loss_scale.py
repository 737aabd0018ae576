"""Keras's ``LossScaleOptimizer`` (``mixed_float16``) on several replicas: every replica
takes the same decision on an overflow.

Keras decides whether a step's gradients are finite on each replica's own gradients,
before they are all-reduced (``LossScaleOptimizer._tf_apply``: ``check_finite`` on the
replica's gradients, then a ``cond`` whose applying branch holds the gradients'
all-reduce). When one worker's gradients overflow and another's do not, the first skips
the step and halves its scale while the other waits in the all-reduce for it: under
``MultiWorkerMirroredStrategy`` the fit hangs at that step (reproduced: a fit on 2 workers
whose partitions overflow differently never finished its first step). In one process
Keras checks the whole batch's gradients, which overflow when any part of them does.
``agree_on_overflow`` makes each replica's decision that one: the replicas' counts of
non-finite gradients are all-reduced (one scalar a step) before Keras's ``cond``, so every
replica applies the step, or skips it and halves its scale, together, as one process
would.
"""

from __future__ import annotations

from sparktf.runtime.process import step_times

_MARK = "_sparktf_agrees_on_overflow"


def agree_on_overflow(optimizer) -> None:
    """Makes ``optimizer`` (a Keras 3 ``LossScaleOptimizer``; anything else is left as it
    is) decide on overflows over every replica. Only this optimizer is changed."""
    if (not hasattr(optimizer, "inner_optimizer") or not hasattr(optimizer, "check_finite")
            or not hasattr(optimizer, "_tf_apply") or vars(optimizer).get(_MARK)):
        return
    original = optimizer._tf_apply

    def _tf_apply(grads, trainable_variables=None):
        import tensorflow as tf

        context = tf.distribute.get_replica_context()
        if context is None or context.num_replicas_in_sync < 2:
            return original(grads, trainable_variables)
        local = optimizer.check_finite(grads)
        overflowed = step_times.timed_collective(
            optimizer, [tf.cast(tf.logical_not(local), tf.float32)],
            lambda flags: context.all_reduce("SUM", flags[0]), lambda total: [total])
        finite = tf.equal(overflowed, 0.0)
        vars(optimizer)["check_finite"] = lambda _grads: finite
        try:
            return original(grads, trainable_variables)
        finally:
            del vars(optimizer)["check_finite"]

    vars(optimizer)["_tf_apply"] = _tf_apply
    vars(optimizer)[_MARK] = True
