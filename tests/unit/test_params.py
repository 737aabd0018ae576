"""pyspark.ml conformance of TFEstimator and TFModel, in the spirit of pyspark's check_params."""

import threading

import numpy as np
import pytest
from pyspark.ml.param import Param, TypeConverters

import sparktf
from sparktf.ml import TFEstimator, TFModel
from sparktf.ml.tuning import HalvingSearch, HalvingSearchModel

NO_DEFAULT = {"inputCols", "labelCols", "validationCol", "modelDir", "modelPath", "taskCpus",
              "taskGpus", "weightCol", "classWeight", "padLength", "keepBest", "runId",
              "minWorkers"}  # minWorkers unset: numWorkers


def build(hparams):
    raise AssertionError("not called in unit tests")


@pytest.mark.parametrize("cls", [TFEstimator, TFModel])
def test_every_param_is_documented_owned_converted_and_accessible(cls):
    stage = cls()  # constructible with no arguments, as pyspark's readers require
    assert stage.params, "no params"
    for p in stage.params:
        assert isinstance(p, Param)
        assert p.parent == stage.uid, p.name
        assert getattr(stage, p.name) is p
        assert p.doc and len(p.doc) > 10, p.name
        assert p.typeConverter is not TypeConverters.identity, p.name
        assert stage.hasDefault(p) or p.name in NO_DEFAULT, p.name
        name = p.name[0].upper() + p.name[1:]
        assert callable(getattr(stage, "get" + name)), p.name
        assert callable(getattr(stage, "set" + name)), p.name
        assert p.name in stage.explainParam(p)


@pytest.mark.parametrize("cls", [HalvingSearch, HalvingSearchModel])
def test_every_search_param_has_a_getter_and_a_setter_that_agree(cls):
    """As pyspark's CrossValidator: ``getX`` for each Param ``x`` (and the search a ``setX``);
    a getter gives the default until the Param is set, then what was set."""
    values = {"metricMode": "max", "sampler": "tpe", "metric": "val_auc", "trainRatio": 0.5,
              "keepTrialCheckpoints": True, "runId": "r", "maxTime": 9.0, "verbose": 0}
    stage = cls()
    assert len(stage.params) == 18
    for p in stage.params:
        name = p.name[0].upper() + p.name[1:]
        assert p.doc and len(p.doc) > 10, p.name
        getter = getattr(stage, "get" + name)
        if p.name == "estimator":  # as CrossValidator's: a KeyError until it is set
            with pytest.raises(KeyError):
                getter()
        elif p.name != "maxEpochs":  # unset: the estimator's epochs
            assert getter() == (stage.getOrDefault(p) if stage.isDefined(p) else None), p.name
        if p.name in ("estimator", "estimatorParamMaps", "paramDistributions", "evaluator"):
            continue
        value = values.get(p.name, 4)
        set_ = getattr(cls(), "set" + name) if cls is HalvingSearch else \
            (lambda v, _n=p.name: cls()._set(**{_n: v}))  # the search sets its model's
        assert getattr(set_(value), "get" + name)() == value, p.name


def test_explain_params_lists_every_param_with_its_default():
    text = TFEstimator().explainParams()
    for name in ("numWorkers", "batchSize", "learningRate", "epochs", "modelFn"):
        assert f"{name}:" in text
    assert "(default: 32)" in text


def test_constructor_set_params_and_setters_agree():
    a = TFEstimator(modelFn=build, numWorkers=2, epochs=3, batchSize=64,
                    hyperParams={"units": 8})
    b = TFEstimator().setParams(modelFn=build, numWorkers=2, epochs=3, batchSize=64,
                                hyperParams={"units": 8})
    c = TFEstimator().setModelFn(build).setNumWorkers(2).setEpochs(3).setBatchSize(64) \
        .setHyperParams({"units": 8})
    for est in (a, b, c):
        assert (est.getNumWorkers(), est.getEpochs(), est.getBatchSize()) == (2, 3, 64)
        assert est.hparams() == {"units": 8, "learningRate": 1e-3, "epochs": 3,
                                 "batchSize": 64}


