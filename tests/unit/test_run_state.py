"""The run's state beyond its variables (sparktf.runtime.training.run_state): Keras's seed
generators and the callbacks' epoch-to-epoch attributes come back as they were; a
CSVLogger file keeps each checkpointed epoch once; a file:// URI keeps a '#'."""

import keras
import numpy as np

from sparktf.runtime import storage
from sparktf.runtime.training import file_callbacks, run_state


def _dropout_model():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dropout(0.5, seed=7),
                              keras.layers.GaussianNoise(1.0, seed=3), keras.layers.Dense(2)])
    model.compile("adam", "mse")
    return model


def test_seed_generators_resume_where_they_stood():
    """Dropout draws the same masks after a restore as the uninterrupted model would."""
    x = np.ones((8, 4), "float32")
    model = _dropout_model()
    model(x, training=True)
    saved = run_state.seeds(model)
    expected = keras.ops.convert_to_numpy(model(x, training=True))
    fresh = _dropout_model()  # as a relaunched task builds it
    assert run_state.seeds(fresh) != saved
    run_state.restore_seeds(fresh, saved)
    fresh.set_weights(model.get_weights())
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(fresh(x, training=True)),
                                  expected)


def test_early_stopping_carries_its_patience_and_its_own_settings():
    """EarlyStopping negates min_delta when it first compares (mode min): its state comes
    back with the comparison it goes with, so the min_delta is not negated twice."""
    model = _dropout_model()
    before = keras.callbacks.EarlyStopping(monitor="loss", min_delta=1.0, patience=3,
                                           restore_best_weights=True)
    before.set_model(model)
    before.on_train_begin()
    initial = run_state.snapshot([before])
    for epoch, loss in enumerate([5.0, 4.5]):
        before.on_epoch_end(epoch, {"loss": loss})
    saved = run_state.callbacks_state([before], initial)
    after = keras.callbacks.EarlyStopping(monitor="loss", min_delta=1.0, patience=3,
                                          restore_best_weights=True)
    after.set_model(model)
    after.on_train_begin()  # resets it, as each attempt's does
    run_state.restore_callbacks([after], saved)
    assert (after.wait, after.best, after.min_delta) == (1, 5.0, 1.0)  # negated once, below
    assert len(after.best_weights) == len(model.get_weights())
    for epoch, loss in [(2, 4.4), (3, 4.3)]:
        after.on_epoch_end(epoch, {"loss": loss})
    assert after.min_delta == -1.0
    assert after.stopped_epoch == 3 and model.stop_training
    given_now = keras.callbacks.EarlyStopping(monitor="loss", min_delta=0.0, patience=3)
    given_now.set_model(model)
    given_now.on_train_begin()
    run_state.restore_callbacks([given_now], saved)
    assert given_now.min_delta == 0.0  # found by the second review: the old -1.0 came back


def test_a_csv_logger_file_keeps_each_checkpointed_epoch_once(tmp_path):
    path = tmp_path / "log.csv"
    path.write_bytes(b"epoch,loss\r\n0,1.5\r\n1,1.25\r\n2,1.0\r\n")  # epoch 2: no checkpoint
    logger = keras.callbacks.CSVLogger(str(path))
    file_callbacks.resume([logger], {"loss": [1.5, 1.25]}, first_epoch=2)
    assert path.read_bytes() == b"epoch,loss\r\n0,1.5\r\n1,1.25\r\n"
    assert logger.append


def test_a_file_uri_keeps_a_hash_and_a_question_mark():
    assert storage.local_path("file:///data/run#3/x?y") == "/data/run#3/x?y"
    assert storage.local_path("file://localhost/data/a#b") == "/data/a#b"
    assert storage.local_path("file:/data/a") == "/data/a"
    assert storage.is_local("file:///data/run#3")


def test_keras_own_callbacks_carry_their_state_and_the_users_own_start_afresh():
    class Counter(keras.callbacks.Callback):  # the user's: its state may be one attempt's
        pass

    class Patient(keras.callbacks.EarlyStopping):  # a Keras callback, subclassed
        pass

    assert file_callbacks.carries_state(keras.callbacks.EarlyStopping())
    assert file_callbacks.carries_state(keras.callbacks.ReduceLROnPlateau())
    assert file_callbacks.carries_state(Patient())
    assert not file_callbacks.carries_state(Counter())
    assert file_callbacks.carries_state(keras.callbacks.ModelCheckpoint("x.keras"))


def test_a_callback_resumed_with_other_settings_or_in_another_place_keeps_them():
    """Its settings are today's (patience 10, not the lost attempt's 3); callbacks matched
    by class, so two swapped ones each get their own state back (before: by position, an
    EarlyStopping got ReduceLROnPlateau's attributes and the run stopped at once)."""
    model = _dropout_model()
    stop, slow = (keras.callbacks.EarlyStopping(monitor="loss", patience=3),
                  keras.callbacks.ReduceLROnPlateau(monitor="loss", patience=5))
    for c in (stop, slow):
        c.set_model(model)
        c.on_train_begin()
    initial = run_state.snapshot([stop, slow])
    for epoch, loss in enumerate([5.0, 5.5]):
        stop.on_epoch_end(epoch, {"loss": loss})
        slow.on_epoch_end(epoch, {"loss": loss, "learning_rate": 0.001})
    saved = run_state.callbacks_state([stop, slow], initial)
    now = [keras.callbacks.ReduceLROnPlateau(monitor="loss", patience=5),
           keras.callbacks.EarlyStopping(monitor="loss", patience=10)]
    for c in now:
        c.set_model(model)
        c.on_train_begin()
    run_state.restore_callbacks(now, saved)
    assert (now[1].patience, now[1].wait, now[1].best) == (10, 1, 5.0)
    assert (now[0].patience, now[0].wait) == (5, 1)
