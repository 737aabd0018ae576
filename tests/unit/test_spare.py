"""Spare processes (sparktf.runtime.process.spare): a fork per task, bounded lives, no leftovers.

Real processes and real TensorFlow imports; the Python worker is this test process.
"""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap

import cloudpickle
import pytest

from sparktf._driver.launch import spare_idle_s
from sparktf._protocol.wire import DONE_LINE
from sparktf.errors import InvalidInputError
from sparktf.runtime.process import spare
from tests.conftest import spare_pids, wait_gone

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(autouse=True)
def no_spare_left():
    yield
    spare.stop()


def _env(**extra) -> dict:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=root)  # the functions run are this module's
    env.update(extra)
    return env


def _describe(args, ctx):
    import os
    import sys
    return {"pid": os.getpid(), "ppid": os.getppid(), "cwd": os.getcwd(),
            "tensorflow": "tensorflow" in sys.modules, "marker": os.environ.get("MARK"),
            # Keras's optional helpers: deferred by the spare, not loaded by running a task
            "helpers": [m for m in ("sklearn", "matplotlib.pyplot") if m in sys.modules]}


def _run(proc, workdir: str, fn=_describe) -> dict:
    """Runs ``fn`` in a task process by the child protocol; returns its result."""
    path = os.path.join(workdir, "payload.pkl")
    with open(path, "wb") as f:
        cloudpickle.dump((cloudpickle.dumps((fn, None)), None, {}), f)
    result = os.path.join(workdir, "result.pkl")
    proc.stdin.write(json.dumps({"payload": path, "result": result, "cwd": workdir,
                                 "temp": workdir}) + "\n")
    proc.stdin.flush()
    output = []
    for line in proc.stdout:
        if line.rstrip("\n") == DONE_LINE:
            break
        output.append(line)
    proc.stdin.close()
    assert proc.wait(timeout=60) is not None
    with open(result, "rb") as f:
        status, value, _ = cloudpickle.load(f)
    assert status == "ok", (value, output)
    return value


def test_each_task_gets_a_fresh_fork_of_one_spare_that_has_imported_tensorflow():
    env = _env(MARK="a")
    seen = []
    for _ in range(3):
        with tempfile.TemporaryDirectory() as workdir:
            proc = spare.request(env, 30).process()
            assert isinstance(proc, spare.Forked)
            seen.append(_run(proc, workdir))
            spare.stop_process(proc)
            assert os.path.realpath(seen[-1]["cwd"]) == os.path.realpath(workdir)
    spares = spare_pids()
    print("\nforks:", [(s["pid"], s["ppid"]) for s in seen], "spares:", spares)
    assert len({s["pid"] for s in seen}) == 3, "one process per task"
    assert len({s["ppid"] for s in seen}) == 1, "all forked by the same spare"
    assert seen[0]["ppid"] in spares
    assert all(s["tensorflow"] and s["marker"] == "a" for s in seen)
    assert importlib.util.find_spec("sklearn") and importlib.util.find_spec("matplotlib")
    assert [s["helpers"] for s in seen] == [[], [], []]


def test_a_spare_serves_one_environment_and_a_new_one_replaces_it():
    with tempfile.TemporaryDirectory() as workdir:
        first = spare.request(_env(MARK="a"), 30).process()
        assert _run(first, workdir)["marker"] == "a"
        spare.stop_process(first)
        old = first_parent = spare._spare.proc.pid
        second = spare.request(_env(MARK="b"), 30).process()
        result = _run(second, workdir)
        spare.stop_process(second)
    assert result["marker"] == "b" and result["ppid"] != first_parent
    assert wait_gone([old], 30) == [], "the spare of the old environment was stopped"


def _threads_and_devices(args, ctx):
    """The task's variables, and what TensorFlow made of its thread counts: the threads
    its first op started."""
    import os

    import tensorflow as tf
    before = len(os.listdir("/proc/self/task"))
    tf.reduce_sum(tf.ones((64, 64))).numpy()
    return {"ppid": os.getppid(), "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "inter": os.environ.get("TF_NUM_INTEROP_THREADS"),
            "new_threads": len(os.listdir("/proc/self/task")) - before}


def test_tasks_differing_only_in_devices_and_threads_share_one_spare():
    """A parameter server (more inter-op threads, no GPU) and a worker on another GPU are
    forked by the same spare; each process has its own values, and TensorFlow sizes its
    pools by them (they are read when the runtime starts, after the fork)."""
    seen = []
    for threads, cuda in (("1", "-1"), ("6", "0"), ("1", None)):
        env = _env(MARK="per-task", TF_NUM_INTEROP_THREADS=threads,
                   TF_NUM_INTRAOP_THREADS=threads)
        if cuda is None:
            env.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            env["CUDA_VISIBLE_DEVICES"] = cuda
        with tempfile.TemporaryDirectory() as workdir:
            proc = spare.request(env, 30).process()
            seen.append(_run(proc, workdir, fn=_threads_and_devices))
            spare.stop_process(proc)
    print("\nper-task processes:", seen)
    assert len({s["ppid"] for s in seen}) == 1, "one spare served all three"
    assert [(s["inter"], s["cuda"]) for s in seen] == [("1", "-1"), ("6", "0"), ("1", None)]
    assert seen[1]["new_threads"] >= seen[0]["new_threads"] + 8  # 2 x 5 more pool threads
    assert seen[2]["new_threads"] == seen[0]["new_threads"]


