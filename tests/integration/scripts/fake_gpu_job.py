"""Runs sparktf on local-clusters whose executors have fake GPUs; prints what tasks saw.

    python fake_gpu_job.py WORKDIR

Spark's resource scheduler assigns the GPU addresses that a discovery script reports. One
driver process runs the scenarios in turn, each on sessions of its own (a session is
stopped before the next starts, as a user's notebook would), and prints, for each, a line
``RESULT <scenario> {json}`` (``SCENARIOS``) of what each task was assigned and what
CUDA_VISIBLE_DEVICES it ran with, or ``{"error": traceback}`` if the scenario failed:

- ``one_each``: three GPUs per executor, one per task: training, scoring, then training
  again on the same Python workers (scoring must leave nothing behind);
- ``half_inherited``: half a GPU per task, on executors whose environment already names
  their GPUs 7,8,9;
- ``pairs``: two GPUs per executor. 0. without ``spark.worker.resource.gpu.*`` no
  executor can start; 1. ``local-cluster[2,1,1024]``, ``spark.executor.cores=1``, one GPU
  per task: ``sparktf.run(numWorkers=2, useGpu="auto")`` must start (one slot per
  executor); 2. ``local-cluster[1,2,1024]``: one executor, two cores, two GPUs, Python
  workers reused; pairs of scoring tasks run again and again, so a worker whose
  TensorFlow already started is later assigned the other GPU.

One process instead of one per scenario: the driver's Python, its imports and the
gateway's JVM start once (the executors are new in every session).
"""

import json
import os
import stat
import sys
import traceback


