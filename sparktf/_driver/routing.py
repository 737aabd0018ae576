"""Which rows reach which task: one input partition per rank, as ``cluster.layout`` says,
and the barrier stage that takes them there."""

from __future__ import annotations

from sparktf._driver import schema, sessions
from sparktf._driver.resources import TaskResources
from sparktf.errors import ClusterFormationError
from sparktf.runtime.process import cluster
from sparktf.runtime.process import task as task_runtime

ROUTE_COLUMN = "_sparktf_route"


def input_frame(spark, df, plan: cluster.Layout, split_column: str | None):
    """(frame, behind a shuffle): one partition per task, each holding the rows the layout
    gives its rank, in the frame's order, or in ``ORDER_COLUMN``'s where the frame has one
    (``content_key``: the same order whatever order Spark computed the rows in)."""
    if df is None:
        return spark.range(0, plan.num_tasks, 1, plan.num_tasks), False
    if plan.simple:
        if sessions.num_partitions(df) == plan.num_tasks:
            return _in_order(df), False  # tried as it is; see is_barrier_chain_error
        return shuffled(df, plan.num_tasks), True
    return _routed(spark, df, plan, split_column), True


def content_key(columns, salt: str, seed: int):
    """A 64-bit number made of a row's values (``columns``: Columns), ``salt`` and ``seed``:
    the same for the same row whatever its partition or position, unlike ``rand``, which
    Spark draws again when it computes a frame again (a shuffle's rows arrive in another
    order)."""
    from pyspark.sql import functions as F

    return F.xxhash64(F.lit(salt), F.lit(seed), *columns)


def content_fraction(columns, salt: str, seed: int):
    """``content_key`` as a number in [0, 1), uniform over rows."""
    from pyspark.sql import functions as F

    return F.pmod(content_key(columns, salt, seed), F.lit(1 << 30)) / float(1 << 30)


def _in_order(df):
    """``df`` with each partition sorted by ``ORDER_COLUMN`` (then dropped), if it has one."""
    if ORDER_COLUMN not in df.columns:
        return df
    return df.sortWithinPartitions(ORDER_COLUMN).drop(ORDER_COLUMN)


def barrier_job(session: sessions.Session, frame, num_tasks: int,
                spec: task_runtime.TaskSpec, resources: TaskResources | None):
    """The barrier stage over ``frame``, as a job to ``collect()`` (rows with ``rank`` and
    ``result``). Without input (``frame`` None, a classic session) it is an RDD stage: a
    fresh executor's first Spark SQL job pays seconds of SQL's own start-up that a job
    without data need not (first barrier job on new executors: 5 s as an RDD, 11-13 s as
    ``mapInArrow``, on the test machine; Spark Connect has DataFrames only)."""
    profile = resources.profile() if resources is not None else None
    if frame is None:
        def rdd_task(partition):
            for batch in task_runtime.run_task(spec, partition):
                yield from batch.to_pylist()  # {"rank": ..., "result": ...}

        sc = session.sc
        rdd = sc.parallelize(range(num_tasks), num_tasks)
        if profile is not None:
            rdd = rdd.withResources(profile)
        job = rdd.barrier().mapPartitions(rdd_task)
        # PySpark makes the Python function now, with the interpreter chosen and with the
        # environment of Spark SQL's Python functions (see _SQL_WORKER_ENV)
        saved = sc.environment
        sc.environment = {**saved, **_sql_worker_env(session)}
        try:
            _ = job._jrdd
        finally:
            sc.environment = saved
        return job

    names = frame.columns
    if any("." in name or "`" in name for name in names):
        # mapInArrow names its input columns unquoted (pyspark's map_ops, and Connect's
        # plan): such names would be parsed, so they go in by position and are put back
        frame = frame.select(*[schema.column(name).alias(f"{INPUT_COLUMN}{i}")
                               for i, name in enumerate(names)])
    else:
        names = None

    def barrier_task(batches):
        if names is not None:
            batches = (batch.rename_columns(names) for batch in batches)
        return task_runtime.run_task(spec, batches)

    # profile= is pyspark 4.0's (resources.check_stage refused one before, on 3.5)
    extra = {"profile": profile} if profile is not None else {}
    return frame.mapInArrow(barrier_task, "rank int, result binary", barrier=True, **extra)


