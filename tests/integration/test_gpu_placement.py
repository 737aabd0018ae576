"""GPU placement from Spark's resource scheduler, proven on CPU with a fake discovery script."""

import pytest

from tests import conftest

# one driver process runs every scenario in turn (its docstring): one each, half a GPU
# per task on executors whose environment already names their GPUs 7,8,9, and pairs
JOB = conftest.Job("gpu", "tests/integration/scripts/fake_gpu_job.py", conftest.Job.WORKDIR,
                   expected_s=80)

pytestmark = pytest.mark.timeout(600)


def _found(scenario: str) -> dict:
    found = JOB.finished().results()[scenario]
    assert "error" not in found, f"the scenario {scenario} failed:\n{found['error']}"
    return found


def test_each_task_sees_exactly_the_gpu_spark_assigned():
    result = _found("one_each")
    for task in result["training"]:
        assert len(task["assigned"]) == 1
        assert task["cuda"] == task["assigned"][0]  # exported before TensorFlow started
        assert task["tf_imported_with_it"]
    for task in result["inference"]:
        assert task["assigned"] and task["device"] == f"/GPU:{task['assigned']}"
        assert task["after"] == task["before"]  # the worker's environment is left as it was
    for task in result["training_again"]:
        assert task["cuda"] == task["assigned"][0]


def test_addresses_index_into_the_executors_own_cuda_visible_devices():
    result = _found("half_inherited")
    for task in result["training"] + result["training_again"]:
        assert task["cuda"] == ",".join("789"[int(a)] for a in task["assigned"])
    for task in result["inference"]:  # TensorFlow sees 7,8,9 as its GPUs 0,1,2
        assert task["device"] == f"/GPU:{task['assigned']}"
        assert task["before"] == task["after"] == "7,8,9"


def test_fractional_amounts_share_the_assigned_gpu():
    result = _found("half_inherited")
    for task in result["training"] + result["training_again"]:
        assert len(task["assigned"]) == 1  # half of one GPU: that GPU, as for a whole one
        assert task["cuda"] == "789"[int(task["assigned"][0])]


def test_executors_with_two_gpus_each_run_one_task_per_gpu_on_reused_workers():
    result = _found("pairs")
    refusal = result["refusal"]
    assert refusal and "Set spark.worker.resource.gpu.amount" in refusal["message"], refusal
    assert refusal["seconds"] < 30, refusal  # not after minutes of waiting
    # one core and two GPUs per executor: one slot each, and each task gets one GPU
    assert sorted(t["rank"] for t in result["training"]) == [0, 1]
    for task in result["training"]:
        assert len(task["assigned"]) == 1 and task["cuda"] == task["assigned"][0]
    # scoring: every task runs on the GPU Spark assigned it, also in a Python worker whose
    # TensorFlow started during an earlier task that had the other GPU
    seen: dict = {}
    for task in result["scoring"]:
        assert task["device"] == f"/GPU:{task['assigned']}", task
        assert task["visible"] == "all", task  # TensorFlow sees both of the executor's GPUs
        seen.setdefault(task["pid"], set()).add(task["assigned"])
    assert any(len(gpus) > 1 for gpus in seen.values()), \
        f"no Python worker was reused with another GPU, so nothing was tested: {seen}"


@pytest.mark.gpu
def test_tensorflow_sees_a_real_gpu():
    tf = pytest.importorskip("tensorflow")
    if not tf.config.list_physical_devices("GPU"):
        pytest.skip("no GPU on this machine")
    assert tf.reduce_sum(tf.ones((4, 4))).numpy() == 16.0
