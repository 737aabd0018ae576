"""One barrier task: receive the partition, form the cluster, run ``main_fn`` in a child.

The orchestrator reads top to bottom: ask for the task's process (``task_process``;
forked from a spare, or importing TensorFlow while the data streams in), start the
intake (a thread spilling the partition to local disk), choose a port, exchange
addresses (through the driver's channel, else Spark's ``allGather``), derive roles
and TF_CONFIG, hand the child its payload with its rows still arriving
(``arrival``), exchange row counts and column shapes once the partition is in and
tell the child, relay its output to the driver, release it after a barrier, and
return its pickled result. Every wait is the barrier channel, a thread's join or a
blocking read of the child's output; the child dies with this process.

A failure (bad rows, the child's exception, a process that died) is reported on the
channel; the driver then hangs up on every task, and each stops its child and ends
without raising. Spark sees a stage that finished, keeps the Python workers (and their
spares) warm for the next job, and the driver raises the reported error.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import tempfile
import threading
import traceback
from typing import Iterator

import pyarrow as pa

from sparktf._protocol.client import EventClient, JobEnded
from sparktf.errors import TaskFailedError
from sparktf.runtime import gpu, storage, worker_tuning
from sparktf.runtime.feed import arrival, columns, row_checks, shards
from sparktf.runtime.process import cluster
from sparktf.runtime.process.context import TaskContext
from sparktf.runtime.process.task_process import TaskProcess

RESULT_SCHEMA = pa.schema([("rank", pa.int32()), ("result", pa.binary())])
PORT_CONFLICT_PREFIX = "sparktf-port-conflict: "
@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """Everything a barrier task needs, built on the driver; holds no SparkSession."""

    payload: bytes  # cloudpickle of (main_fn, args)
    num_workers: int
    num_ps: int = 0
    use_gpu: str | bool = "auto"  # gpu.use_gpu_value
    model_dir: str | None = None
    columns: tuple[str, ...] = ()  # input columns to feed; empty: no data
    split_column: str | None = None  # boolean column: true rows go to the validation shard
    parquet_uri: str | None = None  # inputMode="parquet": read this folder instead of Spark's rows
    event_address: tuple[str, int] | None = None
    event_secret: str = ""
    evaluator: bool = False
    stall_timeout: float | None = None  # watched here when the driver cannot be reached
    spare_idle_s: float = 0.0  # keep a spare process this long between tasks (0: none)
    row_checks: row_checks.RowChecks | None = None  # refuse bad rows before training
    worker_tuning: bool = True  # spark.sparktf.workerTuning (runtime.worker_tuning)
    framework_env: tuple = ()  # (name, value): the driver's TF_USE_LEGACY_KERAS, KERAS_BACKEND

    @property
    def roles(self) -> list[cluster.Role]:
        return cluster.assign_roles(self.num_workers, self.num_ps, self.evaluator)


def run_task(spec: TaskSpec, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function of the barrier stage."""
    from pyspark import BarrierTaskContext

    worker_tuning.configure(spec.worker_tuning)
    worker_tuning.lazy_zip_imports()  # ~0.2 s of CPU less for each later task of this worker
    barrier = BarrierTaskContext.get()
    rank = barrier.partitionId()
    _reset_peak_rss()
    role = spec.roles[rank]
    with EventClient(spec.event_address, spec.event_secret, rank) as events:
        try:
            yield from _run(spec, batches, barrier, rank, role, events)
        except Exception as e:
            if not (isinstance(e, JobEnded) or events.ended):
                raise  # the driver cannot hear us: Spark carries the failure
            # The driver has the failure (ours or another rank's) and has ended the job:
            # end without an exception, keeping this Python worker and its spare for the
            # next job. Spark reuses a worker only once its input has been read.
            collections.deque(batches, maxlen=0)


