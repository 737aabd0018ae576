"""One barrier task: receive the partition, form the cluster, run ``main_fn`` in a child.

The orchestrator reads top to bottom: start the child process (it imports
TensorFlow while the data streams in), spill the partition to local disk, choose
a port, exchange addresses and row counts (through the driver's channel, else
Spark's ``allGather``), derive roles and TF_CONFIG, hand
the child its payload, relay its output to the driver, release it after a
barrier, and return its pickled result. Every wait is the barrier channel or a
blocking read of the child's output; the child dies with this process.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import os
import re
import select
import sys
import tempfile
import threading
import time
import traceback
from typing import Iterator

import cloudpickle
import pyarrow as pa

from sparktf._executor import cluster, feed, gpu, row_checks, spare
from sparktf._executor.context import TaskContext
from sparktf._protocol import watchdog
from sparktf._protocol.client import EventClient
from sparktf._protocol.wire import CHANNEL_ENV, DONE_LINE, EVENT_MARKER
from sparktf.errors import TaskFailedError

RESULT_SCHEMA = pa.schema([("rank", pa.int32()), ("result", pa.binary())])
LOG_TAIL_LINES = 40
# TensorFlow's gRPC channels wait about 1 s before retrying a peer whose server is not up
# yet (TF caps the backoff at 1 s), which a cluster's first connections nearly always
# meet: every task starts its server at about the same time. A short first backoff
# forms the cluster in ~0.15 s instead of ~1 s; the cap stays TF's own.
GRPC_OPTIONS = ("grpc.initial_reconnect_backoff_ms=50,grpc.min_reconnect_backoff_ms=50,"
                "grpc.max_reconnect_backoff_ms=1000")
PORT_CONFLICT_PREFIX = "sparktf-port-conflict: "
# TensorFlow's start-up notices on a CPU-only task: kept in the executor log, not sent to
# the driver, where they would bury the user's own lines.
_TF_NOISE = re.compile(r"oneDNN custom operations|cudart_stub|cuda_platform\.cc|cuInit|"
                       r"absl::InitializeLog|computation_placer|Could not find cuda drivers|"
                       r"TF-TRT Warning|cuda_(?:dnn|fft|blas)\.cc|rebuild TensorFlow with|"
                       r"cpu_feature_guard|AVX512_VNNI|in other operations, rebuild")


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

    @property
    def roles(self) -> list[cluster.Role]:
        return cluster.assign_roles(self.num_workers, self.num_ps, self.evaluator)


def run_task(spec: TaskSpec, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function of the barrier stage."""
    from pyspark import BarrierTaskContext

    barrier = BarrierTaskContext.get()
    rank = barrier.partitionId()
    _reset_peak_rss()
    role = spec.roles[rank]
    with EventClient(spec.event_address, spec.event_secret, rank) as events, \
            tempfile.TemporaryDirectory(prefix=f"sparktf-rank{rank}-") as workdir:
        _phase(events, "task started")
        assigned = gpu.assigned(barrier)
        try:
            devices = task_devices(role, assigned, spec.use_gpu,
                                   os.environ.get("CUDA_VISIBLE_DEVICES"))
        except gpu.GpuAssignmentError as e:
            _fail(events, rank, role, f"GpuAssignmentError: {e}", traceback.format_exc(), "")
        with _Child(spec, rank, devices, barrier.cpus(), workdir, events) as child:
            if spec.parquet_uri or not spec.columns:
                # Read Spark's input to its end even when unused: otherwise Spark does not
                # reuse this Python worker (nor, with it, its spare process).
                collections.deque(batches, maxlen=0)
            if spec.parquet_uri:
                batches = _parquet_share(spec, rank)
            counts = spec.row_checks.counter() if spec.row_checks else None
            if counts is not None:
                batches = counts.watch(batches)
            unusable = None  # rows the feed could not take: (message, traceback)
            try:
                shard, held_out = (feed.spill(batches, os.path.join(workdir, "shard.arrow"),
                                              spec.columns, spec.split_column)
                                   if spec.columns else (None, None))
            except Exception as e:  # bad data: report it, then fail the stage
                unusable = (f"{type(e).__name__}: {e}", traceback.format_exc())
                if counts is None:
                    _fail(events, rank, role, *unusable, "")
                # a null the checks name may be what the feed choked on: count the rest
                collections.deque(batches, maxlen=0)
                shard = held_out = None
            _phase(events, "data received")
            ctx, everyone_connected, problem = _form_cluster(
                spec, barrier, rank, role, shard, held_out, devices, assigned, events, counts)
            if problem is not None:  # every task found it: refuse before TensorFlow runs
                _fail(events, rank, role, problem, "", "", invalid_input=True)
            if unusable is not None:
                _fail(events, rank, role, *unusable, "")
            _phase(events, "cluster formed")
            status, value, tail, child_kb = child.run(
                ctx, lambda: _release(events, barrier, everyone_connected))
        _phase(events, "released")
        events.send({"kind": "stats", "role": str(role), "rows": ctx.numRows,
                     "feeder_peak_rss_mb": _peak_rss_kb() / 1024,
                     "task_peak_rss_mb": child_kb / 1024})
        if status != "ok":
            _fail(events, rank, role, value["message"], value.get("traceback", ""), tail)
        yield pa.RecordBatch.from_arrays([pa.array([rank], pa.int32()),
                                          pa.array([value], pa.binary())],
                                         schema=RESULT_SCHEMA)


