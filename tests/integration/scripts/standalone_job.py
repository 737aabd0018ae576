"""Driver for test_standalone_cluster.py: a Spark standalone cluster (a master and three
workers, each a JVM of its own started from the installed pyspark with ``bin/spark-class``)
and the applications submitted to it with ``spark-submit --master spark://...``
(``cluster_app.py``), as the "Running on a real cluster" (docs/guide/clusters.md) does it.

A job of its own (tests/conftest.py: Job), so that its applications run beside the
in-process tests. Each scenario's findings go to stdout as one ``RESULT name {json}``
line; a scenario that failed gives ``{"error": ...}`` and the others still run. The
cluster is stopped at the end, and ``RESULT left [...]`` lists the processes it started
that outlived it (none, when all is well).

    python tests/integration/scripts/standalone_job.py WORKDIR
"""

import contextlib
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
import traceback

from tests import conftest

APP = os.path.join(conftest.ROOT, "tests", "integration", "scripts", "cluster_app.py")
WORKERS = 3
# the applications that need 2 task slots take 2 of the 3 workers' cores (fewer executors
# importing TensorFlow on 2 machine cores); the worker-loss application takes all 3
TWO_SLOTS = ("--conf", "spark.cores.max=2")
START_TIMEOUT_S = 90


def emit(name, value):
    print(f"\nRESULT {name} {json.dumps(value)}", flush=True)


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

    def __init__(self, name: str, command: list[str], env: dict, log_dir: str,
                 stderr_apart: bool = False):
        """``stderr_apart``: stderr to ``<log>.stderr``, so that the log holds the driver's
        own lines whole (Spark copies them in chunks, which its JVM's lines could split)."""
        self.name, self.log_path = name, os.path.join(log_dir, f"{name}.log")
        self._lines: queue.Queue = queue.Queue()
        apart = open(f"{self.log_path}.stderr", "w") if stderr_apart else None
        with apart or contextlib.nullcontext() as err:
            self.proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                         stderr=err or subprocess.STDOUT, text=True,
                                         start_new_session=True)
        self._pumping = threading.Thread(target=self._pump, name=f"sparktf-test-{name}",
                                         daemon=True)
        self._pumping.start()

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

    def output(self) -> str:
        """All it printed, once it has ended."""
        self.proc.wait(timeout=60)
        self._pumping.join(timeout=60)
        with open(self.log_path) as f:
            return f.read()

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
        return self._run(scenario, self._submit_command(scenario, *conf), timeout)

    def submit_and_kill(self, scenario: str, when: str, *conf: str, timeout: float = 420,
                        printed: dict | None = None) -> re.Match:
        """Submits ``scenario`` and kills its driver (spark-submit's JVM and the Python
        driver under it: the whole process group) with SIGKILL when its output matches
        ``when``; the matching line. ``printed`` receives the RESULT lines it printed, by
        name, whether or not the line came (an AssertionError with the end of its output and
        of its stderr when it did not)."""
        app = Daemon(f"app-{scenario}", self._submit_command(scenario, *conf), self.env,
                     self.workdir, stderr_apart=True)
        try:
            found = app.wait_for(when, timeout=timeout)
        except AssertionError as e:
            with open(f"{app.log_path}.stderr") as f:
                raise AssertionError(f"{e}\nits stderr ends:\n{f.read()[-4000:]}") from None
        finally:
            with contextlib.suppress(ProcessLookupError):  # it may have ended by itself
                os.killpg(app.proc.pid, signal.SIGKILL)
            if printed is not None:
                printed.update(conftest.Finished(0, app.output(), "").results())
        return found

    def client(self, scenario: str, *args: str, timeout: float = 420) -> dict:
        return self._run(scenario, [sys.executable, APP, scenario, self.workdir, *args],
                         timeout)

    def _submit_command(self, scenario: str, *conf: str) -> list[str]:
        return [os.path.join(spark_home(), "bin", "spark-submit"), "--master", self.url,
                "--conf", "spark.executor.memory=1g", "--conf", "spark.driver.memory=1g",
                "--conf", "spark.ui.enabled=false", *conftest.SPARK_SUBMIT_SETTINGS, *conf, APP,
                scenario, self.workdir]

    def _run(self, scenario: str, command: list[str], timeout: float) -> dict:
        done = subprocess.run(command, env=self.env, capture_output=True, text=True,
                              timeout=timeout)
        with open(os.path.join(self.workdir, f"app-{scenario}.log"), "w") as f:
            f.write(done.stdout + done.stderr)
        found = conftest.Finished(done.returncode, done.stdout, done.stderr).results()
        if not found:
            raise RuntimeError(f"{scenario} printed no RESULT line:\n{done.stdout[-3000:]}\n"
                               f"{done.stderr[-6000:]}")
        return found

    def stop(self) -> None:
        for daemon in reversed(self.daemons):
            daemon.stop()


