"""A scoring call's outputs as the UDF's output columns: values at the valid rows, null
where a row's inputs were null; a single output as Spark ML's prediction, probability
and raw prediction columns (``classify``: plain numpy)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparktf.runtime.scoring import length_groups
from sparktf.runtime.scoring.spec import BINARY, REGRESSION, ScoreSpec


def classify(output: np.ndarray, kind: str, from_logits: bool):
    """(prediction, probability or None, raw or None) for a model's output batch."""
    out = output.reshape(len(output), -1).astype(np.float64)
    if kind == REGRESSION:
        return out[:, 0], None, None
    if kind == BINARY:
        p = 1.0 / (1.0 + np.exp(-out[:, 0])) if from_logits else out[:, 0]
        probability = np.stack([1.0 - p, p], axis=1)
        raw = np.stack([-out[:, 0], out[:, 0]], axis=1) if from_logits else probability
        return (p > 0.5).astype(np.float64), probability, raw
    if from_logits:
        shifted = np.exp(out - out.max(axis=1, keepdims=True))
        probability = shifted / shifted.sum(axis=1, keepdims=True)
    else:
        probability = out
    return probability.argmax(axis=1).astype(np.float64), probability, out


def output_arrays(n: int, spec: ScoreSpec, outputs: dict) -> tuple[list, list]:
    """(names, arrays) of the output columns for ``n`` rows, null where inputs were null."""
    valid = outputs.get("valid", np.zeros(n, dtype=bool))
    values = outputs.get("values", {})
    names, arrays = [], []
    for b in spec.outputs:
        width = 1 if b.per_row == "scalar" else None
        arrays.append(_column(values.get(b.output_name), valid, n, width, b.dtype))
        names.append(b.column)
    p = spec.prediction
    if p is not None:
        out = values.get(p.output_name)
        if isinstance(out, length_groups.RowArrays):
            length_groups.refuse_prediction(p.output_name)
        prediction, probability, raw = (classify(out, p.kind, p.from_logits)
                                        if out is not None else (None, None, None))
        arrays.append(_column(prediction, valid, n, 1, "float64"))
        names.append(p.prediction)
        for column, value in ((p.probability, probability), (p.raw, raw)):
            if column:
                arrays.append(_column(value, valid, n, None, "float64"))
                names.append(column)
    return names, arrays


def _column(values, valid: np.ndarray, n: int, width: int | None, dtype: str) -> pa.Array:
    """A column of ``n`` rows: ``values`` at the valid rows, null elsewhere."""
    if isinstance(values, length_groups.RowArrays):
        return length_groups.list_column(values, valid, n, dtype)
    if dtype == "string":
        return _text_column(values, valid, n, width)
    mask = pa.array(~valid)
    if width == 1:
        full = np.zeros(n, dtype=dtype)
        if values is not None and valid.any():
            full[valid] = np.asarray(values).reshape(int(valid.sum()), -1)[:, 0]
        return pa.array(full, mask=~valid)
    list_type = pa.list_(pa.from_numpy_dtype(np.dtype(dtype)))
    if values is None or not valid.any():  # no row of this batch was scored (all null)
        return pa.nulls(n, list_type)
    k = np.asarray(values).reshape(len(values), -1).shape[1]
    flat = np.zeros((n, k), dtype=dtype)
    flat[valid] = np.asarray(values).reshape(int(valid.sum()), -1)
    fixed = pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), k, mask=mask)
    return pc.cast(fixed, list_type)


def _text_column(values, valid: np.ndarray, n: int, width: int | None) -> pa.Array:
    """A string output (e.g. a ``StringLookup(invert=True)`` head) as a string column (a
    list of strings per row for a vector output); null where the inputs were null."""
    rows: list = [None] * n
    if values is not None and valid.any():
        flat = np.asarray(values).reshape(int(valid.sum()), -1)
        decoded = [[v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                    for v in row] for row in flat]
        for i, row in zip(np.flatnonzero(valid), decoded):
            rows[i] = row[0] if width == 1 else row
    return pa.array(rows, type=pa.string() if width == 1 else pa.list_(pa.string()))
