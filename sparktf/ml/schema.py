"""Driver-side checks of input columns, so bad input fails before a cluster starts."""

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


def check_rows(df, feature_columns: Sequence[str], label_column: str,
               weight_column: str | None = None) -> int:
    """One pass over the data: refuses an empty DataFrame, nulls, non-finite labels and
    negative or non-finite weights.

    Returns the row count. Runs before any barrier stage starts, so bad data fails
    in seconds with the column named, not inside a training task.
    """
    from pyspark.sql import functions as F

    columns = list(dict.fromkeys([*feature_columns, label_column,
                                  *([weight_column] if weight_column else [])]))
    aggregates = [F.count(F.lit(1)).alias("rows")]
    aggregates += [F.sum(F.col(c).isNull().cast("long")).alias(f"null_{i}")
                   for i, c in enumerate(columns)]
    label_kind = column_kind(df.schema[label_column].dataType)
    if label_kind == "numeric":
        label = F.col(label_column).cast("double")
        bad = F.isnan(label) | (F.abs(label) == float("inf"))
        aggregates.append(F.sum(bad.cast("long")).alias("nonfinite"))
    if weight_column:
        weight = F.col(weight_column).cast("double")
        bad = F.isnan(weight) | (F.abs(weight) == float("inf")) | (weight < 0)
        aggregates.append(F.sum(bad.cast("long")).alias("bad_weights"))
    stats = df.agg(*aggregates).first().asDict()
    if stats["rows"] == 0:
        raise InvalidInputError("The DataFrame given to fit has no rows. Check the filters "
                                "that produced it.")
    for i, column in enumerate(columns):
        if stats[f"null_{i}"]:
            raise InvalidInputError(
                f"Column '{column}' has {stats[f'null_{i}']} null value(s); sparktf does not "
                f"train on nulls. Drop them (df.na.drop(subset=['{column}'])) or fill them.")
    if stats.get("nonfinite"):
        raise InvalidInputError(
            f"The label column '{label_column}' has {stats['nonfinite']} NaN or infinite "
            "value(s); training on them would make the loss NaN. Drop or fix those rows.")
    if stats.get("bad_weights"):
        raise InvalidInputError(
            f"The weight column '{weight_column}' has {stats['bad_weights']} negative, NaN or "
            "infinite value(s); weights must be finite numbers >= 0. Fix or drop those rows.")
    return stats["rows"]
