"""Driver-side checks that a barrier stage can start at all, made before any job runs.

Spark itself would retry an over-subscribed barrier stage for minutes
(``spark.scheduler.barrier.maxConcurrentTasksCheck.*``) and then fail; we refuse
in seconds with a message that says what to change.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading
import time
from typing import Iterator

from sparktf.errors import ClusterCapacityError, InvalidInputError

logger = logging.getLogger(__name__)

EXECUTOR_START_TIMEOUT_S = 120.0


def expected_slots(master: str, conf: dict[str, str]) -> int | None:
    """The concurrent task slots a master will offer once all its executors are up.

    ``None`` when the master does not say (standalone, YARN, k8s without fixed instances).
    """
    m = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", master)
    if m:
        n = m.group(1)
        if n is None:
            cores = 1
        elif n == "*":
            cores = os.cpu_count() or 1
        else:
            cores = int(n)
        return cores // int(conf.get("spark.task.cpus", "1"))
    m = re.fullmatch(r"local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*\d+\s*\]", master)
    if m:
        return int(m.group(1)) * executor_slots(int(m.group(2)), conf)
    instances = conf.get("spark.executor.instances")
    cores = conf.get("spark.executor.cores")
    if instances and cores:
        return int(instances) * executor_slots(int(cores), conf)
    return None


def executor_slots(cores: int, conf: dict[str, str]) -> int:
    """Tasks one executor with ``cores`` cores runs at once: its CPUs and each custom
    resource (GPUs) limit them, as Spark counts (a fractional task amount shares one
    address between ``floor(1 / amount)`` tasks)."""
    slots = cores // int(conf.get("spark.task.cpus", "1"))
    for key, value in conf.items():
        m = re.fullmatch(r"spark\.task\.resource\.(.+)\.amount", key)
        if not m or float(value) <= 0:
            continue
        amount = float(value)
        have = int(float(conf.get(f"spark.executor.resource.{m.group(1)}.amount", "0")))
        slots = min(slots, have * int(1 // amount) if amount < 1 else int(have // amount))
    return slots


def unplaceable(master: str, conf: dict[str, str]) -> str | None:
    """Why no executor of a ``local-cluster`` master can start, if so: its executors ask
    for a resource (GPUs) that its workers do not offer. Spark then waits for ever."""
    if not master.startswith("local-cluster"):
        return None
    for key, value in sorted(conf.items()):
        m = re.fullmatch(r"spark\.executor\.resource\.(.+)\.amount", key)
        if not m or float(value) <= 0:
            continue
        offered = float(conf.get(f"spark.worker.resource.{m.group(1)}.amount", "0"))
        if offered < float(value):
            return (f"each executor asks for {key}={value}, but the workers of "
                    f"{master} offer spark.worker.resource.{m.group(1)}.amount="
                    f"{conf.get(f'spark.worker.resource.{m.group(1)}.amount', 'unset')}, so "
                    "Spark cannot start any executor. Set spark.worker.resource."
                    f"{m.group(1)}.amount and spark.worker.resource.{m.group(1)}."
                    "discoveryScript when creating the session")
    return None


def check_capacity(session, num_tasks: int, what: str, scale=None) -> int:
    """The concurrent task slots the stage has; ``ClusterCapacityError`` unless ``num_tasks``
    barrier tasks can run at once.

    When the master will offer enough slots but some executors have not
    registered yet (a session just started), waits for them, bounded. ``scale(conf,
    slots)`` turns default-profile slots into the stage's (a ResourceProfile asking for
    more CPUs per task fits fewer tasks). On Spark Connect, which cannot tell the
    registered slots, the configured ones decide (and Spark's own barrier check after).
    """
    scale_given = scale is not None
    scale = scale or (lambda _conf, slots: slots)
    conf = session.conf()
    master = session.master
    if conf.get("spark.dynamicAllocation.enabled", "false").lower() == "true":
        raise ClusterCapacityError(
            f"{what} runs a barrier stage, which Spark cannot run with dynamic allocation. "
            "Set spark.dynamicAllocation.enabled=false (and a fixed "
            "spark.executor.instances) for this application.")
    now = session.slots_now()
    have = scale(conf, now) if now is not None else 0
    if have >= num_tasks:
        return have
    reason = unplaceable(master, conf)
    if reason:
        raise ClusterCapacityError(f"{what} cannot start: {reason}.")
    expected = expected_slots(master, conf)
    expected = scale(conf, expected) if expected is not None else None
    if now is None:  # Spark Connect: only the configuration can tell
        if expected is None or expected >= num_tasks:
            return expected if expected is not None else num_tasks
    settings = (f"master={master}, spark.task.cpus={conf.get('spark.task.cpus', '1')}" +
                "".join(f", {k}={v}" for k, v in sorted(conf.items())
                        if re.fullmatch(r"spark\.(task|executor)\.resource\..+\.amount", k)) +
                (", with the CPUs per task asked for" if scale_given else ""))
    if expected is not None and expected >= num_tasks and now is not None:
        have = _await_slots(session, num_tasks, EXECUTOR_START_TIMEOUT_S, scale)
        if have >= num_tasks:
            return have
        raise ClusterCapacityError(
            f"{what} needs {num_tasks} concurrent task slots for its barrier stage; the "
            f"cluster should offer {expected} ({settings}), but only {have} were registered "
            f"after waiting {EXECUTOR_START_TIMEOUT_S:.0f} s for executors. Executors that "
            "never start usually ask for more than a worker has (cores, memory, GPUs): see "
            "the master's log.")
    offered = max(have, expected or 0)
    raise ClusterCapacityError(
        f"{what} needs {num_tasks} concurrent task slots for its barrier stage, but the "
        f"cluster offers {offered} ({settings}). Use at most {offered} tasks or add "
        "executors, cores or GPUs.")


RELAUNCH_WAIT_CONF = "spark.sparktf.relaunchWait"
DEFAULT_RELAUNCH_WAIT_S = 60.0


# Spark's time units (JavaUtils.timeStringAs), in seconds
_TIME_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0,
               "d": 86400.0}
_TIME = re.compile(r"(-?[0-9]+(?:\.[0-9]*)?)\s*([a-z]*)")


def seconds_setting(name: str, chosen: str | None, default: float, note: str = "") -> float:
    """A Spark setting of time in Spark's syntax (``"5"`` seconds, ``"2.5s"``, ``"500ms"``,
    ``"1min"``, ``"1h"``): ``default`` when unset; refused unless a finite time >= 0
    (``note`` is added to the refusal)."""
    if chosen is None:
        return default
    match = _TIME.fullmatch(str(chosen).strip().lower())
    unit = _TIME_UNITS.get(match.group(2) or "s") if match else None
    value = float(match.group(1)) * unit if unit is not None else -1.0
    if not 0 <= value < float("inf"):
        raise InvalidInputError(
            f"{name} must be a time >= 0, in seconds or with one of Spark's units "
            f"({', '.join(_TIME_UNITS)}: '60s', '1min'){note}. Received: {chosen!r}")
    return value


def relaunch_wait_s(session) -> float:
    """How long a relaunch waits for lost executors to be replaced: ``spark.sparktf.
    relaunchWait`` seconds (default 60)."""
    return seconds_setting(RELAUNCH_WAIT_CONF, session.setting(RELAUNCH_WAIT_CONF),
                           DEFAULT_RELAUNCH_WAIT_S)


def relaunch_workers(session, wanted: int, fewest: int, others: int, scale=None,
                     wait_s: float = DEFAULT_RELAUNCH_WAIT_S) -> tuple[int, int | None]:
    """(workers, slots): how many workers a relaunch takes, from the task slots the
    registered executors offer (``scale`` as in ``check_capacity``).

    A lost executor is usually replaced within seconds (by the standalone master, YARN,
    Kubernetes): while the slots cannot hold ``wanted`` workers beside the stage's
    ``others`` tasks (parameter servers, chief, evaluator), this waits up to ``wait_s``
    for them. Then it takes as many as they hold, never fewer than ``fewest`` (the caller
    says what is missing). On Spark Connect, which does not tell the slots, ``wanted``.
    """
    now = session.slots_now()
    if now is None:
        return wanted, None
    scale = scale or (lambda _conf, slots: slots)
    slots = scale(session.conf(), now)
    if slots - others < wanted and wait_s > 0:
        slots = _await_slots(session, wanted + others, wait_s, scale)
    return max(fewest, min(wanted, slots - others)), slots


def _await_slots(session, num_tasks: int, timeout_s: float, scale) -> int:
    # PySpark has no blocking "executor registered" call, so this waits in short,
    # bounded steps; it only runs while executors come up (a session just started, a
    # lost executor replaced before a relaunch).
    conf = session.conf()
    logger.info("sparktf: waiting up to %.0f s for executors to register (%d of %d slots "
                "so far)", timeout_s, session.slots_now(), num_tasks)
    deadline = time.monotonic() + timeout_s
    tick = threading.Event()
    have = scale(conf, session.slots_now())
    while have < num_tasks and time.monotonic() < deadline:
        tick.wait(0.25)
        have = scale(conf, session.slots_now())
    return have


@contextlib.contextmanager
def executor_python(session) -> Iterator[None]:
    """Python functions that sparktf creates inside the block (its barrier stage, its
    scoring UDFs) run on the executors with the driver's interpreter, where that is safe.

    When neither PYSPARK_PYTHON nor spark.pyspark.python is set, Spark starts
    ``python3`` on the executors, which usually lacks TensorFlow. On local and
    local-cluster masters the executors share this machine, so the driver's own
    interpreter (which has sparktf) is the right one. PySpark reads the interpreter
    when it creates a Python function, so sparktf's functions keep it and the
    application's other UDFs keep Spark's default: nothing global changes. Elsewhere
    the user's setting stands, and a worker without sparktf gets
    ``ExecutorEnvironmentError``. A Spark Connect client cannot choose: the server's
    configuration decides.
    """
    if session.connect:
        yield
        return
    # decided under the lock: a fit in another thread (CrossValidator's parallelism) that
    # holds it has set the driver's interpreter, and puts Spark's default back when done
    with _PYTHON_EXEC_LOCK:
        if not _driver_python_needed(session):
            yield
            return
        sc = session.sc
        saved, sc.pythonExec = sc.pythonExec, sys.executable
        try:
            yield
        finally:
            sc.pythonExec = saved


_PYTHON_EXEC_LOCK = threading.RLock()


def _driver_python_needed(session) -> bool:
    """Whether Spark would start the wrong interpreter and sparktf may choose the driver's:
    a classic session on a local master, no interpreter set by the user, and Spark's
    default not already the driver's."""
    if session.connect:
        return False
    user_set = (os.environ.get("PYSPARK_PYTHON") or session.get("spark.pyspark.python"))
    return (not user_set and session.master.startswith("local")
            and session.sc.pythonExec != sys.executable)


