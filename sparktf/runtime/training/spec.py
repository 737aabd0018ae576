"""What a fit's training tasks are given and agree on: the frozen ``TrainSpec`` (built on
the driver) and the ``StepPlan`` that spreads every epoch's rows over the workers."""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Callable, Sequence

import numpy as np

from sparktf.runtime.feed import shards
from sparktf.runtime.training import keras_steps
from sparktf.runtime.training.bindings import Bindings

EXPORT_DIR = "export"
SAVED_MODEL = "saved_model"
KERAS_FILE = "model.keras"  # beside the SavedModel: where earlier fits wrote it
# Inside the SavedModel (assets.extra travels with it: a saved TFModel, MLflow): the Keras
# model, and what builds it where Keras cannot load its class (modelFn, hparams, inputs)
KERAS_IN_SAVED_MODEL = os.path.join("assets.extra", "sparktf_model.keras")
BUILDER_IN_SAVED_MODEL = os.path.join("assets.extra", "sparktf_model_fn.pkl")


@dataclasses.dataclass(frozen=True)
class TrainSpec:
    """Everything the training task needs, frozen on the driver."""

    model_fn: Callable[[dict], Any]
    hparams: dict
    feature_columns: tuple[str, ...]
    label_columns: tuple[str, ...]
    epochs: int
    batch_size: int
    model_dir: str
    shuffle: bool = True
    seed: int = 0
    has_validation: bool = False
    callbacks: tuple = ()
    evaluator: bool = False  # an evaluator side-car validates instead of the workers
    summary_steps: int = 0  # also log the training loss every this many steps (0: never)
    weight_column: str | None = None  # Keras's sample_weight, for training and validation
    class_weight: dict | None = None  # Keras's class_weight: class index -> weight
    spark_types: dict = dataclasses.field(default_factory=dict)  # column -> Spark type name
    # the features column the DataFrame lacks when inputCols was not set: then every model
    # input is fed from the column of its name, never in order
    missing_features: str | None = None
    keep_best: str | None = None  # export the epoch with the best value of this metric
    keep_best_mode: str = "auto"  # "min", "max" or "auto", as Keras's monitor
    export_name: str = EXPORT_DIR  # the export's folder in model_dir (runs.export_name)

    @property
    def validates_in_loop(self) -> bool:
        return self.has_validation and not self.evaluator

    @property
    def label_column(self) -> str:
        """The first label column (the only one of a single-output model)."""
        return self.label_columns[0]

    @property
    def columns(self) -> list[str]:
        """The columns a task reads: the features, the labels, then the weight if any."""
        return list(dict.fromkeys([*self.feature_columns, *self.label_columns,
                                   *([self.weight_column] if self.weight_column else [])]))

    def batches(self, shard: shards.Shard, sizes, bindings: Bindings, epoch: int | None = None,
                infos: dict | None = None, stand_in: bool = False):
        """``shard`` as step data for ``train_step``/``test_step``, one batch of each of
        ``sizes`` rows: in order, or with ``epoch`` and ``shuffle``, shuffled with that
        epoch's own seed; ``bindings`` make each batch the model's inputs and labels.
        ``stand_in``: a step of no rows gets a stand-in row (``shards.stand_in_batch``)."""
        seed = (None if epoch is None or not self.shuffle
                else (self.seed * 1_000_003 + epoch) % (2 ** 63))
        for batch in shards.step_batches(shard, sizes, self.columns, seed, infos, stand_in):
            yield self.step_data(batch, bindings)

    def step_data(self, batch: dict, bindings: Bindings) -> tuple:
        """One batch of columns as ``(x, y[, sample_weight])``, as Keras's adapters give it."""
        y = bindings.y(batch)
        weight = None
        if self.weight_column:
            weight = batch[self.weight_column].astype(np.float32)
        elif self.class_weight:
            weight = class_weights(y, self.class_weight)
        return keras_steps.step_data(bindings.x(batch), y, weight)

    def template(self, feed_spec: dict, bindings: Bindings) -> tuple:
        """A zero-row batch with the columns' shapes and dtypes (``ctx.feedSpec``): what
        builds the model's variables before any row is read. Its inputs and labels are
        symbolic: unknown where the model declares a dimension unknown or rows vary."""
        batch = shards.empty_batch(self.columns, feed_spec)
        return (bindings.x_template(batch), bindings.y_template(batch),
                *self.step_data(batch, bindings)[2:])


def class_weights(labels: np.ndarray, class_weight: dict) -> np.ndarray:
    """Keras's ``class_weight`` as per-row weights (its ``class_weight_to_sample_weights``):
    the class is the rounded label, or the arg-max of a one-hot row; unlisted classes 1."""
    classes = labels
    if classes.ndim > 1:
        classes = classes.argmax(-1) if classes.shape[-1] != 1 else classes[..., 0]
    classes = np.round(classes).astype(np.int64)
    table = np.ones(max(class_weight) + 2, dtype=np.float32)
    for key, value in class_weight.items():
        table[int(key)] = value
    inside = (classes >= 0) & (classes <= max(class_weight))
    return np.where(inside, table[np.clip(classes, 0, len(table) - 1)], 1.0).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class StepPlan:
    """One pass over rows spread over workers: how many each feeds at every step."""

    rows: np.ndarray  # [workers, steps], from shards.step_rows
    rank: int

    @classmethod
    def of(cls, all_rows: Sequence[int], rank: int, global_batch: int) -> "StepPlan":
        return cls(shards.step_rows(all_rows, global_batch), rank)

    @property
    def steps(self) -> int:
        return self.rows.shape[1]

    @property
    def sizes(self) -> list[int]:
        """This worker's batch size at each step."""
        return [int(n) for n in self.rows[self.rank]]

    @property
    def total_rows(self) -> int:
        return int(self.rows.sum())

    @property
    def shares(self) -> list[float]:
        """This worker's part of each step's rows (0 where it has none)."""
        step_rows = self.rows.sum(axis=0)
        return [float(mine / total) if total else 0.0
                for mine, total in zip(self.rows[self.rank], step_rows)]


def plan_steps(all_rows: Sequence[int], global_batch: int) -> int:
    """Steps per epoch so that every row is used once at ``global_batch`` rows a step."""
    return max(1, math.ceil(sum(all_rows) / global_batch))
