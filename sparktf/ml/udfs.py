"""``TFModel``'s scoring as Spark UDFs: an iterator Arrow UDF (a pandas UDF on pyspark
before 4.1) of ``inference.score_arrays``, and what its model calls add up to.

What the calls add up to is told once on the driver where they are many
and small: rows of an input of length None that the model does not mask are called by
length (each row scored as alone), and many lengths make many calls.

The tasks add (calls, rows, longest length called) to a Spark accumulator; the driver's
accumulator server adds them up as tasks end (``CallCounts.addInPlace``), and the first
sum past ``MANY_CALLS`` calls of fewer than ``SMALL_CALL`` rows on average logs the
warning. Spark Connect has no accumulators: there scoring says nothing.
"""

from __future__ import annotations

import logging
from typing import Iterator, Tuple

from pyspark.accumulators import AccumulatorParam
from pyspark.sql import types as T

from sparktf._driver import versions
from sparktf.runtime.scoring import inference
from sparktf.runtime.scoring.spec import ScoreSpec

logger = logging.getLogger("sparktf")

MANY_CALLS = 100
SMALL_CALL = 64  # rows a call, on average


class CallCounts(AccumulatorParam):
    """(calls, rows, longest) summed; the warning once, on the driver only."""

    def __init__(self, columns: list[str], batch_size: int):
        self.columns, self.batch_size = columns, batch_size
        self.on_driver, self.told = True, False

    def __getstate__(self):
        return {"columns": self.columns, "batch_size": self.batch_size,
                "on_driver": False, "told": True}

    def zero(self, value):
        return (0, 0, 0)

    def addInPlace(self, value1, value2):
        calls, rows, longest = (value1[0] + value2[0], value1[1] + value2[1],
                                max(value1[2], value2[2]))
        if self.on_driver and not self.told and calls >= MANY_CALLS and \
                rows < SMALL_CALL * calls:
            self.told = True
            logger.warning(advice(self.columns, calls, rows, longest, self.batch_size))
        return (calls, rows, longest)


def advice(columns: list[str], calls: int, rows: int, longest: int, batch_size: int) -> str:
    named = ", ".join(f"'{c}'" for c in columns)
    return (f"Scoring has made {calls:,} model calls so far, of {rows / calls:.0f} rows on average "
            f"(batchSize={batch_size}): the rows of {named} have many lengths and the model "
            "does not mask padding, so the rows of each length are called apart (each row "
            f"scores as it does alone). TFModel(padLength={longest}) makes one call per "
            "batch (each row padded after its end, as pad_sequences pads it alone), and so "
            "does a model that masks its input (Embedding(mask_zero=True), Masking).")


def counter(spark_context, columns: list[str], batch_size: int):
    """The accumulator the tasks add their (calls, rows, longest) to, or None where there
    is none (Spark Connect)."""
    if spark_context is None or not columns:
        return None
    return spark_context.accumulator((0, 0, 0), CallCounts(columns, batch_size))


def pa_struct(names, arrays):
    """The outputs as one struct column (the UDF's single return value)."""
    import pyarrow as pa
    return pa.StructArray.from_arrays(arrays, names=names)


def call_counter(spec: ScoreSpec, sc, df_schema):
    """What the tasks report their calls to (``counter``), where rows may be called by
    length: an array column into an input of length None the model does not mask."""
    if spec.pad_length:
        return None
    masked = dict(spec.padding)
    grouped = [b.column for b in spec.inputs
               if b.shape and b.shape[0] is None and b.input_name not in masked and (
                   df_schema is None or isinstance(df_schema[b.column].dataType, T.ArrayType))]
    return counter(sc, grouped, spec.batch_size)


def arrow_udf(spec: ScoreSpec, return_type, pick, counts=None):
    """An iterator Arrow UDF scoring ``spec.inputs``; ``pick(names, arrays)`` forms its result;
    ``counts`` (an accumulator) takes each task's (calls, rows, longest length called).
    On pyspark before 4.1, which has no Arrow UDF, the same scoring as a pandas UDF."""
    import pyarrow as pa

    def scored(columns):
        report = counts.add if counts is not None else None
        for struct in inference.score_arrays(spec, columns, report):
            names = [struct.type.field(i).name for i in range(struct.type.num_fields)]
            yield pick(names, [struct.field(i) for i in range(len(names))])

    n = len(spec.inputs)
    if not versions.has(versions.ARROW_UDF):
        return _pandas_udf(scored, n, return_type)
    from pyspark.sql.functions import arrow_udf

    def score(batches):
        return scored((a,) if isinstance(a, (pa.Array, pa.ChunkedArray)) else a
                      for a in batches)

    if n == 1:
        score.__annotations__ = {"batches": Iterator[pa.Array], "return": Iterator[pa.Array]}
    else:
        score.__annotations__ = {"batches": Iterator[Tuple[(pa.Array,) * n]],
                                 "return": Iterator[pa.Array]}
    return arrow_udf(score, return_type)


def _pandas_udf(scored, n: int, return_type):
    """``scored`` (Arrow columns in, Arrow results out) as pyspark 3.5's iterator pandas UDF:
    each batch's Series go back to Arrow, and the results to pandas. pandas holds a null
    number as NaN and cannot tell them apart: both are nulls here (a row holding either
    scores nulls; in an integer input a NaN would be cast to a number)."""
    import pandas as pd
    import pyarrow as pa
    from pyspark.sql.functions import pandas_udf

    def arrow(column) -> pa.Array:
        if isinstance(column, pd.DataFrame):  # a struct (an ml Vector): a field a column
            fields = [pa.array(column[name], from_pandas=True) for name in column.columns]
            return pa.StructArray.from_arrays(
                fields, names=list(column.columns),
                mask=pa.array(column.isna().all(axis=1).to_numpy()))
        return pa.array(column, from_pandas=True)

    def pandas(result: pa.Array):
        if pa.types.is_struct(result.type):
            return pa.Table.from_arrays(result.flatten(), names=[
                result.type.field(i).name for i in range(result.type.num_fields)]).to_pandas()
        return result.to_pandas()

    def score(batches):
        columns = ((arrow(s),) if n == 1 else tuple(map(arrow, s)) for s in batches)
        return map(pandas, scored(columns))

    out = pd.DataFrame if isinstance(return_type, T.StructType) else pd.Series
    score.__annotations__ = {
        "batches": Iterator[pd.Series] if n == 1 else Iterator[Tuple[(pd.Series,) * n]],
        "return": Iterator[out]}
    return pandas_udf(score, return_type)
