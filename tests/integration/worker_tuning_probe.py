"""What the worker-tuning test runs in both sessions (``spark.sparktf.workerTuning`` on in
the shared one, off in ``scripts/worker_tuning_job.py``'s): the same fit and transform,
and what the processes that ran them show of the tuning."""


def changes_here() -> dict:
    """What this process shows of sparktf's worker tuning."""
    import gc
    import sys
    import zipimport

    wrappers = sys.modules.get("keras.wrappers")
    return {"ran_sparktf": "sparktf.runtime.worker_tuning" in sys.modules,
            "ran_scoring": "sparktf.runtime.scoring.inference" in sys.modules
            and "tensorflow" in sys.modules,
            "frozen": gc.get_freeze_count(),
            "lazy_zip": "make_lazy" in getattr(zipimport.zipimporter.invalidate_caches,
                                               "__qualname__", ""),
            "keras_wrappers_deferred": wrappers is not None and
            type(wrappers).__module__.endswith("deferred_imports"),
            "keras": "keras" in sys.modules}


def in_task_process(args, ctx):
    import keras  # noqa: F401 - as a training process would
    return changes_here()


def fit_and_score(spark) -> dict:
    """The numbers a fit and a transform give, and what the processes show."""
    import json
    import sys

    from pyspark import cloudpickle

    import sparktf
    from sparktf._driver import checks, sessions
    from sparktf.ml import TFEstimator
    from tests.integration import data, models

    # the probe reaches the executors by value, as sparktf ships a modelFn (Spark's own
    # pickling names a function's module, which the executors cannot import)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])

    X, y = data.linear_rows(400)
    df = data.frame(spark, data.rows(X, y), "features array<double>, label double")
    model = TFEstimator(modelFn=models.linear, numWorkers=2, epochs=3, batchSize=400,
                        learningRate=0.1, seed=1).fit(df)
    kernel, bias = model.getKerasModel().get_weights()
    scored = model.transform(df.repartition(2)).select("prediction").collect()
    # in the Python workers sparktf's own jobs use (the driver's interpreter, as theirs)
    def probe(batches):
        import json

        import pyarrow as pa
        for _ in batches:
            pass
        yield pa.RecordBatch.from_pydict({"found": [json.dumps(changes_here())]})

    with checks.executor_python(sessions.Session(spark)):
        workers = [json.loads(r.found) for r in
                   df.repartition(2).mapInArrow(probe, "found string").collect()]
    processes = sparktf.run(spark, in_task_process, numWorkers=2)
    return {"weights": kernel[:, 0].tolist() + [float(bias[0])],
            "loss": model.getHistory()["loss"],
            "predictions": sorted(r.prediction for r in scored),
            "python_workers": workers, "task_processes": processes}
