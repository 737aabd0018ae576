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

FITTED = {}  # the digits model of fit_transform, scored again by streaming


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
    model = FITTED["digits"] = est.fit(train)
    FITTED["digits_test"] = test
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


def _pixels(spark):
    from pyspark.ml.functions import vector_to_array
    train, test = digits(spark)
    columns = [f"p{i}" for i in range(64)]
    as_columns = [vector_to_array("features")[i].alias(c) for i, c in enumerate(columns)]
    return columns, train.select("label", *as_columns), test.select("label", *as_columns)


def pipeline_persistence(spark, workdir):
    """A Pipeline (VectorAssembler + TFEstimator with validation) fitted, saved,
    overwritten, and loaded in a fresh Connect session."""
    from pyspark.ml import Pipeline, PipelineModel
    from pyspark.ml.feature import VectorAssembler
    from pyspark.sql import SparkSession

    from sparktf.ml import TFEstimator
    from tests.integration import models
    columns, train, test = _pixels(spark)
    pipeline = Pipeline(stages=[
        VectorAssembler(inputCols=columns, outputCol="features"),
        TFEstimator(modelFn=models.digits_mlp, numWorkers=2, epochs=2, batchSize=64,
                    learningRate=0.01, validationFraction=0.2, seed=2,
                    modelDir=os.path.join(workdir, "pipeline-fits"))])
    fitted = pipeline.fit(train)
    path = os.path.join(workdir, "pipeline")
    fitted.write().save(path)
    fitted.write().overwrite().save(path)
    before = [r.prediction for r in fitted.transform(test).select("prediction").collect()]
    pipeline.write().overwrite().save(os.path.join(workdir, "unfitted"))
    fresh = SparkSession.builder.remote("sc://localhost:15002").create()  # a new session
    loaded = PipelineModel.read().session(fresh).load(path)
    _, _, fresh_test = _pixels(fresh)
    after = [r.prediction for r in loaded.transform(fresh_test).select("prediction").collect()]
    unfitted = Pipeline.read().session(fresh).load(os.path.join(workdir, "unfitted"))
    emit("pipeline_persistence", {
        "stages": [type(s).__name__ for s in loaded.stages],
        "val_metrics": sorted(k for k in fitted.stages[-1].getHistory() if k.startswith("val_")),
        "fresh_session": fresh.session_id != spark.session_id,
        "same_predictions": before == after,
        "loaded_estimator_epochs": unfitted.getStages()[-1].getEpochs()})


def cross_validator(spark, workdir):
    from pyspark.ml.evaluation import MulticlassClassificationEvaluator
    from pyspark.ml.tuning import CrossValidator, ParamGridBuilder

    from sparktf.ml import TFEstimator
    from tests.integration import models
    train, _ = digits(spark)
    est = TFEstimator(modelFn=models.digits_mlp, numWorkers=2, epochs=3, batchSize=64)
    grid = ParamGridBuilder().addGrid(est.learningRate, [1e-5, 3e-3]).build()
    cv = CrossValidator(estimator=est, estimatorParamMaps=grid, numFolds=2, seed=7,
                        evaluator=MulticlassClassificationEvaluator(metricName="accuracy"))
    model = cv.fit(train)
    emit("cross_validator", {"avgMetrics": list(model.avgMetrics),
                             "best": type(model.bestModel).__name__})


def train_validation_split(spark, workdir):
    from pyspark.ml.evaluation import MulticlassClassificationEvaluator
    from pyspark.ml.tuning import ParamGridBuilder, TrainValidationSplit

    from sparktf.ml import TFEstimator
    from tests.integration import models
    train, test = digits(spark)
    est = TFEstimator(modelFn=models.digits_sized, numWorkers=2, epochs=4, batchSize=64,
                      learningRate=3e-3)
    grid = ParamGridBuilder().addGrid(est.hyperParams, [{"units": 4}, {"units": 64}]).build()
    evaluator = MulticlassClassificationEvaluator(metricName="accuracy")
    tvs = TrainValidationSplit(estimator=est, estimatorParamMaps=grid, trainRatio=0.75,
                               seed=7, evaluator=evaluator)
    model = tvs.fit(train)
    FITTED["tvs"] = list(model.validationMetrics)
    emit("train_validation_split", {"validationMetrics": list(model.validationMetrics),
                                    "best": type(model.bestModel).__name__,
                                    "test_accuracy": evaluator.evaluate(
                                        model.transform(test))})


