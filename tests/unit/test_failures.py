"""The failure policy: what is worth a relaunch, and which failure is the root cause."""

import pytest

from sparktf._driver import failures
from sparktf.errors import (
    ClusterCapacityError,
    ExecutorLostError,
    InvalidInputError,
    JobTimeoutError,
    SparkTFError,
    TaskFailedError,
    TaskStalledError,
)

KILLED = "the task's process exited with code -9 before reporting a result (killed?)"


@pytest.mark.parametrize("message,infra", [
    (KILLED, True),
    ("UnavailableError: Collective ops is aborted by: peer unreachable", True),
    ("sparktf-port-conflict: UnknownError: Could not start gRPC server", True),
    ("ValueError: bad shape in my callback", False),
    ("TypeError: modelFn must return a compiled keras.Model", False),
    # a user's exception inside tf.py_function or Dataset.from_generator arrives so
    ("UnknownError: {{function_node __inference_train_step_123}} ValueError: row check "
     "failed\nTraceback (most recent call last): ...", False),
    ("InternalError: Failed copying input tensor", False),
])
def test_infrastructure_failures_are_told_from_user_errors(message, infra):
    assert failures.is_infrastructure(message) is infra


def test_the_user_exception_is_the_primary_failure_not_the_peers_collective_error():
    errors = {0: {"message": "UnavailableError: peer went away"},
              1: {"message": "ValueError: boom"}}
    assert failures.primary_failure(errors) == 1
    assert failures.primary_failure({0: {"message": KILLED}, 1: {"message": KILLED}}) == 0
    # a Python exception rather than the TensorFlow error a peer got from it
    assert failures.primary_failure({0: {"message": "UnknownError: ValueError: boom"},
                                     1: {"message": "ValueError: boom"}}) == 1
    # a rank that died explains whatever its peers' collectives then raised
    assert failures.primary_failure({0: {"message": "InternalError: collective failed"},
                                     1: {"message": KILLED}}) == 1


def test_policy_relaunches_infrastructure_failures_up_to_max_retries():
    policy = failures.FailurePolicy(max_retries=2)
    killed = TaskFailedError(1, "worker:1", KILLED)
    assert policy.decide(killed, 0).retry and policy.decide(killed, 1).retry
    final = policy.decide(killed, 2)
    assert not final.retry and "maxRetries=2" in final.reason
    assert policy.decide(ExecutorLostError("an executor was lost"), 0).retry
    assert policy.decide(TaskStalledError(0, "worker:0", "no progress"), 0).retry


@pytest.mark.parametrize("failure", [
    TaskFailedError(0, "worker:0", "ValueError: bad"),
    TaskFailedError(0, "worker:0", "UnknownError: ValueError: raised in tf.py_function"),
    SparkTFError("the stage failed before any task reported an error: a UDF raised"),
    InvalidInputError("bad column"),
    ClusterCapacityError("too few slots"),
    JobTimeoutError("too slow"),
])
def test_policy_gives_up_on_what_would_fail_again(failure):
    assert not failures.FailurePolicy(max_retries=5).decide(failure, 0).retry


@pytest.mark.parametrize("text,lost", [
    ("Job aborted due to stage failure: ... ExecutorLostFailure (executor 1 exited caused by "
     "one of the running tasks) Reason: Command exited with code 137", True),
    ("Job aborted due to stage failure: ... org.apache.spark.api.python.PythonException: "
     "Traceback ... ZeroDivisionError: division by zero", False),
])
def test_only_spark_reports_of_a_lost_executor_count_as_one(text, lost):
    assert failures.is_executor_lost(text) is lost


def test_a_lost_executor_is_reported_with_the_line_that_says_so():
    """A Py4J error's first line names only the call; the user is told what Spark said
    about the executor (the worker lost mid-fit in test_standalone_cluster.py)."""
    text = ("An error occurred while calling o237.collectToPython.\n"
            ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 in "
            "stage 7.0 failed 1 times, most recent failure: Lost task 1.0 in stage 7.0 "
            "(TID 12) (127.0.0.1 executor 2): ExecutorLostFailure (executor 2 exited caused "
            "by one of the running tasks) Reason: worker lost: 127.0.0.1:38583 got "
            "disassociated\n\tat org.apache.spark.scheduler.DAGScheduler...")
    error = failures.translate(Exception(text), {}, "TFEstimator.fit")
    assert isinstance(error, ExecutorLostError)
    assert "Spark said: org.apache.spark.SparkException: Job aborted" in str(error)
    assert "worker lost: 127.0.0.1:38583" in str(error) and "o237" not in str(error)


