"""The loop of a ``HalvingSearch`` on the driver: ``parallelism`` trials' fits at once
in threads of its own, each finished fit reported to the schedule (``halving``) and the
next job started at once, a line per rung decision, each trial's record at the end.
A trial drawn by a model-based sampler (``samplers``) is drawn as its first job starts.
At ``maxTime`` no job starts any more and the running ones are cancelled: each keeps
the epochs its last checkpoint holds. A trial that can no longer be promoted gives its
checkpoints back at once, and the finished search keeps only its best trial's.

A trial's own failure (``TaskFailedError``, a NaN metric) stops that trial; any other
error, or Ctrl-C, cancels the running trials' Spark jobs (a job tag per search) and is
raised once their threads end. With a journal (``journal``), each decision is
written before the next job starts, and a search that finds one resumes from it.
"""

from __future__ import annotations

import concurrent.futures as futures
import itertools
import logging
import math
import threading
import time
import uuid

from pyspark.util import inheritable_thread_target

from sparktf._driver import sessions, versions
from sparktf.errors import SparkTFError, TaskFailedError
from sparktf.ml.tuning import halving, samplers, trials
from sparktf.ml.tuning import journal as search_journal

logger = logging.getLogger("sparktf")
_SEARCHES = itertools.count(1)  # "search N": the lines of searches at once told apart


CANCEL_AGAIN_S = 2.0


def _cancel_until_done(session: sessions.Session, tag: str, running: set) -> None:
    """Cancels the search's jobs until the trials' threads in ``running`` end: a trial still
    preparing its fit (or between two of its jobs) submits a job after a cancel, which that
    cancel missed (its job would run on, held by nothing but its own end)."""
    while running:
        session.cancel_tag(tag)
        _, running = futures.wait(running, timeout=CANCEL_AGAIN_S)


class _LiveTrials:
    """The trials' threads of one search that are running, under a lock: the search's
    (cancelled) tag is forgotten when the search has ended and the last of them has, so
    that no trial still preparing its fit can submit a job under a forgotten tag."""

    def __init__(self, tag: str):
        self.tag, self.live, self.ended = tag, 0, False
        self._lock = threading.Lock()

    def enter(self) -> bool:
        with self._lock:
            if self.ended:
                return False
            self.live += 1
            return True

    def leave(self) -> None:
        with self._lock:
            self.live -= 1
            if self.ended and self.live == 0:
                sessions.forget_tag(self.tag)

    def end(self) -> None:
        with self._lock:
            self.ended = True
            if self.live == 0:
                sessions.forget_tag(self.tag)


