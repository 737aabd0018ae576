"""Inference throughput: an MLP 28-256-256-1 SavedModel over a cached DataFrame.

    .venv/bin/python bench/inference_bench.py [--rows 2000000] [--tfos-rows 200000]
        [--model mlp|text] [--warm-rounds 5] [--only sparktf pbu floor]

Side by side in one run, each Spark method in a fresh local-cluster[2,1,2048]
session (2 executors, 1 core each), cold (first job: workers start, load the
model) and warm (the same job again):

* single   - one process calling the signature on 4096-row batches (the ceiling)
* sparktf  - TFModel.transform (mapInArrow, one cached model per Python worker)
* pbu      - pyspark.ml.functions.predict_batch_udf, batch_size=4096
* tfos     - tensorflowonspark 2.2.5 pipeline.TFModel
* floor    - Spark alone: a no-op Arrow UDF over the same column (no model). What
             Spark spends delivering the rows to Python and taking results back;
             with the ceiling it bounds any Spark-based scorer on the same cores:
             1 / (1/floor + 1/single) when both are CPU-bound.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

BATCH = 4096


def export_mlp(path: str) -> None:
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    inputs = keras.Input((28,), name="features")
    h = keras.layers.Dense(256, activation="relu")(inputs)
    h = keras.layers.Dense(256, activation="relu")(h)
    model = keras.Model(inputs, keras.layers.Dense(1, name="score")(h))
    fn = tf.function(lambda x: {"score": model(x)},
                     input_signature=[tf.TensorSpec([None, 28], tf.float32, name="features")])
    module = tf.Module()
    module.model = model
    module.serve = fn
    tf.saved_model.save(module, path, signatures={"serving_default": fn})


VOCABULARY = [f"w{i}" for i in range(999)]


def export_text(path: str) -> None:
    """A text model: sentences -> TextVectorization (whitespace tokens, 999 words, 16 ids)
    -> Embedding -> average -> Dense, served on a string input named ``features``."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    vectorize = keras.layers.TextVectorization(vocabulary=VOCABULARY,
                                               output_sequence_length=16)
    inputs = keras.Input((1,), dtype="string", name="features")
    h = keras.layers.Embedding(len(VOCABULARY) + 2, 16, mask_zero=True)(vectorize(inputs))
    model = keras.Model(inputs, keras.layers.Dense(1, name="score")(
        keras.layers.GlobalAveragePooling1D()(h)))
    fn = tf.function(lambda x: {"score": model(tf.expand_dims(x, -1))},
                     input_signature=[tf.TensorSpec([None], tf.string, name="features")])
    module = tf.Module()
    module.model = model
    module.serve = fn
    tf.saved_model.save(module, path, signatures={"serving_default": fn})


def text_rows(spark, rows: int):
    """``features``: sentences of 3 to 22 words of the model's vocabulary."""
    return spark.range(0, rows, 1, 2).selectExpr(
        "concat_ws(' ', transform(sequence(1, 3 + cast(id % 20 as int)), "
        "i -> concat('w', cast((id * 7 + i * 13) % 999 as string)))) as features")


def local_rows(rows: int):
    """The same rows as the Spark frames of ``MODEL``, in one process."""
    import numpy as np

    if MODEL == "text":
        return np.array([" ".join(f"w{(i * 7 + j * 13) % 999}" for j in range(1, 4 + i % 20))
                         for i in range(rows)], dtype=object)
    return np.random.default_rng(0).normal(size=(rows, 28)).astype("float32")


def single_process(path: str, rows: int) -> float:
    import tensorflow as tf

    fn = tf.saved_model.load(path).signatures["serving_default"]
    X = local_rows(rows)
    fn(features=tf.constant(X[:BATCH]))  # warm

    def score():
        for i in range(0, rows, BATCH):
            fn(features=tf.constant(X[i:i + BATCH]))["score"].numpy()
    _, seconds = common.timed(score)
    return rows / seconds


WARM_ROUNDS = 1  # --warm-rounds: the warm rate is the median of this many rounds
MODEL = "mlp"  # --model


