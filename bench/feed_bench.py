"""Feed rate into TensorFlow from a cached DataFrame, and fit time against one process.

    .venv/bin/python bench/feed_bench.py [--rows 2000000 6000000] [--tfos-rows 200000]
    .venv/bin/python bench/feed_bench.py --ratios 500000 2000000 6000000 [--repeats 3]
        [--executors 2]

Side by side in one run, on local-cluster[2,1,2048] (2 executors, 1 core each),
28-float rows (array<float>) plus a label:

* ceiling  - the cached DataFrame converted Spark -> Arrow -> numpy inside a barrier
             stage, no TensorFlow
* sparktf  - sparktf.run with df=: every row reaches TensorFlow as tensors through
             ctx.dataset(), end to end (cluster formation, TF start-up included)
* tfos     - tensorflowonspark 2.2.5, InputMode.SPARK: TFCluster.run + train(rdd)
* parquet  - the same job reading a Parquet copy with pyarrow.dataset (inputMode="parquet"),
             the one-time write timed apart
* fit      - TFEstimator.fit (2 workers) against keras Model.fit in one process on
             the same rows, same model, same epochs

Ceiling and sparktf run at two sizes: the end-to-end rate at the larger one, and a
straight line through both (time = fixed + rows / marginal rate), which separates
the fixed start-up cost (for sparktf mostly importing TensorFlow in each task) from
the feed rate itself.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

BATCH = 4096


def ceiling_task(batches):
    import pyarrow as pa
    from pyspark import BarrierTaskContext

    from sparktf.runtime.feed import shards

    BarrierTaskContext.get()
    n = 0
    for b in batches:
        shards.column_to_numpy(b.column("features"), "features")
        shards.column_to_numpy(b.column("label"), "label")
        n += b.num_rows
    yield pa.RecordBatch.from_pydict({"n": [n]})


def consume(args, ctx):
    import time

    started = time.perf_counter()
    n = 0
    for batch in ctx.dataset(args["batch"], stream=args.get("stream", False)):
        # the eager tensor's static shape: counting rows with ops (tf.shape, a slice, int)
        # cost the consumer 0.3 s per million rows, as much as the dataset itself
        n += batch["features"].shape[0]
    ctx.phase("dataset read")
    return n, time.perf_counter() - started


def tfos_map_fun(args, ctx):
    import numpy as np
    from tensorflowonspark import TFNode

    feed = TFNode.DataFeed(ctx.mgr, True)
    while not feed.should_stop():
        batch = feed.next_batch(args["batch"])
        if len(batch) == 0:
            break
        np.asarray([row[0] for row in batch], dtype=np.float32)


def warm_up(spark, rows: int = 100_000, workers: int = 2) -> None:
    """One small job of each path first: the Python workers (and sparktf's spares) start
    outside the measured runs."""
    df = common.higgs_like(spark, rows, workers).cache()
    df.count()
    run_ceiling(df, rows)
    run_sparktf(spark, df, rows, workers)
    df.unpersist()


def ratios(sizes: list[int], repeats: int, executors: int) -> None:
    """At each size: the ceiling and sparktf.run + ctx.dataset() with and without streaming,
    ``repeats`` rounds alternating, medians; a fresh cache per size."""
    import statistics

    spark = common.session(f"local-cluster[{executors},1,2048]")
    try:
        warm_up(spark, workers=executors)
        print(f"\nfeed, {executors} worker(s) on local-cluster[{executors},1,2048], rows/s, "
              f"median of {repeats}")
        print(f"  {'rows':>10}{'ceiling':>12}{'streamed':>12}{'spilled first':>15}"
              f"{'streamed/ceiling':>18}{'spilled/ceiling':>17}")
        for rows in sizes:
            df = common.higgs_like(spark, rows, executors).cache()
            assert df.count() == rows
            got: dict[str, list] = {"ceiling": [], "stream": [], "spill": []}
            for _ in range(repeats):
                got["ceiling"].append(run_ceiling(df, rows))
                got["stream"].append(run_sparktf(spark, df, rows, executors, True)[0])
                got["spill"].append(run_sparktf(spark, df, rows, executors, False)[0])
            c, st, sp = (statistics.median(got[k]) for k in ("ceiling", "stream", "spill"))
            print(f"  {rows:>10,}{c:>12,.0f}{st:>12,.0f}{sp:>15,.0f}{st / c:>18.2f}"
                  f"{sp / c:>17.2f}", flush=True)
            df.unpersist()
    finally:
        spark.stop()


def run_ceiling(df, rows):
    out, seconds = common.timed(lambda: df.mapInArrow(ceiling_task, "n long",
                                                      barrier=True).collect())
    assert sum(r.n for r in out) == rows
    return rows / seconds


def run_sparktf(spark, df, rows, workers=2, stream=False):
    import sparktf
    out, seconds = common.timed(sparktf.run, spark, consume,
                                {"batch": BATCH // 2, "stream": stream},
                                numWorkers=workers, df=df)
    assert sum(n for n, _ in out) == rows
    in_task = rows / max(s for _, s in out)
    return rows / seconds, in_task


def run_parquet(spark, df, rows):
    """inputMode='parquet': write once (timed apart), then workers read their files."""

    from sparktf._driver import launch, pickling

    uri = os.path.join(common.scratch("sparktf-bench-"), "data")
    _, write_s = common.timed(lambda: df.repartition(4).write.parquet(uri))
    payload = pickling.pickle_main(consume, {"batch": BATCH // 2})
    stage = launch.LaunchSpec(payload, 2, columns=("features", "label"), parquet_uri=uri)
    out, seconds = common.timed(launch.launch, spark, stage)
    assert sum(n for n, _ in out) == rows
    return rows / seconds, write_s


def run_tfos(spark, df, rows):
    from tensorflowonspark import TFCluster

    rdd = df.limit(rows).repartition(2).rdd.map(lambda r: (list(r.features), r.label)).cache()
    assert rdd.count() == rows

    def feed_all():
        cluster = TFCluster.run(spark.sparkContext, tfos_map_fun, {"batch": BATCH // 2}, 2, 0,
                                False, TFCluster.InputMode.SPARK)
        cluster.train(rdd, num_epochs=1)
        cluster.shutdown()

    _, seconds = common.timed(feed_all)
    rdd.unpersist()
    return rows / seconds


def run_fit(spark, rows, epochs):
    import numpy as np

    from sparktf.ml import TFEstimator

    df = common.higgs_like(spark, rows).cache()
    df.count()
    est = TFEstimator(modelFn=common.higgs_mlp, numWorkers=2, epochs=epochs, batchSize=BATCH,
                      learningRate=1e-3)
    model, fit_s = common.timed(est.fit, df)
    pdf = df.toPandas()
    X = np.stack(pdf["features"].to_numpy()).astype("float32")
    y = pdf["label"].to_numpy()
    single = common.higgs_mlp({"learningRate": 1e-3})
    history, single_s = common.timed(single.fit, X, y, epochs=epochs, batch_size=BATCH,
                                     verbose=0)
    df.unpersist()
    return fit_s, single_s, model.getHistory()["loss"][-1], history.history["loss"][-1]


def _line(n1: int, n2: int, rate1: float, rate2: float) -> tuple[float, float]:
    """(fixed seconds, marginal rows/s) of the line through (n1, n1/rate1), (n2, n2/rate2)."""
    t1, t2 = n1 / rate1, n2 / rate2
    marginal = (n2 - n1) / (t2 - t1)
    return t1 - n1 / marginal, marginal


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, nargs=2, default=[2_000_000, 6_000_000])
    parser.add_argument("--tfos-rows", type=int, default=200_000)
    parser.add_argument("--fit-rows", type=int, default=1_000_000)
    parser.add_argument("--fit-epochs", type=int, default=3)
    parser.add_argument("--only-fit", action="store_true",
                        help="measure only the fit against keras Model.fit")
    parser.add_argument("--ratios", type=int, nargs="+", metavar="ROWS",
                        help="only the ceiling against sparktf, streamed and spilled first, "
                             "at these sizes")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--executors", type=int, default=2)
    args = parser.parse_args()
    if args.ratios:
        ratios(args.ratios, args.repeats, args.executors)
        return 0
    if args.only_fit:
        spark = common.session()
        try:
            _print_fit(args, *run_fit(spark, args.fit_rows, args.fit_epochs))
        finally:
            spark.stop()
        return 0

    spark = common.session()
    small, large = sorted(args.rows)
    try:
        warm_up(spark)
        rates = {}
        for rows in (small, large):
            df = common.higgs_like(spark, rows).cache()
            assert df.count() == rows
            rates[rows] = (run_ceiling(df, rows), *run_sparktf(spark, df, rows))
            if rows == large:
                tfos = run_tfos(spark, df, args.tfos_rows) if args.tfos_rows else float("nan")
                parquet_rate, parquet_write_s = run_parquet(spark, df, rows)
            df.unpersist()
        fit_s, single_s, fit_loss, single_loss = run_fit(spark, args.fit_rows, args.fit_epochs)
    finally:
        spark.stop()

    ceiling, sparktf_e2e, sparktf_task = rates[large]
    ceiling_fixed, ceiling_rate = _line(small, large, rates[small][0], ceiling)
    ours_fixed, ours_rate = _line(small, large, rates[small][1], sparktf_e2e)
    print(f"\nfeed into TensorFlow, 2 workers, 28-float rows ({small:,} and {large:,} rows; "
          f"TensorFlowOnSpark on {args.tfos_rows:,})")
    print(f"  {'':44}{'end to end':>14}{'marginal':>14}{'fixed':>9}")
    print(f"  {'ceiling (Spark -> Arrow -> numpy, no TF)':44}{ceiling:14,.0f}"
          f"{ceiling_rate:14,.0f}{ceiling_fixed:8.1f}s")
    print(f"  {'sparktf.run, ctx.dataset() -> tensors':44}{sparktf_e2e:14,.0f}"
          f"{ours_rate:14,.0f}{ours_fixed:8.1f}s")
    print(f"  {'sparktf inside the task (file -> tensors)':44}{sparktf_task:14,.0f}")
    print(f"  {'tensorflowonspark 2.2.5 InputMode.SPARK':44}{tfos:14,.0f}")
    print(f"  {'sparktf inputMode=parquet (files -> tensors)':44}{parquet_rate:14,.0f}"
          f"   (+ {parquet_write_s:.1f} s to write the copy once)")
    print(f"  sparktf / ceiling, end to end at {large:,} rows  {sparktf_e2e / ceiling:6.2f}x")
    print(f"  sparktf / ceiling, marginal feed rate          {ours_rate / ceiling_rate:6.2f}x"
          "  (target >= 0.7)")
    print(f"  sparktf / tensorflowonspark, end to end        {sparktf_e2e / tfos:6.1f}x"
          "  (target >= 50)")
    _print_fit(args, fit_s, single_s, fit_loss, single_loss)
    return 0


def _print_fit(args, fit_s, single_s, fit_loss, single_loss) -> None:
    print(f"\nfit, {args.fit_rows:,} rows x {args.fit_epochs} epochs, MLP 28-64-1, batch {BATCH}")
    print(f"  TFEstimator.fit, 2 workers   {fit_s:7.1f} s   final loss {fit_loss:.4f}")
    print(f"  keras fit, one process       {single_s:7.1f} s   final loss {single_loss:.4f}")
    print(f"  single / sparktf time        {single_s / fit_s:6.2f}x")


if __name__ == "__main__":
    sys.exit(main())
