"""fit's progress on the driver (sparktf.ml.progress): a live bar per epoch, epoch lines."""

import io
import logging
import re

import pytest

from sparktf.errors import InvalidInputError
from sparktf.ml import TFEstimator, progress
from sparktf.ml.progress import FitProgress


def _beat(epoch, step, rows, loss=None):
    event = {"kind": "heartbeat", "rank": 0, "role": "worker:0", "where": "training",
             "epoch": epoch, "step": step, "steps": 10, "epochs": 2, "rows": rows}
    if loss is not None:
        event["loss"] = loss
    return event


EPOCH = {"kind": "epoch", "epoch": 1, "epochs": 2, "logs": {"loss": 0.25, "accuracy": 0.9},
         "rows": 640, "rows_per_s": 1234.0}


def _feed(progress):
    for step in (0, 3, 7):
        progress(_beat(1, step, step * 64, loss=None if step == 0 else 0.5 - step / 100))
    progress(EPOCH)
    progress(_beat(2, 0, 0))
    progress.finish()


def test_a_bar_moves_with_the_chiefs_steps_and_each_epoch_leaves_a_line(caplog):
    caplog.set_level(logging.INFO, logger="sparktf")
    stream = io.StringIO()
    _feed(FitProgress(verbose=1, stream=stream, bar=True))
    out = stream.getvalue()
    print(out)
    assert "sparktf epoch 1/2" in out and "sparktf epoch 2/2" in out
    assert "3/10" in out and "7/10" in out and "10/10" in out
    assert "rows/s=" in out and "loss=0.4300" in out  # the chief's last loss at step 7
    assert "loss=0.2500 accuracy=0.9000" in out  # the epoch's metrics on its finished bar
    lines = [r.getMessage() for r in caplog.records]
    assert any("epoch 1/2 loss=0.2500 accuracy=0.9000 (640 rows, 1,234 rows/s)" in m
               for m in lines), lines


def test_verbose_2_logs_epoch_lines_only_and_0_is_silent(caplog):
    caplog.set_level(logging.INFO, logger="sparktf")
    stream = io.StringIO()
    _feed(FitProgress(verbose=2, stream=stream, bar=True))
    assert stream.getvalue() == ""
    assert sum("epoch 1/2" in r.getMessage() for r in caplog.records) == 1
    caplog.clear()
    _feed(FitProgress(verbose=0, stream=stream, bar=True))
    assert stream.getvalue() == "" and not any("epoch" in r.getMessage()
                                              for r in caplog.records)


def test_each_fit_names_itself_in_its_epoch_lines(caplog):
    """Fits that run at once (threads, CrossValidator(parallelism=2)) log "fit N: epoch"."""
    caplog.set_level(logging.INFO, logger="sparktf")
    first, second = progress.next_label(), progress.next_label()
    assert first != second and re.fullmatch(r"fit \d+", first)
    _feed(FitProgress(verbose=2, stream=io.StringIO(), label=second))
    assert [r.getMessage() for r in caplog.records if "epoch" in r.getMessage()][0] \
        .startswith(f"sparktf: {second}: epoch 1/2 loss=0.2500")


def test_no_bar_where_no_one_watches():
    stream = io.StringIO()  # not a terminal, not a notebook
    shown = FitProgress(verbose=1, stream=stream)
    assert not shown.show_bar
    _feed(shown)
    assert stream.getvalue() == ""


def test_verbose_param_is_checked():
    assert TFEstimator(verbose=2).getVerbose() == 2 and TFEstimator().getVerbose() == 1
    with pytest.raises(InvalidInputError, match="verbose must be 0"):
        TFEstimator(verbose=3)
