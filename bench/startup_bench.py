"""The fixed cost of a sparktf job, against Spark's own floor for the same kind of job.

    .venv/bin/python bench/startup_bench.py [--repeats 3] [--skip-feed] [--skip-cv]
                                            [--skip-cold] [--only-cv]

Side by side in one run, on local-cluster[2,1,2048] (2 executors, 1 core each):

* floor  - Spark's own: a 2-task barrier ``mapInArrow`` over 1,000 cached rows whose
           tasks do one ``allGather`` and nothing else
* run    - ``sparktf.run(spark, noop, numWorkers=2)``: the function does nothing
* fit    - a 1-epoch ``TFEstimator.fit`` of a one-layer model on the 1,000 rows
           (2 workers); Keras's own ``fit`` of the same model in this process for scale
* feed   - ``sparktf.run`` with ``df=`` reading 2M and 6M rows into TensorFlow, against
           the Arrow ceiling (bench/feed_bench.py's two paths)
* cv     - ``CrossValidator``, 3 folds x 2 grid points, on scikit-learn's digits

run, fit and cv with spare processes on (the default: a Python worker's spare has
TensorFlow imported and forks each task's process) and off
(``spark.sparktf.spareIdleTimeout=0``: every task starts a fresh process, as before
spares existed). Warm figures are medians of ``--repeats`` jobs after one unmeasured
job of the same kind; cold figures are the first job of a new SparkSession. The
phase tables show where a warm job's time goes: seconds since the driver's first
phase (``fit called`` or ``launch``) when each phase was reached, on the driver and
on each task.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

ROWS = 1_000
SPARE_CONF = "spark.sparktf.spareIdleTimeout"
TARGETS = {"run": 1.3, "fit": 2.0}  # at most this many floors, warm, spares on


def floor_task(batches):
    import pyarrow as pa
    from pyspark import BarrierTaskContext

    barrier = BarrierTaskContext.get()
    n = sum(b.num_rows for b in batches)
    barrier.allGather(str(n))
    yield pa.RecordBatch.from_pydict({"n": [n]})


def noop(args, ctx):
    return None


def one_layer(hparams):
    import keras
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    return model


def digits_mlp(hparams):
    import keras
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(10, activation="softmax")])
    model.compile(optimizer=keras.optimizers.Adam(hparams["learningRate"]),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def phase_capture() -> common.Captured:
    """Collects sparktf's phase records: (rank or None, name, time)."""
    return common.Captured("sparktf.phases", "phase", logging.DEBUG)


def small_frame(spark):
    from pyspark.sql import functions as F
    df = spark.range(0, ROWS, 1, 2).select(
        F.array(*[F.randn(seed=i).cast("float") for i in range(4)]).alias("features"))
    df = df.withColumn("label", F.col("features")[0] * 2.0 + 1.0).cache()
    assert df.count() == ROWS
    return df


def jobs(spark, df):
    """name -> a callable running one job of that kind."""
    import sparktf
    from sparktf.ml import TFEstimator

    est = TFEstimator(modelFn=one_layer, featuresCol="features", numWorkers=2, epochs=1,
                      batchSize=100)
    return {"floor": lambda: df.mapInArrow(floor_task, "n long", barrier=True).collect(),
            "run": lambda: sparktf.run(spark, noop, numWorkers=2),
            "fit": lambda: est.fit(df)}


def broken(hparams):
    raise RuntimeError("a broken modelFn (the bench's failing fit)")


def failure_times(spark, df, repeats: int) -> dict[str, float]:
    """After failures: median seconds of a refused fit (a null label, found by the tasks),
    of a failing fit (modelFn raises), of a good fit right after a failing one, and of a
    good fit after a good one (the warm fit)."""
    from pyspark.sql import functions as F

    import sparktf
    from sparktf.ml import TFEstimator

    good = TFEstimator(modelFn=one_layer, featuresCol="features", numWorkers=2, epochs=1,
                       batchSize=100)
    bad = good.copy({good.modelFn: broken})
    nulls = df.withColumn("label", F.when(F.col("label") > 1e9, 0.0)).cache()  # all null
    nulls.count()

    def timed(job, expected=None):
        started = time.perf_counter()
        try:
            job()
        except Exception as e:  # noqa: BLE001 - only the expected failure is timed
            if expected is None or not isinstance(e, expected):
                raise
        return time.perf_counter() - started

    good.fit(df)
    times: dict[str, list[float]] = {"refused fit (null labels)": [],
                                     "failing fit (modelFn raises)": [],
                                     "fit right after a failing fit": [],
                                     "fit right after a fit": []}
    for _ in range(repeats):
        times["refused fit (null labels)"].append(
            timed(lambda: good.fit(nulls), sparktf.InvalidInputError))
        times["failing fit (modelFn raises)"].append(
            timed(lambda: bad.fit(df), sparktf.TaskFailedError))
        times["fit right after a failing fit"].append(timed(lambda: good.fit(df)))
        times["fit right after a fit"].append(timed(lambda: good.fit(df)))
    nulls.unpersist()
    return {k: statistics.median(v) for k, v in times.items()}


