"""Labels follow the inputs' rule: a flat label array is reshaped to its output's shape
(issue 32: a flat array<float> of 4 values failed inside the task for an output (2, 2))."""

import numpy as np
import pytest

from sparktf.runtime.columns import ColumnInfo, FeedError
from sparktf.runtime.training import bindings

X = {"x": ColumnInfo("float32", (3,))}


def _model(*shape):
    import keras

    inputs = keras.Input((3,), name="x")
    size = int(np.prod(shape))
    return keras.Model(inputs, keras.layers.Reshape(shape)(keras.layers.Dense(size)(inputs)))


def test_a_flat_label_of_the_outputs_size_is_reshaped_to_its_shape():
    bound = bindings.bind(_model(2, 2), ["x"], ["y"], {**X, "y": ColumnInfo("float32", (4,))})
    labels = bound.y({"y": np.arange(8, dtype=np.float32).reshape(2, 4)})
    np.testing.assert_array_equal(labels, np.arange(8).reshape(2, 2, 2))


def test_sparse_class_labels_of_a_sequence_output_keep_one_value_per_step():
    bound = bindings.bind(_model(3, 5), ["x"], ["y"], {**X, "y": ColumnInfo("int64", (3,))})
    assert bound.y({"y": np.zeros((2, 3), np.int64)}).shape == (2, 3)


def test_a_label_of_another_size_is_refused_naming_the_column_and_the_shape():
    with pytest.raises(FeedError, match=r"Label column 'y' holds float32 rows of shape \(3,\), "
                                        r"but its output declares shape \(2, 2\)"):
        bindings.bind(_model(2, 2), ["x"], ["y"], {**X, "y": ColumnInfo("float32", (3,))})
