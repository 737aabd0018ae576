"""What sparktf costs per step: the same model trained by sparktf and by plain
``MultiWorkerMirroredStrategy`` processes (issue 54, item 6).

For each number of workers, the Higgs-shaped MLP of the other benches (28 floats in,
Dense(64, relu), Dense(1, sigmoid), Adam), the same rows (each worker its own 1/n of
them, in memory), the same per-worker batch and epochs, trained three ways:

- sparktf: ``TFEstimator(numWorkers=n, batchSize=batch * n)`` (its batch is the global
  one) on a cached DataFrame of n partitions, in a ``local-cluster[4,1,2048]`` session;
- plain A and plain B: n processes started here (multiprocessing, spawn), each with
  ``TF_CONFIG`` for a worker cluster on 127.0.0.1, ``MultiWorkerMirroredStrategy()``
  and TensorFlow's custom training loop (``strategy.run``
  of a ``tf.GradientTape`` step, ``tf.nn.compute_average_loss`` over the global batch,
  ``apply_gradients``) in a ``tf.function``, on its shard as numpy. A feeds it as
  TensorFlow's tutorial multi_worker_with_ctl does: a repeated ``tf.data.Dataset``
  batched at the per-worker batch (auto-sharding off), ``next(iterator)`` inside the step
  function. B passes the worker's numpy batches as the step function's arguments, as
  sparktf feeds its step. Each has a model of its own, in the same processes. Not Keras's
  ``fit``, which fails under the strategy with more than one worker
  (keras-team/keras#20585).

All three give TensorFlow one intra-op thread and two inter-op threads a worker (sparktf's
tasks get the CPUs Spark gave them: one here). Worker 0 times every epoch; the first
(tracing) is left out and the median of the others kept. The plain workers also time an
all-reduce alone (of one float, of the model's gradients, of 1 MiB) over loopback gRPC,
and the bench ends with the step-time efficiency the ring all-reduce formula projects
at 8, 32 and 128 workers (no overlap of communication with computation).

    .venv/bin/python bench/scaling_bench.py [--workers 1,2,4] [--rows 32768] [--batch 256]
        [--epochs 4] [--latency-us 50] [--resnet-step-s 0.2]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import queue
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

# as sparktf's task processes get them on a one-core executor (task_process.child_env)
CHILD_ENV = {"TF_NUM_INTRAOP_THREADS": "1", "OMP_NUM_THREADS": "1",
             "TF_NUM_INTEROP_THREADS": "2", "TF_CPP_MIN_LOG_LEVEL": "2",
             "CUDA_VISIBLE_DEVICES": ""}
FEEDS = ("tf.data", "numpy")  # plain A and plain B
RESNET50_PARAMS = 25_636_712  # keras.applications.ResNet50(weights=None).count_params()


def _epoch_timer(path: str):
    """A Keras callback writing each epoch's wall time to ``path`` (JSON lines), on
    worker 0 only (as epoch_bench.EpochTimes)."""
    import keras

    class EpochTimes(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.started = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            seconds = time.perf_counter() - self.started
            config = json.loads(os.environ.get("TF_CONFIG", "{}") or "{}")
            if config.get("task", {}).get("index", 0) == 0:
                with open(path, "a") as f:
                    f.write(json.dumps({"epoch": epoch, "s": seconds,
                                        "loss": logs["loss"]}) + "\n")

    return EpochTimes()


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _plain_worker(rank, ports, X, y, batch, epochs, feeds, probe_floats, out):
    """One worker of the plain cluster: TensorFlow's custom training loop under
    MultiWorkerMirroredStrategy, once per way of feeding it (``feeds``, each with a model
    of its own); worker 0 puts its epoch times and probes on ``out``."""
    os.environ["TF_CONFIG"] = json.dumps({
        "cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
        "task": {"type": "worker", "index": rank}})
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    trained = {feed: _plain_fit(tf, strategy, X, y, batch, epochs, feed) for feed in feeds}

    # the all-reduce alone, of a float32 tensor, in a function called as a step is
    # the all-reduce alone, of a float32 tensor, in a function called as a step is
    probes = {}
    for floats in probe_floats:
        @tf.function(autograph=False)
        def reduce_once(t):
            return strategy.reduce("SUM", strategy.run(tf.identity, args=(t,)), axis=None)
        value = tf.ones([floats], tf.float32)
        for _ in range(5):
            reduce_once(value)
        calls = 50
        started = time.perf_counter()
        for _ in range(calls):
            result = reduce_once(value)
        _ = result.numpy() if hasattr(result, "numpy") else result
        probes[floats] = (time.perf_counter() - started) / calls
    out.put({"rank": rank, "feeds": trained, "probes": probes})


def _plain_fit(tf, strategy, X, y, batch: int, epochs: int, feed: str) -> dict:
    """The model trained by TensorFlow's custom training loop, fed by ``tf.data`` (as
    TensorFlow's tutorial multi_worker_with_ctl: the iterator's next() inside the step
    function) or by ``numpy`` (the worker's batches, sliced from its rows in memory, as the
    step function's arguments: as sparktf feeds its step)."""
    import keras

    workers = strategy.num_replicas_in_sync
    global_batch = batch * workers
    with strategy.scope():
        model = common.higgs_mlp({"learningRate": 1e-3})  # the same seed, layers, Adam
        optimizer = model.optimizer
        optimizer.build(model.trainable_variables)
        loss_tracker = keras.metrics.Mean(name="loss")  # what Keras's train_step updates
        accuracy = keras.metrics.BinaryAccuracy(name="accuracy")
    steps = len(X) // batch

    def step(x, labels):
        with tf.GradientTape() as tape:
            predictions = model(x, training=True)
            per_example = keras.losses.binary_crossentropy(labels, predictions)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        loss_tracker.update_state(tf.reduce_mean(per_example),
                                  sample_weight=tf.shape(x)[0])
        accuracy.update_state(labels, predictions)
        return tf.shape(x)[0]

    if feed == "tf.data":
        def dataset_fn(context):
            # this worker's rows, repeated, batched at the per-worker batch: each epoch is
            # one pass over them in order, as sparktf's (shuffle=False) is
            ds = tf.data.Dataset.from_tensor_slices((X, y)).repeat().batch(batch)
            options = tf.data.Options()
            options.experimental_distribute.auto_shard_policy = (
                tf.data.experimental.AutoShardPolicy.OFF)
            return ds.with_options(options)

        # no rebatching, no sharding by TensorFlow; repeated, as the tutorial's (a finite
        # dataset iterated under this strategy adds a cross-worker all-reduce to every
        # next(): input_lib._enable_get_next_as_optional)
        iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))

        @tf.function
        def iterator_step(iterator):
            return strategy.run(step, args=next(iterator))

        def train_step(i):
            return iterator_step(iterator)
    else:
        batches = [(X[i * batch:(i + 1) * batch], y[i * batch:(i + 1) * batch])
                   for i in range(steps)]

        @tf.function
        def run_step(x, labels):
            return strategy.run(step, args=(x, labels))

        def train_step(i):
            return run_step(*batches[i])

    epoch_s, losses = [], []
    for _ in range(epochs):
        loss_tracker.reset_state()
        accuracy.reset_state()
        started = time.perf_counter()
        for i in range(steps):
            rows = train_step(i)
            if i == 0 and not epoch_s:
                assert int(rows) == batch, rows
        losses.append(float(loss_tracker.result()))  # over every worker (sync on read)
        epoch_s.append(time.perf_counter() - started)
    return {"epoch_s": epoch_s, "losses": losses, "steps": steps,
            "params": int(model.count_params())}


