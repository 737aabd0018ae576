"""Column names Spark would otherwise parse (dots, spaces, backticks, non-ASCII letters)
through fit, transform, udf(), SQL, a streaming query and preprocessing.adapt.

Spark reads ``row.id`` as the field ``id`` of a struct ``row``: every column sparktf
addresses by name must be quoted. One small fit (2 workers, 1 epoch) with all these names
at once; every score is compared with Keras's ``predict`` of the exported model on the
same rows. The model's inputs are named after their columns and fed by name, so a
SavedModel signature must take a name it cannot hold as it is (``größe``, spaces).
"""


import numpy as np
import pytest
from pyspark.sql import functions as F

from sparktf.ml import TFEstimator, TFModel
from sparktf.ml import preprocessing as pp
from tests.integration import data

pytestmark = pytest.mark.timeout(600)

ROW_ID = "row.id"      # unrelated: kept through transform
FEATURES = "f.x"       # array<float>, input "fx"
CITY = "my.stadt größe"  # string; the inputs are named after their columns
LABEL = "my label"
WEIGHT = "größe"
HELD_OUT = "held`out"  # validationCol
PREDICTION = "pred.y"
OTHER_PREDICTION = "p`red größe.z"
CITIES = ["north", "south", "east"]
ROWS = 24


def quoted(name):
    return "`" + name.replace("`", "``") + "`"


def build(hp):
    import keras
    keras.utils.set_random_seed(0)
    fx = keras.Input((2,), name=FEATURES)
    city = keras.Input((1,), dtype="string", name=CITY)
    one_hot = keras.layers.StringLookup(vocabulary=CITIES, output_mode="one_hot")(city)
    out = keras.layers.Dense(1)(keras.layers.Concatenate()([fx, one_hot]))
    model = keras.Model([fx, city], out)
    model.compile(keras.optimizers.SGD(hp["learningRate"]), loss="mse")
    return model


def _rows():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(ROWS, 2)).astype(np.float32)
    cities = [CITIES[i % 3] for i in range(ROWS)]
    label = x.sum(axis=1) + np.array([CITIES.index(c) for c in cities])
    return [(i, x[i].tolist(), cities[i], float(label[i]), 1.0 + (i % 2), i % 4 == 0)
            for i in range(ROWS)]


@pytest.fixture(scope="module")
def frame(spark):
    schema = (f"{quoted(ROW_ID)} bigint, {quoted(FEATURES)} array<float>, "
              f"{quoted(CITY)} string, {quoted(LABEL)} double, {quoted(WEIGHT)} double, "
              f"{quoted(HELD_OUT)} boolean")
    return data.frame(spark, _rows(), schema).repartition(2)


@pytest.fixture(scope="module")
def fitted(frame):
    # by name, in another order than the model's
    return TFEstimator(modelFn=build, inputCols=[CITY, FEATURES], labelCol=LABEL,
                       weightCol=WEIGHT, validationCol=HELD_OUT, predictionCol=PREDICTION,
                       numWorkers=2, epochs=1, batchSize=8, learningRate=0.05,
                       verbose=0).fit(frame)


@pytest.fixture(scope="module")
def expected(fitted):
    """Keras's predict of the exported model on every row, by row id."""
    import tensorflow as tf

    rows = _rows()
    predicted = np.asarray(fitted.getKerasModel()(
        [tf.constant([r[1] for r in rows], tf.float32), tf.constant([[r[2]] for r in rows])]
    )).reshape(-1)
    return {r[0]: float(p) for r, p in zip(rows, predicted)}


def _by_id(rows, column):
    return {r[ROW_ID]: r[column] for r in rows}


def _assert_scores(scored: dict, expected: dict):
    assert sorted(scored) == sorted(expected)
    np.testing.assert_allclose([scored[k] for k in sorted(expected)],
                               [expected[k] for k in sorted(expected)], rtol=1e-5, atol=1e-6)


def test_fit_trains_on_the_named_columns_and_transform_keeps_every_column(frame, fitted,
                                                                          expected):
    assert fitted.getHistory()["val_loss"], fitted.getHistory()
    scored = fitted.transform(frame)
    assert scored.columns == [*frame.columns, PREDICTION]
    rows = scored.collect()
    assert [r[c] for r in sorted(rows, key=lambda r: r[ROW_ID]) for c in frame.columns] == \
        [v for row in _rows() for v in row]
    _assert_scores(_by_id(rows, PREDICTION), expected)


