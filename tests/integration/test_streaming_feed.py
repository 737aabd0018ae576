"""ctx.dataset() reads the rows while they arrive: main_fn starts before the partition is in.

The input's upstream stage (a ``mapInArrow`` of the test) holds back each partition's last
record batch until ``main_fn`` says, through a named pipe, that it has read its first one.
A feed that spilled the whole partition before starting ``main_fn`` could not get there:
the upstream would wait out its deadline and mark the held-back rows so.
"""

import os
import select
import sys

import numpy as np
import pytest

import sparktf
from sparktf.errors import TaskFailedError

pytestmark = pytest.mark.timeout(300)

ROWS = 10_000  # per record batch: Spark's Arrow batch size, so one batch reaches the task
HELD_S = 60.0  # how long the upstream holds its last batch back at most


def held_back(spark, pipes: list[str], widths=(1, 1)):
    """Two partitions of 4 record batches of ``ROWS`` rows (``x``: row number in the
    partition, ``held``: 1.0 in the held-back batch if main_fn spoke up, -1.0 if the
    upstream waited out its deadline, else 0); the 4th batch comes once main_fn has written
    to ``pipes[partition]``. Rows are ``widths[0]`` floats, those of the 4th ``widths[1]``
    (widths > 1: ``x`` is an array)."""
    import pyarrow as pa

    def upstream(batches):
        from pyspark import TaskContext

        for _ in batches:
            pass
        fifo = os.open(pipes[TaskContext.get().partitionId()], os.O_RDONLY | os.O_NONBLOCK)
        try:
            for b in range(4):
                held = 0.0
                if b == 3:
                    ready, _, _ = select.select([fifo], [], [], HELD_S)
                    held = 1.0 if ready else -1.0
                width = widths[b == 3]
                x = np.arange(b * ROWS, (b + 1) * ROWS, dtype=np.float32)
                if width == 1:
                    column = pa.array(x)
                else:
                    column = pa.array(list(np.repeat(x[:, None], width, axis=1)),
                                      pa.list_(pa.float32()))
                yield pa.RecordBatch.from_arrays([column, pa.array(np.full(ROWS, held))],
                                                 names=["x", "held"])
        finally:
            os.close(fifo)

    x_type = "float" if widths == (1, 1) else "array<float>"
    # The upstream runs this interpreter (it has numpy and pyarrow), and its Python
    # workers get a pool of their own (Spark keys its workers by interpreter and
    # environment): sparktf's tasks then reuse the same workers, and spares, as in every
    # other test.
    sc = spark.sparkContext
    saved, sc.pythonExec = sc.pythonExec, sys.executable
    sc.environment["SPARKTF_TEST_UPSTREAM"] = "1"
    try:
        return spark.range(0, 2, 1, 2).mapInArrow(upstream, f"x {x_type}, held double")
    finally:
        del sc.environment["SPARKTF_TEST_UPSTREAM"]
        sc.pythonExec = saved


def pipes_in(tmp_path) -> list[str]:
    paths = [str(tmp_path / f"rank{r}.fifo") for r in range(2)]
    for path in paths:
        os.mkfifo(path)
    return paths


def speak_up(path: str) -> None:
    """Tells the upstream that main_fn has its first batch, if it still listens (a feed
    that waited for every row comes after the upstream gave up)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # ENXIO: no one listens any more
        return
    try:
        os.write(fd, b"x")
    finally:
        os.close(fd)


def read_twice(args, ctx):
    settled_at_first = None
    passes = []
    ds = ctx.dataset(2500, columns=["x", "held"], stream=args["stream"])
    for _ in range(2):
        xs, held = [], []
        for batch in ds:
            if settled_at_first is None:
                settled_at_first = ctx.share.settled
                speak_up(args["pipes"][ctx.rank])
            xs.append(batch["x"].numpy())
            held.append(batch["held"].numpy())
        passes.append((np.concatenate(xs).tolist(), sorted(set(np.concatenate(held)))))
    return settled_at_first, passes, ctx.numRows


def test_the_first_pass_reads_batches_before_the_partition_is_in(spark, tmp_path):
    pipes = pipes_in(tmp_path)
    results = sparktf.run(spark, read_twice, {"pipes": pipes, "stream": True}, numWorkers=2,
                          df=held_back(spark, pipes))
    expected = np.arange(4 * ROWS, dtype=np.float32).tolist()
    for settled_at_first, passes, rows in results:
        # main_fn had its first batch while the rows were still arriving, and the
        # upstream heard it (1.0), not its deadline (-1.0)
        assert settled_at_first is False
        assert passes[0] == (expected, [0.0, 1.0])
        assert passes[1] == passes[0]  # the second pass reads the finished file
        assert rows == 4 * ROWS


def test_rows_of_another_shape_after_streaming_began_fail_with_the_fix(spark, tmp_path):
    pipes = pipes_in(tmp_path)
    with pytest.raises(TaskFailedError) as raised:
        sparktf.run(spark, read_twice, {"pipes": pipes, "stream": True}, numWorkers=2,
                    df=held_back(spark, pipes, widths=(3, 5)))
    message = str(raised.value)
    print(message[:600])
    assert ("ctx.dataset() began feeding column 'x' as float32 rows of shape (3,), as this "
            "task's first rows were, before every row had arrived, but other rows are "
            "float32 rows of shape (5,). Pass stream=False") in message


def test_without_streaming_rows_of_varying_length_come_ragged(spark):
    import pyspark.sql.functions as F

    df = spark.range(0, 4 * ROWS, 1, 2).select(
        F.when(F.col("id") % 2 == 0, F.array(*[F.lit(1.0).cast("float")] * 3))
        .otherwise(F.array(*[F.lit(1.0).cast("float")] * 5)).alias("x"))

    def lengths(args, ctx):
        return [batch["x"].row_lengths().numpy().tolist()
                for batch in ctx.dataset(5000, stream=False)]

    for batches in sparktf.run(spark, lengths, numWorkers=2, df=df):
        seen = [n for batch in batches for n in batch]
        assert sorted(set(seen)) == [3, 5] and len(seen) == 2 * ROWS
