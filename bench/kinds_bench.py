"""Column kinds cost numbers nothing, and how fast strings and sequences reach TensorFlow.

    .venv/bin/python bench/kinds_bench.py [--base REF] [--rows 2000000] [--rounds 2]
                                          [--text-rows 300000]

Side by side in one run, on local-cluster[2,1,2048]:

* numbers, this checkout against ``--base`` (a git commit, checked out in a temporary
  worktree; default: the commit before the column-kinds work): the feed of
  ``feed_bench.py`` (sparktf.run, ctx.dataset() over 28-float rows, end to end) and the
  warm scoring of ``inference_bench.py`` (TFModel.transform of its MLP), each in a fresh
  process per round, rounds alternating, best round of each; printed as head / base.
* strings + variable-length sequences: a table with a string column and token ids of
  1 to 30 per row, fed through ``ctx.dataset()`` (a ``tf.RaggedTensor``) and trained with
  ``TFEstimator.fit`` (2 workers; StringLookup + Embedding(mask_zero) model), against
  Keras's own ``model.fit`` on the same rows in one process (the rows collected, the
  sequences padded with ``pad_sequences``, both timed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BASE = "f6bb1ce"  # the last commit before the column-kinds work (issue 25)
BATCH = 4096


def count_rows(args, ctx):
    import time

    import sparktf
    started = time.perf_counter()
    n = 0
    for batch in ctx.dataset(args["batch"]):
        n += int(batch[args["column"]].shape[0])
    return n, time.perf_counter() - started, sparktf.__file__


def numbers(rows: int) -> dict:
    """One round of the numeric feed and warm scoring, with whichever sparktf imports."""
    from pyspark.sql import functions as F

    import sparktf
    from sparktf.ml import TFModel

    sys.path.insert(0, HERE)
    import inference_bench

    spark = common.session()
    try:
        df = common.higgs_like(spark, rows).cache()
        df.count()
        sparktf.run(spark, count_rows, {"batch": BATCH // 2, "column": "features"},
                    numWorkers=2, df=common.higgs_like(spark, 50_000))  # warm
        out, feed_s = common.timed(sparktf.run, spark, count_rows,
                                   {"batch": BATCH // 2, "column": "features"},
                                   numWorkers=2, df=df)
        assert sum(n for n, _, _ in out) == rows
        path = os.path.join(common.scratch("sparktf-bench-"), "mlp")
        inference_bench.export_mlp(path)
        model = TFModel(modelPath=path, inputMapping={"features": "features"},
                        outputMapping={"score": "score"}, batchSize=BATCH)
        scored = model.transform(df.select("features"))
        rates = []
        for _ in range(2):  # cold, then warm
            _, seconds = common.timed(lambda: scored.agg(F.sum("score")).collect())
            rates.append(rows / seconds)
        return {"feed": rows / feed_s, "score_warm": rates[1], "sparktf": sparktf.__file__,
                "executor_sparktf": out[0][2]}
    finally:
        spark.stop()


def _round(checkout: str, rows: int) -> dict:
    env = dict(os.environ, PYTHONPATH=checkout)
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--numbers-round",
                           str(rows)], cwd=checkout, env=env, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("ROUND ")]
    if done.returncode or not lines:
        raise RuntimeError(f"round in {checkout} failed:\n{done.stderr[-3000:]}")
    result = json.loads(lines[-1][6:])
    for key in ("sparktf", "executor_sparktf"):  # both sides ran the checkout's sparktf
        assert result[key].startswith(checkout), (key, result[key], checkout)
    return result


def side_by_side(base: str, rows: int, rounds: int) -> None:
    worktree = tempfile.mkdtemp(prefix="sparktf-base-")
    subprocess.run(["git", "worktree", "add", "--detach", worktree, base], cwd=ROOT,
                   check=True, capture_output=True)
    try:
        seen: dict = {"head": {}, "base": {}}
        for i in range(rounds):
            for side, checkout in (("base", worktree), ("head", ROOT)) if i % 2 == 0 else \
                    (("head", ROOT), ("base", worktree)):
                result = _round(checkout, rows)
                print(f"  round {i + 1} {side}: feed {result['feed']:,.0f} rows/s, warm "
                      f"scoring {result['score_warm']:,.0f} rows/s", flush=True)
                for key in ("feed", "score_warm"):
                    seen[side].setdefault(key, []).append(result[key])
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", worktree], cwd=ROOT,
                       capture_output=True)
    import statistics
    print(f"\nnumbers, {rows:,} 28-float rows, {rounds} rounds each, rows/s")
    print(f"  {'':34}{'':>8}{'base ' + base:>16}{'this checkout':>16}{'head / base':>13}")
    for key, name in (("feed", "feed (ctx.dataset, end to end)"),
                      ("score_warm", "TFModel.transform, warm")):
        for how, pick in (("best", max), ("median", statistics.median)):
            b, h = pick(seen["base"][key]), pick(seen["head"][key])
            print(f"  {name if how == 'best' else '':34}{how:>8}{b:16,.0f}{h:16,.0f}"
                  f"{h / b:12.3f}x  (target >= 0.95)")


def text_frame(spark, rows: int):
    from pyspark.sql import functions as F

    ids = spark.range(0, rows, 1, 2)
    length = (F.abs(F.hash("id")) % 30 + 1).cast("int")
    return ids.select(
        F.concat(F.lit("city"), (F.col("id") % 50).cast("string")).alias("city"),
        F.expr("transform(sequence(1, 1 + abs(hash(id)) % 30), i -> "
               "cast((id * 7 + i * 13) % 999 + 1 as bigint))").alias("tokens"),
        (F.col("id") % 2).cast("double").alias("label")).where(length > 0)


def text_model(hp):
    import keras
    keras.utils.set_random_seed(0)
    city = keras.Input((1,), dtype="string", name="city")
    tokens = keras.Input((None,), dtype="int64", name="tokens")
    c = keras.layers.Flatten()(keras.layers.Embedding(52, 4)(
        keras.layers.StringLookup(vocabulary=[f"city{i}" for i in range(50)])(city)))
    t = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(1000, 8,
                                                                     mask_zero=True)(tokens))
    out = keras.layers.Dense(1, activation="sigmoid")(keras.layers.Concatenate()([c, t]))
    model = keras.Model([city, tokens], out)
    model.compile(keras.optimizers.Adam(1e-3), "binary_crossentropy")
    return model


def strings_and_sequences(rows: int, epochs: int = 2) -> None:
    import keras
    import numpy as np

    import sparktf
    from sparktf.ml import TFEstimator

    spark = common.session()
    try:
        df = text_frame(spark, rows).cache()
        assert df.count() == rows
        sparktf.run(spark, count_rows, {"batch": 1024, "column": "tokens"}, numWorkers=2,
                    df=text_frame(spark, 20_000))  # warm
        out, feed_s = common.timed(sparktf.run, spark, count_rows,
                                   {"batch": 1024, "column": "tokens"}, numWorkers=2, df=df)
        assert sum(n for n, _, _ in out) == rows
        est = TFEstimator(modelFn=text_model, numWorkers=2, epochs=epochs, batchSize=1024,
                          verbose=0)
        _, fit_s = common.timed(est.fit, df)

        def keras_fit():
            pdf = df.toPandas()
            x = {"city": pdf["city"].to_numpy(dtype=object),
                 "tokens": keras.utils.pad_sequences(list(pdf["tokens"]), padding="post",
                                                     dtype="int64")}
            text_model({}).fit(x, pdf["label"].to_numpy(np.float32), batch_size=1024,
                               epochs=epochs, verbose=0)
        _, single_s = common.timed(keras_fit)
    finally:
        spark.stop()
    print(f"\nstrings + variable-length sequences (1-30 ids), {rows:,} rows, rows/s")
    print(f"  sparktf.run, ctx.dataset() (RaggedTensor), end to end  {rows / feed_s:12,.0f}")
    print(f"  TFEstimator.fit, 2 workers, {epochs} epochs               "
          f"{rows * epochs / fit_s:12,.0f}")
    print(f"  keras fit, one process (collect + pad + fit), {epochs} epochs "
          f"{rows * epochs / single_s:10,.0f}")
    print(f"  sparktf fit / keras fit                                  {single_s / fit_s:8.2f}x")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", default=BASE)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--text-rows", type=int, default=300_000)
    parser.add_argument("--numbers-round", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.numbers_round:
        print("ROUND " + json.dumps(numbers(args.numbers_round)), flush=True)
        return 0
    side_by_side(args.base, args.rows, args.rounds)
    strings_and_sequences(args.text_rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
