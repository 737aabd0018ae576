"""Keras's gradient accumulation (``gradient_accumulation_steps`` on the optimizer) on
several workers, with Keras's numbers: 2 workers, ``batchSize=64`` and 4 accumulated
steps over 256 rows equal Keras's single-process ``fit`` at batch 256 (one update an
epoch) and Keras's own accumulation at batch 64, history and weights (issue 54)."""

import numpy as np
import pytest

from sparktf.ml import TFEstimator
from tests.integration import data

ROWS, EPOCHS = 256, 3


def accumulating(hparams):
    import keras
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="tanh"),
                              keras.layers.Dense(1)])
    kind = getattr(keras.optimizers, hparams["optimizer"])
    model.compile(kind(0.05, gradient_accumulation_steps=hparams["accumulate"]), "mse",
                  metrics=["mae"])
    return model


def _data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, 4)).astype("float32")
    return x, (x @ np.array([1.0, -2.0, 0.5, 3.0]) + 0.5).astype("float32")


# Adam: its bias correction counts updates (iterations // steps), not steps
@pytest.mark.parametrize("optimizer", ["Adam"])
def test_two_workers_accumulating_four_steps_equal_keras_at_the_accumulated_batch(
        spark, optimizer):
    x, y = _data()
    alone = accumulating({"optimizer": optimizer, "accumulate": None})
    expected = alone.fit(x, y, batch_size=ROWS, epochs=EPOCHS, shuffle=False,
                         verbose=0).history
    keras_accumulating = accumulating({"optimizer": optimizer, "accumulate": 4})
    accumulated = keras_accumulating.fit(x, y, batch_size=64, epochs=EPOCHS, shuffle=False,
                                         verbose=0).history
    df = data.frame(spark, [(x[i].tolist(), float(y[i])) for i in range(ROWS)],
                    "features array<float>, label float").repartition(2)
    fitted = TFEstimator(modelFn=accumulating, numWorkers=2, batchSize=64, epochs=EPOCHS,
                         shuffle=False, hyperParams={"optimizer": optimizer, "accumulate": 4},
                         verbose=0).fit(df)
    history = fitted.getHistory()
    print(f"{optimizer}: sparktf {history}\nKeras at 256 {expected}\n"
          f"Keras accumulating {accumulated}")
    for key in ("loss", "mae"):
        np.testing.assert_allclose(history[key], expected[key], rtol=1e-5, err_msg=key)
        np.testing.assert_allclose(history[key], accumulated[key], rtol=1e-5, err_msg=key)
    for a, b in zip(fitted.getKerasModel().get_weights(), alone.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
