"""The process that runs one task's ``main_fn``: its environment, its start (forked from the
Python worker's spare, or started with its own TensorFlow import), its payload, the relay
of its output to the driver, the watchdogs around it, and what it reported.

``spec`` below is the task's ``sparktf.runtime.process.task.TaskSpec``.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import select
import shutil
import sys
import tempfile
import threading

import cloudpickle

from sparktf._protocol import watchdog
from sparktf._protocol.wire import CHANNEL_ENV, DONE_LINE, EVENT_MARKER
from sparktf.runtime import tf_startup, worker_tuning
from sparktf.runtime.process import spare
from sparktf.runtime.process.context import TaskContext

LOG_TAIL_LINES = 40
# TensorFlow's gRPC channels wait about 1 s before retrying a peer whose server is not up
# yet (TF caps the backoff at 1 s), which a cluster's first connections nearly always
# meet: every task starts its server at about the same time. A short first backoff
# forms the cluster in ~0.15 s instead of ~1 s; the cap stays TF's own.
GRPC_OPTIONS = ("grpc.initial_reconnect_backoff_ms=50,grpc.min_reconnect_backoff_ms=50,"
                "grpc.max_reconnect_backoff_ms=1000")

# faulthandler's first line when the process crashes (enabled in child.py)
_CRASH_REPORT = "Fatal Python error: "


def interop_threads(chosen: str | None, num_workers: int, num_ps: int) -> int:
    """TensorFlow's inter-op pool size for a task: 2 unless chosen, at least
    ``num_workers + 1`` with parameter servers.

    TensorFlow's own parameter-server guide gives its workers that many; with one
    inter-op thread, parameter-server training stalled at its first step every time
    we tried.
    """
    threads = int(chosen) if chosen and chosen.strip().isdigit() and int(chosen) > 0 else 2
    return max(threads, num_workers + 1) if num_ps else threads


def child_env(spec, devices: str, cpus: int) -> dict[str, str]:
    """The environment of the task's process. A spare serves every task of its Python
    worker with the same environment but for ``spare.PER_TASK`` (devices, thread counts)."""
    env = dict(os.environ)
    env.update({"CUDA_VISIBLE_DEVICES": devices, "TF_FORCE_GPU_ALLOW_GROWTH": "true",
                "PYTHONUNBUFFERED": "1"})
    env.pop(worker_tuning.ENV, None)
    env.update(worker_tuning.env(getattr(spec, "worker_tuning", True)))
    for name, value in getattr(spec, "framework_env", ()):  # as the driver has them
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.setdefault("TF_GRPC_DEFAULT_OPTIONS", GRPC_OPTIONS)
    # TensorFlow sizes its thread pools to the machine; tasks sharing a host would
    # oversubscribe it. Use the CPUs Spark gave this task unless the user chose.
    for name in ("TF_NUM_INTRAOP_THREADS", "OMP_NUM_THREADS"):
        env.setdefault(name, str(max(1, cpus)))
    env["TF_NUM_INTEROP_THREADS"] = str(interop_threads(env.get("TF_NUM_INTEROP_THREADS"),
                                                        spec.num_workers, spec.num_ps))
    return env


def _marked_event(line: str) -> dict | None:
    """The event a line of the process's output carries behind ``EVENT_MARKER``; None for
    any other line. A marked line that holds no event (cut short, or the user's own
    output that happens to start so) is output like any other: it must not end the relay,
    whose end would leave the process unreleased."""
    if not line.startswith(EVENT_MARKER):
        return None
    try:
        event = json.loads(line[len(EVENT_MARKER):])
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


class TaskProcess:
    """The process that runs ``main_fn``: asked of the spare (or started) early, given its
    payload, released late."""

    def __init__(self, spec, rank: int, devices: str, cpus: int, workdir: str,
                 events):
        self.spec, self.rank, self.workdir, self.events = spec, rank, workdir, events
        self.result_path = os.path.join(workdir, "result.pkl")
        # the process's temp dir, removed after it: a short path of its own, since the
        # task's folder (in Spark's local dir) is too long a path for a Unix socket in it
        # (multiprocessing's); the process ends with os._exit, so temp files that exit
        # hooks would remove (autograph's modules) go with this folder
        self.temp = tempfile.mkdtemp(prefix=f"sparktf-task{rank}-")
        self.tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
        self.dog = self.stalled = None  # the task's own watchdog (``_own_watchdog``)
        self.abandoned = False  # the driver ended the job while our process ran
        self.crash: str | None = None  # what a crash report in its output said
        self.env = child_env(spec, devices, cpus)
        self.proc = None
        self.request = None
        self._telling = threading.Lock()  # the task's lines to the process, one at a time
        self._backlog: list[dict] | None = []  # lines told before the process started
        self._relaying: threading.Thread | None = None
        self._waiting: threading.Thread | None = None  # the release, once main_fn is done
        self._may_release = threading.Event()  # set by wait(), or when giving up
        self._release_with = None
        self._failed: list[BaseException] = []
        if spec.spare_idle_s > 0:
            self.request = spare.request(self.env, spec.spare_idle_s)
        else:
            self._spawn()

    def _spawn(self) -> None:
        self.events.phase("child started")
        self.proc = spare.spawn(self.env, self.workdir)

    def __enter__(self) -> "TaskProcess":
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is None and self.request is not None:
            self.request.abandon()  # never handed a payload: it exits once forked
        self._may_release.set()  # a release thread not yet released ends without it
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            if self._relaying is not None:
                self._relaying.join()  # its output has ended with it
            spare.stop_process(self.proc)
        shutil.rmtree(self.temp, ignore_errors=True)

    def run(self, ctx: TaskContext, release):
        """``start`` then ``wait``: (status, value, tail, peak KiB)."""
        self.start(ctx)
        return self.wait(release)

    def start(self, ctx: TaskContext) -> None:
        """Hands over the payload; relays the process's output from now on (a thread)."""
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
        with self._telling:  # the order first, then what was told before it
            backlog, self._backlog = self._backlog, None
            for message in [{"payload": payload_path, "result": self.result_path,
                             "cwd": self.workdir, "temp": self.temp}] + backlog:
                self._write(message)
        self._relaying = threading.Thread(target=self._relay_output, args=(ctx.isChief,),
                                          name=f"sparktf-relay-{self.rank}", daemon=True)
        self._relaying.start()

    def tell(self, message: dict) -> None:
        """One line to the process's stdin: its order, then its rows' arrival."""
        with self._telling:
            if self._backlog is not None:  # not started yet: sent after the order
                self._backlog.append(message)
            else:
                self._write(message)

    def _write(self, message: dict) -> None:
        try:
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass  # the process died early (its output and exit code tell why)

    def wait(self, release):
        """Waits for the process to exit; (status, value, tail, peak KiB).

        ``release()`` returns once every task's child has finished; then ours may exit.
        It runs only once this is called: the task's own exchanges with the other tasks
        are over by then."""
        self._release_with = release
        self._may_release.set()
        self._relaying.join()
        code = self.proc.wait()
        if self._waiting is not None:
            self._waiting.join()
        if self._failed:
            raise self._failed[0]
        return self._outcome(code)

    def _relay_output(self, forward: bool) -> None:
        with self._own_watchdog(), self._stop_when_abandoned():
            for line in self.proc.stdout:
                self._line(line, forward)

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

        The driver hangs up when its job has ended: after every task has finished, when
        a task reported a failure, or when the stage failed or was cancelled. In the
        last two cases our process would otherwise wait forever for peers that are gone
        (a collective with a dead worker), and a Python worker that Spark does not
        destroy would keep it. A blocking poll, woken at the end."""
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

    def _line(self, line: str, forward: bool) -> None:
        """Handles one line of the child's output."""
        line = line.rstrip("\n")
        if line == DONE_LINE and self._waiting is None:
            # Wait for the others in a thread and keep draining the child's output
            # meanwhile: a parameter server or worker serves (and may log) until the
            # chief is done, and a full pipe would block it mid-step.
            self._waiting = threading.Thread(target=self._release,
                                             name=f"sparktf-release-{self.rank}",
                                             daemon=True)
            self._waiting.start()
        else:
            # once waiting, the channel is busy with the exit barrier: log locally only
            self._relay(line, forward, to_driver=self._waiting is None)

    def _release(self) -> None:
        self._may_release.wait()
        try:
            if self._release_with is not None:
                self._release_with()  # every child has finished: release them together
        except BaseException as e:  # re-raised by wait() once the child has exited
            self._failed.append(e)
        finally:
            with self._telling:
                spare.close_pipe(self.proc.stdin)

    def _relay(self, line: str, forward: bool, to_driver: bool) -> None:
        event = _marked_event(line)
        if event is not None:
            if event.get("rank") is None:
                event["rank"] = self.rank
            if self.dog is not None and event.get("kind") == "heartbeat":
                self.dog.beat(self.rank, event)
            if to_driver:
                self.events.send(event)
        else:
            if tf_startup.hidden(line):  # TensorFlow's start-up notices (tf_startup)
                return
            print(f"[sparktf rank {self.rank}] {line}", file=sys.stderr)
            if line.startswith(_CRASH_REPORT) and self.crash is None:
                self.crash = line.removeprefix(_CRASH_REPORT)
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
            if self.crash is not None:
                return "error", {"message": (
                    f"the task's process crashed before reporting a result ({self.crash}); "
                    "the Python stacks of its threads at the crash end its log")}, log_tail, 0
            how = f" with code {code}" if code is not None and code >= 0 else ""
            return "error", {"message": f"the task's process exited{how} before reporting a "
                                        "result (killed, or out of memory?)"}, log_tail, 0
        with open(self.result_path, "rb") as f:
            status, value, peak_kb = cloudpickle.load(f)
        if status == "ok":
            return status, cloudpickle.dumps(value), log_tail, peak_kb
        return status, value, log_tail, peak_kb
