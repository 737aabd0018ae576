"""Where the feed's time goes: wall and CPU seconds of the ceiling job and of sparktf's feed.

    .venv/bin/python bench/feed_cpu_bench.py [--rows 2000000] [--rounds 3]

On local-cluster[2,1,2048], the rows of ``feed_bench.py`` (28 floats + a label, cached):
the ceiling (Spark -> Arrow -> numpy in a barrier stage) and ``sparktf.run`` +
``ctx.dataset()``, each with the CPU seconds the executors' JVMs and the Python side
(Spark's Python workers, sparktf's spares and task processes) spent during the job, read
from ``/proc/PID/stat`` (user + system, with reaped children's) before and after. Cores busy
= CPU seconds / wall seconds: below the machine's cores, a job leaves CPU idle.
"machine": the cores busy on the whole machine over the job (``/proc/stat``), which also
counts a task process that has exited and whose CPU its parent has not collected yet.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import feed_bench  # noqa: E402
from pyspark import cloudpickle  # noqa: E402

# the ceiling's task function travels by value: the executors cannot import bench/ modules
cloudpickle.register_pickle_by_value(feed_bench)

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds() -> dict[str, float]:
    """CPU seconds so far of the executors' JVMs and of the Python processes beside them."""
    found = {"jvm": 0.0, "python": 0.0}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                command = f.read()
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        seconds = sum(int(v) for v in fields[11:15]) / TICK  # utime stime cutime cstime
        if b"CoarseGrainedExecutorBackend" in command:
            found["jvm"] += seconds
        elif b"pyspark.daemon" in command or b"sparktf" in command:
            found["python"] += seconds
    return found


def measured(name: str, job) -> None:
    before, started, busy_before = cpu_seconds(), time.perf_counter(), common.machine_busy()
    job()
    wall, after, busy_after = time.perf_counter() - started, cpu_seconds(), common.machine_busy()
    jvm, python = after["jvm"] - before["jvm"], after["python"] - before["python"]
    busy = busy_after[0] - busy_before[0]
    print(f"  {name:30}{wall:8.2f}{jvm:12.2f}{python:12.2f}{(jvm + python) / wall:8.1f}"
          f"{busy / wall:10.2f}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    spark = common.session()
    try:
        feed_bench.warm_up(spark)
        df = common.higgs_like(spark, args.rows).cache()
        df.count()
        print(f"\n{args.rows:,} rows: wall and CPU seconds per job")
        print(f"  {'job':30}{'wall':>8}{'JVMs CPU':>12}{'Python CPU':>12}{'cores':>8}"
              f"{'machine':>10}")
        for _ in range(args.rounds):
            measured("ceiling", lambda: feed_bench.run_ceiling(df, args.rows))
            measured("sparktf, streamed",
                     lambda: feed_bench.run_sparktf(spark, df, args.rows, stream=True))
            measured("sparktf, spilled first",
                     lambda: feed_bench.run_sparktf(spark, df, args.rows, stream=False))
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
