"""sparktf.run on a real local-cluster Spark: formation, data, failures, no leaks."""

import json
import logging
import os
import sys
import tempfile
import threading
import time

import numpy as np
import pytest

import sparktf
from tests.conftest import child_pids, driver_threads, wait_gone

pytestmark = pytest.mark.timeout(300)


def _tiny_mwms_training(args, ctx):
    import keras
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        keras.utils.set_random_seed(ctx.rank)  # different init per rank on purpose
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        optimizer = keras.optimizers.SGD(0.1)
    rng = np.random.default_rng(ctx.rank)
    x = rng.normal(size=(32, 3)).astype("float32")
    y = x @ np.array([[1.0], [-2.0], [0.5]], "float32")

    @tf.function
    def step(x, y):
        def replica(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(x) - y) ** 2) / ctx.numWorkers
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        strategy.run(replica, args=(x, y))

    for _ in range(args["steps"]):
        step(x, y)
    print(f"rank {ctx.rank} trained", flush=True)
    return {"rank": ctx.rank, "job": ctx.jobName, "index": ctx.taskIndex,
            "tf_config": json.loads(os.environ["TF_CONFIG"]), "args": args,
            "cluster": ctx.clusterSpec, "python": sys.executable,
            "weights": [w.tolist() for w in model.get_weights()]}


def test_two_workers_form_a_cluster_and_end_with_identical_weights(spark, caplog):
    caplog.set_level(logging.INFO, logger="sparktf")
    results = sparktf.run(spark, _tiny_mwms_training, {"steps": 5}, numWorkers=2)
    assert [r["rank"] for r in results] == [0, 1]
    assert [(r["job"], r["index"]) for r in results] == [("worker", 0), ("worker", 1)]
    assert all(r["args"] == {"steps": 5} for r in results)
    assert results[0]["cluster"] == results[1]["cluster"]
    assert len(results[0]["cluster"]["worker"]) == 2
    for r in results:
        assert r["tf_config"] == {"cluster": r["cluster"],
                                  "task": {"type": "worker", "index": r["index"]}}
    np.testing.assert_allclose(np.array(results[0]["weights"][0]),
                               np.array(results[1]["weights"][0]), rtol=0, atol=0)
    # initial weights differed per rank, so identical weights prove the all-reduce ran
    assert results[0]["python"] == sys.executable  # executors got the driver's interpreter
    worker_lines = [r.getMessage() for r in caplog.records if r.name == "sparktf.worker"]
    assert any("rank 0 trained" in line for line in worker_lines)


def test_each_task_gets_its_share_of_the_dataframe_once(spark):
    df = spark.range(0, 1000, 1, 3).selectExpr(
        "id", "cast(id as double) as x", "array(cast(id as float), cast(2 * id as float)) as a")

    def main(args, ctx):
        ids, pairs_ok = [], True
        for batch in ctx.dataset(batch_size=64):
            ids.extend(batch["id"].numpy().tolist())
            a = batch["a"].numpy()
            pairs_ok &= bool(np.all(a[:, 1] == 2 * a[:, 0]) and np.all(a[:, 0] == batch["x"]))
        return ids, pairs_ok, ctx.numRows, list(ctx.allNumRows)

    results = sparktf.run(spark, main, numWorkers=2, df=df)
    all_ids = sorted(results[0][0] + results[1][0])
    assert all_ids == list(range(1000))
    assert results[0][1] and results[1][1]
    assert [r[2] for r in results] == results[0][3] == results[1][3]


def _fail_at(args, ctx):
    import time as _time
    if args["when"] == "late":
        import tensorflow as tf
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        value = strategy.run(lambda: tf.constant(1.0))
        strategy.reduce("SUM", value, axis=None)  # one collective succeeds
    if ctx.rank == args["rank"]:
        print("about to fail", flush=True)
        if args["when"] == "crash":  # a segfault in native code
            import ctypes
            ctypes.string_at(0)
        raise ValueError(f"deliberate failure {args['when']}")
    if args["when"] == "late":  # the survivor blocks in a collective that never completes
        strategy.reduce("SUM", strategy.run(lambda: tf.constant(2.0)), axis=None)
    else:
        _time.sleep(600)  # the survivor would run for minutes unless it is stopped
    return "unreachable"


