"""The errors sparktf raises: one base class, a few kinds, all picklable.

Messages say what failed, what was received, and how to fix it.
"""

from __future__ import annotations


class SparkTFError(Exception):
    """Base class of every error sparktf raises."""


class InvalidInputError(SparkTFError, ValueError):
    """A Param, argument, column or data value that sparktf cannot use."""


class ClusterCapacityError(SparkTFError):
    """The Spark cluster cannot run the barrier stage (too few slots, dynamic allocation)."""


class ExecutorEnvironmentError(SparkTFError):
    """The executors' Python cannot import sparktf or TensorFlow."""


class ExecutorLostError(SparkTFError):
    """An executor running a task of the barrier stage was lost (its process or machine died)."""


class JobTimeoutError(SparkTFError):
    """The barrier stage ran past its ``timeout`` and was cancelled."""


class ClusterFormationError(SparkTFError):
    """The tasks could not form a TensorFlow cluster (e.g. ports kept being taken)."""


class TaskFailedError(SparkTFError):
    """A task of the barrier stage failed; carries its rank, role and original traceback.

    Parameters
    ----------
    rank : int
        The failing task's rank (its barrier partition id).
    role : str
        The task's TensorFlow role, e.g. ``"worker:1"``.
    message : str
        The original exception, as ``Type: text``.
    traceback_text : str
        The original traceback, formatted in the task.
    log_tail : str
        The last lines the task printed before failing.
    """

    def __init__(self, rank: int, role: str, message: str, traceback_text: str = "",
                 log_tail: str = ""):
        self.rank = rank
        self.role = role
        self.message = message
        self.traceback_text = traceback_text
        self.log_tail = log_tail
        super().__init__(self._render())

    def _render(self) -> str:
        text = f"rank {self.rank} ({self.role}) failed: {self.message}"
        if self.traceback_text:
            text += "\n\nOriginal traceback on rank {}:\n{}".format(
                self.rank, self.traceback_text.rstrip())
        if self.log_tail:
            text += "\n\nLast output of rank {}:\n{}".format(self.rank, self.log_tail.rstrip())
        return text

    def __reduce__(self):
        return (type(self), (self.rank, self.role, self.message, self.traceback_text,
                             self.log_tail))


class TaskStalledError(TaskFailedError):
    """A task made no progress for longer than the stall timeout."""
