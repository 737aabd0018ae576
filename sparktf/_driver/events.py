"""The driver's side of the tasks' events: what each kind of event does (``EventCollector``:
logs, phases, failures by rank, heartbeats for the watchdog, progress), and the loggers
they go to."""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from sparktf._driver import stragglers
from sparktf._protocol.watchdog import Watchdog

logger = logging.getLogger("sparktf")
worker_logger = logging.getLogger("sparktf.worker")
# DEBUG records of where a job's time goes, from the driver and the tasks; each record
# has ``record.phase = (rank or None for the driver, name, time.time())``.
phase_logger = logging.getLogger("sparktf.phases")


def log_phase(rank: int | None, name: str, t: float | None = None) -> None:
    """One DEBUG record on ``sparktf.phases`` (``record.phase = (rank, name, t)``)."""
    if phase_logger.isEnabledFor(logging.DEBUG):
        t = time.time() if t is None else t
        who = "driver" if rank is None else f"rank {rank}"
        phase_logger.debug("sparktf phase: %s %s", who, name,
                           extra={"phase": (rank, name, t)})


class EventCollector:
    """Handles the tasks' events on the driver: logs, failures by rank, progress."""

    def __init__(self, on_event: Callable[[dict], None] | None, label: str = ""):
        self.label = label  # prefixes the relayed lines: "[fit 3 rank 0]"
        self.errors: dict[int, dict] = {}
        self.heard: set[int] = set()  # the ranks that sent any event
        self.stalled: tuple[int, dict] | None = None
        self.watchdog: Watchdog | None = None
        self.on_error: Callable[[], None] | None = None  # called at the first failure
        self._on_event = on_event
        self._lock = threading.Lock()

    def reset(self) -> None:
        """Forgets a previous attempt's failures."""
        self.errors.clear()
        self.heard.clear()
        self.stalled = None

    def __call__(self, event: dict) -> None:
        kind = event.get("kind")
        rank = event.get("rank", -1)
        self.heard.add(rank)
        if kind == "heartbeat":
            dog = self.watchdog
            if dog is not None:
                dog.beat(int(rank), event)
            if self._on_event is not None:
                self._on_event(event)  # the chief's carry the epoch's progress
        elif kind == "log":
            worker_logger.info("[%srank %s] %s", f"{self.label} " if self.label else "", rank,
                               event.get("line", ""))
        elif kind == "phase":
            log_phase(int(rank), str(event.get("name")), float(event.get("t", 0)))
        elif kind == "workers":  # the chief's figures of every worker for an epoch
            stragglers.report(event, self.label)
            if self._on_event is not None:
                self._on_event(event)
        elif kind == "serving":
            logger.info("sparktf: rank %s (%s) is serving for the chief", rank,
                        event.get("role", "?"))
        elif kind == "error":
            with self._lock:
                first = not self.errors
                self.errors.setdefault(int(rank), event)
                on_error = self.on_error
            if first and on_error is not None:
                on_error()
        elif self._on_event is not None:
            self._on_event(event)


def ensure_log_handler() -> None:
    """Shows sparktf's INFO lines (progress, worker logs) when the app set up no logging."""
    root = logging.getLogger()
    if logger.handlers or root.handlers:
        return
    handler = logging.StreamHandler()
    handler.setLevel(logging.INFO)  # phases (DEBUG) only where the application asks
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