def _form_cluster(spec, barrier, rank, role, shard, held_out, devices, assigned,
                  events: EventClient, counts) -> tuple[TaskContext, bool, str | None]:
    """Exchanges addresses and row counts (``_all_gather``); every task derives the same spec.

    Also returns whether every task reached the driver's event channel (then the
    exit barrier goes through it), and the problem the row checks found in the
    tasks' rows together, if any.
    """
    host = barrier.getTaskInfos()[rank].address.rsplit(":", 1)[0]
    mine = {"address": f"{host}:{cluster.pick_port()}",
            "rows": shard.num_rows if shard else 0,
            "validation_rows": held_out.num_rows if held_out else 0,
            "channel": events.connected,
            "checks": counts.as_dict() if counts is not None else None,
            "feed": next((s.describe() for s in (shard, held_out) if s and s.num_rows), None)}
    gathered = [json.loads(g) for g in _all_gather(events, barrier, json.dumps(mine))]
    spec_dict = cluster.build_cluster_spec(spec.roles, [g["address"] for g in gathered])
    ctx = TaskContext(jobName=role.job_name, taskIndex=role.task_index, rank=rank,
                       clusterSpec=spec_dict, numWorkers=spec.num_workers, numPs=spec.num_ps,
                       modelDir=spec.model_dir, numRows=mine["rows"],
                       allNumRows=tuple(g["rows"] for g in gathered), shard=shard,
                       validationShard=held_out,
                       allValidationRows=tuple(g["validation_rows"] for g in gathered),
                       gpus=devices, assignedGpus=tuple(assigned),
                       feedSpec=next((g["feed"] for g in gathered if g["feed"]), {}))
    problem = (row_checks.problem(spec.row_checks, [g["checks"] for g in gathered])
               if spec.row_checks else None)
    return ctx, all(g["channel"] for g in gathered), problem


def _all_gather(events: EventClient, barrier, message: str) -> list[str]:
    """Every task's ``message`` in rank order: through the driver's event channel (a few
    milliseconds) when every task reaches it, else through Spark's ``allGather`` (about a
    second). The driver answers every task alike, so all of them take the same road."""
    if events.connected:
        reply = events.request({"kind": "gather", "value": message})
        if reply is None:
            raise RuntimeError("lost the driver's event channel while the tasks exchanged "
                               "their addresses (the job ended, or the driver is gone)")
        if "values" in reply:
            return reply["values"]
    return barrier.allGather(message)


def task_devices(role: cluster.Role, assigned: list[str], use_gpu, inherited: str | None) -> str:
    """The task's CUDA_VISIBLE_DEVICES: its assigned GPUs; none for a parameter server.

    Parameter servers hold variables in host memory and serve them over the network:
    a GPU there would be claimed for nothing.
    """
    if role.job_name == cluster.PS:
        return gpu.HIDE_ALL
    return gpu.visible_devices(assigned, use_gpu, inherited)


def interop_threads(chosen: str | None, num_workers: int, num_ps: int) -> int:
    """TensorFlow's inter-op pool size for a task: 2 unless chosen, at least
    ``num_workers + 1`` with parameter servers.

    TensorFlow's own parameter-server guide gives its workers that many; with one
    inter-op thread, parameter-server training stalled at its first step every time
    we tried.
    """
    threads = int(chosen) if chosen and chosen.strip().isdigit() and int(chosen) > 0 else 2
    return max(threads, num_workers + 1) if num_ps else threads


def _parquet_share(spec: TaskSpec, rank: int) -> Iterator[pa.RecordBatch]:
    """inputMode='parquet': the rows of the Parquet copy that the layout gives this rank."""
    plan = cluster.layout(spec.roles, spec.split_column is not None)
    separate = plan.validation_rank is not None
    if rank in plan.training_ranks:
        return feed.parquet_batches(spec.parquet_uri, plan.training_ranks.index(rank),
                                    len(plan.training_ranks),
                                    only=(spec.split_column, False) if separate else None)
    if rank == plan.validation_rank:
        return feed.parquet_batches(spec.parquet_uri, 0, 1, only=(spec.split_column, True))
    return iter(())


