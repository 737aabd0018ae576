"""GPU placement from Spark's resource scheduler, proven on CPU with a fake discovery script."""

import json
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "fake_gpu_job.py")
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

pytestmark = pytest.mark.timeout(600)


def _run(tmp_path, amount, inherited=None):
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    env["PYTHONPATH"] = ROOT
    args = [sys.executable, SCRIPT, str(tmp_path), amount] + ([inherited] if inherited else [])
    out = subprocess.run(args, capture_output=True, text=True, env=env, timeout=500)
    line = next((l for l in out.stdout.splitlines() if l.startswith("RESULT ")), None)
    assert line, f"no result; stderr tail:\n{out.stderr[-3000:]}"
    return json.loads(line[len("RESULT "):])


def test_each_task_sees_exactly_the_gpu_spark_assigned(tmp_path):
    result = _run(tmp_path, "1")
    for task in result["training"]:
        assert len(task["assigned"]) == 1
        assert task["cuda"] == task["assigned"][0]  # exported before TensorFlow started
        assert task["tf_imported_with_it"]
    for task in result["inference"]:
        assert task["assigned"] and task["cuda"] == task["assigned"]
        assert task["after"] == task["before"]  # the worker's environment is left as it was
    for task in result["training_again"]:
        assert task["cuda"] == task["assigned"][0]


def test_addresses_index_into_the_executors_own_cuda_visible_devices(tmp_path):
    result = _run(tmp_path, "1", inherited="7,8,9")
    for task in result["training"] + result["inference"] + result["training_again"]:
        assigned = task["assigned"] if isinstance(task["assigned"], list) \
            else task["assigned"].split(",")
        assert task["cuda"] == ",".join("789"[int(a)] for a in assigned)


def test_fractional_amounts_share_the_assigned_gpu(tmp_path):
    result = _run(tmp_path, "0.5")
    for task in result["training"]:
        assert len(task["assigned"]) == 1 and task["cuda"] == task["assigned"][0]


@pytest.mark.gpu
def test_tensorflow_sees_a_real_gpu():
    tf = pytest.importorskip("tensorflow")
    if not tf.config.list_physical_devices("GPU"):
        pytest.skip("no GPU on this machine")
    assert tf.reduce_sum(tf.ones((4, 4))).numpy() == 16.0
