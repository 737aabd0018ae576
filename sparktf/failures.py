"""What a failed training attempt means, and whether to relaunch it.

A barrier stage that fails is not retried by Spark, so ``TFEstimator.fit``
asks a ``FailurePolicy`` after each failed attempt. Failures of the
infrastructure (a killed process, a lost executor, a peer that vanished from a
collective, a stalled task) are worth a relaunch from the last checkpoint; an
exception raised by the user's own code or bad input would only fail again.
"""

from __future__ import annotations

import dataclasses
import re

from sparktf.errors import (ClusterCapacityError, ExecutorEnvironmentError, InvalidInputError,
                            JobTimeoutError, SparkTFError, TaskFailedError, TaskStalledError)

# TensorFlow errors a worker sees when a peer dies mid-collective, and our own report of
# a process that died without a result.
_INFRASTRUCTURE = re.compile(
    r"^(sparktf-port-conflict: )?(UnavailableError|AbortedError|CancelledError|"
    r"DeadlineExceededError|InternalError|UnknownError)\b|before reporting a result|"
    r"Socket closed|Connection reset|failed to connect to all addresses")


def is_infrastructure(message: str) -> bool:
    """Whether a task's error message describes the platform failing, not the user's code."""
    return bool(_INFRASTRUCTURE.search(message or ""))


def primary_failure(errors: dict[int, dict]) -> int:
    """The rank whose failure explains the others: a user exception first, then lowest rank.

    When one worker raises, its peers fail with collective errors that only say a
    peer went away; the user wants to see the exception that started it.
    """
    return min(errors, key=lambda rank: (is_infrastructure(errors[rank].get("message", "")),
                                         rank))


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
            transient = isinstance(failure, SparkTFError)  # e.g. an executor lost
        if not transient:
            return Decision(False, "the task's own code raised; a relaunch would fail the same "
                                   "way")
        if retries_done >= self.max_retries:
            return Decision(False, f"maxRetries={self.max_retries} relaunches used")
        return Decision(True, f"relaunch {retries_done + 1} of {self.max_retries}")
