"""A real multi-executor Spark (local-cluster: separate executor JVMs) for integration tests."""

import pytest

from tests import conftest


@pytest.fixture(scope="session")
def spark():
    session = conftest.local_cluster(2, "sparktf-tests")
    yield session
    session.stop()
