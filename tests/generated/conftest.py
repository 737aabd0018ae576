"""Generated cases (Hypothesis) on their own local-cluster of ``EXECUTORS`` one-core
executors (6 in ``make test``, 8 in ``make fuzz``), so that fits of 1 to 3 workers are
drawn, and fits of every executor (``test_many_workers_...``); run by a pytest of their
own (``make test``, ``make fuzz``), since a process holds one SparkContext.

``SPARKTF_FUZZ=1`` (``make fuzz``) runs the large budget instead of make test's."""

import os

import pytest
from hypothesis import HealthCheck, settings

from tests import conftest

FUZZ = os.environ.get("SPARKTF_FUZZ") == "1"
EXECUTORS = 8 if FUZZ else 6

# derandomized: make test draws the same cases every run (a seeded budget)
settings.register_profile("make-test", max_examples=12, deadline=None, derandomize=True,
                          print_blob=True, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("fuzz", max_examples=200, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("fuzz" if FUZZ else "make-test")


def budget(make_test: int, fuzz: int) -> int:
    return fuzz if FUZZ else make_test


@pytest.fixture(scope="session")
def spark():
    session = conftest.local_cluster(EXECUTORS, "sparktf-generated")
    if session.sparkContext.master != f"local-cluster[{EXECUTORS},1,1024]":
        pytest.exit(f"tests/generated needs a SparkContext of its own ({EXECUTORS} "
                    "executors), but this "
                    f"process already has {session.sparkContext.master}: run it in a pytest "
                    "of its own, as make test does (pytest tests/generated).", returncode=2)
    yield session
    session.stop()
