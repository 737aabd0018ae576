"""Scoring token arrays of many lengths (an input of length None): sparktf's default against
``TFModel(padLength=<longest>)`` on the same data and session, warm workers.

The default scores each row exactly as the row alone: a model that masks its padding
(found from its graph at export) is padded, rows grouped by length bounds; an unmasked one
is called once per distinct length per partition. ``padLength`` pads every row to the
longest, one call per batch: the baseline. Printed: rows/s of each, their ratio (target
>= 1.0 for the unmasked pooling model and the masked GRU, a Keras model given to
``TFModel.from_keras``), the same GRU's as a bare ``model.export`` and the unmasked GRU's
ratio, and model calls per 1,000 rows.

    .venv/bin/python bench/lengths_bench.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402

VOCAB, WIDTH = 1000, 16
CASES = ((200, 20_000), (1000, 8_000))  # (longest length, rows)


def _export(kind: str, path: str) -> None:
    """One of the models, exported as fit exports it (its padding written where the model
    masks it): the masked GRU as a Keras model trained elsewhere, by ``TFModel.from_keras``;
    the same GRU as a bare ``model.export`` too, a SavedModel sparktf knows nothing of,
    whose input is taken for unmasked (exact, one call per length)."""
    import keras

    from sparktf.ml import TFModel
    from sparktf.runtime.scoring import padding, saved_models
    from sparktf.runtime.training import export

    keras.utils.set_random_seed(0)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(VOCAB, WIDTH, mask_zero=kind.startswith("masked"))(tokens)
    x = keras.layers.GlobalAveragePooling1D()(x) if kind == "pooling" else \
        keras.layers.GRU(WIDTH)(x)
    model = keras.Model(tokens, keras.layers.Dense(1)(x))
    if kind == "masked GRU":
        TFModel.from_keras(model, path)
        return
    model.export(path, verbose=False)
    if kind != "masked GRU, bare":
        names = list(saved_models.describe(path, "serving_default")[0])
        padding.write(path, export._signature_padding(padding.masked_inputs(model), names, {}))


def _frame(spark, longest: int, rows: int):
    from pyspark.sql import functions as F

    length = (F.abs(F.hash("id", F.lit(longest))) % longest + 1).cast("int")
    tokens = F.transform(F.sequence(F.lit(1), length),
                         lambda i: (F.abs(F.hash("id", i)) % (VOCAB - 1) + 1).cast("int"))
    df = spark.range(0, rows, 1, 2).select(tokens.alias("tokens")).cache()
    assert df.count() == rows
    return df


def _compare(default, padded, df, rows: int, rounds: int) -> tuple[float, float, int]:
    """Warm rows/s of ``default`` and ``padded`` (medians of ``rounds`` each, taken in
    turn after a cold run of both, so that neither meets a warmer JVM than the other), and
    the model calls one run of ``default`` makes. Each run is a query of its own:
    collecting one aggregate twice would reuse its first run's shuffle and score nothing."""
    from pyspark.sql import functions as F

    def run(model):
        out = model.transform(df).agg(F.count("prediction"), F.sum("prediction")).collect()
        assert out[0][0] == rows

    run(default)  # cold: loads the model in each Python worker
    run(padded)
    rates: dict = {"default": [], "padded": []}
    for _ in range(rounds):
        for name, model in (("default", default), ("padded", padded)):
            rates[name].append(rows / common.timed(run, model)[1])
    counts = getattr(default, "_call_counts", None)  # its last run's
    median = {k: sorted(v)[len(v) // 2] for k, v in rates.items()}
    return median["default"], median["padded"], counts.value[0] if counts else None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5, help="warm rounds (median reported)")
    args = parser.parse_args()

    from sparktf.ml import TFModel

    folder = common.scratch("sparktf-lengths-")
    kinds = ("pooling", "masked GRU", "masked GRU, bare", "unmasked GRU")
    for kind in kinds:
        _export(kind, os.path.join(folder, kind.replace(",", "").replace(" ", "_")))
    spark = common.session()
    results = []
    try:
        for longest, rows in CASES:
            df = _frame(spark, longest, rows)
            for kind in kinds:
                path = os.path.join(folder, kind.replace(",", "").replace(" ", "_"))
                rounds = args.rounds if kind in ("pooling", "masked GRU") else 1
                default = TFModel(modelPath=path, inputMapping={"tokens": "tokens"})
                padded = TFModel(modelPath=path, inputMapping={"tokens": "tokens"},
                                 padLength=longest)
                ours, base, calls = _compare(default, padded, df, rows, rounds)
                results.append((kind, longest, rows, ours, base, calls))
                print(f"measured {kind}, lengths 1..{longest}: default {ours:,.0f} rows/s, "
                      f"padLength {base:,.0f} rows/s", flush=True)
            df.unpersist()
    finally:
        spark.stop()

    print("\nscoring token arrays of lengths 1..n (2 partitions, batchSize 4096), warm rows/s")
    print(f"  {'model':18}{'lengths':>10}{'rows':>8}{'default':>10}{'padLength':>11}"
          f"{'ratio':>8}  calls per 1,000 rows (default)")
    for kind, longest, rows, ours, base, calls in results:
        target = "  (target >= 1.0)" if kind in ("pooling", "masked GRU") else ""
        per = f"{calls * 1000 / rows:,.1f}" if calls is not None else "-"
        print(f"  {kind:18}{f'1..{longest}':>10}{rows:>8,}{ours:10,.0f}{base:11,.0f}"
              f"{ours / base:7.2f}x  {per:>6}{target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
