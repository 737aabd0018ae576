"""Spark columns as tensors: what each column kind becomes on its way into a Keras model.

One column goes through three forms, each defined here:

- **spilled** (``spill_array``): the Arrow column a task keeps on local disk. Numbers keep
  their own type (``bigint`` stays int64, ``double`` stays float64, decimals become
  float64), booleans stay booleans, ``string`` and ``binary`` stay as they are, arrays stay
  lists of their own element type (nested ones included), ml Vectors become fixed-size
  float32 lists. Anything else (maps, structs, dates...) is a ``FeedError``.
- **chunk values** (``chunk_values``): a spilled column as numpy. Numbers ``(n,)``; strings
  and bytes object arrays ``(n,)``; arrays whose rows all have the same length an N-d
  array; variable-length arrays a ``Padded`` (padded at the end with 0, or "" for
  strings, to the chunk's longest row, plus each row's length).
- **model input** (``tensors.to_input``): a batch of chunk values as one model input
  declares it.

``ColumnInfo`` describes a column over every row a task received (``describe``); the
tasks merge theirs (``merge``), so every task knows whether a column's length varies and
its longest row before the model sees a batch.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)

from sparktf.errors import InvalidInputError

_VECTOR_FIELDS = {"type", "size", "indices", "values"}
STRING, BYTES = "str", "bytes"  # ColumnInfo.dtype of text and binary columns


class FeedError(InvalidInputError):
    """A column's data cannot be fed to TensorFlow (the user's data is at fault)."""


@dataclasses.dataclass(frozen=True)
class ColumnInfo:
    """A column as the task received it: the numpy dtype of its values (``"str"`` /
    ``"bytes"`` for text and binary), its row shape (``None`` for a length that varies),
    the longest row of a variable-length array, and whether it is an ml Vector."""

    dtype: str
    shape: tuple
    longest: int = 0
    vector: bool = False

    @property
    def varies(self) -> bool:
        return bool(self.shape) and self.shape[0] is None

    @property
    def is_text(self) -> bool:
        return self.dtype in (STRING, BYTES)

    def rows(self) -> str:
        """The rows in words, e.g. "float32 rows of shape (3,)"."""
        if self.varies:
            return f"{self.dtype} rows whose length varies"
        return f"{self.dtype} rows of shape {self.shape}"

    def as_json(self) -> list:
        return [self.dtype, list(self.shape), self.longest, self.vector]

    @classmethod
    def from_json(cls, value) -> "ColumnInfo":
        dtype, shape, longest, vector = value
        return cls(dtype, tuple(shape), int(longest), bool(vector))


def merge(infos: Sequence[ColumnInfo | None]) -> ColumnInfo | None:
    """One column's info over every task's rows: a dimension two tasks see differently
    varies; the longest row is the longest anywhere."""
    infos = [i for i in infos if i is not None]
    if not infos:
        return None
    first = infos[0]
    shape = list(first.shape)
    for info in infos[1:]:
        if len(info.shape) != len(shape) or info.dtype != first.dtype:
            raise FeedError(f"A column holds {first.dtype} {first.shape} on one task and "
                            f"{info.dtype} {info.shape} on another.")
        shape = [a if a == b else None for a, b in zip(shape, info.shape)]
    longest = max([i.longest for i in infos] + [i.shape[0] or 0 for i in infos if i.shape])
    return ColumnInfo(first.dtype, tuple(shape), longest if shape and shape[0] is None else 0,
                      first.vector)


def spark_type(t: pa.DataType) -> str:
    """How Spark names the type that arrived as Arrow type ``t`` (for messages)."""
    if is_vector_type(t):
        return "vector"
    if is_list_type(t):
        return f"array<{spark_type(t.value_type)}>"
    names = {"int8": "tinyint", "int16": "smallint", "int32": "int", "int64": "bigint",
             "float": "float", "double": "double", "bool": "boolean", "string": "string",
             "large_string": "string", "binary": "binary", "large_binary": "binary"}
    return names.get(str(t), str(t))


def is_vector_type(t: pa.DataType) -> bool:
    """Whether an Arrow type is how Spark sends an ml ``VectorUDT``."""
    return pa.types.is_struct(t) and {t.field(i).name for i in range(t.num_fields)} == \
        _VECTOR_FIELDS


def is_list_type(t: pa.DataType) -> bool:
    """Whether ``t`` is an Arrow list type (variable or fixed size)."""
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _is_text(t: pa.DataType) -> bool:
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t))


def _leaf(t: pa.DataType) -> pa.DataType:
    while is_list_type(t):
        t = t.value_type
    return t


# ---------------------------------------------------------------------------- spilled


def spill_array(arr: pa.Array, name: str) -> pa.Array:
    """The column as a task keeps it (see the module docstring); refuses nulls inside
    arrays and types TensorFlow cannot take."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.null_count:
        raise FeedError(f"Column '{name}' has {arr.null_count} null value(s) in this "
                        "partition; sparktf does not feed nulls to TensorFlow. Drop or fill "
                        f"them first, e.g. df.na.drop(subset=['{name}']).")
    t = arr.type
    if is_vector_type(t):
        matrix = vectors_to_matrix(arr, name)
        return pa.FixedSizeListArray.from_arrays(pa.array(matrix.reshape(-1)), matrix.shape[1])
    if is_list_type(t):
        _check_leaf(_leaf(t), name, spark_type(t))
        inner = arr
        while is_list_type(inner.type):
            inner = inner.flatten()
            if inner.null_count:
                raise FeedError(f"Column '{name}' has null elements inside its arrays; fill "
                                "or drop them before feeding it to TensorFlow.")
        if pa.types.is_decimal(inner.type):
            return pa.compute.cast(arr, _replace_leaf(t, pa.float64()))
        return arr
    _check_leaf(t, name, spark_type(t))
    if pa.types.is_decimal(t):
        return pa.compute.cast(arr, pa.float64())
    return arr


