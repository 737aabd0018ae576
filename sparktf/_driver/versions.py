"""What the installed pyspark has, for the features later Spark versions brought.

sparktf runs on pyspark 3.5 and 4.x. What 3.5 lacks is either done another way (scoring
through a pandas UDF where 4.1 has Arrow UDFs) or refused before any job, naming the
version that has it (``require``)."""

from __future__ import annotations

import functools

from sparktf.errors import InvalidInputError

# pyspark.sql.functions.arrow_udf: an iterator of Arrow arrays in and out, no pandas
ARROW_UDF = (4, 1)
# mapInArrow(..., profile=): a ResourceProfile on a DataFrame's barrier stage
FRAME_STAGE_PROFILE = (4, 0)
# pyspark.ml on Spark Connect (pyspark.ml's estimators fitted through a remote session)
CONNECT_ML = (4, 0)


@functools.cache
def pyspark() -> tuple[int, int]:
    """The installed pyspark's (major, minor)."""
    import pyspark as installed

    major, minor = installed.__version__.split(".")[:2]
    return int(major), int(minor)


def has(version: tuple[int, int]) -> bool:
    """Whether the installed pyspark is ``version`` or newer."""
    return pyspark() >= version


def require(version: tuple[int, int], what: str, instead: str) -> None:
    """Refuses ``what`` when the installed pyspark is older than ``version``; ``instead``
    says what to do on this one."""
    if not has(version):
        import pyspark as installed

        raise InvalidInputError(
            f"{what} needs pyspark {version[0]}.{version[1]} or newer, and this is pyspark "
            f"{installed.__version__}: {instead}")
