"""The straggler of a synchronous epoch, named on the driver once per epoch.

The chief reports every worker's own time and its wait in the gradient all-reduce after
each epoch (``runtime.process.step_times``). A worker whose own time is at least
``RATIO`` times the median of the others', by at least ``MIN_EXCESS_S`` over the epoch,
is named with its rank, its executor and by how much; a balanced epoch says nothing.
"""

from __future__ import annotations

import logging
import statistics

logger = logging.getLogger("sparktf")

RATIO = 1.3
# below this, the others waited too little for the difference to matter (or be real)
MIN_EXCESS_S = 0.5


def straggler(own: list[float]) -> tuple[int, float, float] | None:
    """(rank, own time / the others' median, the others' median) of the slowest worker
    of an epoch, if it straggled; None for a balanced epoch or a single worker."""
    if len(own) < 2:
        return None
    rank = max(range(len(own)), key=lambda r: own[r])
    others = statistics.median(own[:rank] + own[rank + 1:])
    if own[rank] - others < MIN_EXCESS_S or own[rank] < RATIO * others:
        return None
    return rank, (own[rank] / others if others > 0 else float("inf")), others


def where(executors: list, rank: int) -> str:
    """``executor <host:port>`` of ``rank`` when the tasks said it."""
    if rank < len(executors) and executors[rank]:
        return f"on executor {executors[rank]}"
    return "(executor unknown)"


def report(event: dict, label: str = "") -> None:
    """Names the straggler of the epoch ``event`` (kind "workers") reports, if any."""
    own = [float(x) for x in event.get("own_seconds", [])]
    found = straggler(own)
    if found is None:
        return
    rank, ratio, others = found
    waited = [float(x) for x in event.get("wait_seconds", [])]
    lost = statistics.median(w for r, w in enumerate(waited) if r != rank) if waited else 0.0
    logger.warning(
        "sparktf: %sepoch %s: worker rank %d %s is the straggler: its own work (feeding, "
        "steps, callbacks) took %.2f s, %.1fx the other workers' median %.2f s, and the "
        "others waited %.2f s for it in the gradient all-reduce (median). Look at what "
        "runs there: its callbacks, its disk, other work on its host.",
        f"{label}: " if label else "", event.get("epoch"), rank,
        where(list(event.get("executors", [])), rank), own[rank], ratio, others, lost)
