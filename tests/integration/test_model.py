"""TFModel.transform and SQL scoring on a real local-cluster Spark."""

import numpy as np
import pytest
from pyspark.ml.evaluation import RegressionEvaluator
from pyspark.sql import types as T

import sparktf
from sparktf.ml import TFEstimator, TFModel
from tests.integration import data, models

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory):
    """SavedModels written by plain TensorFlow (no Keras, no sparktf)."""
    import tensorflow as tf

    root = tmp_path_factory.mktemp("savedmodels")

    class Affine(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def serve(self, x):
            return {"y": tf.reduce_sum(x, axis=1) * 2.0 + 1.0}

    class TwoOutputs(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def serve(self, x):
            return {"total": tf.reduce_sum(x, axis=1), "doubled": x * 2.0}

    class Image(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 8, 8, 1], tf.float32,
                                                    name="image")])
        def serve(self, image):
            weights = tf.reshape(tf.range(64, dtype=tf.float32), [1, 8, 8, 1])
            return {"score": tf.reduce_sum(image * weights, axis=[1, 2, 3])}

    paths = {}
    for name, module in {"affine": Affine(), "two": TwoOutputs(), "image": Image()}.items():
        paths[name] = str(root / name)
        tf.saved_model.save(module, paths[name], signatures={"serving_default": module.serve})
    return paths


@pytest.fixture(scope="module")
def sequence_model(tmp_path_factory):
    """A Keras model on token ids of any length, unmasked: padding would change its output."""
    import keras

    keras.utils.set_random_seed(0)
    ids = keras.Input((None,), dtype="int32", name="ids")
    pooled = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(50, 4)(ids))
    model = keras.Model(ids, keras.layers.Dense(1)(pooled))
    path = str(tmp_path_factory.mktemp("sequence") / "model")
    model.export(path, verbose=False)
    return model, path


def _sequences(spark, n=40, seed=1):
    rng = np.random.default_rng(seed)
    seqs = [rng.integers(1, 50, size=rng.integers(1, 12)).tolist() for _ in range(n)]
    return data.frame(spark, list(enumerate(seqs)), "id long, ids array<int>"), seqs


def _vectors(spark, n=1000, partitions=10):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 3)).astype("float32")
    df = data.frame(spark, [(i, x.tolist()) for i, x in enumerate(X)],
                    "id long, x array<float>")
    return df.repartition(partitions), X


def test_plain_tensorflow_savedmodel_scores_every_row_and_keeps_columns(spark, saved_models):
    df, X = _vectors(spark)
    model = TFModel(modelPath=saved_models["affine"], inputMapping={"x": "x"},
                    outputMapping={"y": "y"}, batchSize=64)
    scored = model.transform(df)
    assert scored.schema["y"].dataType == T.FloatType()
    assert scored.columns == ["id", "x", "y"]
    rows = scored.orderBy("id").collect()
    assert len(rows) == 1000
    expected = X.sum(axis=1) * 2 + 1
    np.testing.assert_allclose([r.y for r in rows], expected, rtol=1e-5)
    np.testing.assert_allclose([r.x for r in rows], X)  # inputs unchanged, rows aligned


