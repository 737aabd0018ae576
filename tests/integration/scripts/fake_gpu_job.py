"""Runs sparktf on a local-cluster whose executors have fake GPUs; prints what tasks saw.

    python fake_gpu_job.py WORKDIR TASK_AMOUNT [EXECUTOR_CUDA_VISIBLE_DEVICES]

Spark's resource scheduler assigns the GPU addresses that a discovery script
reports (here: "0", "1", "2"); this prints, as JSON, what each training task
and each inference task was assigned and what CUDA_VISIBLE_DEVICES it ran with,
then trains again on the same Python workers (scoring must leave nothing behind).
"""

import json
import os
import stat
import sys


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


def main() -> int:
    workdir, amount = sys.argv[1], sys.argv[2]
    inherited = sys.argv[3] if len(sys.argv) > 3 else None
    script = os.path.join(workdir, "discover_gpus.sh")
    with open(script, "w") as f:
        f.write('#!/usr/bin/env bash\necho \'{"name": "gpu", "addresses": ["0", "1", "2"]}\'\n')
    os.chmod(script, os.stat(script).st_mode | stat.S_IEXEC)

    os.environ["PYSPARK_PYTHON"] = sys.executable  # the probes' own UDFs run this Python
    from pyspark.sql import SparkSession

    import sparktf

    builder = (SparkSession.builder.master("local-cluster[2,1,1024]")
               .config("spark.ui.enabled", "false")
               .config("spark.worker.resource.gpu.amount", "3")
               .config("spark.worker.resource.gpu.discoveryScript", script)
               .config("spark.executor.resource.gpu.amount", "1")
               .config("spark.executor.resource.gpu.discoveryScript", script)
               .config("spark.task.resource.gpu.amount", amount))
    if inherited:
        builder = builder.config("spark.executorEnv.CUDA_VISIBLE_DEVICES", inherited)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        training = sparktf.run(spark, training_main, numWorkers=2, useGpu=True)
        inference = [r.asDict() for r in spark.range(0, 2, 1, 2).mapInPandas(
            inference_probe, "assigned string, device string, before string, after string"
        ).collect()]
        # the same Python workers again: nothing of the scoring may reach a later fit
        again = sparktf.run(spark, training_main, numWorkers=2, useGpu=True)
    finally:
        spark.stop()
    print("RESULT gpu " + json.dumps({"training": training, "inference": inference,
                                    "training_again": again}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
