"""The test runs of their own that ``make test`` includes, run as jobs beside the
in-process tests (tests/conftest.py: Job) instead of after them, so that the two cores
stay busy until the end:

- the generated cases (``tests/generated``, Hypothesis with the seeded budget of
  ``make test``): a pytest of its own, as they start a Spark of 3 executors;
- the unit tests and the smoke (tests/integration/test_smoke.py) at the lowest versions
  sparktf declares (``make test-lowest``: pyspark 3.5, TensorFlow 2.16) and at the newest
  releases pip resolves (``make test-newest``), each in the environment ``make test``
  builds for it. ``make test`` passes those commands in ``SPARKTF_LOWEST_RUN`` and
  ``SPARKTF_NEWEST_RUN``; a run without them (``pytest tests`` by hand) skips them.

Each passes only if its own pytest exits 0; the end of its output is shown in this run's
summary, and all of it when it fails.
"""

import os
import shlex
import sys

import pytest

from tests import conftest

pytestmark = pytest.mark.timeout(1500)

GENERATED = conftest.Job(
    "generated cases", [sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                        "--durations=5", "tests/generated"],
    expected_s=210, timeout_s=1400, summary_lines=12)


def _version_run(name: str, variable: str) -> conftest.Job | None:
    command = os.environ.get(variable)
    return (conftest.Job(name, shlex.split(command), expected_s=170, timeout_s=1400,
                         summary_lines=6) if command else None)


LOWEST = _version_run("lowest versions", "SPARKTF_LOWEST_RUN")
NEWEST = _version_run("newest versions", "SPARKTF_NEWEST_RUN")


def _passed(job: conftest.Job) -> None:
    done = job.finished()
    assert done.returncode == 0, (f"{job.name}: exit {done.returncode}\n"
                                  f"{done.stdout[-20000:]}\n{done.stderr[-4000:]}")
    assert " passed" in done.stdout.splitlines()[-1], done.stdout[-2000:]


def test_the_generated_cases_pass():
    _passed(GENERATED)


def test_the_lowest_declared_versions_pass():
    if LOWEST is None:
        pytest.skip("make test runs this (SPARKTF_LOWEST_RUN unset): `make test-lowest`")
    _passed(LOWEST)


def test_the_newest_releases_pass():
    if NEWEST is None:
        pytest.skip("make test runs this (SPARKTF_NEWEST_RUN unset): `make test-newest`")
    _passed(NEWEST)
