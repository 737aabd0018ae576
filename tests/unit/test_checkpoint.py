"""Per-epoch checkpoints keep the same number of folders on every filesystem."""

import numpy as np
import pytest
from pyarrow import fs

from sparktf._executor import storage
from sparktf._executor.training import checkpoint


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
