"""CPU by process kind while something runs (e.g. the test suite): samples ``/proc`` every
second, keeps each process's last reading, and rewrites the totals by kind to a JSON
file after every sample, until it is stopped. The same totals by job too: a process of
one of the suite's jobs (tests/conftest.py: Job) carries the job's name in
``SPARKTF_TEST_JOB``, and every process it starts inherits it (Spark's executors, their
Python workers, spares and tasks); the others are "in-process tests" when they carry
the suite's ``SPARKTF_TEST_RUN``, "other" if not; and by job and kind.

    python bench/suite_cpu.py OUT.json & make test; kill %1

A process that lives less than a second between two samples is missed, and a process's
last second is not counted. The table in bench/RESULTS.md (issues 32, 33) came from it.
"""

import collections
import json
import os
import sys
import time

TICKS = os.sysconf("SC_CLK_TCK")


def _read(path: str) -> str:
    with open(path, "rb") as f:
        return f.read().replace(b"\0", b" ").decode(errors="replace")


def kind(pid: str, name: str) -> str | None:
    """What the process (named ``name``) is: a Spark JVM, a Python worker, a sparktf spare
    or task, ..."""
    try:
        command = _read(f"/proc/{pid}/cmdline")
    except OSError:
        return None
    if name == "java" or command.split(" ")[0].endswith("java"):
        if "CoarseGrainedExecutorBackend" in command:
            return "jvm-executor"
        if "deploy.master" in command or "deploy.worker" in command:
            return "jvm-standalone-daemon"
        return "jvm-driver"
    if name == "sparktf-spare" or "--spare" in command:
        return "spare"
    if name == "sparktf-task" or "sparktf.runtime.process.child" in command:
        return "task"
    if "pyspark.daemon" in command:
        return "python-worker"
    if "pytest" in command:
        return "pytest"
    if "scripts/" in command:
        return "job-driver:" + command.split("scripts/")[1].split()[0]
    if "ipykernel" in command:
        return "notebook-kernel"
    return "other:" + name


def job(pid: str, found: str) -> str:
    """The suite's job the process of kind ``found`` belongs to (``SPARKTF_TEST_JOB``),
    from its environment. The suite's own pytest sets ``SPARKTF_TEST_RUN`` after it
    started, which its ``/proc`` environment does not show."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read().decode(errors="replace").split("\0")
    except OSError:
        return "other"
    for entry in environ:
        if entry.startswith("SPARKTF_TEST_JOB="):
            return entry.split("=", 1)[1]
    if found == "pytest" or any(e.startswith("SPARKTF_TEST_RUN=") for e in environ):
        return "in-process tests"
    return "other"


def _rows(totals: dict) -> list:
    return sorted(([k, round(cpu, 1), n] for k, (cpu, n) in totals.items()),
                  key=lambda row: -row[1])


def main(out: str) -> None:
    seen: dict[tuple, list] = {}  # (pid, start time) -> [kind, CPU seconds]
    started = time.time()
    while True:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                fields = _read(f"/proc/{pid}/stat").rsplit(")", 1)[1].split()
                name = _read(f"/proc/{pid}/comm").strip()
            except OSError:
                continue
            cpu = (int(fields[11]) + int(fields[12])) / TICKS
            key = (pid, fields[19])
            if key not in seen:
                found = kind(pid, name)
                if found is None:
                    continue
                seen[key] = [found, cpu, job(pid, found)]
            seen[key][1] = max(seen[key][1], cpu)
            if name == "sparktf-task":  # forked from a spare, named after the fork
                seen[key][0] = "task"
        totals = collections.defaultdict(lambda: [0.0, 0])
        by_job = collections.defaultdict(lambda: [0.0, 0])
        by_both = collections.defaultdict(lambda: [0.0, 0])
        for found, cpu, in_job in seen.values():
            for table, name in ((totals, found), (by_job, in_job),
                                (by_both, f"{in_job} / {found}")):
                table[name][0] += cpu
                table[name][1] += 1
        with open(out, "w") as f:
            json.dump({"elapsed_s": round(time.time() - started),
                       "kind_cpu_s_count": _rows(totals), "job_cpu_s_count": _rows(by_job),
                       "job_kind_cpu_s_count": _rows(by_both)},
                      f, indent=0)
        time.sleep(1)


if __name__ == "__main__":
    main(sys.argv[1])
