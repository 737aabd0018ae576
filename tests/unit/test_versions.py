"""What an older pyspark lacks is refused naming the version that has it, or done another
way (sparktf/_driver/versions.py); the smoke (tests/integration/test_smoke.py) checks the
refusals on a real pyspark 3.5 in the lowest environment."""

import pytest

from sparktf._driver import resources, versions
from sparktf.errors import InvalidInputError


@pytest.fixture
def pyspark_3_5(monkeypatch):
    monkeypatch.setattr(versions, "pyspark", lambda: (3, 5))


def test_the_installed_version_is_read_as_pyspark_says():
    import pyspark

    assert versions.pyspark() == tuple(int(p) for p in pyspark.__version__.split(".")[:2])


def test_a_profile_on_a_dataframe_stage_is_refused_before_4_0_naming_it(pyspark_3_5):
    asked = resources.TaskResources.checked(2, None)
    with pytest.raises(InvalidInputError, match=r"taskCpus=2, taskGpus=None .* needs "
                                                r"pyspark 4\.0 or newer.*spark\.task\.cpus"):
        asked.check_stage(on_frame=True)
    asked.check_stage(on_frame=False)  # an RDD's barrier stage takes one on 3.5


def test_on_4_0_a_profile_is_taken_on_either_stage(monkeypatch):
    monkeypatch.setattr(versions, "pyspark", lambda: (4, 0))
    resources.TaskResources.checked(None, 0.5).check_stage(on_frame=True)
    assert versions.has(versions.CONNECT_ML) and not versions.has(versions.ARROW_UDF)


def test_spark_connect_is_refused_before_4_0(pyspark_3_5):
    from sparktf._driver import sessions

    class Remote:  # what sessions.is_connect sees of a Connect client
        __module__ = "pyspark.sql.connect.session"

    with pytest.raises(InvalidInputError, match="sparktf on Spark Connect needs pyspark 4.0"):
        sessions.Session(Remote())