def rows_with_null_elements(arr: pa.Array) -> np.ndarray:
    """Which rows of a (nested) array column hold a null element at any depth."""
    return rows_holding(arr, lambda values: values.is_null().to_numpy(zero_copy_only=False))


def rows_holding(arr: pa.Array, marks) -> np.ndarray:
    """Which rows of a (nested) array column hold an element that ``marks`` (values of
    one level, flattened -> bool array, or None) marks, at any depth below the rows."""
    marked = np.zeros(len(arr), dtype=bool)
    inner, parents = arr, []
    while is_list_type(inner.type):
        parents.append(np.repeat(np.arange(len(inner)), _lengths(inner)))
        inner = inner.flatten()
        found = marks(inner)
        if found is not None and found.any():
            where = np.flatnonzero(found)
            for parent in reversed(parents):  # up to the top-level row
                where = parent[where]
            marked[where] = True
    return marked


def _lengths(arr: pa.Array) -> np.ndarray:
    """Each row's number of elements (0 for a null row), as ``flatten`` lays them out."""
    if pa.types.is_fixed_size_list(arr.type):
        return np.where(arr.is_null().to_numpy(zero_copy_only=False), 0, arr.type.list_size)
    return pa.compute.fill_null(pa.compute.list_value_length(arr), 0).to_numpy()


def _replace_leaf(t: pa.DataType, leaf: pa.DataType) -> pa.DataType:
    return pa.list_(_replace_leaf(t.value_type, leaf)) if is_list_type(t) else leaf


def _check_leaf(t: pa.DataType, name: str, spark: str) -> None:
    if (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
            or pa.types.is_decimal(t) or _is_text(t)):
        return
    raise FeedError(f"Column '{name}' has type {spark}, which cannot be fed to TensorFlow. "
                    "Numbers, booleans, strings, binary, arrays of them (nested too) and ml "
                    "Vectors can; cast dates and timestamps to numbers, and select the "
                    "fields of a struct or map as columns.")


def describe(arr: pa.Array) -> ColumnInfo:
    """A spilled column's ``ColumnInfo`` over this array's rows."""
    t = arr.type
    leaf = _leaf(t)
    if _is_text(leaf):
        dtype = BYTES if pa.types.is_binary(leaf) or pa.types.is_large_binary(leaf) else STRING
    else:
        dtype = np.dtype(leaf.to_pandas_dtype()).name  # 'bool', not NumPy 1's 'bool_'
    shape: list = []
    longest = 0
    level = arr
    while is_list_type(level.type):
        if pa.types.is_fixed_size_list(level.type):
            lengths = np.full(len(level), level.type.list_size)
        else:
            lengths = level.value_lengths().to_numpy(zero_copy_only=False)
        low = int(lengths.min()) if len(lengths) else 0
        high = int(lengths.max()) if len(lengths) else 0
        shape.append(low if low == high else None)
        if not shape[:-1]:
            longest = high
        level = level.flatten()
    return ColumnInfo(dtype, tuple(shape), longest if shape and shape[0] is None else 0,
                      vector=pa.types.is_fixed_size_list(t) and not is_list_type(t.value_type)
                      and pa.types.is_float32(t.value_type))


# ------------------------------------------------------------------------ chunk values


@dataclasses.dataclass(frozen=True)
class Padded:
    """Variable-length rows: ``values`` padded at the end along axis 1 (with 0, or "" for
    text) to the longest row here, and each row's ``lengths``. Indexes like an array."""

    values: np.ndarray
    lengths: np.ndarray

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, rows) -> "Padded":
        return Padded(self.values[rows], self.lengths[rows])

    @property
    def width(self) -> int:
        return self.values.shape[1]


def _pad_value(values: np.ndarray):
    return "" if values.dtype == object else 0


def widen(values: np.ndarray, width: int, fill=None) -> np.ndarray:
    """``values`` padded at the end of axis 1 to ``width`` (or cut to it), with ``fill``
    (by default "" for text, else 0)."""
    have = values.shape[1]
    if have >= width:
        return values[:, :width]
    out = np.full((len(values), width) + values.shape[2:],
                  _pad_value(values) if fill is None else fill, dtype=values.dtype)
    out[:, :have] = values
    return out


