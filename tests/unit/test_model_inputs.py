"""One rule feeds columns to model inputs: numpy batches (all-reduce, ``tensors.to_input``)
and the graph pipeline the parameter-server workers run; inputs bound by name or order."""

import numpy as np
import pytest

from sparktf.runtime.feed import columns, tensors
from sparktf.runtime.feed.columns import ColumnInfo, FeedError
from sparktf.runtime.training import bindings, parameter_servers
from sparktf.runtime.training.bindings import InputBinding

CASES = [  # (rows of the column, model input spec) -> shape and dtype the model gets
    (np.zeros((5, 64), np.float32), ((8, 8, 1), "float32"), (5, 8, 8, 1), "float32"),
    (np.arange(5, dtype=np.int64), ((1,), "float32"), (5, 1), "float32"),
    (np.zeros((5, 3), np.float32), ((3,), "float32"), (5, 3), "float32"),
    (np.zeros((5, 3), np.int64), ((3,), "int64"), (5, 3), "int64"),
    (np.full((5, 3), 4_000_000_003, np.int64), ((3,), "int64"), (5, 3), "int64"),
    (np.zeros((5, 3), np.float64), ((3,), "float64"), (5, 3), "float64"),
    (np.zeros((5, 3), np.float32), (None, None), (5, 3), "float32"),
    (np.zeros((5, 3), np.float64), (None, None), (5, 3), "float32"),  # Keras's floatx
    (np.zeros((5, 2), np.int64), ((6,), "int64"), (5, 6), "int64"),  # padded
    (np.zeros((5, 4, 4), np.float32), ((4, 4, 1), "float32"), (5, 4, 4, 1), "float32"),
]


@pytest.mark.parametrize("column,spec,shape,dtype", CASES)
def test_numpy_and_graph_feeds_shape_and_cast_alike(column, spec, shape, dtype):
    import tensorflow as tf

    fed = tensors.to_input(column, "c", *spec)
    assert fed.shape == shape and fed.dtype == dtype
    binding = InputBinding("c", "c", *spec)
    in_graph = tf.function(lambda c: parameter_servers._graph_input(c, binding))(
        tf.constant(column))
    assert tuple(in_graph.shape) == shape and in_graph.dtype.name == dtype
    np.testing.assert_array_equal(in_graph.numpy(), fed)


def test_padding_is_keras_pad_sequences_post():
    import keras

    seqs = [[3, 1, 4], [1], [5, 9, 2, 6], []]
    padded = columns.chunk_values(columns.spill_array(__import__("pyarrow").array(seqs), "s"),
                                  "s")
    expected = keras.utils.pad_sequences(seqs, maxlen=6, padding="post", value=0)
    np.testing.assert_array_equal(tensors.to_input(padded, "s", (6,), "int32"), expected)
    batch_longest = keras.utils.pad_sequences(seqs, padding="post", value=0)
    np.testing.assert_array_equal(tensors.to_input(padded, "s", (None,), "int32"),
                                  batch_longest)


def test_a_width_that_cannot_fit_the_input_is_refused_by_name():
    info = ColumnInfo("float32", (7,))
    with pytest.raises(FeedError, match=r"Column 'pixels' \(Spark type array<float>, rows of "
                                        r"shape \(7,\)\) cannot feed the model: input 'x' "
                                        r"declares dtype float32 and shape \(4, 2\)"):
        tensors.check_input("pixels", info, "array<float>", "x", (4, 2), "float32")


def test_a_too_long_sequence_names_the_column_its_length_and_the_limit():
    info = ColumnInfo("int64", (None,), longest=12)
    with pytest.raises(FeedError, match="'tokens' has a row of length 12, longer than the "
                                        "model input's declared length 10"):
        tensors.check_input("tokens", info, "array<bigint>", "ids", (10,), "int64")
    tensors.check_input("tokens", info, "array<bigint>", "ids", (None,), "int64")


def test_text_into_a_number_input_and_the_reverse_are_refused():
    with pytest.raises(FeedError, match=r"'city' \(Spark type string\).*float32.*StringLookup"):
        tensors.check_input("city", ColumnInfo("str", ()), "string", "city", (1,), "float32")
    with pytest.raises(FeedError, match=r"'age' \(Spark type double\).*string"):
        tensors.check_input("age", ColumnInfo("float64", ()), "double", "age", (1,), "string")


def _model(names, dict_inputs=False, outputs=("price", "dear")):
    import keras

    inputs = [keras.Input((1,), name=n) for n in names]
    merged = keras.layers.Concatenate()(inputs) if len(inputs) > 1 else inputs[0]
    heads = [keras.layers.Dense(1, name=o)(merged) for o in outputs]
    return keras.Model(dict(zip(names, inputs)) if dict_inputs else inputs,
                       heads if len(heads) > 1 else heads[0])


def test_inputs_are_fed_by_name_in_any_column_order_or_else_in_order():
    import keras  # noqa: F401

    infos = {c: ColumnInfo("float64", ()) for c in ("age", "income", "other")}
    bound = bindings.bind(_model(["age", "income"]), ["income", "other", "age"], ["y"], infos)
    assert [(b.column, b.name) for b in bound.inputs] == [("age", "age"),
                                                          ("income", "income")]
    bound = bindings.bind(_model(["a", "b"]), ["x1", "x2"], ["y"], infos)
    assert [(b.column, b.name) for b in bound.inputs] == [("x1", "a"), ("x2", "b")]
    x = bindings.bind(_model(["age", "income"], dict_inputs=True), ["income", "age"], ["y"],
                      infos).x({"age": np.ones(2), "income": np.zeros(2)})
    assert sorted(x) == ["age", "income"] and x["age"].shape == (2, 1)
    with pytest.raises(FeedError, match=r"input\(s\) \['income'\] have no column"):
        bindings.bind(_model(["age", "income"]), ["age", "other", "more"], ["y"], infos)


def test_labels_go_to_outputs_by_name_else_in_order():
    model = _model(["age"])
    by_name = bindings.bind(model, ["age"], ["dear", "price"], {})
    price, dear = by_name.y({"dear": np.zeros(2, np.int64), "price": np.ones(2)})
    assert price.dtype == np.float32 and dear.dtype == np.int64  # the model's output order
    in_order = bindings.bind(model, ["age"], ["p", "d"], {})
    assert in_order.outputs == ("price", "dear")
    with pytest.raises(FeedError, match="labelCols has 3 column"):
        bindings.bind(model, ["age"], ["a", "b", "c"], {})


def test_merged_infos_vary_where_tasks_differ_and_keep_the_longest_row():
    merged = columns.merge([ColumnInfo("int64", (5,)), ColumnInfo("int64", (None,), 9),
                            None])
    assert merged == ColumnInfo("int64", (None,), 9)
    assert columns.merge([ColumnInfo("float32", (3,)), ColumnInfo("float32", (3,))]).shape \
        == (3,)