def second(cluster: Cluster) -> dict:
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
        *conftest.SPARK_SUBMIT_SETTINGS, "--name", "sparktf-connect-server")
    server.wait_for(r"Spark Connect server started")
    try:
        return cluster.client("second", f"sc://127.0.0.1:{port}")
    finally:
        server.stop()


KILLED: dict = {}  # the first application's KILL-ME line, for drivers_killed_and_resumed


def first_and_driver_killed(cluster: Cluster) -> dict:
    """The first application: a pipeline fitted and saved (for the second), two fits at
    once, then a 4-epoch run (runId) whose driver is killed with SIGKILL after epoch 2
    (one application for both: each start costs the executors' TensorFlow import).
    ``first``'s results are those it printed before the kill."""
    found: dict = {}
    try:  # first's part and the run's up to the kill: up to 420 s each
        KILLED["line"] = cluster.submit_and_kill("first_then_driver_killed", r"^KILL-ME (.*)",
                                                 *TWO_SLOTS, timeout=840, printed=found)
    except AssertionError as e:  # the run was not killed mid-run: its failure alone
        KILLED["failure"] = str(e)
    if "first_failed" in found:
        return {"error": found["first_failed"]}
    if not {"pipeline_save", "concurrent"} <= found.keys():
        return {"error": KILLED.get("failure", "the first application printed no results")}
    return {name: found[name] for name in ("pipeline_save", "concurrent")}


def drivers_killed_and_resumed(cluster: Cluster) -> None:
    """The killed run's application submitted again (the run resumes), which then starts a
    search (runId) and is killed with SIGKILL while a promoted trial trains; the search's
    application submitted again: results ``driver_killed`` and ``search_driver_killed``."""
    if "line" not in KILLED:
        raise RuntimeError("the first application was not killed mid-run:\n"
                           + KILLED.get("failure", "see 'first'"))
    resumed: dict = {}
    search_killed = cluster.submit_and_kill("driver_resumed_search_killed", r"^KILL-ME (.*)",
                                            *TWO_SLOTS, printed=resumed)
    emit("driver_killed", {"killed_lines": json.loads(KILLED["line"].group(1)), **resumed})
    try:  # from here on, a failure is the search's alone
        emit("search_driver_killed", {"killed_when": json.loads(search_killed.group(1)),
                                      **cluster.submit("search_resumed", *TWO_SLOTS)})
    except BaseException:  # noqa: BLE001 - reported to its test
        emit("search_driver_killed", {"error": traceback.format_exc()[-8000:]})


SCENARIOS = {
    # a pipeline fitted and saved, two fits at once (pipeline_save, concurrent), and the
    # run whose driver is killed
    "first": first_and_driver_killed,
    "second": second,  # needs the first's saved pipeline
    "drivers_killed": drivers_killed_and_resumed,  # emits its two results itself
    # a relaunch waits 5 s (not 60) for the lost machine's executor to be replaced
    "worker_lost": lambda cluster: cluster.submit(
        "worker_lost", "--conf", "spark.sparktf.relaunchWait=5"),
}
# the results a scenario emits itself, where they are not its own name
RESULTS = {"drivers_killed": ("driver_killed", "search_driver_killed")}


def main(workdir: str) -> None:
    before = set(conftest.own_pids())
    cluster = Cluster(workdir)
    try:
        cluster.start()
        emit("cluster", {"url": cluster.url})
        for name, scenario in SCENARIOS.items():
            try:
                found = scenario(cluster)
                if found is not None:
                    emit(name, found)
            except BaseException:  # noqa: BLE001 - reported to its tests; the others go on
                for result in RESULTS.get(name, (name,)):
                    emit(result, {"error": traceback.format_exc()[-8000:]})
    finally:
        cluster.stop()
        # every JVM, Python worker and task process the cluster started ends with it
        left = [pid for pid in set(conftest.own_pids()) - before if pid != os.getpid()]
        emit("left", conftest.wait_gone(left, 60))


if __name__ == "__main__":
    main(sys.argv[1])