@pytest.mark.parametrize("when,rank", [("early", 1), ("late", 0), ("crash", 1)])
def test_a_failing_task_surfaces_with_rank_role_traceback_and_stops_the_others(spark, when,
                                                                               rank):
    threads_before = driver_threads()
    started = time.monotonic()
    with pytest.raises(sparktf.TaskFailedError) as info:
        sparktf.run(spark, _fail_at, {"when": when, "rank": rank}, numWorkers=2)
    elapsed = time.monotonic() - started
    err = info.value
    assert (err.rank, err.role) == (rank, f"worker:{rank}")
    if when == "crash":  # no Python exception: the stacks at the crash, from faulthandler
        assert "crashed before reporting a result (Segmentation fault)" in err.message
        assert "in _fail_at" in err.log_tail and "string_at" in err.log_tail, err.log_tail
    else:
        assert f"ValueError: deliberate failure {when}" in err.message
        assert "_fail_at" in err.traceback_text and "raise ValueError" in err.traceback_text
        assert "about to fail" in err.log_tail
    assert elapsed < 120, f"failure took {elapsed:.0f} s to surface"
    assert wait_gone(child_pids()) == [], "task processes left behind"
    assert len(driver_threads()) <= len(threads_before), \
        f"driver threads left behind: {threads_before} before, {driver_threads()} after"
    # the cluster is usable again
    assert sparktf.run(spark, lambda a, c: c.rank, numWorkers=2) == [0, 1]


def test_more_tasks_than_slots_fails_fast_with_advice(spark):
    started = time.monotonic()
    with pytest.raises(sparktf.ClusterCapacityError) as info:
        sparktf.run(spark, lambda a, c: None, numWorkers=3)
    assert time.monotonic() - started < 10
    assert "needs 3 concurrent task slots" in str(info.value)
    assert "offers 2" in str(info.value)
    assert sparktf.run(spark, lambda a, c: c.rank, numWorkers=2) == [0, 1]


def test_unpicklable_main_fn_fails_before_any_job(spark):
    lock = threading.Lock()
    jobs_before = len(spark.sparkContext.statusTracker().getJobIdsForGroup())
    with pytest.raises(sparktf.InvalidInputError, match="picklable"):
        sparktf.run(spark, lambda a, c: lock.locked(), numWorkers=2)
    assert len(spark.sparkContext.statusTracker().getJobIdsForGroup()) == jobs_before


def test_timeout_cancels_a_stuck_stage_and_leaves_nothing_behind(spark):
    def stuck(args, ctx):
        threading.Event().wait()

    with pytest.raises(sparktf.JobTimeoutError, match="timeout=5"):
        sparktf.run(spark, stuck, numWorkers=2, timeout=5)
    assert wait_gone(child_pids()) == []
    assert sparktf.run(spark, lambda a, c: c.rank, numWorkers=2) == [0, 1]


def test_a_port_taken_between_choice_and_bind_is_handled(spark, tmp_path, caplog):
    """The first attempt's rank 0 squats on its own chosen port before TF binds it."""
    caplog.set_level(logging.WARNING, logger="sparktf")
    marker = str(tmp_path / "squatted")

    def main(args, ctx):
        import socket

        import tensorflow as tf
        squatter = None
        if ctx.rank == 0 and not os.path.exists(args):
            open(args, "w").close()
            port = int(ctx.clusterSpec["worker"][0].rsplit(":", 1)[1])
            squatter = socket.socket()
            squatter.bind(("", port))
            squatter.listen()
        tf.distribute.MultiWorkerMirroredStrategy()
        return ctx.clusterSpec

    results = sparktf.run(spark, main, marker, numWorkers=2)
    assert os.path.exists(marker)
    assert results[0] == results[1]
    assert any("forming the cluster again" in r.getMessage() for r in caplog.records)


