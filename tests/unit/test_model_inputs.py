"""One rule feeds feature columns to model inputs: numpy batches (all-reduce) and the
graph pipeline the parameter-server workers run."""

import numpy as np
import pytest

from sparktf._executor.training import keras_steps, parameter_servers

CASES = [  # (rows of the column, model input spec) -> shape and dtype the model gets
    (np.zeros((5, 64), np.float32), ((8, 8, 1), "float32"), (5, 8, 8, 1), "float32"),
    (np.arange(5, dtype=np.int64), ((1,), "float32"), (5, 1), "float32"),
    (np.zeros((5, 3), np.float32), ((3,), "float32"), (5, 3), "float32"),
    (np.zeros((5, 3), np.int64), ((3,), "int64"), (5, 3), "int64"),
    (np.zeros((5, 3), np.float32), (None, None), (5, 3), "float32"),
]


@pytest.mark.parametrize("column,spec,shape,dtype", CASES)
def test_numpy_and_graph_feeds_shape_and_cast_alike(column, spec, shape, dtype):
    import tensorflow as tf

    fed = keras_steps.to_model_inputs([column], [spec])
    assert fed.shape == shape and fed.dtype == dtype
    in_graph = tf.function(lambda c: parameter_servers._shape_input(
        c, (column.dtype, column.shape[1:]), spec))(tf.constant(column))
    assert tuple(in_graph.shape) == shape and in_graph.dtype.name == dtype


def test_a_width_that_cannot_fit_the_input_is_refused_by_name():
    specs = [((4, 2), "float32")]
    assert keras_steps.input_conversion((7,), "f", specs[0]) == (None, None)
    with pytest.raises(ValueError, match="Column 'pixels' has 7 value"):
        keras_steps.check_input_widths([np.empty((0, 7), np.float32)], specs, ["pixels"])
