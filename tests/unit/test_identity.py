"""A run recognises its model by what modelFn builds (sparktf.ml.identity)."""

import functools
import random

import numpy as np

from sparktf.ml import identity


def build(hparams, units=4, activation="relu"):
    import keras
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(units, activation),
                              keras.layers.Dropout(0.1), keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(hparams["learningRate"]), "mse")
    return model


class Builder:
    def __init__(self, **kwargs):
        self.kwargs = kwargs

    def __call__(self, hparams):
        return build(hparams, **self.kwargs)


def test_the_same_model_built_twice_by_other_objects_is_the_same_run():
    hparams = {"learningRate": 0.01}
    first = identity.model_identity(functools.partial(build, units=4), hparams)
    build(hparams)  # layer names of this process move on (dense_2, ...)
    assert identity.model_identity(Builder(units=4), hparams) == first
    assert identity.model_identity(functools.partial(build, units=4), hparams) == first
    assert "pickle" not in first


def test_another_model_is_told_apart_and_the_difference_named():
    hparams = {"learningRate": 0.01}
    relu = identity.model_identity(Builder(activation="relu"), hparams)
    tanh = identity.model_identity(Builder(activation="tanh"), hparams)
    said = identity.differences(relu, tanh)
    print(said)
    assert said and '"relu" then, "tanh" now' in said[0]
    faster = identity.model_identity(Builder(), {"learningRate": 0.1})
    assert any("learning_rate" in d for d in identity.differences(relu, faster))


def test_building_on_the_driver_leaves_its_random_state_alone():
    random.seed(1)
    np.random.seed(1)
    expected = (random.random(), np.random.rand())
    random.seed(1)
    np.random.seed(1)
    identity.model_identity(Builder(), {"learningRate": 0.01})  # it seeds everything with 0
    assert (random.random(), np.random.rand()) == expected


def test_a_model_fn_the_driver_cannot_run_is_recognised_by_its_pickle():
    def needs_the_executors(hparams):
        raise ImportError("only on the executors")
    assert set(identity.model_identity(needs_the_executors, {})) == {"pickle"}
