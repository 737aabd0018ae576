"""The driver's end of the task -> driver event channel (see ``sparktf._protocol.client``).

One server per job, bound to the driver's own address on a kernel-chosen port,
accepting only connections that present the job's random secret. Besides receiving
events it is the tasks' meeting point: the address exchange (``gather``) and the
exit barrier (``done``) take milliseconds here, where Spark's ``allGather`` and
``barrier`` take about a second each.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import socket
import socketserver
import threading
import time
from typing import Any, Callable

from sparktf._protocol.wire import ACK, decode, encode

logger = logging.getLogger(__name__)

# How long the first task to ask for the address exchange waits for every task to have
# connected. A task that cannot reach the channel exchanges through Spark's allGather
# instead; once this has passed, so does every task of the job (a consistent choice).
GATHER_GRACE_S = 30.0

EventHandler = Callable[[dict[str, Any]], None]


class _Handler(socketserver.StreamRequestHandler):
    timeout = None  # a task may stay quiet for a long epoch

    def setup(self) -> None:
        super().setup()
        self.server.track(self.request, True)  # type: ignore[attr-defined]

    def finish(self) -> None:
        self.server.track(self.request, False)  # type: ignore[attr-defined]
        try:
            super().finish()
        except OSError:
            pass  # the connection is gone (the task, or our hang-up): nothing left to say

    def handle(self) -> None:
        try:
            self._handle()
        except OSError:
            pass  # the task hung up, or the driver did (the job ended)

    def _handle(self) -> None:
        server: _Server = self.server  # type: ignore[assignment]
        try:
            hello = decode(self.rfile.readline())
        except ValueError:
            return
        if not hmac.compare_digest(str(hello.get("secret", "")), server.secret):
            logger.warning("sparktf: refused an event connection from %s without the job's "
                           "secret", self.client_address[0])
            return
        server.note_connected(hello.get("rank"))
        for line in self.rfile:
            try:
                event = decode(line)
            except ValueError:
                continue
            kind = event.get("kind")
            if kind == "done":
                if not server.wait_all_done(int(event.get("rank", -1))):
                    return  # shutting down: no release
            elif kind in _REQUESTS:  # a blocking question: the answer is the reply
                self.wfile.write(encode(_REQUESTS[kind](server, event)))
                self.wfile.flush()
                continue
            else:
                if kind == "epoch":
                    server.note_epoch(int(event.get("epoch", 0)))
                elif kind == "serving":
                    server.note_serving(int(event.get("rank", -1)))
                server.on_event(event)
            if event.get("ack"):
                self.wfile.write(ACK)
                self.wfile.flush()
            if kind == "error":  # acknowledged first: the task knows its report landed
                server.end_job()


_REQUESTS = {
    "gather": lambda server, event: server.gather(int(event.get("rank", -1)),
                                                  str(event.get("value", ""))),
    "await_serving": lambda server, event: server.await_serving(int(event.get("count", 0))),
    "await_epoch": lambda server, event: server.await_epoch(int(event.get("rank", -1)),
                                                            int(event.get("after", 0))),
}


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True  # joined by join_handlers, not by server_close
    allow_reuse_address = True
    # every task of a job connects at once: socketserver's backlog of 5 overflows and the
    # kernel drops the rest's SYNs (256 simulated tasks: 109 never got in within the
    # clients' 10 s connect timeout, bench/channel_bench.py)
    request_queue_size = 1024

    def __init__(self, host: str, on_event: EventHandler, num_tasks: int):
        self.secret = secrets.token_hex(16)
        self.on_event = on_event
        self.num_tasks = num_tasks
        self._open: set[socket.socket] = set()
        self._handlers: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._done: set[int] = set()
        self._done_cond = threading.Condition()
        self._closing = False
        self._connected = False
        self._ranks: set[int] = set()  # ranks that presented the secret
        self._gathered: dict[int, str] = {}
        self._gather_fallback = False  # every task exchanges through Spark instead
        self._epoch = 0
        self._serving: set[int] = set()
        self._hung_up = False
        super().__init__((host, 0), _Handler)

    def wait_all_done(self, rank: int) -> bool:
        """A barrier for the tasks' exit: blocks until every rank is done (or shutdown)."""
        with self._done_cond:
            self._done.add(rank)
            self._done_cond.notify_all()
            self._done_cond.wait_for(lambda: len(self._done) >= self.num_tasks or self._closing)
            return not self._closing or len(self._done) >= self.num_tasks

    def note_connected(self, rank) -> None:
        """A task (or its TensorFlow process) presented the job's secret."""
        with self._done_cond:
            self._connected = True
            if isinstance(rank, int):
                self._ranks.add(rank)
            self._done_cond.notify_all()

    def gather(self, rank: int, value: str) -> dict:
        """The address exchange: blocks until every task has sent its ``value``, then
        answers ``{"values": [...]}`` in rank order (what Spark's ``allGather`` returns).

        Answers ``{"fallback": True}`` (exchange through Spark instead) when not every
        task has connected within ``GATHER_GRACE_S`` of the first request: one of them
        cannot reach this channel and will call ``allGather``, so every task must. The
        answer is the same for every task of the job, and the server's shutdown (the job
        ended) ends the wait.
        """
        def everyone(collection) -> bool:
            return len(collection) >= self.num_tasks

        with self._done_cond:
            self._gathered[rank] = value
            self._done_cond.notify_all()
            deadline = time.monotonic() + GATHER_GRACE_S
            if not self._done_cond.wait_for(
                    lambda: everyone(self._ranks) or self._gather_fallback or self._closing,
                    max(0.0, deadline - time.monotonic())):
                self._gather_fallback = True
                self._done_cond.notify_all()
            self._done_cond.wait_for(lambda: everyone(self._gathered) or
                                     self._gather_fallback or self._closing)
            if self._closing:
                return {"ended": True}  # the job has ended (a task failed): no exchange
            if self._gather_fallback or not everyone(self._gathered):
                return {"fallback": True}
            return {"values": [self._gathered[r] for r in range(self.num_tasks)]}

    def await_connected(self, timeout_s: float) -> str:
        """'connected' once a task has connected, 'closed' if the server shut down first,
        else 'timeout' after ``timeout_s``."""
        with self._done_cond:
            self._done_cond.wait_for(lambda: self._connected or self._closing, timeout_s)
            return "connected" if self._connected else "closed" if self._closing else "timeout"

    def note_epoch(self, epoch: int) -> None:
        """The chief reported (and checkpointed) ``epoch``."""
        with self._done_cond:
            self._epoch = max(self._epoch, epoch)
            self._done_cond.notify_all()

    def await_epoch(self, rank: int, after: int) -> dict:
        """Blocks until an epoch after ``after`` is reported or every other task is done.

        The evaluator side-car waits here for each new checkpoint: one blocking call
        per checkpoint, no polling. ``finished`` means training is over.
        """
        def finished() -> bool:
            return len(self._done - {rank}) >= self.num_tasks - 1

        with self._done_cond:
            self._done_cond.wait_for(lambda: self._epoch > after or finished()
                                     or self._closing)
            return {"epoch": self._epoch, "finished": finished() or self._closing}

    def note_serving(self, rank: int) -> None:
        """A parameter server or worker has started its TensorFlow server."""
        with self._done_cond:
            self._serving.add(rank)
            self._done_cond.notify_all()

    def await_serving(self, count: int) -> dict:
        """Blocks until ``count`` tasks serve: the PS chief connects only once all are up."""
        with self._done_cond:
            self._done_cond.wait_for(lambda: len(self._serving) >= count or self._closing)
            return {"serving": len(self._serving)}

    def close_barrier(self) -> None:
        with self._done_cond:
            self._closing = True
            self._done_cond.notify_all()

    def process_request(self, request, client_address) -> None:
        """Each connection in its own thread, kept so that shutdown can join it (the
        mixin keeps only non-daemon threads, and ours are daemons: a driver that exits
        does not wait for a task)."""
        thread = threading.Thread(target=self.process_request_thread,
                                  args=(request, client_address), daemon=True,
                                  name="sparktf-events-connection")
        with self._lock:
            self._handlers = [t for t in self._handlers if t.is_alive()] + [thread]
        thread.start()

    def join_handlers(self, timeout_s: float) -> None:
        """Joins the connections' threads (bounded): call after ``hang_up``, which ends
        their reads, and ``close_barrier``, which ends their waits."""
        with self._lock:
            handlers, self._handlers = self._handlers, []
        deadline = time.monotonic() + timeout_s
        for thread in handlers:
            thread.join(max(0.0, deadline - time.monotonic()))

    def track(self, sock: socket.socket, is_open: bool) -> None:
        with self._lock:
            (self._open.add if is_open else self._open.discard)(sock)
            if is_open and self._hung_up:
                _shut(sock)  # a task that connects after the job ended hears so at once

    def hang_up(self) -> None:
        """Ends every task connection, e.g. one of a task that Spark is still killing, and
        every later one."""
        with self._lock:
            self._hung_up = True
            for sock in list(self._open):
                _shut(sock)

    def end_job(self) -> None:
        """A task reported a failure: every task's waits end and the driver hangs up on all
        of them, so each stops its process and ends (``client.JobEnded``) and the stage
        finishes without Spark killing a task (which would cost its Python worker)."""
        self.close_barrier()
        self.hang_up()


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class EventServer:
    """Receives the tasks' events while a job runs; use as a context manager.

    Parameters
    ----------
    host : str
        The interface to bind: the driver's address as the executors see it.
    on_event : callable
        Called with each event dict, from the server's handler threads.
    num_tasks : int
        Tasks of the job: a ``done`` event is acknowledged once all of them sent one,
        which makes the channel an exit barrier (milliseconds, where a Spark barrier
        round trip takes about a second).
    """

    def __init__(self, host: str, on_event: EventHandler, num_tasks: int = 1):
        self._server = _Server(host, on_event, num_tasks)
        self._thread = threading.Thread(target=self._accept, name="sparktf-events",
                                        daemon=True)
        self._waiters: list[threading.Thread] = []

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def secret(self) -> str:
        return self._server.secret

    def await_connected(self, timeout_s: float) -> str:
        """'connected', 'closed' or 'timeout': whether any task reached this channel."""
        return self._server.await_connected(timeout_s)

    def join_at_exit(self, thread: threading.Thread) -> None:
        """A thread blocked in one of this server's waits: joined once shutdown ends them, so
        that no thread of a finished job outlives it."""
        self._waiters.append(thread)

    def __enter__(self) -> "EventServer":
        self._thread.start()
        return self

    def _accept(self) -> None:
        """Accepts task connections (each handled in its own thread) until ``__exit__``
        shuts the listening socket; a blocking accept, where ``serve_forever`` polls."""
        while True:
            try:
                conn, address = self._server.socket.accept()
            except OSError:
                return  # the listening socket was shut down
            self._server.process_request(conn, address)

    def __exit__(self, *exc) -> None:
        try:
            self._server.socket.shutdown(socket.SHUT_RDWR)  # wakes the blocking accept
        except OSError:
            pass
        self._thread.join(timeout=10)
        self._server.close_barrier()
        for waiter in self._waiters:
            waiter.join(timeout=10)
        self._server.hang_up()
        self._server.join_handlers(10)
        self._server.server_close()
