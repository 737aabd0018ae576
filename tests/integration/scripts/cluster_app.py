"""Applications for test_standalone_cluster.py, submitted to a Spark standalone cluster.

    spark-submit --master spark://HOST:PORT cluster_app.py SCENARIO WORKDIR
    python cluster_app.py second WORKDIR sc://HOST:PORT       (a Spark Connect client)

Each scenario prints its findings as one ``RESULT name {json}`` line. WORKDIR is a folder
every worker reaches (on one machine: a local folder; on a real cluster: a shared mount).
"""

import json
import logging
import os
import re
import signal
import sys
import threading
import traceback

from pyspark.sql import SparkSession

EPOCHS = 3


def emit(name, value):
    print(f"\nRESULT {name} {json.dumps(value)}", flush=True)


def digits_frames(spark):
    """scikit-learn's digits as pixel columns p0..p63 and a label, train and test."""
    from tests.integration import data
    X_train, X_test, y_train, y_test = data.digits_split()
    schema = ", ".join([f"p{i} double" for i in range(64)] + ["label long", "id long"])

    def rows(X, y):
        return [(*map(float, x), int(t), i) for i, (x, t) in enumerate(zip(X, y))]
    return (spark.createDataFrame(rows(X_train, y_train), schema),
            spark.createDataFrame(rows(X_test, y_test), schema))


def estimator(**kw):
    from sparktf.ml import TFEstimator
    from tests.integration import models
    settings = dict(modelFn=models.digits_mlp, numWorkers=2, epochs=EPOCHS, batchSize=64,
                    learningRate=0.01, seed=1)
    settings.update(kw)
    return TFEstimator(**settings)


def predictions(scored):
    return {str(r.id): [r.prediction, list(r.probability)]
            for r in scored.select("id", "prediction", "probability").collect()}


def pipeline_save(spark, workdir):
    """docs/guide/clusters.md's flow: assemble, fit on 2 workers with a shared modelDir, save."""
    from pyspark.ml import Pipeline
    from pyspark.ml.feature import VectorAssembler
    train, test = digits_frames(spark)
    pipeline = Pipeline(stages=[
        VectorAssembler(inputCols=[f"p{i}" for i in range(64)], outputCol="features"),
        estimator(modelDir=os.path.join(workdir, "fit"))])
    model = pipeline.fit(train)
    model.write().overwrite().save(os.path.join(workdir, "pipeline"))
    with open(os.path.join(workdir, "predictions.json"), "w") as f:
        json.dump(predictions(model.transform(test)), f)
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    emit("pipeline_save", {"master": spark.sparkContext.master, "executors": executors,
                           "history": model.stages[-1].getHistory(),
                           "model_dir": _files(os.path.join(workdir, "fit"))})


def _files(folder):
    return sorted(os.path.relpath(os.path.join(root, name), folder)
                  for root, _, names in os.walk(folder) for name in names)


def first(spark, workdir):
    """The first application: the pipeline saved for the second, then two fits at once."""
    pipeline_save(spark, workdir)
    concurrent(spark, workdir)


def first_then_driver_killed(spark, workdir):
    """The first application: ``first``, then the run whose driver the job kills
    (``driver_killed``): one application where two would each start the executors and
    import TensorFlow. A failure of ``first`` is its result; the run goes on."""
    try:
        first(spark, workdir)
    except Exception:  # noqa: BLE001 - reported to first's tests
        emit("first_failed", traceback.format_exc()[-8000:])
    driver_killed(spark, workdir)


def pipeline_load(spark, workdir):
    """A second application: load the saved pipeline, score with transform and SQL."""
    from pyspark.ml import PipelineModel
    _, test = digits_frames(spark)
    model = PipelineModel.load(os.path.join(workdir, "pipeline"))
    scored = model.transform(test)
    by_transform = predictions(scored)
    with open(os.path.join(workdir, "predictions.json")) as f:
        saved = json.load(f)
    scored.select("id", "features").createOrReplaceTempView("digits_test")
    spark.udf.register("tf_digit", model.stages[-1].udf())
    by_sql = {str(r.id): r.p for r in
              spark.sql("SELECT id, tf_digit(features) AS p FROM digits_test").collect()}
    emit("pipeline_load", {
        "rows": len(by_transform),
        "transform_equals_saved_app": by_transform == saved,
        "sql_equals_transform": by_sql == {k: v[0] for k, v in by_transform.items()}})


