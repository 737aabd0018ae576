"""Shared test helpers, and the jobs that run beside the in-process tests (``Job``)."""

import contextlib
import hashlib
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def _spark_settings() -> list[str]:
    """Every JVM the tests start runs with tests/spark-conf/spark-defaults.conf (why: that
    file), and, where ``make`` wrote one for this environment, maps Spark's classes from a
    class-data-sharing archive (scripts/spark_jvm_archive.py: a session's start takes a
    third less CPU). Java takes the archive only if no directory on the class path holds a
    file, and Spark puts SPARK_CONF_DIR first on it: with an archive, SPARK_CONF_DIR is an
    empty folder and the settings reach Spark as ``--properties-file``, which every
    pyspark driver gets from PYSPARK_SUBMIT_ARGS, and a standalone cluster's daemons (whose
    JVMs read no such file) from SPARK_DAEMON_JAVA_OPTS. What a ``spark-submit`` needs
    besides (the standalone cluster's applications): the list returned."""
    defaults = os.path.join(ROOT, "tests", "spark-conf", "spark-defaults.conf")
    here = os.path.join(sys.prefix, "spark-jvm")
    archive, empty = os.path.join(here, "spark.jsa"), os.path.join(here, "conf")
    if not _archive_fits(archive, empty):
        os.environ["SPARK_CONF_DIR"] = os.path.dirname(defaults)
        # a pytest of another environment started by this one (the lowest versions' run)
        # must not take this one's archive: its class path differs, and Java would then
        # share no class at all, not even its own
        if "spark-jvm" in os.environ.get("PYSPARK_SUBMIT_ARGS", ""):
            del os.environ["PYSPARK_SUBMIT_ARGS"]
        if "SharedArchiveFile" in os.environ.get("SPARK_DAEMON_JAVA_OPTS", ""):
            del os.environ["SPARK_DAEMON_JAVA_OPTS"]
        return []
    with open(defaults) as f:
        text = re.sub(r"^(spark\.(driver|executor)\.extraJavaOptions\s.*)$",
                      rf"\1 -XX:SharedArchiveFile={archive}", f.read(), flags=re.M)
    path = os.path.join(here, f"spark-defaults-{hashlib.sha1(text.encode()).hexdigest()[:12]}")
    if not os.path.exists(path):
        with tempfile.NamedTemporaryFile("w", dir=here, delete=False) as f:
            f.write(text)
        os.replace(f.name, path)  # the jobs' pytests write the same file beside this one
    os.environ["SPARK_CONF_DIR"] = empty
    os.environ["SPARK_DAEMON_JAVA_OPTS"] = re.search(
        r"^spark\.driver\.extraJavaOptions\s+(.*)$", text, flags=re.M).group(1)
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"--properties-file {path} pyspark-shell"
    return ["--properties-file", path]


def _archive_fits(archive: str, empty: str) -> bool:
    """Whether this environment has an archive written for the pyspark it holds now: Java
    ignores a stale one without a word, and every JVM would start slower than without it."""
    import sysconfig
    # this environment's pyspark (a Spark application's driver imports it from a zip)
    jars = os.path.join(sysconfig.get_paths()["purelib"], "pyspark", "jars")
    try:
        return not os.listdir(empty) and os.path.getmtime(archive) >= os.path.getmtime(jars)
    except OSError:  # no archive, or no pyspark here
        return False


SPARK_SUBMIT_SETTINGS = _spark_settings()

# Every process this test run (or this job's driver script) starts inherits this tag, Spark's
# JVMs, Python workers, spares and task processes included: the checks for processes left
# behind look only at processes carrying their own run's tag, not at those of a job running
# beside them (or of another Spark application on the machine).
RUN_TAG = "SPARKTF_TEST_RUN"
JOB_NAME = "SPARKTF_TEST_JOB"  # in a Job's processes: the name of the Job
os.environ.setdefault(RUN_TAG, uuid.uuid4().hex)



