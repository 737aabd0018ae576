"""What a fit logs to MLflow (``sparktf.ml.tracking.log_fit``), in a local SQLite store,
for a history with a vector metric (``F1Score(average=None)``: a list per epoch)."""

import logging
from types import SimpleNamespace

import pytest

from tests import conftest

mlflow = pytest.importorskip("mlflow", reason="pip install 'sparktf[mlflow]'")


def test_a_vector_metric_is_logged_as_a_metric_per_element(tmp_path, monkeypatch, caplog):
    from sparktf.ml import tracking

    logged_models = []
    monkeypatch.setattr(tracking, "log_model",  # no SavedModel here
                        lambda model, schema: logged_models.append((model, schema)))
    history = {"loss": [0.5, 0.25], "f1_score": [[0.0, 0.5, 1.0], [0.25, 0.5, 0.75]]}
    times = {"epoch": [1, 2], "own_seconds": [[1.5, 3.0], [1.25, 2.5]],
             "wait_seconds": [[1.5, 0.0], [1.25, 0.0]], "steps": [4, 4], "executors": []}
    model = SimpleNamespace(getHistory=lambda: history, getWorkerTimes=lambda: times)
    # an experiment of its own: a test before it may have set one of another store
    with conftest.mlflow_experiment(tmp_path, "fit"):
        with caplog.at_level(logging.WARNING, logger="sparktf"), mlflow.start_run() as run:
            tracking.log_fit(SimpleNamespace(extractParamMap=dict), model)
        client = mlflow.tracking.MlflowClient()
        found = {key: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)]
                 for key in ("loss", "f1_score/0", "f1_score/1", "f1_score/2",
                             "worker_own_seconds/1", "worker_wait_seconds/0")}
    # no warning (the new store's creation is logged at INFO)
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not warned, warned
    assert found == {"loss": [(1, 0.5), (2, 0.25)], "f1_score/0": [(1, 0.0), (2, 0.25)],
                     "f1_score/1": [(1, 0.5), (2, 0.5)], "f1_score/2": [(1, 1.0), (2, 0.75)],
                     # each worker's own and waited seconds (issue 54), by epoch
                     "worker_own_seconds/1": [(1, 3.0), (2, 2.5)],
                     "worker_wait_seconds/0": [(1, 1.5), (2, 1.25)]}
    assert logged_models == [(model, None)]


def test_a_search_trial_s_vector_metric_is_logged_per_element(tmp_path):
    """A HalvingSearch's child run of a trial (``sparktf.ml.tuning.tracking._child``) took
    each value for a number: math.isfinite(list) failed the search's logging."""
    from sparktf.ml.tuning import tracking

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    try:
        client = mlflow.tracking.MlflowClient()
        experiment = client.create_experiment("search")
        parent = client.create_run(experiment).info.run_id
        record = {"trial": 0, "stopReason": "finished", "params": {"units": 4}, "epochs": 2,
                  "history": {"loss": [0.5, float("nan")], "best_epoch": [1],
                              "f1_score": [[0.0, 0.5], [0.25, float("inf")]]},
                  "rungEpochs": [2], "metrics": [0.5]}
        tracking._child(client, experiment, parent, record)
        child, = [r for r in client.search_runs([experiment])
                  if r.data.tags.get("mlflow.parentRunId") == parent]
        found = {key: [(m.step, m.value) for m in client.get_metric_history(
            child.info.run_id, key)] for key in ("loss", "f1_score/0", "f1_score/1")}
    finally:
        mlflow.set_tracking_uri(None)
    # non-finite values are left out, as for a scalar
    assert found == {"loss": [(1, 0.5)], "f1_score/0": [(1, 0.0), (2, 0.25)],
                     "f1_score/1": [(1, 0.5)]}


def test_importing_the_tracking_module_warns_of_nothing():
    """MLflow warns of a PythonModel whose predict has no type hint, once per process that
    imports sparktf's (every fit logged, every model loaded); found by review."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-W", "default", "-c", "import sparktf.ml.tracking"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "type hints" not in done.stderr, done.stderr[-2000:]
