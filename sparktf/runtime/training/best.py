"""``keepBest``: the model a fit exports is the epoch with the best monitored value, with
Keras's own rules for which way is better (``monitor``/``mode`` of ``ModelCheckpoint``;
``"auto"``: the metric's own direction, ``directions``, which the driver decides before
the job)."""

from __future__ import annotations

import numpy as np

from sparktf.errors import InvalidInputError
from sparktf.runtime.training import directions


def keep_best(monitor: str, mode: str):
    """A callback that keeps the weights of the best epoch so far; ``restore`` puts them
    back after the last epoch and says which epoch they are in the history."""
    from keras.src.callbacks.monitor_callback import MonitorCallback

    class KeepBest(MonitorCallback):
        def __init__(self):
            super().__init__(monitor, mode)
            self.epoch: int | None = None  # 1-based, as the progress lines count
            self.weights = None

        def on_epoch_end(self, epoch, logs=None):
            logs = logs or {}
            if self.monitor not in logs:
                raise InvalidInputError(
                    f"keepBest={self.monitor!r} is not among the epoch's values "
                    f"{sorted(logs)}: name one of them (a val_ value needs "
                    "validationFraction or validationCol).")
            if self.monitor_op is None:
                self._set_mode()
                self._set_monitor_op()
            value = logs[self.monitor]
            if np.ndim(value):
                raise InvalidInputError(
                    f"keepBest={self.monitor!r} has a value per element ({list(value)}), "
                    "and keepBest compares epochs by one number: name a scalar metric "
                    "(F1Score(average='macro') rather than average=None, say).")
            value = float(value)
            if self.epoch is None or bool(self._is_improvement(value, self.best)):
                self.best, self.epoch, self.weights = value, epoch + 1, self.model.get_weights()

        def _set_mode(self) -> None:
            """Mode "auto" as the model's metric has it, every output's too (Keras's own
            finds no prefixed name of a multi-output model)."""
            if self.mode != "auto":
                return
            larger = directions.larger_is_better(self.model, self.monitor)
            if larger is None:
                raise InvalidInputError(
                    f"keepBestMode='auto' found no direction for keepBest={self.monitor!r} "
                    "in the model's metrics: set keepBestMode='max' or 'min'.")
            self.mode = "max" if larger else "min"

        def state(self) -> dict | None:
            """The best epoch so far and its value (its weights are its checkpoint's)."""
            return None if self.epoch is None else {"epoch": self.epoch, "value": self.best}

        def resume(self, state: dict, weights) -> None:
            self.epoch, self.best, self.weights = state["epoch"], state["value"], weights

        def restore(self, history: dict) -> None:
            if self.weights is not None:
                self.model.set_weights(self.weights)
                history["best_epoch"] = [self.epoch]

    return KeepBest()
