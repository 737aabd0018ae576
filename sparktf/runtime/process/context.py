"""``ctx``: what one task of a sparktf job knows about itself, handed to ``main_fn``.

Attribute names are camelCase because they are part of the public contract,
like pyspark's own Params.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, Sequence

from sparktf._protocol.wire import phase, write_event
from sparktf.runtime.feed import arrival, columns, shards
from sparktf.runtime.feed.columns import ColumnInfo
from sparktf.runtime.process import servers


@dataclasses.dataclass(frozen=True)
class TaskContext:
    """The task's role in the TensorFlow cluster and its share of the input.

    Attributes
    ----------
    jobName : str
        ``"chief"``, ``"worker"``, ``"ps"`` or ``"evaluator"``.
    taskIndex : int
        Index of the task within its job.
    rank : int
        The barrier partition id, 0 .. numTasks - 1.
    clusterSpec : dict
        Job name -> list of ``host:port``, identical on every task.
    numWorkers : int
        Number of ``worker`` tasks (with parameter servers, the chief is one more).
    numPs : int
        Number of parameter servers.
    modelDir : str or None
        Where checkpoints, logs and exports go (reachable from every task).
    numRows : int
        Rows of the input DataFrame that this task received. ``main_fn`` starts while
        the rows still arrive: this, ``allNumRows``, ``feedSpec`` and the shards wait
        until every task's rows are in; ``dataset()`` need not (see ``stream``).
    allNumRows : tuple of int
        ``numRows`` of every task, by rank.
    gpus : str
        The task's ``CUDA_VISIBLE_DEVICES`` (empty: CPU only).
    assignedGpus : tuple of str
        The GPU addresses Spark assigned the task (``TaskContext.resources()``).
    executors : tuple of str
        The executor (``host:port``) each task runs on, by rank.
    feedSpec : dict
        Column -> ``ColumnInfo`` of the input rows over every task (the same on every
        task, including those that received no rows): ``dtype`` (numpy dtype name of the
        values, ``"str"``/``"bytes"`` for strings and binary), ``shape`` (row shape,
        ``None`` where arrays vary in length), ``longest`` (the longest such row).
    """

    jobName: str
    taskIndex: int
    rank: int
    clusterSpec: dict
    numWorkers: int
    numPs: int = 0
    modelDir: str | None = None
    gpus: str = ""  # this task's CUDA_VISIBLE_DEVICES ("" hides every GPU)
    assignedGpus: tuple = ()  # the GPU addresses Spark's scheduler gave the task
    executors: tuple = ()  # every task's executor (its ``host:port``), by rank
    # the rows: an ``arrival.Share``, or an ``arrival.Pending`` one while they arrive
    share: arrival.Share | arrival.Pending = dataclasses.field(default_factory=arrival.Share)

    def _rows(self) -> arrival.Share:
        share = self.share
        return share.share() if isinstance(share, arrival.Pending) else share

    def _row_field(name: str, doc: str | None = None):  # noqa: N805 (a class-body helper)
        """A property of the rows' ``Share`` (waits until every task's rows are in)."""
        return property(lambda self: getattr(self._rows(), name), doc=doc)

    numRows = _row_field("numRows", "Rows of the input DataFrame this task received.")
    allNumRows = _row_field("allNumRows", "``numRows`` of every task, by rank.")
    shard = _row_field("shard")
    validationShard = _row_field("validationShard")
    allValidationRows = _row_field("allValidationRows")
    feedSpec = _row_field("feedSpec", "Column -> ``ColumnInfo`` over every task's rows.")
    del _row_field

    @property
    def tfConfig(self) -> dict:
        """The TF_CONFIG this task runs under, as a dict."""
        return {"cluster": self.clusterSpec,
                "task": {"type": self.jobName, "index": self.taskIndex}}

    @property
    def isChief(self) -> bool:
        """Whether this task writes shared outputs (the chief, or worker 0 without one)."""
        if "chief" in self.clusterSpec:
            return self.jobName == "chief"
        return self.jobName == "worker" and self.taskIndex == 0

    def dataset(self, batch_size: int, shuffle: bool = False, seed: int | None = None,
                columns: Sequence[str] | None = None, stream: bool = False):
        """This task's share of the input DataFrame as a ``tf.data.Dataset`` of dicts.

        Each element maps a column name to a batch of ``batch_size`` rows (the last one
        may be smaller), in the column's own type: numbers as their dtype (``bigint``
        int64, ``double`` float64), booleans, strings and binary as ``tf.string``,
        arrays as ``[batch, ...]`` tensors (nested ones N-d), ml Vectors as float32
        ``[batch, width]``, and arrays whose length varies as a ``tf.RaggedTensor``.
        Rows come from a local Arrow file read one record batch at a time, so the dataset
        can be iterated once per epoch with bounded memory. With ``shuffle``, chunk order
        and rows within chunks change every pass. The first element comes once every
        task's rows are in (their shapes decide the tensors').

        ``stream=True``: while the rows are still arriving, the first pass reads each
        record batch as soon as it is in, when this task's first rows are numbers of one
        shape (and ``shuffle`` is off); later passes read the finished file. Rows of
        another shape later (here or on another task) then fail the pass with a
        ``FeedError`` naming the column. Off by default: on a machine whose cores are
        all busy with the transfer, reading while it runs made it slower, not faster
        (``bench/feed_cpu_bench.py``); it pays where the task has cores to spare.
        """
        import tensorflow as tf

        pending = self.share if isinstance(self.share, arrival.Pending) else None
        if pending is None and self.share.shard is None:
            raise ValueError("This job was started without a DataFrame; pass df= to "
                             "sparktf.run to feed data to the tasks.")
        names = list(columns or (pending.columns if pending else self.shard.columns))
        first = None  # the first batch's columns, when the first pass streams
        if stream and pending is not None and not shuffle and not pending.settled:
            first = _streamable(pending, names)
        infos = first or {n: _info(self.feedSpec.get(n)) for n in names}
        passes = iter(range(sys.maxsize))

        def pass_seed():
            if not shuffle:
                return None
            import numpy as np
            return (int(np.random.SeedSequence().entropy % 2**31) if seed is None
                    else seed + next(passes))

        if not any(i is not None and (i.varies or i.is_text) for i in infos.values()):
            # numbers only: whole chunks into TensorFlow, re-batched there
            template = shards.empty_batch(names, infos)
            signature = {n: tf.TensorSpec((None,) + a.shape[1:], tf.as_dtype(a.dtype))
                         for n, a in template.items()}
            streamed = []  # the pass that streamed, once begun

            def chunks():
                shards.keep_freed_memory()
                if first and not streamed:
                    streamed.append(True)
                    yield from _streamed_chunks(self, pending, names, infos)
                    return
                yield from shards.shuffled_chunks(self.shard, names, pass_seed())

            ds = tf.data.Dataset.from_generator(chunks, output_signature=signature)
            return ds.rebatch(batch_size).prefetch(tf.data.AUTOTUNE)

        def batches():
            shards.keep_freed_memory()
            shard = self.shard
            for batch in shards.step_batches(shard, shards.batch_sizes(shard.num_rows, batch_size),
                                           names, pass_seed(), infos):
                yield {n: _tensor(batch[n], infos[n]) for n in names}

        signature = {n: _tensor_spec(infos[n]) for n in names}
        ds = tf.data.Dataset.from_generator(batches, output_signature=signature)
        return ds.prefetch(tf.data.AUTOTUNE)

    def serve(self) -> None:
        """With parameter servers, on a ``ps`` or ``worker`` task: starts this task's
        TensorFlow server and tells the driver. Return from ``main_fn`` afterwards: the
        process (and its server) stays up until the chief's ``main_fn`` has returned."""
        if self.jobName not in ("ps", "worker") or not self.numPs:
            raise ValueError(f"serve() is for the ps and worker tasks of a job with numPs > 0; "
                             f"this is {self.jobName}:{self.taskIndex} with numPs={self.numPs}.")
        servers.serve(self)

    def awaitServers(self) -> None:
        """On the chief (numPs > 0): blocks until every worker and parameter server
        serves. Call it before creating ``tf.distribute.ParameterServerStrategy``,
        whose coordinator would otherwise count a server still starting as failed."""
        if self.jobName != "chief":
            raise ValueError(f"awaitServers() is for the chief of a job with numPs > 0; this "
                             f"is {self.jobName}:{self.taskIndex}.")
        servers.await_servers(self)

    def emit(self, kind: str, **payload: Any) -> None:
        """Sends a structured event (e.g. epoch progress) to the driver."""
        write_event({"kind": kind, "rank": self.rank, **payload})

    def phase(self, name: str) -> None:
        """Marks a start-up or shutdown phase (timestamped; a DEBUG record on the driver's
        ``sparktf.phases`` logger, which ``bench/startup_bench.py`` tabulates)."""
        phase(name, self.rank)


