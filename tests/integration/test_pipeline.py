"""pyspark.ml citizenship: Pipeline, persistence, CrossValidator, TrainValidationSplit."""

import json
import os

import numpy as np
import pandas as pd
import pytest
from pyspark.ml import Pipeline, PipelineModel
from pyspark.ml.evaluation import MulticlassClassificationEvaluator
from pyspark.ml.feature import StandardScaler, VectorAssembler
from pyspark.ml.tuning import (
    CrossValidator,
    CrossValidatorModel,
    ParamGridBuilder,
    TrainValidationSplit,
)
from pyspark.ml.util import DefaultParamsReader

import sparktf
from sparktf.ml import TFEstimator, TFModel
from tests.integration import data, model_kinds, models

pytestmark = pytest.mark.timeout(900)
PIXELS = [f"p{i}" for i in range(64)]


@pytest.fixture(scope="module")
def digits(spark):
    Xtr, Xte, ytr, yte = data.digits_split()
    schema = ", ".join(f"{c} double" for c in PIXELS) + ", label long"

    def frame(X, y):
        return data.frame(spark, [[*map(float, x), int(t)] for x, t in zip(X, y)], schema)
    return frame(Xtr, ytr).cache(), frame(Xte, yte).cache()


# hyperParams that JSON cannot carry: a tuple, non-str keys, NaN and infinity, numpy
# scalars, bytes; they come back exactly (pickled beside the metadata, as modelFn is)
EXACT_HP = {"shape": (2, 3), "ids": {1: 16, (0, 1): "pair", None: [1, (2, 3)]},
            "nested": {"a": {"b": (1.5, "x")}}, "missing": float("nan"), "cap": float("inf"),
            "count": np.int64(7), "scale": np.float32(0.5), "raw": b"\x00\xff", "flag": True}


