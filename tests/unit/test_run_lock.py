"""One driver at a time owns a run (sparktf.ml.run_lock): a live owner is refused, a dead
one's lock is stale, and a lock from another machine goes stale when no longer renewed."""

import json
import os
import subprocess
import sys
import time

import pytest

from sparktf.errors import InvalidInputError
from sparktf.ml import run_lock


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


def test_the_lock_of_a_process_that_died_is_stale_on_its_machine(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from sparktf.ml import run_lock\n"
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
