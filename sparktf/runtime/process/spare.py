"""Spare processes: TensorFlow imported once per Python worker, a fresh process per task.

Every task runs ``main_fn`` in a process of its own (a TensorFlow gRPC server cannot
be stopped inside a process), and importing TensorFlow there costs seconds. So a
Python worker keeps one *spare*: a process that has imported TensorFlow and Keras
and does nothing else but fork, on request, the task process of the next task.
The fork shares the imported modules and starts in milliseconds; the spare itself
never runs user code, never starts a TensorFlow server, and is never shared between
two tasks' processes.

Protocol (a ``SOCK_SEQPACKET`` socket pair; the spare is ``python -m
sparktf.runtime.process.child --spare FD IDLE_S``):

- request: the task's own values of ``PER_TASK`` (JSON) with the task's pidfd and the
  child's ends of two pipes (its stdin and its stdout/stderr), passed with
  ``SCM_RIGHTS``;
- answer: the new process's pid, as text. The forked process then follows the
  same protocol as a freshly started one (``sparktf.runtime.process.child``) and kills
  itself when the task's process ends.

A spare serves every task whose environment equals its own but for ``PER_TASK``: the
GPUs a task may see and its TensorFlow thread counts, which TensorFlow reads only when
its runtime starts (the first op; importing TensorFlow and Keras starts nothing), so
each forked process sets them before running anything. Tasks that alternate GPUs or
roles (a parameter server has more inter-op threads) share one spare. A spare whose
runtime has started (it never should) declines requests that change them.

A spare's life is bounded: it exits after ``IDLE_S`` seconds without a running task
process or a request, when its Python worker closes the socket or dies
(``PR_SET_PDEATHSIG``), and so with its executor and the SparkSession. A task that
finds its spare gone, even while asking it, starts its own process instead.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading

SPARE_FLAG = "--spare"
SPARE_NAME = b"sparktf-spare"  # /proc/PID/comm of an idle spare
TASK_NAME = b"sparktf-task"  # /proc/PID/comm of a process it forked
ANSWER_TIMEOUT_S = 600.0  # a spare answers once it has imported TensorFlow
# Read by TensorFlow when its runtime starts, not at import: set in each forked process.
PER_TASK = ("CUDA_VISIBLE_DEVICES", "TF_NUM_INTEROP_THREADS", "TF_NUM_INTRAOP_THREADS")
_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15

_libc = ctypes.CDLL("libc.so.6", use_errno=True)
_lock = threading.Lock()
_spare: "_Spare | None" = None  # this Python worker's spare


def die_with_parent() -> None:
    """In a new process before exec: get SIGKILL when the process that started it dies."""
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def set_name(name: bytes) -> None:
    """Sets this process's name (``/proc/PID/comm``, as ``ps`` and the leak tests see it)."""
    _libc.prctl(_PR_SET_NAME, ctypes.c_char_p(name[:15]), 0, 0, 0)


def spawn(env: dict[str, str], cwd: str) -> subprocess.Popen:
    """A fresh task process (no spare): imports TensorFlow itself."""
    return subprocess.Popen([sys.executable, "-m", "sparktf.runtime.process.child"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=env, cwd=cwd,
                            preexec_fn=die_with_parent, text=True, errors="replace")


def request(env: dict[str, str], idle_s: float) -> "Request":
    """Asks this Python worker's spare for a task process with environment ``env``,
    starting a spare first when there is none for ``env``. The process is forked as soon
    as the spare can; ``Request.process()`` returns it."""
    global _spare
    with _lock:
        shared = {k: v for k, v in env.items() if k not in PER_TASK}
        key = (tuple(sorted(shared.items())), idle_s)  # the idle time chosen is part of it
        if _spare is not None and (_spare.key != key or not _spare.alive()):
            _spare.stop()  # one spare per Python worker: the newest settings win
            _spare = None
        if _spare is None:
            _spare = _Spare(env, key, idle_s)
        return Request(_spare, {k: env.get(k) for k in PER_TASK})


def stop() -> None:
    """Stops this Python worker's spare, if any."""
    global _spare
    with _lock:
        if _spare is not None:
            _spare.stop()
            _spare = None


def stop_process(proc) -> None:
    """Kills a task process (``Popen`` or ``Forked``) if it still runs and closes its pipes.
    Never raises: it runs in teardown, where the error that brought it there must reach
    the driver, not this cleanup's (a dead process's stdin fails its flush)."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for stream in (proc.stdin, proc.stdout):
        close_pipe(stream)
    if isinstance(proc, Forked):
        proc.close()


def close_pipe(stream) -> None:
    """Closes a pipe to or from a task process; what it still buffers for a process that
    has died is dropped (its close would raise ``BrokenPipeError`` from the flush)."""
    if stream is not None and not stream.closed:
        with contextlib.suppress(OSError):  # the flush failed; the descriptor is closed
            stream.close()


class _Spare:
    """The Python worker's end of one spare process."""

    def __init__(self, env: dict[str, str], key: tuple, idle_s: float):
        self.key = key
        self.owed = 0  # answers due to requests abandoned before their answer came
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sparktf.runtime.process.child", SPARE_FLAG,
                 str(theirs.fileno()), f"{idle_s:g}"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env,
                pass_fds=(theirs.fileno(),), preexec_fn=die_with_parent)
        finally:
            theirs.close()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def answer(self) -> bytes:
        """The spare's next answer that belongs to a request still waiting for it (answers
        come in the order of the requests; the abandoned ones' are skipped)."""
        self.sock.settimeout(ANSWER_TIMEOUT_S)
        while True:
            answer = self.sock.recv(64)
            if not self.owed or not answer:
                return answer
            self.owed -= 1

    def stop(self) -> None:
        self.sock.close()  # an idle spare exits on its own when the socket closes
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


