"""Keras's ``adapt`` is the oracle for ``sparktf.ml.preprocessing.adapt``: the state Spark
computes over a DataFrame equals what each layer learns from the same rows collected in
one process, and the layers built from it transform the rows identically."""

import numpy as np
import pytest

from sparktf.errors import InvalidInputError
from sparktf.ml import preprocessing as pp

pytestmark = pytest.mark.timeout(300)

TEXTS = ["The cat sat.", "the CAT ran!!  far", "\tA dog, a cat; a mat", "Élan vital: élan",
         "don't stop", "(the) [UNK] end", "", "x-ray  x_ray x.ray", "the the the", "Ran far"]


def _rows():
    rng = np.random.default_rng(3)
    rows = []
    for i in range(120):
        city = ["paris", "lyon", "nice", "lille", "brest", "[UNK]"][i % 6 if i % 7 else 1]
        zip_code = [4_000_000_003, 4_000_000_000, 75001, -1, 13001][i % 5]
        area = None if i % 11 == 0 else float(rng.uniform(10, 200))
        pixels = rng.normal(size=3).tolist()
        tags = [["a", "b"], ["b"], [], ["c", "b", "a"]][i % 4]
        rows.append((i, city, zip_code, area, pixels, tags, TEXTS[i % len(TEXTS)]))
    return rows


@pytest.fixture(scope="module")
def table(spark):
    from pyspark.ml.functions import array_to_vector
    schema = ("id bigint, city string, zip bigint, area double, pixels array<double>, "
              "tags array<string>, review string")
    df = spark.createDataFrame(_rows(), schema).repartition(3)
    return df.withColumn("vec", array_to_vector("pixels")), _rows()


LAYERS = {
    "city": pp.StringLookup(),
    "zip": pp.IntegerLookup(),
    "area": pp.Normalization(),
    "pixels": pp.Normalization(),
    "vec": pp.Normalization(),
    "tags": pp.StringLookup(max_tokens=3),
    "review": pp.TextVectorization(output_sequence_length=6),
}


def _keras_layer(column):
    import keras
    kinds = {"city": keras.layers.StringLookup(), "zip": keras.layers.IntegerLookup(),
             "area": keras.layers.Normalization(), "pixels": keras.layers.Normalization(),
             "vec": keras.layers.Normalization(), "tags": keras.layers.StringLookup(max_tokens=3),
             "review": keras.layers.TextVectorization(output_sequence_length=6)}
    return kinds[column]


def _column(rows, column):
    index = ["id", "city", "zip", "area", "pixels", "tags", "review"].index(
        "pixels" if column == "vec" else column)
    values = [r[index] for r in rows if r[index] is not None]
    if column == "tags":
        return np.array([t for tags in values for t in tags])
    if column in ("area",):
        return np.array(values)[:, None]
    return np.array(values)


def test_spark_statistics_equal_keras_adapt_on_the_same_rows(table):
    df, rows = table
    state = pp.adapt(df, LAYERS)
    built = pp.layers(state)
    for column in LAYERS:
        oracle = _keras_layer(column)
        data = _column(rows, column)
        oracle.adapt(data)
        if state[column]["layer"] == "Normalization":
            np.testing.assert_allclose(np.ravel(state[column]["config"]["mean"]),
                                       np.ravel(oracle.adapt_mean.numpy()), rtol=1e-6)
            np.testing.assert_allclose(np.ravel(state[column]["config"]["variance"]),
                                       np.ravel(oracle.adapt_variance.numpy()), rtol=1e-6)
        else:
            assert built[column].get_vocabulary() == oracle.get_vocabulary(), column
        np.testing.assert_allclose(np.asarray(built[column](data)),
                                   np.asarray(oracle(data)), rtol=1e-6)


def test_max_tokens_cuts_the_vocabulary_as_keras_does_ties_included(table):
    import keras
    df, rows = table
    for max_tokens in (2, 4, 6):
        state = pp.adapt(df, {"city": pp.StringLookup(max_tokens=max_tokens),
                              "review": pp.TextVectorization(max_tokens=max_tokens + 2)})
        city = keras.layers.StringLookup(max_tokens=max_tokens)
        city.adapt(_column(rows, "city"))
        assert pp.layer(state["city"]).get_vocabulary() == city.get_vocabulary()
        review = keras.layers.TextVectorization(max_tokens=max_tokens + 2)
        review.adapt(_column(rows, "review"))
        assert pp.layer(state["review"]).get_vocabulary() == review.get_vocabulary()


def test_unsupported_settings_and_missing_columns_are_refused(table):
    df, _ = table
    with pytest.raises(InvalidInputError, match="split='whitespace'"):
        pp.TextVectorization(split="character")
    with pytest.raises(InvalidInputError, match="no column \\['nope'\\]"):
        pp.adapt(df, {"nope": pp.StringLookup()})