def test_two_outputs_map_to_two_columns(spark, saved_models):
    df, X = _vectors(spark, 200, 3)
    model = TFModel(modelPath=saved_models["two"], inputMapping={"x": "x"},
                    outputMapping={"total": "total", "doubled": "doubled"})
    scored = model.transform(df)
    assert scored.schema["doubled"].dataType == T.ArrayType(T.FloatType())
    rows = scored.orderBy("id").collect()
    np.testing.assert_allclose([r.total for r in rows], X.sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose([r.doubled for r in rows], X * 2, rtol=1e-6)


def test_several_outputs_get_default_columns_named_after_them(spark, saved_models):
    df, X = _vectors(spark, 50, 2)
    scored = TFModel(modelPath=saved_models["two"], featuresCol="x",
                     predictionCol="hat").transform(df)
    assert scored.columns == ["id", "x", "doubled_hat", "total_hat"]
    rows = scored.orderBy("id").collect()
    np.testing.assert_allclose([r.total_hat for r in rows], X.sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose([r.doubled_hat for r in rows], X * 2, rtol=1e-6)


def test_flat_arrays_are_reshaped_to_the_signature_shape(spark, saved_models):
    rng = np.random.default_rng(1)
    images = rng.random((50, 64)).astype("float32")
    df = data.frame(spark, [(i, im.tolist()) for i, im in enumerate(images)],
                    "id long, pixels array<float>")
    model = TFModel(modelPath=saved_models["image"], inputMapping={"pixels": "image"},
                    outputMapping={"score": "score"})
    rows = model.transform(df).orderBy("id").collect()
    np.testing.assert_allclose([r.score for r in rows], images @ np.arange(64), rtol=1e-4)


def test_sql_scoring_matches_transform(spark, saved_models):
    df, _ = _vectors(spark, 300, 4)
    model = TFModel(modelPath=saved_models["affine"], inputMapping={"x": "x"},
                    outputMapping={"y": "y"})
    spark.udf.register("tf_predict", model.udf())
    df.createOrReplaceTempView("points")
    by_sql = {r.id: r.p for r in spark.sql("SELECT id, tf_predict(x) AS p FROM points")
              .collect()}
    by_transform = {r.id: r.y for r in model.transform(df).collect()}
    assert by_sql.keys() == by_transform.keys()
    np.testing.assert_allclose([by_sql[k] for k in sorted(by_sql)],
                               [by_transform[k] for k in sorted(by_sql)], rtol=1e-6)
    column_api = df.select("id", model.udf()("x").alias("p")).collect()
    assert {r.id: r.p for r in column_api} == pytest.approx(by_sql)


def test_fitted_model_scores_vectors_in_sql_and_with_evaluators(spark):
    from pyspark.ml.functions import array_to_vector
    X, y = data.linear_rows(600)
    df = data.frame(spark, data.rows(X, y), "x array<double>, label double") \
        .withColumn("features", array_to_vector("x"))
    model = TFEstimator(modelFn=models.linear, numWorkers=2, epochs=2, batchSize=32,
                        learningRate=0.05).fit(df)
    scored = model.transform(df)
    assert scored.schema["prediction"].dataType == T.DoubleType()
    assert "probability" not in scored.columns  # a regression model
    pairs = scored.select("label", "prediction").toPandas()
    rmse = float(np.sqrt(np.mean((pairs["label"] - pairs["prediction"]) ** 2)))
    assert RegressionEvaluator(metricName="rmse").evaluate(scored) == pytest.approx(rmse)
    spark.udf.register("tf_regress", model.udf())
    df.createOrReplaceTempView("lin")
    sql = spark.sql("SELECT tf_regress(features) AS p, label FROM lin").toPandas()
    by_label = dict(zip(pairs["label"], pairs["prediction"]))
    np.testing.assert_allclose(sql["p"], [by_label[v] for v in sql["label"]], rtol=1e-6)


def test_empty_dataframe_and_empty_partitions(spark, saved_models):
    model = TFModel(modelPath=saved_models["affine"], inputMapping={"x": "x"},
                    outputMapping={"y": "y"})
    empty = spark.createDataFrame([], "id long, x array<float>")
    out = model.transform(empty)
    assert out.columns == ["id", "x", "y"] and out.count() == 0
    df, _ = _vectors(spark, 3, 1)
    sparse_parts = df.repartition(8)  # most partitions empty
    assert sparse_parts.rdd.glom().map(len).collect().count(0) >= 5
    assert model.transform(sparse_parts).count() == 3


def test_null_inputs_keep_their_row_with_null_outputs(spark, saved_models):
    df = data.frame(spark, [(1, [1.0, 1.0, 1.0]), (2, None), (3, [0.0, 0.0, 0.0])],
                    "id long, x array<float>")
    model = TFModel(modelPath=saved_models["affine"], inputMapping={"x": "x"},
                    outputMapping={"y": "y"})
    rows = {r.id: r.y for r in model.transform(df).collect()}
    assert rows == {1: pytest.approx(7.0), 2: None, 3: pytest.approx(1.0)}


def test_a_null_element_inside_an_array_gives_that_row_null_outputs(spark, saved_models):
    """Issue 32: a null inside an array failed the whole job (transform and udf())."""
    df = data.frame(spark, [(1, [1.0, 1.0, 1.0]), (2, [1.0, None, 1.0]), (3, None),
                     (4, [0.0, 0.0, 0.0])], "id long, x array<float>")
    model = TFModel(modelPath=saved_models["affine"], inputMapping={"x": "x"},
                    outputMapping={"y": "y"})
    expected = {1: pytest.approx(7.0), 2: None, 3: None, 4: pytest.approx(1.0)}
    assert {r.id: r.y for r in model.transform(df).collect()} == expected
    scored = df.select("id", model.udf()("x").alias("y")).collect()
    assert {r.id: r.y for r in scored} == expected


def test_bad_mappings_and_paths_fail_on_the_driver(spark, saved_models, tmp_path):
    df, _ = _vectors(spark, 10, 1)
    with pytest.raises(sparktf.InvalidInputError, match=r"signature's inputs are \['x'\]"):
        TFModel(modelPath=saved_models["affine"], inputMapping={"x": "nope"},
                outputMapping={"y": "y"}).transform(df)
    with pytest.raises(sparktf.InvalidInputError, match=r"outputs are \['y'\]"):
        TFModel(modelPath=saved_models["affine"], inputMapping={"x": "x"},
                outputMapping={"z": "z"}).transform(df)
    with pytest.raises(sparktf.InvalidInputError, match="No SavedModel at modelPath"):
        TFModel(modelPath=str(tmp_path / "missing")).transform(df)
    with pytest.raises(sparktf.InvalidInputError, match="'x' is not in the DataFrame"):
        TFModel(modelPath=saved_models["affine"], inputMapping={"x": "x"},
                outputMapping={"y": "y"}).transform(df.drop("x"))


def _affine_savedmodel(path, scale):
    """A SavedModel with a variable: y = scale * sum(x)."""
    import tensorflow as tf

    class Scaled(tf.Module):
        def __init__(self):
            super().__init__()
            self.scale = tf.Variable(scale, dtype=tf.float32)

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def serve(self, x):
            return {"y": tf.reduce_sum(x, axis=1) * self.scale}

    module = Scaled()
    tf.saved_model.save(module, path, signatures={"serving_default": module.serve})


def test_a_model_saved_again_at_the_same_path_scores_with_its_new_weights(spark, tmp_path):
    """Python workers that loaded the old model must not keep scoring with it."""
    path = str(tmp_path / "scaled")
    df, X = _vectors(spark, n=200, partitions=4)
    for scale in (1.0, -3.0, 5.0):
        _affine_savedmodel(path, scale)
        model = TFModel(modelPath=path, inputMapping={"x": "x"}, outputMapping={"y": "y"})
        for scored in (model.transform(df), df.select("id", model.udf()("x").alias("y"))):
            rows = scored.orderBy("id").collect()
            np.testing.assert_allclose([r.y for r in rows], X.sum(axis=1) * scale, rtol=1e-5)


def test_the_signature_is_read_without_loading_the_model_and_leaves_nothing(spark, tmp_path):
    import glob
    import os
    import shutil
    import tempfile
    path = str(tmp_path / "scaled")
    _affine_savedmodel(path, 2.0)
    shutil.rmtree(os.path.join(path, "variables"))  # a full load would fail
    pattern = os.path.join(tempfile.gettempdir(), "sparktf-model-*")
    before = set(glob.glob(pattern))
    df, _ = _vectors(spark, n=10, partitions=1)
    model = TFModel(modelPath=path, inputMapping={"x": "x"}, outputMapping={"y": "y"})
    for _ in range(3):
        assert model.transform(df).columns == ["id", "x", "y"]
        model.udf()
    assert set(glob.glob(pattern)) == before


def test_a_row_of_any_length_scores_as_alone_whatever_its_neighbours(spark, sequence_model):
    """Issue 33: an input of length None was padded to each batch's longest row, so a row's
    prediction depended on the partitioning and batchSize (0.01-0.03 apart)."""
    import keras

    keras_model, path = sequence_model
    df, seqs = _sequences(spark)
    alone = [float(keras_model(np.array([s], dtype="int32"))[0, 0]) for s in seqs]
    for partitions, batch_size in ((1, 4096), (4, 3)):
        frame = df.repartition(partitions)
        model = TFModel(modelPath=path, inputMapping={"ids": "ids"}, batchSize=batch_size)
        by_transform = {r.id: r.prediction for r in model.transform(frame).collect()}
        by_udf = {r.id: r.p for r in frame.select("id", model.udf()("ids").alias("p")).collect()}
        for scored in (by_transform, by_udf):
            assert sorted(scored) == list(range(len(seqs)))
            np.testing.assert_allclose([scored[i] for i in range(len(seqs))], alone,
                                       rtol=0, atol=1e-6)
    # padLength: every row padded to 12 (one call per batch), as pad_sequences pads it alone
    padded = keras.utils.pad_sequences(seqs, maxlen=12, padding="post", value=0)
    alone_padded = [float(keras_model(padded[i:i + 1])[0, 0]) for i in range(len(seqs))]
    for partitions, batch_size in ((1, 4096), (4, 3)):
        model = TFModel(modelPath=path, inputMapping={"ids": "ids"}, batchSize=batch_size,
                        padLength=12)
        scored = {r.id: r.prediction for r in model.transform(df.repartition(partitions))
                  .collect()}
        np.testing.assert_allclose([scored[i] for i in range(len(seqs))], alone_padded,
                                   rtol=0, atol=1e-6)


class Doubled(__import__("keras").layers.Layer):
    """A custom layer that is not registered with Keras: only the fit's modelFn knows it."""

    def call(self, x):
        return 2 * x


def _custom_layer_model(hp):
    import keras
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1), Doubled()])
    model.compile(keras.optimizers.SGD(0.01), "mse")
    return model


