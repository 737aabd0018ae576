"""The data-kind cases: columns as real tables hold them, into Keras 3 models.

Each case gives the Spark schema and rows, the same data as Keras's ``fit`` takes it in
one process (``x`` by input name, ``y``, ``sample_weight``), the model (shipped to the
executors by value) and the Params that feed it. ``test_data_kinds`` trains each with
TFEstimator and with ``model.fit`` and compares.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

ROWS = 96
CITIES = ["paris", "lyon", "nice", "lille", "brest"]
BIG_IDS = [4_000_000_003, 4_000_000_000, 2**33 + 1, 2**40 + 7, 5]  # float32 merges the first two
WORDS = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "far", "away"]


def _seeded():
    import keras
    keras.utils.set_random_seed(0)
    return keras


def structured(hp):
    """Strings, integers and floats fed by name into lookup and normalization layers."""
    keras = _seeded()
    city = keras.Input((1,), dtype="string", name="city")
    rooms = keras.Input((1,), dtype="int64", name="rooms")
    area = keras.Input((1,), name="area")
    c = keras.layers.Flatten()(keras.layers.Embedding(6, 3)(
        keras.layers.StringLookup(vocabulary=CITIES)(city)))
    r = keras.layers.IntegerLookup(vocabulary=[1, 2, 3, 4], output_mode="one_hot")(rooms)
    a = keras.layers.Normalization(mean=60.0, variance=400.0)(area)
    hidden = keras.layers.Dense(8, activation="tanh")(keras.layers.Concatenate()([c, r, a]))
    model = keras.Model([city, rooms, area], keras.layers.Dense(1)(hidden))
    model.compile(keras.optimizers.SGD(hp.get("lr", 0.05)), loss="mse", metrics=["mae"])
    return model


def text(hp):
    """A text column through TextVectorization (standardize, split, vocabulary inside)."""
    keras = _seeded()
    review = keras.Input((1,), dtype="string", name="review")
    vectorize = keras.layers.TextVectorization(max_tokens=12, output_sequence_length=6,
                                               vocabulary=WORDS)
    tokens = keras.layers.Embedding(12, 4, mask_zero=True)(vectorize(review))
    pooled = keras.layers.GlobalAveragePooling1D()(tokens)
    model = keras.Model(review, keras.layers.Dense(1, activation="sigmoid")(pooled))
    model.compile(keras.optimizers.Adam(0.05), loss="binary_crossentropy",
                  metrics=["accuracy"])
    return model


def _sequence_model(length):
    keras = _seeded()
    ids = keras.Input((length,), dtype="int64", name="tokens")
    embedded = keras.layers.Embedding(20, 4, mask_zero=True)(ids)
    hidden = keras.layers.GlobalAveragePooling1D()(embedded)
    model = keras.Model(ids, keras.layers.Dense(1)(hidden))
    model.compile(keras.optimizers.SGD(0.1), loss="mse", metrics=["mae"])
    return model


def sequences(hp):
    """Token ids of varying length into Embedding(mask_zero=True), declared length 10."""
    return _sequence_model(10)


def sequences_any_length(hp):
    """The same with a length of None: each batch padded to its longest row."""
    return _sequence_model(None)


def big_ids(hp):
    """int64 ids above 2^32 into IntegerLookup: float32 would map them out of vocabulary."""
    keras = _seeded()
    user = keras.Input((1,), dtype="int64", name="user")
    looked_up = keras.layers.IntegerLookup(vocabulary=BIG_IDS)(user)
    embedded = keras.layers.Flatten()(keras.layers.Embedding(6, 3)(looked_up))
    model = keras.Model(user, keras.layers.Dense(1)(embedded))
    model.compile(keras.optimizers.SGD(0.1), loss="mse", metrics=["mae"])
    return model


def images(hp):
    """array<array<float>> 8x8 images into Conv2D (the input declares 8x8x1)."""
    keras = _seeded()
    model = keras.Sequential([keras.Input((8, 8, 1), name="pixels"),
                              keras.layers.Conv2D(4, 3, activation="relu"),
                              keras.layers.GlobalAveragePooling2D(),
                              keras.layers.Dense(3, activation="softmax")])
    model.compile(keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    return model


def png_files(hp):
    """A binary column of PNG files, decoded inside the model."""
    keras = _seeded()
    import tensorflow as tf

    class DecodePng(keras.layers.Layer):
        def call(self, files):
            def decode(one):
                return tf.cast(tf.io.decode_png(one, channels=1), tf.float32) / 255.0
            flat = tf.reshape(files, [-1])
            return tf.map_fn(decode, flat, fn_output_signature=tf.TensorSpec((8, 8, 1),
                                                                             tf.float32))

        def compute_output_shape(self, input_shape):
            return (input_shape[0], 8, 8, 1)

    png = keras.Input((1,), dtype="string", name="png")
    pixels = DecodePng()(png)
    hidden = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(4, 3)(pixels))
    model = keras.Model(png, keras.layers.Dense(3, activation="softmax")(hidden))
    model.compile(keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    return model


def two_outputs(hp):
    """Two label columns into a two-output model (price, dear), with sample weights."""
    keras = _seeded()
    features = keras.Input((4,), name="features")
    hidden = keras.layers.Dense(8, activation="tanh")(features)
    price = keras.layers.Dense(1, name="price")(hidden)
    dear = keras.layers.Dense(1, activation="sigmoid", name="dear")(hidden)
    model = keras.Model(features, [price, dear])
    model.compile(keras.optimizers.SGD(hp.get("lr", 0.05)),
                  loss={"price": "mse", "dear": "binary_crossentropy"},
                  metrics={"price": ["mae"], "dear": ["accuracy"]})
    return model


@dataclasses.dataclass(frozen=True)
class Kind:
    """One data kind: model, Spark columns and Keras arrays for the same rows."""

    name: str
    model_fn: Callable
    schema: str  # the Spark columns, "label" (or labels) and "weight" included
    params: dict  # what TFEstimator is given besides the model and batch
    outputs: tuple = ("prediction",)  # transform columns compared with predict (in order)
    output_mapping: dict | None = None  # TFModel outputMapping for several outputs
    sql_inputs: tuple = ()  # the columns tf_predict(...) takes in SQL
    epochs: int = 3


KINDS = [
    Kind("strings + ints + floats by name", structured,
         "city string, rooms bigint, area double, label double",
         {"labelCol": "label"}, sql_inputs=("city", "rooms", "area")),
    Kind("text through TextVectorization", text, "review string, label double",
         {"featuresCol": "review"}, outputs=("probability",), sql_inputs=("review",)),
    Kind("variable-length ids, length 10", sequences, "tokens array<bigint>, label double",
         {"featuresCol": "tokens"}, sql_inputs=("tokens",)),
    Kind("variable-length ids, length None", sequences_any_length,
         "tokens array<bigint>, label double", {"featuresCol": "tokens"},
         sql_inputs=("tokens",)),
    Kind("int64 ids above 2^32", big_ids, "user bigint, label double",
         {"featuresCol": "user"}, sql_inputs=("user",)),
    Kind("array<array<float>> images", images, "pixels array<array<float>>, label bigint",
         {"featuresCol": "pixels"}, outputs=("probability",), sql_inputs=("pixels",)),
    Kind("binary PNG files", png_files, "png binary, label bigint", {"featuresCol": "png"},
         outputs=("probability",), sql_inputs=("png",)),
    Kind("two labels, two outputs, weights", two_outputs,
         "features array<float>, price double, dear bigint, weight double",
         {"featuresCol": "features", "labelCols": ["price", "dear"], "weightCol": "weight"},
         outputs=("price_hat", "dear_hat"), output_mapping={"price": "price_hat",
                                                             "dear": "dear_hat"},
         sql_inputs=("features",)),
]


def _png(image: np.ndarray) -> bytes:
    import tensorflow as tf
    return tf.io.encode_png(tf.constant((image * 255).astype(np.uint8)[..., None])).numpy()


def data(kind: Kind, rows: int = ROWS) -> tuple[list[tuple], dict, object, object]:
    """(Spark rows, Keras x by input name, Keras y, Keras sample_weight or None)."""
    rng = np.random.default_rng(11)
    name = kind.model_fn.__name__
    if name == "structured":
        city = rng.choice(CITIES + ["rome"], rows)  # "rome": out of vocabulary
        rooms = rng.integers(1, 6, rows)
        area = rng.uniform(20, 120, rows)
        label = area / 20 + rooms + (city == "paris") * 3.0
        spark_rows = [(str(c), int(r), float(a), float(y))
                      for c, r, a, y in zip(city, rooms, area, label)]
        x = {"city": city.astype(object), "rooms": rooms.astype(np.int64), "area": area}
        return spark_rows, x, label, None
    if name == "text":
        lengths = rng.integers(1, 9, rows)
        texts = [" ".join(rng.choice(WORDS + ["Unknown"], n)).capitalize() + "!"
                 for n in lengths]
        label = np.array([float("cat" in t.lower()) for t in texts])
        return ([(t, float(y)) for t, y in zip(texts, label)],
                {"review": np.array(texts, dtype=object)}, label, None)
    if name.startswith("sequences"):
        seqs = [rng.integers(1, 20, rng.integers(1, 11)).tolist() for _ in range(rows)]
        label = np.array([float(np.mean(s) / 10) for s in seqs])
        import keras
        padded = keras.utils.pad_sequences(seqs, maxlen=10 if name == "sequences" else None,
                                           padding="post", value=0, dtype="int64")
        return [(s, float(y)) for s, y in zip(seqs, label)], {"tokens": padded}, label, None
    if name == "big_ids":
        users = np.array(BIG_IDS, np.int64)[rng.integers(0, len(BIG_IDS), rows)]
        label = (users == 4_000_000_003) * 2.0 + (users % 7) / 7
        return ([(int(u), float(y)) for u, y in zip(users, label)], {"user": users}, label,
                None)
    label = rng.integers(0, 3, rows)
    images = rng.uniform(0, 1, (rows, 8, 8)).astype(np.float32) * 0.5
    for i, c in enumerate(label):  # a bright band where the class says
        images[i, 2 * c:2 * c + 3, :] += 0.5
    if name == "images":
        return ([(img.tolist(), int(c)) for img, c in zip(images, label)],
                {"pixels": images[..., None]}, label, None)
    if name == "png_files":
        files = [_png(img) for img in images]
        return ([(f, int(c)) for f, c in zip(files, label)],
                {"png": np.array(files, dtype=object)}, label, None)
    features = rng.normal(size=(rows, 4)).astype(np.float32)
    price = features @ np.array([1.0, -2.0, 0.5, 0.0]) + 3
    dear = (price > 3).astype(np.int64)
    weight = rng.uniform(0.5, 2.0, rows)
    return ([(f.tolist(), float(p), int(d), float(w))
             for f, p, d, w in zip(features, price, dear, weight)],
            {"features": features}, [price, dear], weight)  # a list: Keras's fit fails on
    # a dict of labels with sample_weight for a model whose outputs are a list
