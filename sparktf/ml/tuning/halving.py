"""Asynchronous successive halving (ASHA: Li et al., "A System for Massively Parallel
Hyperparameter Tuning", MLSys 2020): which trial trains next, and to which epoch.

Pure bookkeeping, no Spark: the tuning estimator asks ``next_job`` whenever it has room
for a fit, runs it, and ``report``s the metric the fit reached at its rung (or ``fail``s
it). Rungs are epoch counts: ``minEpochs``, then ``reductionFactor`` times the one before,
capped at ``maxEpochs`` (which is always the last rung). A trial that finished rung k is
promoted to rung k + 1 as soon as it is among the best ``floor(n_k / factor)`` of the
``n_k`` trials that finished rung k, without waiting for the trials still training: the
asynchronous rule, which keeps every slot busy. Promotions are looked for from the top
rung down, so the most trained trials finish first; with no promotion to make, a new trial
starts at rung 0. When neither is possible and no fit is running, the search is over:
every trial that finished a rung and was not promoted stopped there. A trial that fails
(its fit fails, or its metric is NaN) stops; it still counts among the trials that
finished its earlier rungs, but its place among their best goes to the next trial.

A promoted trial resumes from its checkpoint (the fit's ``runId``): it trains only the
epochs between its rungs, never one twice.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from sparktf.errors import InvalidInputError

STOPPED, FAILED, FINISHED = "below the cut", "failed", "trained to maxEpochs"
NOT_STARTED = "never started: maxTime ran out first"
OUT_OF_TIME = "maxTime ran out before it could be promoted"


def rungs(min_epochs: int, max_epochs: int, factor: int) -> list[int]:
    """The epoch counts trials are compared at: ``min_epochs`` times powers of ``factor``,
    below ``max_epochs``, then ``max_epochs``."""
    if min_epochs < 1 or max_epochs < min_epochs or factor < 2:
        raise InvalidInputError(
            "HalvingSearch needs 1 <= minEpochs <= maxEpochs and reductionFactor >= 2. "
            f"Received: minEpochs={min_epochs}, maxEpochs={max_epochs}, "
            f"reductionFactor={factor}")
    found, epochs = [], min_epochs
    while epochs < max_epochs:
        found.append(epochs)
        epochs *= factor
    return found + [max_epochs]


def extended(before: list[int], now: list[int], factor: int) -> list[int]:
    """The rungs of a finished search asked for a larger ``maxEpochs``: its own rungs,
    then on by ``factor`` up to the new last rung (``now[-1]``), so that every result it
    holds stays a result at a rung. ``now`` itself when the search does not grow so (the
    same rungs, fewer epochs, another ``minEpochs`` or factor: which its journal refuses)."""
    if now[-1] <= before[-1] or before[:-1] != now[:len(before) - 1]:
        return now
    grown, epochs = list(before), before[-1] * factor
    while epochs < now[-1]:
        grown.append(epochs)
        epochs *= factor
    return grown + [now[-1]]


def start_order(seed: int, before: list[int] | None, now: int) -> list[int]:
    """The order ``now`` trials start in: a permutation drawn from ``seed``; for a search
    that grows, the order of the search it extends (``before``), then a permutation of
    the new trials."""
    if before is None:
        return [int(i) for i in np.random.default_rng(seed).permutation(now)]
    if now <= len(before):
        return list(before[:now])
    rest = np.random.default_rng([seed, len(before)]).permutation(now - len(before))
    return list(before) + [len(before) + int(i) for i in rest]


@dataclasses.dataclass
class Trial:
    """One point of the search: its index, the rungs it finished with their metric (lower
    is better), and how it ended (None while it may still train)."""

    index: int
    metrics: list = dataclasses.field(default_factory=list)
    ended: str | None = None
    running: bool = False

    @property
    def rung(self) -> int:
        """The last rung it finished (-1: none yet)."""
        return len(self.metrics) - 1


class Halving:
    """The schedule of ``num_trials`` trials over ``rungs`` (epoch counts)."""

    def __init__(self, num_trials: int, rung_epochs: list[int], factor: int,
                 order: list[int] | None = None):
        self.rungs, self.factor = list(rung_epochs), factor
        self.trials = [Trial(i) for i in range(num_trials)]
        # the order trials start in (a grid's order would put its neighbours first, whose
        # best is promoted against little competition)
        self.order = list(order) if order is not None else list(range(num_trials))
        self.promoted: list[set[int]] = [set() for _ in self.rungs]
        self.started = 0

    def next_job(self) -> tuple[int, int, int] | None:
        """(trial, from epoch, to epoch) to train next, or None when nothing can start now
        (wait for a running fit's report; ``done()`` says whether the search is over)."""
        for k in range(len(self.rungs) - 2, -1, -1):
            trial = self._promotable(k)
            if trial is not None:
                self.promoted[k].add(trial.index)
                trial.running = True
                return trial.index, self.rungs[k], self.rungs[k + 1]
        if self.started < len(self.trials):
            trial = self.trials[self.order[self.started]]
            self.started += 1
            trial.running = True
            return trial.index, 0, self.rungs[0]
        return None

    def started_job(self, index: int, start: int, end: int) -> None:
        """Puts in a job a lost (or finished) search started: trial ``index`` from
        ``start`` to ``end`` epochs, as ``next_job`` would have returned it."""
        trial = self.trials[index]
        if start == 0:
            if self.order[self.started] != index:
                raise InvalidInputError(
                    f"The search's journal started trial {index} where this schedule starts "
                    f"trial {self.order[self.started]}: it was written by another version. "
                    "Use a new runId.")
            self.started += 1
        else:
            self.promoted[self.rungs.index(start)].add(index)
        trial.running = True

    def _promotable(self, k: int) -> Trial | None:
        """The best trial of rung k that is among its top ``floor(n_k / factor)`` and not
        promoted yet: n_k counts every trial that finished rung k, a trial that failed
        since too, whose place goes to the next trial."""
        for trial in self.at_rung(k)[:self.reached(k) // self.factor]:
            if trial.index not in self.promoted[k] and trial.ended is None:
                return trial
        return None

    def reached(self, k: int) -> int:
        """n_k: how many trials finished rung k (a trial that failed after it included)."""
        return sum(1 for t in self.trials if t.rung >= k)

    def at_rung(self, k: int) -> list[Trial]:
        """The trials that finished rung k and did not fail, best first."""
        finished = [t for t in self.trials if t.rung >= k and t.ended != FAILED]
        return sorted(finished, key=lambda t: (t.metrics[k], t.index))

    def report(self, index: int, metric: float) -> None:
        """The metric (lower is better) trial ``index`` reached at the end of its job;
        NaN or infinite: the trial failed."""
        trial = self.trials[index]
        trial.running = False
        if metric is None or not math.isfinite(metric):
            trial.ended = FAILED
            return
        trial.metrics.append(float(metric))
        if trial.rung == len(self.rungs) - 1:
            trial.ended = FINISHED

    def end(self, index: int, why: str) -> None:
        """Trial ``index`` can train no further (a callback of its fit stopped it): it keeps
        its place among the best of its rung, as a promoted trial would, and is not
        promoted."""
        self.trials[index].ended = why

    def fail(self, index: int) -> None:
        """Trial ``index``'s fit failed: it is stopped; its place among the best of the
        rungs it finished goes to the next trial."""
        self.trials[index].running = False
        self.trials[index].ended = FAILED

    def may_train(self) -> set[int]:
        """The trials that may still train: running, not started, or able to be promoted
        however the others end (the most trials that can still reach their rung all worse
        than them). Worked out from the lowest rung up: a trial that cannot train on
        brings no trial above it the room of a promotion."""
        alive: set[int] = set()
        for k in range(-1, len(self.rungs)):
            below = len(alive)  # every trial found so far is below rung k
            for trial in self.trials:
                if trial.rung != k:
                    continue
                if trial.running or k < 0 and trial.ended is None:
                    alive.add(trial.index)
                elif trial.ended is None and k < len(self.rungs) - 1 and \
                        trial.index not in self.promoted[k]:
                    ahead = sum(1 for t in self.at_rung(k) if (t.metrics[k], t.index) <
                                (trial.metrics[k], trial.index))
                    if ahead < (self.reached(k) + below) // self.factor:
                        alive.add(trial.index)
        return alive

    def out_of_time(self) -> None:
        """The search's time ran out: no trial starts or is promoted any more."""
        for trial in self.trials:
            if trial.rung < 0 and trial.ended is None and not trial.running:
                trial.ended = NOT_STARTED
        self.started = len(self.trials)
        open_ = self.may_train()  # had the search gone on with the trials it started
        for trial in self.trials:
            if trial.ended is None and not trial.running:
                trial.ended = OUT_OF_TIME if trial.index in open_ else STOPPED

    def done(self) -> bool:
        """No fit runs and none can start: every trial still open stopped where it is."""
        if any(t.running for t in self.trials) or self.started < len(self.trials) or any(
                self._promotable(k) is not None for k in range(len(self.rungs) - 1)):
            return False
        for trial in self.trials:
            if trial.ended is None:
                trial.ended = STOPPED
        return True

    def best(self) -> Trial | None:
        """The trial that reached the highest rung with the best metric there."""
        reached = [t for t in self.trials if t.metrics and t.ended != FAILED]
        if not reached:
            return None
        top = max(t.rung for t in reached)
        return min((t for t in reached if t.rung == top), key=lambda t: (t.metrics[-1],
                                                                         t.index))
