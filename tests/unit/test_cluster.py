"""Roles, cluster specs, TF_CONFIG and port choice as pure functions."""

import json
import random
import socket

import pytest

from sparktf.runtime.process import cluster
from sparktf.runtime.process.cluster import Role


def test_all_reduce_roles_are_workers_by_rank():
    assert cluster.assign_roles(3) == [Role("worker", 0), Role("worker", 1), Role("worker", 2)]


def test_parameter_server_roles_put_workers_first_then_chief_ps_evaluator():
    roles = cluster.assign_roles(2, num_ps=2, evaluator=True)
    assert [str(r) for r in roles] == ["worker:0", "worker:1", "chief:0", "ps:0", "ps:1",
                                       "evaluator:0"]


def test_all_reduce_layout_is_a_plain_repartition():
    plan = cluster.layout(cluster.assign_roles(3), has_validation=True)
    assert plan.simple and plan.training_ranks == (0, 1, 2) and plan.validation_rank is None


def test_validation_rows_go_to_the_evaluator_when_there_is_one():
    plan = cluster.layout(cluster.assign_roles(2, num_ps=1, evaluator=True), True)
    assert plan == cluster.Layout(5, (0, 1), 4) and not plan.simple


def test_parameter_server_chief_validates_without_an_evaluator():
    plan = cluster.layout(cluster.assign_roles(2, num_ps=1), has_validation=True)
    assert plan == cluster.Layout(4, (0, 1), 2)
    assert cluster.layout(cluster.assign_roles(2, num_ps=1)).validation_rank is None


@pytest.mark.parametrize("workers,ps", [(0, 0), (-1, 0), (2, -1)])
def test_bad_counts_are_refused(workers, ps):
    with pytest.raises(ValueError, match="Received"):
        cluster.assign_roles(workers, ps)


def test_cluster_spec_orders_addresses_by_task_index_and_skips_evaluator():
    roles = cluster.assign_roles(2, num_ps=1, evaluator=True)
    addresses = ["h0:1", "h1:2", "h2:3", "h3:4", "h4:5"]
    assert cluster.build_cluster_spec(roles, addresses) == {
        "chief": ["h2:3"], "worker": ["h0:1", "h1:2"], "ps": ["h3:4"]}


def test_cluster_spec_needs_one_address_per_role():
    with pytest.raises(ValueError):
        cluster.build_cluster_spec(cluster.assign_roles(2), ["h:1"])


def test_every_task_derives_the_same_spec_and_its_own_task():
    roles = cluster.assign_roles(2)
    spec = cluster.build_cluster_spec(roles, ["a:1", "b:2"])
    configs = [json.loads(cluster.build_tf_config(spec, r)) for r in roles]
    assert configs[0]["cluster"] == configs[1]["cluster"] == {"worker": ["a:1", "b:2"]}
    assert [c["task"] for c in configs] == [{"type": "worker", "index": 0},
                                            {"type": "worker", "index": 1}]


def test_candidate_range_avoids_the_ephemeral_range():
    low, high = cluster.candidate_range((32768, 60999))
    assert high < 32768 and low >= 1024
    low, high = cluster.candidate_range((1024, 60000))
    assert low > 60000


def test_ephemeral_range_falls_back_when_unreadable(tmp_path):
    assert cluster.ephemeral_port_range(str(tmp_path / "missing")) == (32768, 60999)


def test_pick_port_skips_a_port_in_use():
    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        assert not cluster.port_is_free(taken)
        port = cluster.pick_port(random.Random(0), port_range=(taken, taken))
        assert port != taken  # fell back to a kernel-chosen free port
        assert cluster.port_is_free(port)


def test_port_conflict_is_recognised_from_tensorflow_error_text():
    assert cluster.is_port_conflict("UnknownError: Could not start gRPC server")
    assert not cluster.is_port_conflict("ValueError: bad shape")


def test_serve_and_await_servers_refuse_the_wrong_role():
    from sparktf.runtime.process.context import TaskContext
    allreduce_worker = TaskContext(jobName="worker", taskIndex=0, rank=0,
                                   clusterSpec={"worker": ["h:1"]}, numWorkers=1)
    with pytest.raises(ValueError, match="numPs > 0"):
        allreduce_worker.serve()
    with pytest.raises(ValueError, match="for the chief"):
        allreduce_worker.awaitServers()