def _release(events: EventClient, barrier, through_channel: bool) -> None:
    """Waits until every task's main_fn has finished: the exit barrier."""
    if not through_channel:
        barrier.barrier()
    elif not events.send({"kind": "done", "ack": True}, wait_ack=True):
        raise RuntimeError("lost the driver's event channel while waiting for the other "
                           "tasks to finish")


def _phase(events: EventClient, name: str) -> None:
    events.send({"kind": "phase", "name": name, "t": time.time()})


def child_env(spec: TaskSpec, devices: str, cpus: int) -> dict[str, str]:
    """The environment of the task's process (the same for every task of a Python worker
    with the same devices and CPUs: a spare serves the tasks whose environment it has)."""
    env = dict(os.environ)
    env.update({"CUDA_VISIBLE_DEVICES": devices, "TF_FORCE_GPU_ALLOW_GROWTH": "true",
                "PYTHONUNBUFFERED": "1"})
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.setdefault("TF_GRPC_DEFAULT_OPTIONS", GRPC_OPTIONS)
    # TensorFlow sizes its thread pools to the machine; tasks sharing a host would
    # oversubscribe it. Use the CPUs Spark gave this task unless the user chose.
    for name in ("TF_NUM_INTRAOP_THREADS", "OMP_NUM_THREADS"):
        env.setdefault(name, str(max(1, cpus)))
    env["TF_NUM_INTEROP_THREADS"] = str(interop_threads(env.get("TF_NUM_INTEROP_THREADS"),
                                                        spec.num_workers, spec.num_ps))
    return env


