"""What every environment must pass: a Pipeline's fit, transform, a SQL UDF, save and load,
a resumed run, ``CrossValidator``, ``HalvingSearch`` and ``sparktf.run`` on local-cluster.

``make test`` runs it, with the unit tests, in the two environments beside the main one:
the lowest versions sparktf declares (``constraints-lowest.txt``: pyspark 3.5, TensorFlow
2.16, NumPy 1.26) and the newest releases pip resolves with no constraints
(tests/integration/test_separate_runs.py). The main environment's suite tests each of
its parts in depth (test_pipeline, test_model, test_resume_exact, test_tuning, test_run).
"""

import numpy as np
import pytest
from pyspark.ml import Pipeline, PipelineModel
from pyspark.ml.evaluation import RegressionEvaluator
from pyspark.ml.tuning import CrossValidator, ParamGridBuilder

import sparktf
from sparktf._driver import versions
from sparktf.ml import TFEstimator, TFModel
from sparktf.ml.tuning import HalvingSearch
from tests.integration import data, models
from tests.integration.test_resume_exact import LoseTheRun

pytestmark = pytest.mark.timeout(600)


def _versions() -> str:
    import keras
    import pyspark
    import tensorflow as tf

    return (f"pyspark {pyspark.__version__}, TensorFlow {tf.__version__}, "
            f"keras {keras.__version__}, numpy {np.__version__}")


def _never_built(hparams):
    raise AssertionError("modelFn ran: a job started before the refusal")


def _rows_sum(args, ctx):
    return sum(len(batch["label"]) for batch in ctx.dataset(32).as_numpy_iterator())


def test_fit_transform_sql_persistence_resume_tuning_and_run(spark, tmp_path):
    X, y = data.linear_rows(240)
    df = data.frame(spark, data.rows(X, y), "features array<double>, label double") \
        .repartition(2).cache()
    common = dict(modelFn=models.linear, numWorkers=2, epochs=3, batchSize=64,
                  learningRate=0.05, modelDir=str(tmp_path / "runs"))

    # a Pipeline's fit and transform, a SQL UDF, save and load
    fitted = Pipeline(stages=[TFEstimator(runId="whole", **common)]).fit(df)
    losses = fitted.stages[0].getHistory()["loss"]
    assert len(losses) == 3 and losses[-1] < losses[0]
    scored = fitted.transform(df).select("label", "prediction").toPandas()
    assert len(scored) == 240 and np.isfinite(scored["prediction"]).all()
    spark.udf.register("tf_predict", fitted.stages[0].udf())
    df.createOrReplaceTempView("smoke_rows")
    by_sql = spark.sql("SELECT label, tf_predict(features) AS prediction FROM smoke_rows") \
        .toPandas()
    np.testing.assert_allclose(by_sql.sort_values("label")["prediction"],
                               scored.sort_values("label")["prediction"], rtol=1e-6)
    fitted.write().overwrite().save(str(tmp_path / "pipeline"))
    loaded = PipelineModel.load(str(tmp_path / "pipeline")).transform(df) \
        .select("label", "prediction").toPandas()
    np.testing.assert_allclose(loaded.sort_values("label")["prediction"],
                               scored.sort_values("label")["prediction"], rtol=1e-6)

    # a run lost after its second epoch resumes into the uninterrupted run
    run = TFEstimator(runId="lost", callbacks=[LoseTheRun(str(tmp_path / "lost"), epoch=1)],
                      **common)
    with pytest.raises(sparktf.TaskFailedError, match="lost after epoch 2"):
        run.fit(df)
    np.testing.assert_allclose(run.fit(df).getHistory()["loss"], losses, rtol=1e-6)

    # CrossValidator and HalvingSearch over two learning rates
    est = TFEstimator(modelFn=models.linear, numWorkers=2, epochs=2, batchSize=64)
    grid = ParamGridBuilder().addGrid(est.learningRate, [0.1, 1e-4]).build()
    cv = CrossValidator(estimator=est, estimatorParamMaps=grid, numFolds=2, seed=3,
                        evaluator=RegressionEvaluator(metricName="rmse")).fit(df)
    assert cv.avgMetrics[0] < cv.avgMetrics[1]
    search = HalvingSearch(estimator=est.copy({est.validationFraction: 0.25}),
                           estimatorParamMaps=grid, metric="val_loss", minEpochs=1,
                           maxEpochs=2, reductionFactor=2, seed=1).fit(df)
    assert search.bestParams[est.learningRate] == 0.1

    # a Keras model from elsewhere, scoring rows with nulls: null outputs on every version
    import keras

    keras.utils.set_random_seed(0)
    classifier = keras.Sequential([keras.Input((3,)),
                                   keras.layers.Dense(2, activation="softmax")])
    classifier.compile("adam", "sparse_categorical_crossentropy")
    scorer = TFModel.from_keras(classifier, str(tmp_path / "classifier"))
    nulls = spark.createDataFrame([(0, None), (1, [1.0, None, 3.0]), (2, [1.0, 2.0, 3.0])],
                                  "id int, features array<double>")
    rows = scorer.transform(nulls).orderBy("id").collect()
    assert [(r.prediction, r.probability) for r in rows[:2]] == [(None, None)] * 2
    np.testing.assert_allclose(rows[2].probability.toArray(),
                               classifier.predict(np.array([[1.0, 2.0, 3.0]]), verbose=0)[0],
                               rtol=1e-6)

    # sparktf.run: each worker's share of the frame, every row once
    assert sum(sparktf.run(spark, _rows_sum, numWorkers=2, df=df)) == 240

    if not versions.has(versions.FRAME_STAGE_PROFILE):  # pyspark 3.5: refused, no job run
        with pytest.raises(sparktf.InvalidInputError, match="needs pyspark 4.0 or newer"):
            TFEstimator(modelFn=_never_built, numWorkers=2, taskCpus=1).fit(df)
    print(f"\nsmoke on {_versions()}: losses {[round(v, 4) for v in losses]}, "
          f"CrossValidator rmse {[round(float(v), 4) for v in cv.avgMetrics]}")
