"""pyspark.ml conformance of TFEstimator and TFModel, in the spirit of pyspark's check_params."""

import pytest
from pyspark.ml.param import Param, TypeConverters

import sparktf
from sparktf.ml import TFEstimator, TFModel

NO_DEFAULT = {"inputCols", "labelCols", "validationCol", "modelDir", "modelPath", "taskCpus",
              "taskGpus", "weightCol", "classWeight", "padLength"}


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
    ("learningRate", 0, "learningRate must be a positive number. Received: learningRate=0"),
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
])
def test_bad_values_are_rejected_when_set(param, value, message):
    with pytest.raises(sparktf.InvalidInputError) as info:
        TFEstimator(**{param: value})
    assert message in str(info.value)
    setter = getattr(TFEstimator(), "set" + param[0].upper() + param[1:])
    with pytest.raises(sparktf.InvalidInputError):
        setter(value)


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