def _same(a, b) -> bool:
    """Equal values of the same types all the way down (NaN equal to NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return len(a) == len(b) and all(_same(ka, kb) and _same(a[ka], b[kb])
                                        for ka, kb in zip(a, b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, (float, np.floating)) and np.isnan(a):
        return bool(np.isnan(b))
    return bool(a == b)


def _pipeline(**est_params):
    est_params = {"modelFn": models.digits_mlp, **est_params}
    return Pipeline(stages=[
        VectorAssembler(inputCols=PIXELS, outputCol="raw"),
        StandardScaler(inputCol="raw", outputCol="features"),
        TFEstimator(numWorkers=2, batchSize=64, **est_params)])


def _predictions(model, df):
    rows = model.transform(df).select("prediction", "probability").collect()
    return np.array([r.prediction for r in rows]), np.array([r.probability for r in rows])


@pytest.mark.parametrize("uri", [False, True])
def test_pipeline_fits_saves_and_reloads_with_identical_predictions(spark, digits, tmp_path,
                                                                    uri):
    train, test = digits
    fitted = _pipeline(epochs=8, learningRate=3e-3).fit(train)
    accuracy = MulticlassClassificationEvaluator(metricName="accuracy").evaluate(
        fitted.transform(test))
    assert accuracy > 0.9
    path = f"file://{tmp_path}/pipeline" if uri else str(tmp_path / "pipeline")
    fitted.write().overwrite().save(path)
    loaded = PipelineModel.load(path)
    tf_stage = loaded.stages[-1]
    assert isinstance(tf_stage, TFModel)
    assert tf_stage.getModelPath().startswith(path)  # the SavedModel lives in the stage
    assert tf_stage.getHistory() == fitted.stages[-1].getHistory()
    before, after = _predictions(fitted, test), _predictions(loaded, test)
    np.testing.assert_array_equal(before[0], after[0])
    np.testing.assert_array_equal(before[1], after[1])
    # the Keras model back (issue 34): its predict is transform's, before and after reload
    scored = fitted.transform(test).select("features", "probability").collect()
    features = np.array([r.features.toArray() for r in scored])
    for stage in (fitted.stages[-1], tf_stage):
        np.testing.assert_allclose(stage.getKerasModel().predict(features, verbose=0),
                                   [r.probability.toArray() for r in scored],
                                   rtol=1e-5, atol=1e-6)


def test_unfitted_pipeline_and_estimator_round_trip(spark, digits, tmp_path):
    pipeline = _pipeline(modelFn=models.digits_keyed, epochs=2, learningRate=0.01,
                         hyperParams=EXACT_HP)
    pipeline.write().overwrite().save(str(tmp_path / "unfitted"))
    original = pipeline.getStages()[-1]
    original.write().save(str(tmp_path / "estimator"))
    loaded = Pipeline.load(str(tmp_path / "unfitted"))
    est = loaded.getStages()[-1]
    assert isinstance(est, TFEstimator)
    assert (est.getEpochs(), est.getLearningRate(), est.getNumWorkers()) == (2, 0.01, 2)
    assert _same(est.getHyperParams(), EXACT_HP), est.getHyperParams()
    assert _same(TFEstimator.load(str(tmp_path / "estimator")).getHyperParams(), EXACT_HP)
    metadata = DefaultParamsReader.loadMetadata(str(tmp_path / "estimator"), spark)
    view = metadata["paramMap"]["hyperParams"]  # a readable JSON view stays
    assert view["shape"] == [2, 3] and view["ids"]["1"] == 16 and view["count"] == 7
    model = est.getModelFn()(est.hparams())  # the pickled modelFn still builds the model
    assert model.count_params() > 0 and model.optimizer is not None
    assert est.uid == original.uid
    est.setEpochs(1)  # and the workers get the exact hyperParams too
    fitted = loaded.fit(digits[0])
    assert len(fitted.stages[-1].getHistory()["loss"]) == 1


def test_cross_validator_picks_the_better_learning_rate_and_reloads(spark, digits, tmp_path):
    train, test = digits
    hyper_params = {"shape": (2, 3), "ids": {1: 64}}  # digits_mlp's width, at an int key
    est = TFEstimator(modelFn=models.digits_keyed, featuresCol="features", numWorkers=2,
                      epochs=4, batchSize=64, hyperParams=hyper_params)
    assembled = VectorAssembler(inputCols=PIXELS, outputCol="features")
    grid = ParamGridBuilder().addGrid(est.learningRate, [1e-5, 3e-3]).build()
    cv = CrossValidator(estimator=est, estimatorParamMaps=grid, numFolds=2, parallelism=2,
                        evaluator=MulticlassClassificationEvaluator(metricName="accuracy"),
                        seed=7)
    cv_model = cv.fit(assembled.transform(train))
    assert cv_model.avgMetrics[1] > cv_model.avgMetrics[0] + 0.2
    best = cv_model.bestModel
    assert isinstance(best, TFModel)
    cv_model.write().overwrite().save(str(tmp_path / "cv"))
    loaded = CrossValidatorModel.load(str(tmp_path / "cv"))
    assert loaded.avgMetrics == pytest.approx(cv_model.avgMetrics)
    scored = loaded.transform(assembled.transform(test))
    assert MulticlassClassificationEvaluator(metricName="accuracy").evaluate(scored) > 0.85
    loaded_est = loaded.getEstimator()
    assert isinstance(loaded_est, TFEstimator) and loaded_est.getModelFn() is not None
    assert _same(loaded_est.getHyperParams(), hyper_params), loaded_est.getHyperParams()
    assert loaded_est.getModelFn()(loaded_est.hparams()).count_params() > 0


@pytest.mark.parametrize("name", ["two outputs", "strings"])  # "assembled": the test above
def test_cross_validator_tunes_every_kind_of_model_and_reloads(spark, tmp_path, name):
    kind = model_kinds.KINDS[name]
    df = model_kinds.frame(spark, kind).cache()
    est = model_kinds.estimator(kind)
    grid = ParamGridBuilder().addGrid(est.hyperParams, [{"lr": 1e-6}, {"lr": 0.05}]).build()
    cv = CrossValidator(estimator=est, estimatorParamMaps=grid, numFolds=2, seed=7,
                        evaluator=model_kinds.evaluator(kind))
    cv_model = cv.fit(df)
    print(f"\n{name}: rmse by lr {cv_model.avgMetrics}")
    assert cv_model.avgMetrics[1] < cv_model.avgMetrics[0]  # the model that learns wins
    cv_model.write().overwrite().save(str(tmp_path / "cv"))
    loaded = CrossValidatorModel.load(str(tmp_path / "cv"))
    before = cv_model.transform(df).select(*kind.outputs).toPandas()
    pd.testing.assert_frame_equal(loaded.transform(df).select(*kind.outputs).toPandas(),
                                  before)
    assert before.notna().all().all()


def test_train_validation_split_over_hyper_params(spark, digits):
    train, _ = digits
    est = TFEstimator(modelFn=models.digits_sized, numWorkers=2, epochs=3, batchSize=64,
                      learningRate=3e-3)
    grid = ParamGridBuilder().addGrid(est.hyperParams, [{"units": 2}, {"units": 64}]).build()
    tvs = TrainValidationSplit(estimator=est, estimatorParamMaps=grid, trainRatio=0.75,
                               evaluator=MulticlassClassificationEvaluator(metricName="accuracy"),
                               seed=3)
    model = tvs.fit(VectorAssembler(inputCols=PIXELS, outputCol="features").transform(train))
    assert model.validationMetrics[1] > model.validationMetrics[0]


def test_a_model_saved_in_another_format_is_refused_clearly(spark, tmp_path):
    path = str(tmp_path / "m")
    assert TFModel(modelPath=str(tmp_path)).write()  # writable; now fake an old save
    os.makedirs(os.path.join(path, "metadata"))
    meta = {"class": "sparktf.ml.model.TFModel", "timestamp": 0, "sparkVersion": spark.version,
            "uid": "TFModel_x", "paramMap": {}, "defaultParamMap": {}, "sparktfFormat": 99,
            "sparktfVersion": "9.0.0"}
    with open(os.path.join(path, "metadata", "part-00000"), "w") as f:
        f.write(json.dumps(meta))
    with pytest.raises(sparktf.InvalidInputError, match="saved by sparktf 9.0.0 in format 99"):
        TFModel.load(path)