class EpochLines(logging.Handler):
    """The driver's per-epoch progress lines, as the user sees them."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        message = record.getMessage()
        if re.match(r"sparktf: (fit \d+: )?epoch \d+/\d+ ", message):
            self.lines.append(message)


def concurrent(spark, workdir):
    """Two fits at once (two threads; CrossValidator(parallelism=2)) against the same
    fits one after the other."""
    from pyspark.ml.evaluation import MulticlassClassificationEvaluator
    from pyspark.ml.feature import VectorAssembler
    from pyspark.ml.tuning import CrossValidator, ParamGridBuilder
    train, _ = digits_frames(spark)
    train = VectorAssembler(inputCols=[f"p{i}" for i in range(64)],
                            outputCol="features").transform(train).select("features", "label")
    train = train.repartition(2).cache()
    train.count()
    lines = EpochLines()
    logging.getLogger("sparktf").addHandler(lines)
    logging.getLogger("sparktf").setLevel(logging.INFO)
    rates = (0.01, 0.05)
    shared = os.path.join(workdir, "concurrent")  # every fit gets a folder of its own in it
    # full-batch steps: the rows' order (which a shuffle before a 1-task stage does not
    # keep) changes only the order of a sum, so fits run at once and in turn can agree
    full = dict(numWorkers=1, batchSize=4096, modelDir=shared)
    estimators = [estimator(learningRate=lr, epochs=2, **full) for lr in rates]

    def histories(parallel):
        found, failed = [None, None], []

        def fit(i):
            try:
                found[i] = estimators[i].fit(train).getHistory()
            except BaseException as e:  # noqa: BLE001 - raised again in the main thread
                failed.append(e)
        if parallel:
            threads = [threading.Thread(target=fit, args=(i,)) for i in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        else:
            fit(0)
            fit(1)
        if failed:
            raise failed[0]
        return found

    lines.lines.clear()
    together = histories(parallel=True)
    together_lines = list(lines.lines)
    apart = histories(parallel=False)

    def cv(parallelism):
        est = estimator(epochs=1, **full)
        grid = ParamGridBuilder().addGrid(est.learningRate, list(rates)).build()
        return CrossValidator(estimator=est, estimatorParamMaps=grid, numFolds=2, seed=3,
                              parallelism=parallelism,
                              evaluator=MulticlassClassificationEvaluator(
                                  metricName="accuracy")).fit(train).avgMetrics
    lines.lines.clear()
    cv_together = cv(2)
    cv_lines = list(lines.lines)
    emit("concurrent", {"threads": together, "sequential": apart, "thread_lines": together_lines,
                        "cv_parallel": cv_together, "cv_sequential": cv(1),
                        "cv_lines": cv_lines})


def _rank():
    return json.loads(os.environ["TF_CONFIG"])["task"]["index"]


def kill_worker_once(marker, rank=1):
    """A Keras callback: when epoch 2 begins (the checkpoint of epoch 1 written), rank
    ``rank`` kills the standalone Worker JVM that runs it and that worker's executor JVM (a
    machine lost for good mid-fit), once."""
    import keras

    from tests.conftest import ancestor

    class KillWorkerOnce(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            if _rank() != rank or epoch != 1 or os.path.exists(marker):
                return
            executor = ancestor(os.getpid(), b"CoarseGrainedExecutorBackend")
            worker = ancestor(executor, b"org.apache.spark.deploy.worker.Worker")
            with open(marker, "w") as f:
                json.dump({"worker": worker, "executor": executor}, f)
            os.kill(worker, signal.SIGKILL)
            os.kill(executor, signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)  # the machine's processes all go
    return KillWorkerOnce()


ROWS, RATE = 60, 0.05  # full-batch fits of the linear model: Keras is the oracle


def linear_frame(spark):
    from tests.integration import data
    X, y = data.linear_rows(ROWS)
    return X, y, spark.createDataFrame(data.rows(X, y), "features array<double>, label double")


def linear_estimator(**kw):
    from sparktf.ml import TFEstimator
    from tests.integration import models
    return TFEstimator(modelFn=models.linear, batchSize=ROWS, learningRate=RATE,
                       shuffle=False, **kw)


def keras_oracle(X, y, epochs, callbacks=()):
    """Keras's own uninterrupted full-batch fit on the driver: (model, history)."""
    import numpy as np

    from tests.integration import models, plan_oracle
    model = models.linear({"learningRate": RATE})
    history = model.fit(plan_oracle.planned_batches(X, y, [np.arange(len(X))]),
                        epochs=epochs, shuffle=False, verbose=0, callbacks=list(callbacks))
    return model, {k: [float(v) for v in values] for k, values in history.history.items()}


