"""The driver's own cost per task: 2 and 8 real tasks, then 1,000 simulated ones.

    .venv/bin/python bench/driver_bench.py [--tasks 2,8] [--simulated 1000] [--seconds 10]

Real tasks: a local-cluster of 8 one-core executors; ``sparktf.run`` of a program that
creates ``MultiWorkerMirroredStrategy`` and runs one all-reduce (the TensorFlow cluster
formed and used), three times per task count after one run on every executor (which
warms their spare processes); the median is reported. Measured on the driver's Python
process, over the run: its threads at peak, its resident memory's growth at peak, its CPU
time, and the time from
the launch to the last task's "cluster formed" and to the last task's first all-reduce
(the tasks' phase records, ``sparktf.phases``). The difference between 8 and 2 tasks,
over 6, is the cost of one more task. (The Spark driver JVM is another process, Spark's
own cost, not counted here.)

Simulated tasks: ``bench/channel_bench.py --tasks N``: N ``EventClient``s against the
driver's ``EventServer`` (address exchange, heartbeats, logs, exit barrier), with the
same figures for the driver's process.
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def one_all_reduce(args, ctx):
    """The tasks' program: the TensorFlow cluster formed, one all-reduce across it."""
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    total = strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)
    ctx.phase("first all-reduce")
    return float(total)


def rss_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Peaks:
    """Samples this process's threads and resident memory while a block runs (a bench's
    measurement, not a wait for anything)."""

    def __enter__(self):
        self.threads, self.rss = threading.active_count(), rss_kb()
        self.before = (self.threads, self.rss)
        self.cpu = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(0.05):
            self.threads = max(self.threads, threading.active_count())
            self.rss = max(self.rss, rss_kb())

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.cpu = sum(resource.getrusage(resource.RUSAGE_SELF)[:2]) - self.cpu


class Phases(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        phase = getattr(record, "phase", None)
        if phase is not None:
            self.records.append(phase)


def real(spark, tasks: int) -> dict:
    import sparktf

    handler = Phases()
    logger = logging.getLogger("sparktf.phases")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        with Peaks() as peaks:
            started = time.time()
            results = sparktf.run(spark, one_all_reduce, numWorkers=tasks)
            wall = time.time() - started
    finally:
        logger.removeHandler(handler)
    assert results == [float(tasks)] * tasks, results
    launch = min(t for rank, name, t in handler.records if rank is None and name == "launch")

    def last(name):
        times = [t for rank, phase, t in handler.records if rank is not None and phase == name]
        assert len(times) == tasks, (name, len(times))
        return max(times) - launch

    return {"tasks": tasks, "wall_s": wall, "formed_s": last("cluster formed"),
            "reduced_s": last("first all-reduce"), "threads": peaks.threads - peaks.before[0],
            "rss_mb": (peaks.rss - peaks.before[1]) / 1024, "cpu_s": peaks.cpu}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="2,8")
    parser.add_argument("--simulated", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    counts = [int(n) for n in args.tasks.split(",")]

    spark = common.session(f"local-cluster[{max(counts)},1,1024]")
    real(spark, max(counts))  # warms every executor (its spare process)
    rows = []
    for tasks in counts:
        runs = sorted((real(spark, tasks) for _ in range(3)), key=lambda r: r["formed_s"])
        rows.append(runs[1])  # the median run by the time to form the cluster
    spark.stop()
    print(f"\nreal tasks on local-cluster[{max(counts)},1,1024], {os.cpu_count()} cores "
          "(after a run on every executor; the median of three runs each; the driver's "
          "Python process)")
    print(f"{'tasks':>6} {'run s':>7} {'formed s':>9} {'1st all-reduce s':>17} "
          f"{'+threads':>9} {'+RSS MB':>8} {'CPU s':>6}")
    for r in rows:
        print(f"{r['tasks']:>6} {r['wall_s']:>7.2f} {r['formed_s']:>9.2f} "
              f"{r['reduced_s']:>17.2f} {r['threads']:>9} {r['rss_mb']:>8.1f} "
              f"{r['cpu_s']:>6.2f}")
    if len(rows) >= 2:
        a, b = rows[0], rows[-1]
        more = b["tasks"] - a["tasks"]
        print(f"per task more ({a['tasks']} -> {b['tasks']}): "
              f"{(b['threads'] - a['threads']) / more:+.2f} threads, "
              f"{(b['rss_mb'] - a['rss_mb']) / more:+.2f} MB, "
              f"{(b['cpu_s'] - a['cpu_s']) / more * 1e3:+.1f} ms of driver CPU, "
              f"{(b['formed_s'] - a['formed_s']) / more * 1e3:+.0f} ms to form the cluster")
    if args.simulated:
        done = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "channel_bench.py"),
                               "--tasks", str(args.simulated), "--seconds",
                               str(args.seconds)], text=True)
        return done.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
