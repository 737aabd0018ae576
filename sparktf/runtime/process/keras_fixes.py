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

3. ``make_train_function`` and ``make_test_function``: an optimizer with
   ``gradient_accumulation_steps`` decides inside the traced step whether to accumulate
   or apply (``ops.cond``), and the applying
   branch all-reduces the gradients: a ``merge_call`` on CPUs, which TensorFlow refuses
   inside a cond under any strategy. One function is made per branch and called as the
   optimizer's step counter says (``accumulation``): one all-reduce per update, Keras's
   numbers. And ``steps_per_execution > 1`` under ``MultiWorkerMirroredStrategy`` fails
   in the ``tf.while_loop`` Keras builds for it (``InvalidArgumentError`` at
   ``while/cond/Placeholder``): its steps run one by one from Python instead, Keras's own
   path for an iterator that is not a dataset's, with the same numbers.

4. ``fit`` with a ``LossScaleOptimizer`` (``mixed_float16``): Keras decides whether a
   step overflowed on each worker's own gradients, before the all-reduce its applying
   branch holds, so a worker whose gradients overflow skips the step while the others wait
   for it in the all-reduce: the fit hangs. Every worker takes the decision one process
   would take (``loss_scale``).

Everything else keeps Keras's own code: other strategies, ``reduction`` other than the
mean. ``fit`` itself only gains a callback of sparktf's in its tasks, which times each
worker's steps (``step_times``: the straggler named). ``apply()`` does nothing on Keras 2
(``tf_keras``, which has neither path) or where Keras has changed these functions (their
names or parameters): ``tests/integration/test_porting.py`` runs the failing program
after ``undo()`` and fails once a Keras release fixes it upstream, saying to remove this
module.
"""

from __future__ import annotations

import inspect
import os

from sparktf.runtime.process import accumulation, loss_scale, step_times

CHECKED = ("3.14.0", "3.15.1")

_applied = False


def apply() -> bool:
    """Applies the fixes in this process (once); whether they are in place."""
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
    fit = getattr(trainer.TensorFlowTrainer, "fit", None)
    if fit is not None and "callbacks" in inspect.signature(fit).parameters:
        trainer.TensorFlowTrainer.fit = _with_step_times(fit, multi_worker)
    for kind in ("train", "test"):
        make = getattr(trainer.TensorFlowTrainer, f"make_{kind}_function", None)
        if make is not None and list(inspect.signature(make).parameters) == ["self", "force"]:
            setattr(trainer.TensorFlowTrainer, f"make_{kind}_function",
                    _steps_in_python(make, multi_worker, kind))
    _applied = True
    return True


def undo(build: bool = True, reduce: bool = True, steps: bool = True) -> None:
    """Keras as released again in this process, for the first path (``build``), the
    second (``reduce``), the third (``steps``) or all: the upstream-fix test asks each
    path alone."""
    from keras.src.backend.tensorflow import trainer

    for kind in ("train", "test") if steps else ():
        fixed = getattr(trainer.TensorFlowTrainer, f"make_{kind}_function")
        setattr(trainer.TensorFlowTrainer, f"make_{kind}_function",
                getattr(fixed, "__wrapped__", fixed))

    if steps:
        fixed = trainer.TensorFlowTrainer.fit
        trainer.TensorFlowTrainer.fit = getattr(fixed, "__wrapped__", fixed)
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


def _steps_in_python(original, multi_worker, kind: str):
    """``make_train_function`` (``kind`` "train") or ``make_test_function`` ("test") that
    calls Keras's one-step function from Python: for an optimizer that accumulates
    gradients under a strategy, one training function per branch, called as the
    optimizer's step counter says (``accumulation``), instead of Keras's one function
    whose cond holds the all-reduce; and under ``MultiWorkerMirroredStrategy``,
    ``steps_per_execution`` steps a call made one by one, as Keras runs a call over an
    iterator that is not a dataset's (the ``tf.while_loop`` Keras builds for them fails
    there on the strategy's collectives)."""
    import contextlib

    attribute = f"{kind}_function"

    def make_function(self, force=False):
        strategy = getattr(self, "_distribute_strategy", None)
        optimizer = getattr(self, "optimizer", None)
        accumulate = (kind == "train" and strategy is not None
                      and bool(accumulation.steps(optimizer)))
        several = (strategy is not None and multi_worker(strategy)
                   and getattr(self, "steps_per_execution", 1) > 1)
        if not (accumulate or several):
            return original(self, force)
        if getattr(self, attribute) is not None and not force:
            return getattr(self, attribute)
        if accumulate:
            accumulation.check(optimizer)
        made = {}
        for update in (False, True) if accumulate else (None,):
            with _one_step_a_call(self):
                original(self, force=True)
            made[update] = getattr(self, attribute)

        def one_step(iterator):
            update = accumulation.applies(optimizer) if accumulate else None
            with (accumulation.branch(optimizer, update) if accumulate
                  else contextlib.nullcontext()), _one_step_a_call(self):
                return made[update](iterator)

        def function(iterator):
            outputs = None
            for _ in range(self.steps_per_execution):
                try:
                    outputs = one_step(iterator)
                except StopIteration:
                    if outputs is None:
                        raise
                    break  # the epoch's last steps: Keras's loop returns their logs too
            return outputs

        setattr(self, attribute, function)
        return function

    make_function.__wrapped__ = original
    return make_function


