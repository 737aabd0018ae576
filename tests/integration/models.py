"""Model builders shared by the integration tests (shipped to executors by value)."""


def linear(hparams):
    import keras
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((hparams.get("width", 3),)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(hparams["learningRate"]), loss="mse",
                  metrics=["mae"])
    return model


def digits_mlp(hparams):
    import keras
    keras.utils.set_random_seed(hparams.get("init_seed", 0))
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(10, activation="softmax")])
    model.compile(optimizer=keras.optimizers.Adam(hparams["learningRate"]),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def two_inputs(hparams):
    import keras
    keras.utils.set_random_seed(0)
    a = keras.Input((2,), name="a")
    b = keras.Input((1,), name="b")
    out = keras.layers.Dense(1)(keras.layers.Concatenate()([a, b]))
    model = keras.Model([a, b], out)
    model.compile(optimizer=keras.optimizers.Adam(hparams["learningRate"]), loss="mse")
    return model


def digits_sized(hparams):
    """digits_mlp with a hidden width taken from hyperParams."""
    import keras
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((64,)),
                              keras.layers.Dense(hparams.get("units", 32), activation="relu"),
                              keras.layers.Dense(10, activation="softmax")])
    model.compile(optimizer=keras.optimizers.Adam(hparams["learningRate"]),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def tf_keras_linear(hparams):
    """The same regression as ``linear``, built with tf_keras (Keras 2)."""
    import tf_keras
    tf_keras.utils.set_random_seed(0)
    model = tf_keras.Sequential([tf_keras.Input((3,)), tf_keras.layers.Dense(1)])
    model.compile(optimizer=tf_keras.optimizers.Adam(hparams["learningRate"]), loss="mse",
                  metrics=["mae"])
    return model


def digits_keyed(hparams):
    """digits_sized whose width is hyperParams["ids"][1] (an int key) and which needs
    hyperParams["shape"] to be the tuple it was set to: JSON would give "1" and a list."""
    if not isinstance(hparams["shape"], tuple):
        raise TypeError(f"hyperParams['shape'] came back as {hparams['shape']!r}")
    return digits_sized({**hparams, "units": hparams["ids"][1]})


def tf_keras_tokens_and_size(hparams):
    """tf_keras: token ids of any length through a GRU, beside an input named größe (which
    a SavedModel signature cannot hold as it is); inputs named after their columns."""
    import tf_keras
    tf_keras.utils.set_random_seed(0)
    tokens = tf_keras.Input((None,), dtype="int32", name="tokens")
    size = tf_keras.Input((1,), name="größe")
    recurrent = tf_keras.layers.GRU(3)(tf_keras.layers.Embedding(10, 4)(tokens))
    out = tf_keras.layers.Dense(1)(tf_keras.layers.Concatenate()([recurrent, size]))
    model = tf_keras.Model([tokens, size], out)
    model.compile(optimizer=tf_keras.optimizers.SGD(0.01), loss="mse")
    return model


@__import__("keras").saving.register_keras_serializable(package="sparktf_tests")
class Scaled(__import__("keras").Model):
    """A subclassed model, registered with Keras in this (the driver's) module only: the
    fit takes it by value, and the executors never register it."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        import keras
        self.dense = keras.layers.Dense(1)

    def call(self, x):
        return 3.0 * self.dense(x)


def subclassed(hparams):
    import keras
    keras.utils.set_random_seed(0)
    model = Scaled()
    model.compile(optimizer=keras.optimizers.Adam(hparams["learningRate"]), loss="mse")
    return model


def linear_with_on_read_state(hparams):
    """``linear`` after a layer whose state the strategy syncs on read (a running mean of
    its inputs, ``synchronization="on_read"``): exporting it reads that state across the
    workers, an all-reduce every worker must join."""
    import keras
    import numpy as np

    class RunningShift(keras.layers.Layer):
        def build(self, shape):
            self.shift = keras.Variable(np.zeros((shape[-1],), "float32"), trainable=False,
                                        synchronization="on_read", aggregation="mean",
                                        name="shift")

        def call(self, x, training=False):
            if training:
                self.shift.assign(keras.ops.mean(x, axis=0))
            return x + 0.0 * self.shift

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), RunningShift(), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(hparams.get("learningRate", 0.05)),
                  loss="mse")
    return model
