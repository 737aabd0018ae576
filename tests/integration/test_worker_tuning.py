"""spark.sparktf.workerTuning=false turns off what sparktf changes in Spark's Python workers
and its own task processes (the lazy zip-import invalidation, the deferred Keras helpers,
TensorFlow without Keras in scoring workers, the frozen collector), and a fit and a
transform give the same numbers either way."""

import numpy as np
import pytest

import sparktf
from tests import conftest
from tests.integration import worker_tuning_probe

JOB = conftest.Job("worker tuning off", "tests/integration/scripts/worker_tuning_job.py",
                   expected_s=60)

pytestmark = pytest.mark.timeout(900)


def test_with_worker_tuning_off_a_fit_and_a_transform_give_the_same_numbers(spark):
    on = worker_tuning_probe.fit_and_score(spark)
    off = JOB.finished().results()["off"]
    print("on: ", {k: on[k] for k in ("python_workers", "task_processes")})
    print("off:", {k: off[k] for k in ("python_workers", "task_processes")})
    # the probes see Python workers that ran sparktf's tasks (reused after the transform)
    assert any(w["ran_sparktf"] for w in on["python_workers"])
    assert any(w["ran_sparktf"] for w in off["python_workers"])
    # ... and are not vacuous: on, every process that ran sparktf shows the changes
    assert all(w["lazy_zip"] for w in on["python_workers"] if w["ran_sparktf"])
    assert all(w["frozen"] > 0 for w in on["python_workers"] if w["ran_scoring"])
    # a worker that scored imported TensorFlow without Keras (one that had Keras already,
    # from a user's own function in an earlier test of this session, keeps it)
    assert any(w["ran_scoring"] and not w["keras"] for w in on["python_workers"])
    assert all(p["frozen"] > 0 and p["keras_wrappers_deferred"] for p in on["task_processes"])
    # off, none does
    assert not any(w["lazy_zip"] or w["frozen"] or w["keras_wrappers_deferred"]
                   for w in off["python_workers"])
    assert all(w["keras"] for w in off["python_workers"] if w["ran_scoring"])
    assert not any(p["frozen"] or p["keras_wrappers_deferred"] for p in off["task_processes"])
    for key in ("weights", "loss", "predictions"):
        gap = np.abs(np.array(on[key]) - np.array(off[key])).max()
        print(f"{key}: largest difference on vs off {gap:.1e}")
        np.testing.assert_array_equal(on[key], off[key])


def test_a_worker_tuning_value_other_than_true_or_false_is_refused_before_any_job(spark):
    jobs = spark.sparkContext.statusTracker().getJobIdsForGroup()
    spark.conf.set("spark.sparktf.workerTuning", "no")
    try:
        with pytest.raises(sparktf.InvalidInputError, match="workerTuning must be true or "
                                                            "false.*Received: 'no'"):
            sparktf.run(spark, worker_tuning_probe.in_task_process, numWorkers=1)
    finally:
        spark.conf.unset("spark.sparktf.workerTuning")
    assert spark.sparkContext.statusTracker().getJobIdsForGroup() == jobs
