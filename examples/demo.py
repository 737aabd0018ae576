"""``make demo``: train, tune-free evaluate, score with SQL, save and reload, on digits.

Run with ``python -m examples.demo [--output DIR]``. It starts an embedded
``local-cluster[2,1,1024]`` Spark (two separate executor processes, no cluster
needed), fits ``VectorAssembler -> StandardScaler -> TFEstimator`` on
scikit-learn's digits (shipped with scikit-learn, no download) with 2
TensorFlow workers, evaluates with ``MulticlassClassificationEvaluator``,
scores the test set from SQL, saves and reloads the ``PipelineModel``, prints a
report and writes ``training.png`` (training curves and a confusion matrix).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

PIXELS = [f"p{i}" for i in range(64)]


def build_model(hparams):
    """The Keras model: called on every worker with the estimator's hparams."""
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((64,)),
        keras.layers.Dense(hparams.get("units", 64), activation="relu"),
        keras.layers.Dropout(0.1),
        keras.layers.Dense(10, activation="softmax"),
    ])
    model.compile(optimizer=keras.optimizers.Adam(hparams["learningRate"]),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def load_digits_frames(spark):
    """Train/test DataFrames with one column per pixel, as data usually arrives in Spark."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)
    schema = ", ".join(f"{c} double" for c in PIXELS) + ", label long"

    def frame(X, y):
        return spark.createDataFrame([[*map(float, x), int(t)] for x, t in zip(X, y)], schema)
    return frame(Xtr, ytr), frame(Xte, yte)


def make_pipeline():
    from pyspark.ml import Pipeline
    from pyspark.ml.feature import StandardScaler, VectorAssembler

    from sparktf.ml import TFEstimator

    return Pipeline(stages=[
        VectorAssembler(inputCols=PIXELS, outputCol="raw"),
        StandardScaler(inputCol="raw", outputCol="features"),
        TFEstimator(modelFn=build_model, numWorkers=2, epochs=15, batchSize=64,
                    learningRate=3e-3, validationFraction=0.1, seed=42,
                    hyperParams={"units": 64}),
    ])


def plot(history: dict, confusion, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (curves, matrix) = plt.subplots(1, 2, figsize=(11, 4.5))
    epochs = range(1, len(history["loss"]) + 1)
    for key, style in (("loss", "-"), ("val_loss", "--"), ("accuracy", "-"),
                       ("val_accuracy", "--")):
        if key in history:
            curves.plot(epochs, history[key], style, label=key)
    curves.set_xlabel("epoch")
    curves.set_title("training (2 TensorFlow workers on Spark)")
    curves.legend()
    image = matrix.imshow(confusion, cmap="Blues")
    matrix.set_xlabel("predicted digit")
    matrix.set_ylabel("true digit")
    matrix.set_title("confusion matrix, test set")
    matrix.set_xticks(range(10))
    matrix.set_yticks(range(10))
    for (i, j), count in __import__("numpy").ndenumerate(confusion):
        if count:
            matrix.text(j, i, int(count), ha="center", va="center", fontsize=7,
                        color="white" if count > confusion.max() / 2 else "black")
    fig.colorbar(image, ax=matrix)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def step(what: str) -> None:
    print(f"\n--> {what}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="demo-output", help="where to write the results")
    args = parser.parse_args(argv)
    os.makedirs(args.output, exist_ok=True)

    import numpy as np
    from pyspark.ml import PipelineModel
    from pyspark.ml.evaluation import MulticlassClassificationEvaluator
    from pyspark.sql import SparkSession

    step("starting Spark: local-cluster[2,1,1024], two executor processes on this machine")
    log4j = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")
    spark = (SparkSession.builder.master("local-cluster[2,1,1024]").appName("sparktf-demo")
             .config("spark.ui.enabled", "false").config("spark.driver.memory", "1g")
             # sparktf prints each epoch's progress: Spark's stage bars would interleave
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={log4j}")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        train, test = load_digits_frames(spark)
        step(f"fitting VectorAssembler -> StandardScaler -> TFEstimator on {train.count()} "
             "digits, 2 TensorFlow workers, 15 epochs")
        started = time.monotonic()
        fitted = make_pipeline().fit(train)
        fit_seconds = time.monotonic() - started
        history = fitted.stages[-1].getHistory()

        step(f"scoring {test.count()} test digits, evaluating, scoring again from SQL")
        scored = fitted.transform(test).cache()
        evaluator = MulticlassClassificationEvaluator(metricName="accuracy")
        accuracy = evaluator.evaluate(scored)
        f1 = evaluator.setMetricName("f1").evaluate(scored)

        scaled = fitted.stages[1].transform(fitted.stages[0].transform(test))
        scaled.createOrReplaceTempView("digits_test")
        spark.udf.register("tf_predict", fitted.stages[-1].udf())
        by_sql = spark.sql("SELECT label, tf_predict(features) AS predicted FROM digits_test")
        sql_accuracy = by_sql.selectExpr("avg(cast(label = predicted as double))").first()[0]

        saved = os.path.abspath(os.path.join(args.output, "pipeline-model"))
        step("saving the PipelineModel, loading it back, scoring with the loaded one")
        fitted.write().overwrite().save(saved)
        reloaded = PipelineModel.load(saved)
        same = (reloaded.transform(test).select("prediction").collect()
                == scored.select("prediction").collect())

        pairs = np.array(scored.select("label", "prediction").collect(), dtype=int)
        confusion = np.zeros((10, 10), dtype=int)
        np.add.at(confusion, (pairs[:, 0], pairs[:, 1]), 1)
        png = os.path.join(args.output, "training.png")
        plot(history, confusion, png)

        print("\n=== sparktf demo: digits on Spark, 2 TensorFlow workers ===")
        print("pipeline      VectorAssembler -> StandardScaler -> TFEstimator")
        print(f"train / test  {train.count()} / {test.count()} rows")
        print(f"fit           {fit_seconds:.1f} s, {len(history['loss'])} epochs, final "
              f"loss {history['loss'][-1]:.4f}, val_accuracy {history['val_accuracy'][-1]:.3f}")
        print(f"test accuracy {accuracy:.4f}  (f1 {f1:.4f}, MulticlassClassificationEvaluator)")
        print(f"SQL scoring   SELECT tf_predict(features) ... accuracy {sql_accuracy:.4f}")
        print(f"saved         {saved}")
        print(f"reloaded      identical predictions: {same}")
        print(f"plot          {os.path.abspath(png)}")
        return 0 if same and accuracy > 0.9 else 1
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