class Request:
    """One task process asked of a spare; the spare forks it while the task receives data."""

    def __init__(self, spare: _Spare, per_task: dict[str, str | None]):
        self._spare = spare
        self._pipes: tuple[int, int] | None = None
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        task = os.pidfd_open(os.getpid())
        try:
            socket.send_fds(spare.sock, [json.dumps(per_task).encode()],
                            [stdin_r, stdout_w, task])
            self._pipes = (stdin_w, stdout_r)
        except OSError:  # the spare has gone: Request.process() says so
            os.close(stdin_w)
            os.close(stdout_r)
        finally:
            for fd in (stdin_r, stdout_w, task):
                os.close(fd)

    def process(self) -> "Forked | None":
        """The forked task process, or None when the spare left before forking it (the
        task then starts its own)."""
        if self._pipes is None:
            return None
        stdin_w, stdout_r = self._pipes
        try:
            answer = self._spare.answer()
        except OSError:
            answer = b""
        pid = int(answer) if answer.strip().isdigit() else 0
        try:
            pidfd = os.pidfd_open(pid) if pid else None
        except ProcessLookupError:
            pidfd = None  # forked and already gone: its output pipe still tells why
        if pid == 0:
            os.close(stdin_w)
            os.close(stdout_r)
            self._spare.stop()  # the next request starts a new spare
            return None
        return Forked(pid, pidfd, stdin_w, stdout_r)

    def abandon(self) -> None:
        """The task ended before it needed its process: closes this end of the process's
        pipes (once forked, it reads the end of its input and exits) without waiting for
        the spare, which may still be importing TensorFlow; its answer is skipped."""
        if self._pipes is None:
            return
        for fd in self._pipes:
            os.close(fd)
        self._pipes = None
        self._spare.owed += 1


class Forked:
    """A task process forked by a spare, used like ``subprocess.Popen`` (text pipes).

    It is the spare's child, not ours: its exit is seen through a pidfd, and its exit
    code is not known (``returncode`` is -1 once it has exited).
    """

    def __init__(self, pid: int, pidfd: int | None, stdin_fd: int, stdout_fd: int):
        self.pid = pid
        self._pidfd = pidfd
        self.returncode: int | None = None if pidfd is not None else -1
        self.stdin = open(stdin_fd, "w", buffering=1)
        self.stdout = open(stdout_fd, "r", errors="replace")

    def poll(self) -> int | None:
        return self.wait(timeout=0)

    def wait(self, timeout: float | None = None) -> int | None:
        if self.returncode is None:
            ready, _, _ = select.select([self._pidfd], [], [], timeout)
            if ready:
                self.returncode = -1
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            try:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


# ----------------------------------------------------------------- in the spare process


def serve(fd: int, idle_s: float, become_task) -> None:
    """The spare's loop: fork one task process per request until idle or the socket closes.

    ``become_task()`` runs in each forked process once its pipes are in place; it never
    returns.
    """
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the forked processes
    sock = socket.socket(fileno=fd)
    running: list[int] = []  # pidfds of forked processes still running
    while True:
        ready, _, _ = select.select([sock, *running], [], [], None if running else idle_s)
        if not ready:
            os._exit(0)  # idle too long
        for done in [r for r in ready if r is not sock]:
            running.remove(done)
            os.close(done)
        if sock not in ready:
            continue
        try:
            message, fds, _, _ = socket.recv_fds(sock, 4096, 3)
        except OSError:
            fds = []
        if len(fds) != 3:
            os._exit(0)  # the Python worker closed the socket, or died
        per_task = json.loads(message)
        if not _can_set(per_task):
            for f in fds:
                os.close(f)
            _answer(sock, 0)  # the task starts a process of its own
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        set_name(TASK_NAME)  # the process is born with its name (ps, the leak tests)
        pid = os.fork()
        if pid != 0:
            set_name(SPARE_NAME)
        if pid == 0:
            sock.close()
            for pidfd in running:
                os.close(pidfd)
            _enter_task(*fds)
            for name, value in per_task.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            become_task()
            os._exit(1)  # not reached
        for f in fds:
            os.close(f)
        try:
            running.append(os.pidfd_open(pid))
        except ProcessLookupError:
            pass
        _answer(sock, pid)


def _answer(sock: socket.socket, pid: int) -> None:
    try:
        sock.send(str(pid).encode())
    except OSError:
        os._exit(0)


def _can_set(per_task: dict[str, str | None]) -> bool:
    """Whether a forked process can still set ``per_task``: yes unless they change and
    this spare's TensorFlow runtime has already started (it has read them then)."""
    if all(os.environ.get(k) == v for k, v in per_task.items()):
        return True
    context = sys.modules.get("tensorflow.python.eager.context")
    return context is None or not getattr(context.context(), "_initialized", True)


def _enter_task(stdin_fd: int, stdout_fd: int, task_pidfd: int) -> None:
    """In a forked process: take the task's pipes as stdin/stdout/stderr, and die with it."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # user code may wait for its children
    os.dup2(stdin_fd, 0)
    os.dup2(stdout_fd, 1)
    os.dup2(stdout_fd, 2)
    os.close(stdin_fd)
    os.close(stdout_fd)

    def die_with_task():
        select.select([task_pidfd], [], [])
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=die_with_task, name="sparktf-die-with-task", daemon=True).start()
