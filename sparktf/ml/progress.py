"""``fit``'s progress on the driver: a live bar per epoch where people watch, log lines always.

The bar is ``tqdm.auto``'s: a widget in Jupyter, a text bar in a terminal. It moves
with the chief's heartbeats (twice a second: steps done of the epoch's steps,
rows/s, time left, the chief's last loss); each epoch ends with one log line of its
metrics (logger ``sparktf``), which is all that shows where no one watches (a log
file, a scheduler's output). ``verbose`` as in Keras: 0 silent, 1 bar and epoch
lines, 2 epoch lines only.
"""

from __future__ import annotations

import itertools
import logging
import shutil
import sys
import time
from typing import TextIO

logger = logging.getLogger("sparktf")
# tqdm's default without its steps/s (rows/s, in the postfix, says more): room for the
# postfix in an 80-column terminal
BAR_FORMAT = ("{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} "
              "[{elapsed}<{remaining}{postfix}]")


def format_logs(logs: dict) -> str:
    """``loss=0.1234 accuracy=0.9500`` in the order Keras reports them."""
    return " ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in logs.items())


def in_notebook() -> bool:
    """Whether this driver runs in a Jupyter kernel (where tqdm.auto shows a widget)."""
    shell = sys.modules.get("IPython")
    try:
        return shell is not None and shell.get_ipython() is not None and \
            "IPKernelApp" in shell.get_ipython().config
    except Exception:
        return False


_FITS = itertools.count(1)


def next_label() -> str:
    """``fit N``: the N-th fit of this driver. Epoch lines and the tasks' relayed output
    carry it, so fits that run at once (threads, ``CrossValidator(parallelism=2)``) can be
    told apart."""
    return f"fit {next(_FITS)}"


class FitProgress:
    """Consumes the tasks' events while ``fit`` runs (``launch(on_event=...)``)."""

    def __init__(self, verbose: int = 1, stream: TextIO | None = None,
                 bar: bool | None = None, label: str = ""):
        self.verbose = verbose
        self.label = label
        self.stream = stream or sys.stderr
        self.notebook = in_notebook()
        if bar is None:
            bar = self.notebook or self.stream.isatty()
        self.show_bar = verbose == 1 and bar
        self._bar = None
        self._bar_epoch = None
        self._epoch_started = time.monotonic()

    def __call__(self, event: dict) -> None:
        kind = event.get("kind")
        if kind == "stats":
            logger.info("sparktf: rank %s (%s) trained on %s rows; peak memory: feeder %.0f MB,"
                        " TensorFlow process %.0f MB", event.get("rank"), event.get("role"),
                        event.get("rows"), event.get("feeder_peak_rss_mb", 0.0),
                        event.get("task_peak_rss_mb", 0.0), extra={"sparktf_stats": event})
        elif kind == "heartbeat" and "steps" in event and self.show_bar:
            self._step(event)
        elif kind == "epoch":
            self._epoch(event)

    def _step(self, event: dict) -> None:
        epoch = event.get("epoch")
        if self._bar is None or self._bar_epoch != epoch:
            self._close()
            self._open(epoch, int(event["steps"]), event.get("epochs"))
        bar = self._bar
        bar.n = int(event.get("step") or 0)
        elapsed = max(time.monotonic() - self._epoch_started, 1e-9)
        postfix = {"rows/s": f"{event.get('rows', 0) / elapsed:,.0f}"}
        if "loss" in event:
            postfix["loss"] = f"{event['loss']:.4f}"
        bar.set_postfix(postfix, refresh=False)
        bar.refresh()

    def _open(self, epoch, steps: int, epochs=None) -> None:
        from tqdm.auto import tqdm

        self._epoch_started = time.monotonic()
        self._bar_epoch = epoch
        of = f"/{epochs}" if epochs else ""
        # a terminal that reports no size (0 columns) would get a bar of no width
        width = {} if self.notebook else {"ncols": shutil.get_terminal_size().columns or 100}
        self._bar = tqdm(total=steps, desc=f"sparktf epoch {epoch}{of}", unit="step",
                         file=self.stream, leave=True, bar_format=BAR_FORMAT, **width)

    def _epoch(self, event: dict) -> None:
        epoch, epochs = int(event["epoch"]), int(event["epochs"])
        text = (f"epoch {epoch}/{epochs} {format_logs(event.get('logs', {}))} "
                f"({event.get('rows', 0)} rows, {event.get('rows_per_s', 0.0):,.0f} rows/s)")
        if self._bar is not None and self._bar_epoch == epoch:
            self._bar.n = self._bar.total
            self._bar.set_description_str(f"sparktf epoch {epoch}/{epochs}", refresh=False)
            self._bar.set_postfix_str(format_logs(event.get("logs", {})), refresh=False)
            self._close()
        if self.verbose:
            logger.info("sparktf: %s%s", f"{self.label}: " if self.label else "", text)
        self._epoch_started = time.monotonic()

    def _close(self) -> None:
        if self._bar is not None:
            self._bar.refresh()
            self._bar.close()
            self._bar = None

    def finish(self) -> None:
        """Closes an open bar (training stopped, failed, or was cancelled mid-epoch)."""
        self._close()
