"""Driver for test_quiet.py: a user's own script, as short as one is, in local mode (where
the executors' stderr is the driver's console): it imports sparktf and no TensorFlow
itself, fits, scores, and shows the scores.

    python tests/integration/scripts/quiet_job.py
"""

import os


def build(hparams):
    import keras

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("adam", "mse")
    return model


def main():
    from pyspark.sql import SparkSession

    from sparktf.ml import TFEstimator
    from tests.integration import data

    os.environ.pop("PYSPARK_PYTHON", None)
    spark = (SparkSession.builder.master("local[2]").appName("sparktf-quiet")
             .config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    X, y = data.linear_rows(200)
    df = spark.createDataFrame(data.rows(X, y), "features array<double>, label double")
    model = TFEstimator(modelFn=build, numWorkers=2, epochs=1, batchSize=32, verbose=0).fit(df)
    model.transform(df).show(3)
    print("RESULT quiet {\"shown\": true}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