def training_main(args, ctx):
    import os
    import sys
    return {"rank": ctx.rank, "assigned": list(ctx.assignedGpus),
            "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "tf_imported_with_it": "tensorflow" in sys.modules}


def inference_probe(batches):
    import os

    import pandas as pd
    from pyspark import TaskContext

    from sparktf.runtime.scoring import inference
    for _ in batches:
        pass
    before = os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")
    inference.start_tensorflow()
    resource = TaskContext.get().resources().get("gpu")
    yield pd.DataFrame({"assigned": [",".join(resource.addresses) if resource else ""],
                        "device": [inference.task_device("auto")],
                        "before": [before],
                        "after": [os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")]})


def scoring_probe(batches):
    import os

    import pandas as pd
    from pyspark import TaskContext

    from sparktf.runtime.scoring import inference
    for _ in batches:
        pass
    if inference.start_tensorflow() is not None:  # TensorFlow started in this task
        inference._probe_visible_at_start = os.environ.get("CUDA_VISIBLE_DEVICES", "all")
    resource = TaskContext.get().resources().get("gpu")
    yield pd.DataFrame({"pid": [os.getpid()],
                        "assigned": [",".join(resource.addresses) if resource else ""],
                        "device": [inference.task_device("auto")],
                        "visible": [inference._probe_visible_at_start]})


def _discovery(workdir: str, addresses: list[str]) -> str:
    """A discovery script reporting ``addresses`` as the GPUs, in ``workdir``."""
    script = os.path.join(workdir, f"discover_{len(addresses)}_gpus.sh")
    with open(script, "w") as f:
        f.write("#!/usr/bin/env bash\necho '"
                + json.dumps({"name": "gpu", "addresses": addresses}) + "'\n")
    os.chmod(script, os.stat(script).st_mode | stat.S_IEXEC)
    return script


def _session(master: str, script: str, *, worker_gpus: str | None, executor_gpus: str,
             task_gpus: str, cores: int | None = None, executor_env: dict | None = None):
    """A session whose executors have ``executor_gpus`` fake GPUs each (``script``
    discovers them), ``task_gpus`` a task; the workers offer ``worker_gpus`` (None: no
    ``spark.worker.resource.gpu.*`` at all); ``executor_env``: the executors' environment."""
    os.environ["PYSPARK_PYTHON"] = sys.executable  # the probes' own UDFs run this Python
    from pyspark.sql import SparkSession
    builder = (SparkSession.builder.master(master)
               .config("spark.ui.enabled", "false")
               .config("spark.python.worker.reuse", "true"))
    if cores is not None:
        builder = builder.config("spark.executor.cores", str(cores))
    if worker_gpus is not None:
        builder = (builder.config("spark.worker.resource.gpu.amount", worker_gpus)
                   .config("spark.worker.resource.gpu.discoveryScript", script))
    builder = (builder.config("spark.executor.resource.gpu.amount", executor_gpus)
               .config("spark.executor.resource.gpu.discoveryScript", script)
               .config("spark.task.resource.gpu.amount", task_gpus))
    for name, value in (executor_env or {}).items():
        builder = builder.config(f"spark.executorEnv.{name}", value)
    spark = builder.getOrCreate()
    try:
        spark.sparkContext.setLogLevel("ERROR")
    except BaseException:
        spark.stop()
        raise
    return spark


def placement(workdir: str, amount: str, inherited: str | None = None) -> dict:
    """Executors with three fake GPUs each (addresses 0, 1, 2), ``amount`` of a GPU per
    task; ``inherited``: the executors' own CUDA_VISIBLE_DEVICES."""
    script = _discovery(workdir, ["0", "1", "2"])
    import sparktf

    spark = _session("local-cluster[2,1,1024]", script, worker_gpus="3", executor_gpus="1",
                     task_gpus=amount,
                     executor_env={"CUDA_VISIBLE_DEVICES": inherited} if inherited else None)
    try:
        training = sparktf.run(spark, training_main, numWorkers=2, useGpu=True)
        inference = [r.asDict() for r in spark.range(0, 2, 1, 2).mapInPandas(
            inference_probe, "assigned string, device string, before string, after string"
        ).collect()]
        # the same Python workers again: nothing of the scoring may reach a later fit
        again = sparktf.run(spark, training_main, numWorkers=2, useGpu=True)
    finally:
        spark.stop()
    return {"training": training, "inference": inference, "training_again": again}


def pairs(workdir: str) -> dict:
    """Executors with two fake GPUs each: the refusal without the workers' GPUs, training
    with one GPU per task, scoring on reused Python workers (the module's docstring)."""
    script = _discovery(workdir, ["0", "1"])
    import time

    import sparktf

    # without GPUs on the workers Spark can start no executor: refused at once, saying so
    spark = _session("local-cluster[2,1,1024]", script, worker_gpus=None, executor_gpus="2",
                     task_gpus="1", cores=1)
    started = time.monotonic()
    try:
        sparktf.run(spark, training_main, numWorkers=2, useGpu="auto")
        refusal = None
    except sparktf.ClusterCapacityError as e:
        refusal = {"message": str(e), "seconds": time.monotonic() - started}
    finally:
        spark.stop()

    spark = _session("local-cluster[2,1,1024]", script, worker_gpus="2", executor_gpus="2",
                     task_gpus="1", cores=1)
    try:
        training = sparktf.run(spark, training_main, numWorkers=2, useGpu="auto")
    finally:
        spark.stop()

    spark = _session("local-cluster[1,2,1024]", script, worker_gpus="2", executor_gpus="2",
                     task_gpus="1", cores=2)
    scoring = []
    try:
        for _ in range(10):
            scoring += [r.asDict() for r in spark.range(0, 2, 1, 2).mapInPandas(
                scoring_probe, "pid long, assigned string, device string, visible string"
            ).collect()]
    finally:
        spark.stop()
    return {"refusal": refusal, "training": training, "scoring": scoring}


SCENARIOS = {
    "pairs": pairs,
    "one_each": lambda workdir: placement(workdir, "1"),
    "half_inherited": lambda workdir: placement(workdir, "0.5", "7,8,9"),
}


def main() -> int:
    workdir = sys.argv[1]
    # A process's first getOrCreate() starts Spark's JVM with that session's settings as
    # system properties, and every later SparkConf reads them back (pyspark's
    # launch_gateway): the JVM starts with none, so a scenario sees only what it asks for.
    from pyspark import SparkContext
    SparkContext._ensure_initialized()
    for name, scenario in SCENARIOS.items():
        try:
            found = scenario(workdir)
        except Exception:  # noqa: BLE001 - reported to the scenario's own tests
            found = {"error": traceback.format_exc()}
        print(f"RESULT {name} " + json.dumps(found), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