def test_an_idle_spare_leaves_and_the_next_task_gets_a_new_one():
    env = _env(MARK="idle")
    with tempfile.TemporaryDirectory() as workdir:
        proc = spare.request(env, 2).process()
        first = _run(proc, workdir)
        spare.stop_process(proc)
        assert wait_gone([first["ppid"]], 60) == [], "idle spare still alive after 2 s idle"
        proc = spare.request(env, 2).process()
        second = _run(proc, workdir)
        spare.stop_process(proc)
    assert second["ppid"] != first["ppid"]


def test_a_spare_that_left_while_asked_means_the_task_starts_its_own_process():
    env = _env(MARK="gone")
    req = spare.request(env, 30)
    os.kill(spare._spare.proc.pid, signal.SIGKILL)  # gone before it could answer
    assert req.process() is None
    with tempfile.TemporaryDirectory() as workdir:
        proc = spare.spawn(env, workdir)
        assert _run(proc, workdir)["marker"] == "gone"
        spare.stop_process(proc)


def test_a_forked_process_dies_with_its_task_and_a_spare_with_its_python_worker():
    """A 'task' process asks the spare for a fork, then is killed: the fork goes with it;
    then its Python worker goes and the spare goes too."""
    task = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import os, sys
        from sparktf.runtime.process import spare
        env = dict(os.environ, MARK="orphan")
        proc = spare.request(env, 300).process()
        print(proc.pid, spare._spare.proc.pid, flush=True)
        sys.stdin.read()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=_env())
    forked, spare_pid = map(int, task.stdout.readline().split())
    with open(f"/proc/{forked}/comm") as f:
        assert f.read().strip() == spare.TASK_NAME.decode()
    task.kill()
    task.wait()
    assert wait_gone([forked, spare_pid], 30) == []


@pytest.mark.parametrize("conf, expected", [
    ({}, 60.0), ({"spark.sparktf.spareIdleTimeout": "10"}, 10.0),
    ({"spark.sparktf.spareIdleTimeout": "2.5s"}, 2.5),
    ({"spark.sparktf.spareIdleTimeout": "0"}, 0.0),
    ({"spark.sparktf.spareIdleTimeout": "1min"}, 60.0),
    ({"spark.sparktf.spareIdleTimeout": "1500ms"}, 1.5),
    ({"spark.python.worker.reuse": "false"}, 0.0)])
def test_spare_idle_timeout_from_the_spark_conf(conf, expected):
    assert spare_idle_s(conf) == expected


@pytest.mark.parametrize("bad", ["-1", "soon", "inf", "nan", "5 parsecs", "1e400"])
def test_a_bad_spare_idle_timeout_is_refused(bad):
    with pytest.raises(InvalidInputError, match="spareIdleTimeout must be a time >= 0"):
        spare_idle_s({"spark.sparktf.spareIdleTimeout": bad})


def test_a_request_abandoned_before_its_answer_costs_no_wait_and_no_process():
    """A task that ends early (bad input, another rank failed) drops its request at once,
    even while the spare still imports TensorFlow; the next task gets a process of its
    own, not the abandoned one, and the abandoned one does not linger."""
    env = _env(MARK="abandoned")
    first = spare.request(env, 30)  # a new spare: still importing TensorFlow
    first.abandon()  # returns at once: nothing waits for the import
    with tempfile.TemporaryDirectory() as workdir:
        proc = spare.request(env, 30).process()
        assert isinstance(proc, spare.Forked)
        seen = _run(proc, workdir)
        spare.stop_process(proc)
    assert seen["marker"] == "abandoned" and seen["pid"] == proc.pid
    tasks = [pid for pid in _children_of(spare_pids()) if pid != proc.pid]
    assert wait_gone(tasks, 30) == [], "the abandoned request's process is still running"


def _children_of(parents: list[int]) -> list[int]:
    children = []
    for parent in parents:
        try:
            with open(f"/proc/{parent}/task/{parent}/children") as f:
                children += [int(p) for p in f.read().split()]
        except OSError:
            pass
    return children


def test_stopping_a_dead_process_whose_stdin_holds_unsent_lines_does_not_raise():
    """Teardown after a failure: the process died, its stdin still buffers a line; closing
    it must not raise BrokenPipeError over the failure being reported."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, bufsize=1)
    proc.wait()
    proc.stdin.write("{\"share\": 1}")  # no newline: still in the buffer
    spare.stop_process(proc)
    assert proc.stdin.closed and proc.stdout.closed
