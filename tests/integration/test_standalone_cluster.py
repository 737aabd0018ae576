"""sparktf on a real Spark standalone cluster: a master and three workers, each a JVM of
its own started from the installed pyspark (``bin/spark-class``), and applications
submitted with ``spark-submit --master spark://...`` (``scripts/cluster_app.py``), as the
README's "Running on a real cluster" does it.

Run alone with ``make test-cluster``. The cluster is started by the module's fixture and
stopped at its end; nothing it started is left running.
"""

import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from tests import conftest

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]
APP = os.path.join(conftest.ROOT, "tests", "integration", "scripts", "cluster_app.py")
WORKERS = 3
# the applications that need 2 task slots take 2 of the 3 workers' cores (fewer executors
# importing TensorFlow on 2 machine cores); the worker-loss application takes all 3
TWO_SLOTS = ("--conf", "spark.cores.max=2")
START_TIMEOUT_S = 90


def spark_home() -> str:
    import pyspark
    return os.path.dirname(pyspark.__file__)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """A long-running JVM (master, worker, Connect server): its output goes to a log file,
    and ``wait_for`` blocks until a line matches (a blocking queue read with a deadline)."""

    def __init__(self, name: str, command: list[str], env: dict, log_dir: str):
        self.name, self.log_path = name, os.path.join(log_dir, f"{name}.log")
        self._lines: queue.Queue = queue.Queue()
        self.proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        threading.Thread(target=self._pump, name=f"sparktf-test-{name}", daemon=True).start()

    def _pump(self):
        with open(self.log_path, "w") as log:
            for line in self.proc.stdout:
                log.write(line)
                log.flush()
                self._lines.put(line)
        self._lines.put(None)

    def wait_for(self, pattern: str, timeout: float = START_TIMEOUT_S) -> re.Match:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                line = None
            if line is None:
                with open(self.log_path) as f:
                    tail = f.read()[-3000:]
                raise AssertionError(f"{self.name}: no line matching {pattern!r} "
                                     f"(exited: {self.proc.poll()}); its log ends:\n{tail}")
            found = re.search(pattern, line)
            if found:
                return found

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Cluster:
    """The standalone cluster of this module, and how to submit applications to it."""

    def __init__(self, workdir: str):
        self.workdir = workdir
        self.env = {**os.environ, "SPARK_HOME": spark_home(), "SPARK_LOCAL_IP": "127.0.0.1",
                    "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": conftest.ROOT}
        self.port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.daemons: list[Daemon] = []

    def spark_class(self, name: str, *args: str) -> Daemon:
        command = [os.path.join(spark_home(), "bin", "spark-class"), *args]
        daemon = Daemon(name, command, self.env, self.workdir)
        self.daemons.append(daemon)
        return daemon

    def start(self) -> None:
        master = self.spark_class("master", "org.apache.spark.deploy.master.Master",
                                  "--host", "127.0.0.1", "--port", str(self.port),
                                  "--webui-port", str(free_port()))
        master.wait_for(r"I have been elected leader")
        workers = [self.spark_class(f"worker-{i}", "org.apache.spark.deploy.worker.Worker",
                                    self.url, "--cores", "1", "--memory", "1g",
                                    "--host", "127.0.0.1", "--webui-port", str(free_port()),
                                    "--work-dir", os.path.join(self.workdir, f"work-{i}"))
                   for i in range(WORKERS)]
        for worker in workers:
            worker.wait_for(r"Successfully registered with master")

    def submit(self, scenario: str, *conf: str, timeout: float = 420) -> dict:
        """Runs ``cluster_app.py SCENARIO`` as an application of its own; its RESULT lines
        by name."""
        command = [os.path.join(spark_home(), "bin", "spark-submit"), "--master", self.url,
                   "--conf", "spark.executor.memory=1g", "--conf", "spark.driver.memory=1g",
                   "--conf", "spark.ui.enabled=false", *conf,
                   APP, scenario, self.workdir]
        return self._run(scenario, command, timeout)

    def submit_and_kill(self, scenario: str, when: str, *conf: str) -> re.Match:
        """Submits ``scenario`` and kills its driver (spark-submit's JVM and the Python
        driver under it: the whole process group) with SIGKILL when its output matches
        ``when``; the matching line."""
        command = [os.path.join(spark_home(), "bin", "spark-submit"), "--master", self.url,
                   "--conf", "spark.executor.memory=1g", "--conf", "spark.driver.memory=1g",
                   "--conf", "spark.ui.enabled=false", *conf, APP, scenario, self.workdir]
        app = Daemon(f"app-{scenario}", command, self.env, self.workdir)
        try:
            return app.wait_for(when, timeout=420)
        finally:
            os.killpg(app.proc.pid, signal.SIGKILL)
            app.proc.wait()

    def client(self, scenario: str, *args: str, timeout: float = 420) -> dict:
        return self._run(scenario, [sys.executable, APP, scenario, self.workdir, *args],
                         timeout)

    def _run(self, scenario: str, command: list[str], timeout: float) -> dict:
        done = subprocess.run(command, env=self.env, capture_output=True, text=True,
                              timeout=timeout)
        with open(os.path.join(self.workdir, f"app-{scenario}.log"), "w") as f:
            f.write(done.stdout + done.stderr)
        found = dict(line.split(" ", 2)[1:] for line in done.stdout.splitlines()
                     if line.startswith("RESULT "))
        assert done.returncode == 0 and found, (
            f"{scenario} failed ({done.returncode}):\n{done.stdout[-3000:]}\n"
            f"{done.stderr[-6000:]}")
        return {name: json.loads(value) for name, value in found.items()}

    def stop(self) -> None:
        for daemon in reversed(self.daemons):
            daemon.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    before = set(conftest.own_pids())
    found = Cluster(str(tmp_path_factory.mktemp("standalone")))
    try:
        found.start()
        yield found
    finally:
        found.stop()
        # every JVM, Python worker and task process the cluster started ends with it
        left = [pid for pid in set(conftest.own_pids()) - before if pid != os.getpid()]
        assert conftest.wait_gone(left, 60) == [], f"processes left running: {left}"