def test_input_mapping_takes_such_names_for_a_string_input(frame, fitted, expected):
    """Found by review: an input named größe trained, then failed at export (TensorFlow's
    signature cannot hold the name); the signature names it in ASCII, and the fitted
    model's inputMapping says which column feeds it."""
    mapping = fitted.getInputMapping()
    print(mapping)
    assert mapping[FEATURES] == FEATURES and mapping[CITY].isascii(), mapping
    mapped = TFModel(modelPath=fitted.getModelPath(), predictionCol=OTHER_PREDICTION,
                     inputMapping=mapping)
    scored = mapped.transform(frame)
    assert scored.columns == [*frame.columns, OTHER_PREDICTION]
    _assert_scores(_by_id(scored.collect(), OTHER_PREDICTION), expected)


def test_a_bare_tfmodel_feeds_inputs_named_after_such_columns_by_name(frame, fitted,
                                                                        expected):
    """Second review: TFModel(modelPath) alone (as from MLflow's runs:/) could not bind a
    column to an input the signature had renamed; the SavedModel now says which."""
    bare = TFModel(modelPath=fitted.getModelPath(), predictionCol=OTHER_PREDICTION)
    _assert_scores(_by_id(bare.transform(frame).collect(), OTHER_PREDICTION), expected)
    # inputMapping may name the model's own inputs, which the signature had to rename
    by_model_names = bare.copy().setInputMapping({FEATURES: FEATURES, CITY: CITY})
    _assert_scores(_by_id(by_model_names.transform(frame).collect(), OTHER_PREDICTION),
                   expected)


def test_features_col_takes_such_a_name(frame, tmp_path):
    """Without a fit: a plain TensorFlow SavedModel summing its input."""
    import tensorflow as tf

    class Total(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
        def serve(self, x):
            return {"y": tf.reduce_sum(x, axis=1)}

    path = str(tmp_path / "total")
    module = Total()
    tf.saved_model.save(module, path, signatures={"serving_default": module.serve})
    summed = TFModel(modelPath=path, featuresCol=FEATURES, predictionCol=OTHER_PREDICTION)
    rows = summed.transform(frame).collect()
    _assert_scores(_by_id(rows, OTHER_PREDICTION),
                   {r[0]: float(np.float32(r[1][0]) + np.float32(r[1][1])) for r in _rows()})


def test_udf_and_sql_score_such_columns(spark, frame, fitted, expected):
    score = fitted.udf()
    rows = frame.select(F.col(quoted(ROW_ID)), score(F.col(quoted(FEATURES)),
                                                     F.col(quoted(CITY))).alias("p")).collect()
    _assert_scores(_by_id(rows, "p"), expected)
    spark.udf.register("tf_predict_names", score)
    frame.createOrReplaceTempView("odd_names")
    rows = spark.sql(f"SELECT {quoted(ROW_ID)}, tf_predict_names({quoted(FEATURES)}, "
                     f"{quoted(CITY)}) AS {quoted(OTHER_PREDICTION)} FROM odd_names").collect()
    _assert_scores(_by_id(rows, OTHER_PREDICTION), expected)


def test_a_streaming_query_scores_such_columns(spark, frame, fitted, expected, tmp_path):
    source = str(tmp_path / "source")
    frame.write.parquet(source)
    stream = spark.readStream.schema(frame.schema).parquet(source)
    query = (fitted.transform(stream).writeStream.format("memory").queryName("odd_names_out")
             .outputMode("append").start())
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    table = spark.table("odd_names_out")
    assert table.columns == [*frame.columns, PREDICTION]
    _assert_scores(_by_id(table.collect(), PREDICTION), expected)


def test_adapt_reads_such_columns(frame):
    import keras

    state = pp.adapt(frame, {CITY: pp.StringLookup(), FEATURES: pp.Normalization(),
                             WEIGHT: pp.Normalization()})
    lookup = keras.layers.StringLookup()
    lookup.adapt(np.array([r[2] for r in _rows()], dtype=object))
    assert state[CITY]["config"]["vocabulary"] == lookup.get_vocabulary()[1:]
    x = np.array([r[1] for r in _rows()], np.float64)
    np.testing.assert_allclose(state[FEATURES]["config"]["mean"], x.mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(state[WEIGHT]["config"]["variance"],
                               np.var([r[4] for r in _rows()]), rtol=1e-6)
