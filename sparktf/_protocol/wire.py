"""The driver <-> task protocol's wire format: JSON event lines, and the markers a task's
process uses on its stdout to reach the driver through its task.

The channel is a plain TCP connection to a server the driver starts for one job
(``sparktf._protocol.server``; the task's end is ``sparktf._protocol.client``).
The first line a task sends is the job's secret; the server drops any connection
that does not present it within a few KB and seconds. Each event is one JSON
line. Events that must arrive before the task goes on (a failure report, sent
just before the task raises) are acknowledged; requests (the address exchange,
the exit barrier, the evaluator's and parameter-server chief's waits) are
answered with one line. A client that ends its connection on purpose says so
last (``{"kind": "bye"}``): a task whose connection ends without it has lost
the channel.
A task's TensorFlow process writes its events to stdout behind ``EVENT_MARKER``
and its task relays them.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

ACK = b"ok\n"
# In the task's TensorFlow process: JSON [host, port, secret] of the driver's channel.
CHANNEL_ENV = "SPARKTF_EVENT_CHANNEL"


def encode(event: dict[str, Any]) -> bytes:
    """One event as a JSON line."""
    return (json.dumps(event, separators=(",", ":"), default=str) + "\n").encode("utf-8")


def decode(line: bytes) -> dict[str, Any]:
    """One JSON line back into an event."""
    return json.loads(line.decode("utf-8"))


EVENT_MARKER = "\x1esparktf-event "  # child stdout line prefix carrying a JSON event
DONE_LINE = "\x1esparktf-done"  # child stdout line: result written, waiting for release


def write_event(event: dict) -> None:
    """Writes one event line to stdout, which the task relays to the driver."""
    sys.stdout.write(EVENT_MARKER + json.dumps(event, default=float) + "\n")
    sys.stdout.flush()


def phase(name: str, rank: int | None = None) -> None:
    """A phase event from the task process (the task fills in its rank when None)."""
    write_event({"kind": "phase", "name": name, "t": time.time(), "rank": rank})
