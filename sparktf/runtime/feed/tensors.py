"""A batch of column values as one model input declares it, and the checks that a column
can become it.

``to_input`` reshapes a flat array that holds the declared shape's values, pads arrays at
the end to the declared length (``keras.utils.pad_sequences(padding="post", value=0)``)
or, for a length of ``None``, to the batch's longest row (scoring then calls each length
unpadded: ``length_groups``), and casts to the declared dtype
(integers never pass through float32). ``check_input`` refuses, before any batch, a
column that cannot become its input, from what every task saw of it (``ColumnInfo``).
"""

from __future__ import annotations

import math

import numpy as np

from sparktf.runtime.feed.columns import ColumnInfo, FeedError, Padded, widen


def is_string_dtype(dtype) -> bool:
    return dtype is not None and str(dtype) in ("string", "tf.string", "object")


def check_input(column: str, info: ColumnInfo, spark: str, input_name: str, shape,
                dtype) -> None:
    """Raises ``FeedError`` if the column (as ``info`` describes every row of it) cannot
    become the model input ``input_name`` of ``shape`` (without the batch; None: unknown)
    and ``dtype``; says what to change."""
    declared = f"input '{input_name}' declares dtype {dtype} and shape {_shape_text(shape)}"
    if dtype is not None and is_string_dtype(dtype) != info.is_text:
        fix = ("Index the column first (StringIndexer) or give the model a string input "
               "(keras.Input(shape=(1,), dtype='string') into a StringLookup)"
               if info.is_text else "Cast the column to string or declare a numeric input")
        raise FeedError(f"Column '{column}' (Spark type {spark}) cannot feed the model: "
                        f"{declared}. {fix}.")
    if shape is None or any(d is None for d in shape):
        if shape is not None and len(info.shape) > len(shape) and not info.varies:
            _shape_error(column, spark, declared, info)
        return
    if not info.varies:
        if info.shape != tuple(shape) and math.prod(info.shape) != math.prod(shape):
            _shape_error(column, spark, declared, info)
        return
    if info.vector or len(shape) != len(info.shape) or tuple(shape[1:]) != info.shape[1:]:
        _shape_error(column, spark, declared, info)
    if info.longest > shape[0]:
        raise FeedError(too_long(column, info.longest, shape[0]))


def too_long(column: str, length: int, limit: int) -> str:
    return (f"Column '{column}' has a row of length {length}, longer than the model input's "
            f"declared length {limit}; sparktf pads shorter rows but never truncates. "
            f"Declare the input with length >= {length} (or None: any length), or cut the "
            "arrays in Spark first (slice(col, 1, n)).")


def _shape_error(column, spark, declared, info) -> None:
    raise FeedError(f"Column '{column}' (Spark type {spark}, rows of shape "
                    f"{_shape_text(info.shape)}) cannot feed the model: {declared}. Make the "
                    "input's shape match the rows (a flat array may hold the input's values "
                    "in row-major order), or change the column.")


def _shape_text(shape) -> str:
    if shape is None:
        return "unknown"
    return "(" + ", ".join("None" if d is None else str(d) for d in shape) + \
        ("," if len(shape) == 1 else "") + ")"


def to_input(values, column: str, shape, dtype, fixed: bool = False) -> np.ndarray:
    """A batch of chunk values as the model input of ``shape`` (without the batch; None:
    unknown) and ``dtype`` declares it (see the module docstring). ``fixed``: the column's
    rows never vary in length (ml Vectors), so a different length is an error, not padding."""
    if isinstance(values, Padded):
        values = _padded_to(values, column, shape)
    elif shape is not None and values.ndim > 1 and all(d is not None for d in shape):
        row = values.shape[1:]
        if row != tuple(shape):
            if math.prod(row) == math.prod(shape):
                values = values.reshape((len(values),) + tuple(shape))
            elif (not fixed and len(row) == len(shape) and row[1:] == tuple(shape[1:])
                  and row[0] < shape[0]):
                values = widen(values, shape[0])
            elif row[0] > shape[0] and row[1:] == tuple(shape[1:]) and not fixed:
                raise FeedError(too_long(column, row[0], shape[0]))
            else:
                raise FeedError(f"Column '{column}' has rows of shape {_shape_text(row)} but "
                                f"the model input expects shape {_shape_text(shape)}.")
    elif shape is not None and values.ndim == 1 and len(shape) == 1 and shape[0] in (1, None):
        values = values.reshape(len(values), 1)
    return cast(values, dtype)


def _longest(values: Padded) -> int:
    """The longest row of a padded batch, 1 for a batch of no rows (a worker's empty step
    under tf_keras's own ``fit``): a model's loop over time (an RNN's) needs a step to
    run, over zero time steps TensorFlow cannot stack its outputs, and no row reads it."""
    return int(values.lengths.max()) if len(values) else 1


def _padded_to(values: Padded, column: str, shape) -> np.ndarray:
    limit = shape[0] if shape else None
    longest = _longest(values)
    if limit is None:
        return widen(values.values, longest)
    if longest > limit:
        raise FeedError(too_long(column, longest, limit))
    return widen(values.values, limit)


def cast(values: np.ndarray, dtype) -> np.ndarray:
    """``values`` as ``dtype`` declares (text stays text); with no declared dtype, floats
    other than float32 become float32, as Keras's ``fit`` makes them (its floatx)."""
    if values.dtype == object:
        return values
    if dtype is None or is_string_dtype(dtype):
        return values.astype(np.float32) if values.dtype.kind == "f" and \
            values.dtype != np.float32 else values
    target = np.dtype(str(dtype).replace("tf.", ""))
    return values if values.dtype == target else values.astype(target)


def to_label(values) -> np.ndarray:
    """A label batch as Keras's ``fit`` takes it from numpy: floats as float32, integers
    and booleans as they are, variable-length arrays padded to the batch's longest row."""
    if isinstance(values, Padded):
        values = widen(values.values, _longest(values))
    return cast(values, None)