def halving_search(spark, workdir):
    """HalvingSearch on train_validation_split's grid, rows and split (its oracle, run
    before it in this process), then saved and loaded."""
    from pyspark.ml.evaluation import MulticlassClassificationEvaluator
    from pyspark.ml.tuning import ParamGridBuilder

    from sparktf.ml import TFEstimator
    from sparktf.ml.tuning import HalvingSearch, HalvingSearchModel
    from tests.integration import models
    train, test = digits(spark)
    est = TFEstimator(modelFn=models.digits_sized, numWorkers=2, batchSize=64,
                      learningRate=3e-3)
    grid = ParamGridBuilder().addGrid(est.hyperParams, [{"units": 4}, {"units": 64}]).build()
    search = HalvingSearch(estimator=est, estimatorParamMaps=grid, trainRatio=0.75, seed=7,
                           evaluator=MulticlassClassificationEvaluator(metricName="accuracy"),
                           minEpochs=2, maxEpochs=4, reductionFactor=2, maxTime=900.0)
    model = search.fit(train)
    path = os.path.join(workdir, "halving-search-model")
    model.write().save(path)
    loaded = HalvingSearchModel.load(path)
    tpe = HalvingSearch(estimator=est, paramDistributions={"units": [4, 64]}, numTrials=3,
                        sampler="tpe", maxTime=60.0, keepTrialCheckpoints=True)
    tpe.write().save(os.path.join(workdir, "tpe-search"))
    tpe_loaded = HalvingSearch.load(os.path.join(workdir, "tpe-search"))
    emit("halving_search", {
        "best": model.bestParams[est.hyperParams], "tvs": FITTED.get("tvs"),
        "trials": [{k: r[k] for k in ("trial", "epochs", "rungEpochs", "metrics")}
                   for r in model.trialRecords],
        "trials_frame": model.trials.count(),
        "new_params": [loaded.getMaxTime(), tpe_loaded.getOrDefault("sampler"),
                       tpe_loaded.getMaxTime(), tpe_loaded.getOrDefault("keepTrialCheckpoints"),
                       tpe_loaded.getOrDefault("numTrials")],
        "same_predictions": loaded.transform(test).select("prediction").collect() ==
        model.transform(test).select("prediction").collect()})


def streaming(spark, workdir):
    """A streaming DataFrame scored by TFModel.transform into a memory sink."""
    from sparktf.ml import TFEstimator
    from tests.integration import models
    train, test = digits(spark)
    model = FITTED.get("digits") or TFEstimator(
        modelFn=models.digits_mlp, numWorkers=1, epochs=2, batchSize=64,
        learningRate=0.01).fit(train)
    source = os.path.join(workdir, "stream-in")
    test.write.parquet(source)
    stream = spark.readStream.schema(test.schema).parquet(source)
    query = (model.transform(stream).select("label", "prediction").writeStream
             .format("memory").queryName("scored_digits").outputMode("append")
             .trigger(availableNow=True).start())
    query.awaitTermination(300)
    rows = spark.sql("SELECT count(*) AS n FROM scored_digits").first()["n"]
    batch = model.transform(test).count()
    emit("streaming", {"rows": rows, "batch_rows": batch})


