"""The straggler, named (issue 54): each worker's own time (feeding, steps, callbacks)
apart from its wait for the others in the gradient all-reduce, gathered after each epoch;
the driver names a worker whose own time stands out, once an epoch, and is silent for a
balanced fit (every worker slowed alike: its epochs as long, no one waiting long). On
``TFEstimator.fit`` (sparktf's loop) and ``sparktf.run``'s Keras 3 ``fit`` (Keras's
loop), on real executors."""

import logging
import os
import re

import numpy as np
import pytest

import sparktf
from sparktf.ml import TFEstimator
from tests.integration import data, tutorials

# 8 steps an epoch: 1.6 s slower, well above what tracing the first epoch's step takes
# on one worker and not the other on a loaded machine
ROWS, BATCH, EPOCHS, SLOW_S = 256, 32, 2, 0.2


def _model(hparams):
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(0.05), "mse")
    return model


def _callbacks(slow_rank, hook):
    import keras

    class Slow(keras.callbacks.Callback):
        """Works alone on one worker (or every one): SLOW_S after each training step, or
        once an epoch as long as all of them."""

        def _work(self, seconds):
            import json
            import time

            if slow_rank in ("all", json.loads(os.environ["TF_CONFIG"])["task"]["index"]):
                time.sleep(seconds)  # stands for a slow callback, disk or neighbour

    if hook == "on_train_batch_end":
        Slow.on_train_batch_end = lambda self, batch, logs=None: self._work(SLOW_S)
    else:
        setattr(Slow, hook, lambda self, epoch, logs=None: self._work(SLOW_S * (ROWS // BATCH)))
    return [Slow()]


def _named(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "sparktf" and "straggler" in r.getMessage()]


@pytest.fixture
def frame(spark):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, 4)).astype("float32")
    y = x @ np.array([1.0, -2.0, 0.5, 3.0], np.float32)
    return data.frame(spark, [(x[i].tolist(), float(y[i])) for i in range(ROWS)],
                      "features array<float>, label float").repartition(2)


# a worker slowed after each step, or at an epoch's edge (before: counted as the other
# worker's wait, or nowhere), named; every worker slowed alike, silent
# (rank 1 slowed in on_epoch_begin: the other waits in the first step's all-reduce)
@pytest.mark.parametrize("slow_rank, hook", [(1, "on_epoch_begin"),
                                             ("all", "on_train_batch_end")])
def test_tfestimator_names_the_slowed_rank_and_is_silent_when_balanced(frame, caplog,
                                                                       slow_rank, hook):
    caplog.set_level(logging.INFO, logger="sparktf")
    fitted = TFEstimator(modelFn=_model, numWorkers=2, batchSize=BATCH, epochs=EPOCHS,
                         callbacks=_callbacks(slow_rank, hook), verbose=0).fit(frame)
    times = fitted.getWorkerTimes()
    named = _named(caplog)
    print(times, *named, sep="\n")
    assert times["epoch"] == list(range(1, EPOCHS + 1))
    assert times["steps"] == [ROWS // BATCH] * EPOCHS
    assert len(times["executors"]) == 2 and all(":" in e for e in times["executors"])
    own, waited = np.array(times["own_seconds"]), np.array(times["wait_seconds"])
    assert own.shape == waited.shape == (EPOCHS, 2) and (own > 0).all() and (waited >= 0).all()
    steps_slept = SLOW_S * (ROWS // BATCH)
    if slow_rank == "all":  # as slow, each: their own times alike, no one waiting long
        assert (own > 0.8 * steps_slept).all() and (waited < 0.5 * steps_slept).all()
        assert named == []
        return
    # the slowed worker's own time holds its sleeps; the other waited them out
    # (less what tracing the first epoch takes on each, and the machine's other work)
    assert (own[:, 1] - own[:, 0] > 0.5 * steps_slept).all(), own
    assert (waited[:, 0] > 0.5 * steps_slept).all() and (waited[:, 1] < waited[:, 0]).all()
    assert len(named) == EPOCHS  # once an epoch
    for epoch, line in enumerate(named, 1):
        assert (f"epoch {epoch}: the straggler is worker rank 1 on executor "
                f"{times['executors'][1]}") in line


# with the fit's validation between the steps and on_epoch_end (before: not named); with
# callbacks of different kinds on the workers (before: one worker timed, the other not:
# the fit hung at the first epoch's end)
@pytest.mark.timeout(300)
@pytest.mark.parametrize("slow", [(1, 0.5, "on_train_batch_end", "mixed"),
                                  (1, 2.0, "on_epoch_end"), ("all", 0.5, "on_train_batch_end")])
def test_sparktf_run_keras_fit_names_the_slowed_rank_and_keeps_keras_history(
        spark, caplog, slow):
    caplog.set_level(logging.INFO, logger="sparktf")
    args = {"epochs": EPOCHS, "steps": 4, "slow": slow}
    results = sparktf.run(spark, tutorials.keras_fit, args, numWorkers=2)
    named = _named(caplog)
    print(*named, sep="\n")
    # Keras's own history, nothing of sparktf's added
    assert set(results[0]["history"]) == {"loss", "mae", "val_loss", "val_mae"}
    if slow[0] == "all":
        assert named == []
        return
    assert len(named) == EPOCHS
    slept = slow[1] * (args["steps"] if slow[2] == "on_train_batch_end" else 1)
    for epoch, line in enumerate(named, 1):
        assert f"epoch {epoch}: the straggler is worker rank 1 on executor" in line
        own, typical, waited = map(float, re.search(
            r": ([0-9.]+) s of its own work .* the typical worker's ([0-9.]+) s\. The other "
            r"workers waited ([0-9.]+) s", line).groups())
        # all of what it slept, and the other's wait (the last step's sleep too: the other
        # waits for it as Keras reads the epoch's metrics, counted as its own before);
        # the first epoch less what tracing takes on each worker of a loaded machine
        least = 0.5 if epoch == 1 else 0.8
        assert own - typical > least * slept and waited > least * slept, line
