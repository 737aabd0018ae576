"""Tuning: ``HalvingSearch`` against pyspark's ``TrainValidationSplit`` on the same grid,
rows, split and evaluator, one run each on the same session (``local-cluster[2,1,2048]``,
each fit one worker, both two trials at once).

Data: scikit-learn's digits (1,797 8x8 images shipped with the package), scaled to [0, 1],
in a Parquet table (as a Spark user's data is), fitted with ``inputMode="parquet"`` (each
fit's copy of the rows is written once and reused by the later fits of the same rows).
Grid: 27 points, learning rates from diverging (3.0) to too small (1e-5) times three
widths of a small convolutional network. ``TrainValidationSplit`` trains every point for
``--epochs`` epochs and refits the best on all rows (as it does); the search trains every
point ``--min-epochs`` epochs and promotes the best third of each rung, continuing from its
checkpoint, up to ``--epochs``. The search validates on TrainValidationSplit's own rows:
by default its metric is the fits' ``val_accuracy`` on them (``validationCol`` made as
TrainValidationSplit draws its split: ``rand(seed) >= trainRatio``); with ``--evaluator``
it scores them with the same evaluator after each rung (a scoring job per rung).
Printed: epochs trained, wall clock, the best point and its
validation accuracy for each, and the ratios (targets: epochs <= 1/5, wall clock <= 1/3,
the same best point or an accuracy within 1%).

With ``--samplers``: after ``TrainValidationSplit`` on the grid, sampled searches over the
same space (learning rate log-uniform over the grid's range, width one of the grid's)
with as many trials as the grid has points, ``sampler="random"`` against ``"tpe"``, for
``--seeds`` seeds each: the best validation accuracy, and the epochs the search had
trained (in the order its journal holds its results) when a trial first came within 0.5%
of ``TrainValidationSplit``'s best.

    .venv/bin/python bench/tuning_bench.py [--epochs 27] [--min-epochs 1]
    .venv/bin/python bench/tuning_bench.py --samplers [--epochs 9] [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402

RATES = [3.0, 1.0, 0.3, 0.1, 0.03, 0.01, 1e-3, 1e-4, 1e-5]
WIDTHS = [64, 128, 256]
BATCH = 8


def digits_cnn(hparams):
    import keras
    keras.utils.set_random_seed(0)
    width = hparams["units"]
    model = keras.Sequential([keras.Input((64,)), keras.layers.Reshape((8, 8, 1)),
                              keras.layers.Conv2D(width, 3, activation="relu", padding="same"),
                              keras.layers.Conv2D(width, 3, activation="relu", padding="same"),
                              keras.layers.Flatten(),
                              keras.layers.Dense(10, activation="softmax")])
    model.compile(optimizer=keras.optimizers.Adam(hparams["learningRate"]),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def digits_frame(spark, folder: str):
    """digits as a Parquet table of two files in ``folder``, read back."""
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    rows = [([float(v) / 16.0 for v in x], int(t)) for x, t in zip(X, y)]
    path = os.path.join(folder, "digits")
    spark.createDataFrame(rows, "features array<double>, label int").repartition(2) \
        .write.parquet(path)
    return spark.read.parquet(path)


def _setup(args):
    """The session, the scratch folder, digits, the estimator, the grid and the evaluator
    every measure here shares."""
    from pyspark.ml.evaluation import MulticlassClassificationEvaluator
    from pyspark.ml.tuning import ParamGridBuilder

    from sparktf.ml import TFEstimator

    logging.basicConfig(level=logging.WARNING)
    spark = common.session()
    folder = common.scratch("sparktf-tuning-bench-")
    frame = digits_frame(spark, folder)
    est = TFEstimator(modelFn=digits_cnn, numWorkers=1, batchSize=BATCH, epochs=args.epochs,
                      hyperParams={"units": WIDTHS[0]}, shuffle=True, seed=1, verbose=0,
                      inputMode="parquet", modelDir=folder)
    grid = ParamGridBuilder().addGrid(est.learningRate, RATES) \
        .addGrid(est.hyperParams, [{"units": w} for w in WIDTHS]).build()
    return (spark, folder, frame, est, grid,
            MulticlassClassificationEvaluator(metricName="accuracy"))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=27)
    parser.add_argument("--min-epochs", type=int, default=1)
    parser.add_argument("--evaluator", action="store_true",
                        help="the search scores the held-out rows with the evaluator")
    parser.add_argument("--samplers", action="store_true",
                        help="sampled searches, random against TPE, after TrainValidationSplit")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args(argv)
    if args.samplers:
        return samplers(args)

    from pyspark.ml.tuning import TrainValidationSplit
    from pyspark.sql import functions as F

    from sparktf.ml.tuning import HalvingSearch

    spark, folder, frame, est, grid, evaluator = _setup(args)
    split = dict(trainRatio=0.75, seed=7, parallelism=2)

    def name(param_map) -> str:
        return (f"learningRate={param_map[est.learningRate]:g}, "
                f"units={param_map[est.hyperParams]['units']}")

    if args.evaluator:
        search = HalvingSearch(estimator=est, estimatorParamMaps=grid, evaluator=evaluator,
                               **split)
        rows = frame
    else:  # TrainValidationSplit's split, drawn as it draws it, held out by the fits
        search = HalvingSearch(estimator=est.copy({est.validationCol: "held"}),
                               estimatorParamMaps=grid, metric="val_accuracy",
                               parallelism=split["parallelism"])
        rows = frame.select("*", (F.rand(split["seed"]) >= split["trainRatio"]).alias("held"))
    search.setParams(minEpochs=args.min_epochs, maxEpochs=args.epochs, reductionFactor=3)
    found, search_s = common.timed(search.fit, rows)
    search_epochs = sum(r["epochs"] for r in found.trialRecords)
    best = next(r for r in found.trialRecords if r["trial"] == found.bestTrial)
    search_best = (name(grid[found.bestTrial]), best["metrics"][-1], best["rungEpochs"][-1])

    tvs = TrainValidationSplit(estimator=est, estimatorParamMaps=grid, evaluator=evaluator,
                               **split)
    oracle, tvs_s = common.timed(tvs.fit, frame)
    metrics = list(oracle.validationMetrics)
    at = max(range(len(metrics)), key=lambda i: metrics[i])
    tvs_epochs = args.epochs * (len(grid) + 1)  # every point, then the refit of the best

    for r in found.trialRecords:
        print(f"  trial {r['trial']:2d} {name(grid[r['trial']]):36s} epochs {r['epochs']:2d} "
              f"metric {' '.join(f'{m:.4f}' for m in r['metrics']):28s} tvs "
              f"{metrics[r['trial']]:.4f}  {r['stopReason'][:60]}")
    print(f"grid: {len(grid)} points ({len(RATES)} learning rates x {len(WIDTHS)} widths), "
          f"digits {frame.count()} rows, epochs {args.epochs}, batch {BATCH}")
    print(f"TrainValidationSplit: {tvs_epochs} epochs ({args.epochs} x {len(grid)} + the "
          f"refit), {tvs_s:.0f} s, best {name(grid[at])}: accuracy {metrics[at]:.4f}")
    print(f"HalvingSearch:        {search_epochs} epochs, {search_s:.0f} s, best "
          f"{search_best[0]}: accuracy {search_best[1]:.4f} after {search_best[2]} epochs")
    print(f"  its trial of TrainValidationSplit's best: "
          f"{found.trialRecords[at]['metrics']} at {found.trialRecords[at]['rungEpochs']} "
          f"epochs ({found.trialRecords[at]['stopReason']})")
    print(f"ratios (search / TrainValidationSplit): epochs {search_epochs / tvs_epochs:.3f} "
          f"(target <= 0.2), wall clock {search_s / tvs_s:.3f} (target <= 0.333), best "
          f"accuracy {search_best[1] / metrics[at]:.4f} (target >= 0.99), same best point: "
          f"{found.bestTrial == at}")
    spark.stop()


def _epochs_to_reach(folder: str, threshold: float) -> int | None:
    """The epochs the search in ``folder`` had trained, its results taken in its journal's
    order, when a trial's ``val_accuracy`` first reached ``threshold`` (None: never)."""
    with open(os.path.join(folder, "search.json")) as f:
        events = json.load(f)["events"]
    trained, started = 0, {}
    for event in events:
        if event["kind"] == "start":
            started[event["trial"]] = event["epochs"]
        elif event["kind"] == "report":
            start, end = started[event["trial"]]
            accuracy = event["history"]["val_accuracy"]
            for epoch in range(start, end):
                trained += 1
                if accuracy[epoch] >= threshold:
                    return trained
    return None