def app_executor_python(session) -> None:
    """``executor_python`` for the rest of the application: what ``TFModel.udf()`` needs,
    because ``spark.udf.register`` makes its own copy of the function later, with the
    application's interpreter. Logged, since it changes every later Python UDF too."""
    with _PYTHON_EXEC_LOCK:  # as executor_python decides: under the lock
        if not _driver_python_needed(session):
            return
        sc = session.sc
        logger.info("sparktf: PYSPARK_PYTHON is not set; for TFModel.udf() the Python "
                    "workers of this %s app will use %s from now on", sc.master,
                    sys.executable)
        sc.pythonExec = sys.executable


class SlotGate:
    """Admits this driver's sparktf barrier stages while their tasks fit in the slots.

    Several stages at once (``CrossValidator(parallelism=2)``) would otherwise
    compete for slots; here the ones that do not fit wait their turn, and say so.
    """

    _cond = threading.Condition()
    _in_use = 0

    @classmethod
    @contextlib.contextmanager
    def hold(cls, tasks: int, slots: int, what: str) -> Iterator[None]:
        with cls._cond:
            if cls._in_use + tasks > slots:
                logger.info("sparktf: %s waits for task slots: %d of %d are held by other "
                            "sparktf stages of this application; concurrent fits run as slots "
                            "free up", what, cls._in_use, slots)
            cls._cond.wait_for(lambda: cls._in_use == 0 or cls._in_use + tasks <= slots)
            cls._in_use += tasks
        try:
            yield
        finally:
            with cls._cond:
                cls._in_use -= tasks
                cls._cond.notify_all()


