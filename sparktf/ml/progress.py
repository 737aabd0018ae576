"""Per-epoch progress of ``fit`` on the driver: a bar in a terminal, log lines otherwise."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

logger = logging.getLogger("sparktf")

BAR_WIDTH = 24


def format_logs(logs: dict) -> str:
    """``loss=0.1234 accuracy=0.9500`` in the order Keras reports them."""
    return " ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in logs.items())


class EpochProgress:
    """Consumes the chief's ``epoch`` events while ``fit`` runs."""

    def __init__(self, stream: TextIO | None = None, terminal: bool | None = None):
        self.stream = stream or sys.stderr
        self.terminal = self.stream.isatty() if terminal is None else terminal
        self.epochs_seen = 0

    def __call__(self, event: dict) -> None:
        if event.get("kind") == "stats":
            logger.info("sparktf: rank %s (%s) trained on %s rows; peak memory: feeder %.0f MB,"
                        " TensorFlow process %.0f MB", event.get("rank"), event.get("role"),
                        event.get("rows"), event.get("feeder_peak_rss_mb", 0.0),
                        event.get("task_peak_rss_mb", 0.0), extra={"sparktf_stats": event})
            return
        if event.get("kind") != "epoch":
            return
        self.epochs_seen += 1
        epoch, epochs = int(event["epoch"]), int(event["epochs"])
        text = (f"epoch {epoch}/{epochs} {format_logs(event.get('logs', {}))} "
                f"({event.get('rows', 0)} rows, {event.get('rows_per_s', 0.0):,.0f} rows/s)")
        if self.terminal:
            done = BAR_WIDTH * epoch // max(epochs, 1)
            bar = "#" * done + "." * (BAR_WIDTH - done)
            end = "\n" if epoch == epochs else ""
            self.stream.write(f"\r\x1b[2Ksparktf [{bar}] {text}{end}")
            self.stream.flush()
        else:
            logger.info("sparktf: %s", text)

    def finish(self) -> None:
        """Ends the bar's line if training stopped early."""
        if self.terminal and self.epochs_seen:
            self.stream.write("\n")
            self.stream.flush()
