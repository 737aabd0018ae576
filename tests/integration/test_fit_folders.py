"""A fit without modelDir works in a sparktf-model-* folder of the temp dir: a failed fit
removes it; a saved model scores after it is gone (as it is when the session ends)."""

import os
import tempfile
import threading

import pytest

import sparktf
from sparktf.ml import TFEstimator, TFModel
from sparktf.ml.runs import scratch
from tests.integration import data, models


def broken(hparams):
    raise RuntimeError("deliberately broken modelFn")


def _fit_folders(temp):
    return sorted(p for p in os.listdir(temp) if p.startswith(scratch.PREFIX))


def test_a_failed_fit_leaves_no_folder_and_a_saved_model_outlives_its_folder(
        spark, tmp_path, monkeypatch):
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    X, y = data.linear_rows(40)
    df = data.frame(spark, data.rows(X, y), "features array<double>, label double")

    with pytest.raises(sparktf.TaskFailedError, match="deliberately broken"):  # on a task
        TFEstimator(modelFn=broken, numWorkers=1, epochs=1).fit(df)
    assert _fit_folders(temp) == []
    lock = threading.Lock()
    with pytest.raises(sparktf.InvalidInputError, match="must be picklable"):  # on the driver
        TFEstimator(modelFn=lambda hparams: lock, numWorkers=1, epochs=1).fit(df)
    assert _fit_folders(temp) == []

    model = TFEstimator(modelFn=models.linear, numWorkers=1, epochs=1, batchSize=8).fit(df)
    [folder] = _fit_folders(temp)
    assert model.getModelPath().startswith(str(temp / folder) + os.sep)
    scored = model.transform(df).select("prediction").collect()
    model.write().save(str(tmp_path / "saved"))
    scratch.remove(str(temp / folder), os.getpid())  # what the end of the session does
    assert _fit_folders(temp) == []
    loaded = TFModel.load(str(tmp_path / "saved"))
    assert loaded.transform(df).select("prediction").collect() == scored


class _FailOnce:
    """A Keras callback: rank 0 fails the fit at the end of epoch 2 the first time (the
    fit lost mid-way, as a killed driver loses it); a marker file says it did."""

    def __new__(cls, marker):
        import json

        import keras

        class FailOnce(keras.callbacks.Callback):
            def on_epoch_end(self, epoch, logs=None):
                rank = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
                if epoch == 1 and rank == 0 and not os.path.exists(marker):
                    open(marker, "w").close()
                    raise RuntimeError("the fit is lost after epoch 2")
        return FailOnce()


def test_a_run_id_resumes_an_unfinished_fit_and_returns_a_finished_one(spark, tmp_path,
                                                                       caplog):
    import logging

    import numpy as np

    caplog.set_level(logging.INFO, logger="sparktf")
    X, y = data.linear_rows(60)
    df = data.frame(spark, data.rows(X, y), "features array<double>, label double")
    common = dict(modelFn=models.linear, numWorkers=2, epochs=4, batchSize=60,
                  learningRate=0.05, shuffle=False, modelDir=str(tmp_path / "m"))
    whole = TFEstimator(**common).fit(df)  # uninterrupted, in a folder of its own
    run = TFEstimator(runId="nightly", callbacks=[_FailOnce(str(tmp_path / "failed"))],
                      **common)
    with pytest.raises(sparktf.TaskFailedError, match="lost after epoch 2"):
        run.fit(df)
    assert os.path.exists(tmp_path / "m" / "nightly" / "run.json")
    resumed = run.fit(df)  # as a new driver would: the same runId
    np.testing.assert_allclose(resumed.getHistory()["loss"], whole.getHistory()["loss"],
                               rtol=1e-5)
    for a, b in zip(resumed.getKerasModel().get_weights(), whole.getKerasModel().get_weights(),
                    strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    assert "resuming after epoch 1" in caplog.text + "".join(
        r.getMessage() for r in caplog.records)
    again = run.fit(df)  # finished: returned without training
    assert "finished before" in caplog.text
    assert again.getHistory() == resumed.getHistory()
    assert again.getModelPath() == resumed.getModelPath()
    with pytest.raises(sparktf.InvalidInputError, match="learningRate: 0.05 then, 0.1 now"):
        TFEstimator(runId="nightly", **{**common, "learningRate": 0.1}).fit(df)
    with pytest.raises(sparktf.InvalidInputError, match="set modelDir as well"):
        TFEstimator(runId="x", modelFn=models.linear).fit(df)