def _run(spec: TaskSpec, batches, barrier, rank: int, role, events: EventClient):
    with tempfile.TemporaryDirectory(prefix=f"sparktf-rank{rank}-",
                                     dir=storage.scratch_root()) as workdir:
        events.phase("task started")
        assigned = gpu.assigned(barrier)
        try:
            devices = task_devices(role, assigned, spec.use_gpu,
                                   os.environ.get("CUDA_VISIBLE_DEVICES"))
        except gpu.GpuAssignmentError as e:
            _fail(events, rank, role, f"GpuAssignmentError: {e}", traceback.format_exc(), "")
        with TaskProcess(spec, rank, devices, barrier.cpus(), workdir, events) as child:
            if spec.parquet_uri or not spec.columns:
                # Read Spark's input to its end even when unused: otherwise Spark does not
                # reuse this Python worker (nor, with it, its spare process).
                collections.deque(batches, maxlen=0)
            if spec.parquet_uri:
                batches = _parquet_share(spec, rank)
            intake = _Intake(spec, batches, workdir, child) if spec.columns else None
            exchange = _Exchange(events, barrier)
            try:
                ctx, everyone_connected = _form_cluster(spec, barrier, rank, role, devices,
                                                        assigned, exchange, events.connected,
                                                        intake)
                child.start(ctx)
                events.phase("cluster formed")
                share = _share_rows(spec, exchange, rank, role, events, intake) \
                    if intake else arrival.Share()
                if intake:
                    child.tell({"share": share.as_json()})
            finally:
                if intake is not None:
                    intake.join()  # Spark's input is read by one thread at a time
            status, value, tail, child_kb = child.wait(
                lambda: _release(events, barrier, everyone_connected))
        events.phase("released")
        events.send({"kind": "stats", "role": str(role), "rows": share.numRows,
                     "feeder_peak_rss_mb": _peak_rss_kb() / 1024,
                     "task_peak_rss_mb": child_kb / 1024})
        if status != "ok":
            _fail(events, rank, role, value["message"], value.get("traceback", ""), tail,
                  invalid_input=bool(value.get("invalid_input")))
        yield pa.RecordBatch.from_arrays([pa.array([rank], pa.int32()),
                                          pa.array([value], pa.binary())],
                                         schema=RESULT_SCHEMA)


class _Intake:
    """Writes the task's partition to its shard file in a thread, from the moment the task
    starts, telling the task's process where each record batch ends (``arrival``)."""

    def __init__(self, spec: TaskSpec, batches, workdir: str, child: TaskProcess):
        self.path = os.path.join(workdir, "shard.arrow")
        self.columns = spec.columns
        self.counts = spec.row_checks.counter() if spec.row_checks else None
        if self.counts is not None:
            batches = self.counts.watch(batches)
        self.shard = self.held_out = None
        self.unusable = None  # rows the feed could not take: (message, traceback, ours)
        self._thread = threading.Thread(
            target=self._spill, args=(spec, batches, lambda end: child.tell({"end": end})),
            name="sparktf-intake", daemon=True)
        self._thread.start()

    def _spill(self, spec: TaskSpec, batches, on_batch) -> None:
        try:
            self.shard, self.held_out = shards.spill(batches, self.path, spec.columns,
                                                   spec.split_column, on_batch)
        except Exception as e:  # bad data: reported once the rows are in
            self.unusable = (f"{type(e).__name__}: {e}", traceback.format_exc(),
                             isinstance(e, shards.FeedError))
            # a null the checks name may be what the feed choked on: count the rest
            collections.deque(batches, maxlen=0)

    def join(self) -> None:
        self._thread.join()


