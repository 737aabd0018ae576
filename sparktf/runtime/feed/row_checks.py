"""Checks of a fit's rows made while the tasks receive them: empty input, nulls,
non-finite labels, negative or non-finite weights, null validation flags.

They need one pass over the data, so they ride on the pass that feeds the tasks
instead of a Spark job of their own before it (which was a second pass over an
uncached input, and half a second even over a cached one). Each task counts its
rows' problems, the counts travel with the address exchange, and
every task refuses the data with the same message, naming the column and the
totals, before any TensorFlow process gets its payload. The driver raises it as
``InvalidInputError``.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from sparktf.runtime.feed import columns


@dataclasses.dataclass(frozen=True)
class RowChecks:
    """What to check: ``columns`` hold no nulls, the ``labels`` are finite, ``weight`` is
    finite and >= 0."""

    columns: tuple[str, ...]
    labels: tuple[str, ...] = ()
    weight: str | None = None
    # how rows are held out for validation, as the user set it (``validationCol='v'``),
    # or None: then neither side may be empty
    held_out_by: str | None = None
    # the boolean column that holds rows out (validationCol): a null there is refused
    flag: str | None = None

    def counter(self) -> "Counts":
        return Counts(self)


class Counts:
    """One task's counts of rows and problems."""

    def __init__(self, checks: RowChecks):
        self.checks = checks
        self.rows = 0
        self.nulls = {c: 0 for c in checks.columns}
        self.nonfinite = {c: 0 for c in checks.labels}
        self.bad_weights = 0
        self.null_flags = 0

    def watch(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Passes the batches through, counting as they go."""
        for batch in batches:
            self.add(batch)
            yield batch

    def add(self, batch: pa.RecordBatch) -> None:
        self.rows += batch.num_rows
        for column in self.nulls:
            self.nulls[column] += batch.column(column).null_count
        for label in self.nonfinite:
            self.nonfinite[label] += _count(batch.column(label), negative=False)
        if self.checks.weight is not None:
            self.bad_weights += _count(batch.column(self.checks.weight), negative=True)
        if self.checks.flag is not None:
            self.null_flags += batch.column(self.checks.flag).null_count

    def as_dict(self) -> dict:
        return {"rows": self.rows, "nulls": self.nulls, "nonfinite": self.nonfinite,
                "bad_weights": self.bad_weights, "null_flags": self.null_flags}


def _count(values: pa.Array, negative: bool) -> int:
    """Non-null values that are NaN or infinite (and, with ``negative``, below 0); for an
    array column (labels), the rows holding such a value anywhere inside."""
    if isinstance(values, pa.ChunkedArray):
        return sum(_count(chunk, negative) for chunk in values.chunks)
    if columns.is_list_type(values.type):
        return int(columns.rows_holding(values, _nonfinite).sum())
    bad = None
    if pa.types.is_floating(values.type):
        bad = pc.invert(pc.is_finite(values))
    if negative and (pa.types.is_floating(values.type) or pa.types.is_integer(values.type)):
        below = pc.less(values, 0)
        bad = below if bad is None else pc.or_(bad, below)
    if bad is None:
        return 0
    return int(pc.sum(pc.fill_null(bad, False).cast(pa.int64())).as_py() or 0)


def _nonfinite(values: pa.Array):
    """NaN or infinite numbers among one level of an array column's values."""
    if not pa.types.is_floating(values.type):
        return None
    return pc.invert(pc.fill_null(pc.is_finite(values), True)).to_numpy(zero_copy_only=False)


def no_rows(what: str) -> str:
    return f"The DataFrame given to {what} has no rows. Check the filters that produced it."


NO_ROWS = no_rows("fit")


def problem(checks: RowChecks, counts: list[dict], training_rows: int | None = None,
            validation_rows: int = 0) -> str | None:
    """The first problem over every task's counts, as the message for the user.
    ``training_rows`` and ``validation_rows``: the totals of the two sides (rows held out
    for validation, the others)."""
    rows = sum(c["rows"] for c in counts)
    if rows == 0:
        return NO_ROWS
    for column in checks.columns:
        nulls = sum(c["nulls"][column] for c in counts)
        if nulls:
            return (f"Column '{column}' has {nulls} null value(s); sparktf does not train on "
                    f"nulls. Drop them (df.na.drop(subset=['{column}'])) or fill them.")
    for label in checks.labels:
        nonfinite = sum(c["nonfinite"][label] for c in counts)
        if nonfinite:
            return (f"The label column '{label}' has {nonfinite} NaN or infinite value(s); "
                    "training on them would make the loss NaN. Drop or fix those rows.")
    bad_weights = sum(c["bad_weights"] for c in counts)
    if bad_weights:
        return (f"The weight column '{checks.weight}' has {bad_weights} negative, NaN or "
                "infinite value(s); weights must be finite numbers >= 0. Fix or drop those "
                "rows.")
    null_flags = sum(c.get("null_flags", 0) for c in counts)
    if null_flags:
        return (f"{checks.held_out_by} is null in {null_flags} row(s), so sparktf cannot "
                "tell whether they train or validate. Fill the column (True: validation, "
                "False: training) or drop those rows.")
    if checks.held_out_by and training_rows is not None:
        return _empty_side(checks.held_out_by, rows, training_rows, validation_rows)
    return None


def _empty_side(how: str, rows: int, training_rows: int, validation_rows: int) -> str | None:
    """Keras's refusal of an empty training or validation split, in sparktf's words."""
    if training_rows == 0:
        return (f"No rows are left to train on: {how} holds out all {rows} rows of the "
                "DataFrame for validation. Hold out fewer rows (flag fewer rows, or a "
                "smaller validationFraction).")
    if validation_rows == 0:
        return (f"No rows are held out for validation: {how} selects none of the "
                f"{rows} rows. Flag some rows, raise validationFraction, or unset it to "
                "train without validation.")
    return None
