"""sparktf on a real Spark standalone cluster: a master and three workers, each a JVM of
its own started from the installed pyspark (``bin/spark-class``), and applications
submitted with ``spark-submit --master spark://...`` (``scripts/cluster_app.py``), as the
"Running on a real cluster" (docs/guide/clusters.md) does it.

The cluster and its applications are one job (``scripts/standalone_job.py``), run beside
the in-process tests; these tests check what it found. Run alone with
``make test-cluster``. The cluster is stopped at the job's end; nothing it started is
left running.
"""

import re
import subprocess

import pytest

from tests import conftest

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1500)]
WORKERS = 3  # scripts/standalone_job.py
JOB = conftest.Job("standalone", "tests/integration/scripts/standalone_job.py",
                   conftest.Job.WORKDIR, expected_s=280, timeout_s=1400)


@pytest.fixture(scope="module")
def found():
    found = JOB.finished().results()
    assert found["left"] == [], f"processes the cluster started are left running: {found['left']}"
    return found


def scenario(found: dict, name: str) -> dict:
    """One scenario's findings; its error (with the application's output) if it failed."""
    result = found[name]
    assert "error" not in result, f"{name}:\n{result['error']}"
    return result


def test_a_pipeline_fitted_in_one_application_scores_identically_in_another(found):
    first_app, second_app = scenario(found, "first"), scenario(found, "second")
    saved = first_app["pipeline_save"]
    print(f"\nfirst application on {saved['master']} ({saved['executors']} executors): "
          f"loss per epoch {saved['history']['loss']}")
    print("modelDir holds: " + ", ".join(saved["model_dir"]))
    assert saved["master"] == found["cluster"]["url"] and saved["executors"] == 2
    assert len(saved["history"]["loss"]) == 3 and saved["history"]["accuracy"][-1] > 0.8
    assert any("checkpoint" in f for f in saved["model_dir"]), saved["model_dir"]
    assert any(f.endswith("saved_model.pb") for f in saved["model_dir"]), saved["model_dir"]
    loaded = second_app["pipeline_load"]
    assert loaded["rows"] == 450
    assert loaded["transform_equals_saved_app"], "the second application scored differently"
    assert loaded["sql_equals_transform"]


def _max_rel_diff(a: dict, b: dict) -> float:
    worst = 0.0
    for key in a:
        for x, y in zip(a[key], b[key], strict=True):
            worst = max(worst, abs(x - y) / max(abs(y), 1e-12))
    return worst


def test_two_fits_at_once_in_one_application_equal_the_same_fits_in_turn(found):
    found = scenario(found, "first")["concurrent"]
    diffs = [_max_rel_diff(t, s) for t, s in zip(found["threads"], found["sequential"])]
    cv_diff = max(abs(a - b) for a, b in zip(found["cv_parallel"], found["cv_sequential"]))
    print(f"\ntwo threads vs in turn, max relative difference per fit: {diffs}; "
          f"CrossValidator parallelism=2 vs 1, avgMetrics {found['cv_parallel']} vs "
          f"{found['cv_sequential']}")
    print("epoch lines while two fits ran:\n  " + "\n  ".join(found["thread_lines"]))
    assert max(diffs) < 1e-4
    assert cv_diff < 1e-9
    # each fit has its own channel and progress: every epoch of both fits is reported once,
    # and the lines say which fit they belong to
    labels = [re.match(r"sparktf: (fit \d+): epoch (\d)/", line)
              for line in found["thread_lines"]]
    assert all(labels), found["thread_lines"]
    by_fit: dict = {}
    for m in labels:
        by_fit.setdefault(m.group(1), []).append(int(m.group(2)))
    assert sorted(by_fit.values()) == [[1, 2], [1, 2]], by_fit
    # 2 folds x 2 points, then the best point on all rows; 1 epoch each; 5 fits
    assert len(found["cv_lines"]) == 2 * 2 + 1, found["cv_lines"]
    assert len({line.split(":")[1] for line in found["cv_lines"]}) == 5, found["cv_lines"]


