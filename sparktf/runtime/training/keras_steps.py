"""A compiled Keras 3 model's own steps, run the way Keras's ``fit`` runs them.

Keras 3's own ``fit`` fails under ``MultiWorkerMirroredStrategy`` (its log
reduction hands PerReplica values to code that expects tensors), so sparktf
drives the epochs and runs the model's own ``train_step`` / ``test_step`` inside
``strategy.run`` (``KerasSteps``). Also here: the checks made of a model before the
first step (how columns become its inputs: ``bindings``).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from sparktf.runtime.process import accumulation, loss_scale


def is_tf_keras(model) -> bool:
    """Whether ``model`` is a tf_keras (Keras 2) model rather than a Keras 3 one."""
    return any(c.__module__.split(".")[0] == "tf_keras" for c in type(model).__mro__)


def _check_tf_keras_compiled(model) -> None:
    """Raises ``TypeError`` unless the tf_keras model was compiled."""
    if getattr(model, "optimizer", None) is None or not getattr(model, "_is_compiled", False):
        raise TypeError("modelFn returned a tf_keras model that is not compiled. Call "
                        "model.compile(optimizer=..., loss=...) in modelFn before returning it.")


def check_compiled(model) -> None:
    """Raises ``TypeError`` unless ``model`` is a compiled Keras 3 or tf_keras model."""
    import keras

    if is_tf_keras(model):
        _check_tf_keras_compiled(model)
        return
    if not isinstance(model, keras.Model):
        raise TypeError("modelFn must return a compiled keras.Model (Keras 3). "
                        f"Received: {type(model).__module__}.{type(model).__name__}")
    if getattr(model, "optimizer", None) is None or not getattr(model, "compiled", False):
        raise TypeError("modelFn returned a keras.Model that is not compiled. Call "
                        "model.compile(optimizer=..., loss=..., metrics=[...]) in modelFn "
                        "before returning it.")
    if accumulation.steps(model.optimizer):
        accumulation.check(model.optimizer)


def build(model, template) -> None:
    """Creates the model's, its compiled metrics' and loss's, and its optimizer's
    variables from the shapes of ``template`` (a batch ``(x, y[, sample_weight])`` of
    numpy arrays, or of ``symbolic`` tensors where an array cannot say the shape), under
    the current strategy scope, as Keras's ``fit`` does before its first step;
    subclassed models get their variables here."""
    import tensorflow as tf

    def leaf(value):
        return symbolic(value) if isinstance(value, np.ndarray) else value

    model._symbolic_build(data_batch=tf.nest.map_structure(leaf, template))


def symbolic(array: np.ndarray, declared=None):
    """A ``keras.KerasTensor`` for batches like ``array`` (any number of rows): its row
    shape, except where ``declared`` (an input's shape without the batch) leaves a
    dimension unknown. A variable-length column's zero rows are 0 wide, and an RNN
    cannot be built on a length of 0."""
    import keras
    shape = tuple(array.shape[1:])
    if declared is not None and len(declared) == len(shape):
        shape = tuple(None if d is None else s for d, s in zip(declared, shape))
    dtype = "string" if array.dtype == object else str(array.dtype)
    return keras.KerasTensor((None, *shape), dtype=dtype)


def step_data(x, y, sample_weight=None) -> tuple:
    """What ``train_step``/``test_step`` receive, as Keras's data adapters give it:
    ``(x, y)``, or ``(x, y, sample_weight)`` when rows are weighted; several inputs as
    a tuple."""
    x = tuple(x) if isinstance(x, list) else x
    return (x, y) if sample_weight is None else (x, y, sample_weight)


def overrides(callbacks, hooks: Sequence[str]) -> bool:
    """Whether any of ``callbacks`` implements one of the ``hooks`` (Callback method names)."""
    import keras

    base = keras.callbacks.Callback
    return any(getattr(type(cb), hook, None) is not getattr(base, hook)
               for cb in callbacks for hook in hooks)


TRAIN_BATCH_HOOKS = ("on_train_batch_begin", "on_train_batch_end", "on_batch_begin",
                     "on_batch_end")
TEST_BATCH_HOOKS = ("on_test_batch_begin", "on_test_batch_end")


class KerasSteps:
    """The compiled model's own ``train_step`` and ``test_step`` inside ``strategy.run``,
    as Keras's TensorFlow trainer runs them (``make_train_function``).

    Keras divides each replica's loss by ``num_replicas_in_sync`` and the optimizer
    sums the replicas' gradients: with equal shares of the global batch, that is the
    gradient of the global mean loss. Shares differ (uneven partitions), so each
    replica's loss is multiplied by ``factor`` = replicas x its rows / the step's
    global rows where Keras scales a loss for the optimizer (``optimizer.scale_loss``,
    after the loss tracker has seen the loss and where a ``LossScaleOptimizer`` applies
    its scale): the update is then the one for the mean loss over the step's global
    batch, and the loss tracker and metrics see exactly what Keras gives them.
    A ``train_step`` override that never calls ``scale_loss`` trains as under Keras's
    own ``fit`` with a ``MirroredStrategy``: exact when the shares are equal.

    A worker with no row in a step (``share`` 0) still runs it, on a stand-in row
    (``feed.stand_in_batch``), because every worker must join the step's gradient
    all-reduce: its factor is 0, so it adds nothing to the gradients, and afterwards its
    metrics (the loss tracker included) and the model's other non-trainable variables
    (batch statistics) are put back as they were, so it adds nothing to those either.
    """

    def __init__(self, strategy, model):
        self.strategy, self.model = strategy, model
        self._functions: dict = {}
        self._traced: dict = {}  # (function key, the arguments' shapes) -> their trace
        if strategy.num_replicas_in_sync > 1:  # mixed_float16: one decision on overflows
            loss_scale.agree_on_overflow(getattr(model, "optimizer", None))

    def train(self, data, share: float, reduce: bool) -> dict:
        """One training step on this worker's part of the global batch, ``share`` of the
        step's rows (0: a stand-in row); returns the step's logs, averaged over all
        replicas if ``reduce`` (a collective), else this replica's."""
        factor = (self.strategy.num_replicas_in_sync * share /
                  replicas_per_worker(self.strategy))
        args = (data, np.asarray(share, np.float32), np.asarray(factor, np.float32))
        optimizer = self.model.optimizer
        if not accumulation.steps(optimizer):
            return self._call(("train", reduce, None), args)
        # Keras's gradient accumulation: a step that accumulates and one that applies
        # (and all-reduces) are two functions, chosen by the optimizer's step counter
        update = accumulation.applies(optimizer)
        with accumulation.branch(optimizer, update):
            return self._call(("train", reduce, update), args)

    def test(self, data, share: float, reduce: bool) -> dict:
        """One evaluation step (``test_step``); ``share`` and logs as for ``train``."""
        return self._call(("test", reduce, None), (data, np.asarray(share, np.float32)))

    def _call(self, key: tuple, args: tuple):
        """The step function ``key`` on ``args``. For arrays of numbers (the usual batch)
        the trace ``tf.function`` would run for their shapes is looked up once per shape
        (``get_concrete_function``: the same traces, made at the same steps, as calling
        it) and then called directly, without ``tf.function``'s dispatch on every call
        (about 0.15 ms a step, a quarter of a small model's step). Anything else (text,
        ragged rows), and shapes beyond the first ``TRACES_KEPT``, take the
        ``tf.function`` and its dispatch."""
        shapes = _shapes(args)
        function = self._function(*key)
        if shapes is None:
            return function(*args)
        traced = self._traced.get((key, shapes))
        if traced is None:
            if len(self._traced) >= TRACES_KEPT:
                return function(*args)
            traced = self._traced[(key, shapes)] = function.get_concrete_function(*args)
        return traced(*args)

    def reduces(self, hooks: bool, last: bool) -> bool:
        """Whether a pass's step averages its logs over all replicas in the step itself
        (``reduce``): every step where batch callbacks read them (``hooks``), and the
        last one only with several replicas on this worker (under a strategy: the
        default one, a process alone, has one), whose unreduced logs are the first
        replica's. Else ``epoch_logs`` averages the last logs over the workers
        afterwards, and only where they are reported (a custom step's own logs): a step
        traced for its last call alone was a second trace of the training step in every
        fit (about a fifth of a small fit's task CPU)."""
        return hooks or (last and self._several_workers() and
                         replicas_per_worker(self.strategy) > 1)

    def _several_workers(self) -> bool:
        return self.strategy.num_replicas_in_sync > 1

    def epoch_logs(self, last_logs, reduced: bool) -> dict:
        """What Keras's ``fit`` reports after an epoch (``_get_metrics_result_or_logs``):
        the compiled metrics over all workers, or a custom step's own last logs (averaged
        over the workers here unless ``reduced`` by the step); a vector metric
        (``F1Score(average=None)``) as a numpy array, as Keras leaves it."""
        metrics = python_logs(self.model.get_metrics_result())
        if isinstance(last_logs, dict) and set(last_logs) == set(metrics):
            return metrics
        if not reduced and self._several_workers():
            last_logs = self._over_workers("MEAN", last_logs)
        return python_logs(last_logs)

    def any_worker(self, flag: bool) -> bool:
        """Whether ``flag`` is true on any worker (a collective every worker joins)."""
        return bool(self._over_workers("SUM", np.float32(flag)) > 0)

    def _over_workers(self, op: str, values):
        """``values`` (this worker's, one replica) reduced by ``op`` over all workers: the
        collective a step's ``strategy.reduce`` runs (every worker calls it alike)."""
        if op not in self._functions:
            import tensorflow as tf

            strategy = self.strategy

            @tf.function(autograph=False, reduce_retracing=True)
            def reduced(values):
                return tf.nest.map_structure(
                    lambda v: strategy.reduce(op, strategy.run(tf.identity, args=(v,)),
                                              axis=None), values)
            self._functions[op] = reduced
        return self._functions[op](values)

    def _function(self, kind: str, reduce: bool, update: bool | None = None):
        key = (kind, reduce, update)
        if key not in self._functions:
            self._functions[key] = self._compile(kind, reduce)
        return self._functions[key]

    def _compile(self, kind: str, reduce: bool):
        import tensorflow as tf

        strategy, model = self.strategy, self.model

        def train_step(data, factor):
            with _loss_scaled(model.optimizer, factor):
                return model.train_step(data)

        replica = _counted_by_share(model, train_step if kind == "train"
                                    else model.test_step)

        # Not jit-compiled: the step holds the cross-worker gradient all-reduce.
        @tf.function(reduce_retracing=True, autograph=autograph(model))
        def step(*args):
            outputs = strategy.run(replica, args=args)
            return tf.nest.map_structure(
                lambda v: (strategy.reduce("MEAN", v, axis=None) if reduce
                           else strategy.experimental_local_results(v)[0]), outputs)

        return step


TRACES_KEPT = 64  # step traces looked up by shape (variable lengths: the rest dispatch)


def _shapes(args) -> tuple | None:
    """The step arguments' shapes and dtypes, if every one is a NumPy array of numbers or
    booleans (scalars too); else None."""
    import tensorflow as tf

    found = []
    for a in tf.nest.flatten(args):
        if not isinstance(a, np.ndarray) or a.dtype.kind not in "biuf":
            return None
        found.append((a.shape, a.dtype.str))
    return tuple(found)


def autograph(model) -> bool:
    """Whether a step of ``model`` is traced with autograph. Not as a rule: Keras's own
    ``fit`` leaves its step unconverted (``do_not_convert`` in
    keras/src/backend/tensorflow/trainer.py), so a step that traces under Keras's ``fit``
    traces here, one it refuses is refused the same way, and the conversion's cost (about
    40% of a small fit's CPU) is not paid. A model compiled with ``run_eagerly=True``,
    whose step Keras's ``fit`` runs eagerly (Python control flow on tensors included), is
    traced with autograph, which converts that control flow: the step cannot run eagerly
    here, as every worker's step joins the gradient all-reduce."""
    return bool(getattr(model, "run_eagerly", False))


def _counted_by_share(model, step):
    """``step(data, *args)`` as ``replica(data, share, *args)``, where ``share`` is this
    worker's part of the step's rows. Keras's per-output loss trackers (``y_loss``) count
    each step once, by the loss over its whole batch: this worker's loss over its rows
    counts as ``share`` of a step. With no row (``share`` 0, a stand-in row), the step's
    effect on the metrics and on the model's non-trainable variables is undone (read
    before the step, written back after it: the function's automatic control
    dependencies keep that order)."""
    import tensorflow as tf
    from keras.src.backend.common import global_state

    # Keras's global seed generator (keras.random without a generator of its own) is a
    # thread's: the strategy runs replicas in threads of its own, where it would be made
    # again inside the traced step. Each replica uses the one made with the model.
    generator = global_state.get_global_attribute("global_seed_generator")

    def replica(data, share, *args):
        if generator is not None:
            global_state.set_global_attribute("global_seed_generator", generator)
        kept = list({id(v): v for v in [*model.metrics_variables,
                                        *model.non_trainable_variables]}.values())
        before = [tf.identity(v.value) for v in kept]
        with _weighted(_output_loss_trackers(model), share):
            outputs = step(data, *args)
        live = share > 0
        for variable, value in zip(kept, before):
            variable.assign(tf.where(live, variable.value, value))
        return outputs

    return replica


def _output_loss_trackers(model) -> list:
    compile_loss = getattr(model, "_compile_loss", None)
    return list(getattr(compile_loss, "metrics", None) or [])


class _weighted:
    """Within: the ``metrics``' ``update_state`` takes ``weight`` as the sample weight."""

    def __init__(self, metrics, weight):
        self.metrics, self.weight = metrics, weight

    def __enter__(self):
        weight = self.weight
        for metric in self.metrics:
            metric.update_state = (lambda values, sample_weight=None, update=metric.update_state:
                                   update(values, sample_weight=weight))

    def __exit__(self, *exc):
        for metric in self.metrics:
            del metric.update_state


class _loss_scaled:
    """Within: ``optimizer.scale_loss`` also multiplies by ``factor`` (while a step traces)."""

    def __init__(self, optimizer, factor):
        self.optimizer, self.factor = optimizer, factor

    def __enter__(self):
        import tensorflow as tf

        scale_loss, factor = self.optimizer.scale_loss, self.factor
        self.own = vars(self.optimizer).get("scale_loss")
        self.optimizer.scale_loss = lambda loss: scale_loss(loss) * tf.cast(factor, loss.dtype)

    def __exit__(self, *exc):
        if self.own is None:
            del self.optimizer.scale_loss
        else:
            self.optimizer.scale_loss = self.own


def python_logs(logs) -> dict:
    """Log values as Keras's ``pythonify_logs`` gives them to callbacks: a scalar as a
    Python float, a metric with a value per class (``F1Score(average=None)``) as a numpy
    array; values that are not numbers are left out."""
    out = {}
    for name, value in sorted((logs or {}).items()):
        value = np.asarray(value)
        if value.ndim == 0 and value.dtype.kind in "biuf":
            out[name] = float(value)
        elif value.dtype.kind in "biuf":
            out[name] = value
    return out


def history_values(logs) -> dict:
    """``logs`` (as ``CallbackList`` leaves them) as the history keeps them, ready for JSON
    (the driver's events, the checkpoint, ``getHistory``): a numpy array (Keras's History
    keeps it as it is) as a list of Python numbers, any other value as it is."""
    return {name: value.tolist() if isinstance(value, (np.ndarray, np.generic)) else value
            for name, value in (logs or {}).items()}


def replicas_per_worker(strategy) -> int:
    """Local replicas (devices) of this worker; each sees the worker's whole batch."""
    return max(1, len(strategy.extended.worker_devices))


def metric_results(model, prefix: str = "") -> dict:
    """The model's metrics (the loss tracker included) as ``python_logs``, ``prefix``ed;
    under a strategy, aggregated over all workers (their variables sync on read)."""
    return {prefix + k: v for k, v in python_logs(model.get_metrics_result()).items()}