def concat(parts: list):
    """Chunk values of one column one after the other (dense arrays, ``Padded`` or both)."""
    if len(parts) == 1:
        return parts[0]
    if not any(isinstance(p, Padded) for p in parts):
        shapes = {p.shape[1:] for p in parts}
        if len(shapes) == 1:
            return np.concatenate(parts)
    padded = [p if isinstance(p, Padded) else
              Padded(p, np.full(len(p), p.shape[1] if p.ndim > 1 else 1, np.int64))
              for p in parts]
    width = max(p.width for p in padded)
    return Padded(np.concatenate([widen(p.values, width) for p in padded]),
                  np.concatenate([p.lengths for p in padded]))


def chunk_values(arr: pa.Array, name: str):
    """A spilled column as numpy (see the module docstring)."""
    t = arr.type
    if not is_list_type(t):
        return arr.to_numpy(zero_copy_only=False)
    n = len(arr)
    if pa.types.is_fixed_size_list(t):
        lengths = None
        width = t.list_size
    else:
        lengths = arr.value_lengths().to_numpy(zero_copy_only=False)
        width = int(lengths[0]) if n else 0
        if not n or np.all(lengths == width):
            lengths = None
    inner = arr.flatten()
    if is_list_type(inner.type):
        values = chunk_values(inner, name)
        if isinstance(values, Padded):
            raise FeedError(f"Column '{name}' holds nested arrays whose inner arrays differ "
                            "in length; only the outermost array of a row may vary. Pad the "
                            "inner arrays first.")
    else:
        values = inner.to_numpy(zero_copy_only=not _is_text(inner.type)
                                and not pa.types.is_boolean(inner.type))
    if lengths is None:
        return values.reshape((n, width) + values.shape[1:])
    out = np.full((n, int(lengths.max())) + values.shape[1:], _pad_value(values),
                  dtype=values.dtype)
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    out[np.repeat(np.arange(n), lengths), np.arange(len(values)) - starts] = values
    return Padded(out, lengths.astype(np.int64))


def vectors_to_matrix(arr: pa.StructArray, name: str) -> np.ndarray:
    """ml Vectors (dense and sparse, as Spark sends them) as a float32 matrix."""
    n = len(arr)
    kinds = arr.field("type").to_numpy(zero_copy_only=False)
    values = arr.field("values")
    if np.all(kinds == 1):  # all dense: one reshape
        lengths = values.value_lengths().to_numpy(zero_copy_only=False)
        width = int(lengths[0]) if n else 0
        if not np.all(lengths == width):
            raise FeedError(f"Column '{name}' holds vectors of different sizes "
                            f"({int(lengths.min())} to {int(lengths.max())}); every vector "
                            "must have the same size.")
        return values.flatten().to_numpy(zero_copy_only=False).astype(
            np.float32, copy=False).reshape(n, width)
    sizes = arr.field("size").to_numpy(zero_copy_only=False)
    dense_lengths = values.value_lengths().to_numpy(zero_copy_only=False)
    widths = np.where(kinds == 1, dense_lengths, np.nan_to_num(sizes, nan=-1)).astype(np.int64)
    width = int(widths[0]) if n else 0
    if not np.all(widths == width):
        raise FeedError(f"Column '{name}' holds vectors of different sizes ({widths.min()} "
                        f"to {widths.max()}); every vector must have the same size.")
    out = np.zeros((n, width), dtype=np.float32)
    flat_values = values.flatten().to_numpy(zero_copy_only=False)
    row_of_value = np.repeat(np.arange(n), dense_lengths)
    offsets = values.offsets.to_numpy()[:-1] - values.offsets[0].as_py()
    position = np.arange(len(flat_values)) - np.repeat(offsets, dense_lengths)
    sparse_rows = kinds[row_of_value] == 0
    flat_indices = arr.field("indices").flatten().to_numpy(zero_copy_only=False)
    columns = position.copy()
    columns[sparse_rows] = flat_indices
    out[row_of_value, columns] = flat_values
    return out


def empty_values(info: ColumnInfo):
    """Zero rows of a column as ``info`` describes it (a step where a worker has no rows)."""
    dtype = object if info.is_text else np.dtype(info.dtype)
    values = np.zeros((0, *(d if d is not None else info.longest for d in info.shape)),
                      dtype=dtype)
    return Padded(values, np.zeros(0, np.int64)) if info.varies else values


def zero_row(empty):
    """One row of zeros ("" for text) shaped as ``empty``, zero rows of a column; a row of
    varying length is one step long (found by review: of length 0, the stand-in row of a
    worker without rows made a (1, 0) batch, over which a GRU cannot run)."""
    if isinstance(empty, Padded):
        values = zero_row(empty.values)
        return Padded(widen(values, max(1, values.shape[1])), np.ones(1, np.int64))
    if empty.dtype == object:
        return np.full((1, *empty.shape[1:]), "", dtype=object)
    return np.zeros((1, *empty.shape[1:]), empty.dtype)
