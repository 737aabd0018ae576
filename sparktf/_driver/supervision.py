"""The driver while a barrier stage runs (``launch``): the stage's jobs collected under a
job tag, and cancelled through it at a timeout, at Ctrl-C, after a stall, or
``FAILURE_GRACE_S`` after a task reported a failure; and one log line when no task
reaches the event channel. ``stage`` is the ``launch.LaunchSpec`` being run."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading

from sparktf._driver import sessions
from sparktf._driver.events import EventCollector
from sparktf._protocol import watchdog
from sparktf._protocol.server import EventServer
from sparktf._protocol.watchdog import Watchdog
from sparktf.errors import JobTimeoutError, SparkTFError, TaskStalledError

logger = logging.getLogger("sparktf")


class NotSubmittedError(SparkTFError):
    """A barrier job not submitted: the jobs of its thread were cancelled (``collect``). Not a
    failure of the job: raised as it is, not as one Spark reported."""


# After a task reports a failure, the driver hangs up on every task and each ends its
# process and itself within a second or two. One that cannot hear the channel (or is
# still reading a large partition) is stopped through Spark after this long.
FAILURE_GRACE_S = 20.0


@contextlib.contextmanager
def cancel_after_failure(session: sessions.Session, collector: EventCollector, tag: str):
    """Cancels the stage's jobs ``FAILURE_GRACE_S`` after the first failure a task reports,
    if the tasks have not all ended by then."""
    timer = threading.Timer(FAILURE_GRACE_S, session.cancel_tag, args=(tag,))
    timer.daemon = True
    timer.name = "sparktf-failure-grace"
    collector.on_error = timer.start
    try:
        yield
    finally:
        collector.on_error = None
        timer.cancel()
        if timer.is_alive():
            timer.join()


CHANNEL_GRACE_S = 90.0  # a task connects within seconds of starting; executors may queue


@contextlib.contextmanager
def reachability(server: EventServer, stage):
    """Says once, in one log line, when no task reaches this driver's event channel."""
    def watch():
        if server.await_connected(CHANNEL_GRACE_S) == "timeout":
            logger.warning(
                "sparktf: no task of %s has reached this driver's event channel at %s:%d "
                "after %.0f s (executors that cannot reach this client, e.g. across a Spark "
                "Connect boundary). Training goes on: progress and worker logs stay in the "
                "executor logs, and each task watches its own progress (stallTimeout). Set "
                "%s to an address of this machine the executors can reach.", stage.what,
                *server.address, CHANNEL_GRACE_S, sessions.CHANNEL_HOST_CONF)

    thread = threading.Thread(target=watch, name="sparktf-channel-watch", daemon=True)
    thread.start()
    server.join_at_exit(thread)  # the server's shutdown ends the wait
    yield thread


@contextlib.contextmanager
def watching(session: sessions.Session, stage, collector: EventCollector,
              tag: str):
    """Watches heartbeats while the stage runs; a stall cancels the stage's jobs."""
    if not stage.stall_timeout:
        yield
        return

    def on_stall(rank: int, last: dict) -> None:
        collector.stalled = (rank, last)
        session.cancel_tag(tag)

    with Watchdog(stage.stall_timeout, on_stall) as dog:
        collector.watchdog = dog
        try:
            yield
        finally:
            collector.watchdog = None


def stall_error(stage, rank: int, last: dict) -> TaskStalledError:
    others = "; ".join(f"rank {r}: {watchdog.describe(e)}" for r, e in sorted(last.items())
                       if r != rank)
    event = last[rank]
    message = (f"no progress for {stage.stall_timeout:g} s (stallTimeout); last seen "
               f"{watchdog.describe(event)}. The stage was stopped." +
               (f" Other ranks: {others}." if others else ""))
    return TaskStalledError(rank, event.get("role", "?"), message)


def collect(session: sessions.Session, job, timeout: float | None, what: str, tag: str):
    """Collects the job under job tag ``tag``; cancels it after ``timeout`` seconds, or at
    Ctrl-C (``interruptible``; then raises KeyboardInterrupt once the stage has ended)."""
    timed_out = threading.Event()

    def cancel():
        timed_out.set()
        session.cancel_tag(tag)

    timer = threading.Timer(timeout, cancel) if timeout else None
    session.add_tag(tag)
    try:
        if timer:
            timer.daemon = True
            timer.start()
        with interruptible(session, tag, what) as interrupted:
            cancelled = session.cancelled_tag()
            if cancelled is not None:  # Spark cancels running jobs only: this one is not
                raise NotSubmittedError(
                    f"{what}'s barrier stage was not submitted: the jobs of its thread were "
                    f"cancelled (job tag {cancelled!r}) while it was being prepared")
            try:
                rows = job.collect()
            except Exception as e:
                if interrupted.is_set():
                    raise KeyboardInterrupt(interrupted_message(what)) from e
                if timed_out.is_set():
                    raise JobTimeoutError(f"{what} did not finish within timeout={timeout} s; "
                                          "its barrier stage was cancelled.") from e
                raise
            if interrupted.is_set():  # the stage ended on its own meanwhile: still, stop
                raise KeyboardInterrupt(interrupted_message(what))
            return rows
    finally:
        if timer:
            timer.cancel()
            timer.join()
        sessions.forget_tag(tag)
        try:
            session.remove_tag(tag)
        except Exception as e:  # noqa: BLE001 - a session gone must not hide the job's error
            logger.debug("sparktf: could not remove job tag %s: %s", tag, e)


CANCEL_JOIN_S = 30.0  # a cancellation is one call to Spark; do not outlive the stage by more


def interrupted_message(what: str) -> str:
    return f"{what} was interrupted (Ctrl-C); its barrier stage was cancelled"


@contextlib.contextmanager
def interruptible(session: sessions.Session, tag: str, what: str):
    """Makes Ctrl-C cancel the stage's jobs (tagged ``tag``); yields an Event set by it.

    PySpark's own SIGINT handler cancels every job with a Py4J call made from the main
    thread, which at that moment is inside the Py4J call that collects the stage: the
    nested call fails ("reentrant call inside BufferedReader"), and its Py4JError, not
    KeyboardInterrupt, ends the collect, so a fit that the user stopped read as a failed
    barrier stage. This handler makes no call itself: a thread cancels the stage (as the
    timeout does), the collect ends with Spark's cancellation, and ``collect`` raises
    KeyboardInterrupt. A second Ctrl-C raises at once. Signals reach the main thread
    only: a fit in another thread, or a SIGINT the application ignores, is left alone.
    """
    interrupted = threading.Event()
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if main else None
    if not callable(previous):
        yield interrupted
        return
    cancelling: list[threading.Thread] = []

    def on_interrupt(signum, frame):
        if interrupted.is_set():
            # a second Ctrl-C: stop waiting for Spark to end the stage
            raise KeyboardInterrupt(f"{what} was interrupted (Ctrl-C twice); the "
                                    "cancellation of its barrier stage was not awaited")
        interrupted.set()
        canceller = threading.Thread(target=session.cancel_tag, args=(tag,),
                                     name="sparktf-interrupt", daemon=True)
        cancelling.append(canceller)
        canceller.start()

    signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, previous)
        for canceller in cancelling:
            canceller.join(timeout=CANCEL_JOIN_S)
