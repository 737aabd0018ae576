"""A real multi-executor Spark (local-cluster: separate executor JVMs) for integration tests."""

import os

import pytest


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    # sparktf must arrange the executors' Python itself: tests do not set PYSPARK_PYTHON.
    os.environ.pop("PYSPARK_PYTHON", None)
    session = (SparkSession.builder.master("local-cluster[2,1,1024]")
               .appName("sparktf-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.driver.memory", "1g")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.python.worker.reuse", "true")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
