"""Driver for test_async.py: parameter servers, the evaluator, a ResourceProfile.

Runs in its own process because it needs a bigger local-cluster (3 executors of
2 cores) than the shared test session. Each scenario's findings go to stdout as
one ``RESULT name {json}`` line, for the test to check.

    python tests/integration/scripts/async_jobs.py WORKDIR SCENARIO [SCENARIO ...]
"""

import json
import logging
import os
import sys

import numpy as np


def emit(name, value):
    print(f"\nRESULT {name} {json.dumps(value)}", flush=True)  # after Spark's progress bar


class Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def linear_frame(spark, n, seed=0):
    from pyspark.ml.functions import array_to_vector

    from tests.integration import data
    X, y = data.linear_rows(n, seed=seed)
    df = spark.createDataFrame(data.rows(X, y), "x array<double>, label double")
    return df.withColumn("features", array_to_vector("x")).drop("x")


def weights(model):
    kernel, bias = model.getKerasModel().get_weights()
    return kernel[:, 0].tolist() + [float(bias[0])]


def ps_regression(spark, workdir, lines):
    from sparktf.ml import TFEstimator
    from tests import conftest
    from tests.integration import models

    est = TFEstimator(modelFn=models.linear, numWorkers=2, numPs=1, epochs=5, batchSize=32,
                      learningRate=0.05, modelDir=os.path.join(workdir, "ps"),
                      stallTimeout=180, summarySteps=50)
    model = est.fit(linear_frame(spark, 1000))
    scored = model.transform(linear_frame(spark, 50, seed=3)).select("label", "prediction")
    errors = [abs(r.label - r.prediction) for r in scored.collect()]
    emit("ps_regression", {"weights": weights(model), "history": model.getHistory(),
                           "max_abs_error": max(errors),
                           "children_left": conftest.wait_gone(conftest.child_pids(), 30),
                           "serving": [line for line in lines if "serving for the chief" in line],
                           "scalars": scalar_steps(model)})


def kinds_model(hp):
    import keras
    keras.utils.set_random_seed(0)
    city = keras.Input((1,), dtype="string", name="city")
    seq = keras.Input((6,), dtype="int64", name="seq")
    c = keras.layers.Flatten()(keras.layers.Embedding(4, 2)(
        keras.layers.StringLookup(vocabulary=["a", "b", "c"])(city)))
    s = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(9, 2, mask_zero=True)(seq))
    price = keras.layers.Dense(1, name="price")(keras.layers.Concatenate()([c, s]))
    dear = keras.layers.Dense(1, activation="sigmoid", name="dear")(
        keras.layers.Concatenate()([c, s]))
    model = keras.Model([city, seq], [price, dear])
    model.compile(keras.optimizers.Adam(0.05), loss={"price": "mse",
                                                     "dear": "binary_crossentropy"})
    return model


def ps_kinds(spark, workdir, lines):
    """Strings, padded sequences and two labels through parameter-server training."""
    from sparktf.ml import TFEstimator
    rows = [(["a", "b", "c"][i % 3], [1 + i % 8] * (1 + i % 6), float(i % 3) + (i % 8) / 8,
             int(i % 3 == 0)) for i in range(600)]
    df = spark.createDataFrame(rows, "city string, seq array<bigint>, price double, dear int")
    model = TFEstimator(modelFn=kinds_model, numWorkers=2, numPs=1, epochs=4, batchSize=32,
                        labelCols=["price", "dear"], stallTimeout=180, verbose=2).fit(df)
    model.setOutputMapping({"price": "price_hat", "dear": "dear_hat"})
    scored = model.transform(df).where("price_hat IS NOT NULL AND dear_hat IS NOT NULL")
    emit("ps_kinds", {"history": model.getHistory(), "scored": scored.count()})


