"""``preprocessing.adapt``'s distributed top-k: each partition of the token counts keeps its
own first ``max_tokens`` of each column, in Keras's order (count, then token, both
descending), so no task ranks a whole column; columns without a limit pass whole."""

import pyarrow as pa

from sparktf.ml import preprocessing


def test_a_partition_keeps_the_first_of_each_limited_column_in_keras_order():
    batch = pa.RecordBatch.from_pydict({
        "column": ["a", "a", "b", "a", "a", "b"],
        "token": ["x", "y", "p", "z", "w", "q"],
        "count": [3, 5, 1, 5, 1, 2],
        "documents": [1, 1, 1, 1, 1, 1]})
    first = preprocessing._first_of_each_column({"a": 2})
    out = pa.Table.from_batches(list(first(iter([batch.slice(0, 3), batch.slice(3)]))))
    rows = list(zip(out.column("column").to_pylist(), out.column("token").to_pylist()))
    # a: counts 5 (z, y: token descending), cut at 2; b: every row, in the same order
    assert rows == [("a", "z"), ("a", "y"), ("b", "q"), ("b", "p")]
    assert list(first(iter([]))) == []
