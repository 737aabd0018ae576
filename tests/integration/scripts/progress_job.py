"""Driver for test_progress.py: one fit whose steps take a while, in its own SparkSession,
run by the test on a pseudo-terminal so that the progress bar draws as for a user.

    python tests/integration/scripts/progress_job.py
"""

import os
import time

import keras


class SlowSteps(keras.callbacks.Callback):
    """Each step takes 50 ms more, so an epoch lasts long enough to watch the bar move."""

    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.05)


def main():
    from pyspark.sql import SparkSession

    from sparktf.ml import TFEstimator
    from tests.integration import data, models

    os.environ.pop("PYSPARK_PYTHON", None)
    spark = (SparkSession.builder.master("local-cluster[2,1,1024]").appName("sparktf-progress")
             .config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    X, y = data.linear_rows(2560)
    df = spark.createDataFrame(data.rows(X, y), "features array<double>, label double")
    TFEstimator(modelFn=models.linear, numWorkers=2, epochs=2, batchSize=64,
                callbacks=[SlowSteps()]).fit(df)
    spark.stop()


if __name__ == "__main__":
    main()