def _with_session(rows, make_scored, column):
    from pyspark.sql import functions as F
    from pyspark.sql.types import NumericType

    spark = common.session()
    try:
        df = (text_rows(spark, rows) if MODEL == "text" else
              common.higgs_like(spark, rows).select("features")).cache()
        assert df.count() == rows
        scored = make_scored(spark, df)
        value = F.col(column)
        if not isinstance(scored.schema[column].dataType, NumericType):
            value = value[0]  # tensorflowonspark returns [N, 1] outputs as arrays
        rates = []
        for _ in range(1 + WARM_ROUNDS):  # cold, then warm
            out, seconds = common.timed(lambda: scored.agg(F.count(value), F.sum(value))
                                        .collect())
            assert out[0][0] == rows
            rates.append(rows / seconds)
        warm = sorted(rates[1:])[len(rates[1:]) // 2]
        print(f"measured {make_scored.__qualname__}: cold {rates[0]:,.0f} rows/s, warm "
              f"{', '.join(f'{r:,.0f}' for r in rates[1:])} rows/s", flush=True)
        return rates[0], warm
    finally:
        spark.stop()


def sparktf_rates(path, rows):
    from sparktf.ml import TFModel

    model = TFModel(modelPath=path, inputMapping={"features": "features"},
                    outputMapping={"score": "score"}, batchSize=BATCH)
    return _with_session(rows, lambda spark, df: model.transform(df), "score")


def pbu_rates(path, rows):
    from pyspark.ml.functions import predict_batch_udf
    from pyspark.sql.types import FloatType

    def make_predict_fn():
        import tensorflow as tf
        fn = tf.saved_model.load(path).signatures["serving_default"]

        def predict(x):
            return fn(features=tf.constant(x))["score"].numpy()[:, 0]
        return predict

    udf = predict_batch_udf(make_predict_fn, return_type=FloatType(), batch_size=BATCH,
                            input_tensor_shapes=None if MODEL == "text" else [[28]])
    return _with_session(rows, lambda spark, df: df.withColumn("score", udf("features")),
                         "score")


def tfos_rates(path, rows):
    from tensorflowonspark.pipeline import TFModel as TFoSModel

    def scored(spark, df):
        model = (TFoSModel({}).setExportDir(path).setSignatureDefKey("serving_default")
                 .setInputMapping({"features": "features"}).setOutputMapping({"score": "score"})
                 .setBatchSize(BATCH))
        return model.transform(df)
    return _with_session(rows, scored, "score")


def floor_rates(rows):
    import numpy as np
    import pyarrow as pa
    from pyspark.sql.functions import arrow_udf

    def noop(features):
        return pa.array(np.zeros(len(features)))
    # real types, not this module's postponed (string) annotations, for arrow_udf to read
    noop.__annotations__ = {"features": pa.Array, "return": pa.Array}

    def spark_floor(spark, df):
        return df.withColumn("score", arrow_udf("double")(noop)("features"))
    return _with_session(rows, spark_floor, "score")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--tfos-rows", type=int, default=200_000)
    parser.add_argument("--model", choices=["mlp", "text"], default="mlp",
                        help="mlp: 28 floats -> 256 -> 256 -> 1; text: sentences through "
                             "TextVectorization, Embedding, Dense")
    parser.add_argument("--warm-rounds", type=int, default=1,
                        help="warm rounds per method (the median is reported)")
    parser.add_argument("--only", nargs="+", choices=["sparktf", "pbu", "tfos", "floor"],
                        help="measure only these Spark methods")
    args = parser.parse_args()
    global WARM_ROUNDS, MODEL
    WARM_ROUNDS, MODEL = args.warm_rounds, args.model
    path = os.path.join(common.scratch("sparktf-bench-"), MODEL)
    (export_text if MODEL == "text" else export_mlp)(path)
    single = single_process(path, args.rows)
    only = set(args.only or ["sparktf", "pbu", "tfos", "floor"])
    if not args.tfos_rows:
        only.discard("tfos")
    skipped = (float("nan"),) * 2
    ours = sparktf_rates(path, args.rows) if "sparktf" in only else skipped
    pbu = pbu_rates(path, args.rows) if "pbu" in only else skipped
    tfos = tfos_rates(path, args.tfos_rows) if "tfos" in only else skipped
    floor = floor_rates(args.rows) if "floor" in only else skipped
    bound = 1.0 / (1.0 / floor[1] + 1.0 / single)

    what = "text model (TextVectorization)" if MODEL == "text" else "MLP 28-256-256-1"
    print(f"\ninference, {what} SavedModel, {args.rows:,} rows "
          f"(TensorFlowOnSpark on {args.tfos_rows:,}), rows/s")
    print(f"  {'':34}{'cold':>12}{'warm':>12}")
    print(f"  {'single process, 4096-row batches':34}{'':>12}{single:12,.0f}")
    for name, (cold, warm) in (("sparktf TFModel.transform", ours),
                               ("Spark predict_batch_udf", pbu),
                               ("tensorflowonspark 2.2.5 TFModel", tfos),
                               ("Spark alone, no-op Arrow UDF", floor)):
        print(f"  {name:34}{cold:12,.0f}{warm:12,.0f}")
    print(f"\n  sparktf / predict_batch_udf   cold {ours[0] / pbu[0]:5.2f}x  warm "
          f"{ours[1] / pbu[1]:5.2f}x  (target >= 1.0)")
    print(f"  sparktf / tensorflowonspark   cold {ours[0] / tfos[0]:5.1f}x  warm "
          f"{ours[1] / tfos[1]:5.1f}x  (target >= 5)")
    print(f"  sparktf / single process      warm {ours[1] / single:5.2f}x  (target >= 0.6)")
    print(f"\n  bound for any Spark-based scorer here, 1/(1/floor + 1/single): {bound:,.0f} "
          f"rows/s = {bound / single:.2f}x single;\n  sparktf reaches {ours[1] / bound:.0%} of it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
