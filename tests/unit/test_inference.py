"""Scoring helpers: prediction post-processing, output columns with nulls."""

import numpy as np
import pyarrow as pa
import pytest

import sparktf
from sparktf.runtime.scoring import inference
from sparktf.runtime.scoring.outputs import classify, output_arrays
from sparktf.runtime.scoring.spec import (
    InputBinding,
    OutputBinding,
    PredictionColumns,
    ScoreSpec,
    per_row_kind,
)


def test_regression_prediction_is_the_value():
    pred, prob, raw = classify(np.array([[1.5], [-2.0]]), "regression", False)
    np.testing.assert_array_equal(pred, [1.5, -2.0])
    assert prob is None and raw is None


def test_multiclass_prediction_is_the_argmax_with_probability_vectors():
    out = np.array([[0.1, 0.7, 0.2], [0.5, 0.3, 0.2]])
    pred, prob, raw = classify(out, "multiclass", False)
    np.testing.assert_array_equal(pred, [1.0, 0.0])
    np.testing.assert_allclose(prob, out)


def test_multiclass_logits_become_softmax_probabilities():
    pred, prob, raw = classify(np.array([[0.0, np.log(3.0)]]), "multiclass", True)
    np.testing.assert_allclose(prob, [[0.25, 0.75]])
    np.testing.assert_allclose(raw, [[0.0, np.log(3.0)]])
    assert pred.tolist() == [1.0]


def test_binary_sigmoid_output_gives_two_class_vectors():
    pred, prob, _ = classify(np.array([[0.8], [0.1]]), "binary", False)
    np.testing.assert_allclose(prob, [[0.2, 0.8], [0.9, 0.1]])
    np.testing.assert_array_equal(pred, [1.0, 0.0])


def test_per_row_kind():
    assert per_row_kind(()) == "scalar"
    assert per_row_kind((1,)) == "scalar"
    assert per_row_kind((3,)) == "vector"


def test_outputs_are_null_where_inputs_were_null():
    batch = pa.RecordBatch.from_pydict({"id": [1, 2, 3], "x": [[1.0], None, [3.0]]})
    spec = ScoreSpec("m", "serving_default", 10, (InputBinding("x", "x", (1,), "float32"),),
                     outputs=(OutputBinding("y", "y", "scalar", "float32"),
                              OutputBinding("v", "v", "vector", "float64")))
    valid = inference.valid_rows(batch, ["x"])
    assert valid.tolist() == [True, False, True]
    names, arrays = output_arrays(3, spec, {
        "valid": valid, "values": {"y": np.array([10.0, 30.0]),
                                   "v": np.array([[1.0, 2.0], [3.0, 4.0]])}})
    out = dict(zip(names, arrays))
    assert out["y"].to_pylist() == [10.0, None, 30.0]
    assert out["v"].to_pylist() == [[1.0, 2.0], None, [3.0, 4.0]]


def test_a_flat_column_is_reshaped_to_the_signature_input():
    binding = InputBinding("img", "image", (8, 8, 1), "float32")
    flat = pa.array([[0.0] * 64] * 5)
    assert inference.model_input(flat, binding).shape == (5, 8, 8, 1)
    with pytest.raises(ValueError, match="'img' has rows of shape \\(63,\\)"):
        inference.model_input(pa.array([[0.0] * 63] * 5), binding)


def test_sequences_are_padded_to_the_declared_length_and_a_longer_row_is_named():
    binding = InputBinding("tokens", "ids", (4,), "int64")
    out = inference.model_input(pa.array([[5, 6], [7], [1, 2, 3, 4]]), binding)
    assert out.tolist() == [[5, 6, 0, 0], [7, 0, 0, 0], [1, 2, 3, 4]] and out.dtype == np.int64
    with pytest.raises(ValueError, match="'tokens' has a row of length 5, longer than .* 4"):
        inference.model_input(pa.array([[1, 2, 3, 4, 5], [1]]), binding)


def test_strings_and_big_ids_reach_the_signature_unchanged():
    assert inference.model_input(pa.array(["a", "b"]), InputBinding(
        "city", "city", (1,), "string")).tolist() == [["a"], ["b"]]
    ids = inference.model_input(pa.array([4_000_000_003]), InputBinding("id", "id", (1,),
                                                                         "int64"))
    assert ids.tolist() == [[4_000_000_003]]


