"""What a scoring job's model calls add up to, told once on the driver where they are many
and small: rows of an input of length None that the model does not mask are called by
length (each row scored as alone), and many lengths make many calls.

The tasks add (calls, rows, longest length called) to a Spark accumulator; the driver's
accumulator server adds them up as tasks end (``CallCounts.addInPlace``), and the first
sum past ``MANY_CALLS`` calls of fewer than ``SMALL_CALL`` rows on average logs the
warning. Spark Connect has no accumulators: there scoring says nothing.
"""

from __future__ import annotations

import logging

from pyspark.accumulators import AccumulatorParam

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
