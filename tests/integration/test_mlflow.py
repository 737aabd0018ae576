"""MLflow, for real (a local SQLite tracking store): a fit logs its Params, its per-epoch
metrics and a model MLflow loads and serves (for every kind of model the fit makes);
TFModel scores a runs:/ URI; autolog on and off."""

import logging

import numpy as np
import pandas as pd
import pytest
from pyspark.ml import PipelineModel
from pyspark.ml.linalg import SparseVector, VectorUDT
from pyspark.ml.util import DefaultParamsReader

from sparktf.ml import TFEstimator, TFModel
from tests import conftest
from tests.integration import data, model_kinds, models

mlflow = pytest.importorskip("mlflow", reason="pip install 'sparktf[mlflow]'")
pytestmark = pytest.mark.timeout(900)


@pytest.fixture
def store(tmp_path):
    # Artifacts (models) under tmp_path too: a SQLite store's default is ./mlruns.
    with conftest.mlflow_experiment(tmp_path, "sparktf-tests") as experiment_id:
        yield mlflow.tracking.MlflowClient(), experiment_id
        mlflow.pyspark.ml.autolog(disable=True)


@pytest.fixture(scope="module")
def frame(spark):
    X, y = data.linear_rows(300, seed=3)
    return data.frame(spark, data.rows(X, y), "features array<double>, label double")


def _est():
    return TFEstimator(modelFn=models.linear, numWorkers=2, epochs=3, batchSize=64,
                       learningRate=0.05, validationFraction=0.2, seed=5)