def test_environment_is_restored_exactly_after_the_block(monkeypatch):
    import os
    monkeypatch.setenv("SPARKTF_KEPT", "before")
    monkeypatch.delenv("SPARKTF_ADDED", raising=False)
    with inference.environment({"SPARKTF_KEPT": "inside", "SPARKTF_ADDED": "inside"}):
        assert os.environ["SPARKTF_KEPT"] == os.environ["SPARKTF_ADDED"] == "inside"
    assert os.environ["SPARKTF_KEPT"] == "before"
    assert "SPARKTF_ADDED" not in os.environ


def test_a_batch_whose_rows_are_all_null_calls_no_model_and_scores_null():
    # found by make fuzz: a partition holding only the null row of a nested-array input
    # failed ("zero-size array to reduction operation maximum") before reaching the model
    batch = pa.RecordBatch.from_pydict({"n": pa.array([None, [[1.0, 2.0], None]],
                                                      pa.list_(pa.list_(pa.float64())))})
    spec = ScoreSpec("m", "serving_default", 10, (InputBinding("n", "n", (2, 2), "float64"),),
                     outputs=(OutputBinding("y", "y", "vector", "float64"),))

    def no_model(**_):
        raise AssertionError("the model was called for a batch without a valid row")

    outputs = inference.run_model(no_model, spec, batch)
    assert outputs["valid"].tolist() == [False, False]
    names, arrays = output_arrays(2, spec, outputs)
    assert names == ["y"] and arrays[0].to_pylist() == [None, None]
    nested_empty = pa.array([], pa.list_(pa.list_(pa.float64())))
    from sparktf.runtime.feed import columns
    assert columns.chunk_values(nested_empty, "n").shape[0] == 0


def test_pandas_cells_become_what_spark_sends():
    """The MLflow pyfunc's input: ml Vectors, numpy arrays and lists, nulls kept as nulls."""
    pytest.importorskip("mlflow")
    import pandas as pd
    from pyspark.ml.linalg import Vectors

    from sparktf.ml import tracking
    from sparktf.runtime.feed import columns
    frame = pd.DataFrame({
        "v": [Vectors.dense([1.0, 2.0, 3.0]), Vectors.sparse(3, [1], [5.0]), None, [0, 0, 7]],
        "a": [np.array([1.0, 2.0]), [3.0, 4.0], None, np.array([5.0, 6.0])],
        "x": [1.0, 2.0, np.nan, 4.0], "s": ["p", "q", None, "r"]})
    batch = tracking.arrow_batch(frame)
    assert columns.is_vector_type(batch.column("v").type)
    valid = inference.valid_rows(batch, ["v", "a", "s"])
    assert valid.tolist() == [True, True, False, True]
    rows = batch.filter(pa.array(valid))
    np.testing.assert_array_equal(columns.vectors_to_matrix(rows.column("v"), "v"),
                                  [[1, 2, 3], [0, 5, 0], [0, 0, 7]])
    assert rows.column("a").to_pylist() == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    assert batch.column("x").null_count == 1


def _mean_and_running_sum():
    """A signature-like function of two open-length inputs: each row's mean of ``a`` plus
    the length of ``b`` (padding would change both), and a per-token output."""
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int64, name="a"),
                                  tf.TensorSpec([None, None], tf.float32, name="b")])
    def serve(a, b):
        mean = tf.reduce_mean(tf.cast(a, tf.float32), axis=1)
        return {"score": mean + tf.cast(tf.shape(b)[1], tf.float32),
                "running": tf.cumsum(tf.cast(a, tf.float32), axis=1)}

    return serve.get_concrete_function()