def kinds(spark, workdir):
    """Strings, integers and floats fed by name, two labels, and preprocessing.adapt, from a
    Connect client; Keras's fit on the same rows is the oracle."""
    import keras
    import numpy as np

    from sparktf.ml import TFEstimator
    from sparktf.ml import preprocessing as pp
    from tests.integration import data_kinds
    kind = data_kinds.KINDS[0]  # strings + ints + floats by name
    rows, x, y, _ = data_kinds.data(kind)
    df = spark.createDataFrame(rows, kind.schema).repartition(2)
    fitted = TFEstimator(modelFn=kind.model_fn, numWorkers=2, epochs=kind.epochs,
                         batchSize=len(rows), shuffle=False, verbose=0,
                         **kind.params).fit(df)
    oracle = kind.model_fn({}).fit(x, y, batch_size=len(rows), epochs=kind.epochs,
                                   shuffle=False, verbose=0).history
    history = fitted.getHistory()
    worst = max(abs(a - b) / max(abs(b), 1e-3) for key in oracle
                for a, b in zip(history[key], oracle[key]))
    scored = fitted.transform(df).where("prediction IS NOT NULL").count()
    lookup = keras.layers.StringLookup()
    lookup.adapt(np.array([r[0] for r in rows]))
    state = pp.adapt(df, {"city": pp.StringLookup(), "area": pp.Normalization()})
    emit("kinds", {"max_rel_diff": worst, "keys": sorted(history) == sorted(oracle),
                   "scored": scored, "rows": len(rows),
                   "vocabulary_equal": pp.layer(state["city"]).get_vocabulary() ==
                   lookup.get_vocabulary()})


def show_then_stop(spark, workdir):
    """The last scenario: ``show(3)`` over a transform returns while the query still scores
    its other partitions; main's ``spark.stop()`` comes right after it (the server's
    stderr must not log the executions' releases failing: tests/integration/test_connect)."""
    test = FITTED["digits_test"]  # fit_transform's, built once
    FITTED["digits"].transform(test.repartition(4)).show(3)
    emit("show_then_stop", {"shown": True})


def docs_page(workdir):
    """docs/guide/connect.md's example, as a reader runs it (its blocks in order, in one
    namespace, in a folder of its own), first: its ``os.environ["PYSPARK_PYTHON"]`` and
    ``remote("local-cluster[...]").getOrCreate()`` start the local Connect server that the
    other scenarios then use, so that one server serves both. Its closing ``spark.stop()``
    is recorded and done at the job's end (show_then_stop ends the job the same way: a
    ``show(3)`` right before it). The session, or None if the page failed before making one."""
    import contextlib
    from unittest import mock

    from pyspark.sql.connect.session import SparkSession

    from tests.integration import test_docs
    folder = os.path.join(workdir, "docs-connect")
    os.makedirs(folder)
    namespace = {"__name__": "docs_connect"}
    stopped = []
    try:
        with contextlib.chdir(folder), mock.patch.object(
                SparkSession, "stop", lambda session: stopped.append(session)):
            test_docs.run_page("guide/connect.md", namespace)
        spark = namespace["spark"]
        emit("docs_page", {"stopped_its_session": stopped == [spark],
                           "history": namespace["model"].getHistory()})
    except Exception:  # noqa: BLE001 - the page's failure is its result
        emit("docs_page", {"failed": traceback.format_exc()[-3000:]})
    return namespace.get("spark")


SCENARIOS = {"fit_transform": fit_transform, "kinds": kinds, "run_with_df": run_with_df,
             "bad_input": bad_input, "pipeline_persistence": pipeline_persistence,
             "cross_validator": cross_validator, "streaming": streaming,
             "train_validation_split": train_validation_split, "halving_search": halving_search,
             "show_then_stop": show_then_stop}


def main(argv):
    """``docs_page``, if named, must come first: the page starts the session."""
    workdir, names = argv[0], argv[1:]
    page_first = names[:1] == ["docs_page"]
    spark = docs_page(workdir) if page_first else None
    if spark is None:
        os.environ["PYSPARK_PYTHON"] = sys.executable  # the server's executors: this Python
        from pyspark.sql import SparkSession
        spark = SparkSession.builder.remote("local-cluster[2,1,1024]").getOrCreate()
    spark.conf.set("spark.sql.shuffle.partitions", "4")
    try:
        emit("session", {"type": type(spark).__module__})
        for name in names[page_first:]:
            try:
                SCENARIOS[name](spark, workdir)
            except Exception:  # noqa: BLE001 - one scenario's failure is its result
                emit(name, {"failed": traceback.format_exc()[-3000:]})
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