@pytest.mark.parametrize("param,value,message", [
    ("numWorkers", 0, "numWorkers must be >= 1. Received: numWorkers=0"),
    ("numWorkers", "2", "numWorkers must be an integer >= 1"),
    ("batchSize", -5, "Received: batchSize=-5"),
    ("learningRate", 0, "learningRate must be a positive number, finite (not NaN or "
                        "infinity). Received: learningRate=0"),
    ("validationFraction", 1.0, "Received: validationFraction=1.0"),
    ("useGpu", "maybe", "useGpu must be 'auto', True or False. Received: useGpu='maybe'"),
    ("useGpu", 1, "useGpu must be 'auto', True or False"),
    ("taskGpus", 1.5, "taskGpus must be a fraction in (0, 1] or a whole number"),
    ("taskGpus", 0, "Received: taskGpus=0"),
    ("taskCpus", 1.5, "taskCpus must be an integer >= 1"),
    ("inputMode", "files", "inputMode must be one of ['stream', 'parquet']"),
    ("modelFn", 42, "modelFn must be a callable"),
    ("callbacks", [object()], "keras.callbacks.Callback"),
    ("hyperParams", [1], "hyperParams must be a dict"),
    ("hyperParams", {"units": 8, "lock": threading.Lock()},
     "hyperParams['lock'] cannot be pickled"),
])
def test_bad_values_are_rejected_when_set(param, value, message):
    with pytest.raises(sparktf.InvalidInputError) as info:
        TFEstimator(**{param: value})
    assert message in str(info.value)
    setter = getattr(TFEstimator(), "set" + param[0].upper() + param[1:])
    with pytest.raises(sparktf.InvalidInputError):
        setter(value)


NOT_FINITE = [float("nan"), float("inf"), -float("inf")]


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@pytest.mark.parametrize("cls", [TFEstimator, TFModel])
def test_no_param_takes_nan_or_infinity_and_the_error_names_it(cls):
    """Generated from the Param list: a new Param cannot escape. No Param has a meaning for
    NaN or +-infinity; every numeric one still takes a finite value (its default)."""
    numeric = []
    for p in cls().params:
        setter = getattr(cls(), "set" + p.name[0].upper() + p.name[1:])
        for value in NOT_FINITE:
            with pytest.raises((sparktf.InvalidInputError, TypeError)) as info:
                setter(value)
            assert p.name in str(info.value), (p.name, value, str(info.value))
            if isinstance(info.value, sparktf.InvalidInputError):
                assert f"Received: {p.name}={value!r}" in str(info.value), str(info.value)
        stage = cls()
        if stage.hasDefault(p.name) and _is_number(stage.getOrDefault(p.name)):
            numeric.append(p.name)
            setter(stage.getOrDefault(p.name))
    assert "batchSize" in numeric and (cls is TFModel or "learningRate" in numeric), numeric


@pytest.mark.parametrize("name", ["learningRate", "stallTimeout"])
def test_positive_float_params_refuse_nan_and_infinity_naming_the_param(name):
    for value in NOT_FINITE:
        with pytest.raises(sparktf.InvalidInputError, match=f"{name} must be a positive "
                           "number.*finite \\(not NaN or infinity\\)"):
            TFEstimator(**{name: value})
    assert getattr(TFEstimator(**{name: 1e-300}), "get" + name[0].upper() + name[1:])() \
        == 1e-300


def test_run_refuses_nan_and_infinity_in_every_numeric_argument():
    """Generated from sparktf.run's signature: every int or float argument."""
    import inspect

    numeric = [p.name for p in inspect.signature(sparktf.run).parameters.values()
               if p.kind is p.KEYWORD_ONLY and ("int" in str(p.annotation) or
                                                 "float" in str(p.annotation))]
    assert {"numWorkers", "numPs", "timeout", "taskCpus", "taskGpus"} <= set(numeric)
    for name in numeric:
        for value in NOT_FINITE:
            kwargs = {"numWorkers": 1, name: value}
            with pytest.raises(sparktf.InvalidInputError, match=f"Received: {name}="):
                sparktf.run(None, lambda args, ctx: None, **kwargs)


def test_copy_with_extra_never_mutates_the_original():
    est = TFEstimator(modelFn=build, learningRate=0.1, hyperParams={"units": 8})
    copy = est.copy({est.learningRate: 0.5, est.hyperParams: {"units": 16}})
    assert (est.getLearningRate(), est.getHyperParams()) == (0.1, {"units": 8})
    assert (copy.getLearningRate(), copy.getHyperParams()) == (0.5, {"units": 16})
    assert copy.getModelFn() is build and copy.uid == est.uid
    copy.getHyperParams()["units"] = 99  # getters hand out copies
    assert copy.getHyperParams() == {"units": 16}