def largest_difference(a_weights, b_weights):
    import numpy as np
    return max(float(np.max(np.abs(a - b))) for a, b in zip(a_weights, b_weights, strict=True))


def watch_driver_logs():
    """(epoch lines, warnings) the driver logs, as lists that fill up."""
    lines = EpochLines()  # the epochs each attempt trained
    records = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: records.append(record.getMessage())
    for h in (lines, handler):
        logging.getLogger("sparktf").addHandler(h)
    logging.getLogger("sparktf").setLevel(logging.INFO)
    return lines.lines, records


def worker_lost(spark, workdir):
    """A fit on all 3 workers with minWorkers=1; a worker machine dies for good when epoch 2
    begins: the fit goes on with 2 workers from the checkpoint of epoch 1."""
    epoch_lines, warnings = watch_driver_logs()
    X, y, df = linear_frame(spark)
    marker = os.path.join(workdir, "killed.json")
    model = linear_estimator(numWorkers=3, minWorkers=1, maxRetries=1, epochs=3,
                             modelDir=os.path.join(workdir, "lost"),
                             callbacks=[kill_worker_once(marker)]).fit(df)
    keras_model, keras_history = keras_oracle(X, y, epochs=3)
    with open(marker) as f:
        killed = json.load(f)
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    emit("worker_lost", {"history": model.getHistory(), "keras_history": keras_history,
                         "weights_vs_keras": largest_difference(
                             model.getKerasModel().get_weights(), keras_model.get_weights()),
                         "killed": killed, "warnings": warnings,
                         "executors_after": executors, "epoch_lines": epoch_lines})
    search_worker_lost(spark, workdir, X, y, df)


def search_worker_lost(spark, workdir, X, y, df):
    """A HalvingSearch on the 2 workers left: the promoted trial's machine dies when its
    epoch 2 begins; the trial relaunches from its checkpoint on the last worker, as a fit
    does, and ends as Keras's uninterrupted fit of its learning rate."""
    from pyspark.ml.tuning import ParamGridBuilder

    from sparktf.ml.tuning import HalvingSearch
    marker = os.path.join(workdir, "killed-in-search.json")
    est = linear_estimator(numWorkers=1, maxRetries=1, modelDir=os.path.join(workdir, "search"),
                           callbacks=[kill_worker_once(marker, rank=0)])
    grid = ParamGridBuilder().addGrid(est.learningRate, [RATE, 1e-3, 1e-4]).build()
    found = HalvingSearch(estimator=est, estimatorParamMaps=grid, metric="loss", minEpochs=1,
                          maxEpochs=3, parallelism=2).fit(df)
    _, keras_history = keras_oracle(X, y, epochs=3)
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    emit("search_lost", {"records": found.trialRecords, "best": found.bestTrial,
                         "keras_history": keras_history, "killed": os.path.exists(marker),
                         "executors_after": executors})


RUN_EPOCHS = 4


def run_files(workdir):
    """The folder of the driver-loss run, and its Keras callbacks' files."""
    folder = os.path.join(workdir, "runs")
    return folder, os.path.join(workdir, "best.keras"), os.path.join(workdir, "epochs.csv")


