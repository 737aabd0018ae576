"""What MLflow shows and checks of a model sparktf logs (``tracking.log_model``): its
signature (the columns ``transform`` reads, with the fit's Spark types where a fit made it;
the columns it adds) and an input example of one row, so that MLflow's UI shows the
columns and ``mlflow.models.validate_serving_input`` and ``mlflow models serve`` take
them. MLflow checks every ``predict`` against the signature: each column's type here
takes every cell ``transform`` takes in it."""

from __future__ import annotations

import numpy as np
import pandas as pd
from mlflow.models import ModelSignature
from mlflow.types.schema import AnyType, Array, ColSpec, DataType, Schema
from pyspark.ml.linalg import VectorUDT
from pyspark.sql import types as T

from sparktf.runtime.scoring.spec import InputBinding, ScoreSpec

# a float column as double: MLflow refuses float64 cells (a JSON example's, pandas') for
# float, and takes float32 ones for double; the model takes either
_SPARK = ((T.DoubleType, DataType.double), (T.FloatType, DataType.double),
          (T.LongType, DataType.long), (T.IntegralType, DataType.integer),
          (T.BooleanType, DataType.boolean), (T.StringType, DataType.string),
          (T.BinaryType, DataType.binary))
_TENSOR = (("float", DataType.double), ("int", DataType.long), ("uint", DataType.long),
           ("bool", DataType.boolean), ("string", DataType.string))


def signature(spec: ScoreSpec, output_fields: list, schema: T.StructType | None
              ) -> ModelSignature:
    """The inputs (``spec.inputs``' columns: typed as the fit's ``schema`` has them, else
    from the serving signature) and the outputs (``output_fields``: ``TFModel``'s)."""
    inputs = [ColSpec(_input_type(b, _field(schema, b.column)), b.column,
                      required=not _nullable(schema, b.column)) for b in spec.inputs]
    outputs = [ColSpec(_spark_type(f.dataType) or AnyType(), f.name, required=False)
               for f in output_fields]
    return ModelSignature(inputs=Schema(inputs), outputs=Schema(outputs))


def example(spec: ScoreSpec, schema: T.StructType | None) -> pd.DataFrame:
    """One row of zeros ("" for text) shaped as each input takes it."""
    return pd.DataFrame({b.column: [_zero(b, _field(schema, b.column))] for b in spec.inputs})


def _field(schema: T.StructType | None, column: str):
    return schema[column].dataType if schema is not None and column in schema.names else None


def _nullable(schema: T.StructType | None, column: str) -> bool:
    # a null row scores null outputs; without the fit's schema, say nothing is required
    return schema is None or column not in schema.names or schema[column].nullable


def _input_type(b: InputBinding, spark_type):
    if spark_type is not None:
        return _spark_type(spark_type) or AnyType()
    base = next((t for prefix, t in _TENSOR if b.dtype.startswith(prefix)), None)
    shape = tuple(b.shape)
    if base is None or shape == (1,):  # a scalar column and a one-element array both feed it
        return AnyType()
    for _ in shape:
        base = Array(base)
    return base


def _spark_type(spark_type):
    """MLflow's type for a Spark column's; None where MLflow has none."""
    if isinstance(spark_type, VectorUDT):
        # MLflow's SparkMLVector is an Array(double): its check refuses the DenseVector and
        # SparseVector cells df.toPandas() gives, which transform (and the pyfunc) take
        return AnyType()
    if isinstance(spark_type, T.ArrayType):
        inner = _spark_type(spark_type.elementType)
        return Array(inner) if inner is not None else AnyType()
    return next((t for kind, t in _SPARK if isinstance(spark_type, kind)), None)


def _zero(b: InputBinding, spark_type):
    """One cell of zeros for ``b`` (lengths of None: 1), as the column holds it."""
    leaf = spark_type
    while isinstance(leaf, T.ArrayType):
        leaf = leaf.elementType
    if b.dtype == "string":
        value = ""
    elif b.dtype == "bool":
        value = False
    elif isinstance(leaf, T.IntegralType) or (
            spark_type is None and b.dtype.startswith(("int", "uint"))):
        value = 0
    else:  # a float, or an ml Vector's values
        value = 0.0
    scalar = (spark_type is not None and not isinstance(spark_type, (T.ArrayType, VectorUDT))) \
        or (spark_type is None and tuple(b.shape) in ((), (1,)))
    if scalar:
        return value
    return np.full([d or 1 for d in b.shape], value, dtype=object).tolist()
