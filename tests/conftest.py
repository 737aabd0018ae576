"""Shared test helpers."""

import os
import select

CHILD_MARKER = "sparktf.runtime.child"


def child_pids() -> list[int]:
    """PIDs of task processes (main_fn runners) alive on this machine."""
    return pids_with(CHILD_MARKER)


def pids_with(marker: str) -> list[int]:
    """PIDs of this machine's processes whose command line contains ``marker``."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if marker.encode() in cmdline:
            pids.append(int(entry))
    return pids


def wait_gone(pids, timeout: float = 30.0) -> list[int]:
    """Blocks (pidfd, bounded) until the processes exit; returns those still alive."""
    alive = []
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        try:
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                alive.append(pid)
        finally:
            os.close(fd)
    return alive


# (model kind, workers, batch size, worst key, its relative difference): filled by
# the Keras conformance tests, printed at the end of the run.
CONFORMANCE: list[tuple] = []


def pytest_terminal_summary(terminalreporter):
    if not CONFORMANCE:
        return
    write = terminalreporter.write_line
    write("")
    write("Keras conformance: TFEstimator.fit vs keras Model.fit on the same rows "
          "(max relative difference over the history and predictions)")
    write(f"{'model kind':40} {'workers':>7} {'batch':>6}  {'max rel diff':>12}  worst")
    for name, workers, batch, key, diff in CONFORMANCE:
        write(f"{name:40} {workers:>7} {batch:>6}  {diff:>12.2e}  {key}")