def set_spares(spark, on: bool) -> None:
    if on:
        spark.conf.unset(SPARE_CONF)
    else:
        spark.conf.set(SPARE_CONF, "0")


def warm_times(run_job, repeats: int, phases: common.Captured) -> tuple[float, list[tuple]]:
    """Median seconds of ``repeats`` jobs after an unmeasured one; the last one's phases."""
    run_job()
    times = []
    for _ in range(repeats):
        phases.records.clear()
        started = time.perf_counter()
        run_job()
        times.append(time.perf_counter() - started)
    return statistics.median(times), list(phases.records)


def keras_fit_seconds(df) -> float:
    import numpy as np
    rows = df.collect()
    X = np.array([r.features for r in rows], "float32")
    y = np.array([r.label for r in rows], "float32")
    model = one_layer({})
    model.fit(X, y, batch_size=100, epochs=1, verbose=0)  # traced once, as a warm job is
    model = one_layer({})
    started = time.perf_counter()
    model.fit(X, y, batch_size=100, epochs=1, verbose=0)
    return time.perf_counter() - started


def cold_times(kinds) -> dict[str, float]:
    """The first job of a new SparkSession, one session per kind."""
    out = {}
    for kind in kinds:
        spark = common.session()
        try:
            df = small_frame(spark)
            started = time.perf_counter()
            jobs(spark, df)[kind]()
            out[kind] = time.perf_counter() - started
        finally:
            spark.stop()
    return out


def cv_seconds(spark, spares: bool) -> tuple[float, list[float]]:
    from pyspark.ml.evaluation import MulticlassClassificationEvaluator
    from pyspark.ml.functions import array_to_vector
    from pyspark.ml.tuning import CrossValidator, ParamGridBuilder
    from sklearn.datasets import load_digits

    from sparktf.ml import TFEstimator

    X, y = load_digits(return_X_y=True)
    df = spark.createDataFrame([((x / 16.0).tolist(), int(t)) for x, t in zip(X, y)],
                               "x array<double>, label long")
    df = df.withColumn("features", array_to_vector("x")).drop("x").cache()
    df.count()
    est = TFEstimator(modelFn=digits_mlp, featuresCol="features", numWorkers=2, epochs=3,
                      batchSize=64)
    grid = ParamGridBuilder().addGrid(est.learningRate, [1e-3, 1e-2]).build()
    cv = CrossValidator(estimator=est, estimatorParamMaps=grid, numFolds=3, seed=7,
                        evaluator=MulticlassClassificationEvaluator(metricName="accuracy"))
    set_spares(spark, spares)
    started = time.perf_counter()
    model = cv.fit(df)
    seconds = time.perf_counter() - started
    df.unpersist()
    return seconds, list(model.avgMetrics)


