"""The smoke a new environment must pass: one fit and one transform on local-cluster.

Run by ``make test`` in the main environment and, with the unit tests, in a second one
built at the lowest versions sparktf declares (``constraints-lowest.txt``).
"""

import numpy as np
import pytest

from sparktf.ml import TFEstimator
from tests.integration import data, models

pytestmark = pytest.mark.timeout(600)


def test_one_fit_and_one_transform(spark):
    X, y = data.linear_rows(400)
    df = spark.createDataFrame(data.rows(X, y), "features array<double>, label double")
    model = TFEstimator(modelFn=models.linear, numWorkers=2, epochs=3, batchSize=64,
                        learningRate=0.05).fit(df)
    losses = model.getHistory()["loss"]
    assert len(losses) == 3 and losses[-1] < losses[0]
    scored = model.transform(df).select("label", "prediction").toPandas()
    assert len(scored) == 400 and np.isfinite(scored["prediction"]).all()
    import keras
    import pyspark
    print(f"\nsmoke on pyspark {pyspark.__version__}, keras {keras.__version__}, "
          f"numpy {np.__version__}: losses {[round(v, 4) for v in losses]}")
