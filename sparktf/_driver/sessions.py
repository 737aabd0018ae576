"""What sparktf needs from a SparkSession, from a classic session or a Spark Connect client.

A Connect client has no SparkContext and no JVM: configuration comes from
``spark.conf``, jobs are tagged and interrupted through the session, and a
DataFrame's partition count is not known without a job. Everything on sparktf's
driver path goes through ``Session`` so that both kinds work the same way.
"""

from __future__ import annotations

import os
import socket

from sparktf._driver import versions

CHANNEL_HOST_CONF = "spark.sparktf.channelHost"
CHANNEL_HOST_ENV = "SPARKTF_CHANNEL_HOST"
_CANCELLED_TAGS: set[str] = set()  # cancel_tag: their threads submit no further job


def is_connect(spark) -> bool:
    """Whether ``spark`` is a Spark Connect client session."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _release_executions_at_stop(session_class) -> None:
    """Makes a Connect session's ``stop()`` wait for its client's pending releases of
    finished executions before it releases the session (pyspark 4.1 to 4.3 release the
    session first). A query ``show(3)`` left running on the executors (a ``transform``
    scoring its partitions) is released asynchronously; released after the session, the
    server logged ``ERROR ErrorUtils ... releaseExecute ... INVALID_HANDLE.SESSION_CLOSED``
    and a stack trace, with nothing lost. Installed once, on the first Connect session
    sparktf meets; ``stop()`` itself is pyspark's."""
    stop = session_class.stop
    if getattr(stop, "_sparktf_releases_first", False):
        return

    def stop_after_releases(session):
        try:
            _await_releases(session.client)
        except Exception:  # noqa: BLE001 - stop() is best effort, as pyspark's own
            pass
        return stop(session)

    stop_after_releases._sparktf_releases_first = True
    stop_after_releases.__doc__ = stop.__doc__
    session_class.stop = stop_after_releases


def _await_releases(client, timeout_s: float = 10.0) -> None:
    """Waits (at most ``timeout_s``) for ``client``'s pending ``ReleaseExecute`` calls."""
    import concurrent.futures

    pending = getattr(client, "_release_futures", None)  # pyspark 4.3
    if pending is not None:
        concurrent.futures.wait(list(pending), timeout=timeout_s)
        return
    from pyspark.sql.connect.client.reattach import ExecutePlanResponseReattachableIterator

    # 4.1: the releases run in a pool of the class; shutting it down waits for them (the
    # next query makes a new pool)
    ExecutePlanResponseReattachableIterator.shutdown()


class Session:
    """A SparkSession as sparktf's driver uses it."""

    def __init__(self, spark):
        self.spark = spark
        self.connect = is_connect(spark)
        if self.connect:
            versions.require(versions.CONNECT_ML, "sparktf on Spark Connect",
                             "use a classic SparkSession (SparkSession.builder without "
                             "remote), or upgrade pyspark")
            _release_executions_at_stop(type(spark))
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

    def setting(self, key: str) -> str | None:
        """A setting as the application sees it now: ``spark.conf.set`` at run time over
        the configuration the session started with."""
        value = self.spark.conf.get(key, None)
        return value if value is not None else self.get(key)

    @property
    def master(self) -> str:
        return self.get("spark.master", "") or ""

    def channel_host(self) -> str:
        """The address of this driver process that the tasks connect back to (progress,
        logs, heartbeats, the exit barrier).

        ``SPARKTF_CHANNEL_HOST`` or ``spark.sparktf.channelHost`` when set. Otherwise a
        classic driver's ``spark.driver.host``; a Spark Connect client's own address on
        the interface it reaches the Connect server through (the executors share the
        server's network, not necessarily the client's).
        """
        chosen = os.environ.get(CHANNEL_HOST_ENV) or self.get(CHANNEL_HOST_CONF)
        if chosen:
            return chosen
        if not self.connect:
            return self.get("spark.driver.host", "127.0.0.1") or "127.0.0.1"
        server = self.spark.client.host
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            try:
                probe.connect((server, 15002))  # UDP: chooses a route, sends nothing
                return probe.getsockname()[0]
            except OSError:
                return socket.gethostbyname(socket.gethostname())

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
        """Cancels the running jobs tagged ``tag`` (callable from any thread); sparktf's
        own jobs that a thread tagged ``tag`` submits afterwards are refused
        (``cancelled_tag``) until ``forget_tag``."""
        _CANCELLED_TAGS.add(tag)
        if self.connect:
            self.spark.interruptTag(tag)
        else:
            self.sc.cancelJobsWithTag(tag)

    def cancelled_tag(self) -> str | None:
        """The tag among this thread's job tags that ``cancel_tag`` cancelled, if any: Spark
        cancels only the jobs running when it is called, so a job this thread submits after
        it would run on (a trial still preparing its fit when a search stops)."""
        if not _CANCELLED_TAGS:
            return None
        tags = self.spark.getTags() if self.connect else self.sc.getJobTags()
        return next((t for t in tags if t in _CANCELLED_TAGS), None)


def forget_tag(tag: str) -> None:
    """Jobs tagged ``tag`` may run again (its owner is done with it)."""
    _CANCELLED_TAGS.discard(tag)


def num_partitions(df) -> int | None:
    """The DataFrame's partition count where known without running a job (classic)."""
    if is_connect(df.sparkSession):
        return None
    return df.rdd.getNumPartitions()
