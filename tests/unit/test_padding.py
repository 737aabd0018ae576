"""Which inputs of length None a Keras model masks, checked against the model itself: where
``masked_inputs`` says an input is masked, every row scores padded as it scores alone;
where it does not, some row scores differently padded (so the answer is not vacuous)."""

import numpy as np
import pytest

from sparktf.runtime.scoring import padding


def _model(name):
    import keras

    L = keras.layers
    keras.utils.set_random_seed(3)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    x = keras.Input((None, 3), name="x")

    def chain(inp, *layers):
        out = inp
        for layer in layers:
            out = layer(out)
        return keras.Model(inp, out)

    return {
        "gru over a masked embedding": lambda: chain(
            tokens, L.Embedding(20, 4, mask_zero=True), L.GRU(3), L.Dense(1)),
        "dense then average pooling, masked": lambda: chain(
            tokens, L.Embedding(20, 4, mask_zero=True), L.Dense(4, activation="relu"),
            L.Dropout(0.3), L.LayerNormalization(), L.GlobalAveragePooling1D(), L.Dense(1)),
        "bidirectional lstm, masked": lambda: chain(
            tokens, L.Embedding(20, 4, mask_zero=True), L.Bidirectional(L.LSTM(2)),
            L.Dense(1)),
        "stacked rnns, masked": lambda: chain(
            tokens, L.Embedding(20, 4, mask_zero=True), L.GRU(3, return_sequences=True),
            L.SimpleRNN(2), L.Dense(1)),
        "masking layer over floats": lambda: chain(x, L.Masking(-1.0), L.GRU(2)),
        "a sequential model": lambda: keras.Sequential([
            keras.Input((None,), dtype="int32"), L.Embedding(20, 4, mask_zero=True),
            L.GRU(2), L.Dense(1)]),
        "unmasked embedding, average pooling": lambda: chain(
            tokens, L.Embedding(20, 4), L.GlobalAveragePooling1D(), L.Dense(1)),
        "unmasked gru": lambda: chain(tokens, L.Embedding(20, 4), L.GRU(2)),
        "max pooling ignores the mask": lambda: chain(
            tokens, L.Embedding(20, 4, mask_zero=True), L.GlobalMaxPooling1D()),
        "a convolution mixes steps": lambda: chain(
            tokens, L.Embedding(20, 4, mask_zero=True), L.Conv1D(2, 3, padding="same"),
            L.GlobalAveragePooling1D()),
        "an activation of the user's mixes steps": lambda: chain(
            tokens, L.Embedding(20, 4, mask_zero=True),
            L.Activation(lambda v: v - keras.ops.mean(v, axis=1, keepdims=True)),
            L.GlobalAveragePooling1D(), L.Dense(1)),
        "a NaN mask value masks nothing": lambda: chain(
            x, L.Masking(float("nan")), L.GRU(2)),
        "a per-step output": lambda: chain(
            tokens, L.Embedding(20, 4, mask_zero=True), L.GRU(2, return_sequences=True)),
        "zeros for a padded last step": lambda: chain(
            tokens, L.Embedding(20, 4, mask_zero=True), L.LSTM(3, zero_output_for_mask=True),
            L.Dense(1)),
        "a mask value integers cannot hold": lambda: chain(
            keras.Input((None, 2), dtype="int32", name="ints"), L.Masking(0.5), L.LSTM(2)),
    }[name]()


MASKED = {"gru over a masked embedding": {"tokens": 0},
          "dense then average pooling, masked": {"tokens": 0},
          "bidirectional lstm, masked": {"tokens": 0},
          "stacked rnns, masked": {"tokens": 0},
          "masking layer over floats": {"x": -1.0},
          "a sequential model": None}  # its one input is unnamed: any name
UNMASKED = ["unmasked embedding, average pooling", "unmasked gru",
            "max pooling ignores the mask", "a convolution mixes steps",
            "an activation of the user's mixes steps", "a NaN mask value masks nothing",
            "a per-step output", "zeros for a padded last step",
            "a mask value integers cannot hold"]


def _rows(model, rng, n=12):
    shape = tuple(model.inputs[0].shape)
    lengths = rng.integers(1, 9, size=n)
    if len(shape) == 3 and "int" in str(model.inputs[0].dtype):
        return [rng.integers(1, 5, size=(k, shape[2])).astype("int32") for k in lengths]
    if len(shape) == 3:
        return [rng.normal(size=(k, shape[2])).astype("float32") for k in lengths]
    return [rng.integers(1, 20, size=k).astype("int32") for k in lengths]


def _largest_gap(model, rows, pad) -> float:
    """The largest difference between a row scored alone and padded by 5 steps of ``pad``."""
    gap = 0.0
    for row in rows:
        alone = np.asarray(model(row[None]))
        tail = np.full((5, *row.shape[1:]), pad, dtype=row.dtype)
        padded = np.asarray(model(np.concatenate([row, tail])[None]))
        apart = float(np.abs(alone - padded).max())
        gap = max(gap, apart if apart == apart else float("inf"))  # NaN: as far as can be
    return gap


@pytest.mark.parametrize("name", list(MASKED))
def test_an_input_said_masked_scores_padded_as_alone(name):
    model = _model(name)
    found = padding.masked_inputs(model)
    expected = MASKED[name]
    if expected is None:
        assert list(found.values()) == [0], found
    else:
        assert found == expected
    gap = _largest_gap(model, _rows(model, np.random.default_rng(0)), next(iter(found.values())))
    print(f"{name}: padded vs alone, largest difference {gap:.2e}")
    assert gap < 1e-5


@pytest.mark.parametrize("name", UNMASKED)
def test_an_input_not_proven_masked_is_left_unpadded_and_padding_would_change_it(name):
    model = _model(name)
    assert padding.masked_inputs(model) == {}
    if name == "a per-step output":
        return  # its output's length follows the row's: padded, it would be longer
    pad = float("nan") if "NaN" in name else 0
    gap = _largest_gap(model, _rows(model, np.random.default_rng(0)), pad)
    print(f"{name}: padded vs alone, largest difference {gap:.2e}")
    assert gap > 1e-4  # NaN: padded with the mask value, the row scores NaN


def test_a_subclassed_model_is_never_said_masked():
    import keras

    class Pooled(keras.Model):
        def __init__(self):
            super().__init__()
            self.embed = keras.layers.Embedding(20, 4, mask_zero=True)
            self.pool = keras.layers.GlobalAveragePooling1D()

        def call(self, x):
            return self.pool(self.embed(x))

    model = Pooled()
    model(np.ones((1, 3), "int32"))
    assert padding.masked_inputs(model) == {}
