"""A run recognises its model by what modelFn builds (sparktf.ml.runs.identity)."""

import functools
import json
import random

import numpy as np

from sparktf.ml.runs import identity


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


def test_a_model_fn_the_driver_cannot_run_is_recognised_by_its_code():
    def needs_the_executors(hparams):
        raise ImportError("only on the executors")
    assert set(identity.model_identity(needs_the_executors, {})) == {"modelFn"}


def _subclassed(activation):
    import keras

    class Sub(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(4, activation=activation)
            self.out = keras.layers.Dense(1)

        def call(self, x):
            return self.out(self.dense(x))

    def build(hparams):
        model = Sub()
        model.compile("adam", "mse")
        return model
    return build


def _scaled_loss(scale):
    def build(hparams):
        import keras

        def loss(y, p):
            return scale * keras.ops.mean((y - p) ** 2)
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile("adam", loss)
        return model
    return build


def test_what_the_configuration_cannot_say_is_told_apart_by_the_code():
    """Found by review: a subclassed model over another activation and a loss closure
    over another scale were taken for the same model (their configs say nothing of it)."""
    relu, tanh = (identity.model_identity(_subclassed(a), {}) for a in ("relu", "tanh"))
    assert identity.model_identity(_subclassed("relu"), {}) == relu
    said = identity.differences(relu, tanh)
    print(said)
    assert said and '"relu" then, "tanh" now' in said[0]
    one, hundred = (identity.model_identity(_scaled_loss(s), {}) for s in (1.0, 100.0))
    assert identity.model_identity(_scaled_loss(1.0), {}) == one
    assert any("1.0 then, 100.0 now" in d for d in identity.differences(one, hundred))


LAMBDA_MODEL = """
import keras
def build(hparams):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Lambda(lambda x: x * 2.0),
                              keras.layers.Dense(1)])
    model.compile("adam", "mse")
    return model
"""


def test_a_lambda_layer_from_another_file_or_line_is_the_same_model():
    """A notebook cell is a new file in each kernel, at other lines: the same Lambda layer
    is the same model (before: its marshalled code, with file and lines, differed). The
    cells are compiled here under two file names (what a kernel does), and a cell whose
    Lambda differs is another model."""

    def cell(i: int, source: str):
        namespace: dict = {}
        exec(compile("\n" * 3 * i + source, f"<ipython-input-{i}-cell{i}.py>", "exec"),
             namespace)
        return identity.model_identity(namespace["build"], {})

    first, moved = cell(0, LAMBDA_MODEL), cell(1, LAMBDA_MODEL)
    assert first == moved
    assert cell(2, LAMBDA_MODEL.replace("x * 2.0", "x * 3.0")) != first


def test_a_set_in_the_code_and_a_long_list_in_a_closure_are_told_by_their_values():
    """Found by the second review: a frozenset constant's repr follows the process's
    string hashes (another driver saw another model), and a closure's list of a million
    values was written whole into run.json."""
    import subprocess
    import sys

    script = ("import json\nfrom sparktf.ml.runs import identity\n"
              "def fn(hparams):\n    return hparams['optimizer'] in {'adam', 'sgd', 'nadam'}\n"
              "print(json.dumps(identity.code_identity(fn)))\n")
    seen = {subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           check=True, env={**__import__("os").environ,
                                            "PYTHONHASHSEED": str(seed)}).stdout
            for seed in (1, 2)}
    assert len(seen) == 1
    values = [float(i) for i in range(100_000)]
    told = identity.code_identity(lambda hparams: values)
    assert len(json.dumps(told)) < 2_000
    assert told != identity.code_identity(lambda hparams: values[:-1] + [-1.0])
