"""Where each worker's time in a synchronous epoch goes: its own work apart from its wait
for the others in the gradient all-reduce, so that the driver can name a straggler.

Every step of ``MultiWorkerMirroredStrategy`` ends with the gradients' all-reduce, which
no worker leaves before the last one has entered it: a worker that feeds, computes or
runs callbacks slower than the others makes every other worker wait there, each step.
``StepTimes`` measures, inside the traced step, the time from the moment this worker's
gradients are ready to the moment the all-reduce returns them summed (``tf.timestamp``
on either side of Keras's ``_all_reduce_sum_gradients``, ordered by control
dependencies), and adds it to a counter of this worker's own (not the strategy's). An
epoch's wall time, from before its ``on_epoch_begin`` callbacks to after its
``on_epoch_end`` ones (its validation pass left out), less that wait, is the worker's own
time: feeding, the steps' computation and the callbacks. A worker whose own time stands
out is a straggler (``_driver.stragglers``); the others' waits are what it costs them. The
epoch's timing ends with a ``barrier``, so that the others' wait for a worker still in its
epoch's last callbacks counts as theirs, then ``gather`` pools the figures. A strategy
that packs the gradients in several all-reduces (``packed``) is not timed: the timing
would hold every pack until the last gradient is ready, which packing exists to avoid.

``gather`` puts every worker's figures together on every worker (one small all-reduce
an epoch, not a step). A Keras without ``_all_reduce_sum_gradients`` on its optimizer
is not timed (``StepTimes.timed`` is False): the fit goes on, nothing is reported.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np

from sparktf._protocol import heartbeats

_MARK = "_sparktf_waited"  # the optimizer's counter, once it is timed


def _target(optimizer):
    """The optimizer that all-reduces the gradients (a LossScaleOptimizer's inner one)."""
    return getattr(optimizer, "inner_optimizer", None) or optimizer


def timeable(optimizer) -> bool:
    return hasattr(_target(optimizer), "_all_reduce_sum_gradients")


def packed(strategy) -> bool:
    """Whether ``strategy`` all-reduces the gradients in several packs
    (``CommunicationOptions(bytes_per_pack > 0)``), so that the first packs start while
    the backward pass runs: timing the wait from the moment every gradient is ready
    would make each pack wait for all of them, so such a fit is not timed."""
    options = getattr(getattr(strategy, "extended", None), "_communication_options", None)
    return bool(getattr(options, "bytes_per_pack", 0))


class StepTimes:
    """This worker's own time and its wait in the gradient all-reduce, epoch by epoch.

    Made before the training step is traced (the timing is part of the trace); the same
    optimizer keeps one counter however often it is made."""

    def __init__(self, optimizer):
        self.timed = timeable(optimizer)
        self.waited = _counter(_target(optimizer)) if self.timed else None
        self._began = None
        self._other_waits = 0.0  # in collectives called from Python (``waiting``)
        self._left_out = 0.0  # this epoch's time ``excluded``
        self._paused = None  # when ``pause`` was called, until ``resume``
        self._steps_done = None  # when the last step's callbacks were done (``steps_done``)

    def start(self) -> None:
        """The epoch begins (before its ``on_epoch_begin``)."""
        self._began = (time.perf_counter(), self._read())
        self._left_out, self._paused, self._steps_done = 0.0, None, None

    def steps_done(self) -> None:
        """A step's callbacks are done. From the epoch's last step's callbacks to
        ``keras_reads_done``, Keras reads the epoch's metrics, which under a strategy are
        collectives (a metric's variables are summed over the workers as they are read):
        a wait for a worker still in its last step's callbacks, counted as one."""
        self._steps_done = time.perf_counter()

    def step_begins(self) -> None:
        """The next step begins: the last ``steps_done`` was not the epoch's last."""
        self._steps_done = None

    def keras_reads_done(self) -> None:
        """Keras has read the epoch's metrics (its validation or ``on_epoch_end`` begins)."""
        if self._steps_done is not None:
            self._other_waits += time.perf_counter() - self._steps_done
            self._steps_done = None

    @contextlib.contextmanager
    def excluded(self):
        """Within: not part of the epoch's figures (the validation pass, whose rows and
        collectives are not the training steps')."""
        self.pause()
        try:
            yield
        finally:
            self.resume()

    def pause(self) -> None:
        """``excluded`` from here (Keras's ``on_test_begin``) ..."""
        self._paused = time.perf_counter()

    def resume(self) -> None:
        """... to here (``on_test_end``); nothing if not paused."""
        if self._paused is not None:
            self._left_out += time.perf_counter() - self._paused
            self._paused = None

    @contextlib.contextmanager
    def waiting(self):
        """Within: a collective called from Python between steps (whether any worker
        stops), all of it a wait for the others."""
        began = time.perf_counter()
        try:
            yield
        finally:
            self._other_waits += time.perf_counter() - began

    def stop(self) -> tuple[float, float] | None:
        """The epoch is done (after its ``on_epoch_end``): (own seconds, waited seconds)
        since ``start`` but for what was ``excluded``, or None if not timed or not
        started."""
        if not self.timed or self._began is None:
            return None
        wall = time.perf_counter() - self._began[0] - self._left_out
        waited = max(self._read() - self._began[1], 0.0)
        self._began = None
        return max(wall - waited, 0.0), waited

    def end_epoch(self, strategy, ctx, beat, where: str, epoch: int):
        """The epoch's end on every worker (``epoch`` 1-based), after its callbacks:
        (own seconds, waited seconds) of every worker by index, or None if not timed.
        A heartbeat first, so that the watchdog names a rank stalled in its own
        callbacks, not one waiting for it; then the ``barrier``, whose wait counts as
        this worker's; then this worker's figures, in a heartbeat too, and ``gather``."""
        if not self.timed:
            return None
        beat(where, epoch)
        with self.waiting():  # for a worker still in its own on_epoch_end
            barrier(strategy, ctx.rank, ctx.numWorkers)
        own, waited = self.stop()
        beat(where, epoch, own_s=own, wait_s=waited)
        return gather(strategy, ctx.rank, ctx.numWorkers, own, waited)

    def _read(self) -> float:
        return (float(self.waited.numpy()) if self.timed else 0.0) + self._other_waits


def _counter(optimizer):
    """The optimizer's wait counter, made (and its all-reduce timed) the first time."""
    waited = vars(optimizer).get(_MARK)
    if waited is not None:
        return waited
    import tensorflow as tf
    from tensorflow.python.ops import resource_variable_ops

    with tf.init_scope():
        # a plain variable of this worker's: not one the strategy mirrors or syncs (its
        # scope may be entered), and not tracked by the optimizer (nor checkpointed)
        waited = resource_variable_ops.ResourceVariable(
            np.float64(0.0), trainable=False, name="sparktf_all_reduce_wait")
    original = optimizer._all_reduce_sum_gradients

    def all_reduce(grads_and_vars):
        pairs = list(grads_and_vars)
        present = [i for i, (g, _) in enumerate(pairs) if g is not None]

        def reduce(grads):
            given = list(pairs)
            for i, g in zip(present, grads):
                given[i] = (g, given[i][1])
            return original(given)

        return timed_collective(optimizer, [pairs[i][0] for i in present], reduce,
                                lambda reduced: [g for g, _ in reduced if g is not None])

    vars(optimizer)["_all_reduce_sum_gradients"] = all_reduce  # not Keras's tracking
    vars(optimizer)[_MARK] = waited
    return waited


def timed_collective(optimizer, values: list, collective, outputs=list):
    """``collective(values)`` (a collective inside the traced step), its time added to
    the wait counter of ``optimizer`` (or of its inner optimizer) if it has one: from the
    moment ``values`` are ready to the moment the collective's results (``outputs`` of
    them: tensors) are."""
    import tensorflow as tf

    waited = vars(_target(optimizer)).get(_MARK)
    if waited is None:
        return collective(values)
    ready = [t for v in values for t in tf.nest.flatten(v, expand_composites=True)]
    with tf.control_dependencies(ready):
        began = tf.timestamp()
    with tf.control_dependencies([began]):  # the collective starts after ``began``
        values = [tf.identity(v) for v in values]
    results = collective(values)
    done = [t for r in outputs(results) for t in tf.nest.flatten(r, expand_composites=True)]
    with tf.control_dependencies(done):
        waited.assign_add(tf.timestamp() - began)
    return results


def gather(strategy, index: int, workers: int, own: float, waited: float):
    """Every worker's (own, waited) seconds, by worker index, on every worker: an
    all-reduce of each worker's figures placed at its index. Every worker calls it."""
    import tensorflow as tf

    function = _gatherers.get(id(strategy))
    if function is None:
        @tf.function(autograph=False)
        def function(placed):
            return strategy.reduce("SUM", strategy.run(tf.identity, args=(placed,)),
                                   axis=None)
        _gatherers[id(strategy)] = function
    placed = np.zeros((2, workers), np.float64)
    placed[:, index] = own, waited
    total = function(placed).numpy()
    return [float(x) for x in total[0]], [float(x) for x in total[1]]


_gatherers: dict = {}


def barrier(strategy, index: int, workers: int) -> None:
    """Returns once every worker has called it (the ``gather`` of nothing): called inside
    an epoch's timing, so that the wait for a worker still in its epoch's last callbacks
    is counted as a wait."""
    gather(strategy, index, workers, 0.0, 0.0)
_context = None  # the task's ctx, in a sparktf task process


def use_context(ctx) -> None:
    """This process runs ``ctx``'s task: Keras's ``fit`` in it reports step times."""
    global _context
    _context = ctx


def task_context():
    return _context


def reporters(model, strategy, ctx) -> tuple:
    """Two Keras callbacks for ``fit`` under ``strategy``, the first to go first in the
    callback list and the second last: together they time each epoch from before the
    other callbacks' ``on_epoch_begin`` to after their ``on_epoch_end``, the fit's
    validation left out (``StepTimes``, made now, before the step is traced); then every
    worker's figures are gathered and the chief sends them to the driver. The fit's logs
    and history are left as Keras makes them."""
    import keras

    times = StepTimes(model.optimizer)
    beat = heartbeats.Heartbeat(ctx)

    class SparktfEpochBegins(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            times.start()

        def on_train_batch_begin(self, batch, logs=None):
            times.step_begins()

        def on_test_begin(self, logs=None):  # the fit's validation, callbacks and all
            times.keras_reads_done()
            times.pause()

        def on_epoch_end(self, epoch, logs=None):
            times.keras_reads_done()  # if there was no validation

    class SparktfEpochEnds(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            times.steps_done()

        def on_test_end(self, logs=None):
            times.resume()

        def on_epoch_end(self, epoch, logs=None):
            pooled = times.end_epoch(strategy, ctx, beat, "callbacks", epoch + 1)
            if pooled is None:
                return
            own, waited = pooled
            heartbeats.report_workers(ctx, epoch_figures(
                epoch + 1, own, waited, int((self.params or {}).get("steps") or 0),
                ctx.executors))

    return SparktfEpochBegins(), SparktfEpochEnds()


def epoch_figures(epoch: int, own: list[float], waited: list[float], steps: int,
                  executors=()) -> dict:
    """One epoch's (1-based) figures as they are reported and kept: by worker index, with
    each worker's executor (``host:port``) where known."""
    return {"epoch": int(epoch), "own_seconds": [round(x, 6) for x in own],
            "wait_seconds": [round(x, 6) for x in waited], "steps": int(steps),
            "executors": list(executors)[:len(own)]}
