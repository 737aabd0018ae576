"""Per-worker peak memory of one TFEstimator epoch at 1M and 10M Higgs-shaped rows.

    .venv/bin/python bench/memory_bench.py [--rows 1000000 10000000]

Each size runs in a fresh local-cluster[2,1,2048] session. The figure per worker
is its feeder (the Spark Python worker that spills the partition) plus its
TensorFlow process; the target is 10M / 1M <= 1.5.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def measure(rows: int) -> dict:
    from sparktf.ml import TFEstimator

    spark = common.session()
    try:
        df = common.higgs_like(spark, rows)
        est = TFEstimator(modelFn=common.higgs_mlp, numWorkers=2, epochs=1, batchSize=4096,
                          learningRate=1e-3)
        with common.StatsCapture() as capture:
            model, seconds = common.timed(est.fit, df)
        per_worker = {s["rank"]: s["feeder_peak_rss_mb"] + s["task_peak_rss_mb"]
                      for s in capture.stats}
        return {"rows": rows, "seconds": seconds, "stats": capture.stats,
                "peak_mb": max(per_worker.values()),
                "loss": model.getHistory()["loss"][-1]}
    finally:
        spark.stop()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    args = parser.parse_args()
    results = [measure(n) for n in args.rows]
    print("\nrows        fit s   rank  feeder MB  TF proc MB  worker MB")
    for r in results:
        for s in sorted(r["stats"], key=lambda s: s["rank"]):
            print(f"{r['rows']:>10,}  {r['seconds']:6.1f}  {s['rank']:>4}  "
                  f"{s['feeder_peak_rss_mb']:9.0f}  {s['task_peak_rss_mb']:10.0f}  "
                  f"{s['feeder_peak_rss_mb'] + s['task_peak_rss_mb']:9.0f}")
    if len(results) >= 2:
        ratio = results[-1]["peak_mb"] / results[0]["peak_mb"]
        print(f"\npeak per-worker RSS {results[-1]['rows']:,} / {results[0]['rows']:,} rows: "
              f"{ratio:.2f}x (target <= 1.5x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