def _streamable(pending: arrival.Pending, names: list[str]):
    """Column -> ``ColumnInfo`` of this task's first record batch when the first pass can
    stream: the rows are still arriving and those first ones are numbers of one shape.
    None otherwise (every row in before the first batch, text, lengths that vary)."""
    if next(pending.ends(), None) is None or pending.settled:
        return None
    first = next(shards.stream_batches(pending.path, pending.ends()))
    infos = {n: columns.describe(first.column(n)) for n in names}
    if any(i.varies or i.is_text for i in infos.values()):
        return None
    return infos


def _streamed_chunks(ctx: TaskContext, pending: arrival.Pending, names: list[str],
                     infos: dict):
    """The first pass while the rows arrive: each record batch as soon as it is in, checked
    against the shape the pass began with, then against every task's rows."""
    for batch in shards.stream_batches(pending.path, pending.ends()):
        for n in names:
            seen = columns.describe(batch.column(n))
            if (seen.dtype, seen.shape) != (infos[n].dtype, infos[n].shape):
                raise shards.FeedError(_began_as(n, infos[n], seen))
        yield shards.batch_values(batch, names)
    for n in names:  # every task's rows are in: they must match what was fed
        merged = ctx.feedSpec.get(n)
        if merged is not None and (merged.dtype, merged.shape) != (infos[n].dtype,
                                                                   infos[n].shape):
            raise shards.FeedError(_began_as(n, infos[n], merged))


def _began_as(name: str, began: ColumnInfo, other: ColumnInfo) -> str:
    return (f"ctx.dataset() began feeding column '{name}' as {began.rows()}, as this "
            f"task's first rows were, before every row had arrived, but other rows are "
            f"{other.rows()}. Pass stream=False to ctx.dataset() to wait for every row "
            "and take the shapes from all of them (ragged where lengths vary).")


def _info(value) -> ColumnInfo | None:
    return value if value is None or isinstance(value, ColumnInfo) else \
        ColumnInfo.from_json(value)


def _tensor_spec(info: ColumnInfo):
    import tensorflow as tf

    dtype = tf.string if info.is_text else tf.as_dtype(info.dtype)
    if info.varies:
        return tf.RaggedTensorSpec((None, None, *info.shape[1:]), dtype, ragged_rank=1)
    return tf.TensorSpec((None, *info.shape), dtype)


def _tensor(values, info: ColumnInfo):
    """A batch of one column as a tensor: a ``tf.RaggedTensor`` where lengths vary."""
    import tensorflow as tf

    if not info.varies:
        return values
    if isinstance(values, columns.Padded):
        return tf.RaggedTensor.from_tensor(values.values, lengths=values.lengths)
    return tf.RaggedTensor.from_tensor(values)
