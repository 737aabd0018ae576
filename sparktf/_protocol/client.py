"""The task's end of the task -> driver event channel (``EventClient``; the wire format
is ``sparktf._protocol.wire``). A task that cannot reach the driver degrades to its
executor's log and says so once."""

from __future__ import annotations

import json
import os
import select
import socket
import sys
import threading
import time
from typing import Any

from sparktf._protocol.wire import ACK, CHANNEL_ENV, decode, encode

CONNECT_TIMEOUT_S = 10.0


class JobEnded(Exception):
    """The driver has this task's failure report, or has ended the job: the task ends
    quietly (no exception through Spark, whose failed barrier task would cost the Python
    worker and its spare process)."""


class EventClient:
    """Sends a task's events to the driver; degrades to the executor's stderr if unreachable."""

    def __init__(self, address: tuple[str, int] | None, secret: str, rank: int):
        self.rank = rank
        self._sock: socket.socket | None = None
        self._reader = None
        self._ended = False  # connected once, then hung up by the driver (or broken)
        # the task's threads share the connection (its output relayed, its exchanges):
        # one event on the wire at a time; replies are read by one thread at a time
        self._sending = threading.Lock()
        if address is None:
            return
        try:
            self._sock = socket.create_connection(address, timeout=CONNECT_TIMEOUT_S)
            self._sock.settimeout(None)  # waits (e.g. the release barrier) may be long
            self._sock.sendall(encode({"secret": secret, "rank": rank}))
            self._reader = self._sock.makefile("rb")
        except OSError as e:
            print(f"sparktf: rank {rank} cannot reach the driver's event channel at "
                  f"{address}: {e}; its output stays in the executor log", file=sys.stderr)
            self.close()

    @property
    def connected(self) -> bool:
        return self._sock is not None

    @property
    def ended(self) -> bool:
        """Whether the driver hung up after this task connected: it does when the job has
        ended, for every task at once when one of them reported a failure."""
        if not self._ended and self._sock is not None:
            poller = select.poll()
            poller.register(self._sock, select.POLLRDHUP)  # HUP and ERR always reported
            if poller.poll(0):  # a look, no wait
                self._lost()
        return self._ended

    def send(self, event: dict[str, Any], wait_ack: bool = False) -> bool:
        """Sends one event; with ``wait_ack`` blocks (bounded) until the driver has it."""
        if self._sock is None:
            return False
        event.setdefault("rank", self.rank)
        try:
            self._send(event)
            if not wait_ack:
                return True
            if self._reader.readline() == ACK:
                return True
        except (OSError, ValueError, AttributeError):  # closed by another thread meanwhile
            pass
        self._lost()
        return False

    def _send(self, event: dict[str, Any]) -> None:
        with self._sending:
            sock = self._sock
            if sock is None:
                raise OSError("the event channel is closed")
            sock.sendall(encode(event))

    def phase(self, name: str) -> None:
        """A start-up or shutdown phase of the task, timestamped (``sparktf.phases``)."""
        self.send({"kind": "phase", "name": name, "t": time.time()})

    def request(self, event: dict[str, Any]) -> dict[str, Any] | None:
        """Sends one event and blocks until the driver's reply; None if the channel is gone."""
        if self._sock is None:
            return None
        event.setdefault("rank", self.rank)
        try:
            self._send(event)
            line = self._reader.readline()
        except (OSError, ValueError, AttributeError):  # closed by another thread meanwhile
            line = b""
        if not line:
            self._lost()
            return None
        return decode(line)

    @classmethod
    def from_environment(cls, rank: int) -> "EventClient":
        """A second connection from the task's TensorFlow process (``CHANNEL_ENV``)."""
        host, port, secret = json.loads(os.environ[CHANNEL_ENV])
        return cls((host, int(port)), secret, rank)

    def fileno(self) -> int | None:
        """The connection's socket (None when not connected), e.g. to see the driver hang up."""
        return self._sock.fileno() if self._sock is not None else None

    def _lost(self) -> None:
        self._ended = True
        self.close()

    def close(self) -> None:
        """Closes the connection; safe to call twice."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> "EventClient":
        return self

    def __exit__(self, *exc) -> None:
        self._say_bye()
        self.close()

    def _say_bye(self) -> None:
        """Tells the driver this connection ends on purpose (the task is done, or raises
        through Spark), not lost mid-job: a lost task ends the exchange it was due in.
        Never blocks: a driver that does not read hears the close instead."""
        if not self._sending.acquire(blocking=False):
            return  # another thread is mid-line: a goodbye now would garble it
        try:
            if self._sock is not None:
                self._sock.send(encode({"kind": "bye", "rank": self.rank}), socket.MSG_DONTWAIT)
        except OSError:
            pass
        finally:
            self._sending.release()
