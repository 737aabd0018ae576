"""Driver-side checks of input columns, so bad input fails before any job starts (the
rows themselves are checked as the tasks receive them: ``sparktf.runtime.feed.row_checks``)."""

from __future__ import annotations

import math
from typing import Sequence

from pyspark.ml.linalg import VectorUDT
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sparktf.errors import InvalidInputError

_NUMERIC = (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType, T.DoubleType,
            T.DecimalType, T.BooleanType)
_TEXT = (T.StringType, T.BinaryType)


def quoted(name: str) -> str:
    """A column name as Spark must read it to take it whole: in backticks, each backtick
    inside doubled (unquoted, ``row.id`` is the field ``id`` of a struct ``row``)."""
    return "`" + name.replace("`", "``") + "`"


def column(name: str) -> Column:
    """The column called ``name``, whatever it holds (dots, spaces, backticks...)."""
    return F.col(quoted(name))


def column_kind(dtype: T.DataType) -> str | None:
    """'vector', 'array', 'numeric', 'string' or 'binary' for a feedable Spark type (an
    array may nest arrays of numbers, booleans, strings or binary), else None."""
    if isinstance(dtype, VectorUDT):
        return "vector"
    if isinstance(dtype, T.ArrayType):
        leaf = dtype.elementType
        while isinstance(leaf, T.ArrayType):
            leaf = leaf.elementType
        return "array" if isinstance(leaf, _NUMERIC + _TEXT) else None
    if isinstance(dtype, _NUMERIC):
        return "numeric"
    if isinstance(dtype, T.StringType):
        return "string"
    if isinstance(dtype, T.BinaryType):
        return "binary"
    return None


def check_feedable(schema: T.StructType, columns: Sequence[str], role: str = "input") -> None:
    """Raises ``InvalidInputError`` naming the first missing or unfeedable column."""
    names = schema.fieldNames()
    for name in columns:
        if name not in names:
            raise InvalidInputError(f"The {role} column '{name}' is not in the DataFrame. "
                                    f"Its columns are: {names}.")
        dtype = schema[name].dataType
        if column_kind(dtype) is None:
            raise InvalidInputError(
                f"The {role} column '{name}' has type {dtype.simpleString()}, which cannot be "
                "fed to TensorFlow. Numbers, booleans, strings, binary, arrays of them "
                "(nested too) and ml Vectors can: cast dates and timestamps to numbers, and "
                "select the fields of a struct or map as columns of their own.")


def check_label(schema: T.StructType, column: str) -> None:
    """Raises ``InvalidInputError`` unless ``column`` is a numeric or array label column."""
    check_feedable(schema, [column], "label")
    dtype = schema[column].dataType
    if column_kind(dtype) in ("string", "binary") or _holds_text(dtype):
        raise InvalidInputError(
            f"The label column '{column}' has type {dtype.simpleString()}; Keras's losses "
            "take numbers. Index it first (StringIndexer, or sparktf.ml.preprocessing's "
            "StringLookup vocabulary with a lookup in Spark).")


def _holds_text(dtype: T.DataType) -> bool:
    while isinstance(dtype, T.ArrayType):
        dtype = dtype.elementType
    return isinstance(dtype, _TEXT)


def feedable_columns(schema: T.StructType, exclude: Sequence[str]) -> list[str]:
    """The columns of ``schema`` that can be fed, but those in ``exclude``."""
    return [f.name for f in schema.fields
            if f.name not in exclude and column_kind(f.dataType) is not None]


def type_names(schema: T.StructType, columns: Sequence[str]) -> dict[str, str]:
    """Column -> Spark type name (``array<bigint>``), for messages made on the executors."""
    return {c: ("vector" if isinstance(schema[c].dataType, VectorUDT)
                else schema[c].dataType.simpleString()) for c in columns}


def check_weight_column(schema: T.StructType, column: str) -> None:
    """Raises ``InvalidInputError`` unless ``column`` is a numeric column of ``schema``."""
    check_feedable(schema, [column], "weight")
    if column_kind(schema[column].dataType) != "numeric":
        raise InvalidInputError(f"The weight column '{column}' has type "
                                f"{schema[column].dataType.simpleString()}; it must hold one "
                                "number per row (Keras's sample_weight).")


def check_validation_column(schema: T.StructType, column: str) -> None:
    """Raises ``InvalidInputError`` unless ``column`` is a boolean or numeric column of
    ``schema`` (true or non-zero: a validation row)."""
    check_feedable(schema, [column], "validation")
    if column_kind(schema[column].dataType) != "numeric":
        dtype = schema[column].dataType.simpleString()
        raise InvalidInputError(
            f"The validation column '{column}' has type {dtype}; it must be boolean (true: "
            "a validation row) or a number (non-zero: a validation row). Derive one, e.g. "
            f"df.withColumn('held_out', F.col('{column}') == 'valid').")


def check_against_input(schema: T.StructType, column: str, input_name: str, shape: tuple,
                        dtype: str) -> None:
    """Raises ``InvalidInputError`` when the column's Spark type cannot become the signature
    input ``input_name`` (``shape`` without the batch, None entries unknown; ``dtype`` a
    TensorFlow dtype name): text into a numeric input or the reverse, a scalar into an
    input of several values, arrays nested deeper than an input of partly unknown shape."""
    dtype_t = schema[column].dataType
    text = column_kind(dtype_t) in ("string", "binary") or _holds_text(dtype_t)
    declared = (f"input '{input_name}' declares dtype {dtype} and shape "
                f"({', '.join('None' if d is None else str(d) for d in shape)}"
                f"{',' if len(shape) == 1 else ''})")
    received = f"Column '{column}' (Spark type {dtype_t.simpleString()}) cannot feed {declared}"
    if text != (dtype == "string"):
        fix = ("Index the column first, or score with a model whose input is a string"
               if text else "Cast the column to string, or use a model with a numeric input")
        raise InvalidInputError(f"{received}. {fix}.")
    depth = 0
    while isinstance(dtype_t, T.ArrayType):
        depth, dtype_t = depth + 1, dtype_t.elementType
    # deeper arrays for an input of known shape are reshaped in the tasks when the sizes
    # agree (as fit and udf() do); only a partly unknown shape leaves nothing to agree on
    if None in shape and shape != (None,) and depth > len(shape):
        raise InvalidInputError(f"{received}: its arrays nest {depth} deep. Flatten them or "
                                "change the input's shape.")
    if column_kind(schema[column].dataType) in ("numeric", "string", "binary") and \
            all(d is not None for d in shape) and math.prod(shape) != 1:
        raise InvalidInputError(f"{received}: it holds one value per row. Assemble the "
                                "values into an array or vector column first.")
