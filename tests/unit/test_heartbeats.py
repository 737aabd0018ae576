"""The export's heartbeats (``Heartbeat.during``): sent while the process works, not while
it is blocked, so that the driver's watchdog can name a blocked export."""

import os
import subprocess
import sys
import threading
import time

import pytest

from sparktf._protocol import heartbeats


class _Context:
    jobName, taskIndex, isChief = "worker", 1, False

    def __init__(self):
        self.beats, self.times = [], []

    def emit(self, kind, **event):
        self.beats.append((kind, event["where"]))
        self.times.append(time.monotonic())


INTERVAL_S = 0.2


def _beats_during(work, times=False, interval_s=INTERVAL_S):
    """How many heartbeats went out while ``work()`` ran, looking every ``interval_s``
    (and, with ``times``, when, in seconds from its start)."""
    ctx = _Context()
    beat = heartbeats.Heartbeat(ctx)
    beat.interval_s = interval_s
    start = time.monotonic()
    with beat.during("exporting", 2):
        work()
    assert set(ctx.beats) == {("heartbeat", "exporting")}
    if times:
        return [round(t - start, 2) for t in ctx.times]
    return len(ctx.beats)


def test_a_blocked_block_is_silent_after_its_first_heartbeat():
    """Blocked for 2 s (10 looks): the heartbeat at its start, none from the first second
    on. (On a starved machine the block's own start, waiting to run, may count as work
    at the first look.)"""
    sent = _beats_during(lambda: threading.Event().wait(2.0), times=True)
    print(f"heartbeats at {sent} s of a block of 2 s")
    assert sent[0] < INTERVAL_S and all(t < 1.0 for t in sent)


def test_a_block_using_cpu_sends_heartbeats_throughout():
    """2 s of this process's CPU, however long a busy machine makes it take."""
    def spin():
        end = time.process_time() + 2.0
        while time.process_time() < end:
            sum(range(1000))

    beats = _beats_during(spin)
    print(f"{beats} heartbeats in 2 s of CPU, looks every {INTERVAL_S} s")
    assert beats >= 5


def _io_block(step):
    """``step()`` with pauses, as an upload does between its chunks, until 2 s passed."""
    def work():
        pause = threading.Event()
        end = time.monotonic() + 2.0
        while time.monotonic() < end:
            step()
            pause.wait(0.01)
    return work


@pytest.mark.skipif(not os.path.exists("/proc/self/io"),
                    reason="no /proc/self/io: only CPU counts as work here")
def test_a_block_writing_sends_heartbeats_throughout():
    chunk = b"x" * (heartbeats.WORKING_IO_BYTES_PER_S // 4)
    with open(os.devnull, "wb", buffering=0) as sink:
        beats = _beats_during(_io_block(lambda: sink.write(chunk)))
    assert beats >= 5


@pytest.mark.skipif(not os.path.exists("/proc/self/io"),
                    reason="no /proc/self/io: only CPU counts as work here")
def test_a_block_reading_sends_heartbeats_throughout(tmp_path):
    """An upload to remote storage reads the files it sends (a socket's sends are not
    counted by Linux)."""
    source = tmp_path / "variables.data"
    source.write_bytes(os.urandom(heartbeats.WORKING_IO_BYTES_PER_S // 4))
    with open(source, "rb", buffering=0) as part:
        def read():
            part.seek(0)
            part.read()
        beats = _beats_during(_io_block(read))
    assert beats >= 5


@pytest.mark.skipif(not os.path.exists("/proc/self/task"),
                    reason="no /proc/self/task: waiting to run is not seen here")
def test_a_starved_block_beats_while_it_works_and_not_while_it_is_blocked():
    """A process that wants to run but is given almost no CPU (``nice`` 19 beside a busy
    process on its core) is working, not blocked; but a blocked one whose thread wakes
    every 10 ms (as gRPC's do) is blocked, though each wake-up waits on the starved core
    (found by review: summed over threads, those waits looked like work). Run in a child
    pinned to one core with a burner on it.

    The working looks are 0.5 s apart (10 over 5 s), not 0.2: Linux adds a thread's wait
    to its schedstat only when the thread next runs, so a look sees a starved thread's
    wait only if the thread got the core since the last look. Beside the rest of ``make
    test`` (its processes on the same core too), 0.2 s looks saw the spinning thread
    working in 3 of 10 (9 on an idle machine, 5-6 beside two busy loops): a figure of the
    machine's load, not of the heartbeats. In a fit, the looks are 2 s apart (0.5 on the
    chief), and the driver names a stall only after ``stallTimeout`` (600 s) of silence."""
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no CPU affinity here")
    core = min(os.sched_getaffinity(0))
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                              preexec_fn=lambda: os.sched_setaffinity(0, {core}))
    try:
        child = subprocess.run(
            [sys.executable, "-c", _STARVED, str(core)], capture_output=True, text=True,
            timeout=120)
    finally:
        burner.kill()
        burner.wait()
    assert child.returncode == 0, child.stderr
    working, taking_turns, blocked, cpu = child.stdout.split()
    print(f"starved: {working} heartbeats working, {taking_turns} working in two Python "
          f"threads, {blocked} blocked beside a 10 ms poller, of 10 looks each; "
          f"{float(cpu):.3f} s of CPU")
    assert int(working) >= 4  # CPU alone: 1
    assert int(taking_turns) >= 3  # 6-8 here; one thread's share alone: 0 (found by review)
    assert int(blocked) <= 2  # its first, and maybe its start waiting to run


_STARVED = """
import os, sys, threading, time
from tests.unit.test_heartbeats import _beats_during
os.sched_setaffinity(0, {int(sys.argv[1])})  # starved from here on, imports done
os.nice(19)
start = time.process_time()

LOOK_S = 0.5  # looks at a working block (the test's docstring says why not 0.2)

def spin():
    end = time.monotonic() + 10 * LOOK_S
    while time.monotonic() < end:
        sum(range(100))

stop = threading.Event()
def poll():
    while not stop.wait(0.01):
        pass

working = _beats_during(spin, interval_s=LOOK_S)

def two():  # Python threads taking turns on the interpreter: each waits for the other
    other = threading.Thread(target=spin)
    other.start()
    spin()
    other.join()

taking_turns = _beats_during(two, interval_s=LOOK_S)
poller = threading.Thread(target=poll, daemon=True)
poller.start()
blocked = _beats_during(lambda: threading.Event().wait(2.0))
stop.set()
print(working, taking_turns, blocked, time.process_time() - start)
"""


def test_a_block_of_unseen_work_beats_throughout():
    """An upload to remote storage sends from Arrow's threads over sockets, which Linux
    does not count, and its last close waits for them: inside ``unseen_work`` the
    heartbeats go out though nothing is seen."""
    def upload():
        with heartbeats.unseen_work():
            threading.Event().wait(2.0)

    assert _beats_during(upload) >= 9
    assert heartbeats._unseen_work == 0


def test_a_look_that_fails_sends_the_heartbeat(monkeypatch):
    """A look that cannot read what it reads is no sign of a block (found by review: an
    unexpected /proc/self/io ended the heartbeat thread)."""
    def broken():
        raise RuntimeError("unexpected /proc")

    monkeypatch.setattr(heartbeats, "_cpu_s", broken)
    monkeypatch.setattr(heartbeats._WorkMeter, "__init__", lambda self: None)
    assert _beats_during(lambda: threading.Event().wait(1.0)) >= 4