def test_get_keras_model_gives_the_trained_model_and_a_bare_savedmodel_has_none(
        spark, saved_models):
    X, y = data.linear_rows(40)
    df = data.frame(spark, data.rows(X, y), "features array<double>, label double")
    model = TFEstimator(modelFn=_custom_layer_model, numWorkers=2, epochs=1,
                        batchSize=40).fit(df)
    keras_model = model.getKerasModel()  # Keras cannot load Doubled; the modelFn builds it
    assert isinstance(keras_model.layers[-1], Doubled)
    scored = model.transform(df).select("features", "prediction").collect()
    np.testing.assert_allclose(
        keras_model.predict(np.array([r.features for r in scored]), verbose=0)[:, 0],
        [r.prediction for r in scored], rtol=1e-5, atol=1e-6)
    with pytest.raises(sparktf.InvalidInputError, match="only a model that TFEstimator.fit"):
        TFModel(modelPath=saved_models["affine"]).getKerasModel()


def test_a_per_token_output_as_the_prediction_is_refused_whatever_the_rows(spark, tmp_path):
    """An output whose length follows the row's has no prediction per row: refused on the
    driver from the signature, even for rows that all have one length (found by review:
    a one-row frame was scored as a 2-class classifier)."""
    import keras
    keras.utils.set_random_seed(0)
    tokens = keras.Input((None,), dtype="int32")
    per_token = keras.layers.Dense(1)(keras.layers.Embedding(20, 4)(tokens))
    keras.Model(tokens, per_token).export(str(tmp_path / "m"), verbose=False)
    df = data.frame(spark, [(0, [1, 2])], "id long, tokens array<int>")
    model = TFModel(modelPath=str(tmp_path / "m"), featuresCol="tokens")
    with pytest.raises(sparktf.InvalidInputError, match="per-token output"):
        model.transform(df)
    mapped = model.setOutputMapping({"output_0": "per_token"}).transform(df).collect()
    assert len(mapped[0]["per_token"]) == 2  # one value per token