@pytest.fixture(scope="module")
def first_app(cluster):
    """The first application: a pipeline fitted and saved, then two fits at once."""
    return cluster.submit("first", *TWO_SLOTS)


@pytest.fixture(scope="module")
def second_app(cluster, first_app):
    """The second application: a Spark Connect server in front of the cluster
    (``spark-submit`` of its server class), and a client that scores the first
    application's saved pipeline, then fits and scores through it. One application for
    both, as each start costs the executors' TensorFlow import."""
    port = free_port()
    server = cluster.spark_class(
        "connect-server", "org.apache.spark.deploy.SparkSubmit",
        "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--master", cluster.url, "--conf", f"spark.connect.grpc.binding.port={port}",
        "--conf", "spark.executor.memory=1g", "--conf", "spark.ui.enabled=false", *TWO_SLOTS,
        "--name", "sparktf-connect-server")
    server.wait_for(r"Spark Connect server started")
    try:
        return cluster.client("second", f"sc://127.0.0.1:{port}")
    finally:
        server.stop()


def test_a_pipeline_fitted_in_one_application_scores_identically_in_another(
        cluster, first_app, second_app):
    saved = first_app["pipeline_save"]
    print(f"\nfirst application on {saved['master']} ({saved['executors']} executors): "
          f"loss per epoch {saved['history']['loss']}")
    print("modelDir holds: " + ", ".join(saved["model_dir"]))
    assert saved["master"] == cluster.url and saved["executors"] == 2
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


def test_two_fits_at_once_in_one_application_equal_the_same_fits_in_turn(first_app):
    found = first_app["concurrent"]
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


def test_spark_connect_in_front_of_the_cluster_fits_and_scores(second_app):
    found = second_app["connect"]
    print(f"\nthrough Spark Connect: loss per epoch {found['history']['loss']}, "
          f"accuracy {found['accuracy']:.3f}")
    assert len(found["history"]["loss"]) == 2 and found["rows"] == 450
    assert found["accuracy"] > 0.8


def _equal_to_keras(history: dict, keras_history: dict) -> float:
    """The largest relative difference between a history and Keras's (same keys)."""
    assert set(history) == set(keras_history), (history, keras_history)
    return _max_rel_diff(history, keras_history)


def test_a_driver_killed_mid_run_and_submitted_again_resumes_the_run(cluster):
    """spark-submit of a 4-epoch run (runId) killed with SIGKILL after epoch 2; the same
    application submitted again trains epochs 3-4 only, and ends where Keras's
    uninterrupted fit does. Its ModelCheckpoint(save_best_only) and CSVLogger(append)
    were written once, by the chief, across both drivers."""
    killed = cluster.submit_and_kill("driver_killed", r"^KILL-ME (.*)", *TWO_SLOTS)
    assert [re.search(r"epoch (\d)/4", line).group(1)
            for line in json.loads(killed.group(1))] == ["1", "2"]
    found = cluster.submit("driver_resumed", *TWO_SLOTS)["driver_resumed"]
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


def test_a_worker_machine_lost_for_good_and_the_fit_goes_on_with_fewer_workers(cluster):
    """3 workers, minWorkers=1, full batch: a worker machine dies when epoch 2 begins; the
    relaunch takes the 2 slots left, from the checkpoint of epoch 1, and the history and
    weights equal Keras's uninterrupted fit."""
    # a relaunch waits 5 s (not 60) for the lost machine's executor to be replaced
    found = cluster.submit("worker_lost", "--conf", "spark.sparktf.relaunchWait=5")[
        "worker_lost"]
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
    """examples/Dockerfile, as the README's Kubernetes section uses it."""
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
