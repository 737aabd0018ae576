"""A user's own script is as quiet as the demo: TensorFlow's C++ start-up notices (oneDNN,
cuInit, the CPU-instruction notice...) from the processes sparktf starts TensorFlow in
never reach the console, in local mode either, where the executors' stderr is the
driver's (tf_startup); every other line does."""

import pytest

from sparktf.runtime import tf_startup
from tests import conftest

pytestmark = pytest.mark.timeout(600)
JOB = conftest.Job("quiet", "tests/integration/scripts/quiet_job.py", expected_s=25)


def test_a_users_fit_and_transform_in_local_mode_print_no_start_up_notices():
    finished = JOB.finished()
    assert finished.results()["quiet"] == {"shown": True}
    printed = (finished.stdout + finished.stderr).splitlines()
    assert any("prediction" in line for line in printed)  # the user's own lines are there
    notices = [line for line in printed if tf_startup.NOISE.search(line)]
    assert not notices, "\n".join(notices[:10])
