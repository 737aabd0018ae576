"""Issue 32 item 3: two fits at once on one file-backed frame with inputMode="parquet"
each train on exactly the frame's rows, and the copy they share holds exactly those rows."""

import logging
import os
import threading

import pyarrow.dataset as pads

from sparktf.ml import TFEstimator
from tests.integration import data, models

ROWS = 4000


def _copies(folder):
    """Rows of each Parquet copy left in ``folder`` (files starting with _ or . skipped)."""
    return {name: pads.dataset(os.path.join(folder, name), format="parquet").count_rows()
            for name in sorted(os.listdir(folder))}


def test_two_fits_at_once_train_on_their_rows_and_share_one_whole_copy(spark, tmp_path,
                                                                        caplog):
    caplog.set_level(logging.INFO, logger="sparktf")
    X, y = data.linear_rows(ROWS, seed=3)
    source = str(tmp_path / "table")
    data.frame(spark, data.rows(X, y), "features array<double>, label double") \
        .repartition(4).write.parquet(source)
    df = spark.read.parquet(source)
    for round_ in range(3):  # the race depends on timing: several rounds
        model_dir = str(tmp_path / f"m{round_}")  # one modelDir: one copy folder for both
        caplog.clear()
        errors = []

        def fit(model_dir=model_dir, errors=errors):
            try:
                TFEstimator(modelFn=models.linear, inputMode="parquet", numWorkers=1,
                            batchSize=1000, epochs=1, learningRate=0.05,
                            modelDir=model_dir).fit(df)
            except Exception as e:  # noqa: BLE001 - reported by the assertion below
                errors.append(repr(e)[:2000])

        threads = [threading.Thread(target=fit) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=600)
        assert errors == [], f"round {round_}: {errors}"
        trained = [r.sparktf_stats["rows"] for r in caplog.records
                   if hasattr(r, "sparktf_stats")]
        assert trained == [ROWS, ROWS], f"round {round_}: rows trained on {trained}"
        copies = _copies(os.path.join(model_dir, "data"))
        assert list(copies.values()) == [ROWS], f"round {round_}: copies {copies}"
