"""What a failed training attempt means: the error the user sees (``translate``), and
whether to relaunch it.

A barrier stage that fails is not retried by Spark, so ``TFEstimator.fit``
asks a ``FailurePolicy`` after each failed attempt. Failures of the
infrastructure (a killed process, a lost executor, a peer that vanished from a
collective, a stalled task) are worth a relaunch from the last checkpoint; an
exception raised by the user's own code or bad input would only fail again.
"""

from __future__ import annotations

import dataclasses
import logging
import re

from sparktf.errors import (
    ClusterCapacityError,
    ExecutorEnvironmentError,
    ExecutorLostError,
    InvalidInputError,
    JobTimeoutError,
    SparkTFError,
    TaskFailedError,
    TaskStalledError,
)

logger = logging.getLogger("sparktf")

# Evidence that the platform failed, in a task's error message: our own report of a
# process that died without a result, our own port conflict while forming the cluster,
# the errors TensorFlow gives a worker whose peer went away mid-collective, and the
# driver's report of a task whose connection ended mid-exchange.
_DIED = re.compile(r"before reporting a result")
_PEER_LOST = re.compile(
    r"^(sparktf-port-conflict: )|^TaskStalledError: |^(UnavailableError|AbortedError|"
    r"CancelledError|DeadlineExceededError)\b|Socket closed|Connection reset|failed to "
    r"connect to all addresses|lost the connection to the driver's event channel")
# TensorFlow's own error classes: a Python exception raised in tf.py_function or a
# dataset generator arrives as one of them (UnknownError), so they say nothing alone
_OP_ERROR = re.compile(
    r"^(sparktf-port-conflict: )?(Cancelled|Unknown|InvalidArgument|DeadlineExceeded|"
    r"NotFound|AlreadyExists|PermissionDenied|ResourceExhausted|FailedPrecondition|Aborted|"
    r"OutOfRange|Unimplemented|Internal|Unavailable|DataLoss|Unauthenticated)Error\b")
# What Spark says when an executor (or its machine, or a task's Python worker) is lost
_EXECUTOR_LOST = re.compile(
    r"ExecutorLostFailure|executor lost|lost executor|worker lost|Remote RPC client "
    r"disassociated|Command exited with code|Python worker exited unexpectedly|"
    r"Executor heartbeat timed out|Container killed", re.IGNORECASE)

# What Spark says of a job that someone cancelled ("Job 4 cancelled part of cancelled job
# group g", "... as part of cancellation of all jobs", "... because killed via the Web UI")
_CANCELLED = re.compile(r"[^\n]*\bJob \d+ cancelled\b[^\n]*")


def is_infrastructure(message: str) -> bool:
    """Whether a task's error message is evidence of the platform failing (a killed
    process, an unreachable peer), not of the user's code raising."""
    message = message or ""
    return bool(_DIED.search(message) or _PEER_LOST.search(message))


def is_executor_lost(spark_message: str) -> bool:
    """Whether Spark's report of a failed stage says an executor was lost."""
    return bool(_EXECUTOR_LOST.search(spark_message or ""))


def primary_failure(errors: dict[int, dict]) -> int:
    """The rank whose failure explains the others.

    A rank whose process died explains everything else (its peers' collectives fail in
    many ways). Otherwise a user exception does: when one worker raises, its peers
    fail with collective errors that only say a peer went away; a Python exception is
    preferred to a TensorFlow error that may only carry one; then the lowest rank.
    """
    def order(rank):
        message = errors[rank].get("message", "")
        if _DIED.search(message):
            return (0, 0, rank)
        return (1 + is_infrastructure(message), bool(_OP_ERROR.search(message)), rank)
    return min(errors, key=order)


@dataclasses.dataclass(frozen=True)
class Decision:
    """What to do after a failed attempt."""

    retry: bool
    reason: str


@dataclasses.dataclass(frozen=True)
class FailurePolicy:
    """Relaunch infrastructure failures up to ``max_retries`` times; give up on the rest."""

    max_retries: int

    def decide(self, failure: BaseException, retries_done: int) -> Decision:
        if isinstance(failure, (InvalidInputError, ClusterCapacityError,
                                ExecutorEnvironmentError, JobTimeoutError)):
            return Decision(False, f"{type(failure).__name__} is not transient")
        if isinstance(failure, TaskStalledError):
            transient = True
        elif isinstance(failure, TaskFailedError):
            transient = is_infrastructure(failure.message)
        else:
            transient = isinstance(failure, ExecutorLostError)
        if not transient:
            return Decision(False, "nothing shows the platform failed (no process killed, no "
                                   "executor or peer lost): a relaunch would fail the same way")
        if retries_done >= self.max_retries:
            return Decision(False, f"maxRetries={self.max_retries} relaunches used")
        return Decision(True, f"relaunch {retries_done + 1} of {self.max_retries}")


