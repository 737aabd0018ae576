"""Errors: one base class, picklable, messages that carry rank, role and traceback."""

import pickle

import sparktf
from sparktf.errors import TaskFailedError


def test_task_failure_survives_pickling_with_all_fields():
    err = TaskFailedError(1, "worker:1", "ValueError: boom", "Traceback...\nValueError: boom",
                          "last line")
    back = pickle.loads(pickle.dumps(err))
    assert isinstance(back, sparktf.SparkTFError)
    assert (back.rank, back.role, back.message, back.log_tail) == (1, "worker:1",
                                                                   "ValueError: boom",
                                                                   "last line")
    assert str(back) == str(err)


def test_task_failure_message_names_rank_role_and_original_traceback():
    text = str(TaskFailedError(3, "ps:0", "KeyError: 'x'", "File \"main.py\", line 7"))
    assert "rank 3 (ps:0) failed: KeyError: 'x'" in text
    assert 'File "main.py", line 7' in text


def test_all_errors_share_the_base_class():
    for cls in (sparktf.InvalidInputError, sparktf.ClusterCapacityError,
                sparktf.ExecutorEnvironmentError, sparktf.JobTimeoutError,
                sparktf.ClusterFormationError, sparktf.TaskStalledError):
        assert issubclass(cls, sparktf.SparkTFError)
    assert issubclass(sparktf.InvalidInputError, ValueError)


def test_import_sparktf_does_not_import_tensorflow():
    import subprocess
    import sys
    code = "import sys, sparktf, sparktf.ml; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"
