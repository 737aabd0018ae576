"""Scoring an input of length None on a real local-cluster: a model that masks its padding
is padded (its fit found the mask and wrote it into the SavedModel), one that does not is
called by length over each partition; every row's score equals the row scored alone, and
the driver says once when the calls are many and small."""

import logging

import numpy as np

from sparktf.ml import TFEstimator, TFModel
from sparktf.runtime.scoring import padding, saved_models
from tests.integration import data


def masked_gru(hparams):
    import keras
    keras.utils.set_random_seed(0)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(40, 8, mask_zero=True)(tokens)
    model = keras.Model(tokens, keras.layers.Dense(1)(keras.layers.GRU(4)(x)))
    model.compile(optimizer="adam", loss="mse")
    return model


def backward_lstm(hparams):
    """Issue 53's model: Keras returns the backward sequence reversed under the input's
    mask, so the pooling averages padded steps."""
    import keras
    keras.utils.set_random_seed(0)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(40, 8, mask_zero=True)(tokens)
    x = keras.layers.LSTM(6, return_sequences=True, go_backwards=True)(x)
    x = keras.layers.GlobalAveragePooling1D()(x)
    model = keras.Model(tokens, keras.layers.Dense(1)(x))
    model.compile(optimizer="adam", loss="mse")
    return model


def _token_rows(n, longest, seed=0):
    rng = np.random.default_rng(seed)
    return [(i, rng.integers(1, 40, size=rng.integers(1, longest + 1)).tolist(),
             float(i % 5)) for i in range(n)]


def _alone(serve, rows, name="tokens"):
    import tensorflow as tf
    return [float(next(iter(serve(**{name: tf.constant([r], tf.int32)}).values()))[0, 0])
            for r in rows]


def _each_row_scores_as_alone(model, df, rows, what):
    """``transform`` over 1 and 3 partitions, batchSize 4096 and 7: every row's score is
    the SavedModel's on the row alone (1e-5)."""
    import tensorflow as tf

    serve = tf.saved_model.load(model.getModelPath()).signatures["serving_default"]
    alone = _alone(serve, [r[1] for r in rows])
    for partitions, batch_size in ((1, 4096), (3, 7)):
        scored = {r.id: r.prediction for r in model.setBatchSize(batch_size)
                  .transform(df.repartition(partitions)).collect()}
        gap = np.abs(np.array([scored[i] for i in range(len(rows))]) - alone).max()
        print(f"{what}, {partitions} partition(s), batchSize={batch_size}: "
              f"largest difference from the row alone {gap:.2e}")
        assert gap < 1e-5


def test_a_fitted_masked_model_is_padded_and_scores_each_row_as_alone(spark, caplog):

    rows = _token_rows(300, 40)
    df = data.frame(spark, rows, "id long, tokens array<int>, label double")
    model = TFEstimator(modelFn=masked_gru, inputCols=["tokens"], numWorkers=2, epochs=1,
                        batchSize=64, verbose=0).fit(df)
    assert saved_models.padding_values(model.getModelPath()) == {"tokens": 0}
    assert model._score_spec(df.schema).padding == (("tokens", 0),)
    with caplog.at_level(logging.WARNING, logger="sparktf"):
        _each_row_scores_as_alone(model, df, rows, "masked GRU")
    assert "model calls" not in caplog.text


def test_a_fitted_backward_rnn_is_not_said_masked_and_scores_each_row_as_alone(spark):

    rows = _token_rows(120, 30, seed=1)
    df = data.frame(spark, rows, "id long, tokens array<int>, label double")
    model = TFEstimator(modelFn=backward_lstm, inputCols=["tokens"], numWorkers=2, epochs=1,
                        batchSize=32, verbose=0).fit(df)
    assert saved_models.padding_values(model.getModelPath()) == {}
    _each_row_scores_as_alone(model, df, rows, "backward LSTM")


def test_an_unmasked_model_is_called_by_length_and_the_driver_says_padLength_once(
        spark, tmp_path, caplog):
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    pooled = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(40, 4)(tokens))
    keras_model = keras.Model(tokens, keras.layers.Dense(1)(pooled))
    path = str(tmp_path / "unmasked")
    keras_model.export(path, verbose=False)
    assert saved_models.padding_values(path) == {} and padding.masked_inputs(keras_model) == {}
    rows = _token_rows(600, 150, seed=1)
    df = data.frame(spark, rows, "id long, tokens array<int>, label double")
    serve = tf.saved_model.load(path).signatures["serving_default"]
    alone = _alone(serve, [r[1] for r in rows])
    model = TFModel(modelPath=path, inputMapping={"tokens": "tokens"}, batchSize=64)
    with caplog.at_level(logging.WARNING, logger="sparktf"):
        scored = {r.id: r.prediction for r in model.transform(df.repartition(2)).collect()}
    np.testing.assert_allclose([scored[i] for i in range(len(rows))], alone, rtol=0,
                               atol=1e-6)
    told = [r.getMessage() for r in caplog.records if "model calls" in r.getMessage()]
    print(told)
    assert len(told) == 1
    longest = max(len(r[1]) for r in rows)
    assert "'tokens'" in told[0] and f"padLength={longest}" in told[0]
