"""The failure policy: what is worth a relaunch, and which failure is the root cause."""

import pytest

from sparktf import failures
from sparktf.errors import (ClusterCapacityError, InvalidInputError, JobTimeoutError,
                            SparkTFError, TaskFailedError, TaskStalledError)

KILLED = "the task's process exited with code -9 before reporting a result (killed?)"


@pytest.mark.parametrize("message,infra", [
    (KILLED, True),
    ("UnavailableError: Collective ops is aborted by: peer unreachable", True),
    ("sparktf-port-conflict: UnknownError: Could not start gRPC server", True),
    ("ValueError: bad shape in my callback", False),
    ("TypeError: modelFn must return a compiled keras.Model", False),
])
def test_infrastructure_failures_are_told_from_user_errors(message, infra):
    assert failures.is_infrastructure(message) is infra


def test_the_user_exception_is_the_primary_failure_not_the_peers_collective_error():
    errors = {0: {"message": "UnavailableError: peer went away"},
              1: {"message": "ValueError: boom"}}
    assert failures.primary_failure(errors) == 1
    assert failures.primary_failure({0: {"message": KILLED}, 1: {"message": KILLED}}) == 0


def test_policy_relaunches_infrastructure_failures_up_to_max_retries():
    policy = failures.FailurePolicy(max_retries=2)
    killed = TaskFailedError(1, "worker:1", KILLED)
    assert policy.decide(killed, 0).retry and policy.decide(killed, 1).retry
    final = policy.decide(killed, 2)
    assert not final.retry and "maxRetries=2" in final.reason
    assert policy.decide(SparkTFError("executor lost"), 0).retry
    assert policy.decide(TaskStalledError(0, "worker:0", "no progress"), 0).retry


@pytest.mark.parametrize("failure", [
    TaskFailedError(0, "worker:0", "ValueError: bad"),
    InvalidInputError("bad column"),
    ClusterCapacityError("too few slots"),
    JobTimeoutError("too slow"),
])
def test_policy_gives_up_on_what_would_fail_again(failure):
    assert not failures.FailurePolicy(max_retries=5).decide(failure, 0).retry
