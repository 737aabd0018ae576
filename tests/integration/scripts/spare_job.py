"""Driver for test_leaks.py: spare processes across the jobs of one SparkSession (runs with
and without a DataFrame), and their end with it. Its own SparkSession
(local-cluster[2,1,1024]), so that stopping it ends nothing the rest of the suite uses.
Findings go to stdout as ``RESULT name {json}``.

    python tests/integration/scripts/spare_job.py
"""

import json
import logging
import os


def emit(name, value):
    print(f"\nRESULT {name} {json.dumps(value)}", flush=True)


def where(args, ctx):
    import os
    return {"rank": ctx.rank, "pid": os.getpid(), "ppid": os.getppid()}


def main():
    from pyspark.sql import SparkSession

    import sparktf
    from tests.conftest import child_pids, spare_pids, wait_gone

    phases = []

    class Phases(logging.Handler):
        def emit(self, record):
            if hasattr(record, "phase"):
                phases.append(record.phase)

    logging.getLogger("sparktf.phases").addHandler(Phases())
    logging.getLogger("sparktf.phases").setLevel(logging.DEBUG)
    os.environ.pop("PYSPARK_PYTHON", None)
    spark = (SparkSession.builder.master("local-cluster[2,1,1024]")
             .appName("sparktf-spares").config("spark.ui.enabled", "false")
             .config("spark.sparktf.spareIdleTimeout", "300").getOrCreate())
    # without data (an RDD stage), with a DataFrame (mapInArrow), without data again: the
    # same Python workers and spares serve all three
    frame = spark.range(0, 8, 1, 2)
    runs, spares_during = [], []
    for df in (None, frame, None):
        phases.clear()
        runs.append(sparktf.run(spark, where, numWorkers=2, df=df))
        spares_during.append(len(spare_pids()))
    emit("spares_during", spares_during)
    emit("runs", runs)
    emit("parents_are_spares", all(r["ppid"] in spare_pids() for run in runs for r in run))
    emit("parents", sorted({r["ppid"] for run in runs for r in run}))
    emit("forked_ranks", sorted(rank for rank, name, _ in phases
                                if name == "forked from the spare"))
    spark.stop()
    emit("left_after_stop", wait_gone(spare_pids() + child_pids(), 60))


if __name__ == "__main__":
    main()
