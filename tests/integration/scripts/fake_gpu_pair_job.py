"""Executors with two fake GPUs each: training with one GPU per task, then scoring tasks on
reused Python workers that Spark assigns different GPUs; prints what each task saw.

    python fake_gpu_pair_job.py WORKDIR

0. The same without ``spark.worker.resource.gpu.*``: no executor can start.
1. ``local-cluster[2,1,1024]``, ``spark.executor.cores=1``, two GPUs per executor, one per
   task: ``sparktf.run(numWorkers=2, useGpu="auto")`` must start (one slot per executor).
2. ``local-cluster[1,2,1024]``: one executor, two cores, two GPUs, Python workers reused;
   pairs of scoring tasks run again and again, so a worker whose TensorFlow already
   started is later assigned the other GPU.
"""

import json
import os
import stat
import sys


def training_main(args, ctx):
    import os
    return {"rank": ctx.rank, "assigned": list(ctx.assignedGpus),
            "cuda": os.environ.get("CUDA_VISIBLE_DEVICES")}


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


def _session(master, script, cores, worker_gpus=True):
    os.environ["PYSPARK_PYTHON"] = sys.executable  # the probes' own UDFs run this Python
    from pyspark.sql import SparkSession
    builder = (SparkSession.builder.master(master)
               .config("spark.ui.enabled", "false")
               .config("spark.executor.cores", str(cores))
               .config("spark.python.worker.reuse", "true"))
    if worker_gpus:
        builder = (builder.config("spark.worker.resource.gpu.amount", "2")
                   .config("spark.worker.resource.gpu.discoveryScript", script))
    spark = (builder.config("spark.executor.resource.gpu.amount", "2")
             .config("spark.executor.resource.gpu.discoveryScript", script)
             .config("spark.task.resource.gpu.amount", "1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main() -> int:
    workdir = sys.argv[1]
    script = os.path.join(workdir, "discover_gpus.sh")
    with open(script, "w") as f:
        f.write('#!/usr/bin/env bash\necho \'{"name": "gpu", "addresses": ["0", "1"]}\'\n')
    os.chmod(script, os.stat(script).st_mode | stat.S_IEXEC)

    import time

    import sparktf

    # without GPUs on the workers Spark can start no executor: refused at once, saying so
    spark = _session("local-cluster[2,1,1024]", script, 1, worker_gpus=False)
    started = time.monotonic()
    try:
        sparktf.run(spark, training_main, numWorkers=2, useGpu="auto")
        refusal = None
    except sparktf.ClusterCapacityError as e:
        refusal = {"message": str(e), "seconds": time.monotonic() - started}
    finally:
        spark.stop()

    spark = _session("local-cluster[2,1,1024]", script, 1)
    try:
        training = sparktf.run(spark, training_main, numWorkers=2, useGpu="auto")
    finally:
        spark.stop()

    spark = _session("local-cluster[1,2,1024]", script, 2)
    scoring = []
    try:
        for _ in range(10):
            scoring += [r.asDict() for r in spark.range(0, 2, 1, 2).mapInPandas(
                scoring_probe, "pid long, assigned string, device string, visible string"
            ).collect()]
    finally:
        spark.stop()
    print("RESULT gpu " + json.dumps({"refusal": refusal, "training": training,
                                   "scoring": scoring}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