SECURE_SETTINGS = ("spark.authenticate", "spark.network.crypto.enabled", "spark.ssl.enabled")
ALLOW_PLAIN_TF = "spark.sparktf.allowUnauthenticatedTensorFlow"


def check_security(conf: dict[str, str], what: str) -> None:
    """Refuses to open TensorFlow's unauthenticated gRPC ports in a secured Spark app.

    TensorFlow's cluster servers have no authentication or encryption of their own;
    an app that turned on Spark's would silently get a weaker channel beside it.
    """
    secured = [k for k in SECURE_SETTINGS if conf.get(k, "false").lower() == "true"]
    if secured and conf.get(ALLOW_PLAIN_TF, "false").lower() != "true":
        raise ClusterCapacityError(
            f"{what} would start TensorFlow gRPC servers, which are neither authenticated nor "
            f"encrypted, but this application secures Spark's own traffic ({', '.join(secured)}"
            f"=true). Run on a trusted network and set {ALLOW_PLAIN_TF}=true to accept that, "
            "or train outside this application.")


# The environment variables that pick the framework a task's TensorFlow program gets: set
# on the driver (as TensorFlow's guide sets TF_USE_LEGACY_KERAS), they reach every task.
FRAMEWORK_ENV = ("TF_USE_LEGACY_KERAS", "KERAS_BACKEND")


def framework_env(environ) -> tuple:
    """(name, value) of the driver's ``FRAMEWORK_ENV`` settings for every task, value None
    for one the driver has not set (the task unsets it: an executor may have inherited it
    from the driver's environment when the session started); refuses a ``KERAS_BACKEND``
    that is not TensorFlow, before any job. Keras reads the value as it is: only
    ``tensorflow`` (or empty, Keras's default) passes."""
    backend = environ.get("KERAS_BACKEND")
    if backend not in (None, "", "tensorflow"):
        raise InvalidInputError(
            f"KERAS_BACKEND={backend!r} is set in the driver's environment: sparktf runs "
            "TensorFlow programs and models (its strategies, SavedModels and feed are "
            "TensorFlow's), and this setting would reach every task. Unset it, or set it "
            "to 'tensorflow'.")
    return tuple((name, environ.get(name)) for name in FRAMEWORK_ENV)
