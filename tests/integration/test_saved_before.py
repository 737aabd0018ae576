"""What users saved before ``sparktf/ml/`` moved into rooms (issue 57) loads after it and
scores what it scored then: ``saved_before/`` holds stages saved at commit efcb89f
(``saved_before.py`` made them), their Params and classes named by the modules of that day.
"""

import json
import os

import numpy as np
from pyspark.ml import PipelineModel

from sparktf.ml import TFModel
from sparktf.ml.tuning import HalvingSearch, HalvingSearchModel, choice, logUniform, uniform
from tests.integration import saved_before
from tests.integration.saved_before import FOLDER, PIPELINE, PREDICTIONS, SEARCH, SEARCH_MODEL


def _then() -> dict:
    with open(os.path.join(FOLDER, PREDICTIONS)) as f:
        return json.load(f)


def test_a_pipeline_model_and_a_search_model_saved_before_score_what_they_scored(spark):
    df = saved_before.frame(spark)
    then = _then()
    pipeline = PipelineModel.load(os.path.join(FOLDER, PIPELINE))
    assert isinstance(pipeline.stages[0], TFModel)
    now = saved_before.predictions(pipeline, df)
    print("pipeline model: largest difference", np.max(np.abs(np.subtract(now, then[PIPELINE]))))
    np.testing.assert_allclose(now, then[PIPELINE], rtol=1e-6, atol=1e-6)
    assert pipeline.stages[0].getKerasModel().count_params() == 4

    found = HalvingSearchModel.load(os.path.join(FOLDER, SEARCH_MODEL))
    np.testing.assert_allclose(saved_before.predictions(found, df), then[SEARCH_MODEL],
                               rtol=1e-6, atol=1e-6)
    assert {getattr(p, "name", p): v for p, v in found.bestParams.items()} == then["bestParams"]
    assert [r["trial"] for r in found.trialRecords] == [0, 1]


def test_a_search_saved_before_loads_its_distributions_into_the_classes_of_today(tmp_path):
    loaded = HalvingSearch.load(os.path.join(FOLDER, SEARCH))
    made = saved_before.search(str(tmp_path))
    distributions = loaded.getOrDefault("paramDistributions")
    assert {getattr(k, "name", k): v for k, v in distributions.items()} == {
        "learningRate": logUniform(0.01, 0.3), "unused_width": uniform(1.0, 2.0),
        "unused_kind": choice(["a", "b"])}
    assert {getattr(k, "name", k): v for k, v in distributions.items()} == {
        getattr(k, "name", k): v for k, v in made.getOrDefault("paramDistributions").items()}
    assert loaded.getOrDefault("numTrials") == 2 and loaded.getOrDefault("seed") == 3
    assert loaded.getOrDefault("estimator").getOrDefault("batchSize") == 20
