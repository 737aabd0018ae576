"""The first call and the next one: sparktf against the systems a user would pick instead.

    .venv/bin/python -m pip install -e ".[bench]"       # torch==2.13.0 (CPU), the peers
    .venv/bin/python bench/peers_bench.py [--systems sparktf std torch floor sparktf_fit]

One job per system, the same for all: form a 2-worker cluster on local-cluster[2,1,2048]
and do one all-reduce. Each system runs in a fresh driver process with a fresh
SparkSession (new executors, new Python workers): its first job, once the executors have
registered, is the **cold** figure, the same job again in that session the **warm** one.

* floor       - Spark's own: a 2-task barrier ``mapInArrow`` doing one ``allGather``
* sparktf     - ``sparktf.run``: MultiWorkerMirroredStrategy, one all-reduce
* sparktf_fit - a 1-epoch ``TFEstimator.fit`` of a one-layer model on 1,000 rows
* std         - spark-tensorflow-distributor 1.0.0's ``MirroredStrategyRunner``
                (TensorFlow inside Spark's Python worker), the same all-reduce
* torch       - pyspark's ``TorchDistributor`` (torch 2.13.0 CPU), gloo, one all_reduce

Where a peer cannot do something (a second run on a reused worker, Keras 3's ``fit``
under its strategy), the table says so instead of a number.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

SYSTEMS = ["floor", "sparktf", "sparktf_fit", "std", "torch"]
NAMES = {"floor": "Spark barrier job + allGather (floor)",
         "sparktf": "sparktf.run",
         "sparktf_fit": "sparktf TFEstimator.fit, 1 epoch, 1,000 rows",
         "std": "spark-tensorflow-distributor 1.0.0",
         "torch": "pyspark TorchDistributor (torch 2.13.0)"}


def tf_allreduce(*_):
    import tensorflow as tf
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    value = strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)
    return float(value)


def sparktf_main(args, ctx):
    return tf_allreduce()


def torch_allreduce():
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo")
    value = torch.ones(1)
    dist.all_reduce(value)
    dist.destroy_process_group()
    return float(value[0])


def floor_task(batches):
    import pyarrow as pa
    from pyspark import BarrierTaskContext
    barrier = BarrierTaskContext.get()
    for _ in batches:
        pass
    barrier.allGather("x")
    yield pa.RecordBatch.from_pydict({"n": [1]})


def _job(system: str, spark):
    """The system's job as a callable returning what it computed."""
    if system == "floor":
        df = spark.range(0, 2, 1, 2)
        return lambda: len(df.mapInArrow(floor_task, "n long", barrier=True).collect())
    if system == "sparktf":
        import sparktf
        return lambda: sparktf.run(spark, sparktf_main, None, numWorkers=2)[0]
    if system == "sparktf_fit":
        from startup_bench import one_layer, small_frame

        from sparktf.ml import TFEstimator
        df = small_frame(spark)
        return lambda: TFEstimator(modelFn=one_layer, numWorkers=2, epochs=1,
                                   verbose=0).fit(df).getHistory()["loss"][0]
    if system == "std":
        from spark_tensorflow_distributor import MirroredStrategyRunner
        return lambda: MirroredStrategyRunner(num_slots=2, use_gpu=False, local_mode=False,
                                              use_custom_strategy=True).run(tf_allreduce)
    if system == "torch":
        from pyspark.ml.torch.distributor import TorchDistributor
        return lambda: TorchDistributor(num_processes=2, local_mode=False,
                                        use_gpu=False).run(torch_allreduce)
    raise ValueError(system)


def one_system(system: str) -> dict:
    """Cold, then warm, in a fresh session; an error instead of a figure where it fails."""
    spark = common.session()
    out: dict = {}
    try:
        job = _job(system, spark)
        _executors_registered(spark, 2)
        for label in ("cold", "warm"):
            try:
                value, seconds = common.timed(job)
                out[label] = seconds
                out[label + "_value"] = repr(value)[:80]
            except Exception as e:  # noqa: BLE001 - what a peer cannot do is its result
                out[label + "_error"] = f"{type(e).__name__}: {_first_line(str(e))}"
            print("PEER " + json.dumps(out), flush=True)  # what is known so far
    finally:
        spark.stop()
    return out


def _executors_registered(spark, slots: int) -> None:
    """Waits until the session's executors offer ``slots`` task slots, before any clock
    starts: every system's cold figure is then its first job on running executors (new
    Python workers, nothing imported there), what a notebook user's first call meets.
    Without it a system that imports TensorFlow on the driver first (spark-tensorflow-
    distributor's module does, in ``_job``) had the executors' start-up (~10 s on a slow
    machine) out of its figure, and the others had it in theirs."""
    from sparktf._driver import checks, sessions
    checks.check_capacity(sessions.Session(spark), slots, "the bench")


def _first_line(text: str) -> str:
    for marker in ("Collective ops are already configured", "PerReplica"):
        if marker in text:
            return marker
    return next((line.strip() for line in text.splitlines() if line.strip()), "")[:160]


def _fresh(system: str, timeout_s: float) -> dict:
    """The system's figures from a fresh driver process; a job still running after
    ``timeout_s`` is reported as hung and its process group (Spark's JVMs too) killed."""
    process = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--one", system],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
        hung = False
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        hung = True
    lines = [line for line in stdout.splitlines() if line.startswith("PEER ")]
    found = json.loads(lines[-1][5:]) if lines else {}
    for label in ("cold", "warm"):
        if hung and label not in found and label + "_error" not in found:
            found[label + "_error"] = f"hung (killed after {timeout_s:.0f} s)"
    if not found:
        found["cold_error"] = f"the driver process failed: {stderr[-400:]}"
    return found


def _cell(result: dict, label: str) -> str:
    if label in result:
        return f"{result[label]:.2f} s"
    return "cannot: " + result.get(label + "_error", "not run")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--systems", nargs="+", default=SYSTEMS, choices=SYSTEMS)
    parser.add_argument("--timeout", type=float, default=240.0,
                        help="seconds a system may take for its cold and warm jobs")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print("PEER " + json.dumps(one_system(args.one)), flush=True)
        return 0
    results = {}
    for system in args.systems:
        results[system] = _fresh(system, args.timeout)
        print(f"measured {system}: {results[system]}", flush=True)
    print("\n| 2 workers, one all-reduce | cold (fresh session) | warm (same session) |")
    print("|---|---:|---:|")
    for system, result in results.items():
        print(f"| {NAMES[system]} | {_cell(result, 'cold')} | {_cell(result, 'warm')} |")
    floor = results.get("floor", {}).get("cold")
    ours = results.get("sparktf", {}).get("cold")
    for peer in ("std", "torch"):
        theirs = results.get(peer, {}).get("cold")
        if ours and theirs:
            print(f"\nsparktf cold / {NAMES[peer]} cold: {ours / theirs:.2f}x "
                  "(target <= 1.0)")
    if ours and floor:
        print(f"sparktf cold / Spark's cold floor: {ours / floor:.2f}x (target <= 1.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