def run_estimator(workdir):
    """The run the driver-loss scenario submits twice: runId 'nightly', 4 epochs, with
    ModelCheckpoint(save_best_only) and CSVLogger(append) as users write them; the first
    submission blocks when epoch 3 begins (the test kills its driver meanwhile)."""
    import keras
    folder, best, csv = run_files(workdir)
    marker = os.path.join(workdir, "blocked")

    class BlockOnce(keras.callbacks.Callback):
        """Blocks when epoch 3 begins, in the first submission only: it decides at the end
        of epoch 2, before the driver hears of that epoch (and is killed)."""

        block = False

        def on_epoch_end(self, epoch, logs=None):
            if epoch == 1:
                self.block = not os.path.exists(marker)
                if _rank() == 0:
                    open(marker, "w").close()

        def on_epoch_begin(self, epoch, logs=None):
            if self.block:
                threading.Event().wait()  # until the application is killed
    return linear_estimator(
        numWorkers=2, epochs=RUN_EPOCHS, modelDir=folder, runId="nightly",
        callbacks=[BlockOnce(), keras.callbacks.ModelCheckpoint(best, monitor="loss",
                                                                save_best_only=True),
                   keras.callbacks.CSVLogger(csv, append=True)])


def driver_killed(spark, workdir):
    """The run's first submission: says KILL-ME once epoch 2 is reported (its checkpoint
    written), then waits in epoch 3 until the test kills this driver with SIGKILL."""
    class KillMe(EpochLines):
        def emit(self, record):
            super().emit(record)
            if self.lines and re.search(r"epoch 2/", self.lines[-1]):
                print("\nKILL-ME " + json.dumps(self.lines), flush=True)
    logging.getLogger("sparktf").addHandler(KillMe())
    logging.getLogger("sparktf").setLevel(logging.INFO)
    _, _, df = linear_frame(spark)
    run_estimator(workdir).fit(df)
    emit("driver_killed", "the fit returned: the driver was not killed")


def driver_resumed(spark, workdir):
    """The same application submitted again: the run resumes after epoch 2."""
    import csv
    import tempfile

    import keras
    epoch_lines, warnings = watch_driver_logs()
    X, y, df = linear_frame(spark)
    model = run_estimator(workdir).fit(df)
    folder, best, csv_path = run_files(workdir)
    with tempfile.TemporaryDirectory() as keras_dir:
        keras_best, keras_csv = (os.path.join(keras_dir, n) for n in ("best.keras", "e.csv"))
        keras_model, keras_history = keras_oracle(X, y, RUN_EPOCHS, [
            keras.callbacks.ModelCheckpoint(keras_best, monitor="loss", save_best_only=True),
            keras.callbacks.CSVLogger(keras_csv)])
        best_vs_keras = largest_difference(keras.saving.load_model(best).get_weights(),
                                           keras.saving.load_model(keras_best).get_weights())
        with open(keras_csv) as f:
            keras_rows = list(csv.DictReader(f))
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    emit("driver_resumed", {
        "epoch_lines": epoch_lines, "warnings": warnings, "history": model.getHistory(),
        "keras_history": keras_history, "best_vs_keras": best_vs_keras,
        "weights_vs_keras": largest_difference(model.getKerasModel().get_weights(),
                                               keras_model.get_weights()),
        "csv": rows, "keras_csv": keras_rows, "workdir_files": sorted(os.listdir(workdir)),
        "run_files": _files(os.path.join(folder, "nightly"))})


def search_files(workdir):
    """The driver-loss search's folder, its trials' epoch logs and its FIFO to the driver."""
    return (os.path.join(workdir, "searches"), os.path.join(workdir, "search-epochs"),
            os.path.join(workdir, "search-fifo"))