def test_rows_of_open_length_are_scored_at_their_own_length_in_row_order():
    """Issue 33: rows were padded to the batch's longest, so a row's score depended on it."""
    a = [[1, 2, 3], [4], None, [5, 6], [7], [8, 9, 10, 11]]
    b = [[0.5], [1.0, 2.0], [1.0], [3.0], [1.0, 1.0], [2.0]]
    batch = pa.RecordBatch.from_arrays([pa.array(a), pa.array(b, pa.list_(pa.float32()))],
                                       names=["a", "b"])
    spec = ScoreSpec("unused", "serving_default", 2,
                     (InputBinding("a", "a", (None,), "int64"),
                      InputBinding("b", "b", (None,), "float32")),
                     outputs=(OutputBinding("score", "score", "scalar", "float32"),
                              OutputBinding("running", "running", "vector", "float32")))
    outputs = inference.run_model(_mean_and_running_sum(), spec, batch)
    names, arrays = output_arrays(len(a), spec, outputs)
    scored = dict(zip(names, (x.to_pylist() for x in arrays)))
    assert scored["score"] == [None if x is None else pytest.approx(np.mean(x) + len(y))
                               for x, y in zip(a, b)]
    assert scored["running"] == [None if x is None else np.cumsum(x).tolist() for x in a]
    assert arrays[1].type == pa.list_(pa.float32())


def test_a_per_token_output_has_no_single_prediction():
    batch = pa.RecordBatch.from_arrays([pa.array([[1, 2], [3]]),
                                        pa.array([[1.0], [1.0]], pa.list_(pa.float32()))],
                                       names=["a", "b"])
    spec = ScoreSpec("unused", "serving_default", 8,
                     (InputBinding("a", "a", (None,), "int64"),
                      InputBinding("b", "b", (None,), "float32")),
                     prediction=PredictionColumns("running", "multiclass", False,
                                                            "prediction", None, None))
    outputs = inference.run_model(_mean_and_running_sum(), spec, batch)
    with pytest.raises(sparktf.InvalidInputError, match="outputMapping=.*'running'"):
        output_arrays(2, spec, outputs)


def test_pad_length_pads_open_lengths_and_refuses_a_longer_row():
    binding = InputBinding("seq", "ids", (None,), "int32")
    column = pa.array([[5, 6], [7], [1, 2, 3]])
    np.testing.assert_array_equal(inference.model_input(column, binding, pad_length=4),
                                  [[5, 6, 0, 0], [7, 0, 0, 0], [1, 2, 3, 0]])
    with pytest.raises(sparktf.InvalidInputError, match="'seq' has a row of length 3, longer "
                       "than padLength=2.*padLength >= 3"):
        inference.model_input(column, binding, pad_length=2)


def test_a_score_spec_pickled_under_its_old_module_still_loads():
    """MLflow pyfunc models logged before the runtime's rooms hold
    sparktf.runtime.inference.ScoreSpec (without padding or worker_tuning)."""
    import pickle

    pytest.importorskip("mlflow")  # the alias is the pyfunc's, which only MLflow loads
    import sparktf.ml.tracking  # noqa: F401 - what an MLflow load imports first
    spec = ScoreSpec("m", "serving_default", 8, (InputBinding("x", "x", (1,), "float32"),))
    old = pickle.dumps(spec, protocol=0).replace(b"sparktf.runtime.scoring.spec",
                                                  b"sparktf.runtime.inference")
    assert b"sparktf.runtime.inference" in old
    loaded = pickle.loads(old)
    assert loaded == spec
    for name in ("padding", "worker_tuning"):  # an old pickle's state has neither
        object.__delattr__(loaded, name)
    assert loaded.padding == () and loaded.worker_tuning is True


def test_the_mlflow_pyfunc_never_freezes_the_collector_of_the_process_it_serves_in(tmp_path):
    """Found by the review of issue 46: the pyfunc (a user's notebook, a serving process)
    went through the scoring workers' model cache, which gc.freeze()s after a load."""
    pytest.importorskip("mlflow")
    import gc

    import pandas as pd
    import tensorflow as tf

    from sparktf.ml import tracking

    class Doubled(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 1], tf.float32, name="x")])
        def serve(self, x):
            return {"y": 2 * x}

    module = Doubled()
    path = str(tmp_path / "doubled")
    tf.saved_model.save(module, path, signatures={"serving_default": module.serve})
    spec = ScoreSpec(path, "serving_default", 8, (InputBinding("x", "x", (1,), "float32"),),
                     outputs=(OutputBinding("y", "y", "scalar", "float32"),))
    gc.unfreeze()
    out = tracking.SparkTFPyfunc(spec).predict(None, pd.DataFrame({"x": [1.0, 2.5]}))
    assert out["y"].tolist() == [2.0, 5.0]
    assert gc.get_freeze_count() == 0