def plain(X, y, workers: int, batch: int, epochs: int, feeds, probe_floats) -> dict:
    """The plain cluster of ``workers`` processes on this machine; worker 0's figures."""
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    ports = _free_ports(workers)
    shard = len(X) // workers
    kept = {k: os.environ.get(k) for k in CHILD_ENV}
    os.environ.update(CHILD_ENV)  # the children's environment, as they start
    try:
        procs = [context.Process(target=_plain_worker,
                                 args=(r, ports, X[r * shard:(r + 1) * shard],
                                       y[r * shard:(r + 1) * shard], batch, epochs,
                                       feeds, probe_floats, out)) for r in range(workers)]
        for p in procs:
            p.start()
    finally:
        for k, v in kept.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    results: dict = {}
    deadline = time.monotonic() + 900
    while len(results) < workers:
        try:
            got = out.get(timeout=2)
            results[got["rank"]] = got
        except queue.Empty:
            failed = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if failed or time.monotonic() > deadline:
                for p in procs:
                    p.kill()
                raise RuntimeError(f"plain workers failed or hung: {failed}") from None
    for p in procs:
        p.join(timeout=120)
    return results[0]


def ours(spark, df, folder: str, workers: int, batch: int, epochs: int) -> dict:
    """sparktf's fit of the same model; worker 0's epoch times from the callback."""
    from sparktf.ml import TFEstimator

    log = os.path.join(folder, f"sparktf-{workers}.jsonl")
    started = time.perf_counter()
    TFEstimator(modelFn=common.higgs_mlp, numWorkers=workers, batchSize=batch * workers,
                epochs=epochs, learningRate=1e-3, shuffle=False, verbose=0,
                callbacks=[_epoch_timer(log)]).fit(df)
    whole = time.perf_counter() - started
    with open(log) as f:
        rows = [json.loads(line) for line in f]
    return {"epoch_s": [r["s"] for r in rows], "losses": [r["loss"] for r in rows],
            "whole_s": whole}