# An executor keeps one pool of Python workers per interpreter and environment. Spark SQL's
# runners add SPARK_SIMPLIFIED_TRACEBACK=1 to their functions' environment (while
# spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled is on, the default) and an
# RDD's function goes without it: the same environment makes sparktf's RDD stages run in the
# Python workers of its mapInArrow stages and scoring UDFs, and fork from their spares,
# instead of a second pool of workers, each importing TensorFlow again (and a pool idle
# for a minute is ended by Spark, so alternating between the two paid it again and again).
_SIMPLIFIED_TRACEBACK = "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled"


def _sql_worker_env(session: sessions.Session) -> dict[str, str]:
    """What Spark SQL's Python runners add to a function's worker environment."""
    enabled = (session.setting(_SIMPLIFIED_TRACEBACK) or "true").strip().lower() == "true"
    return {"SPARK_SIMPLIFIED_TRACEBACK": "1"} if enabled else {}


INPUT_COLUMN = "__sparktf_input_"  # + position: an input column whose name Spark would parse


ORDER_COLUMN = "__sparktf_order"  # the frame's row order, through the shuffle


def shuffled(df, num_tasks: int):
    """``df`` in ``num_tasks`` partitions behind a shuffle: a plan any barrier stage accepts.

    A shuffle, not coalesce: barrier stages refuse RDD chains that change partition counts.
    The frame's order is kept (``shuffle=False`` means the frame's order, and a seed the
    same history every run): the rows are numbered first (or keep the ``ORDER_COLUMN``
    they have), hash-partitioned by their number, and each partition is sorted by it.
    (Not a range partitioning: its sampled bounds can make fewer partitions than asked,
    and a barrier stage needs them all.)
    """
    numbered = _numbered(df)
    return (numbered.repartition(num_tasks, ORDER_COLUMN)
            .sortWithinPartitions(ORDER_COLUMN).drop(ORDER_COLUMN))


def _numbered(df):
    from pyspark.sql import functions as F

    if ORDER_COLUMN in df.columns:
        return df
    return df.withColumn(ORDER_COLUMN, F.monotonically_increasing_id())


def is_barrier_chain_error(exc: BaseException) -> bool:
    """Whether Spark refused to run a barrier stage on the input's RDD chain (a union of
    coalesced frames, say), which it does before any task starts."""
    return "BarrierJobUnsupportedRDDChainException" in str(exc)


def _routed(spark, df, plan: cluster.Layout, split_column: str | None):
    """``df`` hash-partitioned on a key chosen per row so that each row lands on its rank.

    Training rows are spread over the training ranks by a hash of their number, validation
    rows all go to ``plan.validation_rank``; the other ranks get empty partitions. Each
    partition holds its rows in their order (``shuffled``).
    """
    from pyspark.sql import functions as F

    keys = [F.lit(k).cast("bigint") for k in _partition_keys(spark, plan.num_tasks)]
    numbered = _numbered(df)
    # by the row's number, not rand: the same rank for a row however Spark computes it
    spread = F.array(*[keys[r] for r in plan.training_ranks])[
        F.pmod(F.xxhash64(F.col(ORDER_COLUMN)), F.lit(len(plan.training_ranks))).cast("int")]
    if plan.validation_rank is not None and split_column is not None:
        spread = F.when(schema.column(split_column), keys[plan.validation_rank]).otherwise(spread)
    # sorted by number: a shuffle's rows arrive in any order, and the order makes the batches
    return (numbered.withColumn(ROUTE_COLUMN, spread)
            .repartition(plan.num_tasks, ROUTE_COLUMN)
            .sortWithinPartitions(ORDER_COLUMN).drop(ROUTE_COLUMN, ORDER_COLUMN))


def _partition_keys(spark, n: int) -> list[int]:
    """For each partition p < n, a bigint that Spark's hash partitioning sends to p.

    The key column must be bigint too: Spark hashes an int differently from a bigint.
    """
    from pyspark.sql import functions as F

    found = (spark.range(0, 64 * n).select("id", F.pmod(F.hash("id"), F.lit(n)).alias("p"))
             .groupBy("p").agg(F.min("id").alias("id")).collect())
    keys = {row["p"]: row["id"] for row in found}
    if len(keys) < n:  # astronomically unlikely with 64 candidates a partition
        raise ClusterFormationError(f"found no routing key for some of {n} partitions")
    return [keys[p] for p in range(n)]
