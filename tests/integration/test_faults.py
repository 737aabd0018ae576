"""Fault injection on local-cluster: killed workers, raising user code, a lost executor."""

import csv
import glob
import json
import logging
import os
import signal
import tempfile
import threading
import time
import uuid

import keras
import numpy as np
import pytest

import sparktf
from sparktf.ml import TFEstimator
from tests.conftest import ancestor, child_pids, wait_gone
from tests.integration import data, models, plan_oracle

pytestmark = pytest.mark.timeout(600)
EPOCHS = 4


def _rank() -> int:
    return json.loads(os.environ["TF_CONFIG"])["task"]["index"]


class KillOnce(keras.callbacks.Callback):
    """SIGKILLs rank 1's process when epoch ``at`` begins, on the first attempt only.

    Every attempt records the epochs it began, so the test can see where a relaunch
    resumed.
    """

    def __init__(self, folder, at=2):
        super().__init__()
        self.folder, self.at = folder, at

    def on_epoch_begin(self, epoch, logs=None):
        if _rank() != 1:
            return
        second = os.path.exists(os.path.join(self.folder, "killed"))
        with open(os.path.join(self.folder, f"begun-{int(second)}-{epoch}"), "w"):
            pass
        if epoch == self.at and not second:
            open(os.path.join(self.folder, "killed"), "w").close()
            os.kill(os.getpid(), signal.SIGKILL)


