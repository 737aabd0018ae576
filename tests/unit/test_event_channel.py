"""The driver's event channel against peers that are not the job's tasks (issue 32, item 5),
and its exchanges when a task loses its connection between rounds (item 12)."""

import logging
import select
import socket
import threading
import time

import pytest

from sparktf._driver import failures
from sparktf._protocol import meeting
from sparktf._protocol import server as channel
from sparktf._protocol.client import EventClient, JobEnded
from sparktf._protocol.server import EventServer
from sparktf.errors import ExecutorLostError, TaskFailedError
from sparktf.runtime.process import task

MB = 1024 * 1024


def _rss_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"/proc/self/status has no {field}")


def _reset_peak_rss() -> str:
    """Starts this process's peak RSS afresh where Linux allows it; the field to read then."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # VmHWM := VmRSS
        return "VmHWM"
    except OSError:
        return "VmRSS"  # the memory held at the end, then


def _flood(sock: socket.socket, payload: bytes) -> None:
    try:
        sock.sendall(payload)
    except OSError:
        pass  # the driver dropped us: what it should do


def _await_closed(socks: list[socket.socket], timeout_s: float, enough: int | None = None
                  ) -> set[socket.socket]:
    """The sockets the other end has closed (EOF or reset), waiting up to ``timeout_s`` for
    ``enough`` of them (default all): one blocking poll over all of them at a time."""
    enough = len(socks) if enough is None else enough
    by_fd = {s.fileno(): s for s in socks}
    poller = select.poll()
    for fd in by_fd:
        poller.register(fd, select.POLLIN | select.POLLRDHUP)
    closed: set[socket.socket] = set()
    deadline = _now() + timeout_s
    while len(closed) < enough and _now() < deadline:
        for fd, _ in poller.poll(max(1, int((deadline - _now()) * 1000))):
            sock = by_fd[fd]
            try:
                data = sock.recv(MB, socket.MSG_DONTWAIT)
            except BlockingIOError:
                continue
            except OSError:
                data = b""  # reset by the driver: closed too
            if not data:
                closed.add(sock)
                poller.unregister(fd)
    return closed


def _now() -> float:
    return time.monotonic()


def test_peers_without_the_secret_hold_neither_the_drivers_memory_nor_its_connections(
        monkeypatch, caplog):
    """8 peers each send 60 MB without a line break and 200 connect and stay silent (the
    issue measured 503 MB of RSS, and the 200 stayed open). The connection cap is set out
    of the way: the bound on the first line and its deadline alone must do it."""
    monkeypatch.setattr(channel, "HELLO_DEADLINE_S", 1.0)
    monkeypatch.setattr(channel, "CONNECTION_MARGIN", 1000)
    caplog.set_level(logging.WARNING, logger=channel.__name__)
    payload = b"x" * (60 * MB)  # one buffer for all 8 senders, in the baseline
    received: list[dict] = []
    with EventServer("127.0.0.1", received.append, num_tasks=2) as server:
        peak = _reset_peak_rss()
        before_kb = _rss_kb("VmRSS")
        flooders = [socket.create_connection(server.address, timeout=30) for _ in range(8)]
        senders = [threading.Thread(target=_flood, args=(s, payload)) for s in flooders]
        for sender in senders:
            sender.start()
        silent = [socket.create_connection(server.address, timeout=30) for _ in range(200)]
        for sender in senders:
            sender.join(60)
        closed = _await_closed(flooders + silent, channel.HELLO_DEADLINE_S + 20)
        grown_mb = (_rss_kb(peak) - before_kb) / 1024
        still_open = len(flooders) + len(silent) - len(closed)
        for sock in flooders + silent:
            sock.close()
        assert grown_mb < 50, f"the driver grew by {grown_mb:.0f} MB"
        assert still_open == 0, f"{still_open} of 208 connections stayed open"
        dropped = [r.getMessage() for r in caplog.records]
        assert len(dropped) == 1 and "dropped a connection from 127.0.0.1" in dropped[0]
        # the job's own task still gets in, and its events arrive
        with EventClient(server.address, server.secret, rank=0) as task_client:
            assert task_client.send({"kind": "log", "line": "still here", "ack": True},
                                    wait_ack=True)
    assert [e["line"] for e in received if e.get("kind") == "log"] == ["still here"]
    summary = [r.getMessage() for r in caplog.records][1:]
    assert len(summary) == 1 and "dropped 208 connections during this job" in summary[0]


def test_connections_beyond_the_jobs_tasks_and_a_margin_are_closed_at_once(monkeypatch,
                                                                             caplog):
    monkeypatch.setattr(channel, "HELLO_DEADLINE_S", 120.0)  # far: what closes is the cap
    caplog.set_level(logging.WARNING, logger=channel.__name__)
    with EventServer("127.0.0.1", lambda e: None, num_tasks=2) as server:
        cap = 2 * 2 + channel.CONNECTION_MARGIN
        silent = [socket.create_connection(server.address, timeout=30) for _ in range(200)]
        closed = _await_closed(silent, 20, enough=200 - cap)
        assert len(closed) == 200 - cap
        held = [s for s in silent if s not in closed]
        assert not _await_closed(held, 0.2), "the cap closed a connection it should hold"
        for sock in silent:
            sock.close()
    messages = [r.getMessage() for r in caplog.records]
    assert "the most a job of 2 task(s) holds" in messages[0], messages


@pytest.mark.parametrize("first_line", [
    '{"secret": "\u00e9t\u00e9"}\n'.encode(),  # not ASCII: compare_digest refused str
    b"[1, 2]\n",  # JSON, not an object
    b"\xff\xfe\n",  # not UTF-8
    b'{"secret": "' + b"a" * 5000 + b'"}\n',  # over the first line's bound
])
def test_odd_first_lines_are_dropped_without_an_error_on_the_driver(first_line, caplog):
    caplog.set_level(logging.ERROR, logger="asyncio")
    with EventServer("127.0.0.1", lambda e: None, num_tasks=1) as server:
        with socket.create_connection(server.address, timeout=10) as sock:
            sock.sendall(first_line)
            assert _await_closed([sock], 10), "the driver kept the connection"
    assert not caplog.records, [r.getMessage() for r in caplog.records]


# ------------------------------------------------------- the exchanges, a task lost between


def _in_thread(function, *args) -> tuple[threading.Thread, list]:
    out: list = []
    thread = threading.Thread(target=lambda: out.append(function(*args)), daemon=True)
    thread.start()
    return thread, out


def _gather(client: EventClient, value: str, round_: int, what: str = ""):
    return client.request({"kind": "gather", "value": value, "round": round_, "what": what})


def test_a_task_lost_between_the_rounds_ends_the_next_round_naming_it():
    """Ranks 0-2 exchange addresses; rank 2's connection is then lost (no goodbye). Its
    peers' exchange of row counts would wait for it for good: it ends at once instead, and
    the driver hears one error naming rank 2, the round and who waited (rank 0, the first
    to ask; rank 1, asking next, finds the job ended)."""
    events: list[dict] = []
    with EventServer("127.0.0.1", events.append, num_tasks=3) as server:
        a, b, c = (EventClient(server.address, server.secret, rank=r) for r in range(3))
        first = [_in_thread(_gather, client, str(client.rank), 0) for client in (b, c)]
        assert _gather(a, "0", 0) == {"values": ["0", "1", "2"]}
        for thread, _ in first:
            thread.join(10)
        c.close()  # lost: the task's end of the connection is gone, nothing said
        for client in (a, b):
            waiting, reply = _in_thread(_gather, client, f"rows {client.rank}", 1, "row counts")
            waiting.join(10)
            assert not waiting.is_alive(), f"rank {client.rank} still waits for the lost rank 2"
            assert reply in ([None], [{"ended": True}])
        a.close()
        b.close()
    errors = [e for e in events if e.get("kind") == "error"]
    assert [e["rank"] for e in errors] == [2], errors
    message = errors[0]["message"]
    assert "rank(s) [2] lost the connection" in message
    assert "row counts for the tasks' exchange (round 1)" in message
    assert "while rank(s) [0] waited" in message


def test_a_task_that_ends_on_purpose_is_not_taken_for_lost():
    """A task that raises through Spark says goodbye as it closes: its peers wait on (Spark
    ends the stage and the driver the channel) and the driver reports nothing in its name,
    which would hide Spark's own error."""
    events: list[dict] = []
    server = EventServer("127.0.0.1", events.append, num_tasks=2)
    with server:
        a = EventClient(server.address, server.secret, rank=0)
        with EventClient(server.address, server.secret, rank=1):
            pass  # rank 1 ends before the exchange, on purpose
        waiting, replies = _in_thread(_gather, a, "0", 1, "row counts")
        waiting.join(0.5)
        assert waiting.is_alive() and not replies
    waiting.join(10)
    assert not waiting.is_alive() and replies in ([{"ended": True}], [None])
    a.close()
    assert not [e for e in events if e.get("kind") == "error"]


