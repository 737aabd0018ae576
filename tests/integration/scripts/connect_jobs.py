"""Driver for test_connect.py: sparktf from a Spark Connect client.

Starts a local Spark Connect server over ``local-cluster[2,1,1024]`` (pyspark's own
``SparkSession.builder.remote("local-cluster[...]")``; the executors run this
interpreter because PYSPARK_PYTHON names it, as a Connect server's configuration
must) and runs each scenario from the client. Findings go to stdout as one
``RESULT name {json}`` line each.

    python tests/integration/scripts/connect_jobs.py WORKDIR SCENARIO [SCENARIO ...]
"""

import json
import os
import sys
import traceback


def emit(name, value):
    print(f"\nRESULT {name} {json.dumps(value)}", flush=True)


def digits(spark):
    from pyspark.ml.functions import array_to_vector

    from tests.integration import data
    X_train, X_test, y_train, y_test = data.digits_split()
    train = spark.createDataFrame([(x.tolist(), int(t)) for x, t in zip(X_train, y_train)],
                                  "x array<double>, label long")
    test = spark.createDataFrame([(x.tolist(), int(t)) for x, t in zip(X_test, y_test)],
                                 "x array<double>, label long")
    return (train.withColumn("features", array_to_vector("x")).drop("x"),
            test.withColumn("features", array_to_vector("x")).drop("x"))


def fit_transform(spark, workdir):
    """A fit with validation on 2 workers, scoring, an evaluator, SQL scoring."""
    from pyspark.ml.evaluation import MulticlassClassificationEvaluator

    from sparktf.ml import TFEstimator
    from tests.integration import models
    train, test = digits(spark)
    est = TFEstimator(modelFn=models.digits_mlp, numWorkers=2, epochs=4, batchSize=64,
                      learningRate=0.01, validationFraction=0.2, seed=1,
                      modelDir=os.path.join(workdir, "fit"))
    model = est.fit(train)
    scored = model.transform(test)
    accuracy = MulticlassClassificationEvaluator(metricName="accuracy").evaluate(scored)
    test.createOrReplaceTempView("digits_test")
    spark.udf.register("tf_digit", model.udf())
    sql = spark.sql("SELECT label, tf_digit(features) AS p FROM digits_test").collect()
    by_transform = [r.prediction for r in scored.select("prediction").collect()]
    emit("fit_transform", {"history": model.getHistory(), "accuracy": accuracy,
                           "sql_equals_transform": [r.p for r in sql] == by_transform})


def run_with_df(spark, workdir):
    import sparktf

    def count_rows(args, ctx):
        return ctx.numRows

    df = spark.range(0, 500, 1, 3).selectExpr("cast(id as double) as x")
    emit("run_with_df", {"rows": sparktf.run(spark, count_rows, None, numWorkers=2, df=df)})


def bad_input(spark, workdir):
    from sparktf.ml import TFEstimator
    from tests.integration import models
    df = spark.createDataFrame([([1.0, 2.0], None)], "features array<double>, label double")
    try:
        TFEstimator(modelFn=models.linear, numWorkers=2).fit(df)
        emit("bad_input", {"error": None})
    except Exception as e:  # noqa: BLE001 - reported to the test
        emit("bad_input", {"error": type(e).__name__, "message": str(e)})


SCENARIOS = {"fit_transform": fit_transform, "run_with_df": run_with_df,
             "bad_input": bad_input}


def main(argv):
    workdir, names = argv[0], argv[1:]
    os.environ["PYSPARK_PYTHON"] = sys.executable  # the server's executors run this Python
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.remote("local-cluster[2,1,1024]")
             .config("spark.sql.shuffle.partitions", "4").getOrCreate())
    try:
        emit("session", {"type": type(spark).__module__})
        for name in names:
            try:
                SCENARIOS[name](spark, workdir)
            except Exception:  # noqa: BLE001 - one scenario's failure is its result
                emit(name, {"failed": traceback.format_exc()[-3000:]})
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
