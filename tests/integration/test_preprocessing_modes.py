"""Keras's ``adapt`` is the oracle for ``preprocessing.adapt`` in every output mode (issue 32
item 4): for each lookup layer x output_mode x mask x num_oov_indices x max_tokens, the
vocabulary, the "tf_idf" weights and the layer's output equal those of the same layer
adapted by Keras on the same rows. One Spark frame per layer kind, many configs from it."""

import itertools

import numpy as np
import pytest

from sparktf.errors import InvalidInputError
from sparktf.ml import preprocessing as pp
from tests.integration import data

pytestmark = pytest.mark.timeout(600)

MODES = ("int", "one_hot", "multi_hot", "count", "tf_idf")
MAX_TOKENS = (None, 6)  # 6: a cut inside a run of tied counts for every reserved count


def _pool(tokens, rng):
    """Counts 9, 7, then a run of ties at 5 around every cut, then 2s and 1s."""
    counts = [9, 7, 5, 5, 5, 5, 5, 2, 2, 1, 1][:len(tokens)]
    values = [t for t, n in zip(tokens, counts) for _ in range(n)]
    rng.shuffle(values)
    return values


def _string_rows():
    rng = np.random.default_rng(7)
    words = _pool(["paris", "lyon", "élan", "Élan", "東京", "b", "[UNK]", "", "zürich",
                   "a b", "ß"], rng)
    tags = [list(rng.choice(words, size=rng.integers(0, 5))) for _ in range(30)]
    tags[3] = []
    return [(w, [str(t) for t in tags[i % 30]] if i % 9 else None)
            for i, w in enumerate(words)] + [(None, ["paris", "paris"])]


def _integer_rows():
    rng = np.random.default_rng(8)
    values = _pool([7, 4_000_000_000, -5, 0, 3, 12, 99, -1, -9_000_000_000_000, 1, 2], rng)
    return [(int(v),) for v in values] + [(None,)]


TEXTS = ["The cat sat.", "the CAT ran!!  far", "\tA dog, a cat; a mat", "Élan vital: élan",
         "don't stop", "(the) [UNK] end", "", "x-ray  x_ray x.ray", "the the the", "Ran far",
         "   ", "東京 tokyo 東京", "dog dog mat mat sat"]


def _lookup_specs(kind, masks, modes):
    for mode, mask, oov, max_tokens in itertools.product(modes, masks, (0, 1, 2),
                                                          MAX_TOKENS):
        yield getattr(pp, kind)(max_tokens=max_tokens, output_mode=mode, mask_token=mask,
                                num_oov_indices=oov)


def _check(spec, entry, data, call_data):
    """The layer built from sparktf's state equals the one Keras adapts on ``data``."""
    import keras
    built = pp.layer(entry)
    oracle = getattr(keras.layers, spec.layer)(**spec.kwargs)
    oracle.adapt(data)
    assert built.get_vocabulary() == oracle.get_vocabulary(), spec
    if spec.output_mode == "tf_idf":
        np.testing.assert_allclose(np.asarray(built.idf_weights_const if spec.layer !=
                                              "TextVectorization" else
                                              built._lookup_layer.idf_weights_const),
                                   np.asarray(oracle.idf_weights_const if spec.layer !=
                                              "TextVectorization" else
                                              oracle._lookup_layer.idf_weights_const),
                                   rtol=1e-6)
    try:
        expected = oracle(call_data)
    except Exception as error:  # num_oov_indices=0 and an unknown token: Keras refuses
        with pytest.raises(type(error)):
            built(call_data)
        return 0
    np.testing.assert_allclose(_dense(built(call_data)), _dense(expected), rtol=1e-6)
    return 1


def _dense(x):
    return np.asarray(x.to_tensor() if hasattr(x, "to_tensor") else x)


def _adapt_all(df, column, specs):
    """One ``adapt`` call for every config, each on its own copy of ``column``."""
    from pyspark.sql import functions as F
    copies = df.select(*[F.col(column).alias(f"{column}{i}") for i in range(len(specs))])
    state = pp.adapt(copies, {f"{column}{i}": spec for i, spec in enumerate(specs)})
    return [state[f"{column}{i}"] for i in range(len(specs))]


