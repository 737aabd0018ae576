"""``ctx``: what one task of a sparktf job knows about itself, handed to ``main_fn``.

Attribute names are camelCase because they are part of the public contract,
like pyspark's own Params.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, Sequence

from sparktf._executor import feed, servers
from sparktf._protocol.wire import phase, write_event


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
        Rows of the input DataFrame that this task received.
    allNumRows : tuple of int
        ``numRows`` of every task, by rank.
    gpus : str
        The task's ``CUDA_VISIBLE_DEVICES`` (empty: CPU only).
    assignedGpus : tuple of str
        The GPU addresses Spark assigned the task (``TaskContext.resources()``).
    feedSpec : dict
        Column -> (numpy dtype name, width; 0 for a scalar) of the input rows, the same
        on every task, including those that received no rows.
    """

    jobName: str
    taskIndex: int
    rank: int
    clusterSpec: dict
    numWorkers: int
    numPs: int = 0
    modelDir: str | None = None
    numRows: int = 0
    allNumRows: tuple = ()
    shard: feed.Shard | None = None
    validationShard: feed.Shard | None = None
    allValidationRows: tuple = ()
    gpus: str = ""  # this task's CUDA_VISIBLE_DEVICES ("" hides every GPU)
    assignedGpus: tuple = ()  # the GPU addresses Spark's scheduler gave the task
    feedSpec: dict = dataclasses.field(default_factory=dict)

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
                columns: Sequence[str] | None = None):
        """This task's share of the input DataFrame as a ``tf.data.Dataset`` of dicts.

        Each element maps a column name to a batch of ``batch_size`` rows (the
        last one may be smaller): vectors and arrays as float32 ``[batch, width]``,
        numbers as float32 or int64 ``[batch]``. Rows come from a local,
        Arrow file read one record batch at a time, so the dataset can be iterated
        once per epoch with bounded memory.
        With ``shuffle``, chunk order and rows within chunks change every pass.
        """
        import tensorflow as tf

        if self.shard is None:
            raise ValueError("This job was started without a DataFrame; pass df= to "
                             "sparktf.run to feed data to the tasks.")
        names = list(columns or self.shard.columns)
        template = feed.empty_batch(self.shard, names)
        signature = {n: tf.TensorSpec((None,) + a.shape[1:], tf.as_dtype(a.dtype))
                     for n, a in template.items()}
        shard = self.shard
        passes = iter(range(sys.maxsize))

        def chunks():
            if not shuffle:
                return feed.read_chunks(shard, names)
            import numpy as np
            pass_seed = (int(np.random.SeedSequence().entropy % 2**31) if seed is None
                         else seed + next(passes))
            return feed.shuffled_chunks(shard, names, pass_seed)

        ds = tf.data.Dataset.from_generator(chunks, output_signature=signature)
        return ds.rebatch(batch_size).prefetch(tf.data.AUTOTUNE)

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
