"""Asynchronous successive halving's bookkeeping (sparktf.ml.tuning.halving) against a schedule
computed by hand, and its invariants over generated searches."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparktf.ml.tuning import halving
from tests.budget import examples

RUNG0 = [5, 3, 8, 1, 9, 2, 7, 6, 4]  # each trial's metric at rung 0 (lower is better)


def _metric(trial: int, rung: int) -> float:
    return RUNG0[trial] - 0.5 * rung


def test_rungs_are_min_epochs_times_powers_of_the_factor_then_max_epochs():
    assert halving.rungs(1, 27, 3) == [1, 3, 9, 27]
    assert halving.rungs(2, 20, 3) == [2, 6, 18, 20]
    assert halving.rungs(5, 5, 3) == [5]
    with pytest.raises(ValueError, match="reductionFactor >= 2"):
        halving.rungs(1, 9, 1)


def test_nine_trials_on_one_slot_follow_the_schedule_computed_by_hand():
    """Rungs 1, 3, 9 epochs, factor 3, one fit at a time: a trial is promoted as soon as
    it is among the best third of those that finished its rung."""
    search = halving.Halving(9, halving.rungs(1, 9, 3), 3)
    jobs = []
    while (job := search.next_job()) is not None:
        jobs.append(job)
        trial, _, to = job
        search.report(trial, _metric(trial, halving.rungs(1, 9, 3).index(to)))
    assert jobs == [(0, 0, 1), (1, 0, 1), (2, 0, 1), (1, 1, 3), (3, 0, 1), (3, 1, 3),
                    (4, 0, 1), (5, 0, 1), (5, 1, 3), (3, 3, 9), (6, 0, 1), (7, 0, 1),
                    (8, 0, 1)]
    assert search.done()
    epochs = [sum(to - start for t, start, to in jobs if t == i) for i in range(9)]
    assert epochs == [1, 3, 1, 9, 1, 3, 1, 1, 1]  # 21 epochs, where a grid trains 81
    assert search.best().index == 3 and search.best().metrics == [1, 0.5, 0.0]
    assert [t.ended for t in search.trials] == [halving.STOPPED] * 3 + [halving.FINISHED] + \
        [halving.STOPPED] * 5


def test_a_failed_or_diverged_trial_is_stopped_and_never_counted():
    search = halving.Halving(3, [1, 3], 3)
    assert search.next_job() == (0, 0, 1)
    search.fail(0)
    assert search.next_job() == (1, 0, 1)
    search.report(1, math.nan)
    assert search.next_job() == (2, 0, 1)
    search.report(2, 0.7)
    assert search.next_job() is None and search.done()
    assert [t.ended for t in search.trials] == [halving.FAILED, halving.FAILED,
                                                halving.STOPPED]
    assert search.best().index == 2
    every_failed = halving.Halving(1, [1], 3)
    every_failed.next_job()
    every_failed.fail(0)
    assert every_failed.done() and every_failed.best() is None


@settings(max_examples=examples(60), deadline=None)
@given(num_trials=st.integers(1, 30), slots=st.integers(1, 5),
       schedule=st.sampled_from([(1, 9, 3), (1, 27, 3), (2, 16, 2), (3, 3, 3)]),
       data=st.data())
def test_any_search_trains_no_epoch_twice_and_promotes_only_the_top_fraction(
        num_trials, slots, schedule, data):
    rung_epochs = halving.rungs(*schedule)
    factor = schedule[2]
    order = data.draw(st.permutations(range(num_trials)))
    search = halving.Halving(num_trials, rung_epochs, factor, order)
    metrics = {}
    running, trained, jobs = [], {i: 0 for i in range(num_trials)}, []
    while True:
        while len(running) < slots and (job := search.next_job()) is not None:
            trial, start, to = job
            assert start == trained[trial], "a trial resumes where it stopped"
            if start:  # a promotion: among the best floor(n / factor) of its rung (a
                # trial that failed since counts in n, its place goes to the next)
                k = rung_epochs.index(start)
                failed = {t.index for t in search.trials if t.ended == halving.FAILED}
                reached = [t for (t, r) in metrics if r == k]
                ranked = sorted(metrics[(t, k)] for t in reached if t not in failed)
                assert metrics[(trial, k)] <= ranked[min(len(reached) // factor, len(ranked)) - 1]
            running.append(job)
            jobs.append(job)
        if not running:
            break
        trial, start, to = running.pop(data.draw(st.integers(0, len(running) - 1)))
        trained[trial] = to
        outcome = data.draw(st.one_of(st.floats(0, 10), st.just(math.nan)))
        if outcome == outcome:
            metrics[(trial, rung_epochs.index(to))] = outcome
        search.report(trial, outcome)
    assert search.done()
    assert all(t.ended is not None and not t.running for t in search.trials)
    assert max(trained.values()) <= rung_epochs[-1]
    first = [t for t, start, _ in jobs if start == 0]
    assert first == order, "trials start in the order given"


def test_a_trial_its_callbacks_stopped_keeps_its_place_and_is_not_promoted():
    """Trial 1 (the best at rung 0) was stopped by its own callbacks: its place among the
    best third is taken, as a promoted trial's would be, so the next promotion waits for
    the rung to fill; it ends as its callbacks left it."""
    search = halving.Halving(6, [1, 3], 3)
    for _ in range(3):
        trial, _, _ = search.next_job()
        search.report(trial, [5.0, 1.0, 3.0][trial])
    search.end(1, "stopped by its callbacks after 0 epochs")
    assert search.next_job() == (3, 0, 1)  # trial 1 holds the top place: no promotion
    search.report(3, 0.5)
    assert search.next_job() == (3, 1, 3)  # 4 at rung 0: the best one, trial 3
    search.report(3, 0.1)
    for trial in (4, 5):
        assert search.next_job() == (trial, 0, 1)
        search.report(trial, 9.0)
    # 6 at rung 0: the top 2 are trials 3 and 1; trial 2 (third) does not take 1's place
    assert search.next_job() is None and search.done()
    assert search.trials[1].ended.startswith("stopped by its callbacks")
    assert search.best().index == 3


def test_trial_params_are_drawn_the_same_for_a_seed_and_labelled_by_what_differs():
    from pyspark.ml.tuning import ParamGridBuilder

    from sparktf.errors import InvalidInputError
    from sparktf.ml import TFEstimator
    from sparktf.ml.tuning import trials

    est = TFEstimator(hyperParams={"units": 8, "fixed": "x"})
    dists = {est.learningRate: trials.logUniform(1e-4, 1e-1), "units": trials.choice([4, 8]),
             "dropout": trials.uniform(0.0, 0.5)}
    first, again = (trials.sampled(est, dists, 20, seed=3) for _ in range(2))
    assert first == again and first != trials.sampled(est, dists, 20, seed=4)
    rates = [m[est.learningRate] for m in first]
    assert all(1e-4 <= r < 1e-1 for r in rates) and min(rates) < 1e-3 < max(rates)
    assert {m[est.hyperParams]["units"] for m in first} == {4, 8}
    assert all(m[est.hyperParams]["fixed"] == "x" for m in first)
    shown = trials.labels(first, est)
    assert set(shown[0]) == {"learningRate", "units", "dropout"}  # not "fixed"
    grid = ParamGridBuilder().addGrid(est.epochs, [1, 2]).build()
    with pytest.raises(InvalidInputError, match="set minEpochs and maxEpochs"):
        trials.check_maps(grid, est, [])
    with pytest.raises(InvalidInputError, match="takes a non-empty list"):
        trials.choice([])


def test_a_trial_that_fails_at_a_higher_rung_gives_its_place_to_the_next():
    """Three trials, factor 3: the best (trial 1) is promoted, then fails at rung 1; the
    next best of rung 0 takes its place (before: none, the rung counted 2 then)."""
    search = halving.Halving(3, [1, 3], 3)
    for _ in range(3):
        trial, _, _ = search.next_job()
        search.report(trial, [5.0, 1.0, 3.0][trial])
    assert search.next_job() == (1, 1, 3)
    search.fail(1)
    assert search.next_job() == (2, 1, 3)
    search.report(2, 2.0)
    assert search.next_job() is None and search.done()
    assert search.best().index == 2 and search.trials[2].ended == halving.FINISHED


def test_what_a_search_refuses_and_how_its_trials_are_shown():
    """Found by review: a hyperParams key named after a Param modelFn gets from the Param
    (silently ignored), numpy values (crashed), two stages of one class (one label), a
    string choice's value in the trials' table (JSON quotes)."""
    import numpy as np
    from pyspark.ml.param import Param, Params

    from sparktf.errors import InvalidInputError
    from sparktf.ml import TFEstimator
    from sparktf.ml.tuning import persistence, trials

    est = TFEstimator()
    for key in ("learningRate", "epochs", "batchSize"):
        with pytest.raises(InvalidInputError, match=f"Tune the Param itself \\(est.{key}\\)"):
            trials.sampled(est, {key: trials.choice([1, 2])}, 2, seed=0)
        with pytest.raises(InvalidInputError, match="never reaches modelFn"):
            trials.check_maps([{est.hyperParams: {key: 1}}], est, [])
    for bad in ({1, 2}, np.zeros((2, 2)), "ab", []):
        with pytest.raises(InvalidInputError, match=r"choice takes .* Received: "):
            trials.choice(bad)
    assert trials.choice(range(3)).args == (0, 1, 2)
    drawn = trials.sampled(est, {"width": trials.choice(np.array([4, 8]))}, 6, seed=1)
    assert {type(m[est.hyperParams]["width"]) for m in drawn} == {int}

    class Scaler(Params):  # a stage before the TFEstimator, as pyspark's are (no JVM here)
        def __init__(self):
            super().__init__()
            self.withMean = Param(self, "withMean", "")

    a, b = Scaler(), Scaler()
    maps = [{a.withMean: x, b.withMean: y, est.hyperParams: {"w": np.array([1.0, i])}}
            for i, (x, y) in enumerate([(True, False), (False, True)])]
    shown = trials.labels(maps, est)
    assert shown[0][f"{a.uid}.withMean"] is True and shown[0][f"{b.uid}.withMean"] is False
    assert isinstance(shown[0]["w"], np.ndarray)  # shown as it is, no crash
    records = [{"trial": i, "params": p, "epochs": 1, "rungEpochs": [1], "metrics": [0.5],
                "stopReason": "x"} for i, p in enumerate(
        [{"act": "relu", "units": 4, "rate": 0.1, "on": True},
         {"act": "tanh", "units": 8, "rate": 1, "on": False}])]
    rows, schema = persistence.trial_rows(records, 1)
    assert schema.endswith("`act` string, `units` bigint, `rate` double, `on` boolean")
    assert rows[0][-4:] == ("relu", 4, 0.1, True) and rows[1][-4:] == ("tanh", 8, 1.0, False)