def test_a_fit_in_a_run_logs_params_metrics_and_a_model_mlflow_serves(store, frame, tmp_path):
    client, _ = store
    with mlflow.start_run() as run:
        model = _est().fit(frame)
    logged = client.get_run(run.info.run_id).data
    assert logged.params["numWorkers"] == "2" and logged.params["epochs"] == "3"
    assert logged.params["learningRate"] == "0.05"
    history = model.getHistory()
    assert {"loss", "val_loss"} <= set(history)
    for key, values in history.items():
        steps = client.get_metric_history(run.info.run_id, key)
        assert [m.step for m in steps] == [1, 2, 3], key
        assert [m.value for m in steps] == pytest.approx(values, rel=1e-9), key
    times = model.getWorkerTimes()  # each worker's own and waited seconds (issue 54)
    for key in ("own_seconds", "wait_seconds"):
        for rank in (0, 1):
            steps = client.get_metric_history(run.info.run_id, f"worker_{key}/{rank}")
            assert [(m.step, m.value) for m in steps] == [
                (e, pytest.approx(t[rank], rel=1e-9)) for e, t in zip(times["epoch"],
                                                                      times[key])], key
    served = mlflow.pyfunc.load_model(f"runs:/{run.info.run_id}/model",
                                       dst_path=str(tmp_path))
    rows = frame.toPandas()
    predicted = served.predict(rows[["features"]])["prediction"].to_numpy()
    expected = np.array([r.prediction for r in model.transform(frame).collect()])
    print("\nmax |pyfunc - transform|:", np.abs(predicted - expected).max())
    np.testing.assert_allclose(predicted, expected, rtol=1e-6, atol=1e-6)

    from_uri = TFModel(modelPath=f"runs:/{run.info.run_id}/model", featuresCol="features")
    again = np.array([r.prediction for r in from_uri.transform(frame).collect()])
    np.testing.assert_allclose(again, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", list(model_kinds.KINDS))
def test_every_kind_of_model_is_logged_and_served_with_every_output(spark, store, name,
                                                                    tmp_path, mlflow_warnings):
    kind = model_kinds.KINDS[name]
    df = model_kinds.frame(spark, kind)
    _, experiment = store
    with mlflow.start_run() as run:
        model = model_kinds.estimator(kind).fit(df)
    logged = mlflow.search_logged_models(
        experiment_ids=[experiment], filter_string=f"source_run_id = '{run.info.run_id}'",
        output_format="list")
    assert [m.name for m in logged] == ["model"]
    served = mlflow.pyfunc.load_model(f"runs:/{run.info.run_id}/model",
                                       dst_path=str(tmp_path))
    rows = df.toPandas()
    expected = model.transform(df).toPandas()
    inputs = [rows[list(kind.inputs)]]
    if name == "assembled":  # ml Vectors, as VectorAssembler gives them, numpy arrays, lists
        assert any(isinstance(v, SparseVector) for v in rows["features"])
        inputs += [pd.DataFrame({"features": rows["features"].map(lambda v: v.toArray())}),
                   pd.DataFrame({"features": rows["features"].map(lambda v: list(v))})]
    for frame in inputs:
        predicted = served.predict(frame)
        assert list(predicted.columns) == list(kind.outputs)
        for column in kind.outputs:
            np.testing.assert_allclose(predicted[column].to_numpy(np.float64),
                                       expected[column].to_numpy(np.float64),
                                       rtol=1e-6, atol=1e-6, err_msg=column)
    _has_signature_and_example(f"runs:/{run.info.run_id}/model", kind.inputs, kind.outputs,
                               tmp_path, {f.name: f.dataType for f in df.schema})


def _has_signature_and_example(uri, inputs, outputs, tmp_path, spark_types=None):
    """The logged model's signature names the input columns (typed as the fitted frame's,
    where it was a fit) and the output columns; its input example serves as MLflow's
    scoring server would take it."""
    info = mlflow.models.get_model_info(uri)
    print(f"\n{uri}: {info.signature}")
    assert info.signature.inputs.input_names() == list(inputs)
    assert sorted(info.signature.outputs.input_names()) == sorted(outputs)
    kinds = {spec.name: type(spec.type).__name__ for spec in info.signature.inputs.inputs}
    for column, dtype in (spark_types or {}).items():
        if column in kinds:  # a vector column takes any cell: MLflow's Array refuses ml Vectors
            assert kinds[column] == ("AnyType" if isinstance(dtype, VectorUDT) else
                                     "Array" if dtype.typeName() == "array" else "DataType")
    local = mlflow.artifacts.download_artifacts(uri, dst_path=str(tmp_path / "served"))
    serving = mlflow.models.Model.load(local).get_serving_input(local)
    assert serving is not None, "no input example was logged"
    scored = mlflow.models.validate_serving_input(uri, serving)
    assert sorted(scored.columns) == sorted(outputs) and len(scored) == 1
    mlflow.pyfunc.load_model(uri)


@pytest.fixture
def mlflow_warnings():
    """MLflow's warnings while the test runs: logging a model without a signature or an
    input example, or loading one, warns."""
    records = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    logging.getLogger("mlflow").addHandler(handler)
    yield records
    logging.getLogger("mlflow").removeHandler(handler)
    assert not [r.getMessage() for r in records]


def test_a_keras_model_from_elsewhere_is_logged_with_its_signature(store, tmp_path,
                                                                    mlflow_warnings):
    import keras

    keras.utils.set_random_seed(2)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    x = keras.layers.GRU(4)(keras.layers.Embedding(20, 4, mask_zero=True)(tokens))
    model = keras.Model(tokens, keras.layers.Dense(1)(x))
    model.compile("adam", "mse")
    with mlflow.start_run() as run:
        scorer = TFModel.from_keras(model, str(tmp_path / "gru"), featuresCol="tokens")
    uri = f"runs:/{run.info.run_id}/model"
    _has_signature_and_example(uri, ["tokens"], ["prediction"], tmp_path)
    served = mlflow.pyfunc.load_model(uri)
    rows = pd.DataFrame({"tokens": [[3, 4, 5], [7]]})
    got = served.predict(rows)["prediction"].to_numpy()
    expected = [model.predict(np.array([r]), verbose=0)[0, 0] for r in rows["tokens"]]
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    assert TFModel(modelPath=uri, featuresCol="tokens").getModelPath() == uri
    assert scorer.getModelPath() == str(tmp_path / "gru")


def test_autolog_on_records_the_fit_and_off_records_nothing(store, frame):
    client, experiment = store
    mlflow.pyspark.ml.autolog()
    _est().fit(frame)  # autolog opens the run around fit
    runs = client.search_runs([experiment])
    assert len(runs) == 1
    assert len(client.get_metric_history(runs[0].info.run_id, "loss")) == 3
    assert runs[0].data.params["epochs"] == "3"
    mlflow.pyspark.ml.autolog(disable=True)
    _est().fit(frame)  # no run active: nothing is logged, no run is created
    assert len(client.search_runs([experiment])) == 1


def test_a_registered_model_is_scored_from_its_models_uri_and_saved(spark, store, frame,
                                                                    tmp_path):
    with mlflow.start_run() as run:
        model = _est().fit(frame)
    version = mlflow.register_model(f"runs:/{run.info.run_id}/model", "sparktf-linear")
    by_name = TFModel(modelPath=f"models:/sparktf-linear/{version.version}",
                      featuresCol="features")
    expected = np.array([r.prediction for r in model.transform(frame).collect()])
    np.testing.assert_allclose([r.prediction for r in by_name.transform(frame).collect()],
                               expected, rtol=1e-6, atol=1e-6)

    # Saved alone and in a pipeline: the stage holds a copy of the SavedModel the address
    # names, and its metadata says where that came from.
    by_run = TFModel(modelPath=f"runs:/{run.info.run_id}/model", featuresCol="features")
    for i, uri_model in enumerate([by_run, by_name]):
        source = uri_model.getModelPath()
        uri_model.write().save(str(tmp_path / f"alone{i}"))
        PipelineModel(stages=[uri_model]).write().save(str(tmp_path / f"pipeline{i}"))
        alone = TFModel.load(str(tmp_path / f"alone{i}"))
        staged = PipelineModel.load(str(tmp_path / f"pipeline{i}")).stages[0]
        stage, = (tmp_path / f"pipeline{i}" / "stages").iterdir()
        for loaded, folder in [(alone, tmp_path / f"alone{i}"), (staged, stage)]:
            assert loaded.getModelPath().startswith(str(folder))
            metadata = DefaultParamsReader.loadMetadata(str(folder), spark)
            assert metadata["sparktfModelSource"] == source
            assert metadata["paramMap"]["modelPath"] == source
            np.testing.assert_array_equal(
                [r.prediction for r in loaded.transform(frame).collect()],
                [r.prediction for r in uri_model.transform(frame).collect()])


def test_a_tracking_store_that_fails_costs_a_warning_not_the_fit(store, frame, tmp_path,
                                                                 caplog):
    import logging

    caplog.set_level(logging.WARNING, logger="sparktf")
    good = mlflow.get_tracking_uri()
    with mlflow.start_run() as run:
        broken = tmp_path / "not-a-folder"
        broken.write_text("a file where the store's folder should be")
        mlflow.set_tracking_uri(f"sqlite:///{broken}/mlflow.db")  # every call now fails
        try:
            model = _est().fit(frame)
            _est().fit(frame)
        finally:
            mlflow.set_tracking_uri(good)  # so that the run can end
    assert len(model.getHistory()["loss"]) == 3
    warnings = [r.getMessage() for r in caplog.records
                if "could not log the fit to MLflow" in r.getMessage()]
    assert len(warnings) == 2, warnings  # each time, not once per process
    assert all(run.info.run_id in w for w in warnings), warnings


def test_a_subclassed_model_comes_back_as_keras_from_every_place_it_is_kept(
        store, frame, tmp_path):
    """getKerasModel of a subclassed model (its class registered on the driver only): from
    the fit, a saved TFModel, a saved pipeline, runs:/ and models:/. Before: 'loading
    weights into a model that has not yet been built' in the fit's session, and no .keras
    at all from MLflow."""
    with mlflow.start_run() as run:
        model = TFEstimator(modelFn=models.subclassed, numWorkers=1, epochs=1, batchSize=64,
                            learningRate=0.05).fit(frame)
    version = mlflow.register_model(f"runs:/{run.info.run_id}/model", "sparktf-scaled")
    model.write().save(str(tmp_path / "alone"))
    PipelineModel(stages=[model]).write().save(str(tmp_path / "pipeline"))
    features = np.array([r.features for r in frame.collect()], "float32")
    expected = np.array([r.prediction for r in model.transform(frame).collect()])
    for where, source in [
            ("fit", model), ("saved", TFModel.load(str(tmp_path / "alone"))),
            ("pipeline", PipelineModel.load(str(tmp_path / "pipeline")).stages[0]),
            ("runs:/", TFModel(modelPath=f"runs:/{run.info.run_id}/model")),
            ("models:/", TFModel(modelPath=f"models:/sparktf-scaled/{version.version}"))]:
        keras_model = source.getKerasModel()
        assert type(keras_model).__name__ == "Scaled", where
        np.testing.assert_allclose(keras_model.predict(features, verbose=0)[:, 0], expected,
                                   rtol=1e-5, atol=1e-6, err_msg=where)