def scalar_steps(model):
    """{tag: [step, ...]} of the fit's training event file."""
    import glob

    import tensorflow as tf
    fit_dir = os.path.dirname(os.path.dirname(model.getModelPath()))
    steps = {}
    for path in glob.glob(os.path.join(fit_dir, "logs", "train", "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                steps.setdefault(value.tag, []).append(event.step)
    return steps


def evaluator(spark, workdir, lines, num_ps):
    from sparktf.ml import TFEstimator
    from tests.integration import models

    est = TFEstimator(modelFn=models.linear, numWorkers=2, numPs=num_ps, epochs=3,
                      batchSize=32, learningRate=0.05, validationFraction=0.25, seed=5,
                      evaluator=True, modelDir=os.path.join(workdir, f"eval{num_ps}"),
                      stallTimeout=180)
    model = est.fit(linear_frame(spark, 1200))
    emit(f"evaluator_ps{num_ps}", {
        "history": model.getHistory(),
        "evaluator_lines": [line for line in lines if "evaluator: epoch" in line]})


def ps_parquet(spark, workdir, lines):
    from sparktf.ml import TFEstimator
    from tests.integration import models

    est = TFEstimator(modelFn=models.linear, numWorkers=2, numPs=1, epochs=5, batchSize=32,
                      learningRate=0.05, inputMode="parquet", validationFraction=0.2, seed=2,
                      modelDir=os.path.join(workdir, "parquet"), stallTimeout=180)
    model = est.fit(linear_frame(spark, 1500))
    emit("ps_parquet", {"weights": weights(model), "history": model.getHistory()})


def task_cpus(spark, workdir, lines):
    import sparktf

    def main(args, ctx):
        import os
        # this process <- the task's Python worker <- its executor's pyspark daemon
        with open(f"/proc/{os.getppid()}/stat") as f:
            daemon = int(f.read().rsplit(")", 1)[1].split()[1])
        return {"threads": os.environ.get("TF_NUM_INTRAOP_THREADS"), "executor": daemon}

    found = sparktf.run(spark, main, numWorkers=2, taskCpus=2)
    refused = None
    try:
        sparktf.run(spark, main, numWorkers=4, taskCpus=2)
    except sparktf.errors.ClusterCapacityError as e:
        refused = str(e)
    emit("task_cpus", {"tasks": found, "refused": refused})


def run_ps(spark, workdir, lines):
    import sparktf
    from tests import conftest

    def main(steps, ctx):
        import tensorflow as tf
        if ctx.jobName in ("ps", "worker"):
            ctx.serve()
            return ctx.jobName
        ctx.awaitServers()
        strategy = tf.distribute.ParameterServerStrategy(
            tf.distribute.cluster_resolver.TFConfigClusterResolver())
        with strategy.scope():
            counter = tf.Variable(0.0)
        coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)

        @tf.function
        def step():
            counter.assign_add(1.0)
            return tf.constant(1)
        for _ in range(steps):
            coordinator.schedule(step)
        coordinator.join()
        return {"counter": float(counter.numpy()), "device": counter.device}

    every_task = sparktf.run(spark, main, 20, numWorkers=2, numPs=1, allTasks=True)
    chief_only = sparktf.run(spark, main, 20, numWorkers=2, numPs=1)  # sparktf serves
    emit("run_ps", {"results": every_task, "chief_only": chief_only,
                    "children_left": conftest.wait_gone(conftest.child_pids(), 30)})


def ps_tutorial(spark, workdir, lines):
    """TensorFlow's parameter-server tutorial, Keras 2 chosen on the driver as its guide
    says (TF_USE_LEGACY_KERAS=1), its body unchanged in main(args, ctx)."""
    import sparktf
    from tests.integration import tutorials

    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    try:
        found = sparktf.run(spark, tutorials.parameter_servers,
                            {"steps": 40, "model_dir": os.path.join(workdir, "ps_tutorial")},
                            numWorkers=2, numPs=2)
    finally:
        del os.environ["TF_USE_LEGACY_KERAS"]
    emit("ps_tutorial", {"results": found})


SCENARIOS = {"ps_regression": ps_regression, "run_ps": run_ps, "ps_parquet": ps_parquet,
             "evaluator_ps0": lambda spark, workdir, lines: evaluator(spark, workdir, lines, 0),
             "evaluator_ps1": lambda spark, workdir, lines: evaluator(spark, workdir, lines, 1),
             "task_cpus": task_cpus, "ps_kinds": ps_kinds, "ps_tutorial": ps_tutorial}


def main(argv):
    workdir, names = argv[0], argv[1:]
    from pyspark.sql import SparkSession

    lines = Lines()
    logging.getLogger("sparktf").addHandler(lines)
    logging.getLogger("sparktf").setLevel(logging.INFO)
    spark = (SparkSession.builder.master("local-cluster[3,2,1024]").appName("sparktf-async")
             .config("spark.ui.enabled", "false").config("spark.driver.memory", "1g")
             .config("spark.sql.shuffle.partitions", "4").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        for name in names:
            lines.lines.clear()
            SCENARIOS[name](spark, workdir, lines.lines)
    finally:
        spark.stop()


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    main(sys.argv[1:])
