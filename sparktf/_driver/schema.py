"""Driver-side checks of input columns, so bad input fails before any job starts (the
rows themselves are checked as the tasks receive them: ``sparktf._executor.row_checks``)."""

from __future__ import annotations

from typing import Sequence

from pyspark.ml.linalg import VectorUDT
from pyspark.sql import types as T

from sparktf.errors import InvalidInputError

_NUMERIC = (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType, T.DoubleType,
            T.DecimalType, T.BooleanType)


def column_kind(dtype: T.DataType) -> str | None:
    """'vector', 'array' or 'numeric' for a feedable Spark type, else None."""
    if isinstance(dtype, VectorUDT):
        return "vector"
    if isinstance(dtype, T.ArrayType) and isinstance(dtype.elementType, _NUMERIC):
        return "array"
    if isinstance(dtype, _NUMERIC):
        return "numeric"
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
                "fed to TensorFlow. Use a numeric column, array<float|double>, or an ml Vector "
                "(e.g. from VectorAssembler); encode strings first (StringIndexer).")


def check_weight_column(schema: T.StructType, column: str) -> None:
    """Raises ``InvalidInputError`` unless ``column`` is a numeric column of ``schema``."""
    check_feedable(schema, [column], "weight")
    if column_kind(schema[column].dataType) != "numeric":
        raise InvalidInputError(f"The weight column '{column}' must hold one number per row "
                                "(Keras's sample_weight). Received: type "
                                f"{schema[column].dataType.simpleString()}")
