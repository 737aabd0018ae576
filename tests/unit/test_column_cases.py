"""Generated columns through the runtime's feed, in one process: Arrow record batches as
Spark delivers them -> the spilled shard -> ``ctx.dataset()``, against the NumPy
reference of ``tests.column_cases``; a null anywhere is refused naming its column.

``SPARKTF_FUZZ=1`` (``make fuzz``) draws 1,000 frames instead of make test's 60."""

import os
import tempfile

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sparktf.runtime.feed import arrival, columns, shards
from sparktf.runtime.process.context import TaskContext
from tests import column_cases
from tests.budget import examples

FUZZ = os.environ.get("SPARKTF_FUZZ") == "1"
VECTOR = pa.struct([pa.field("type", pa.int8(), nullable=False), ("size", pa.int32()),
                    ("indices", pa.list_(pa.field("element", pa.int32(), nullable=False))),
                    ("values", pa.list_(pa.field("element", pa.float64(), nullable=False)))])
ARROW = {"tinyint": pa.int8(), "smallint": pa.int16(), "int": pa.int32(),
         "bigint": pa.int64(), "float": pa.float32(), "double": pa.float64(),
         "boolean": pa.bool_(), "string": pa.string(), "binary": pa.binary()}


def _arrow_type(ddl: str) -> pa.DataType:
    if ddl == "vector":
        return VECTOR
    if ddl.startswith("array<"):
        return pa.list_(_arrow_type(ddl[len("array<"):-1]))
    return ARROW[ddl]


def _vector(value):
    if isinstance(value, list):
        return {"type": 1, "size": None, "indices": None, "values": value}
    size, entries = value
    return {"type": 0, "size": size, "indices": sorted(entries),
            "values": [entries[i] for i in sorted(entries)]}


def arrow_batch(chosen, rows, null_at=None) -> pa.RecordBatch:
    """The rows as Spark's Arrow batches hold them; ``null_at`` (row, column, inside):
    that value is null, or with ``inside`` its array's first element (an empty array:
    the value)."""
    data = {"id": pa.array([r[0] for r in rows], pa.int64())}
    for i, (name, kind) in enumerate(zip(column_cases.column_names(chosen), chosen)):
        values = [_vector(r[i + 1]) if kind.ddl == "vector" else r[i + 1] for r in rows]
        if null_at is not None and null_at[1] == i:
            row, _, inside = null_at
            if inside and kind.ddl.startswith("array") and values[row]:
                values[row] = [None, *values[row][1:]]
            else:
                values[row] = None
        data[name] = pa.array(values, _arrow_type(kind.ddl))
    return pa.RecordBatch.from_pydict(data)


def _context(shard) -> TaskContext:
    spec = dict(zip(shard.columns, shard.infos))
    share = arrival.Share(numRows=shard.num_rows, allNumRows=(shard.num_rows,), shard=shard,
                          feedSpec=spec)
    return TaskContext(jobName="worker", taskIndex=0, rank=0, clusterSpec={}, numWorkers=1,
                       share=share)


@settings(max_examples=1000 if FUZZ else examples(60), deadline=None, derandomize=not FUZZ,
          print_blob=True, suppress_health_check=[HealthCheck.too_slow])
@given(column_cases.frames(), st.integers(1, 5), st.integers(1, 4))
@example(([column_cases.Kind("bigint", "bigint", st.nothing(), "int64")],
          [(0, 2 ** 63 - 1), (1, -2 ** 63), (2, 4_000_000_003)]), 2, 1)
def test_any_columns_reach_ctx_dataset_as_the_reference_says(frame, batch_size, chunks):
    chosen, rows = frame
    names = column_cases.column_names(chosen)
    step = -(-len(rows) // chunks)  # several record batches, as Spark sends them
    batches = [arrow_batch(chosen, rows[i:i + step]) for i in range(0, len(rows), step)]
    with tempfile.TemporaryDirectory() as folder:
        shard, _ = shards.spill(iter(batches), os.path.join(folder, "s.arrow"), ["id", *names])
        read = column_cases.read_all(_context(shard).dataset(batch_size=batch_size), names)
    assert column_cases.mismatches(chosen, rows, read) == []


@settings(max_examples=200 if FUZZ else examples(20), deadline=None, derandomize=not FUZZ,
          suppress_health_check=[HealthCheck.too_slow])
@given(column_cases.frames(max_rows=5), st.data())
def test_a_null_anywhere_is_refused_naming_its_column(frame, data):
    chosen, rows = frame
    row = data.draw(st.integers(0, len(rows) - 1))
    column = data.draw(st.integers(0, len(chosen) - 1))
    inside = data.draw(st.booleans())
    name = column_cases.column_names(chosen)[column]
    with tempfile.TemporaryDirectory() as folder:
        with pytest.raises(columns.FeedError, match=f"Column '{name}'"):
            shards.spill(iter([arrow_batch(chosen, rows, (row, column, inside))]),
                       os.path.join(folder, "s.arrow"), ["id", name])