def ring_seconds(params: int, workers: int, gbps: float, latency_s: float) -> float:
    """A ring all-reduce of ``params`` float32 gradients: each worker sends (and receives)
    2(n-1)/n of the bytes, in 2(n-1) messages."""
    if workers < 2:
        return 0.0
    sent = 2 * (workers - 1) / workers * 4 * params
    return sent * 8 / (gbps * 1e9) + 2 * (workers - 1) * latency_s


def _steady(seconds: list[float]) -> float:
    return statistics.median(seconds[1:]) if len(seconds) > 1 else seconds[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--rows", type=int, default=32_768)
    parser.add_argument("--batch", type=int, default=256, help="per-worker batch")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--latency-us", type=float, default=50.0,
                        help="per-message latency assumed in the projection")
    parser.add_argument("--resnet-step-s", type=float, default=0.2,
                        help="ResNet-50's compute per step assumed in the projection")
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",")]
    for n in counts:
        if args.rows % (args.batch * n):
            parser.error(f"--rows must divide into batches of {args.batch} x {n} workers")

    import numpy as np

    started = time.perf_counter()
    folder = common.scratch("sparktf-scaling-bench-")
    spark = common.session("local-cluster[4,1,2048]")
    results = []
    params = 28 * 64 + 64 + 64 + 1
    probe_floats = (1, params, 262_144)
    for i, n in enumerate(counts):
        df = common.higgs_like(spark, args.rows, partitions=n).cache()
        df.count()
        pdf = df.toPandas()  # the partitions in order: worker w's rows are the w-th n-th
        X = np.stack(pdf["features"].to_numpy()).astype("float32")
        y = pdf["label"].to_numpy().astype("float32").reshape(-1, 1)
        feeds = FEEDS if i % 2 == 0 else FEEDS[::-1]
        sides = [("sparktf", lambda n=n, df=df: ours(spark, df, folder, n, args.batch,
                                                     args.epochs)),
                 ("plain", lambda n=n, X=X, y=y, feeds=feeds: plain(
                     X, y, n, args.batch, args.epochs, feeds, probe_floats))]
        measured = {}
        for name, run in sides if i % 2 == 0 else sides[::-1]:  # alternate which goes first
            measured[name] = run()
        df.unpersist()
        results.append((n, measured["sparktf"], measured["plain"]))
    spark.stop()
    params = results[0][2]["feeds"][FEEDS[0]]["params"]
    report(args, results, params, probe_floats)
    print(f"\n(whole bench {time.perf_counter() - started:.0f} s)")


