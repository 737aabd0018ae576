"""The export's heartbeats (``Heartbeat.during``): sent while the process works, not while
it is blocked, so that the driver's watchdog can name a blocked export."""

import os
import threading
import time

from sparktf._protocol import heartbeats


class _Context:
    jobName, taskIndex, isChief = "worker", 1, False

    def __init__(self):
        self.beats = []

    def emit(self, kind, **event):
        self.beats.append((kind, event["where"]))


def _beats_during(work) -> int:
    ctx = _Context()
    beat = heartbeats.Heartbeat(ctx)
    beat.interval_s = 0.05
    with beat.during("exporting", 2):
        work()
    assert set(ctx.beats) == {("heartbeat", "exporting")}
    return len(ctx.beats)


def test_a_blocked_block_sends_only_its_first_heartbeat():
    assert _beats_during(lambda: threading.Event().wait(1.0)) == 1


def test_a_block_using_cpu_sends_heartbeats_throughout():
    def spin():
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            sum(range(1000))

    beats = _beats_during(spin)
    print(f"{beats} heartbeats in 1 s of CPU at one each 0.05 s")
    assert beats >= 5


def test_a_block_writing_sends_heartbeats_throughout():
    """Writing with little CPU, as an upload to remote storage does (a socket's writes
    count as a file's); Linux only (``/proc/self/io``)."""
    if not os.path.exists("/proc/self/io"):
        import pytest
        pytest.skip("no /proc/self/io: only CPU counts as work here")
    chunk = b"x" * heartbeats.WORKING_WRITE_BYTES

    def write():
        pause = threading.Event()
        with open(os.devnull, "wb", buffering=0) as sink:
            end = time.monotonic() + 1.0
            while time.monotonic() < end:
                sink.write(chunk)
                pause.wait(0.01)

    assert _beats_during(write) >= 5
