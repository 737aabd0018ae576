"""One driver at a time owns a run (sparktf.ml.runs.lock): a live owner is refused, a dead
one's lock is stale, and a lock from another machine goes stale when no longer renewed."""

import json
import os
import subprocess
import sys
import time

import pytest

from sparktf.errors import InvalidInputError
from sparktf.ml.runs import lock as run_lock


def test_a_live_owner_is_refused_and_the_lock_is_released_after_the_block(tmp_path):
    run = str(tmp_path / "run")
    with run_lock.owned(run):
        held = json.loads((tmp_path / "run" / "lock.json").read_text())
        assert held["pid"] == os.getpid()
        with pytest.raises(InvalidInputError, match=f"process {os.getpid()} on"):
            with run_lock.owned(run):
                pass
    assert not (tmp_path / "run" / "lock.json").exists()
    with run_lock.owned(run):  # free again
        pass
    with run_lock.owned(run, "search"):
        with pytest.raises(InvalidInputError, match="The search in .* is being run by another "
                                                    "driver .*two searches of one runId"):
            with run_lock.owned(run, "search"):
                pass


def test_the_lock_of_a_process_that_died_is_stale_on_its_machine(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from sparktf.ml.runs import lock as run_lock\n"
         f"with run_lock.owned({str(tmp_path)!r}):\n    print('held', flush=True); "
         "sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(InvalidInputError, match=f"process {holder.pid} on"):
            with run_lock.owned(str(tmp_path)):
                pass
    finally:
        holder.kill()
        holder.wait()
    assert (tmp_path / "lock.json").exists()  # a killed driver leaves it behind
    with run_lock.owned(str(tmp_path)):
        assert json.loads((tmp_path / "lock.json").read_text())["pid"] == os.getpid()


def test_a_reused_pid_is_not_the_owner(tmp_path):
    (tmp_path / "lock.json").write_text(json.dumps({
        "token": "x", "host": os.uname().nodename, "pid": os.getpid(),
        "started": run_lock.process_start(os.getpid()) + 1, "renewed": time.time()}))
    with run_lock.owned(str(tmp_path)):
        pass


@pytest.mark.parametrize("age, refused", [(5, True), (run_lock.STALE_S + 5, False)])
def test_a_lock_from_another_machine_holds_while_it_is_renewed(tmp_path, age, refused):
    (tmp_path / "lock.json").write_text(json.dumps({
        "token": "x", "host": "another-machine", "pid": 1, "started": 1,
        "renewed": time.time() - age}))
    if refused:
        with pytest.raises(InvalidInputError, match="on another-machine"):
            with run_lock.owned(str(tmp_path)):
                pass
    else:
        with run_lock.owned(str(tmp_path)):
            pass


def _take_and_hold(run, go, owned, released):
    go.wait(30)
    try:
        with run_lock.owned(run):
            owned.put(os.getpid())
            released.wait(30)  # held until every contender has tried
    except InvalidInputError:
        owned.put(None)


def test_drivers_that_find_a_stale_lock_together_take_the_run_one_at_a_time(tmp_path):
    """Before: each removed the stale lock and linked its own, and a slower one could
    remove a faster one's new lock: two owners at once in 3 of 10 trials of 6."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    for trial in range(10):
        run = str(tmp_path / f"run{trial}")
        os.makedirs(run)
        dead = subprocess.Popen(["true"])
        dead.wait()
        (tmp_path / f"run{trial}" / "lock.json").write_text(json.dumps({
            "token": "dead", "host": os.uname().nodename, "pid": dead.pid, "started": 1,
            "renewed": time.time()}))
        go, released, owned = context.Event(), context.Event(), context.Queue()
        contenders = [context.Process(target=_take_and_hold, args=(run, go, owned, released))
                      for _ in range(5)]
        for p in contenders:
            p.start()
        go.set()
        said = [owned.get(timeout=60) for _ in contenders]
        released.set()
        for p in contenders:
            p.join(30)
        assert len([pid for pid in said if pid is not None]) == 1, said