def search_of(workdir, run_id, block=False):
    """The search the driver-loss scenario submits twice (runId 'tuning'), or its
    uninterrupted twin: 4 learning rates, rungs 2 and 4, one trial at once. Each trial's
    rank 0 appends the epochs it begins to ``<epochs>-<runId>``. With ``block``, the first
    trial to begin its 4th epoch (its checkpoint of the 3rd written) tells the driver
    through the FIFO and waits there, once."""
    import keras
    from pyspark.ml.tuning import ParamGridBuilder

    from sparktf.ml.tuning import HalvingSearch
    folder, epochs_log, fifo = search_files(workdir)
    log, marker = f"{epochs_log}-{run_id}", os.path.join(workdir, "search-blocked")

    class EpochsBegun(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            rate = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))
            with open(log, "a") as f:
                f.write(f"{rate:.6g} {epoch}\n")
            if block and epoch == 3 and not os.path.exists(marker):
                open(marker, "w").close()
                with open(fifo, "w") as f:
                    f.write(f"learning rate {rate:.6g} began epoch 4\n")
                threading.Event().wait()  # until the application is killed

    est = linear_estimator(numWorkers=1, modelDir=folder, callbacks=[EpochsBegun()])
    grid = ParamGridBuilder().addGrid(est.learningRate, [RATE, 0.02, 1e-3, 1e-4]).build()
    return HalvingSearch(estimator=est, estimatorParamMaps=grid, metric="loss", minEpochs=2,
                         maxEpochs=4, reductionFactor=2, parallelism=1, seed=3, runId=run_id)


def search_killed(spark, workdir):
    """The search's first submission: says KILL-ME once a promoted trial has begun its 4th
    epoch (its 3rd checkpointed), which then waits until the test kills this driver."""
    _, _, fifo = search_files(workdir)
    os.mkfifo(fifo)

    def kill_me():
        with open(fifo) as f:  # blocks until the trial opens it
            print("\nKILL-ME " + json.dumps(f.readline().strip()), flush=True)
    threading.Thread(target=kill_me, daemon=True).start()
    logging.getLogger("sparktf").setLevel(logging.INFO)
    logging.getLogger("sparktf").addHandler(logging.StreamHandler(sys.stdout))
    _, _, df = linear_frame(spark)
    search_of(workdir, "tuning", block=True).fit(df)
    emit("search_killed", "the search returned: the driver was not killed")


def search_resumed(spark, workdir):
    """The same application submitted again: the search resumes from its journal; then the
    same search uninterrupted, for the test to compare."""
    lines = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: lines.append(record.getMessage())
    logging.getLogger("sparktf").addHandler(handler)
    logging.getLogger("sparktf").setLevel(logging.INFO)
    _, _, df = linear_frame(spark)
    resumed = search_of(workdir, "tuning").fit(df)
    whole = search_of(workdir, "tuning-whole").fit(df)
    _, epochs_log, _ = search_files(workdir)

    def begun(run_id):
        with open(f"{epochs_log}-{run_id}") as f:
            return [line.split() for line in f]
    emit("search_resumed", {
        "resumed": resumed.trialRecords, "whole": whole.trialRecords,
        "best": [resumed.bestTrial, whole.bestTrial],
        "begun": {"resumed": begun("tuning"), "whole": begun("tuning-whole")},
        "lines": [line for line in lines if "search" in line]})


def driver_resumed_search_killed(spark, workdir):
    """The run's second submission (driver_resumed), which then starts the search whose
    driver is killed (search_killed): one application where two would each start the
    executors and import TensorFlow again."""
    driver_resumed(spark, workdir)
    search_killed(spark, workdir)


def second(spark, workdir):
    """The second application, a Spark Connect server in front of the cluster, from its
    client: the first application's saved pipeline scored, then a fit and its scoring."""
    pipeline_load(spark, workdir)
    connect(spark, workdir)


def connect(spark, workdir):
    """From a Spark Connect client of a server in front of the cluster: fit and score."""
    from pyspark.ml.feature import VectorAssembler
    train, test = digits_frames(spark)
    assemble = VectorAssembler(inputCols=[f"p{i}" for i in range(64)], outputCol="features")
    model = estimator(epochs=2, modelDir=os.path.join(workdir, "connect")).fit(
        assemble.transform(train))
    scored = model.transform(assemble.transform(test))
    accuracy = scored.where("prediction = label").count() / scored.count()
    emit("connect", {"history": model.getHistory(), "accuracy": accuracy,
                     "rows": scored.count()})


def main(argv):
    scenario, workdir = argv[0], argv[1]
    if len(argv) > 2:  # a Spark Connect client
        spark = SparkSession.builder.remote(argv[2]).getOrCreate()
    else:
        spark = SparkSession.builder.appName(f"sparktf-cluster-{scenario}").getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
    try:
        globals()[scenario](spark, workdir)
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