def _embedding_gru(hp):
    """Embedding (no mask_zero: padding changes the output) and a GRU, as a functional
    model on Input((None,)), a Sequential without Input or a subclassed model: the last
    two declare no input shape."""
    import keras
    keras.utils.set_random_seed(0)
    layers = [keras.layers.Embedding(10, 4), keras.layers.GRU(3), keras.layers.Dense(1)]
    if hp["form"] == "functional":
        ids = keras.Input((None,), dtype="int32")
        model = keras.Model(ids, layers[2](layers[1](layers[0](ids))))
    elif hp["form"] == "sequential":
        model = keras.Sequential(layers)
    else:
        class Recurrent(keras.Model):
            def __init__(self):
                super().__init__()
                self.stack = layers

            def call(self, ids):
                for layer in self.stack:
                    ids = layer(ids)
                return ids

        model = Recurrent()
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    return model


@pytest.mark.parametrize("form", ["functional", "sequential", "subclassed"])
def test_an_rnn_on_an_input_of_length_none_trains_as_keras_and_scores_each_row_alone(
        spark, form):
    """Found by review: the model was built from zero rows of width 0, so a GRU on an
    input of length None could not be fitted ("slice index 0 of dimension 1 out of
    bounds"), nor (second review) on a model that declares no input, and a subclassed
    pooling model was exported for rows of length 0. Every batch of 8 holds a row of the
    longest length, so padding each batch to its longest row is Keras's fit on the whole
    frame padded once."""
    import keras
    seqs = [[1, 2, 3], [4], [5, 6, 7, 8, 9, 1, 2], [3, 3]] * 10
    labels = np.array([len(s) for s in seqs], np.float32)
    df = data.frame(spark, [(s, float(y)) for s, y in zip(seqs, labels)],
                    "features array<int>, label double").coalesce(1)
    model = TFEstimator(modelFn=_embedding_gru, numWorkers=1, epochs=2, batchSize=8,
                        shuffle=False, verbose=0, hyperParams={"form": form}).fit(df)
    oracle = _embedding_gru({"form": form})
    expected = oracle.fit(keras.utils.pad_sequences(seqs, padding="post"), labels,
                          batch_size=8, epochs=2, shuffle=False, verbose=0).history["loss"]
    print("sparktf", model.getHistory()["loss"], "keras", expected)
    np.testing.assert_allclose(model.getHistory()["loss"], expected, rtol=1e-5)
    if form == "subclassed":  # typed as the column, not as Keras's float32 default
        from sparktf.runtime.scoring import saved_models
        assert list(saved_models.describe(model.getModelPath(), "serving_default")[0].values()) \
            == [((None,), "int32")]
    scored = model.transform(df.limit(4)).collect()
    alone = [oracle.predict(np.array([r.features]), verbose=0)[0, 0] for r in scored]
    np.testing.assert_allclose([r.prediction for r in scored], alone, rtol=1e-5, atol=1e-6)


