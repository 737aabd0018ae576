"""The relay of a task process's output (issue 32, item 12): a marked line that holds no
event is output like any other, and the relay goes on to release the process."""

import collections
import io
import threading
import types

from sparktf._protocol.wire import DONE_LINE, EVENT_MARKER
from sparktf.runtime.process.task_process import LOG_TAIL_LINES, TaskProcess


class _Events:
    """The task's end of the channel, recorded."""

    connected = True

    def __init__(self):
        self.sent: list[dict] = []

    def send(self, event: dict) -> bool:
        self.sent.append(event)
        return True

    def fileno(self):
        return None  # nothing to watch for a hang-up


def _relaying(lines: list[str]) -> tuple[TaskProcess, _Events, io.StringIO]:
    """A TaskProcess whose process has printed ``lines``, with what its relay needs only."""
    events = _Events()
    stdin = io.StringIO()
    process = TaskProcess.__new__(TaskProcess)  # no process started: its output is given
    process.spec = types.SimpleNamespace(stall_timeout=None)
    process.rank, process.events, process.dog = 3, events, None
    process.tail = collections.deque(maxlen=LOG_TAIL_LINES)
    process.proc = types.SimpleNamespace(stdout=iter(line + "\n" for line in lines),
                                        stdin=stdin)
    process._waiting, process._release_with, process._failed = None, None, []
    process._may_release, process._telling = threading.Event(), threading.Lock()
    process._may_release.set()
    return process, events, stdin


def test_a_malformed_marked_line_is_output_and_the_relay_goes_on_to_the_release():
    cut_short = EVENT_MARKER + '{"kind": "heartbeat", "ste'
    not_an_object = EVENT_MARKER + "[1, 2]"
    process, events, stdin = _relaying([
        cut_short, not_an_object, EVENT_MARKER + '{"kind": "phase", "name": "after"}',
        "an ordinary line", DONE_LINE])
    process._relay_output(forward=True)
    assert process._waiting is not None, "the relay ended before the process was done"
    process._waiting.join(10)
    assert stdin.closed  # released
    assert [e.get("line") for e in events.sent if e["kind"] == "log"] == [
        cut_short, not_an_object, "an ordinary line"]
    assert {"kind": "phase", "name": "after", "rank": 3} in events.sent
    assert list(process.tail) == [cut_short, not_an_object, "an ordinary line"]
