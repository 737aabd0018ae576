"""Per-epoch checkpoints keep the same number of folders on every filesystem."""

import numpy as np
import pytest
from pyarrow import fs

from sparktf.runtime import storage
from sparktf.runtime.training import checkpoint


@pytest.fixture
def remote(tmp_path, monkeypatch):
    """``remote://`` URIs on a pyarrow filesystem that is not the local one (a stand-in for
    HDFS or S3: every call goes through pyarrow.fs, none through os)."""
    root = tmp_path / "bucket"
    root.mkdir()
    filesystem = fs.SubTreeFileSystem(str(root), fs.LocalFileSystem())

    def resolve(uri):
        assert uri.startswith("remote://"), uri
        return filesystem, uri[len("remote://"):]

    monkeypatch.setattr(storage, "_fs", resolve)
    monkeypatch.setattr(storage, "is_local", lambda uri: not uri.startswith("remote://"))
    return root


def _model():
    import keras
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    model.optimizer.build(model.trainable_variables)
    return model


@pytest.mark.parametrize("where", ["local", "remote"])
def test_only_the_newest_checkpoints_are_kept(tmp_path, remote, where):
    model_dir = "remote://run" if where == "remote" else str(tmp_path / "run")
    model = _model()
    for epoch in range(1, 6):
        model.layers[0].kernel.assign(np.full((2, 1), float(epoch), np.float32))
        checkpoint.save(model, model_dir, epoch, {"loss": [1.0] * epoch}, is_chief=True)
    root = storage.join(model_dir, checkpoint.CHECKPOINTS)
    assert storage.list_names(root) == ["epoch-00004", "epoch-00005", checkpoint.POINTER]
    if where == "remote":  # written through pyarrow, really on the other filesystem
        assert sorted(p.name for p in (remote / "run" / "checkpoints").iterdir()) == \
            ["epoch-00004", "epoch-00005", checkpoint.POINTER]
    found = checkpoint.latest(model_dir)
    assert found["epoch"] == 5 and found["dir"] == "epoch-00005"
    fresh = _model()
    checkpoint.restore(fresh, model_dir, found)
    np.testing.assert_array_equal(fresh.layers[0].kernel.numpy(), np.full((2, 1), 5.0))


@pytest.mark.parametrize("where", ["local", "remote"])
def test_with_an_evaluator_behind_checkpoints_stay_until_it_has_read_them(tmp_path, remote,
                                                                       where):
    """The chief keeps every checkpoint (``prune_older=False``); the evaluator removes the
    ones it has read, never one of the ``KEEP`` newest, never one it has not read."""
    model_dir = "remote://run" if where == "remote" else str(tmp_path / "run")
    root = storage.join(model_dir, checkpoint.CHECKPOINTS)
    model = _model()
    for epoch in range(1, 6):
        checkpoint.save(model, model_dir, epoch, {"loss": [1.0] * epoch}, is_chief=True,
                        prune_older=False)
    epochs = [f"epoch-0000{e}" for e in range(1, 6)]
    assert storage.list_names(root) == epochs + [checkpoint.POINTER]
    checkpoint.prune(model_dir, 3)  # the evaluator has read up to epoch 3; 4 and 5 are new
    assert storage.list_names(root) == epochs[1:] + [checkpoint.POINTER]
    checkpoint.prune(model_dir, 5)  # it has read them all
    assert storage.list_names(root) == epochs[3:] + [checkpoint.POINTER]
    import tensorflow as tf
    for epoch in (2, 3):  # gone, with the errors the evaluator takes as "already replaced"
        with pytest.raises((OSError, tf.errors.NotFoundError)):
            checkpoint.restore(_model(), model_dir, checkpoint.at_epoch(epoch))
