"""What a training task tells the driver while it runs: heartbeats and per-epoch reports.

Shared by sparktf's own Keras 3 loop and the tf_keras ``fit`` hooks, so the
driver's watchdog and progress display see the same events from both.
"""

from __future__ import annotations

import contextlib
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
        """Heartbeats every ``interval_s`` while the block runs: for one long call that
        makes progress of its own (an export), not for waits on other workers."""
        stop = threading.Event()

        def keep_alive():
            while not stop.wait(self.interval_s):
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
