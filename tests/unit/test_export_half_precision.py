"""The export of a model computed in half precision (``mixed_float16``,
``mixed_bfloat16``): the SavedModel's signature outputs float32, under the names the
same model gets in float32 (issue 54; from the review: a single output in a dict was
renamed ``output_0``)."""

import pytest

from sparktf.runtime.training import export


def _models(keras):
    def single():
        i = keras.Input((4,), name="x")
        return keras.Model(i, keras.layers.Dense(1)(i))

    def single_in_a_dict():
        i = keras.Input((4,), name="x")
        return keras.Model(i, {"score": keras.layers.Dense(1)(i)})

    def two_in_a_dict():
        i = keras.Input((4,), name="x")
        return keras.Model(i, {"price": keras.layers.Dense(1, name="price")(i),
                               "dear": keras.layers.Dense(1, activation="sigmoid",
                                                          name="dear")(i)})

    return [single, single_in_a_dict, two_in_a_dict]


def _signature_outputs(path):
    import tensorflow as tf

    outputs = tf.saved_model.load(path).signatures["serving_default"].structured_outputs
    return {name: spec.dtype.name for name, spec in outputs.items()}


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_half_precision_outputs_are_exported_as_float32_under_their_own_names(tmp_path,
                                                                            policy):
    import keras

    for make in _models(keras):
        expected = _export(make, "float32", tmp_path / f"{make.__name__}-32")
        found = _export(make, policy, tmp_path / f"{make.__name__}-{policy}")
        print(make.__name__, expected, found)
        assert found == expected, make.__name__
        assert set(found.values()) == {"float32"}


def _export(make, policy, path):
    import keras

    keras.mixed_precision.set_global_policy(policy)
    try:
        model = make()
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert export._half_precision(model) == (policy != "float32")
    export._export_saved_model(model, str(path))
    return _signature_outputs(str(path))
