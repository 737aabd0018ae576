"""``make demo``: sparktf on an embedded local multi-executor Spark, no cluster needed.

Run with ``python -m sparktf.demo``. It starts ``local-cluster[2,1,1024]`` (two
separate executor processes), forms a two-worker TensorFlow cluster inside one
Spark barrier stage with ``sparktf.run`` and trains a small Keras regression
under ``MultiWorkerMirroredStrategy`` on data fed straight from a DataFrame.
"""

from __future__ import annotations

import sys
import time


def train(args, ctx):
    """Runs on every task: a custom all-reduce loop over this task's share of the data."""
    import keras
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        optimizer = keras.optimizers.Adam(0.05)

    @tf.function(reduce_retracing=True)
    def step(x, y):
        def replica(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(x)[:, 0] - y) ** 2) / ctx.numWorkers
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        return strategy.reduce("SUM", strategy.run(replica, args=(x, y)), axis=None)

    steps = -(-max(ctx.allNumRows) // args["batch"])  # every worker runs the same steps
    for epoch in range(args["epochs"]):
        data = iter(ctx.dataset(args["batch"], shuffle=True, seed=epoch).repeat())
        for _ in range(steps):
            batch = next(data)
            loss = step(batch["features"], batch["label"])
        if ctx.rank == 0:
            print(f"epoch {epoch + 1}/{args['epochs']} loss {float(loss):.4f}", flush=True)
    kernel, bias = model.get_weights()
    return {"coefficients": [round(float(v), 3) for v in kernel[:, 0]],
            "bias": round(float(bias[0]), 3)}


def main() -> int:
    from pyspark.sql import SparkSession

    import sparktf

    spark = (SparkSession.builder.master("local-cluster[2,1,1024]").appName("sparktf-demo")
             .config("spark.ui.enabled", "false").config("spark.driver.memory", "1g")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        df = spark.range(20000).selectExpr(
            "array(cast(rand(1) as float), cast(rand(2) as float), cast(rand(3) as float))"
            " as features")
        df = df.selectExpr("features", "cast(3 * features[0] - 2 * features[1] + "
                           "0.5 * features[2] + 1 as float) as label")
        started = time.monotonic()
        results = sparktf.run(spark, train, {"epochs": 8, "batch": 256}, numWorkers=2, df=df)
        elapsed = time.monotonic() - started
        print("\nsparktf demo: 2 TensorFlow workers in one Spark barrier stage")
        for rank, result in enumerate(results):
            print(f"  rank {rank}: coefficients={result['coefficients']} bias={result['bias']}")
        print("  expected:  coefficients=[3.0, -2.0, 0.5] bias=1.0")
        print(f"  wall time: {elapsed:.1f} s")
        same = results[0] == results[1]
        print(f"  replicas identical: {same}")
        return 0 if same else 1
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
