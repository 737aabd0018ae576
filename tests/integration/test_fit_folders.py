"""A fit without modelDir works in a sparktf-model-* folder of the temp dir: a failed fit
removes it; a saved model scores after it is gone (as it is when the session ends)."""

import os
import tempfile
import threading

import pytest

import sparktf
from sparktf.ml import TFEstimator, TFModel, scratch
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
    df = spark.createDataFrame(data.rows(X, y), "features array<double>, label double")

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
