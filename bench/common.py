"""Helpers shared by the benchmarks: sessions, generated data, a model, stats capture."""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import sys
import tempfile
import time

N_FEATURES = 28


def machine_busy() -> tuple[float, float]:
    """(busy, all) CPU seconds of the whole machine so far (``/proc/stat``): counts every
    process, those that have exited and not been reaped (a task process) included."""
    with open("/proc/stat") as f:
        ticks = [int(v) for v in f.readline().split()[1:]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(ticks) - idle) / tick, sum(ticks) / tick


def scratch(prefix: str) -> str:
    """A new folder in the temp dir for the bench's data and models, removed when the
    bench ends (a bench's fits write hundreds of MB)."""
    folder = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def session(master: str = "local-cluster[2,1,2048]", **conf):
    from pyspark.sql import SparkSession

    # every job of the bench (the baselines too) runs this interpreter and its packages;
    # PySpark reads the variable when the session starts
    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = (SparkSession.builder.master(master).appName("sparktf-bench")
               .config("spark.ui.enabled", "false").config("spark.driver.memory", "2g"))
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def higgs_like(spark, rows: int, partitions: int = 2):
    """A Higgs-shaped DataFrame: 28 float features (array<float>) and a 0/1 label."""
    from pyspark.sql import functions as F

    feats = [F.randn(seed=i).cast("float") for i in range(N_FEATURES)]
    df = spark.range(0, rows, 1, partitions).select(F.array(*feats).alias("features"))
    return df.withColumn("label", (F.col("features")[0] + F.col("features")[1] > 0)
                         .cast("double"))


def higgs_mlp(hparams):
    import keras
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((28,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer=keras.optimizers.Adam(hparams["learningRate"]),
                  loss="binary_crossentropy", metrics=["accuracy"])
    return model


class Captured(logging.Handler):
    """Collects one attribute of the records of one sparktf logger (``with`` attaches it)."""

    def __init__(self, logger: str, attribute: str, level: int):
        super().__init__(level)
        self.logger, self.attribute = logger, attribute
        self.records: list = []

    def emit(self, record):
        value = getattr(record, self.attribute, None)
        if value:
            self.records.append(value)

    def __enter__(self):
        logging.getLogger(self.logger).addHandler(self)
        logging.getLogger(self.logger).setLevel(self.level)
        return self

    def __exit__(self, *exc):
        logging.getLogger(self.logger).removeHandler(self)


class StatsCapture(Captured):
    """Collects the per-task stats events that sparktf logs at the end of fit."""

    def __init__(self):
        super().__init__("sparktf", "sparktf_stats", logging.INFO)

    @property
    def stats(self) -> list[dict]:
        return self.records


def timed(fn, *args, **kwargs):
    started = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - started
