"""Parameter servers, the evaluator side-car and a training ResourceProfile, for real.

These need more task slots than the shared session has (chief + workers + ps +
evaluator), so one driver process (``scripts/async_jobs.py``) runs every scenario
on its own local-cluster[3,2,1024] and reports what it found; the tests check it.
"""

import numpy as np
import pytest

from tests import conftest
from tests.integration import data

SCENARIOS = ["ps_regression", "run_ps", "evaluator_ps0", "evaluator_ps1", "ps_parquet",
             "task_cpus", "ps_kinds", "ps_tutorial"]
JOB = conftest.Job("async", "tests/integration/scripts/async_jobs.py", conftest.Job.WORKDIR,
                   *SCENARIOS, expected_s=280)

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def found():
    return JOB.finished().results()


def test_parameter_server_training_converges_to_known_coefficients(found):
    result = found["ps_regression"]
    np.testing.assert_allclose(result["weights"][:3], data.COEFFICIENTS, atol=0.05)
    assert abs(result["weights"][3] - data.INTERCEPT) < 0.05
    history = result["history"]
    assert set(history) == {"loss", "mae"} and len(history["loss"]) == 5
    assert history["loss"][-1] < history["loss"][0] / 100
    assert result["max_abs_error"] < 0.1  # the exported model scores through TFModel
    # TensorBoard: per-epoch scalars, and the loss every 50 steps (32 steps an epoch)
    assert result["scalars"]["epoch_loss"] == list(range(1, 6))
    assert result["scalars"]["batch_loss"] == list(range(50, 5 * 32 + 1, 50))


def test_parameter_servers_and_workers_are_gone_after_fit(found):
    result = found["ps_regression"]
    assert result["children_left"] == []
    # the driver heard each worker and parameter server start serving (2 workers, 1 ps)
    assert len(result["serving"]) == 3, result["serving"]


def test_run_gives_user_code_a_parameter_server_cluster(found):
    result = found["run_ps"]
    workers_0, workers_1, chief, ps = result["results"]  # ranks: workers, chief, ps
    assert [workers_0, workers_1, ps] == ["worker", "worker", "ps"]  # allTasks=True
    assert chief["counter"] == 20.0  # every scheduled step ran once, on the workers
    assert "/job:ps/" in chief["device"]
    # the same program with sparktf serving the ps and worker tasks: its own serve() and
    # awaitServers() keep working; main runs on the chief only
    workers_0, workers_1, chief, ps = result["chief_only"]
    assert [workers_0, workers_1, ps] == [None, None, None]
    assert chief["counter"] == 20.0
    assert result["children_left"] == []


def test_the_parameter_server_tutorial_runs_unchanged_on_keras_2_chosen_on_the_driver(found):
    """TensorFlow's tutorial's body in main(args, ctx), nothing else: no branch on its role
    (sparktf serves the ps and worker tasks), TF_USE_LEGACY_KERAS=1 set on the driver."""
    workers_0, workers_1, chief, ps_0, ps_1 = found["ps_tutorial"]["results"]
    assert [workers_0, workers_1, ps_0, ps_1] == [None] * 4
    print(chief)
    assert chief["keras"].startswith("tf_keras")  # Keras 2, as the driver chose
    assert chief["shards"] == 2  # the embedding sharded over both parameter servers
    assert chief["last_loss"] < chief["first_loss"]
    assert chief["accuracy"] > 0.6
    import tensorflow as tf
    loaded = tf.saved_model.load(chief["saved"])
    assert loaded.signatures  # the chief's saved model loads


@pytest.mark.parametrize("scenario", ["evaluator_ps0", "evaluator_ps1"])
def test_evaluator_metrics_join_the_history_once_per_epoch(found, scenario):
    result = found[scenario]
    history = result["history"]
    assert {"loss", "mae", "val_loss", "val_mae"} <= set(history)
    assert len(history["val_loss"]) == len(history["loss"]) == 3
    assert history["val_loss"][-1] < history["val_loss"][0]
    epochs = [int(line.split("epoch ")[1].split()[0]) for line in result["evaluator_lines"]]
    assert epochs == [1, 2, 3]  # the side-car evaluated every checkpoint, in order


def test_parquet_mode_with_parameter_servers(found):
    result = found["ps_parquet"]
    np.testing.assert_allclose(result["weights"][:3], data.COEFFICIENTS, atol=0.05)
    assert len(result["history"]["val_loss"]) == 5  # the chief validated every epoch
    assert result["history"]["val_loss"][-1] < 1e-3


def test_task_cpus_reach_the_training_tasks_through_a_resource_profile(found):
    result = found["task_cpus"]
    assert [t["threads"] for t in result["tasks"]] == ["2", "2"]  # TF sized to the profile
    assert len({t["executor"] for t in result["tasks"]}) == 2  # one 2-CPU task per executor
    assert "needs 4 concurrent task slots" in result["refused"]
    assert "offers 3" in result["refused"]


def test_parameter_servers_train_strings_sequences_and_two_labels(found):
    result = found["ps_kinds"]
    history = result["history"]
    assert {"loss", "price_loss", "dear_loss"} <= set(history) and len(history["loss"]) == 4
    assert history["price_loss"][-1] < history["price_loss"][0] / 2
    assert result["scored"] == 600
