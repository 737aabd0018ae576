"""What a training task tells the driver while it runs: heartbeats and per-epoch reports.

Shared by sparktf's own Keras 3 loop and the tf_keras ``fit`` hooks, so the
driver's watchdog and progress display see the same events from both.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time

from sparktf._protocol.watchdog import FINISHED


class Heartbeat:
    """Tells the driver this task is alive and where it is: each phase, and every few seconds.

    The chief's heartbeats also carry the epoch's progress (steps planned, rows done, its
    last loss) for the driver's progress bar, twice a second.
    """

    interval_s = 2.0
    chief_interval_s = 0.5

    def __init__(self, ctx):
        self.ctx = ctx
        self.role = f"{ctx.jobName}:{ctx.taskIndex}"
        self.chief = bool(getattr(ctx, "isChief", False))
        if self.chief:
            self.interval_s = self.chief_interval_s
        self._last = 0.0

    def __call__(self, where: str, epoch: int, step: int | None = None,
                 force: bool = True, progress=None, **figures) -> None:
        """``progress()`` (chief only, called only when a heartbeat goes out) returns the
        step-level figures: ``steps``, ``rows`` and, when known, ``loss``; ``figures``
        go with the heartbeat as they are (a worker's own and waited seconds)."""
        now = time.monotonic()
        if force or now - self._last >= self.interval_s:
            self._last = now
            extra = progress() if progress is not None and self.chief else {}
            self.ctx.emit("heartbeat", role=self.role, where=where, epoch=epoch, step=step,
                          **extra, **figures)

    @contextlib.contextmanager
    def during(self, where: str, epoch: int):
        """Heartbeats while the block runs and works: for one long call that makes progress
        of its own (an export), not for waits on other workers. Every ``interval_s``, a
        heartbeat goes out only if, since the last look, this process used a tenth of that
        interval's CPU, or one of its threads (or its Python threads together) ran or
        waited to run for most of the time (starved on a busy machine), or it read or
        wrote ``WORKING_IO_BYTES_PER_S`` a second (``_WorkMeter``), or a block of
        ``unseen_work`` runs (an upload to remote storage, ``storage.put_dir``): an export
        blocked (on a file system, a collective whose peer is gone) is silent, and the
        driver's watchdog names it after ``stallTimeout``, as a blocked step."""
        stop = threading.Event()

        def keep_alive():
            meter = _WorkMeter()
            while not stop.wait(self.interval_s):
                try:
                    worked = _unseen_work > 0 or meter.worked(self.interval_s)
                except Exception:  # noqa: BLE001 - a look that fails is no sign of a block
                    worked = True
                if worked:
                    self(where, epoch)

        self(where, epoch)
        thread = threading.Thread(target=keep_alive, name="sparktf-heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def finished(self) -> None:
        """This rank's work is done: the driver stops watching it (it may wait a while at
        the exit barrier for the others)."""
        self.ctx.emit("heartbeat", role=self.role, where=FINISHED, epoch=None, step=None)


WORKING_CPU_SHARE = 0.1  # of a core, over a heartbeat's interval
# of the time since the last look, run or waited for by one thread: a thread that wants the
# CPU throughout. A blocked process's threads that wake often (gRPC's, ~25 a second) each
# wait a little at every wake-up on a starved core: 10-60% of the time in the review's runs
WANTING_SHARE = 0.8
# a blocked rank reads and writes ~1 KB a look (its heartbeats, gRPC's wake-ups): far less
WORKING_IO_BYTES_PER_S = 32 << 10

_unseen_work = 0  # blocks of ``unseen_work`` running in this process


@contextlib.contextmanager
def unseen_work():
    """A block whose progress this process's counters do not show: an upload to remote
    storage, whose parts Arrow's threads send over sockets (Linux counts no socket's
    ``send``) once the files are read, and whose last close waits for them. While it runs,
    the heartbeats of ``during`` go out every interval; a hung upload is then bound by the
    store client's own timeouts, not by ``stallTimeout``."""
    global _unseen_work
    with _lock:
        _unseen_work += 1
    try:
        yield
    finally:
        with _lock:
            _unseen_work -= 1


_lock = threading.Lock()


class _WorkMeter:
    """Whether this process worked since the last look: CPU it used (not counting the
    thread that looks); else, where Linux tells them in ``/proc``, whether one of its
    threads, or its Python threads together, ran or waited to run for most of the time (a
    process starved of CPU, ``nice`` beside busy ones, is not blocked), or the bytes it
    read and wrote through files and pipes. ``/proc`` is read only when CPU alone does not
    tell: a look reads a file per thread, and while a thread of Python holds the
    interpreter each read waits for it. Each figure is compared over the time since the
    look that read it."""

    def __init__(self):
        self._cpu = _cpu_s()
        self._proc, self._at = _proc_figures(), time.monotonic()

    def worked(self, interval_s: float) -> bool:
        cpu = _cpu_s()
        used, self._cpu = cpu - self._cpu, cpu
        if used >= WORKING_CPU_SHARE * interval_s:
            return True
        before, at = self._proc, self._at
        self._proc, self._at = _proc_figures(), time.monotonic()
        if before is None or self._proc is None:
            return False
        elapsed_ns = (self._at - at) * 1e9
        (threads, io_bytes), (threads_before, io_before) = self._proc, before
        shares = {tid: busy - threads_before.get(tid, 0) for tid, busy in threads.items()}
        python = {str(t.native_id) for t in threading.enumerate()}  # but the looking one
        wanting = (max(shares.values(), default=0) >= WANTING_SHARE * elapsed_ns
                   # Python threads taking turns on the interpreter: each waits on the
                   # other part of the time, and none alone reaches the bar
                   or sum(v for tid, v in shares.items() if tid in python)
                   >= WANTING_SHARE * elapsed_ns)
        return wanting or io_bytes - io_before >= WORKING_IO_BYTES_PER_S * elapsed_ns / 1e9


def _cpu_s() -> float:
    """This process's CPU seconds, less the calling thread's (the one that looks)."""
    return time.process_time() - time.thread_time()


def _proc_figures() -> tuple[dict[str, int], int] | None:
    """(for each thread but the caller, the nanoseconds it ran and waited to run; the
    bytes this process read and wrote, less what these looks read), or None where
    ``/proc`` does not tell them."""
    global _read_by_looks
    threads, looking = {}, str(threading.get_native_id())
    try:
        for thread in os.listdir("/proc/self/task"):
            if thread == looking:  # its own waits after each look are not work
                continue
            try:
                with open(f"/proc/self/task/{thread}/schedstat", "rb") as stat:
                    text = stat.read()
            except OSError:  # the thread ended since the listing
                continue
            _read_by_looks += len(text)
            ran, waited = text.split()[:2]
            threads[thread] = int(ran) + int(waited)
        with open("/proc/self/io", "rb") as io:
            text = io.read()
        figures = dict(line.split(b": ") for line in text.splitlines() if b": " in line)
        io_bytes = int(figures[b"rchar"]) + int(figures[b"wchar"]) - _read_by_looks
    except (OSError, ValueError, KeyError):
        return None
    _read_by_looks += len(text)
    return threads, io_bytes


_read_by_looks = 0  # bytes ``_proc_figures`` read from /proc: not the process's work


def report_epoch(ctx, epoch: int, epochs: int, logs: dict, rows: int, seconds: float) -> None:
    """The chief sends one epoch's metrics and throughput to the driver's progress display.

    Sent after the epoch's checkpoint is committed: the evaluator side-car waits for it.
    """
    if ctx.isChief:
        ctx.emit("epoch", epoch=epoch, epochs=epochs, logs=logs, rows=rows, seconds=seconds,
                 rows_per_s=rows / seconds if seconds else 0.0)


def report_workers(ctx, figures: dict) -> None:
    """The chief sends every worker's own and waited seconds of an epoch (``figures``:
    ``step_times.epoch_figures``): the driver names a straggler."""
    if ctx.isChief:
        ctx.emit("workers", **figures)