def test_spark_connect_in_front_of_the_cluster_fits_and_scores(found):
    found = scenario(found, "second")["connect"]
    print(f"\nthrough Spark Connect: loss per epoch {found['history']['loss']}, "
          f"accuracy {found['accuracy']:.3f}")
    assert len(found["history"]["loss"]) == 2 and found["rows"] == 450
    assert found["accuracy"] > 0.8


def _equal_to_keras(history: dict, keras_history: dict) -> float:
    """The largest relative difference between a history and Keras's (same keys)."""
    assert set(history) == set(keras_history), (history, keras_history)
    return _max_rel_diff(history, keras_history)


def test_a_driver_killed_mid_run_and_submitted_again_resumes_the_run(found):
    """spark-submit of a 4-epoch run (runId) killed with SIGKILL after epoch 2; the same
    application submitted again trains epochs 3-4 only, and ends where Keras's
    uninterrupted fit does. Its ModelCheckpoint(save_best_only) and CSVLogger(append)
    were written once, by the chief, across both drivers."""
    result = scenario(found, "driver_killed")
    assert [re.search(r"epoch (\d)/4", line).group(1)
            for line in result["killed_lines"]] == ["1", "2"]
    found = result["driver_resumed"]
    epochs = [re.search(r"epoch (\d)/4", line).group(1) for line in found["epoch_lines"]]
    history_diff = _equal_to_keras(found["history"], found["keras_history"])
    print(f"\nkilled after epoch 2; the second driver trained epochs {epochs}; history vs "
          f"Keras's uninterrupted fit: {history_diff:.2e}, weights {found['weights_vs_keras']:.2e}"
          f", best.keras vs Keras's ModelCheckpoint {found['best_vs_keras']:.2e}")
    assert epochs == ["3", "4"], found["epoch_lines"]  # epochs 1-2 were not trained again
    assert history_diff < 1e-5 and found["weights_vs_keras"] < 1e-5
    assert found["best_vs_keras"] < 1e-5
    assert [row["epoch"] for row in found["csv"]] == ["0", "1", "2", "3"], found["csv"]
    for ours, theirs in zip(found["csv"], found["keras_csv"], strict=True):
        assert abs(float(ours["loss"]) - float(theirs["loss"])) <= 1e-5 * float(theirs["loss"])
    # the callbacks' files once, in the user's folder; the run's files in its own folder
    assert [f for f in found["workdir_files"] if f.startswith(("best", "epochs"))] == [
        "best.keras", "epochs.csv"]
    assert {"run.json", "result.json"} <= set(found["run_files"]), found["run_files"]


def test_a_search_whose_driver_is_killed_resumes_into_the_uninterrupted_search(found):
    """spark-submit of a HalvingSearch (runId) killed with SIGKILL while its promoted trial
    trains its 4th epoch; submitted again, the search replays its journal, the trial
    continues from its checkpoint of epoch 3, and the search ends as the same search
    uninterrupted: trials, metrics at each rung (float precision), best trial. Each epoch
    began once but the one the kill interrupted."""
    result = scenario(found, "search_driver_killed")
    found = result["search_resumed"]
    print(f"\nkilled when the {result['killed_when']}; the second driver said:\n  " +
          "\n  ".join(line for line in found["lines"]
                      if "resumes" in line or "continues its job" in line))
    assert any("resumes from its journal" in line and "1 job that was running" in line
               for line in found["lines"]), found["lines"]
    for a, b in zip(found["resumed"], found["whole"], strict=True):
        assert {k: v for k, v in a.items() if k not in ("metrics", "history")} == \
            {k: v for k, v in b.items() if k not in ("metrics", "history")}
        assert _max_rel_diff({"m": a["metrics"]}, {"m": b["metrics"]}) < 1e-6, (a, b)
        assert _max_rel_diff(a["history"], b["history"]) < 1e-6, (a, b)
    assert found["best"][0] == found["best"][1]
    resumed, whole = (sorted(map(tuple, found["begun"][k])) for k in ("resumed", "whole"))
    rate = result["killed_when"].split()[2]
    assert resumed == sorted([*whole, (rate, "3")]), (resumed, whole)


