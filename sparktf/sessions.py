"""What sparktf needs from a SparkSession, from a classic session or a Spark Connect client.

A Connect client has no SparkContext and no JVM: configuration comes from
``spark.conf``, jobs are tagged and interrupted through the session, and a
DataFrame's partition count is not known without a job. Everything on sparktf's
driver path goes through ``Session`` so that both kinds work the same way.
"""

from __future__ import annotations


def is_connect(spark) -> bool:
    """Whether ``spark`` is a Spark Connect client session."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


class Session:
    """A SparkSession as sparktf's driver uses it."""

    def __init__(self, spark):
        self.spark = spark
        self.connect = is_connect(spark)
        self._conf: dict[str, str] | None = None

    @property
    def sc(self):
        """The SparkContext of a classic session (None on Spark Connect)."""
        return None if self.connect else self.spark.sparkContext

    def conf(self) -> dict[str, str]:
        """The application's Spark configuration (static and runtime settings)."""
        if self._conf is None:
            if self.connect:
                self._conf = {k: v for k, v in self.spark.conf.getAll.items()
                              if v is not None}
            else:
                self._conf = dict(self.sc.getConf().getAll())
        return self._conf

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.conf().get(key, default)

    @property
    def master(self) -> str:
        return self.get("spark.master", "") or ""

    def slots_now(self) -> int | None:
        """Concurrent task slots the registered executors offer now (Spark's own count);
        None on Spark Connect, which does not say."""
        if self.connect:
            return None
        jsc = self.sc._jsc.sc()
        profile = jsc.resourceProfileManager().defaultResourceProfile()
        return int(jsc.maxNumConcurrentTasks(profile))

    def add_tag(self, tag: str) -> None:
        (self.spark.addTag if self.connect else self.sc.addJobTag)(tag)

    def remove_tag(self, tag: str) -> None:
        (self.spark.removeTag if self.connect else self.sc.removeJobTag)(tag)

    def cancel_tag(self, tag: str) -> None:
        """Cancels the running jobs tagged ``tag`` (callable from any thread)."""
        if self.connect:
            self.spark.interruptTag(tag)
        else:
            self.sc.cancelJobsWithTag(tag)


def num_partitions(df) -> int | None:
    """The DataFrame's partition count where known without running a job (classic)."""
    if is_connect(df.sparkSession):
        return None
    return df.rdd.getNumPartitions()
