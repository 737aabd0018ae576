"""Ctrl-C during a fit (issue 32, item 12): the stage is cancelled and the fit raises
KeyboardInterrupt, not "barrier stage failed before any task reported an error".

Reproduced on a local-cluster: PySpark's SIGINT handler calls cancelAllJobs through Py4J
from the main thread, which is inside the Py4J call collecting the stage; the nested call
fails ("RuntimeError: reentrant call inside <_io.BufferedReader>"), a Py4JError ends the
collect instead of KeyboardInterrupt, and sparktf took it for a failed stage."""

import os
import signal
import threading

import pytest

from sparktf._driver import failures, supervision
from sparktf.errors import SparkTFError


class _Session:
    """The session's job tags as ``supervision.collect`` uses them, recorded."""

    def __init__(self):
        self.cancelled = threading.Event()
        self.cancels: list[str] = []

    def add_tag(self, tag):
        pass

    def remove_tag(self, tag):
        pass

    def cancel_tag(self, tag):
        self.cancels.append(tag)
        self.cancelled.set()

    def cancelled_tag(self):
        return None  # the fit's thread was not cancelled before its job was submitted


class _Job:
    """A barrier job's collect: the user presses Ctrl-C ``presses`` times while it runs; it
    ends when Spark cancels it, or after ``runs_s`` on its own with ``rows``."""

    def __init__(self, session: _Session, presses: int = 1, runs_s: float = 30.0, rows=()):
        self.session, self.presses, self.runs_s, self.rows = session, presses, runs_s, rows

    def collect(self):
        for _ in range(self.presses):
            os.kill(os.getpid(), signal.SIGINT)  # handled in this (the main) thread
        if self.session.cancelled.wait(self.runs_s):
            raise RuntimeError("An error occurred while calling o129.collectToPython.\n: "
                               "org.apache.spark.SparkException: Job 3 cancelled part of "
                               "cancelled job tags sparktf-0123456789ab")
        return list(self.rows)


def _pyspark_like_handler(signum, frame):
    """What PySpark's handler amounts to while the main thread is inside Py4J."""
    raise RuntimeError("reentrant call inside <_io.BufferedReader name=3>")


