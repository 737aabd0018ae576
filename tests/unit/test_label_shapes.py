"""Labels follow the inputs' rule: a flat label array is reshaped to its output's shape
(issue 32: a flat array<float> of 4 values failed inside the task for an output (2, 2))."""

import numpy as np
import pytest

from sparktf.runtime.feed.columns import ColumnInfo, FeedError
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


def test_a_nested_label_of_the_outputs_size_is_reshaped_to_its_shape():
    """Found by review: a [[a, b], [c, d]] label for an output (4,) reached Keras's loss
    as (?, 2, 2) against (?, 4)."""
    bound = bindings.bind(_model(4), ["x"], ["y"], {**X, "y": ColumnInfo("float64", (2, 2))})
    labels = bound.y({"y": np.arange(8, dtype=np.float64).reshape(2, 2, 2)})
    np.testing.assert_array_equal(labels, np.arange(8).reshape(2, 4))


def test_one_value_per_row_for_a_vector_output_is_kept_as_keras_takes_it():
    bound = bindings.bind(_model(4), ["x"], ["y"], {**X, "y": ColumnInfo("int64", ())})
    assert bound.y({"y": np.zeros(2, np.int64)}).shape == (2,)


def test_a_custom_losss_own_label_for_an_output_of_one_axis_goes_to_keras_as_it_is():
    """Second review: [target, mask] for an output (1,), read by a custom loss, is what
    Keras's fit accepts; it was refused."""
    bound = bindings.bind(_model(1), ["x"], ["y"], {**X, "y": ColumnInfo("float64", (2,))})
    assert bound.y({"y": np.zeros((3, 2))}).shape == (3, 2)


@pytest.mark.parametrize("label, rows", [
    (ColumnInfo("float64", ()), r"float64 rows of shape \(\)"),
    (ColumnInfo("float64", (None,), longest=4), "float64 rows whose length varies"),
    (ColumnInfo("float64", (2, 3)), r"float64 rows of shape \(2, 3\)")])
def test_a_scalar_a_varying_or_a_nested_label_of_another_size_is_refused(label, rows):
    """Found by review: a scalar label for an output (2, 2), and one row of 3 values
    among rows of 4 (fed as (?, 0)), failed inside Keras's loss."""
    with pytest.raises(FeedError, match=rf"Label column 'y' holds {rows}, but its output "
                                        r"declares shape \(2, 2\)"):
        bindings.bind(_model(2, 2), ["x"], ["y"], {**X, "y": label})
