"""Driver for test_worker_tuning.py: a session with spark.sparktf.workerTuning=false (its
own, since a Python worker keeps the changes an earlier job made), the same fit and
transform as the shared session's, and what its processes show.

    python tests/integration/scripts/worker_tuning_job.py
"""

import json
import os


def main():
    from pyspark.sql import SparkSession

    from tests.integration import worker_tuning_probe

    os.environ.pop("PYSPARK_PYTHON", None)
    spark = (SparkSession.builder.master("local-cluster[2,1,1024]").appName("worker-tuning")
             .config("spark.ui.enabled", "false").config("spark.driver.memory", "1g")
             .config("spark.python.worker.reuse", "true")
             .config("spark.sparktf.workerTuning", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        found = worker_tuning_probe.fit_and_score(spark)
        print(f"\nRESULT off {json.dumps(found)}", flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
