"""What the scoring tasks are given: the columns feeding a signature's inputs, the outputs
written to columns, and where a single output goes as prediction, probability and raw
prediction. Built on the driver (``TFModel._score_spec``), pickled to the tasks."""

from __future__ import annotations

import dataclasses

REGRESSION, BINARY, MULTICLASS = "regression", "binary", "multiclass"


@dataclasses.dataclass(frozen=True)
class InputBinding:
    """A DataFrame column feeding one signature input."""

    column: str
    input_name: str
    shape: tuple  # without the batch dimension; None entries are unknown
    dtype: str


@dataclasses.dataclass(frozen=True)
class OutputBinding:
    """A signature output written to one column: 'scalar' or 'vector' per row."""

    output_name: str
    column: str
    per_row: str
    dtype: str


@dataclasses.dataclass(frozen=True)
class PredictionColumns:
    """Where a model's single output goes as prediction / probability / rawPrediction."""

    output_name: str
    kind: str  # REGRESSION, BINARY or MULTICLASS
    from_logits: bool
    prediction: str
    probability: str | None
    raw: str | None


@dataclasses.dataclass(frozen=True)
class ScoreSpec:
    """What the scoring tasks need, built on the driver."""

    model_path: str
    signature: str
    batch_size: int
    inputs: tuple[InputBinding, ...]
    outputs: tuple[OutputBinding, ...] = ()
    prediction: PredictionColumns | None = None
    use_gpu: str | bool = "auto"
    pad_length: int | None = None  # TFModel.padLength: open lengths padded to it, not grouped
    # (signature input, padding value) for the inputs of length None the model masks
    # (``padding``): padded to each call's longest row, not grouped
    padding: tuple = ()
    worker_tuning: bool = True  # spark.sparktf.workerTuning (worker_tuning)


def per_row_kind(shape: tuple) -> str:
    """'scalar' when an output holds one value per row, else 'vector'."""
    return "scalar" if len(shape) == 0 or (len(shape) == 1 and shape[0] == 1) else "vector"