def test_a_lost_executor_explains_the_peers_that_lost_their_collective():
    """Rank 1's executor dies: rank 0 reports the collective its peer left (it reaches the
    driver first), Spark reports the lost executor. The user is told of the executor, the
    root cause; a user exception on another rank still comes first."""
    spark = Exception("Job aborted due to stage failure: Lost task 1.0 (executor 2): "
                      "ExecutorLostFailure (executor 2 exited caused by one of the running "
                      "tasks) Reason: Command exited with code 137")
    peer = {"message": "UnavailableError: Collective ops is aborted by: recvmsg:Connection "
                       "reset by peer", "role": "worker:0"}
    error = failures.translate(spark, {0: peer}, "TFEstimator.fit")
    assert isinstance(error, ExecutorLostError) and "Command exited with code 137" in str(error)
    raised = {"message": "ValueError: bad rows", "role": "worker:0"}
    error = failures.translate(spark, {0: raised}, "TFEstimator.fit")
    assert isinstance(error, TaskFailedError) and "ValueError: bad rows" in error.message


CAST_FAILED = (
    "An error occurred while calling o212.collectToPython.\n"
    ": org.apache.spark.SparkException: Job aborted due to stage failure: Could not recover "
    "from a failed barrier ResultStage. Most recent failure reason: Stage failed because "
    "barrier task ResultTask(0, 0) finished unsuccessfully.\n"
    "org.apache.spark.SparkRuntimeException: [CAST_INVALID_INPUT] The value 'train' of the "
    "type \"STRING\" cannot be cast to \"BOOLEAN\" because it is malformed. SQLSTATE: 22018\n"
    "== DataFrame ==\n\"cast\" was called from\n/work/main/sparktf/ml/estimator.py:372\n\n"
    "\tat org.apache.spark.sql.errors.QueryExecutionErrors$.invalidInputInCastToNumberError"
    "(QueryExecutionErrors.scala:147)\n")


@pytest.mark.parametrize("errors", [
    {},  # the tasks saw the input end and said nothing
    # or they judged the rows they had seen, which were cut short ("no rows")
    {0: {"invalid_input": True, "role": "worker:0",
         "message": "The DataFrame given to fit has no rows."}},
    # or their reading of the stream failed where it was cut (seen in a fresh make test)
    {0: {"reading": True, "role": "worker:0",
         "message": "ArrowInvalid: Tried reading schema message, was null or length 0"}}])
def test_a_failure_computing_the_input_is_reported_with_sparks_reason(errors):
    """Found by the second review: a cast that failed in the plan of fit's DataFrame was
    reported as "failed before any task reported an error. Spark said: An error occurred
    while calling o212.collectToPython", or as "The DataFrame given to fit has no rows"."""
    error = failures.translate(Exception(CAST_FAILED), errors, "TFEstimator.fit")
    assert isinstance(error, InvalidInputError), error
    assert "could not compute the DataFrame given to TFEstimator.fit" in str(error)
    assert "[CAST_INVALID_INPUT] The value 'train'" in str(error)


def test_a_task_s_own_python_error_is_not_taken_for_a_failure_computing_the_input():
    text = ("An error occurred while calling o9.collectToPython.\n"
            ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 "
            "failed: org.apache.spark.api.python.PythonException: Traceback (most recent "
            "call last):\n  File \"x.py\", line 1\n"
            "tensorflow.python.framework.errors_impl.InvalidArgumentError: bad\n")
    error = failures.translate(Exception(text), {}, "TFEstimator.fit")
    assert not isinstance(error, InvalidInputError)
    raised = {0: {"message": "ValueError: bad rows", "role": "worker:0"}}
    assert isinstance(failures.translate(Exception(text), raised, "TFEstimator.fit"),
                      TaskFailedError)


def test_spark_said_skips_py4js_line_that_names_only_the_call():
    text = ("An error occurred while calling o5.collectToPython.\n"
            ": org.apache.spark.SparkException: Job aborted due to stage failure: odd\n")
    error = failures.translate(Exception(text), {}, "TFEstimator.fit")
    assert "Spark said: org.apache.spark.SparkException: Job aborted due to stage failure: " \
           "odd" in str(error)


def test_a_python_udf_that_failed_upstream_is_quoted_and_platform_lines_are_not_input():
    """Second review: a Python UDF failing in the frame's plan was reported with the
    stage's "Job aborted" line only; and a fetch failure must not read as bad input."""
    udf = ("An error occurred while calling o9.collectToPython.\n"
           ": org.apache.spark.SparkException: Job aborted due to stage failure: barrier "
           "task ResultTask(20, 1) finished unsuccessfully.\n"
           "org.apache.spark.api.python.PythonException: Traceback (most recent call "
           "last):\n  File \"/tmp/x.py\", line 3, in boom\n    raise ValueError('boom')\n"
           "ValueError: boom\n\n\tat org.apache.spark.api.python.BasePythonRunner...\n")
    error = failures.translate(Exception(udf), {}, "TFEstimator.fit")
    assert not isinstance(error, InvalidInputError)
    assert "Spark said: ValueError: boom" in str(error)
    fetch = ("Job aborted due to stage failure: org.apache.spark.shuffle.FetchFailedException: "
             "[FETCH_FAILED] Failed to connect to host\n")
    assert failures.input_failure(Exception(fetch), "TFEstimator.fit") is None
    plain = "org.apache.spark.SparkException: Python worker failed to connect back.\n"
    assert failures.input_failure(Exception(plain), "TFEstimator.fit") is None
