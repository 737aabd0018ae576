"""Per-epoch speed of sparktf's loop (the model's own train_step) against Keras's ``fit``.

40,000 rows of 28 floats, global batch 32 (1,250 steps an epoch), the Higgs-shaped
MLP, 1 worker: the step call's own cost dominates, so this is where running Keras's
step inside sparktf's loop could be slower than Keras's ``fit``. Both sides time
each epoch with the same callback; the first epoch (tracing, start-up) is left out.

    .venv/bin/python bench/epoch_bench.py [--rows 40000] [--epochs 4] [--workers 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import keras  # noqa: E402


class EpochTimes(keras.callbacks.Callback):
    """Appends each epoch's wall time to a JSON-lines file (worker 0 only under sparktf)."""

    def __init__(self, path):
        super().__init__()
        self.path = path

    def on_epoch_begin(self, epoch, logs=None):
        self.started = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        config = json.loads(os.environ.get("TF_CONFIG", "{}") or "{}")
        if config.get("task", {}).get("index", 0) == 0:
            with open(self.path, "a") as f:
                f.write(json.dumps({"epoch": epoch, "s": time.perf_counter() - self.started,
                                    "loss": logs["loss"]}) + "\n")


def _further_epochs(path):
    with open(path) as f:
        rows = [json.loads(line) for line in f]
    return [r["s"] for r in rows[1:]], [r["loss"] for r in rows]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=40_000)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()

    from sparktf.ml import TFEstimator

    spark = common.session()
    df = common.higgs_like(spark, args.rows, partitions=args.workers).cache()
    df.count()
    pdf = df.toPandas()
    import numpy as np
    X = np.stack(pdf["features"].to_numpy()).astype("float32")
    y = pdf["label"].to_numpy().astype("float32")

    folder = common.scratch("sparktf-epoch-bench-")
    ours_log, keras_log = os.path.join(folder, "sparktf.jsonl"), os.path.join(folder, "keras.jsonl")
    TFEstimator(modelFn=common.higgs_mlp, numWorkers=args.workers, epochs=args.epochs,
                batchSize=args.batch, learningRate=1e-3, shuffle=False,
                callbacks=[EpochTimes(ours_log)]).fit(df)
    model = common.higgs_mlp({"learningRate": 1e-3})
    model.fit(X, y, batch_size=args.batch, epochs=args.epochs, shuffle=False, verbose=0,
              callbacks=[EpochTimes(keras_log)])
    ours, ours_loss = _further_epochs(ours_log)
    theirs, keras_loss = _further_epochs(keras_log)
    spark.stop()

    steps = -(-args.rows // args.batch)
    print(f"\n{args.rows:,} rows x 28 floats, batch {args.batch} ({steps} steps an epoch), "
          f"{args.workers} worker(s); median of epochs 2..{args.epochs}")
    print(f"  sparktf TFEstimator.fit   {statistics.median(ours):6.2f} s an epoch   "
          f"losses {[round(v, 4) for v in ours_loss]}")
    print(f"  keras Model.fit           {statistics.median(theirs):6.2f} s an epoch   "
          f"losses {[round(v, 4) for v in keras_loss]}")
    print(f"  keras / sparktf per epoch: {statistics.median(theirs) / statistics.median(ours):.2f}x"
          " (>= 1: sparktf at least as fast as Keras's fit)")


if __name__ == "__main__":
    main()