def phase_table(title: str, records: list[tuple]) -> None:
    """Seconds since the driver's first phase, per phase, for the driver and each rank."""
    start = min((t for rank, _, t in records if rank is None), default=None)
    if start is None:
        print(f"\n{title}: no phases recorded")
        return
    ranks = sorted({rank for rank, _, _ in records if rank is not None})
    names: list[str] = []
    at: dict[tuple, float] = {}
    for rank, name, t in sorted(records, key=lambda r: r[2]):
        if name not in names:
            names.append(name)
        at.setdefault((rank, name), t - start)
    header = f"  {'phase':24}{'driver':>9}" + "".join(f"{'rank ' + str(r):>9}" for r in ranks)
    print(f"\n{title} (seconds since the first)\n{header}")
    for name in names:
        cells = [at.get((who, name)) for who in [None, *ranks]]
        print(f"  {name:24}" + "".join(f"{c:9.2f}" if c is not None else f"{'':9}"
                                        for c in cells))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--feed-rows", type=int, nargs=2, default=[2_000_000, 6_000_000])
    parser.add_argument("--skip-feed", action="store_true")
    parser.add_argument("--skip-cv", action="store_true")
    parser.add_argument("--skip-cold", action="store_true")
    parser.add_argument("--only-feed", action="store_true",
                        help="only the feed against its ceiling (with its phase tables)")
    parser.add_argument("--only-cv", action="store_true",
                        help="only the CrossValidator with the default settings (e.g. to "
                             "time an older sparktf with PYTHONPATH)")
    parser.add_argument("--only-failures", action="store_true",
                        help="only the jobs around failures: a refused fit, a failing fit, "
                             "the fit after it")
    args = parser.parse_args()
    logging.getLogger("sparktf").setLevel(logging.WARNING)  # keep the table readable

    if args.only_failures:
        logging.getLogger("sparktf").setLevel(logging.CRITICAL)  # the failures are expected
        spark = common.session()
        try:
            after = failure_times(spark, small_frame(spark), args.repeats)
        finally:
            spark.stop()
        warm = after["fit right after a fit"]
        print(f"\njobs around failures, 2 tasks, {ROWS:,} cached rows; median of "
              f"{args.repeats}")
        for key, seconds in after.items():
            print(f"  {key:32}{seconds:8.2f} s{seconds / warm:8.2f} x a warm fit")
        return 0

    if args.only_cv:
        spark = common.session()
        try:
            seconds, metrics = cv_seconds(spark, spares=True)
        finally:
            spark.stop()
        print(f"CrossValidator 3 folds x 2 points on digits: {seconds:.1f} s "
              f"(avgMetrics {', '.join(f'{m:.3f}' for m in metrics)})")
        return 0

    if args.only_feed:
        spark = common.session()
        try:
            print_feed(spark, args.feed_rows)
        finally:
            spark.stop()
        return 0

    spark = common.session()
    warm: dict[str, float] = {}
    phases_of: dict[str, list] = {}
    try:
        df = small_frame(spark)
        run_job = jobs(spark, df)
        with phase_capture() as phases:
            warm["floor"], _ = warm_times(run_job["floor"], args.repeats, phases)
            for spares in (True, False):
                set_spares(spark, spares)
                tag = "spares on" if spares else "spares off"
                for kind in ("run", "fit"):
                    warm[f"{kind}, {tag}"], phases_of[f"{kind}, {tag}"] = warm_times(
                        run_job[kind], args.repeats, phases)
            set_spares(spark, True)
        print_warm(warm, keras_fit_seconds(df), args.repeats)
        if not args.skip_feed:
            print_feed(spark, args.feed_rows)
        if not args.skip_cv:
            cv = {spares: cv_seconds(spark, spares) for spares in (False, True)}
            set_spares(spark, True)
            off, on = cv[False][0], cv[True][0]
            print("\nCrossValidator, 3 folds x 2 points, digits (1,797 rows), 3 epochs, "
                  "2 workers")
            print(f"  spares off {off:7.1f} s   spares on {on:7.1f} s   on / off "
                  f"{on / off:5.2f}   (avgMetrics on: "
                  f"{', '.join(f'{m:.3f}' for m in cv[True][1])})", flush=True)
        for key, records in phases_of.items():
            phase_table(f"phases of a warm {key}", records)
    finally:
        spark.stop()
    if not args.skip_cold:
        cold = cold_times(["floor", "run", "fit"])
        print("\ncold: the first job of a new SparkSession (spares on)")
        for kind, seconds in cold.items():
            print(f"  {kind:6}{seconds:8.2f} s{seconds / cold['floor']:8.2f} x the cold floor")
    return 0


def print_warm(warm: dict[str, float], keras_s: float, repeats: int) -> None:
    floor = warm["floor"]
    print(f"\nfixed cost, local-cluster[2,1,2048], 2 tasks, {ROWS:,} cached rows; warm = "
          f"median of {repeats}")
    print(f"  {'job':34}{'warm s':>8}{'/ floor':>9}{'target':>9}")
    print(f"  {'floor: barrier mapInArrow+allGather':34}{floor:8.2f}{1.0:9.2f}")
    for key, seconds in warm.items():
        if key == "floor":
            continue
        kind = key.split(",")[0]
        on = key.endswith("spares on")
        target = f"<= {TARGETS[kind]:g}" if on else ""
        met = "" if not on else (" met" if seconds / floor <= TARGETS[kind] else " NOT met")
        print(f"  {'sparktf ' + key:34}{seconds:8.2f}{seconds / floor:9.2f}{target:>9}{met}")
    print(f"  {'keras Model.fit, one process':34}{keras_s:8.2f}{keras_s / floor:9.2f}",
          flush=True)


def print_feed(spark, sizes) -> None:
    import cloudpickle
    import feed_bench
    from pyspark import cloudpickle as spark_cloudpickle
    for pickler in (cloudpickle, spark_cloudpickle):  # executors cannot import it
        pickler.register_pickle_by_value(feed_bench)
    print("\nfeed end to end, 2 workers, 28-float rows (rows/s)")
    print(f"  {'rows':>10}{'ceiling':>12}{'sparktf':>12}{'ratio':>8}")
    feed_bench.warm_up(spark)
    phases_of = {}
    for rows in sorted(sizes):
        big = common.higgs_like(spark, rows).cache()
        assert big.count() == rows
        ceiling = feed_bench.run_ceiling(big, rows)
        with phase_capture() as phases:
            ours = feed_bench.run_sparktf(spark, big, rows)[0]
        phases_of[rows] = list(phases.records)
        big.unpersist()
        note = "  (target >= 0.5)" if rows == min(sizes) else ""
        print(f"  {rows:10,}{ceiling:12,.0f}{ours:12,.0f}{ours / ceiling:8.2f}{note}",
              flush=True)
    for rows, records in phases_of.items():
        phase_table(f"phases of the feed, {rows:,} rows", records)


if __name__ == "__main__":
    sys.exit(main())