class RaiseOn(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if _rank() == 1 and epoch == 1:
            raise RuntimeError("callback exploded on purpose")


def broken_model_fn(hparams):
    raise KeyError("no such layer config")


def _frame(spark):
    X, y = data.linear_rows(400)
    return data.frame(spark, data.rows(X, y), "features array<double>, label double")


def test_a_killed_worker_is_relaunched_and_resumes_from_the_last_checkpoint(spark, tmp_path,
                                                                            caplog):
    caplog.set_level(logging.INFO, logger="sparktf")
    marks = tmp_path / "marks"
    marks.mkdir()
    # rank 1 writes its CSVLogger file to a private folder of its own: the killed process
    # cannot remove it, so it must be in the executor's Spark-owned folder, not /tmp's
    csv_name = f"epochs-{uuid.uuid4().hex}.csv"
    est = TFEstimator(modelFn=models.linear, numWorkers=2, epochs=EPOCHS, batchSize=32,
                      learningRate=0.05, maxRetries=1, modelDir=str(tmp_path / "m"),
                      callbacks=[keras.callbacks.CSVLogger(str(tmp_path / csv_name)),
                                 KillOnce(str(marks))])
    history = est.fit(_frame(spark)).getHistory()
    temp = tempfile.gettempdir()
    assert glob.glob(os.path.join(temp, "sparktf-*", "**", csv_name), recursive=True) == []
    left = glob.glob(os.path.join(temp, "spark-*", "executor-*", "blockmgr-*", "sparktf",
                                  "sparktf-callbacks-*", "*", csv_name))
    assert len(left) == 1, left  # the killed one's, until Spark removes the application's
    assert len(history["loss"]) == EPOCHS  # complete and continuous
    assert history["loss"][-1] < history["loss"][0]
    begun = sorted(os.listdir(marks))
    assert "begun-1-0" not in begun and "begun-1-1" not in begun  # done epochs not repeated
    assert [b for b in begun if b.startswith("begun-1-")] == ["begun-1-2", "begun-1-3"]
    messages = [r.getMessage() for r in caplog.records]
    assert any("Relaunching from the last checkpoint" in m and "rank 1" in m
               for m in messages), messages
    assert any("resuming after epoch 2" in m for m in messages)


def test_without_retries_a_killed_worker_fails_clearly_and_promptly(spark, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    est = TFEstimator(modelFn=models.linear, numWorkers=2, epochs=EPOCHS, batchSize=32,
                      maxRetries=0, callbacks=[KillOnce(str(marks), at=1)])
    started = time.monotonic()
    with pytest.raises(sparktf.TaskFailedError) as info:
        est.fit(_frame(spark))
    assert time.monotonic() - started < 180
    assert info.value.rank == 1 and "before reporting a result" in info.value.message
    assert wait_gone(child_pids()) == []


def test_an_exception_in_model_fn_surfaces_with_rank_and_is_not_retried(spark, caplog):
    caplog.set_level(logging.WARNING, logger="sparktf")
    est = TFEstimator(modelFn=broken_model_fn, numWorkers=2, maxRetries=2)
    with pytest.raises(sparktf.TaskFailedError) as info:
        est.fit(_frame(spark))
    assert "KeyError: 'no such layer config'" in info.value.message
    assert "broken_model_fn" in info.value.traceback_text
    assert not any("Relaunching" in r.getMessage() for r in caplog.records)


def test_a_module_the_executors_cannot_import_is_named_every_time(spark, tmp_path,
                                                                  monkeypatch):
    """The task process fails at once and dies with its stdin still holding the rows'
    arrival: the task's teardown closing that pipe raised BrokenPipeError over the real
    error in 6 of 8 fits ("failed before any task reported an error")."""
    installed = tmp_path / "site-packages"  # a folder the executors are taken to have too
    installed.mkdir()
    (installed / "sparktf_missing_common.py").write_text(
        "def build(hparams):\n    raise AssertionError('never built')\n")
    monkeypatch.syspath_prepend(str(installed))
    import sparktf_missing_common

    frame = _frame(spark)
    for attempt in range(3):
        with pytest.raises(sparktf.TaskFailedError) as info:
            TFEstimator(modelFn=sparktf_missing_common.build, numWorkers=2, epochs=1,
                        batchSize=8).fit(frame)
        print(attempt, str(info.value).splitlines()[0])
        assert ("comes from module 'sparktf_missing_common', which the executors' Python "
                "cannot import") in str(info.value)


def checked_in_py_function(hparams):
    """A model whose step runs a user check through tf.py_function, which raises."""
    import keras
    import tensorflow as tf

    def check(x):
        raise ValueError("row check failed inside tf.py_function")

    class Checked(keras.Sequential):
        def train_step(self, data):
            x, y = data
            x = tf.reshape(tf.py_function(check, [x], tf.float32), tf.shape(x))
            return super().train_step((x, y))

    model = Checked([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def test_an_exception_inside_tf_py_function_is_not_retried(spark, caplog):
    """TensorFlow reports it as UnknownError, which is no evidence of a failed platform."""
    caplog.set_level(logging.WARNING, logger="sparktf")
    est = TFEstimator(modelFn=checked_in_py_function, numWorkers=2, maxRetries=2)
    with pytest.raises(sparktf.TaskFailedError) as info:
        est.fit(_frame(spark))
    assert "ValueError: row check failed inside tf.py_function" in str(info.value)
    assert not any("Relaunching" in r.getMessage() for r in caplog.records)


def test_an_exception_in_a_callback_surfaces_from_the_rank_that_raised(spark):
    est = TFEstimator(modelFn=models.linear, numWorkers=2, epochs=3, maxRetries=1,
                      callbacks=[RaiseOn()])
    with pytest.raises(sparktf.TaskFailedError) as info:
        est.fit(_frame(spark))
    assert (info.value.rank, info.value.role) == (1, "worker:1")
    assert "RuntimeError: callback exploded on purpose" in info.value.message
    assert "on_epoch_end" in info.value.traceback_text


class ShrinkThenGrow(keras.callbacks.Callback):
    """Loses a worker, then gets it back, once each (rank 0 records what each attempt
    began: ``begun-<workers>-<epoch>``).

    On 2 workers, when epoch 2 begins (the checkpoint of epoch 1 written), rank 1 kills
    its executor JVM; the test has lowered the application's executor target to 1, so no
    executor replaces it. On 1 worker, when epoch 3 begins, rank 0 asks the test (a
    socket: a blocking read with a timeout) to bring the executor back, and once it is
    registered kills its own process: the next relaunch finds 2 slots again.
    """

    def __init__(self, folder, port):
        super().__init__()
        self.folder, self.port = folder, port

    def on_epoch_begin(self, epoch, logs=None):
        import socket
        workers = len(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"])
        if _rank() == 0:
            open(os.path.join(self.folder, f"begun-{workers}-{epoch}"), "w").close()
        if workers == 2 and epoch == 1 and _rank() == 1 and self._once("shrunk"):
            # the executor and this process with it: a task process outlives its JVM for a
            # moment, and might train epoch 2 before it notices
            os.kill(ancestor(os.getpid(), b"CoarseGrainedExecutorBackend"), signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)
        if workers == 1 and epoch == 2 and self._once("grown"):
            with socket.create_connection(("127.0.0.1", self.port), timeout=120) as s:
                assert s.recv(2) == b"go"
            os.kill(os.getpid(), signal.SIGKILL)

    def _once(self, name) -> bool:
        path = os.path.join(self.folder, name)
        if os.path.exists(path):
            return False
        open(path, "w").close()
        return True


def _executor_target(spark, total: int) -> None:
    """Sets how many executors the application asks the cluster for (Spark's own
    requestTotalExecutors): one lost above the target is not replaced."""
    sc = spark.sparkContext
    no_locality = sc._jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(
        sc._jvm.java.util.HashMap())
    assert sc._jsc.sc().requestTotalExecutors(total, 0, no_locality)


def _slots_back(spark, slots: int, timeout: float = 120) -> None:
    """Waits, bounded, until the registered executors offer ``slots`` task slots (Spark
    has no blocking call for an executor's registration)."""
    from sparktf._driver import sessions
    session, deadline, tick = sessions.Session(spark), time.monotonic() + timeout, \
        threading.Event()
    while session.slots_now() < slots:
        assert time.monotonic() < deadline, f"the executors did not come back: {slots} slots"
        tick.wait(0.25)


def test_a_lost_executor_shrinks_the_fit_to_min_workers_and_a_relaunch_grows_it_back(
        spark, tmp_path, caplog):
    """numWorkers=2, minWorkers=1, full batch: epoch 1 on 2 workers, an executor lost for
    good, epoch 2 on 1 worker, the executor back, epoch 3 on 2 workers again. The history
    and weights equal Keras's uninterrupted fit (the steps do not depend on the workers
    when the batch is full)."""
    import socket
    caplog.set_level(logging.INFO, logger="sparktf")
    marks = tmp_path / "marks"
    marks.mkdir()
    X, y = data.linear_rows(60)
    df = data.frame(spark, data.rows(X, y), "features array<double>, label double")
    with socket.create_server(("127.0.0.1", 0)) as server:
        def bring_back():
            server.settimeout(300)
            connection, _ = server.accept()
            with connection:
                _executor_target(spark, 2)
                _slots_back(spark, 2)
                connection.sendall(b"go")

        helper = threading.Thread(target=bring_back, daemon=True)
        helper.start()
        _executor_target(spark, 1)
        # the relaunch waits this long for a replacement that does not come (the target)
        spark.conf.set("spark.sparktf.relaunchWait", "3")
        try:
            # Keras's file callbacks as users write them carry on across the relaunches:
            # the best epoch by mode="max" is the first, which a relaunch must not forget
            files = [keras.callbacks.CSVLogger(str(tmp_path / "epochs.csv")),
                     keras.callbacks.ModelCheckpoint(str(tmp_path / "best.keras"),
                                                     monitor="loss", mode="max",
                                                     save_best_only=True)]
            est = TFEstimator(modelFn=models.linear, numWorkers=2, minWorkers=1, epochs=3,
                              batchSize=60, learningRate=0.05, shuffle=False, maxRetries=2,
                              modelDir=str(tmp_path / "m"),
                              callbacks=[ShrinkThenGrow(str(marks), server.getsockname()[1]),
                                         *files])
            model = est.fit(df)
        finally:
            spark.conf.unset("spark.sparktf.relaunchWait")
            _executor_target(spark, 2)
            _slots_back(spark, 2)
            helper.join(timeout=1)
    relaunches = [r.getMessage() for r in caplog.records if "Relaunching" in r.getMessage()]
    print("\n" + "\n".join(relaunches))
    assert len(relaunches) == 2, relaunches
    assert "ExecutorLostError" in relaunches[0] and "was lost" in relaunches[0]
    assert "on 1 of 2 workers: the cluster has 1 task slot now (minWorkers=1)" \
        in relaunches[0]
    assert "waiting up to 3 s for executors to register (1 of 2 slots so far)" in caplog.text
    assert "on 2 workers, back from 1" in relaunches[1]
    begun = sorted(f for f in os.listdir(marks) if f.startswith("begun"))
    assert begun == ["begun-1-1", "begun-1-2", "begun-2-0", "begun-2-1", "begun-2-2"]
    keras_model, keras_history = plan_oracle.keras_fit(
        models.linear, {"learningRate": 0.05}, X, y, [np.arange(60)], epochs=3)
    diffs = plan_oracle.differences(model.getHistory(), keras_history)
    print(f"history vs Keras's uninterrupted fit, largest relative difference: {diffs}")
    assert max(diffs.values()) < 1e-5, (model.getHistory(), keras_history)
    for ours, theirs in zip(model.getKerasModel().get_weights(), keras_model.get_weights(),
                            strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-7)
    with open(tmp_path / "epochs.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["epoch"] for r in rows] == ["0", "1", "2"], rows  # each epoch once, in order
    np.testing.assert_allclose([float(r["loss"]) for r in rows], keras_history["loss"],
                               rtol=1e-5)
    first_epoch, _ = plan_oracle.keras_fit(models.linear, {"learningRate": 0.05}, X, y,
                                           [np.arange(60)], epochs=1)
    for ours, theirs in zip(keras.saving.load_model(tmp_path / "best.keras").get_weights(),
                            first_epoch.get_weights(), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-7)
    assert sparktf.run(spark, lambda a, c: c.rank, numWorkers=2) == [0, 1]  # usable again


class SlowValidation(keras.callbacks.Callback):
    """Each validation step takes 1.2 s, as a large model's would: the whole pass takes
    longer than stallTimeout while every step makes progress."""

    def on_test_batch_end(self, batch, logs=None):
        time.sleep(1.2)


def test_a_validation_pass_longer_than_stall_timeout_completes(spark):
    est = TFEstimator(modelFn=models.linear, numWorkers=2, epochs=1, batchSize=32,
                      validationFraction=0.5, seed=1, stallTimeout=6,
                      callbacks=[SlowValidation()])
    history = est.fit(_frame(spark)).getHistory()
    assert len(history["loss"]) == len(history["val_loss"]) == 1


class BlockForever(keras.callbacks.Callback):
    """Rank 1 never returns from on_epoch_end: its peers then wait in a collective."""

    def on_epoch_end(self, epoch, logs=None):
        if _rank() == 1:
            import threading
            threading.Event().wait()


def test_a_stalled_rank_is_named_and_the_attempt_stopped(spark):
    est = TFEstimator(modelFn=models.linear, numWorkers=2, epochs=3, batchSize=32,
                      stallTimeout=8, callbacks=[BlockForever()])
    started = time.monotonic()
    with pytest.raises(sparktf.TaskStalledError) as info:
        est.fit(_frame(spark))
    assert time.monotonic() - started < 120
    assert (info.value.rank, info.value.role) == (1, "worker:1")
    assert "no progress for 8 s" in info.value.message
    assert "last seen in Keras callbacks (epoch 1)" in info.value.message
    assert wait_gone(child_pids()) == []


def linear_whose_export_blocks_on_rank_1(hparams):
    """``linear`` after a layer whose ``get_config`` never returns on rank 1 once training
    ended (``TrainingEnded``): the export (``model.save`` asks every layer its config)
    blocks there as on a file system that stopped answering."""
    import keras

    class Blocks(keras.layers.Layer):
        def call(self, x):
            return x

        def get_config(self):
            if os.environ.get("SPARKTF_TEST_TRAINED") and _rank() == 1:
                import threading
                threading.Event().wait()
            return super().get_config()

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), Blocks(), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(hparams["learningRate"]), loss="mse")
    return model


class TrainingEnded(keras.callbacks.Callback):
    def on_train_end(self, logs=None):
        os.environ["SPARKTF_TEST_TRAINED"] = "1"


def test_an_export_that_blocks_is_named_and_the_attempt_stopped(spark):
    """Found by reading the heartbeats: the export sent one every 2 s whatever it did, so an
    export blocked on rank 1 hung the fit for good. A heartbeat of the export now goes out
    only when the process worked (CPU or writes) since the last."""
    est = TFEstimator(modelFn=linear_whose_export_blocks_on_rank_1, numWorkers=2, epochs=1,
                      batchSize=32, stallTimeout=8, callbacks=[TrainingEnded()])
    started = time.monotonic()
    with pytest.raises(sparktf.TaskStalledError) as info:
        est.fit(_frame(spark))
    assert time.monotonic() - started < 120
    assert (info.value.rank, info.value.role) == (1, "worker:1")
    assert "last seen exporting the trained model (epoch 1)" in info.value.message
    assert wait_gone(child_pids()) == []