def _form_cluster(spec, barrier, rank, role, devices, assigned, exchange: _Exchange,
                  connected: bool, intake: _Intake | None) -> tuple[TaskContext, bool]:
    """Exchanges addresses (the first round of ``exchange``); every task derives the same
    spec. The rows are still arriving: the context holds an ``arrival.Pending`` share (no
    input: none).

    Also returns whether every task reached the driver's event channel (``connected``
    for this one; then the exit barrier goes through it)."""
    executors = tuple(info.address for info in barrier.getTaskInfos())
    host = executors[rank].rsplit(":", 1)[0]
    mine = {"address": f"{host}:{cluster.pick_port()}", "channel": connected}
    gathered = [json.loads(g) for g in exchange.all_gather(json.dumps(mine), "addresses")]
    spec_dict = cluster.build_cluster_spec(spec.roles, [g["address"] for g in gathered])
    ctx = TaskContext(jobName=role.job_name, taskIndex=role.task_index, rank=rank,
                      clusterSpec=spec_dict, numWorkers=spec.num_workers, numPs=spec.num_ps,
                      modelDir=spec.model_dir, gpus=devices, assignedGpus=tuple(assigned),
                      executors=executors,
                      share=(arrival.Pending(intake.path, intake.columns) if intake
                             else arrival.Share()))
    return ctx, all(g["channel"] for g in gathered)


def _share_rows(spec, exchange: _Exchange, rank, role, events: EventClient,
                intake: _Intake) -> arrival.Share:
    """Once this task's rows are in: exchanges row counts, column descriptions and the row
    checks' counts with every task; refuses rows the feed or the checks cannot take."""
    intake.join()
    events.phase("data received")
    shard, held_out, counts = intake.shard, intake.held_out, intake.counts
    if intake.unusable is not None and counts is None:
        _fail(events, rank, role, *intake.unusable[:2], "", invalid_input=intake.unusable[2],
              reading=True)
    mine = {"rows": shard.num_rows if shard else 0,
            "validation_rows": held_out.num_rows if held_out else 0,
            "checks": counts.as_dict() if counts is not None else None,
            "feed": _describe(shard, held_out)}
    gathered = [json.loads(g) for g in exchange.all_gather(json.dumps(mine), "row counts")]
    problem = (row_checks.problem(spec.row_checks, [g["checks"] for g in gathered],
                                  sum(g["rows"] for g in gathered),
                                  sum(g["validation_rows"] for g in gathered))
               if spec.row_checks else None)
    if spec.row_checks is None and not any(g["rows"] + g["validation_rows"] for g in gathered):
        problem = row_checks.no_rows("sparktf.run")  # as when Spark planned no partition
    if problem is not None:  # every task found it: refuse before training
        _fail(events, rank, role, problem, "", "", invalid_input=True)
    if intake.unusable is not None:
        _fail(events, rank, role, *intake.unusable[:2], "", invalid_input=intake.unusable[2],
              reading=True)
    return arrival.Share(numRows=mine["rows"], allNumRows=tuple(g["rows"] for g in gathered),
                         shard=shard, validationShard=held_out,
                         allValidationRows=tuple(g["validation_rows"] for g in gathered),
                         feedSpec=_merged_feed([g["feed"] for g in gathered]))


def _describe(*shards) -> dict | None:
    """What this task's rows hold, column by column (``columns.ColumnInfo`` as JSON)."""
    found: dict[str, list] = {}
    for shard in shards:
        if shard is not None and shard.num_rows:
            for name, info in zip(shard.columns, shard.infos):
                found.setdefault(name, []).append(info)
    return {name: columns.merge(infos).as_json() for name, infos in found.items()} or None


def _merged_feed(described: list) -> dict:
    """Column -> ``ColumnInfo`` over every task's rows: the same on every task."""
    found: dict[str, list] = {}
    for feed_spec in described:
        for name, info in (feed_spec or {}).items():
            found.setdefault(name, []).append(columns.ColumnInfo.from_json(info))
    return {name: columns.merge(infos) for name, infos in found.items()}