def test_data_errors_surface_with_the_column_name(spark):
    df = spark.createDataFrame([([1.0, 2.0],), ([1.0, None],)], "a array<double>").repartition(1)

    with pytest.raises(sparktf.InvalidInputError, match="'a' has null elements inside its "
                                                        "arrays"):
        sparktf.run(spark, lambda a, c: None, numWorkers=1, df=df)


def test_unfeedable_columns_are_refused_on_the_driver(spark):
    df = spark.createDataFrame([("x", 1.0)], "s string, v double").selectExpr(
        "s", "v", "current_date() AS d")
    with pytest.raises(sparktf.InvalidInputError, match="'d' has type date"):
        sparktf.run(spark, lambda a, c: None, numWorkers=2, df=df)


def _cluster_seen(args, ctx):
    import tensorflow as tf
    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # the exchanged addresses work
    total = strategy.reduce("SUM", strategy.run(lambda: tf.constant(float(ctx.numRows))),
                            axis=None)
    return ctx.rank, list(ctx.allNumRows), float(total)


def test_tasks_that_cannot_reach_the_driver_exchange_through_spark_and_finish(spark,
                                                                               monkeypatch):
    """The addresses normally travel through the driver's event channel; tasks that
    cannot reach it (e.g. a Spark Connect client outside the cluster's network) use
    Spark's allGather and barrier instead, and the job still completes."""
    import dataclasses
    import socket

    from sparktf._driver import launch

    with socket.socket() as probe:  # a port nobody listens on: connections are refused
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()
    task_spec = launch.LaunchSpec.task_spec
    monkeypatch.setattr(launch.LaunchSpec, "task_spec", lambda self, server: dataclasses.replace(
        task_spec(self, server), event_address=dead))
    df = spark.range(30).selectExpr("cast(id as double) as x").repartition(2)
    results = sparktf.run(spark, _cluster_seen, numWorkers=2, df=df)
    rows = [r[1] for r in results]
    print("\nranks, rows seen by each, summed in a collective:", results)
    assert [r[0] for r in results] == [0, 1]
    assert rows[0] == rows[1] and sum(rows[0]) == 30
    assert [r[2] for r in results] == [30.0, 30.0]


def _autograph_module(args, ctx):
    import inspect
    import tempfile
    from multiprocessing.connection import Listener

    import tensorflow as tf

    def halve_if_large(x):
        if tf.reduce_sum(x) > 1:  # a tensor condition: autograph converts the function
            x = x / 2
        return x

    converted = tf.autograph.to_graph(halve_if_large)
    with Listener(family="AF_UNIX") as listener:  # what multiprocessing.Manager() binds
        socket_path = listener.address
    return {"module": inspect.getsourcefile(converted), "temp": tempfile.gettempdir(),
            "written": os.path.exists(inspect.getsourcefile(converted)),
            "socket": socket_path}


def test_a_task_leaves_nothing_in_the_temp_dir(spark):
    """The task's process ends with os._exit, so TensorFlow's exit hook that removes
    autograph's generated modules never runs: its temp dir is a folder of its own, removed
    after the task (20,000 such files had piled up in /tmp), with a path short enough for
    a Unix socket in it (the task's folder in Spark's local dir is not: "AF_UNIX path too
    long" for multiprocessing.Manager() in main_fn, found by a review)."""
    out = sparktf.run(spark, _autograph_module, {}, numWorkers=2)
    print(out)
    for task in out:
        assert task["written"] and os.path.basename(task["module"]).startswith("__autograph")
        assert os.path.dirname(task["module"]) == task["temp"] != tempfile.gettempdir()
        assert not os.path.exists(task["module"]) and not os.path.exists(task["temp"])
        assert task["socket"].startswith(task["temp"] + os.sep)
