"""One driver at a time owns a run: ``lock.json`` in the run's folder names the fit that
trains it (its machine, its driver process and that process's start, a token) and is
renewed while the fit runs. Another fit of the same ``runId`` is refused while the owner
lives: on the owner's machine, while its process runs; from another machine, while the
lock is renewed. A driver that died leaves a lock that goes stale: at once on its own
machine, ``STALE_S`` after its last renewal elsewhere. On a local (or mounted) folder the
look and the take are one step among drivers (``flock``); on an object store the last
writer wins and reads its lock back, which narrows the race but cannot close it."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import threading
import time
import uuid

from sparktf.errors import InvalidInputError
from sparktf.runtime import storage

LOCK_FILE = "lock.json"
RENEW_S = 20.0
STALE_S = 90.0


@contextlib.contextmanager
def owned(run_dir: str, what: str = "run"):
    """While the block runs, this process owns the run (or ``what``: ``"search"``) in
    ``run_dir``; refuses, naming the owner, when another live fit does."""
    path = storage.join(run_dir, LOCK_FILE)
    me = {"token": uuid.uuid4().hex, "host": socket.gethostname(), "pid": os.getpid(),
          "started": process_start(os.getpid()), "renewed": time.time()}
    _take(path, run_dir, me, what)
    stop = threading.Event()
    renewer = threading.Thread(target=_renew, args=(path, me, stop), daemon=True,
                               name="sparktf-run-lock")
    renewer.start()
    try:
        yield
    finally:
        stop.set()
        renewer.join()
        held = _held(path)
        if held is not None and held.get("token") == me["token"]:
            storage.remove_file(path)


def _take(path: str, run_dir: str, me: dict, what: str) -> None:
    data = json.dumps(me).encode()
    if not storage.is_local(path):  # an object store: the last writer wins, read it back
        held = _held(path)
        if held is not None and alive(held):
            _refuse(run_dir, held, what)
        storage.replace_bytes(path, data)
        if (_held(path) or {}).get("token") != me["token"]:
            _refuse(run_dir, _held(path) or {}, what)
        return
    local = storage.local_path(path)
    os.makedirs(os.path.dirname(local) or ".", exist_ok=True)
    # the look and the take in one step among drivers: a stale lock seen by two of them is
    # taken by one (flock on a file beside it, released when this process ends)
    with open(f"{local}.guard", "a") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        try:
            held = _held(path)
            if held is not None and alive(held):
                _refuse(run_dir, held, what)
            storage.replace_bytes(path, data)
        finally:
            fcntl.flock(guard, fcntl.LOCK_UN)


def _refuse(run_dir: str, held: dict, what: str) -> None:
    since = time.strftime("%H:%M:%S", time.localtime(held.get("renewed", 0)))
    doing, many = ("trained by another fit", "fits") if what == "run" else \
        ("run by another driver", "searches")
    raise InvalidInputError(
        f"The {what} in {run_dir} is being {doing} (driver process "
        f"{held.get('pid')} on {held.get('host')}, alive at {since}): two {many} of one "
        "runId would train into the same folder. Wait for the other to end, or use another "
        f"runId. A driver that died gives up the {what} at once on its own machine, and "
        f"{STALE_S:g} s after its last sign of life from another.")


def alive(held: dict) -> bool:
    """Whether the fit that wrote ``held`` still runs."""
    if held.get("host") == socket.gethostname():
        started = process_start(held.get("pid", -1))
        return started is not None and held.get("started") in (None, started)
    return time.time() - float(held.get("renewed", 0)) < STALE_S


def process_start(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot), or None when there is none:
    a pid reused by another process is not the owner."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        try:
            os.kill(pid, 0)
        except (OSError, ValueError, OverflowError):
            return None
        return 0


def _held(path: str) -> dict | None:
    try:
        return json.loads(storage.read_bytes(path))
    except (OSError, ValueError):
        return None


def _renew(path: str, me: dict, stop: threading.Event) -> None:
    while not stop.wait(RENEW_S):
        me["renewed"] = time.time()
        with contextlib.suppress(OSError):
            storage.replace_bytes(path, json.dumps(me).encode())