def test_a_worker_machine_lost_for_good_and_the_fit_goes_on_with_fewer_workers(found):
    """3 workers, minWorkers=1, full batch: a worker machine dies when epoch 2 begins; the
    relaunch takes the 2 slots left, from the checkpoint of epoch 1, and the history and
    weights equal Keras's uninterrupted fit."""
    found = scenario(found, "worker_lost")["worker_lost"]
    diff = _equal_to_keras(found["history"], found["keras_history"])
    print(f"\nkilled worker JVM {found['killed']['worker']} and its executor "
          f"{found['killed']['executor']} when epoch 2 began; the driver said:\n  "
          + "\n  ".join(found["warnings"]) +
          f"\nhistory vs Keras's uninterrupted fit: {diff:.2e}, weights "
          f"{found['weights_vs_keras']:.2e}")
    relaunches = [w for w in found["warnings"] if "Relaunching" in w]
    assert len(relaunches) == 1 and "ExecutorLostError" in relaunches[0], found["warnings"]
    assert "on 2 of 3 workers: the cluster has 2 task slots now (minWorkers=1)" \
        in relaunches[0], relaunches
    # epoch 1 trained once: the relaunch resumed from its checkpoint, not from the start
    epochs = [int(re.search(r"epoch (\d)/3", line).group(1)) for line in found["epoch_lines"]]
    assert epochs == [1, 2, 3], found["epoch_lines"]
    assert diff < 1e-5 and found["weights_vs_keras"] < 1e-5
    assert found["executors_after"] == WORKERS - 1


def test_a_search_whose_trial_loses_its_machine_relaunches_it_and_goes_on(found):
    """issue 48: a trial of a HalvingSearch is a fit: its lost machine relaunches it from
    its checkpoint, and it ends as the uninterrupted fit (Keras's, full-batch)."""
    result = scenario(found, "worker_lost")["search_lost"]
    records = {r["trial"]: r for r in result["records"]}
    print(*records.values(), sep="\n")
    assert result["killed"] and result["executors_after"] == WORKERS - 2
    assert result["best"] == 0 and records[0]["rungEpochs"] == [1, 3]
    assert [r["epochs"] for r in records.values()] == [3, 1, 1]
    assert _equal_to_keras(records[0]["history"], result["keras_history"]) < 1e-5


def _container_engine() -> str | None:
    """docker or podman, if one is installed and its engine answers."""
    import shutil
    for tool in ("docker", "podman"):
        if shutil.which(tool) and subprocess.run([tool, "info"], capture_output=True,
                                                 timeout=60).returncode == 0:
            return tool
    return None


@pytest.mark.timeout(3600)  # a first build downloads TensorFlow
def test_the_kubernetes_example_image_builds_and_has_sparktf():
    """examples/Dockerfile, as docs/guide/clusters.md's Kubernetes section uses it."""
    engine = _container_engine()
    if engine is None:
        pytest.skip("no container engine answers here (docker/podman missing, or its daemon "
                    "is not running): examples/Dockerfile not built")
    tag = "sparktf-example-test"
    build = subprocess.run([engine, "build", "-f", "examples/Dockerfile", "-t", tag, "."],
                           cwd=conftest.ROOT, capture_output=True, text=True, timeout=3600)
    assert build.returncode == 0, build.stderr[-4000:]
    try:
        found = subprocess.run([engine, "run", "--rm", "--entrypoint", "python3", tag, "-c",
                                "import sparktf, pyspark; print(pyspark.__version__)"],
                               capture_output=True, text=True, timeout=300)
        assert found.returncode == 0, found.stderr[-4000:]
    finally:
        subprocess.run([engine, "rmi", "-f", tag], capture_output=True, timeout=300)
