"""A Keras model the user already has (``TFModel.from_keras``): everything a fitted model
has. Keras is the oracle: every row scores as ``model.predict`` scores it alone."""

import numpy as np
import pytest

from sparktf import InvalidInputError
from sparktf.ml import TFModel
from sparktf.runtime.scoring import saved_models
from tests.integration import data

pytestmark = pytest.mark.timeout(600)


def _masked_gru():
    """A masked GRU classifier trained by Keras alone, on sequences of 1 to 40 tokens."""
    import keras

    keras.utils.set_random_seed(4)
    rng = np.random.default_rng(4)
    lengths = rng.integers(1, 41, 256)
    x = np.zeros((256, 40), np.int32)
    for i, n in enumerate(lengths):
        x[i, :n] = rng.integers(1, 50, n)
    y = (lengths > 20).astype(np.int32)
    model = keras.Sequential([keras.Input((None,), dtype="int32"),
                              keras.layers.Embedding(50, 8, mask_zero=True),
                              keras.layers.GRU(8), keras.layers.Dense(2, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy")
    model.fit(x, y, epochs=1, batch_size=64, verbose=0)
    rows = [[int(t) for t in row[:n]] for row, n in zip(x[:40], lengths[:40])]
    return model, rows


def _alone(model, rows):
    return np.stack([np.asarray(model(np.array([r], np.int32), training=False))[0]
                     for r in rows])


def test_a_masked_gru_from_a_keras_file_scores_each_row_as_alone_unpadded(spark, tmp_path):
    model, rows = _masked_gru()
    model.save(tmp_path / "gru.keras")
    scorer = TFModel.from_keras(str(tmp_path / "gru.keras"), str(tmp_path / "gru"),
                                featuresCol="tokens", batchSize=16)
    # the padding analysis ran: the input is masked, so rows are padded to a batch's longest
    assert list(saved_models.padding_values(scorer.getModelPath()).values()) == [0]
    assert scorer.getPredictionKind() == "multiclass"
    # checkpointed: the order of a partition's rows after a shuffle is the order its blocks
    # were fetched in, and a row's place in its call changes its last bit (the loaded
    # model below is held to the same bits, on the same partitions)
    df = data.frame(spark, [(i, r) for i, r in enumerate(rows)],
                    "id int, tokens array<int>").repartition(3).localCheckpoint()
    scored = scorer.transform(df).orderBy("id").toPandas()
    expected = _alone(model, rows)
    got = np.stack(scored["probability"].map(lambda v: v.toArray()))
    print(f"\nlargest difference from each row alone: {np.abs(got - expected).max():.3g}")
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert scored["prediction"].tolist() == expected.argmax(1).tolist()

    # saved and loaded, and the Keras model back, as a fitted model's
    scorer.write().save(str(tmp_path / "stage"))
    loaded = TFModel.load(str(tmp_path / "stage"))
    again = np.stack(loaded.transform(df).orderBy("id").toPandas()["probability"]
                     .map(lambda v: v.toArray()))
    np.testing.assert_array_equal(again, got)
    for a, b in zip(loaded.getKerasModel().get_weights(), model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_model_in_memory_with_two_named_inputs_binds_them_by_column(spark, tmp_path):
    import keras

    keras.utils.set_random_seed(1)
    a, b = keras.Input((2,), name="a"), keras.Input((1,), name="b")
    model = keras.Model([a, b], keras.layers.Dense(1)(keras.layers.Concatenate()([a, b])))
    model.compile("adam", "mse")
    scorer = TFModel.from_keras(model, str(tmp_path / "two"),
                                inputMapping={"left": "a", "right": "b"})
    assert scorer.getPredictionKind() == "regression"
    rows = [([0.5, -1.0], [2.0]), ([1.5, 0.0], [-1.0])]
    df = data.frame(spark, rows, "left array<double>, right array<double>")
    got = scorer.transform(df).toPandas()["prediction"].to_numpy()
    expected = model.predict([np.array([r[0] for r in rows]), np.array([r[1] for r in rows])],
                             verbose=0)[:, 0]
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_a_classifier_scores_null_rows_and_rows_holding_a_null_as_null(spark, tmp_path):
    """Found by review: a null row made Spark's conversion of the probability failed."""
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy")
    scorer = TFModel.from_keras(model, tmp_path / "classifier")  # a Path is a path too
    df = data.frame(spark, [(0, None), (1, [1.0, None, 3.0]), (2, [1.0, 2.0, 3.0])],
                    "id int, features array<double>")
    rows = scorer.transform(df).orderBy("id").collect()
    assert [(r.prediction, r.probability, r.rawPrediction) for r in rows[:2]] == \
        [(None, None, None)] * 2
    np.testing.assert_allclose(rows[2].probability.toArray(),
                               model.predict(np.array([[1.0, 2.0, 3.0]]), verbose=0)[0],
                               rtol=1e-6)


def test_what_from_keras_cannot_take_is_refused_saying_what_to_give(tmp_path):
    import keras

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    with pytest.raises(InvalidInputError, match="path of a '.keras' file that exists"):
        TFModel.from_keras(str(tmp_path / "missing.keras"), str(tmp_path / "out"))
    with pytest.raises(InvalidInputError, match="takes a Keras model"):
        TFModel.from_keras(object(), str(tmp_path / "out"))
    with pytest.raises(InvalidInputError, match=r"no Params \['featureCol'\]"):
        TFModel.from_keras(model, str(tmp_path / "out"), featureCol="x")
    with pytest.raises(InvalidInputError, match="give no modelPath of your own"):
        TFModel.from_keras(model, str(tmp_path / "out"), modelPath="/elsewhere")
    tf_keras = pytest.importorskip("tf_keras")
    old = tf_keras.Sequential([tf_keras.Input((3,)), tf_keras.layers.Dense(1)])
    with pytest.raises(InvalidInputError, match="tf_keras's .*model.export"):
        TFModel.from_keras(old, str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()
    (tmp_path / "taken").mkdir()
    with pytest.raises(InvalidInputError, match="exists: give a path that does not exist"):
        TFModel.from_keras(model, str(tmp_path / "taken"))
