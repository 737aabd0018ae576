"""The machine's CPU while each test runs: a pytest plugin, and its report.

The machine's busy time (``/proc/stat``, every core, every process: Spark's JVMs, Python
workers, spares and task processes included) is read before and after each test and
written as a JSON line. Meaningful only with nothing else running, the suite's jobs
included: run them in the tests that read them (``SPARKTF_TEST_BACKGROUND=0``), or leave
out the modules that read jobs.

    PYTHONPATH=bench SPARKTF_TEST_BACKGROUND=0 CPU_BY_TEST=/tmp/tests.jsonl \\
        .venv/bin/python -m pytest -p cpu_by_test tests/unit tests/integration/test_model.py
    .venv/bin/python bench/cpu_by_test.py /tmp/tests.jsonl   # by module, then by test
"""

import json
import os
import sys
import time

import pytest
from common import machine_busy  # bench/ is on the path (PYTHONPATH=bench)

OUT = os.environ.get("CPU_BY_TEST", "cpu_by_test.jsonl")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    busy, started = machine_busy()[0], time.monotonic()
    yield
    with open(OUT, "a") as f:
        f.write(json.dumps({"id": item.nodeid, "wall": time.monotonic() - started,
                            "cpu": machine_busy()[0] - busy}) + "\n")


def report(path: str, top: int = 30) -> None:
    with open(path) as f:
        rows = [json.loads(line) for line in f]
    modules: dict[str, list[float]] = {}
    for row in rows:
        totals = modules.setdefault(row["id"].split("::")[0], [0, 0.0, 0.0])
        totals[0] += 1
        totals[1] += row["wall"]
        totals[2] += row["cpu"]
    print(f"{'module':60} {'tests':>5} {'wall s':>7} {'core-s':>7}")
    for name, (n, wall, cpu) in sorted(modules.items(), key=lambda m: -m[1][2])[:top]:
        print(f"{name:60} {n:>5} {wall:>7.1f} {cpu:>7.1f}")
    print(f"{'all':60} {len(rows):>5} {sum(r['wall'] for r in rows):>7.1f} "
          f"{sum(r['cpu'] for r in rows):>7.1f}")
    print()
    print(f"{'test':100} {'wall s':>7} {'core-s':>7}")
    for row in sorted(rows, key=lambda r: -r["cpu"])[:top]:
        print(f"{row['id'][:100]:100} {row['wall']:>7.1f} {row['cpu']:>7.1f}")


if __name__ == "__main__":
    report(sys.argv[1])