class _Child:
    """The process that runs ``main_fn``: asked of the spare (or started) early, given its
    payload, released late."""

    def __init__(self, spec: TaskSpec, rank: int, devices: str, cpus: int, workdir: str,
                 events):
        self.spec, self.rank, self.workdir, self.events = spec, rank, workdir, events
        self.result_path = os.path.join(workdir, "result.pkl")
        self.tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
        self.dog = self.stalled = None  # the task's own watchdog (``_own_watchdog``)
        self.abandoned = False  # the driver ended the job while our process ran
        self.env = child_env(spec, devices, cpus)
        self.proc = None
        self.request = None
        if spec.spare_idle_s > 0:
            self.request = spare.request(self.env, spec.spare_idle_s)
        else:
            self._spawn()

    def _spawn(self) -> None:
        _phase(self.events, "child started")
        self.proc = spare.spawn(self.env, self.workdir)

    def __enter__(self) -> "_Child":
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is None and self.request is not None:
            self.proc = self.request.process()  # not handed a payload: it exits at once
        if self.proc is not None:
            spare.stop_process(self.proc)

    def run(self, ctx: TaskContext, release):
        """Hands over the payload, relays output until exit; (status, value, tail, peak KiB).

        ``release()`` returns once every task's child has finished; then ours may exit.
        """
        if self.request is not None:
            self.proc = self.request.process()
            if self.proc is None:
                self._spawn()  # the spare has gone: a process of our own
        payload_path = os.path.join(self.workdir, "payload.pkl")
        with open(payload_path, "wb") as f:
            env = {"TF_CONFIG": json.dumps(ctx.tfConfig, sort_keys=True)}
            if self.spec.event_address is not None:
                env[CHANNEL_ENV] = json.dumps([*self.spec.event_address,
                                               self.spec.event_secret])
            cloudpickle.dump((self.spec.payload, ctx, env), f)
        order = {"payload": payload_path, "result": self.result_path, "cwd": self.workdir}
        try:
            self.proc.stdin.write(json.dumps(order) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # the child died early; its output and exit code tell why
        forward = ctx.isChief
        waiting: threading.Thread | None = None
        failed: list[BaseException] = []
        with self._own_watchdog(), self._stop_when_abandoned():
            for line in self.proc.stdout:
                waiting = self._line(line, release, waiting, failed, forward)
        code = self.proc.wait()
        if waiting is not None:
            waiting.join()
        if failed:
            raise failed[0]
        return self._outcome(code)

    @contextlib.contextmanager
    def _own_watchdog(self):
        """When this task cannot reach the driver (whose watchdog then never hears of it),
        it watches its own child's heartbeats and stops a child that makes no progress for
        ``stall_timeout``: a stall still ends the job."""
        if self.events.connected or not self.spec.stall_timeout:
            yield
            return

        def on_stall(rank: int, last: dict) -> None:
            self.stalled = last[rank]
            self.proc.kill()

        with watchdog.Watchdog(self.spec.stall_timeout, on_stall) as self.dog:
            yield

    @contextlib.contextmanager
    def _stop_when_abandoned(self):
        """Stops our process when the driver hangs up the event channel while it runs.

        The driver hangs up when its job has ended: after every task has finished, or
        when the stage failed or was cancelled. In the second case Spark may leave this
        Python worker running (it destroys a killed task's worker only if the task has
        not completed by then), and our process would wait forever for peers that are
        gone (a collective with a dead worker). A blocking poll, woken at the end."""
        channel = self.events.fileno()
        if channel is None:
            yield
            return
        wake_r, wake_w = os.pipe()

        def watch():
            poller = select.poll()
            poller.register(channel, select.POLLRDHUP)  # HUP and ERR are always reported
            poller.register(wake_r, select.POLLIN)
            ready = dict(poller.poll())
            if wake_r not in ready and channel in ready:
                self.abandoned = True
                self.proc.kill()

        watcher = threading.Thread(target=watch, name=f"sparktf-abandoned-{self.rank}",
                                   daemon=True)
        watcher.start()
        try:
            yield
        finally:
            os.write(wake_w, b"x")
            watcher.join()
            os.close(wake_r)
            os.close(wake_w)

    def _line(self, line: str, release, waiting, failed: list, forward: bool):
        """Handles one line of the child's output; returns the release thread, if any."""
        line = line.rstrip("\n")
        if line == DONE_LINE and waiting is None:
            # Wait for the others in a thread and keep draining the child's output
            # meanwhile: a parameter server or worker serves (and may log) until the
            # chief is done, and a full pipe would block it mid-step.
            waiting = threading.Thread(target=self._release, args=(release, failed),
                                       name=f"sparktf-release-{self.rank}", daemon=True)
            waiting.start()
        else:
            # once waiting, the channel is busy with the exit barrier: log locally only
            self._relay(line, forward, to_driver=waiting is None)
        return waiting

    def _release(self, release, failed: list) -> None:
        try:
            release()  # every child has finished: release them together
        except BaseException as e:  # re-raised by run() once the child has exited
            failed.append(e)
        finally:
            self.proc.stdin.close()

    def _relay(self, line: str, forward: bool, to_driver: bool) -> None:
        if line.startswith(EVENT_MARKER):
            event = json.loads(line[len(EVENT_MARKER):])
            if event.get("rank") is None:
                event["rank"] = self.rank
            if self.dog is not None and event.get("kind") == "heartbeat":
                self.dog.beat(self.rank, event)
            if to_driver:
                self.events.send(event)
        else:
            print(f"[sparktf rank {self.rank}] {line}", file=sys.stderr)
            if _TF_NOISE.search(line):
                return
            self.tail.append(line)
            if forward and to_driver:
                self.events.send({"kind": "log", "line": line})

    def _outcome(self, code: int):
        log_tail = "\n".join(self.tail)
        if self.stalled is not None:
            return "error", {"message": (
                f"TaskStalledError: no progress for {self.spec.stall_timeout:g} s "
                f"(stallTimeout); last seen {watchdog.describe(self.stalled)}. Watched by the "
                "task itself: the driver's event channel was out of its reach.")}, log_tail, 0
        if self.abandoned:
            return "error", {"message": "the driver ended the job while this task's process "
                                        "ran (another task failed, or the stage was "
                                        "cancelled); the process was stopped"}, log_tail, 0
        if not os.path.exists(self.result_path):
            how = f" with code {code}" if code is not None and code >= 0 else ""
            return "error", {"message": f"the task's process exited{how} before reporting a "
                                        "result (killed, or out of memory?)"}, log_tail, 0
        with open(self.result_path, "rb") as f:
            status, value, peak_kb = cloudpickle.load(f)
        if status == "ok":
            return status, cloudpickle.dumps(value), log_tail, peak_kb
        return status, value, log_tail, peak_kb


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
          invalid_input: bool = False):
    """Reports a failure to the driver (acknowledged), then fails the barrier stage.

    ``invalid_input``: the user's data is at fault (the driver raises InvalidInputError)."""
    if cluster.is_port_conflict(message):
        message = PORT_CONFLICT_PREFIX + message
    events.send({"kind": "error", "role": str(role), "message": message, "traceback": tb,
                 "log_tail": tail, "invalid_input": invalid_input, "ack": True},
                wait_ack=True)
    raise TaskFailedError(rank, str(role), message, tb, tail)
