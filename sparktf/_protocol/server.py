"""The driver's end of the task -> driver event channel (see ``sparktf._protocol.client``).

One server per job, bound to the driver's own address on a kernel-chosen port,
accepting only connections that present the job's random secret. Anyone who reaches
the port can connect, so until a peer has presented the secret it gets a few KB and a
few seconds, and the job's connections are capped: a peer without the secret can hold
neither the driver's memory nor its connections. Besides receiving events it is the
tasks' meeting point: the address exchange (``gather``) and the exit barrier
(``done``) take milliseconds here, where Spark's ``allGather`` and ``barrier`` take
about a second each.

Two threads serve every connection, however many tasks a job has: an asyncio loop
reads and answers them all (a task that waits at a barrier is a suspended coroutine,
not a blocked thread, and a silent or slow client holds nobody back), and one thread
hands the events to the driver's handler in arrival order, so that a slow handler
(a progress bar, a tracking server) never stalls the channel itself.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import hmac
import logging
import secrets
import socket
import threading
from typing import Any, Callable

from sparktf._protocol.connections import READ_CHUNK, Lines, shut
from sparktf._protocol.meeting import REQUESTS, Meeting
from sparktf._protocol.wire import ACK, decode, encode

logger = logging.getLogger(__name__)

# Every task of a job connects at once: socketserver's backlog of 5 overflowed and the
# kernel dropped the rest's SYNs (256 simulated tasks: 109 never got in within the
# clients' 10 s connect timeout, bench/channel_bench.py).
LISTEN_BACKLOG = 1024
MAX_LINE = 64 * 1024 * 1024  # an event line (a traceback, a log tail) is far smaller
# A task sends its first line, {"secret": ..., "rank": ...} (under 100 bytes), as soon as
# it connects. Before that line has shown the secret a peer is anyone who reached the
# port: the driver reads at most this much of it, for at most this long, then drops it.
HELLO_MAX_BYTES = 4096
HELLO_DEADLINE_S = 10.0
# Connections a job holds open at most: every task's own and one of its TensorFlow
# process's (the evaluator's and the parameter-server chief's waits), plus this margin
# (connections of a task attempt that Spark is still killing). Beyond it, a connection
# is closed at once.
CONNECTION_MARGIN = 8
SHUTDOWN_S = 10.0  # how long shutting down waits for the connections to end

EventHandler = Callable[[dict[str, Any]], None]


class _Job(Meeting):
    """The job's state as the tasks report it; lives on the server's event loop, where
    every method runs (``changed`` wakes the tasks waiting at a barrier)."""

    def __init__(self, secret: str, on_event: EventHandler, num_tasks: int,
                 dispatcher: concurrent.futures.Executor):
        self.secret = secret
        self.on_event = on_event
        self.num_tasks = num_tasks
        self.dispatcher = dispatcher
        self.changed = asyncio.Condition()
        self.connected = threading.Event()  # set when a task connects, or on shutdown
        self.open: set[asyncio.StreamWriter] = set()
        self.handlers: set[asyncio.Task] = set()
        self.done: set[int] = set()
        self.closing = False
        self.hung_up = False
        self.ranks: set[int] = set()  # ranks that presented the secret
        self.live: collections.Counter[int] = collections.Counter()  # rank -> open connections
        self.dropped: set[int] = set()  # ranks whose last connection ended without a goodbye
        self.any_connected = False
        self.max_connections = 2 * num_tasks + CONNECTION_MARGIN
        self.refused: collections.Counter[str] = collections.Counter()  # why -> connections
        self.giving_up = False  # a rank was lost mid-exchange: the job is being ended
        self.gathered: dict[int, dict[int, str]] = {}  # round -> rank -> value
        self.gather_fallback = False  # every task exchanges through Spark instead
        self.epoch = 0
        self.serving: set[int] = set()

    async def _note(self, change: Callable[..., None], *args) -> None:
        async with self.changed:
            change(*args)
            self.changed.notify_all()

    async def _until(self, predicate: Callable[[], bool], timeout_s: float | None = None):
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(predicate), timeout_s)

    # ------------------------------------------------------------------ one connection

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        if len(self.open) >= self.max_connections:
            self._refuse(writer, "over the cap", f"came while {len(self.open)} connections were "
                         f"open, the most a job of {self.num_tasks} task(s) holds (2 a task "
                         f"and {CONNECTION_MARGIN})")
            writer.close()
            return
        self.handlers.add(asyncio.current_task())
        self.open.add(writer)
        try:
            if self.hung_up:
                shut(writer)  # a task that connects after the job ended hears so at once
            await self._converse(Lines(reader), writer)
        except (OSError, ValueError):
            pass  # the task hung up, or the driver did (the job ended), or a line too long
        finally:
            self.open.discard(writer)  # before the close: a peer that sees it may reconnect
            self.handlers.discard(asyncio.current_task())
            writer.close()

    async def _converse(self, lines: Lines, writer) -> None:
        hello = await self._authenticate(lines, writer)
        if hello is None:
            return
        rank = hello.get("rank")
        if isinstance(rank, bool) or not isinstance(rank, int):
            rank = None
        await self._note(self._connect, rank)
        said_bye = False
        try:
            while line := await lines.next(MAX_LINE):
                try:
                    event = decode(line)
                except ValueError:
                    continue
                if not isinstance(event, dict):
                    continue
                kind = event.get("kind")
                if kind == "bye":  # the task ends on purpose; its error, if any, goes via Spark
                    said_bye = True
                elif kind == "done":
                    if not await self.wait_all_done(int(event.get("rank", -1))):
                        return  # shutting down: no release
                elif kind in REQUESTS:  # a blocking question: the answer is the reply
                    writer.write(encode(await REQUESTS[kind](self, event)))
                    await writer.drain()
                    continue
                else:
                    if kind == "epoch":
                        await self._note(self._set_epoch, int(event.get("epoch", 0)))
                    elif kind == "serving":
                        await self._note(self.serving.add, int(event.get("rank", -1)))
                    # in arrival order, and handled before it is acknowledged: a task that
                    # has the ack knows its report is on the driver
                    await asyncio.get_running_loop().run_in_executor(
                        self.dispatcher, self.on_event, event)
                if event.get("ack"):
                    writer.write(ACK)
                    await writer.drain()
                if kind == "error":  # acknowledged first: the task knows its report landed
                    await self.end_job()
        finally:
            if rank is not None:
                await self._note(self._disconnect, rank, said_bye)

    async def _authenticate(self, lines: Lines, writer) -> dict | None:
        """The peer's first line once it has shown the job's secret; None for a peer that
        did not (dropped: ``HELLO_MAX_BYTES``, ``HELLO_DEADLINE_S``)."""
        try:
            line = await asyncio.wait_for(lines.next(HELLO_MAX_BYTES), HELLO_DEADLINE_S)
        except asyncio.TimeoutError:
            self._refuse(writer, "silent", f"sent no first line within {HELLO_DEADLINE_S:g} s")
            return None
        except ValueError:
            self._refuse(writer, "too long", f"sent over {HELLO_MAX_BYTES} bytes without a "
                                             "line break")
            return None
        if not line:
            return None  # connected and hung up at once (a port check): nothing to hold
        try:
            hello = decode(line)
        except ValueError:
            hello = None
        secret = str(hello.get("secret", "")) if isinstance(hello, dict) else ""
        if not hmac.compare_digest(secret.encode("utf-8"), self.secret.encode("utf-8")):
            self._refuse(writer, "no secret", "sent a first line without the job's secret")
            return None
        return hello

    def _refuse(self, writer, why: str, what: str) -> None:
        """Counts a connection dropped before it showed the secret; logs the job's first
        only (a peer that keeps trying must not flood the driver's log; ``summary``)."""
        self.refused[why] += 1
        if sum(self.refused.values()) == 1:
            peer = writer.get_extra_info("peername") or ("?",)
            logger.warning(
                "sparktf: the driver's event channel dropped a connection from %s: it %s. "
                "Only this job's tasks connect there, each presenting the job's secret at "
                "once: something else reaches the driver's port. Further connections dropped "
                "are counted, and told once when the job ends.", peer[0], what)

    def summary(self) -> None:
        """One line at the job's end when more than one connection was dropped."""
        if sum(self.refused.values()) > 1:
            logger.warning("sparktf: the driver's event channel dropped %d connections during "
                           "this job (%s).", sum(self.refused.values()),
                           ", ".join(f"{why}: {n}" for why, n in sorted(self.refused.items())))

    def _connect(self, rank: int | None) -> None:
        self.any_connected = True
        if rank is not None:
            self.ranks.add(rank)
            self.live[rank] += 1
        self.connected.set()

    def _disconnect(self, rank: int, said_bye: bool) -> None:
        self.live[rank] -= 1
        if self.live[rank] > 0:
            return
        if said_bye:
            self.dropped.discard(rank)
        else:
            self.dropped.add(rank)

    def _set_epoch(self, epoch: int) -> None:
        self.epoch = max(self.epoch, epoch)

    # ------------------------------------------------------------------ ending the job

    async def close_barrier(self) -> None:
        """Ends every wait: no task is released from the exit barrier after this."""
        await self._note(setattr, self, "closing", True)
        self.connected.set()

    def hang_up(self) -> None:
        """Ends every task connection, e.g. one of a task that Spark is still killing, and
        every later one."""
        self.hung_up = True
        for writer in list(self.open):
            shut(writer)

    async def end_job(self) -> None:
        """A task reported a failure: every task's waits end and the driver hangs up on all
        of them, so each stops its process and ends (``client.JobEnded``) and the stage
        finishes without Spark killing a task (which would cost its Python worker)."""
        await self.close_barrier()
        self.hang_up()


class _Handle:
    """The server's job as other threads reach it: each call runs on the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, job: _Job):
        self._loop, self._job = loop, job

    def close_barrier(self) -> None:
        asyncio.run_coroutine_threadsafe(self._job.close_barrier(), self._loop).result()


class EventServer:
    """Receives the tasks' events while a job runs; use as a context manager.

    Parameters
    ----------
    host : str
        The interface to bind: the driver's address as the executors see it.
    on_event : callable
        Called with each event dict, in arrival order, from one thread of the server's.
    num_tasks : int
        Tasks of the job: a ``done`` event is acknowledged once all of them sent one,
        which makes the channel an exit barrier (milliseconds, where a Spark barrier
        round trip takes about a second).
    """

    def __init__(self, host: str, on_event: EventHandler, num_tasks: int = 1):
        self._sock = socket.create_server((host, 0), backlog=LISTEN_BACKLOG)
        self._loop = asyncio.new_event_loop()
        self._dispatcher = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="sparktf-events-handler")
        self._job = _Job(secrets.token_hex(16), on_event, num_tasks, self._dispatcher)
        self._server = _Handle(self._loop, self._job)
        self._thread = threading.Thread(target=self._loop.run_forever, name="sparktf-events",
                                        daemon=True)
        self._listening: asyncio.AbstractServer | None = None
        self._waiters: list[threading.Thread] = []

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._sock.getsockname()[:2]
        return str(host), int(port)

    @property
    def secret(self) -> str:
        return self._job.secret

    def await_connected(self, timeout_s: float) -> str:
        """'connected' once a task has connected, 'closed' if the server shut down first,
        else 'timeout' after ``timeout_s``."""
        self._job.connected.wait(timeout_s)
        if self._job.any_connected:
            return "connected"
        return "closed" if self._job.closing else "timeout"

    def join_at_exit(self, thread: threading.Thread) -> None:
        """A thread blocked in one of this server's waits: joined once shutdown ends them, so
        that no thread of a finished job outlives it."""
        self._waiters.append(thread)

    def __enter__(self) -> "EventServer":
        self._thread.start()
        self._listening = self._call(asyncio.start_server(
            self._job.serve, sock=self._sock, limit=READ_CHUNK))
        return self

    def _call(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    async def _close(self) -> None:
        """Stops accepting and ends every wait (no task is released after this)."""
        self._listening.close()
        await self._job.close_barrier()

    async def _hang_up(self) -> None:
        """Hangs up on every task and waits (bounded) for the connections to end."""
        self._job.hang_up()
        if self._job.handlers:
            await asyncio.wait(list(self._job.handlers), timeout=SHUTDOWN_S)

    def __exit__(self, *exc) -> None:
        try:
            if self._listening is not None:
                self._call(self._close())
                for waiter in self._waiters:
                    waiter.join(timeout=SHUTDOWN_S)
                self._call(self._hang_up())
                self._job.summary()
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=SHUTDOWN_S)
            self._dispatcher.shutdown(wait=True)
            if not self._loop.is_running():
                self._loop.close()
            self._sock.close()
