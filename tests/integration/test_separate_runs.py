"""The test runs of their own that ``make test`` includes, run as jobs beside the
in-process tests (tests/conftest.py: Job) instead of after them, so that the two cores
stay busy until the end:

- the generated cases (``tests/generated``, Hypothesis with the seeded budget of
  ``make test``): a pytest of its own, as they start a Spark of 3 executors;
- the unit tests and one fit at the lowest versions sparktf declares (``make
  test-lowest``), in the environment ``make test`` builds for them. ``make test`` passes
  that command in ``SPARKTF_LOWEST_RUN``; a run without it (``pytest tests`` by hand)
  skips it.

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
LOWEST_RUN = os.environ.get("SPARKTF_LOWEST_RUN")
LOWEST = (conftest.Job("lowest versions", shlex.split(LOWEST_RUN), expected_s=130,
                       timeout_s=1400, summary_lines=6) if LOWEST_RUN else None)


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