def local_cluster(executors: int, app_name: str):
    """A real multi-executor Spark (local-cluster: one core and 1 GB a separate executor
    JVM), as the integration and generated tests use it; ``stop()`` it when done."""
    from pyspark.sql import SparkSession

    # sparktf must arrange the executors' Python itself: tests do not set PYSPARK_PYTHON.
    os.environ.pop("PYSPARK_PYTHON", None)
    session = (SparkSession.builder.master(f"local-cluster[{executors},1,1024]")
               .appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.driver.memory", "1g")
               .config("spark.sql.shuffle.partitions", str(2 * executors))
               .config("spark.python.worker.reuse", "true")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    return session


@contextlib.contextmanager
def mlflow_experiment(tmp_path, name: str):
    """An MLflow SQLite store under ``tmp_path`` with a new experiment ``name`` active (its
    artifacts there too); yields the experiment's id. On exit neither stays active:
    ``mlflow.set_experiment`` keeps the id in a global and in ``MLFLOW_EXPERIMENT_ID``, and a
    later test's new store has no experiment of that id ("No Experiment with id=1 exists")."""
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    try:
        experiment = mlflow.create_experiment(
            name, artifact_location=(tmp_path / "artifacts").as_uri())
        mlflow.set_experiment(experiment_id=experiment)
        yield experiment
    finally:
        reset_mlflow()


def reset_mlflow() -> None:
    """No tracking store and no experiment set in this process any more (as at its start):
    what a test or a page's example set must not reach the next test, nor a job started
    after it (which inherits ``MLFLOW_EXPERIMENT_ID``)."""
    import mlflow
    from mlflow.tracking import fluent

    fluent._active_experiment_id = None  # what set_experiment set, with the variable
    os.environ.pop("MLFLOW_EXPERIMENT_ID", None)
    mlflow.set_tracking_uri(None)


CHILD_MARKER = "sparktf.runtime.process.child"
SPARE_NAME = "sparktf-spare"  # sparktf.runtime.process.spare.SPARE_NAME


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def child_pids() -> list[int]:
    """PIDs of task processes (main_fn runners) alive on this machine; idle spares
    (``spare_pids``) are not task processes."""
    return [pid for pid in pids_with(CHILD_MARKER) if _comm(pid) != SPARE_NAME]


def spare_pids() -> list[int]:
    """PIDs of the spare processes (TensorFlow imported, waiting to fork a task process)."""
    return [pid for pid in pids_with(CHILD_MARKER) if _comm(pid) == SPARE_NAME]


def ancestor(pid: int, marker: bytes) -> int:
    """The nearest ancestor of ``pid`` whose command line contains ``marker`` (e.g. the
    executor JVM above a task process: task -> spare -> Python worker -> daemon -> JVM)."""
    while pid > 1:
        with open(f"/proc/{pid}/status") as f:
            pid = int(next(line for line in f if line.startswith("PPid:")).split()[1])
        if marker in _read(f"/proc/{pid}/cmdline"):
            return pid
    raise RuntimeError(f"no ancestor process runs {marker!r}")


def pids_with(marker: str) -> list[int]:
    """PIDs of this run's processes (``RUN_TAG``) whose command line contains ``marker``."""
    return [pid for pid in own_pids() if marker.encode() in _read(f"/proc/{pid}/cmdline")]


def own_pids(run: str | None = None) -> list[int]:
    """PIDs of the processes started by this test run (or job), wherever they were
    reparented: those whose environment carries this run's ``RUN_TAG`` (or ``run``)."""
    tag = f"{RUN_TAG}={run or os.environ[RUN_TAG]}".encode()
    return [int(entry) for entry in os.listdir("/proc")
            if entry.isdigit() and tag in _read(f"/proc/{entry}/environ").split(b"\0")]


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:  # gone meanwhile, or not ours to read
        return b""


def listening_ports() -> set[int]:
    """The TCP ports this run's processes listen on."""
    inodes = set()
    for pid in own_pids():
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # LISTEN, one of ours
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


HARNESS_THREAD = "sparktf-test-"  # the name prefix of the threads the jobs (Job) run on


def driver_threads() -> list[str]:
    """The names of this process's threads, less the test harness's own (the jobs' thread
    and their timers come and go while the tests run, whatever sparktf does)."""
    return sorted(t.name for t in threading.enumerate()
                  if not t.name.startswith(HARNESS_THREAD))


def wait_gone(pids, timeout: float = 30.0) -> list[int]:
    """Blocks (pidfd, bounded) until the processes exit; returns those still alive."""
    alive = []
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        try:
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                alive.append(pid)
        finally:
            os.close(fd)
    return alive


# (model kind, workers, batch size, worst key, its relative difference): filled by
# the Keras conformance tests, printed at the end of the run.
CONFORMANCE: list[tuple] = []
# (data kind, workers, worst key, its relative difference): filled by test_data_kinds
DATA_KINDS: list[tuple] = []


class Finished:
    """What a job's process left: its exit code and output."""

    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr

    def results(self) -> dict:
        """The ``RESULT name {json}`` lines of a driver script as ``{name: value}``, once it
        exited 0."""
        assert self.returncode == 0, \
            f"exit {self.returncode}; output tail:\n{(self.stdout + self.stderr)[-4000:]}"
        found = {}
        for line in self.stdout.splitlines():
            if line.startswith("RESULT "):
                name, value = line[len("RESULT "):].split(" ", 1)
                found[name] = json.loads(value)
        return found


class Job:
    """A process of its own that tests wait for: a driver script with its own SparkSession
    (or a notebook, or a driver on a terminal), run beside the in-process tests.

    Declared at module level; ``pytest_collection_modifyitems`` starts the jobs of the
    collected modules at once, in ``SPARKTF_TEST_LANES`` background threads (default 2;
    longest first), and moves those modules to the end of the run, so that the jobs use
    the CPU the in-process tests leave idle (they wait on timeouts, barriers and JVMs for
    about a fifth of the run) and, once those are done, the second core. Two lanes, not
    one: a job waits too (its JVMs' start, its own barriers), and with one lane beside the
    in-process tests the two cores were idle for 28% of the run. ``finished()`` blocks
    until the job's process has ended, running it here if no one has started it yet.
    Set SPARKTF_TEST_BACKGROUND=0 to run every job in the test that needs it.

    ``script``: a Python file under the project root, run by this interpreter; or a whole
    command (a list), such as another pytest run, run as it is in the project root.
    ``argv`` after the script: strings, and ``Job.WORKDIR`` for a fresh folder.
    ``summary_lines``: the last lines of its output to show at the end of the test run.
    ``terminal``: the process runs on a pseudo-terminal of 40 x 120 (stdout and stderr
    both on it; ``stdout`` is what was drawn).
    """

    WORKDIR = object()
    declared: list["Job"] = []

    def __init__(self, name: str, script: str | list[str], *argv, expected_s: float,
                 terminal: bool = False, timeout_s: float = 850, summary_lines: int = 0):
        self.name, self.script, self.argv = name, script, argv
        self.summary_lines = summary_lines
        self.expected_s, self.terminal, self.timeout_s = expected_s, terminal, timeout_s
        self._lock = threading.Lock()
        self._state = "new"  # -> "running" -> "done"
        self._done = threading.Event()
        self._finished: Finished | None = None
        self._proc: subprocess.Popen | None = None
        self._ended = False  # the test session ended it: it starts no process any more
        self._workdirs: list[str] = []
        self._tag = uuid.uuid4().hex  # the RUN_TAG of every process the job starts
        Job.declared.append(self)

    def claim(self) -> bool:
        """Takes the job to run it (once)."""
        with self._lock:
            if self._state != "new":
                return False
            self._state = "running"
            return True

    def finished(self) -> Finished:
        if self.claim():
            self.run()
        self._done.wait()
        return self._finished

    def run(self) -> None:
        started = time.monotonic()
        try:
            self._finished = self._execute()
        except BaseException as e:  # noqa: BLE001 - reported to the test that waits
            self._finished = Finished(-1, "", f"{type(e).__name__}: {e}")
        finally:
            self.seconds = time.monotonic() - started
            self._state = "done"
            self._done.set()

    def _execute(self) -> Finished:
        args = []
        for arg in self.argv:
            if arg is Job.WORKDIR:
                self._workdirs.append(tempfile.mkdtemp(prefix=f"sparktf-{self.name}-"))
                arg = self._workdirs[-1]
            args.append(arg)
        env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
        # its own processes, and their job's name for bench/suite_cpu.py's CPU by job
        env.update(PYTHONPATH=ROOT, **{RUN_TAG: self._tag, JOB_NAME: self.name})
        if isinstance(self.script, list):
            command = [*self.script, *args]
        else:
            command = [sys.executable, os.path.join(ROOT, self.script), *args]
        if self.terminal:
            return self._on_terminal(command, env)
        if not self._start(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env=env, start_new_session=True, cwd=ROOT):
            return self._not_run()
        try:
            stdout, stderr = self._proc.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            self.stop()
            stdout, stderr = self._proc.communicate()
            stderr += f"\n[test] {self.name}: stopped after {self.timeout_s} s"
        return Finished(self._proc.returncode, stdout, stderr)

    def _start(self, command, **popen) -> bool:
        """Starts the job's process, unless cleanup() has ended the job: under the lock,
        so that cleanup() never misses a process started as it ran."""
        with self._lock:
            if self._ended:
                return False
            self._proc = subprocess.Popen(command, **popen)
            return True

    def _not_run(self) -> Finished:
        """What a job ended before its process started gives: no process, no folder left."""
        self._remove_workdirs()
        return Finished(-1, "", f"[test] {self.name}: not run, the session ended")

    def _remove_workdirs(self) -> None:
        for workdir in self._workdirs:
            shutil.rmtree(workdir, ignore_errors=True)

    def _on_terminal(self, command, env) -> Finished:
        import fcntl
        import pty
        import struct
        import termios

        controller, terminal = pty.openpty()
        # a terminal window of 40 rows x 120 columns, as a user's (a new pty has no size)
        fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        if not self._start(command, stdin=terminal, stdout=terminal, stderr=terminal,
                           env=env, close_fds=True, start_new_session=True):
            os.close(terminal)
            os.close(controller)
            return self._not_run()
        os.close(terminal)
        timer = threading.Timer(self.timeout_s, self.stop)
        timer.name = f"{HARNESS_THREAD}{self.name}-timeout"
        timer.start()
        chunks = []
        try:
            while True:
                try:
                    chunk = os.read(controller, 65536)  # blocks; EIO once the process ended
                except OSError:
                    break
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            timer.cancel()
            os.close(controller)
        return Finished(self._proc.wait(), b"".join(chunks).decode(errors="replace"), "")

    def stop(self) -> None:
        """Ends the job's process and everything it started: its process group, and the
        processes that left it (a daemon in a session of its own) by their ``RUN_TAG``."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in own_pids(self._tag):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def cleanup(self) -> None:
        """At the session's end (after ``-x``, Ctrl-C or a failure too): a job not yet
        claimed is never run, one claimed but not yet started starts no process, and a
        running one is ended; then its folders are removed."""
        with self._lock:
            self._ended = True
            if self._state == "new":
                self._state = "done"
                self._finished = self._not_run()
                self._done.set()
        self.stop()
        self._remove_workdirs()


def _jobs_of(module) -> list[Job]:
    """The jobs a test module declares: module attributes that are a ``Job`` or a dict of them."""
    found = []
    for value in vars(module).values() if module is not None else ():
        if isinstance(value, dict):
            found += [v for v in value.values() if isinstance(v, Job)]
        elif isinstance(value, Job):
            found.append(value)
    return found


@pytest.hookimpl(trylast=True)  # after -m, -k and --deselect: only the jobs of tests that run
def pytest_collection_modifyitems(session, config, items):
    """Moves the modules that wait for jobs to the end and starts their jobs (``Job``)."""
    jobs = list(dict.fromkeys(job for item in items
                              for job in _jobs_of(getattr(item, "module", None))))
    if (not jobs or config.option.collectonly
            or os.environ.get("SPARKTF_TEST_BACKGROUND", "1") == "0"):
        return
    queue = sorted(jobs, key=lambda job: -job.expected_s)
    # at the end, the tests wait for the jobs the background lanes reach last first:
    # a job not yet started then runs in the test, so both lanes drain the queue
    rank = {job: i for i, job in enumerate(queue)}
    last = {item: max((rank[j] for j in _jobs_of(getattr(item, "module", None))),
                      default=None)
            for item in items}
    # the unit tests first: they mostly wait (timeouts, a spare's idle end), which the jobs
    # fill; then the in-process integration tests; then the modules that read the jobs
    unit = os.path.join(ROOT, "tests", "unit")
    items[:] = (sorted((i for i in items if last[i] is None),
                       key=lambda i: not str(i.path).startswith(unit)) +
                sorted((i for i in items if last[i] is not None), key=lambda i: -last[i]))

    def drain():
        for job in queue:
            if job.claim():
                job.run()

    lanes = max(1, int(os.environ.get("SPARKTF_TEST_LANES", "2")))
    threads = [threading.Thread(target=drain, name=f"{HARNESS_THREAD}jobs-{lane}", daemon=True)
               for lane in range(lanes)]
    for thread in threads:
        thread.start()
    config._sparktf_jobs = (threads, jobs)


def pytest_sessionfinish(session):
    threads, jobs = getattr(session.config, "_sparktf_jobs", ((), Job.declared))
    for job in jobs:
        job.cleanup()
    deadline = time.monotonic() + 60
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))


def pytest_terminal_summary(terminalreporter):
    write = terminalreporter.write_line
    ran = [job for job in Job.declared if hasattr(job, "seconds")]
    if ran:
        write("")
        write("Jobs run beside the in-process tests (their own driver processes): "
              + ", ".join(f"{job.name} {job.seconds:.0f} s" for job in ran))
    for job in ran:
        if job.summary_lines and job._finished is not None:
            write("")
            write(f"== {job.name} (exit {job._finished.returncode}), the end of its output:")
            for line in job._finished.stdout.splitlines()[-job.summary_lines:]:
                write(line)
    if DATA_KINDS:
        write("")
        write("Data kinds: TFEstimator.fit + transform / SQL vs keras Model.fit + predict on "
              "the same rows (max relative difference)")
        write(f"{'data kind':40} {'workers':>7}  {'max rel diff':>12}  worst")
        for name, workers, key, diff in DATA_KINDS:
            write(f"{name:40} {workers:>7}  {diff:>12.2e}  {key}")
    if not CONFORMANCE:
        return
    write("")
    write("Keras conformance: TFEstimator.fit vs keras Model.fit on the same rows "
          "(max relative difference over the history and predictions)")
    write(f"{'model kind':40} {'workers':>7} {'batch':>6}  {'max rel diff':>12}  worst")
    for name, workers, batch, key, diff in CONFORMANCE:
        write(f"{name:40} {workers:>7} {batch:>6}  {diff:>12.2e}  {key}")