def _with_step_times(original, multi_worker):
    """``fit`` that, under ``MultiWorkerMirroredStrategy`` on several workers, has a
    ``LossScaleOptimizer`` decide on overflows over every worker (``loss_scale``: the
    fourth path), and in a sparktf task times each worker's own work apart from its wait
    in the gradient all-reduce (``step_times``) and has the chief report every worker's
    figures after each epoch: the driver names a straggler. Keras's own ``fit``
    otherwise, its history unchanged."""
    signature = inspect.signature(original)

    def fit(self, *args, **kwargs):
        strategy = getattr(self, "_distribute_strategy", None)
        if strategy is not None and multi_worker(strategy):  # before the step is traced
            loss_scale.agree_on_overflow(getattr(self, "optimizer", None))
        ctx = step_times.task_context()
        # the same decision on every worker (whatever each passes as callbacks): a worker
        # timed alone would wait at the epoch's gather for the others, for ever
        if (ctx is None or strategy is None or not multi_worker(strategy)
                or ctx.numWorkers < 2
                or not step_times.timeable(getattr(self, "optimizer", None))
                or step_times.packed(strategy)):
            return original(self, *args, **kwargs)
        bound = signature.bind(self, *args, **kwargs)
        callbacks = bound.arguments.get("callbacks")
        first, last = step_times.reporters(self, strategy, ctx)
        if hasattr(callbacks, "callbacks") and hasattr(callbacks, "on_train_batch_end"):
            # a CallbackList of the user's: theirs, with sparktf's two for this fit only
            kept = callbacks.callbacks
            kept.insert(0, first)
            kept.append(last)
            for ours in (first, last):  # as the list gave its own (Keras uses it as it is)
                ours.set_model(self)
                ours.set_params(callbacks.params)
            try:
                return original(*bound.args, **bound.kwargs)
            finally:
                kept.remove(first)
                kept.remove(last)
        given = [callbacks] if hasattr(callbacks, "on_train_batch_end") else list(
            callbacks or [])
        bound.arguments["callbacks"] = [first, *given, last]
        return original(*bound.args, **bound.kwargs)

    fit.__wrapped__ = original
    return fit


class _one_step_a_call:
    """Within: the model's ``steps_per_execution`` is 1, as Keras's step functions read it
    when they trace."""

    def __init__(self, model):
        self.model = model

    def __enter__(self):
        self.kept = self.model.steps_per_execution
        self.model.steps_per_execution = 1

    def __exit__(self, *exc):
        self.model.steps_per_execution = self.kept