class _Exchange:
    """The task's exchanges with every other task, in rounds (0: addresses, 1: row counts),
    each giving every task's message in rank order: through the driver's event channel (a
    few milliseconds) when every task reaches it, else through Spark's ``allGather`` (about
    a second).

    The driver answers the first round alike for every task, and every later round goes
    the way the first went: a task that loses the channel in between ends (the driver,
    seeing its connection end, names it to the others and ends the job) instead of waiting
    in ``allGather`` alone while the others wait on the channel.
    """

    def __init__(self, events: EventClient, barrier):
        self._events, self._barrier = events, barrier
        self._rounds = 0
        self._through_spark: bool | None = None  # decided in the first round

    def all_gather(self, message: str, what: str) -> list[str]:
        """Every task's ``message`` for this round (``what`` it carries, for errors)."""
        round_ = self._rounds
        self._rounds += 1
        if self._through_spark is None:
            # a task that cannot reach the channel goes through Spark; once the driver sees
            # that a task never connected, it sends every other task the same way
            self._through_spark = not self._events.connected
        if not self._through_spark:
            reply = self._events.request({"kind": "gather", "value": message, "round": round_,
                                          "what": what})
            if reply is None or reply.get("ended"):
                raise JobEnded(f"the driver's event channel closed during the tasks' exchange "
                               f"of {what} (round {round_}): the job has ended")
            if "values" in reply:
                return reply["values"]
            self._through_spark = True  # the driver's fallback: every task, every round
        return self._barrier.allGather(message)


def task_devices(role: cluster.Role, assigned: list[str], use_gpu, inherited: str | None) -> str:
    """The task's CUDA_VISIBLE_DEVICES: its assigned GPUs; none for a parameter server.

    Parameter servers hold variables in host memory and serve them over the network:
    a GPU there would be claimed for nothing.
    """
    if role.job_name == cluster.PS:
        return gpu.HIDE_ALL
    return gpu.visible_devices(assigned, use_gpu, inherited)


def _parquet_share(spec: TaskSpec, rank: int) -> Iterator[pa.RecordBatch]:
    """inputMode='parquet': the rows of the Parquet copy that the layout gives this rank."""
    plan = cluster.layout(spec.roles, spec.split_column is not None)
    separate = plan.validation_rank is not None
    if rank in plan.training_ranks:
        return shards.parquet_batches(spec.parquet_uri, plan.training_ranks.index(rank),
                                    len(plan.training_ranks),
                                    only=(spec.split_column, False) if separate else None)
    if rank == plan.validation_rank:
        return shards.parquet_batches(spec.parquet_uri, 0, 1, only=(spec.split_column, True))
    return iter(())


def _release(events: EventClient, barrier, through_channel: bool) -> None:
    """Waits until every task's main_fn has finished: the exit barrier."""
    if not through_channel:
        barrier.barrier()
    elif not events.send({"kind": "done", "ack": True}, wait_ack=True):
        raise RuntimeError("lost the driver's event channel while waiting for the other "
                           "tasks to finish")


def _reset_peak_rss() -> None:
    """Resets this (reused) Python worker's peak RSS so stats describe this task only."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _peak_rss_kb() -> int:
    """This process's peak RSS since the last reset (VmHWM), in KiB."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _fail(events: EventClient, rank: int, role, message: str, tb: str, tail: str,
          invalid_input: bool = False, reading: bool = False):
    """Reports a failure to the driver (acknowledged), then ends the task quietly
    (``JobEnded``): the driver raises it and ends the other tasks. A task that cannot
    reach the driver fails the barrier stage instead, and Spark carries the error.

    ``invalid_input``: the user's data is at fault (the driver raises InvalidInputError).
    ``reading``: the task failed reading its rows (the input may have been cut short by
    Spark failing to compute them, which the driver then reports instead)."""
    if cluster.is_port_conflict(message):
        message = PORT_CONFLICT_PREFIX + message
    if events.send({"kind": "error", "role": str(role), "message": message, "traceback": tb,
                    "log_tail": tail, "invalid_input": invalid_input, "reading": reading,
                    "ack": True},
                   wait_ack=True):
        raise JobEnded(message)  # the driver raises it, and stops the other tasks
    raise TaskFailedError(rank, str(role), message, tb, tail)