def report(args, results, params: int, probe_floats) -> None:
    print(f"\nmachine: {os.cpu_count()} cores ({platform.processor() or platform.machine()}), "
          f"no GPU; session local-cluster[4,1,2048] (4 one-core executors); every worker "
          f"1 intra-op, 2 inter-op threads. With more workers than cores both sides are "
          f"oversubscribed alike.")
    print(f"model: Higgs-shaped MLP 28-64-1, {params:,} parameters; gradients "
          f"{4 * params:,} bytes a step (float32); Adam; {args.rows:,} rows, per-worker "
          f"batch {args.batch}, {args.epochs} epochs (median of epochs 2..{args.epochs})")
    print("plain A: TensorFlow's custom training loop fed by tf.data (the tutorial's "
          "next(iterator) inside the step function); plain B: the same loop fed numpy "
          "batches as the step function's arguments, as sparktf feeds its step")
    print("\n| workers | steps/epoch | sparktf s/epoch | plain A s/epoch | plain B s/epoch "
          "| sparktf/A | sparktf/B | sparktf ms/step | A ms/step | B ms/step "
          "| sparktf adds ms/step (vs the faster) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, s, p in results:
        steps = args.rows // (args.batch * n)
        ss = _steady(s["epoch_s"])
        a, b = (_steady(p["feeds"][f]["epoch_s"]) for f in FEEDS)
        print(f"| {n} | {steps} | {ss:.3f} | {a:.3f} | {b:.3f} | {ss / a:.2f} | "
              f"**{ss / b:.2f}** | {1e3 * ss / steps:.2f} | {1e3 * a / steps:.2f} | "
              f"{1e3 * b / steps:.2f} | {1e3 * (ss - min(a, b)) / steps:+.2f} |")
    print("\nlosses by epoch (the same training everywhere):")
    for n, s, p in results:
        print(f"  {n} worker(s): sparktf {[round(v, 4) for v in s['losses']]}  "
              + "  ".join(f"{label} {[round(v, 4) for v in p['feeds'][f]['losses']]}"
                          for label, f in zip("AB", FEEDS)))
    print("\nall epochs, s (the first one traces):")
    for n, s, p in results:
        print(f"  {n} worker(s): sparktf {[round(v, 3) for v in s['epoch_s']]}  "
              + "  ".join(f"{label} {[round(v, 3) for v in p['feeds'][f]['epoch_s']]}"
                          for label, f in zip("AB", FEEDS))
              + f"  (sparktf's whole fit {s['whole_s']:.1f} s)")
    print("\nan all-reduce alone, plain workers, loopback gRPC (ms a call; "
          f"{probe_floats[0]} float, the gradients' {probe_floats[1]:,}, 1 MiB):")
    for n, _, p in results:
        figures = ", ".join(f"{1e3 * p['probes'][f]:.2f}" for f in probe_floats)
        print(f"  {n} worker(s): {figures}")

    one = next((s for n, s, _ in results if n == 1), None)
    if one is not None:
        mlp_step = _steady(one["epoch_s"]) / (args.rows // args.batch)
        source = "sparktf, 1 worker, measured above"
    else:
        n, s, _ = results[0]
        mlp_step = _steady(s["epoch_s"]) / (args.rows // (args.batch * n))
        source = f"sparktf, {n} workers, measured above: includes their all-reduce"
    latency = args.latency_us * 1e-6
    print(f"\nprojection, not a measurement: step-time efficiency = compute / (compute + "
          f"ring all-reduce), no overlap; ring = 2(n-1)/n x 4 x params x 8 / bandwidth + "
          f"2(n-1) x {args.latency_us:g} us")
    print(f"  Higgs MLP: {params:,} parameters, compute {1e3 * mlp_step:.2f} ms a step "
          f"({source}); ResNet-50: {RESNET50_PARAMS:,} parameters, compute "
          f"{args.resnet_step_s:g} s a step (assumed)")
    # TensorFlow's own per-message latency here: a 1-float all-reduce on 2 workers is 2
    # messages; the same call on 1 worker is the function call without them
    probes = {n: p["probes"][probe_floats[0]] for n, _, p in results}
    measured = (max(probes[2] - probes[1], 0.0) / 2 if 1 in probes and 2 in probes
                else None)
    rows = [(name, p, compute, gbps, latency)
            for name, p, compute in (("Higgs MLP", params, mlp_step),
                                     ("ResNet-50", RESNET50_PARAMS, args.resnet_step_s))
            for gbps in (10, 25, 100)]
    if measured is not None:
        print(f"  and, last, at 25 Gb/s with the latency measured here instead: "
              f"{1e6 * measured:.0f} us a message (TensorFlow's gRPC ring on loopback, 2 "
              f"workers: (1-float all-reduce on 2 workers - on 1) / 2)")
        rows += [("Higgs MLP", params, mlp_step, 25, measured),
                 ("ResNet-50", RESNET50_PARAMS, args.resnet_step_s, 25, measured)]
    print("\n| model | Gb/s | latency | 8 workers | 32 workers | 128 workers |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, p, compute, gbps, alpha in rows:
        cells = []
        for n in (8, 32, 128):
            comm = ring_seconds(p, n, gbps, alpha)
            cells.append(f"{100 * compute / (compute + comm):.0f}% ({1e3 * comm:.2f} ms)")
        print(f"| {name} | {gbps} | {1e6 * alpha:.0f} us | " + " | ".join(cells) + " |")

if __name__ == "__main__":
    main()
