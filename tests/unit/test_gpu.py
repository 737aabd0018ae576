"""GPU placement: Spark's addresses -> CUDA_VISIBLE_DEVICES."""

import pytest

from sparktf.runtime.gpu import HIDE_ALL, GpuAssignmentError, visible_devices


def test_assigned_addresses_become_visible_devices():
    assert visible_devices(["0", "1"], "auto") == "0,1"


def test_addresses_index_into_the_cluster_managers_devices():
    assert visible_devices(["1"], "auto", inherited="4,5,6") == "5"
    assert visible_devices(["0", "2"], True, inherited="4, 5, 6") == "4,6"


def test_address_outside_the_inherited_list_is_an_error():
    with pytest.raises(GpuAssignmentError, match="CUDA_VISIBLE_DEVICES"):
        visible_devices(["3"], "auto", inherited="0,1")


def test_no_assignment_hides_gpus_unless_required():
    assert visible_devices([], "auto") == HIDE_ALL
    with pytest.raises(GpuAssignmentError, match="spark.task.resource.gpu.amount"):
        visible_devices([], True)


def test_use_gpu_false_hides_assigned_gpus():
    assert visible_devices(["0"], False) == HIDE_ALL


def test_parameter_servers_see_no_gpu_even_when_spark_assigned_one():
    from sparktf.runtime.process.cluster import Role
    from sparktf.runtime.process.task import task_devices

    assert task_devices(Role("ps", 0), ["0"], True, None) == HIDE_ALL
    assert task_devices(Role("worker", 0), ["0"], True, None) == "0"
    assert task_devices(Role("chief", 0), ["1"], "auto", "4,5") == "5"


def test_parameter_server_clusters_get_an_inter_op_thread_per_worker_and_one_more():
    from sparktf.runtime.process.task_process import interop_threads
    assert interop_threads(None, 2, 0) == 2
    assert interop_threads("1", 2, 0) == 1  # the executor's own choice, all-reduce
    assert interop_threads("1", 2, 1) == 3  # one thread stalls PS training at step 0
    assert interop_threads(None, 4, 2) == 5
    assert interop_threads("8", 2, 1) == 8
    assert interop_threads("junk", 2, 0) == 2


def test_workers_with_gpus_all_reduce_over_nccl_and_cpus_over_the_ring():
    """Issue 54: TensorFlow's AUTO does not choose NCCL for GPUs by itself; sparktf asks
    for it where the task has GPUs (every worker of a stage alike), AUTO elsewhere (NCCL
    without a GPU is refused by the strategy). One pack of gradients a step either way."""
    import tensorflow as tf

    from sparktf.runtime.training.allreduce import communication

    implementation = tf.distribute.experimental.CommunicationImplementation
    assert communication(True).implementation == implementation.NCCL
    assert communication(False).implementation == implementation.AUTO
    assert communication(True).bytes_per_pack == communication(False).bytes_per_pack == 0
