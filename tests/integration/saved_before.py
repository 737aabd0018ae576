"""Stages saved by sparktf before ``sparktf/ml/`` moved into rooms (issue 57, at commit
efcb89f), kept in ``saved_before/`` so that ``test_saved_before.py`` loads what users saved
then: a fitted ``PipelineModel`` (a ``TFModel`` stage), an unfitted ``HalvingSearch``
with sampled distributions (pickled: their classes named by the module they lived in)
and a fitted ``HalvingSearchModel``, with the predictions they gave when saved.

Made once with ``python -m tests.integration.saved_before`` at that commit; running it
again writes them anew with the code of the day.
"""

import json
import os
import shutil

FOLDER = os.path.join(os.path.dirname(__file__), "saved_before")
PIPELINE, SEARCH, SEARCH_MODEL, PREDICTIONS = (
    "pipeline_model", "halving_search", "halving_search_model", "predictions.json")


def frame(spark):
    from tests.integration import data

    X, y = data.linear_rows(40, seed=5)
    return data.frame(spark, data.rows(X, y), "features array<double>, label double") \
        .repartition(2)


def search(modelDir):
    from sparktf.ml import TFEstimator
    from sparktf.ml.tuning import HalvingSearch, choice, logUniform, uniform
    from tests.integration import models

    est = TFEstimator(modelFn=models.linear, numWorkers=1, batchSize=20, seed=1,
                      modelDir=modelDir)
    return HalvingSearch(estimator=est, numTrials=2, minEpochs=1, maxEpochs=2, seed=3,
                         metric="loss",
                         paramDistributions={est.learningRate: logUniform(0.01, 0.3),
                                             "unused_width": uniform(1.0, 2.0),
                                             "unused_kind": choice(["a", "b"])})


def predictions(model, df) -> list:
    return [float(r.prediction) for r in model.transform(df).orderBy("label").collect()]


def main():
    from pyspark.ml import Pipeline

    from sparktf.ml import TFEstimator
    from tests import conftest
    from tests.integration import models

    shutil.rmtree(FOLDER, ignore_errors=True)
    os.makedirs(FOLDER)
    scratch = os.path.join(FOLDER, "..", ".saved_before_runs")
    spark = conftest.local_cluster(2, "sparktf-saved-before")
    try:
        df = frame(spark).cache()
        est = TFEstimator(modelFn=models.linear, numWorkers=2, batchSize=20, epochs=2, seed=1,
                          learningRate=0.1)
        fitted = Pipeline(stages=[est]).fit(df)
        fitted.write().save(os.path.join(FOLDER, PIPELINE))
        unfitted = search(os.path.join(scratch, "search"))
        unfitted.write().save(os.path.join(FOLDER, SEARCH))
        found = unfitted.fit(df)
        found.write().save(os.path.join(FOLDER, SEARCH_MODEL))
        with open(os.path.join(FOLDER, PREDICTIONS), "w") as f:
            json.dump({PIPELINE: predictions(fitted, df), SEARCH_MODEL: predictions(found, df),
                       "bestParams": {getattr(p, "name", p): v
                                      for p, v in found.bestParams.items()}}, f)
    finally:
        spark.stop()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