def samplers(args) -> None:
    """TrainValidationSplit's best on the grid, then random against TPE over its space."""
    from pyspark.ml.tuning import TrainValidationSplit
    from pyspark.sql import functions as F

    from sparktf.ml.tuning import HalvingSearch, choice, logUniform

    spark, folder, frame, est, grid, evaluator = _setup(args)
    tvs = TrainValidationSplit(estimator=est, estimatorParamMaps=grid, evaluator=evaluator,
                               trainRatio=0.75, seed=7, parallelism=2)
    oracle, tvs_s = common.timed(tvs.fit, frame)
    best = max(oracle.validationMetrics)
    print(f"TrainValidationSplit: {len(grid)} points x {args.epochs} epochs, {tvs_s:.0f} s, "
          f"best validation accuracy {best:.4f}; within 0.5%: >= {0.995 * best:.4f}")
    rows = frame.select("*", (F.rand(7) >= 0.75).alias("held"))
    space = {est.learningRate: logUniform(min(RATES), max(RATES)), "units": choice(WIDTHS)}
    found: dict = {}
    for sampler in ("random", "tpe"):
        for seed in args.seeds:
            run_id = f"{sampler}-{seed}"
            search = HalvingSearch(estimator=est.copy({est.validationCol: "held"}),
                                   paramDistributions=space, numTrials=len(grid),
                                   sampler=sampler, seed=seed, metric="val_accuracy",
                                   minEpochs=args.min_epochs, maxEpochs=args.epochs,
                                   reductionFactor=3, parallelism=2, runId=run_id, verbose=0)
            model, took = common.timed(search.fit, rows)
            accuracy = max(max(r["history"].get("val_accuracy") or [0.0])
                           for r in model.trialRecords)
            epochs = sum(r["epochs"] for r in model.trialRecords)
            reach = _epochs_to_reach(os.path.join(folder, run_id), 0.995 * best)
            found.setdefault(sampler, []).append((accuracy, reach, epochs, took))
            print(f"  {sampler:6s} seed {seed}: best val_accuracy {accuracy:.4f}, within 0.5% "
                  f"after {reach if reach is not None else 'never'} of {epochs} epochs, "
                  f"{took:.0f} s")
    for sampler, runs in found.items():
        reached = [r[1] for r in runs if r[1] is not None]
        print(f"{sampler:6s}: best val_accuracy mean {sum(r[0] for r in runs) / len(runs):.4f}"
              f" (ratio to TrainValidationSplit's {sum(r[0] for r in runs) / len(runs) / best:.4f}"
              f"), within 0.5% in {len(reached)} of {len(runs)} seeds, after "
              + (f"{sum(reached) / len(reached):.0f}" if reached else "-") + " epochs on mean")
    spark.stop()


if __name__ == "__main__":
    main()
