"""12 consecutive fits in one driver, some failing, leave nothing behind."""

import gc
import resource
import threading

import pytest

import sparktf
from sparktf.ml import TFEstimator
from tests.conftest import child_pids, wait_gone
from tests.integration import data, models

pytestmark = pytest.mark.timeout(900)
FITS = 12


def broken(hparams):
    raise RuntimeError("deliberately broken modelFn")


def _listening_ports() -> set[int]:
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[3] == "0A":  # LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_a_dozen_fits_including_failures_leave_no_processes_ports_or_threads(spark, capsys):
    X, y = data.linear_rows(300)
    df = spark.createDataFrame(data.rows(X, y), "features array<double>, label double").cache()
    df.count()
    good = TFEstimator(modelFn=models.linear, numWorkers=2, epochs=1, batchSize=64)
    bad = TFEstimator(modelFn=broken, numWorkers=2, epochs=1)
    rows = []
    for i in range(FITS):
        failing = i % 4 == 3
        if failing:
            with pytest.raises(sparktf.TaskFailedError, match="deliberately broken"):
                bad.fit(df)
        else:
            good.fit(df)
        assert wait_gone(child_pids()) == [], f"task processes left after fit {i + 1}"
        gc.collect()
        rows.append((i + 1, failing, threading.active_count(), len(_listening_ports()),
                     _rss_mb()))
    with capsys.disabled():
        print("\nfit  failed  driver threads  listening ports  driver RSS MB")
        for n, failed, threads, ports, rss in rows:
            print(f"{n:3}  {str(failed):6}  {threads:14}  {ports:15}  {rss:13.0f}")
    warm = rows[4:]  # after the first fits have loaded everything once
    assert max(r[2] for r in warm) == min(r[2] for r in warm), "driver threads grow"
    assert max(r[3] for r in warm) <= min(r[3] for r in warm) + 1, "listening ports grow"
    assert warm[-1][4] - warm[0][4] < 100, "driver memory grows"