def translate(exc: Exception | None, errors: dict[int, dict], what: str) -> SparkTFError:
    """The most useful sparktf error for a failed barrier stage: from the tasks' reports
    (``errors``), else from Spark's exception ``exc`` (None when the stage finished)."""
    if exc is not None and errors and is_executor_lost(str(exc)) and all(
            info.get("lost_channel") or is_infrastructure(info.get("message", ""))
            for info in errors.values()):
        # the driver saw only connections end, or peers lose the worker that was on the
        # lost executor: Spark says why (the executor died)
        errors = {}
    computing = input_failure(exc, what)
    if computing and all(info.get("invalid_input") or info.get("reading") or
                         info.get("lost_channel") for info in errors.values()):
        # the rows stopped coming because Spark failed to compute them: what the tasks
        # made of the rows they had (none, too few, a stream cut short) is not the cause
        return computing
    invalid = [info for _, info in sorted(errors.items()) if info.get("invalid_input")]
    if invalid:  # the data is at fault, and every task said so
        return InvalidInputError(invalid[0].get("message", ""))
    if errors:
        first = primary_failure(errors)  # the root cause; the others are logged
        info = errors[first]
        for rank, other in sorted(errors.items()):
            if rank != first:
                logger.error("sparktf: rank %d (%s) also failed: %s", rank, other.get("role"),
                             other.get("message"))
        return TaskFailedError(first, info.get("role", "?"), info.get("message", ""),
                               info.get("traceback", ""), info.get("log_tail", ""))
    text = str(exc)
    if re.search(r"No module named '(sparktf|tensorflow|pyarrow|pandas|cloudpickle)'", text):
        return ExecutorEnvironmentError(
            "The executors' Python cannot import sparktf/TensorFlow. Set PYSPARK_PYTHON (or "
            "spark.pyspark.python) to an interpreter that has sparktf installed on every "
            f"executor. Spark said: {first_line(text)}")
    if is_executor_lost(text):
        return ExecutorLostError(f"{what}'s barrier stage failed: an executor running one of "
                                 f"its tasks was lost. Spark said: {_lost_line(text)}")
    cancelled = _CANCELLED.search(text)
    if cancelled:  # not a failure of the stage: nothing to relaunch
        said = cancelled.group(0).strip().lstrip(": ")[:500]
        return SparkTFError(f"{what}'s barrier stage was cancelled before it finished: by "
                            "the Spark UI's kill link, a cancelJobGroup, cancelJobsWithTag or "
                            "cancelAllJobs call, or Ctrl-C while the fit ran in another thread "
                            "than the main one (PySpark then cancels every job; in the main "
                            "thread the fit raises KeyboardInterrupt). Nothing failed: run it "
                            f"again. Spark said: {said}")
    return SparkTFError(f"{what}'s barrier stage failed before any task reported an error. "
                        f"Spark said: {_python_error(text) or first_line(text)}")


def input_failure(exc: Exception | None, what: str) -> InvalidInputError | None:
    """The error for ``exc`` when it says Spark failed computing the DataFrame given to
    ``what`` (its plan: a cast, a read), else None."""
    if exc is None:
        return None
    computing = _input_failure(str(exc))
    said = first_line(str(exc))
    if computing is None and type(exc).__module__.startswith("pyspark.errors") and \
            _ERROR_CLASS.match(said) and not _PLATFORM.search(said):
        computing = f"{type(exc).__name__}: {said}"  # as PySpark raises it (a write)
    if computing is None:
        return None
    return InvalidInputError(f"Spark could not compute the DataFrame given to {what} (its "
                             f"own plan failed as it was read): {computing}")


# A JVM exception line with a Spark SQL error class, as Spark reports a plan that failed:
# "org.apache.spark.SparkRuntimeException: [CAST_INVALID_INPUT] ...", "...SparkException:
# [FAILED_READ_FILE.FILE_NOT_EXIST] ..."; not the stage's own "Job aborted" line, and not
# what the platform's failures say (a fetch, a Python worker)
_JVM_EXCEPTION = re.compile(
    r"^(?:Caused by: )?(?:[a-z]\w*\.)+[A-Z]\w*(?:Exception|Error): \[[A-Z][A-Z0-9_.]*\] .+")
# where Spark's report quotes a Python traceback (a task's or a Python UDF's)
_PYTHON_EXCEPTION = "org.apache.spark.api.python.PythonException"
_ERROR_CLASS = re.compile(r"\[[A-Z][A-Z0-9_.]*\] ")
_PLATFORM = re.compile(r"Job aborted|FetchFailed|Python worker|PYTHON_WORKER|connect back",
                       re.IGNORECASE)


def _input_failure(text: str) -> str | None:
    """What failed in Spark itself (the DataFrame's plan: a cast, a read) before the rows
    reached the tasks' Python, from Spark's report of a failed stage; None when the stage
    failed in Python (a task's own error), by losing an executor, or by cancellation."""
    if is_executor_lost(text) or _CANCELLED.search(text):
        return None
    head = text.split(_PYTHON_EXCEPTION)[0]
    for line in head.splitlines():
        line = line.strip().lstrip(": ")
        if _JVM_EXCEPTION.match(line) and not _PLATFORM.search(line):
            return line[:500]
    return None


def _python_error(text: str) -> str | None:
    """The exception line of a Python traceback in Spark's report (a Python UDF of the
    DataFrame's plan that raised: "ValueError: boom"), else None."""
    _, marker, rest = text.partition(_PYTHON_EXCEPTION)
    if not marker:
        return None
    last = None
    for line in rest.splitlines()[1:]:
        if line.startswith("\tat ") or line.startswith("== "):
            break
        if line.strip() and not line[0].isspace():
            last = line.strip()
    return last[:500] if last else None


def _lost_line(text: str) -> str:
    """The line of Spark's report that says which executor was lost and why (the first line
    of a Py4J error only names the call: "An error occurred while calling o237...")."""
    for line in text.splitlines():
        if _EXECUTOR_LOST.search(line):
            return line.strip().lstrip(": ")[:500]
    return first_line(text)


def first_line(text: str) -> str:
    """The first line that says something: not Py4J's "An error occurred while calling
    o212.collectToPython." (it names only the call)."""
    lines = [line.strip().lstrip(": ") for line in text.splitlines() if line.strip()]
    for line in lines:
        if not _PY4J_CALL.match(line):
            return line[:500]
    return lines[0][:500] if lines else text[:500]


_PY4J_CALL = re.compile(r"An error occurred while calling \S+\.?$")