def test_string_and_integer_lookups_equal_keras_adapt_in_every_mode(spark):
    import tensorflow as tf
    rows = _string_rows()
    df = data.frame(spark, rows, "city string, tags array<string>").repartition(2).cache()
    city = np.array([r[0] for r in rows if r[0] is not None])
    tags = tf.ragged.constant([r[1] for r in rows if r[1] is not None], dtype=tf.string)
    specs = list(_lookup_specs("StringLookup", (None, ""), MODES))
    called = sum(_check(spec, entry, city, city)
                 for spec, entry in zip(specs, _adapt_all(df, "city", specs)))
    specs = [s for s in specs if s.output_mode != "one_hot"]
    called += sum(_check(spec, entry, tags, tags)
                  for spec, entry in zip(specs, _adapt_all(df, "tags", specs)))
    integers = _integer_rows()
    df = data.frame(spark, integers, "zip bigint").repartition(2).cache()
    zips = np.array([r[0] for r in integers if r[0] is not None], dtype="int64")
    specs = list(_lookup_specs("IntegerLookup", (None, 0), MODES))
    called += sum(_check(spec, entry, zips, zips)
                  for spec, entry in zip(specs, _adapt_all(df, "zip", specs)))
    assert called > 100  # outputs compared, not only refusals


def test_text_vectorization_equals_keras_adapt_in_every_mode(spark):
    rows = [(t,) for t in TEXTS * 3] + [(None,)]
    df = data.frame(spark, rows, "review string").repartition(2).cache()
    texts = np.array([r[0] for r in rows if r[0] is not None])
    specs = [pp.TextVectorization(max_tokens=max_tokens, output_mode=mode)
             for mode, max_tokens in itertools.product(MODES, MAX_TOKENS)]
    for spec, entry in zip(specs, _adapt_all(df, "review", specs)):
        assert _check(spec, entry, texts, texts)


def test_a_null_inner_array_holds_no_tokens_and_keeps_the_rows_others(spark):
    """Found by review: Spark's flatten of an array holding a null array is null, so a row
    [["a", "b"], null] gave no tokens at all (the vocabulary lost "b", and its idf was
    another), where Keras adapts on the row's tokens a, b."""
    import tensorflow as tf
    rows = [([["a", "b"], None],), ([["a", None]],), ([["c"]],), (None,)]
    df = data.frame(spark, rows, "tags array<array<string>>").repartition(2)
    tokens = tf.ragged.constant([["a", "b"], ["a"], ["c"]], dtype=tf.string)
    specs = [pp.StringLookup(output_mode=mode) for mode in ("int", "count", "tf_idf")]
    for spec, entry in zip(specs, _adapt_all(df, "tags", specs)):
        assert _check(spec, entry, tokens, tokens)


def test_the_issue_case_keeps_max_tokens_less_the_oov_slot(spark):
    df = data.frame(spark, [(t,) for t in TEXTS * 3], "review string")
    for mode in ("multi_hot", "count", "tf_idf"):
        state = pp.adapt(df, {"review": pp.TextVectorization(max_tokens=6, output_mode=mode)})
        assert len(state["review"]["config"]["vocabulary"]) == 5, mode


INVALID = [("StringLookup", {"max_tokens": 1}), ("IntegerLookup", {"num_oov_indices": -1}),
           ("StringLookup", {"output_mode": "onehot"}),
           ("StringLookup", {"invert": True, "output_mode": "count"}),
           ("StringLookup", {"sparse": True}),
           ("IntegerLookup", {"pad_to_max_tokens": True, "output_mode": "multi_hot"}),
           ("TextVectorization", {"output_mode": "count", "output_sequence_length": 4}),
           ("TextVectorization", {"output_mode": "tf_idf", "ragged": True})]


@pytest.mark.parametrize("kind, kwargs", INVALID)
def test_settings_keras_refuses_are_refused_before_any_spark_job(kind, kwargs):
    import keras
    with pytest.raises(ValueError):
        getattr(keras.layers, kind)(**kwargs)
    with pytest.raises(InvalidInputError):
        getattr(pp, kind)(**kwargs)


def test_a_layer_with_a_vocabulary_or_no_room_for_tokens_is_refused():
    with pytest.raises(InvalidInputError, match="no vocabulary of its own"):
        pp.StringLookup(vocabulary=["a"])
    with pytest.raises(InvalidInputError, match="reserved indices"):
        pp.StringLookup(max_tokens=3, mask_token="", num_oov_indices=2)
    pp.StringLookup(max_tokens=3, mask_token="", num_oov_indices=2, output_mode="count")
