"""Signature calls whose results for a row do not depend on the other rows of its batch.

An input whose length the signature leaves open (``None``) takes arrays of any length.
Padding every row of a batch to the batch's longest would feed a row zeros whose number
depends on its neighbours, so a model that does not mask them (a pooling or a recurrent
layer over an unmasked ``Embedding``) would score the same row differently under another
partitioning or ``batchSize``. Instead the rows of a batch are grouped by their lengths
and each group is called at its own length, unpadded (``scoring_calls``): every row is
scored as if alone. Serving signatures declare those lengths ``None``, so calls of
different lengths reuse one graph (no retracing). ``TFModel``'s ``padLength`` pads such
inputs to one fixed length instead (``padded_shape``): one call per batch, still
independent of the neighbours; so does a model that masks its padding (``padding``).

An output whose length follows its row's (a per-token output) then differs from group
to group: it comes back as ``RowArrays``, each row's own array.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparktf.errors import InvalidInputError


@dataclasses.dataclass(frozen=True)
class RowArrays:
    """An output whose per-row shape differs between rows: one numpy array per row."""

    rows: list

    def __len__(self) -> int:
        return len(self.rows)


def open_length(column: pa.Array, shape) -> bool:
    """Whether ``column`` is an array column into an input whose length is open (None)."""
    return bool(shape) and shape[0] is None and (
        pa.types.is_list(column.type) or pa.types.is_large_list(column.type))


def padded_shape(column: pa.Array, name: str, shape, pad_length: int):
    """``shape`` with an open length fixed at ``pad_length`` for an array column (``TFModel``'s
    ``padLength``: one call per batch, each row padded as ``pad_sequences(maxlen=...)``
    would); refuses a longer row, naming the column."""
    if not open_length(column, shape):
        return shape
    longest = pc.max(pc.list_value_length(column)).as_py() or 0
    if longest > pad_length:
        raise InvalidInputError(
            f"Column '{name}' has a row of length {longest}, longer than padLength="
            f"{pad_length}; sparktf pads shorter rows but never truncates. Set padLength >= "
            f"{longest}, leave it unset (each row scored at its own length), or cut the "
            "arrays in Spark first (slice(col, 1, n)).")
    return (pad_length, *shape[1:])


def groups(lengths: list[np.ndarray]) -> list[tuple[np.ndarray, tuple]]:
    """(row indices, their lengths) for each distinct combination of the inputs' lengths."""
    keys = np.stack(lengths, axis=1)
    unique, inverse = np.unique(keys, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    order = np.argsort(inverse, kind="stable")
    rows = np.split(order, np.cumsum(np.bincount(inverse, minlength=len(unique)))[:-1])
    return [(r, tuple(int(d) for d in key)) for r, key in zip(rows, unique)]


def merge(parts: list, n: int) -> dict:
    """Each output over the ``n`` rows, in row order, from the calls' ``(rows, outputs)``;
    ``RowArrays`` for an output whose per-row shape differs between calls."""
    if len(parts) == 1 and len(parts[0][0]) == n:
        return parts[0][1]
    merged = {}
    for name in parts[0][1]:
        pieces = [(rows, outputs[name]) for rows, outputs in parts]
        shapes = {values.shape[1:] for _, values in pieces}
        if len(shapes) == 1:
            out = np.empty((n, *shapes.pop()), dtype=pieces[0][1].dtype)
            for rows, values in pieces:
                out[rows] = values
        else:
            per_row: list = [None] * n
            for rows, values in pieces:
                for i, value in zip(rows, values):
                    per_row[i] = value
            out = RowArrays(per_row)
        merged[name] = out
    return merged


def list_column(values: RowArrays, valid: np.ndarray, n: int, dtype: str) -> pa.Array:
    """``values`` (the valid rows') as a list column of ``n`` rows, each row's array
    flattened, null where the inputs were null."""
    flat = [np.asarray(v).reshape(-1) for v in values.rows]
    sizes = np.zeros(n, dtype=np.int64)
    sizes[valid] = [len(v) for v in flat]
    offsets = pa.array(np.concatenate([[0], np.cumsum(sizes)]), pa.int32())
    joined = np.concatenate(flat) if flat else np.zeros(0, dtype=object)
    if dtype == "string":
        items = pa.array([v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                          for v in joined], pa.string())
    else:
        items = pa.array(joined.astype(dtype, copy=False))
    return pa.ListArray.from_arrays(offsets, items, mask=pa.array(~valid))


def refuse_prediction(output_name: str) -> None:
    """A per-token output has no single prediction per row: say how to get it."""
    raise InvalidInputError(
        f"The output '{output_name}' gives each row an array whose length follows the "
        "row's input (a per-token output), so it has no single prediction or probability "
        f"vector per row. Map it to an array column: outputMapping={{'{output_name}': "
        "'<column>'}.")