def test_nested_arrays_holding_the_inputs_size_score_as_in_fit_and_udf(spark, saved_models):
    """Found by review: fit and udf() reshape [[x1, x2, x3]] to an input (3,), as the
    README says, but transform refused the same frame on the driver ("nest 2 deep")."""
    from pyspark.sql import functions as F
    rng = np.random.default_rng(2)
    X = rng.normal(size=(20, 3))
    df = data.frame(spark, [(i, [x.tolist()]) for i, x in enumerate(X)],
                    "id long, x array<array<double>>")
    model = TFModel(modelPath=saved_models["affine"], featuresCol="x", predictionCol="y")
    rows = model.transform(df).orderBy("id").collect()
    np.testing.assert_allclose([r.y for r in rows], X.sum(axis=1) * 2 + 1, rtol=1e-5)
    udf_rows = df.select("id", model.udf()(F.col("x")).alias("y")).orderBy("id").collect()
    assert [r.y for r in udf_rows] == [r.y for r in rows]
    short = spark.createDataFrame([(0, [[1.0, 2.0]])], "id long, x array<array<double>>")
    with pytest.raises(Exception, match=r"Column 'x' has rows of shape \(1, 2\)"):
        model.transform(short).collect()


def _tagger(hp):
    import keras
    keras.utils.set_random_seed(0)
    ids = keras.Input((None,), dtype="int32")
    per_token = keras.layers.GRU(3, return_sequences=True)(keras.layers.Embedding(10, 4)(ids))
    model = keras.Model(ids, keras.layers.Dense(5)(per_token))
    model.compile(optimizer=keras.optimizers.SGD(0.05),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def test_per_token_labels_of_varying_length_train_as_keras(spark):
    """Found by the second review: a label whose length varies crashed every fit before
    the first step ('Padded' object has no attribute 'ndim' in the class-label check).
    Each batch of 4 holds the longest row, so per-batch padding is Keras's on the whole."""
    import keras
    seqs = [[1, 2, 3], [4], [5, 6, 7, 8, 9, 1, 2], [3, 3]] * 4
    tags = [[t % 5 for t in s] for s in seqs]
    df = data.frame(spark, list(zip(seqs, tags)),
                    "features array<int>, label array<int>").coalesce(1)
    model = TFEstimator(modelFn=_tagger, numWorkers=1, epochs=2, batchSize=4, shuffle=False,
                        verbose=0).fit(df)
    expected = _tagger({}).fit(
        keras.utils.pad_sequences(seqs, padding="post"),
        keras.utils.pad_sequences(tags, padding="post"), batch_size=4, epochs=2,
        shuffle=False, verbose=0).history["loss"]
    print("sparktf", model.getHistory()["loss"], "keras", expected)
    np.testing.assert_allclose(model.getHistory()["loss"], expected, rtol=1e-5)


def _subclassed_words(hp):
    import keras
    keras.utils.set_random_seed(0)

    class Words(keras.Model):
        def __init__(self):
            super().__init__()
            self.lookup = keras.layers.StringLookup(vocabulary=["a", "b", "c"])
            self.embed = keras.layers.Embedding(5, 4)
            self.pool = keras.layers.GlobalAveragePooling1D()
            self.out = keras.layers.Dense(1)

        def call(self, words):
            return self.out(self.pool(self.embed(self.lookup(words))))

    model = Words()
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    return model


def test_a_subclassed_model_on_words_of_any_length_scores_them(spark):
    """Found by the second review: a model that declares no input was exported with
    Keras's float32 input, so a subclassed model over words trained and then could not
    score ("cannot feed input 'args_0' declares dtype float32")."""
    words = [["a", "b"], ["c"], ["a", "a", "b", "c"], ["b"]] * 4
    df = data.frame(spark, [(w, float(len(w))) for w in words],
                    "features array<string>, label double").coalesce(1)
    model = TFEstimator(modelFn=_subclassed_words, numWorkers=1, epochs=1, batchSize=4,
                        verbose=0).fit(df)
    import tensorflow as tf
    serve = tf.saved_model.load(model.getModelPath()).signatures["serving_default"]
    scored = model.transform(df.limit(4)).collect()
    alone = [float(next(iter(serve(tf.constant([r.features])).values()))[0, 0])
             for r in scored]
    np.testing.assert_allclose([r.prediction for r in scored], alone, rtol=1e-5, atol=1e-6)


def _which_input(hp):
    """A subclassed model of 11 inputs that predicts the index of the input holding 1."""
    import keras

    class WhichInput(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(1, kernel_initializer="zeros", use_bias=False)

        def call(self, inputs):
            index = sum(keras.ops.cast(x, "float32") * float(i) for i, x in enumerate(inputs))
            index = keras.ops.reshape(index, (-1, 1))
            return index + 0.0 * self.dense(index)

    model = WhichInput()
    model.compile(optimizer="sgd", loss="mse")
    return model


def test_a_subclassed_model_of_eleven_inputs_is_fed_each_column_in_its_place(spark):
    """Found by the third review: a model that declares no inputs was exported with
    TensorFlow's names args_0, args_0_1, ..., args_0_10, bound to the columns in text
    order (args_0_10 third), so columns fed the wrong inputs, silently."""
    columns = [f"c{i}" for i in range(11)]
    rows = [tuple(int(j == i % 11) for j in range(11)) + (float(i % 11),) for i in range(22)]
    df = data.frame(spark, rows, ", ".join(f"{c} int" for c in columns) +
                    ", label double").coalesce(1)
    model = TFEstimator(modelFn=_which_input, inputCols=columns, numWorkers=1, epochs=1,
                        batchSize=4, verbose=0).fit(df)
    assert model.getInputMapping() == {c: c for c in columns}
    scored = model.transform(df).collect()
    assert [r.prediction for r in scored] == [r.label for r in scored]