class Search:
    """One search's loop: keeps ``parallelism`` fits running, reports each finished fit
    to the schedule, says each decision. ``metric``: the name the lines give the metric;
    ``larger_is_better``: its direction (the schedule ranks lower first)."""

    def __init__(self, runner: trials.Trials, schedule: halving.Halving, labels: list[dict],
                 metric: str, larger_is_better: bool, verbose: int,
                 journal: search_journal.Journal | None = None,
                 sampler: samplers.TPE | None = None, deadline: float | None = None,
                 keep_checkpoints: bool = False):
        self.runner, self.schedule, self.labels = runner, schedule, labels
        self.sampler, self.draws = sampler, {}
        self.deadline, self.out_of_time = deadline, False
        self.keep_checkpoints, self.given_back = keep_checkpoints, set()
        self.sign = -1.0 if larger_is_better else 1.0
        self.name, self.verbose = metric, verbose
        self.factor = schedule.factor
        self.errors: dict[int, str] = {}
        self.label = f"search {next(_SEARCHES)}"
        self.journal = journal
        self.pending: list[tuple[int, int, int]] = []  # jobs a lost driver left running
        self.pending_started: set[tuple[int, int, int]] = set()
        self.stopping = False
        if journal is not None:
            self._resume(journal.load())

    def _resume(self, events: list[dict]) -> None:
        """Puts a lost driver's decisions into the schedule; its running jobs go first."""
        if not events:
            return
        state = search_journal.replay(events, self.schedule, self.sign)
        for index, drawn in state["draws"].items():
            self._use_draw(index, drawn)
        self.runner.histories.update(state["histories"])
        self.errors.update(state["errors"])
        self.pending = [(i, start, end) for i, (start, end) in state["running"].items()]
        self.pending_started = set(self.pending)
        n, one = len(self.pending), len(self.pending) == 1
        self.say("resumes from its journal (results at rungs: %d); %d job%s that %s running "
                 "when its driver was lost continue%s from the last checkpoint",
                 sum(e["kind"] == "report" for e in events), n, "" if one else "s",
                 "was" if one else "were", "s" if one else "")

    def _write(self, kind: str, index: int, **values) -> None:
        if self.journal is not None:
            self.journal.record(kind, index, **values)

    def say(self, text: str, *args) -> None:
        if self.verbose:
            logger.info(f"sparktf: {self.label}: " + text, *args)

    def run(self, parallelism: int, spark) -> None:
        """Trains the schedule's jobs, ``parallelism`` at once. A failure that is not one
        trial's own (or Ctrl-C) cancels the running trials' jobs and is raised."""
        session, tag = sessions.Session(spark), f"sparktf-search-{uuid.uuid4().hex}"

        live = _LiveTrials(tag)

        def train(index: int, epochs: int) -> float | None:
            if not live.enter():  # the search has ended: a trial dequeued as it did
                return None
            try:
                session.add_tag(tag)  # this thread's jobs: cancelled with the search
                try:
                    return self.runner.train(index, epochs)
                finally:
                    session.remove_tag(tag)
            finally:
                live.leave()

        fatal = None
        running: dict = {}
        try:
            with futures.ThreadPoolExecutor(parallelism, thread_name_prefix="sparktf-trial") \
                    as pool:
                try:
                    while True:
                        while fatal is None and not self._time_is_up() and \
                                len(running) < parallelism:
                            job = self.pending.pop(0) if self.pending else self.schedule.next_job()
                            if job is None:
                                break
                            self._starting(*job)
                            running[pool.submit(_inheritable(spark)(train),
                                                job[0], job[2])] = job
                        if not running:
                            break
                        if fatal is not None or self.out_of_time:  # their ends collected
                            _cancel_until_done(session, tag, set(running))
                        done, _ = futures.wait(running, timeout=self._time_left(),
                                               return_when=futures.FIRST_COMPLETED)
                        for future in done:
                            error = self._collect(future, running.pop(future))
                            fatal = fatal or error  # the first: the others are its cancels
                            self.stopping = fatal is not None
                        if fatal is None:  # a search that fails is resumed with what it had
                            self._give_back()
                except BaseException:  # Ctrl-C: the running trials' jobs go, then the pool
                    self.stopping = True
                    # at once, also for a trial whose thread the Ctrl-C met starting (in
                    # pool.submit: its future is queued, and not in ``running``)
                    session.cancel_tag(tag)
                    pool.shutdown(wait=False, cancel_futures=True)  # no queued trial starts
                    _cancel_until_done(session, tag, set(running))
                    raise
        finally:
            # a cancelled tag is kept while a trial's thread may still submit a job (a
            # second Ctrl-C ends _cancel_until_done, and a third the pool's wait for them):
            # the last trial to end forgets it
            live.end()
        if fatal is not None:
            raise fatal
        if self.out_of_time:
            self.schedule.out_of_time()
        self.schedule.done()
        self._give_back(final=True)
        for trial in self.schedule.trials:
            if trial.ended == halving.STOPPED:
                self.say("trial %d stops at %d epochs (%s=%.4f: %s)", trial.index,
                         self.schedule.rungs[trial.rung], self.name,
                         self.sign * trial.metrics[-1], self._why_stopped(trial))

    def _why_stopped(self, trial: halving.Trial) -> str:
        """Why a trial that finished its rung went no further."""
        n = self.schedule.reached(trial.rung)
        if n < self.factor:
            return (f"{n} trial{'s' * (n > 1)} reached {self.schedule.rungs[trial.rung]} "
                    f"epochs, fewer than reductionFactor={self.factor}: none is promoted")
        return (f"not in the top 1/{self.factor} of the {n} trials at "
                f"{self.schedule.rungs[trial.rung]} epochs")

    def _collect(self, future, job) -> BaseException | None:
        """Reports a finished trial's fit to the schedule; the error that stops the search,
        if its fit raised one that is not the trial's own. After maxTime, a job that
        raised was cancelled by it: the trial keeps its last checkpoint."""
        index, _, epochs = job
        try:
            self._finished(index, epochs, future.result())
        except Exception as e:  # noqa: BLE001 - sorted below
            if self.out_of_time and not self.stopping and not isinstance(e, TaskFailedError):
                self._cut(index)  # its job cancelled
                return None
            self.schedule.fail(index)
            if not isinstance(e, TaskFailedError):  # the search's: raised by run
                return e
            if self.stopping:  # cancelled by the search's own error: not the trial's
                return None
            self.errors[index] = f"{type(e).__name__}: {e}"  # the trial's own failure
            self._write("fail", index, error=self.errors[index])
            self.say("trial %d (%s) failed: %s", index, self._label(index),
                     str(e).splitlines()[0])
        except BaseException as e:  # noqa: BLE001 - Ctrl-C: raised by run
            self.schedule.fail(index)
            return e
        return None

    def _time_left(self) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def _time_is_up(self) -> bool:
        """Whether maxTime ran out (said once): no job starts any more, the running ones
        are cancelled."""
        if not self.out_of_time and self.deadline is not None and \
                time.monotonic() >= self.deadline:
            self.out_of_time = True
            running = [t.index for t in self.schedule.trials if t.running]
            self.say("maxTime ran out: no job starts any more%s", (
                f"; the jobs of trials {', '.join(map(str, running))} stop at their last "
                "checkpoint" if running else ""))
        return self.out_of_time

    def _cut(self, index: int) -> None:
        """Trial ``index``'s job was cancelled at maxTime: it keeps what its last
        checkpoint holds."""
        self.runner.as_far_as_it_got(index)
        trained = self.runner.epochs_trained(index)
        self.schedule.trials[index].running = False
        self.schedule.end(index, f"maxTime ran out after {trained} epochs")
        self.say("trial %d (%s) stops at maxTime after %d epochs", index, self._label(index),
                 trained)

    def _give_back(self, final: bool = False) -> None:
        """Removes the checkpoints of the trials that can no longer train on (all but the
        best's once the search is over), unless ``keepTrialCheckpoints``, or maxTime cut a
        search that a fit of its ``runId`` continues."""
        if self.keep_checkpoints or self.out_of_time and self.journal is not None:
            return  # a search cut by maxTime continues from them when fitted again
        best = self.schedule.best()
        alive = set() if final else self.schedule.may_train()
        for trial in self.schedule.trials:
            if trial.index in self.given_back or trial.index in alive or trial.running or (
                    best is not None and trial.index == best.index):
                continue
            self.given_back.add(trial.index)
            if self.runner.give_back(trial.index) and self.verbose > 1:
                self.say("trial %d can no longer be promoted: its checkpoints are given "
                         "back", trial.index)

    def _told(self) -> list[samplers.Told]:
        """What the sampler is told: every drawn trial's results at the rungs it reached."""
        rungs = self.schedule.rungs
        return [samplers.Told(tuple(self.draws[t.index]),
                              {rungs[k]: m for k, m in enumerate(t.metrics)},
                              complete=t.ended == halving.FINISHED,
                              failed=t.ended == halving.FAILED, running=t.running)
                for t in self.schedule.trials if t.index in self.draws]

    def _use_draw(self, index: int, drawn: list) -> None:
        self.draws[index] = list(drawn)
        self.runner.drawn(index, self.sampler.param_map(drawn))
        self.labels[index] = trials.labels([self.runner.maps[index]], self.runner.stage,
                                           drawn=self.sampler.names)[0]

    def _label(self, index: int) -> str:
        return trials.shown(self.labels[index])

    def _starting(self, index: int, start: int, epochs: int) -> None:
        if (index, start, epochs) in self.pending_started:
            self.say("trial %d continues its job from %d to %d epochs, which the lost "
                     "driver had started", index, start, epochs)
            return
        if self.sampler is not None and index not in self.draws:
            self._use_draw(index, self.sampler.draw(index, self._told()))
            self._write("start", index, epochs=[start, epochs], drawn=self.draws[index])
            self.say("trial %d drawn by TPE from the results of %d trials: %s", index,
                     sum(1 for t in self.schedule.trials if t.metrics), self._label(index))
        else:
            self._write("start", index, epochs=[start, epochs])
        if start:
            k = self.schedule.rungs.index(start)
            self.say("trial %d promoted: it continues from %d to %d epochs (%s=%.4f, in the "
                     "top 1/%d of the %d trials at %d epochs)", index, start, epochs, self.name,
                     self.sign * self.schedule.trials[index].metrics[k], self.factor,
                     self.schedule.reached(k), start)

    def _finished(self, index: int, epochs: int, value: float) -> None:
        trained = self.runner.epochs_trained(index)
        if not math.isfinite(value):
            self.schedule.fail(index)
            self.errors[index] = f"its {self.name} was {value} after {trained} epochs"
            self._write("fail", index, error=self.errors[index],
                         history=self.runner.histories.get(index))
            self.say("trial %d (%s) failed: %s=%s after %d epochs", index, self._label(index),
                     self.name, value, trained)
            return
        self.schedule.report(index, self.sign * value)
        why = None
        if self.runner.stopped(index) and (trained < self.schedule.rungs[-1] or
                                           self.schedule.trials[index].ended is None):
            why = f"stopped by its callbacks after {trained} epochs"
            self.schedule.end(index, why)
        # one decision, one write: a driver lost between two would resume another search
        self._write("report", index, value=value, history=self.runner.histories[index],
                    ended=why)
        k = self.schedule.trials[index].rung
        ranked = [t.index for t in self.schedule.at_rung(k)]
        self.say("trial %d (%s): %s=%.4f after %d epochs, %d of %d at this rung", index,
                 self._label(index), self.name, value, trained, ranked.index(index) + 1,
                 len(ranked))
        if why is not None:
            self.say("trial %d stops: its callbacks stopped it after %d epochs", index,
                     trained)

    def result(self) -> tuple[int, list[dict]]:
        """The best trial's index and every trial's record; ``SparkTFError`` if every
        trial failed."""
        best = self.schedule.best()
        if best is None and self.out_of_time:
            raise SparkTFError(
                f"maxTime ran out before any trial finished its first rung "
                f"({self.schedule.rungs[0]} epochs): there is no best trial yet. Fit the "
                "search again with a larger maxTime (with a runId it continues where it "
                "stopped), or fewer minEpochs.")
        if best is None:
            said = "; ".join(f"trial {i}: {e.splitlines()[0]}" for i, e in
                             sorted(self.errors.items())[:3])
            raise SparkTFError(f"Every trial of the search failed ({said}). Fix the cause "
                               "the first trials name, then fit again.")
        return best.index, [self._record(t) for t in self.schedule.trials]

    def _record(self, trial: halving.Trial) -> dict:
        reason = {halving.FAILED: "failed: " + self.errors.get(trial.index, "?"),
                  halving.STOPPED: self._why_stopped(trial) if trial.metrics else "",
                  halving.FINISHED: "trained to maxEpochs"}.get(trial.ended, trial.ended)
        return {"trial": trial.index, "params": self.labels[trial.index],
                "epochs": self.runner.epochs_trained(trial.index),
                "rungEpochs": self.schedule.rungs[:len(trial.metrics)],
                "metrics": [self.sign * m for m in trial.metrics],
                "stopReason": reason,
                "history": self.runner.histories.get(trial.index, {})}


def _inheritable(spark):
    """pyspark's wrapper of a thread's target that carries the caller's job properties
    (and, from pyspark 4.0, a Connect session's tags) into the thread."""
    return inheritable_thread_target(spark) if versions.has(versions.CONNECT_ML) \
        else inheritable_thread_target