class _Barrier:
    """Spark's side of the exchange, recorded."""

    def __init__(self):
        self.gathered: list[str] = []

    def allGather(self, message: str) -> list[str]:  # noqa: N802 (Spark's name)
        self.gathered.append(message)
        return [message]


def test_a_task_that_lost_the_channel_never_takes_a_later_round_to_spark_alone():
    with EventServer("127.0.0.1", lambda e: None, num_tasks=2) as server:
        a = EventClient(server.address, server.secret, rank=0)
        b = EventClient(server.address, server.secret, rank=1)
        spark_a, spark_b = _Barrier(), _Barrier()
        exchange_a, exchange_b = task._Exchange(a, spark_a), task._Exchange(b, spark_b)
        other, _ = _in_thread(exchange_b.all_gather, "1", "addresses")
        assert exchange_a.all_gather("0", "addresses") == ["0", "1"]
        other.join(10)
        a.close()  # rank 0 loses its channel before the rows are in
        with pytest.raises(JobEnded, match="exchange of row counts"):
            exchange_a.all_gather("rows 0", "row counts")
        assert spark_a.gathered == []  # its peers wait on the channel, not in allGather
        b.close()


def test_after_a_first_round_through_spark_every_round_goes_through_spark(monkeypatch):
    """Rank 1 never reaches the channel: the driver sends rank 0 through Spark, and rank 0
    stays there for the rows even once its own channel is gone."""
    monkeypatch.setattr(meeting, "GATHER_GRACE_S", 0.3)
    with EventServer("127.0.0.1", lambda e: None, num_tasks=2) as server:
        a = EventClient(server.address, server.secret, rank=0)
        spark = _Barrier()
        exchange = task._Exchange(a, spark)
        assert exchange.all_gather("0", "addresses") == ["0"]
        a.close()
        assert exchange.all_gather("rows 0", "row counts") == ["rows 0"]
        assert spark.gathered == ["0", "rows 0"]


def test_the_drivers_report_of_a_lost_task_is_a_platform_failure_and_spark_says_why():
    """The report counts for a relaunch (maxRetries); when Spark says the task's executor
    died, that is the error the user sees."""
    events: list[dict] = []
    with EventServer("127.0.0.1", events.append, num_tasks=2) as server:
        a = EventClient(server.address, server.secret, rank=0)
        EventClient(server.address, server.secret, rank=1).close()  # lost
        waiting, reply = _in_thread(_gather, a, "0", 0, "addresses")
        waiting.join(10)
        assert reply in ([None], [{"ended": True}])
        a.close()
    [report] = [e for e in events if e.get("kind") == "error"]
    assert failures.is_infrastructure(report["message"])
    error = failures.translate(None, {1: report}, "sparktf.run")
    assert isinstance(error, TaskFailedError) and error.rank == 1
    assert failures.FailurePolicy(max_retries=1).decide(error, 0).retry
    spark_said = ("Job aborted due to stage failure: ... ExecutorLostFailure (executor 1 "
                  "exited caused by one of the running tasks) Reason: Command exited with "
                  "code 137")
    assert isinstance(failures.translate(Exception(spark_said), {1: report}, "sparktf.run"),
                      ExecutorLostError)
