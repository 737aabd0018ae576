"""Stall detection on the driver: a rank that stops sending heartbeats is named and stopped.

Training tasks send a heartbeat every few seconds while they make progress (training
and validation steps; an export while it works, ``heartbeats.during``) and
whenever they enter a new phase (callbacks, validation, checkpoint, export). A rank is
watched from its first heartbeat on, so loading data never counts as a stall, and until
it says it finished, so waiting for the others at the end never counts either. One
thread waits on a condition with a timeout until the oldest heartbeat is ``timeout_s`` old, then
calls ``on_stall`` once with the rank to blame and what every rank was last doing.

The rank to blame is the one furthest behind, not simply the quietest: when one
rank blocks (in a callback, say), the others soon block too, waiting for it in a
collective, and which of them fell silent first is a matter of milliseconds.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

# Phases of one epoch, in the order a worker passes through them; then the export.
PHASES = ("training", "all-reduce", "validation", "callbacks", "checkpoint", "exporting")
FINISHED = "finished"  # a rank done with its work: no longer watched


def progress(event: dict) -> tuple:
    """How far a heartbeat says its rank got: (epoch, phase, step)."""
    where = event.get("where", "training")
    phase = PHASES.index(where) if where in PHASES else 0
    return (event.get("epoch") or 0, phase, event.get("step") or 0)


def culprit(last: dict[int, tuple[float, dict]]) -> int:
    """The rank furthest behind; among equals, the one silent longest."""
    return min(last, key=lambda rank: (progress(last[rank][1]), last[rank][0]))


def describe(event: dict) -> str:
    """Where a heartbeat says its rank was: 'in Keras callbacks (epoch 2)' etc."""
    where = event.get("where", "training")
    epoch = event.get("epoch")
    step = event.get("step")
    at = f"epoch {epoch}" + (f", step {step}" if step is not None else "") if epoch else ""
    text = {"training": "training", "callbacks": "in Keras callbacks",
            "validation": "validating", "checkpoint": "writing a checkpoint",
            "exporting": "exporting the trained model",
            "all-reduce": "in an all-reduce with the other workers"}.get(where, where)
    return f"{text} ({at})" if at else text


class Watchdog:
    """Calls ``on_stall(rank, last_events)`` when a watched rank is silent for ``timeout_s``."""

    def __init__(self, timeout_s: float, on_stall: Callable[[int, dict], None]):
        self.timeout_s = timeout_s
        self._on_stall = on_stall
        self._last: dict[int, tuple[float, dict]] = {}
        self._finished: set[int] = set()
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._watch, name="sparktf-watchdog",
                                        daemon=True)

    def __enter__(self) -> "Watchdog":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=10)

    def beat(self, rank: int, event: dict) -> None:
        """Records a heartbeat; the rank is watched from now on, until it says it finished."""
        with self._cond:
            if rank in self._finished:
                return
            if event.get("where") == FINISHED:
                self._finished.add(rank)
                self._last.pop(rank, None)
            else:
                self._last[rank] = (time.monotonic(), event)
            self._cond.notify_all()

    def _watch(self) -> None:
        with self._cond:
            while not self._closed:
                if not self._last:
                    self._cond.wait()
                    continue
                oldest = min(seen for seen, _ in self._last.values())
                remaining = oldest + self.timeout_s - time.monotonic()
                if remaining > 0:
                    self._cond.wait(remaining)
                    continue
                rank = culprit(self._last)
                snapshot = {r: event for r, (_, event) in self._last.items()}
                self._closed = True
                break
            else:
                return
        self._on_stall(rank, snapshot)
