"""One barrier task: receive the partition, form the cluster, run ``main_fn`` in a child.

The orchestrator reads top to bottom: spill the partition to local disk, choose
a port, ``allGather`` addresses and row counts, derive roles and TF_CONFIG,
start the child process, relay its output to the driver, release it after a
barrier, and return its pickled result. Every wait is the barrier channel or a
blocking read of the child's output; the child dies with this process.
"""

from __future__ import annotations

import collections
import ctypes
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from typing import Iterator

import cloudpickle
import pyarrow as pa

from sparktf.errors import TaskFailedError
from sparktf.runtime import cluster, feed, gpu
from sparktf.runtime.context import DONE_LINE, EVENT_MARKER, TaskContext
from sparktf.runtime.events import EventClient

RESULT_SCHEMA = pa.schema([("rank", pa.int32()), ("result", pa.binary())])
LOG_TAIL_LINES = 40
PORT_CONFLICT_PREFIX = "sparktf-port-conflict: "
# TensorFlow's start-up notices on a CPU-only task: kept in the executor log, not sent to
# the driver, where they would bury the user's own lines.
_TF_NOISE = re.compile(r"oneDNN custom operations|cudart_stub|cuda_platform\.cc|cuInit|"
                       r"absl::InitializeLog|computation_placer|Could not find cuda drivers|"
                       r"TF-TRT Warning|cuda_(?:dnn|fft|blas)\.cc|rebuild TensorFlow with")


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """Everything a barrier task needs, built on the driver; holds no SparkSession."""

    payload: bytes  # cloudpickle of (main_fn, args)
    num_workers: int
    num_ps: int = 0
    use_gpu: str = "auto"
    model_dir: str | None = None
    columns: tuple[str, ...] = ()  # input columns to feed; empty: no data
    split_column: str | None = None  # boolean column: true rows go to the validation shard
    event_address: tuple[str, int] | None = None
    event_secret: str = ""
    forward_all_ranks: bool = False
    child_env: tuple[tuple[str, str], ...] = ()


def run_task(spec: TaskSpec, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function of the barrier stage."""
    from pyspark import BarrierTaskContext

    barrier = BarrierTaskContext.get()
    rank = barrier.partitionId()
    _reset_peak_rss()
    roles = cluster.assign_roles(spec.num_workers, spec.num_ps)
    role = roles[rank]
    with EventClient(spec.event_address, spec.event_secret, rank) as events, \
            tempfile.TemporaryDirectory(prefix=f"sparktf-rank{rank}-") as workdir:
        try:
            shard, held_out = (feed.spill(batches, os.path.join(workdir, "shard.arrow"),
                                          spec.columns, spec.split_column)
                               if spec.columns else (None, None))
            devices = gpu.visible_devices(_assigned_gpus(barrier), spec.use_gpu,
                                          os.environ.get("CUDA_VISIBLE_DEVICES"))
        except Exception as e:  # bad data or GPU setup: report it, then fail the stage
            _fail(events, rank, role, f"{type(e).__name__}: {e}", _format_exc(), "")
        host = barrier.getTaskInfos()[rank].address.rsplit(":", 1)[0]
        mine = {"address": f"{host}:{cluster.pick_port()}",
                "rows": shard.num_rows if shard else 0,
                "validation_rows": held_out.num_rows if held_out else 0}
        gathered = [json.loads(g) for g in barrier.allGather(json.dumps(mine))]
        spec_dict = cluster.build_cluster_spec(roles, [g["address"] for g in gathered])
        ctx = TaskContext(jobName=role.job_name, taskIndex=role.task_index, rank=rank,
                          clusterSpec=spec_dict, numWorkers=spec.num_workers,
                          numPs=spec.num_ps, modelDir=spec.model_dir,
                          numRows=mine["rows"], allNumRows=tuple(g["rows"] for g in gathered),
                          shard=shard, validationShard=held_out,
                          allValidationRows=tuple(g["validation_rows"] for g in gathered),
                          gpus=devices)
        env = _child_env(spec, ctx, role, devices)
        status, value, tail, child_kb = _run_child(spec, ctx, env, workdir, events, barrier)
        events.send({"kind": "stats", "role": str(role), "rows": ctx.numRows,
                     "feeder_peak_rss_mb": _peak_rss_kb() / 1024,
                     "task_peak_rss_mb": child_kb / 1024})
        if status != "ok":
            _fail(events, rank, role, value["message"], value.get("traceback", ""), tail)
        yield pa.RecordBatch.from_arrays([pa.array([rank], pa.int32()), pa.array([value],
                                          pa.binary())], schema=RESULT_SCHEMA)


def _assigned_gpus(barrier) -> list[str]:
    resource = barrier.resources().get("gpu")
    return list(resource.addresses) if resource is not None else []


def _child_env(spec: TaskSpec, ctx: TaskContext, role: cluster.Role, devices: str) -> dict:
    env = dict(os.environ)
    env.update(dict(spec.child_env))
    env["TF_CONFIG"] = cluster.build_tf_config(ctx.clusterSpec, role)
    env["CUDA_VISIBLE_DEVICES"] = devices
    env["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def _die_with_parent() -> None:
    """In the child, before exec: get SIGKILL when the parent task process dies."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _run_child(spec, ctx, env, workdir, events, barrier):
    """Runs main_fn in a child process; returns (status, result bytes | error info, log tail)."""
    payload_path = os.path.join(workdir, "payload.pkl")
    result_path = os.path.join(workdir, "result.pkl")
    with open(payload_path, "wb") as f:
        cloudpickle.dump((spec.payload, ctx), f)
    tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
    forward = spec.forward_all_ranks or ctx.rank == 0
    proc = subprocess.Popen([sys.executable, "-m", "sparktf.runtime.child", payload_path,
                             result_path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=env, cwd=workdir,
                            preexec_fn=_die_with_parent, text=True, errors="replace")
    try:
        for line in proc.stdout:
            line = line.rstrip("\n")
            if line == DONE_LINE:
                barrier.barrier()  # every child has finished: release them together
                proc.stdin.close()
            elif line.startswith(EVENT_MARKER):
                events.send(json.loads(line[len(EVENT_MARKER):]))
            else:
                tail.append(line)
                print(f"[sparktf rank {ctx.rank}] {line}", file=sys.stderr)
                if forward and not _TF_NOISE.search(line):
                    events.send({"kind": "log", "line": line})
        code = proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log_tail = "\n".join(tail)
    if not os.path.exists(result_path):
        return "error", {"message": f"the task's process exited with code {code} before "
                                    "reporting a result (killed, or out of memory?)"}, \
            log_tail, 0
    with open(result_path, "rb") as f:
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


def _format_exc() -> str:
    import traceback
    return traceback.format_exc()


def _fail(events: EventClient, rank: int, role, message: str, tb: str, tail: str):
    """Reports a failure to the driver (acknowledged), then fails the barrier stage."""
    if cluster.is_port_conflict(message):
        message = PORT_CONFLICT_PREFIX + message
    events.send({"kind": "error", "role": str(role), "message": message, "traceback": tb,
                 "log_tail": tail, "ack": True}, wait_ack=True)
    raise TaskFailedError(rank, str(role), message, tb, tail)