def test_model_history_and_mappings_are_params():
    model = TFModel(modelPath="/m", inputMapping={"f": "x"}, history={"loss": [1.0, 0.5]})
    assert model.getHistory() == {"loss": [1.0, 0.5]}
    assert model.copy().getInputMapping() == {"f": "x"}
    assert model.featureColumns() == ["features"]
    assert TFModel(inputCols=["a", "b"]).featureColumns() == ["a", "b"]


@pytest.mark.parametrize("given,inside", [("true", True), ("TRUE", True), (True, True),
                                          ("false", False), (False, False),
                                          ("Auto", "auto"), ("auto", "auto")])
def test_use_gpu_has_one_representation_inside(given, inside):
    from sparktf._driver import launch
    from sparktf.runtime import gpu
    for value in (TFEstimator(useGpu=given).getUseGpu(), TFModel(useGpu=given).getUseGpu(),
                  gpu.use_gpu_value(given)):
        assert value == inside and type(value) is type(inside)
    launch.validate_launch(1, 0, given, None)  # run() takes the same values


@pytest.mark.parametrize("amount", [0.25, 0.5, 1, 1.0, 2, 4])
def test_task_gpus_takes_the_amounts_spark_takes(amount):
    assert TFEstimator(taskGpus=amount).getTaskGpus() == float(amount)


def test_the_default_seed_is_the_same_in_every_python_process():
    import os
    import subprocess
    import sys
    code = "from sparktf.ml import TFEstimator; print(TFEstimator().getSeed())"
    seeds = set()
    for hash_seed in ("1", "2", "random"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True)
        seeds.add(int(out.stdout.strip()))
    assert seeds == {TFEstimator().getSeed()}, seeds


def test_the_estimator_carries_output_mapping_to_its_model():
    chief = {"export_dir": "/fit/export", "history": {"loss": [1.0]}, "input_mapping": {},
             "prediction_kind": "regression", "from_logits": False}
    mapping = {"price": "price_hat", "dear": "dear_hat"}
    est = TFEstimator(outputMapping=mapping, predictionCol="hat")
    assert est.getOutputMapping() == mapping
    assert TFEstimator().setOutputMapping(mapping).getOutputMapping() == mapping
    model = est._make_model([chief])
    assert (model.getOutputMapping(), model.getPredictionCol()) == (mapping, "hat")
    assert not TFEstimator()._make_model([chief]).isSet("outputMapping")


def test_hyper_params_have_a_readable_json_view():
    from sparktf.ml.persistence import json_view
    view = json_view({"shape": (2, 3), "ids": {1: "a", (0, 1): b"\x00"}, "n": np.int64(7),
                      "x": np.float32(0.5), "a": np.arange(2), "inf": float("inf")})
    assert view == {"shape": [2, 3], "ids": {"1": "a", "(0, 1)": "b'\\x00'"}, "n": 7,
                    "x": 0.5, "a": [0, 1], "inf": float("inf")}
    assert type(view["n"]) is int and type(view["x"]) is float


def test_a_relative_model_dir_or_model_path_is_the_drivers_not_an_executors(tmp_path,
                                                                            monkeypatch):
    """Found by the documentation's examples: ``TFModel.from_keras("gru.keras", "models/gru")``
    exported to the driver's ``models/gru`` and the executors looked for it in their own
    working directories. A relative path is made absolute where it is set, on the driver;
    URIs and MLflow addresses stay as given."""
    from sparktf.ml import TFEstimator, TFModel

    monkeypatch.chdir(tmp_path)
    assert TFModel(modelPath="models/gru").getModelPath() == str(tmp_path / "models" / "gru")
    assert TFEstimator(modelDir="runs").getModelDir() == str(tmp_path / "runs")
    for uri in ("s3a://bucket/models", "runs:/0a1b/model", "models:/name/1", "file:///tmp/m",
                "/abs/path", "hdfs:///models"):
        assert TFModel(modelPath=uri).getModelPath() == uri
        assert TFEstimator(modelDir=uri).getModelDir() == uri