@pytest.fixture
def pyspark_handler():
    previous = signal.signal(signal.SIGINT, _pyspark_like_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_cancels_the_stage_and_raises_keyboard_interrupt(pyspark_handler):
    session = _Session()
    with pytest.raises(KeyboardInterrupt, match=r"TFEstimator.fit was interrupted \(Ctrl-C\); "
                                                r"its barrier stage was cancelled"):
        supervision.collect(session, _Job(session), None, "TFEstimator.fit", "sparktf-tag")
    assert session.cancels == ["sparktf-tag"]  # this stage's jobs, not every job
    assert signal.getsignal(signal.SIGINT) is _pyspark_like_handler  # put back


def test_ctrl_c_as_the_stage_ends_on_its_own_still_stops_the_fit(pyspark_handler):
    session = _Session()
    job = _Job(session, runs_s=0.0, rows=[{"rank": 0}])
    with pytest.raises(KeyboardInterrupt, match="interrupted"):
        supervision.collect(session, job, None, "sparktf.run", "sparktf-tag")


def test_a_second_ctrl_c_stops_waiting_for_the_cancellation(pyspark_handler):
    session = _Session()
    with pytest.raises(KeyboardInterrupt, match="Ctrl-C twice"):
        supervision.collect(session, _Job(session, presses=2), None, "sparktf.run", "t")
    assert signal.getsignal(signal.SIGINT) is _pyspark_like_handler


def test_a_fit_outside_the_main_thread_leaves_sigint_alone(pyspark_handler):
    session, out = _Session(), []
    job = _Job(session, presses=0, runs_s=0.0, rows=[{"rank": 0}])
    thread = threading.Thread(target=lambda: out.append(
        supervision.collect(session, job, None, "sparktf.run", "t")))
    thread.start()
    thread.join(10)
    assert out == [[{"rank": 0}]] and signal.getsignal(signal.SIGINT) is _pyspark_like_handler


def test_a_stage_cancelled_from_outside_the_fit_says_so_and_is_not_relaunched():
    """The Spark UI's kill link, or a cancelAllJobs from another thread (PySpark's own
    Ctrl-C handler, when the fit runs in another thread than the main one)."""
    spark_said = ("An error occurred while calling o129.collectToPython.\n: "
                  "org.apache.spark.SparkException: Job 7 cancelled as part of cancellation "
                  "of all jobs\n\tat org.apache.spark.scheduler.DAGScheduler...")
    error = failures.translate(Exception(spark_said), {}, "TFEstimator.fit")
    assert type(error) is SparkTFError
    assert "TFEstimator.fit's barrier stage was cancelled before it finished" in str(error)
    assert "Spark said: org.apache.spark.SparkException: Job 7 cancelled as part of " \
           "cancellation of all jobs" in str(error)
    assert "failed before any task reported an error" not in str(error)
    assert not failures.FailurePolicy(max_retries=3).decide(error, 0).retry


def test_a_thread_whose_jobs_were_cancelled_submits_no_barrier_job():
    """Spark cancels only the jobs running when it is asked: a trial still preparing its fit
    when a search's maxTime ran out submitted its job after the cancel. ``collect`` refuses
    it, with an error that says so (and that launch raises as it is, not as a failure Spark
    reported)."""

    class Cancelled(_Session):
        def cancelled_tag(self):
            return "sparktf-search-1"

    class NeverRun(_Job):
        def collect(self):
            raise AssertionError("the barrier job was submitted")

    session = Cancelled()
    with pytest.raises(supervision.NotSubmittedError,
                       match="not submitted: the jobs of its thread were cancelled "
                             r"\(job tag 'sparktf-search-1'\)"):
        supervision.collect(session, NeverRun(session), None, "TFEstimator.fit", "sparktf-t")


def _search_with(monkeypatch, runner):
    """A search of one trial over a stand-in session that records its cancels."""
    from sparktf._driver import sessions
    from sparktf.ml.tuning import halving
    from sparktf.ml.tuning import loop as search_loop

    cancels, cancelled = [], threading.Event()

    class Spark:
        class sparkContext:
            @staticmethod
            def cancelJobsWithTag(tag):
                cancels.append(tag)
                cancelled.set()

    monkeypatch.setattr(search_loop, "_inheritable", lambda spark: (lambda target: target))
    monkeypatch.setattr(sessions.Session, "add_tag", lambda self, tag: None)
    monkeypatch.setattr(sessions.Session, "remove_tag", lambda self, tag: None)
    search = search_loop.Search(runner, halving.Halving(1, [1], 2), [{}], "loss", False, 0)
    runner.cancelled = cancelled
    return search, Spark(), cancels


def _join_trial_threads():
    for thread in threading.enumerate():
        if thread.name.startswith("sparktf-trial"):
            thread.join(30)


def test_a_search_keeps_its_tag_cancelled_until_its_trials_end_after_a_second_ctrl_c(
        monkeypatch):
    """A second Ctrl-C while the search cancels its trials' jobs ends the cancelling; the
    trials' threads still run on (the pool waits for them). One still preparing its fit
    submits its job then: the search's tag must still be cancelled, or that job runs
    uncancelled (it was forgotten as the cancelling ended). Forgotten once they end."""
    from concurrent import futures

    from sparktf._driver import sessions
    from sparktf.ml.tuning import loop as search_loop

    exiting, seen = threading.Event(), []

    class Runner:
        def train(self, index, epochs):  # preparing its fit until the pool waits for it
            exiting.wait(30)
            seen.append(set(sessions._CANCELLED_TAGS))  # what its job's submission sees
            return 1.0

    interrupts = iter([KeyboardInterrupt("Ctrl-C"), KeyboardInterrupt("Ctrl-C again")])

    def wait(*args, **kwargs):
        raise next(interrupts)

    shutdown = futures.ThreadPoolExecutor.shutdown

    def shutdown_noted(pool, *args, **kwargs):
        exiting.set()
        return shutdown(pool, *args, **kwargs)

    search, spark, _ = _search_with(monkeypatch, Runner())
    monkeypatch.setattr(search_loop.futures, "wait", wait)
    monkeypatch.setattr(search_loop.futures.ThreadPoolExecutor, "shutdown", shutdown_noted)
    before = set(sessions._CANCELLED_TAGS)
    with pytest.raises(KeyboardInterrupt, match="again"):
        search.run(1, spark)
    [tags] = seen
    [tag] = tags - before
    assert tag.startswith("sparktf-search-")
    assert tag not in sessions._CANCELLED_TAGS  # forgotten once the trial's thread ended


def test_a_ctrl_c_as_a_trial_s_thread_starts_cancels_the_tag_for_it(monkeypatch):
    """Found by review: a Ctrl-C inside ``pool.submit`` (its thread's start waits on an
    event, where the main thread takes signals) left a queued trial that was never in
    the loop's ``running``: the tag was not cancelled, the trial's job ran to its end, and
    a second Ctrl-C forgot the tag while it ran. Now the tag is cancelled at once, queued
    trials never start, and one already started submits under the cancelled tag."""
    from concurrent import futures

    from sparktf._driver import sessions

    seen = []

    class Runner:
        def train(self, index, epochs):  # preparing its fit past the Ctrl-C
            self.cancelled.wait(5)
            seen.append(set(sessions._CANCELLED_TAGS))  # what its job's submission sees
            return 1.0

    search, spark, cancels = _search_with(monkeypatch, Runner())
    adjust = futures.ThreadPoolExecutor._adjust_thread_count

    def adjust_then_ctrl_c(pool):
        adjust(pool)
        raise KeyboardInterrupt("Ctrl-C as the trial's thread started")

    monkeypatch.setattr(futures.ThreadPoolExecutor, "_adjust_thread_count",
                        adjust_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt, match="started"):
        search.run(1, spark)
    _join_trial_threads()
    assert cancels, "the tag was never cancelled"
    [tag] = set(cancels)
    print(f"the trial ran {len(seen)} time(s); cancels: {len(cancels)}")
    assert all(tag in tags for tags in seen), "a trial submitted under a tag not cancelled"
    assert tag not in sessions._CANCELLED_TAGS  # forgotten once no trial can submit


def test_a_third_ctrl_c_leaves_the_tag_to_the_last_trial_to_forget(monkeypatch):
    """Found by review: after a third Ctrl-C (the pool's wait for its threads) the tag was
    never forgotten, and every later job of the application looked it up. The last trial
    to end forgets it; until then it stays cancelled."""
    from concurrent import futures

    from sparktf._driver import sessions
    from sparktf.ml.tuning import loop as search_loop

    release, seen = threading.Event(), []

    class Runner:
        def train(self, index, epochs):
            release.wait(30)
            seen.append(set(sessions._CANCELLED_TAGS))
            return 1.0

    search, spark, cancels = _search_with(monkeypatch, Runner())
    interrupts = iter([KeyboardInterrupt("Ctrl-C"), KeyboardInterrupt("Ctrl-C again")])

    def wait(*args, **kwargs):
        raise next(interrupts)

    shutdown = futures.ThreadPoolExecutor.shutdown

    def shutdown_interrupted(pool, wait=True, **kwargs):
        shutdown(pool, wait=False, **kwargs)
        if wait:
            raise KeyboardInterrupt("a third Ctrl-C")

    monkeypatch.setattr(search_loop.futures, "wait", wait)
    monkeypatch.setattr(futures.ThreadPoolExecutor, "shutdown", shutdown_interrupted)
    with pytest.raises(KeyboardInterrupt, match="third"):
        search.run(1, spark)
    [tag] = set(cancels)
    assert tag in sessions._CANCELLED_TAGS, "forgotten while its trial still runs"
    release.set()
    _join_trial_threads()
    [tags] = seen
    assert tag in tags
    assert tag not in sessions._CANCELLED_TAGS, "the last trial to end forgets the tag"
