"""The stragglers of a synchronous epoch, named on the driver once per epoch.

The chief reports every worker's own time and its wait in the gradient all-reduce after
each epoch (``runtime.process.step_times``). A worker whose own time is at least
``RATIO`` times the typical worker's, by at least ``MIN_EXCESS_S`` over the epoch, is
named with its rank, its executor and by how much; a balanced epoch says nothing. The
typical worker is the median of all workers (of 3 or more: several slow workers are each
named, two equally slow ones of three are the typical ones), or with 2 workers the other.
"""

from __future__ import annotations

import logging
import statistics

logger = logging.getLogger("sparktf")

RATIO = 1.3
# below this, the others waited too little for the difference to matter (or be real)
MIN_EXCESS_S = 0.5


def stragglers(own: list[float]) -> list[tuple[int, float, float]]:
    """(rank, own time / the typical worker's, the typical worker's) of each worker that
    straggled in an epoch, slowest first; none for a balanced epoch or a single worker."""
    if len(own) < 2:
        return []
    middle = statistics.median(own)
    found = []
    for rank, seconds in enumerate(own):
        typical = own[1 - rank] if len(own) == 2 else middle
        if seconds - typical >= MIN_EXCESS_S and seconds >= RATIO * typical:
            found.append((rank, seconds / typical if typical > 0 else float("inf"), typical))
    return sorted(found, key=lambda f: -own[f[0]])


def where(executors: list, rank: int) -> str:
    """``executor <host:port>`` of ``rank`` when the tasks said it."""
    if rank < len(executors) and executors[rank]:
        return f"on executor {executors[rank]}"
    return "(executor unknown)"


def report(event: dict, label: str = "") -> None:
    """Names the stragglers of the epoch ``event`` (kind "workers") reports, if any, in
    one line."""
    own = [float(x) for x in event.get("own_seconds", [])]
    found = stragglers(own)
    if not found:
        return
    waited = [float(x) for x in event.get("wait_seconds", [])]
    slow = {rank for rank, _, _ in found}
    others = [w for r, w in enumerate(waited) if r not in slow]
    lost = statistics.median(others) if others else 0.0
    executors = list(event.get("executors", []))
    named = "; ".join(
        f"worker rank {rank} {where(executors, rank)}: {own[rank]:.2f} s of its own work "
        f"(feeding, steps, callbacks), {_times(ratio)} the typical worker's {typical:.2f} s"
        for rank, ratio, typical in found)
    logger.warning(
        "sparktf: %sepoch %s: the straggler%s %s. The other workers waited %.2f s for %s "
        "(median) in the gradient all-reduce and at the epoch's end. Look at what runs "
        "there: callbacks, disks, other work on the host.",
        f"{label}: " if label else "", event.get("epoch"),
        " is" if len(found) == 1 else "s are", named, lost,
        "it" if len(found) == 1 else "them")


def _times(ratio: float) -> str:
    return f"{ratio:.1f}x" if ratio != float("inf") else "many times"
