"""What issue 56 adds to the schedule, without Spark: a search that grows (more trials, a
larger maxEpochs) replayed from its journal trains only the new work and ends as ASHA
ends; a trial the schedule leaves out of those that may train is never promoted after; maxTime's
marks; TPE's draws (Optuna's sampler told each rung's results) against random ones on a
simulated objective."""

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparktf.errors import InvalidInputError
from sparktf.ml.tuning import halving
from sparktf.ml.tuning import journal as search_journal
from sparktf.ml.tuning import loop as search_loop
from tests.budget import examples
from tests.unit.test_search_journal import _search


def test_a_grown_search_keeps_the_rungs_it_has_results_at():
    assert halving.extended([1, 3, 9], [1, 3, 9, 27], 3) == [1, 3, 9, 27]
    assert halving.extended([1, 3, 10], [1, 3, 9, 27, 30], 3) == [1, 3, 10, 30]
    assert halving.extended([1, 3, 10], [1, 3, 9, 27, 50], 3) == [1, 3, 10, 30, 50]
    assert halving.extended([1, 3], [1, 3], 3) == [1, 3]
    assert halving.extended([1, 3, 9], [1, 3], 3) == [1, 3]  # smaller: refused by load
    assert halving.extended([1, 3, 9], [2, 6, 18, 27], 3) == [2, 6, 18, 27]  # minEpochs
    assert halving.extended([1, 3, 9], [2, 6, 9], 3) == [2, 6, 9]  # changed: refused


def test_the_start_order_of_a_grown_search_is_the_order_it_had_then_the_new_trials():
    """Grown twice, and fitted again as it is (a resume): each order extends the last."""
    first = halving.start_order(7, None, 9)
    assert sorted(first) == list(range(9))
    grown = halving.start_order(7, first, 18)
    assert grown[:9] == first and sorted(grown[9:]) == list(range(9, 18))
    assert halving.start_order(7, grown, 18) == grown
    again = halving.start_order(7, grown, 27)
    assert again[:18] == grown and sorted(again) == list(range(27))


def _asha_holds(schedule: halving.Halving) -> None:
    """At the end of a search without failures, every rung's best 1/factor were promoted
    (what ASHA promises whatever order the results came in)."""
    for k in range(len(schedule.rungs) - 1):
        top = schedule.at_rung(k)[:schedule.reached(k) // schedule.factor]
        assert {t.index for t in top} <= schedule.promoted[k], (k, top, schedule.promoted)


def _values(data, num_trials, rung_count):
    return data.draw(st.lists(st.floats(0, 10), min_size=num_trials * rung_count,
                              max_size=num_trials * rung_count))


@settings(max_examples=examples(40), deadline=None)
@given(first=st.integers(1, 10), more=st.integers(0, 10), slots=st.integers(1, 3),
       grow_epochs=st.booleans(), data=st.data())
def test_a_grown_search_trains_only_its_new_work_and_promotes_as_asha(
        tmp_path_factory, first, more, slots, grow_epochs, data):
    rungs = halving.rungs(1, 9, 3)
    grown_rungs = halving.extended(rungs, halving.rungs(1, 27 if grow_epochs else 9, 3), 3)
    total = first + more
    values = _values(data, total, len(grown_rungs))
    keys = data.draw(st.lists(st.floats(0, 1), min_size=total * len(grown_rungs),
                              max_size=total * len(grown_rungs)))

    def at(trial, to):
        return trial * len(grown_rungs) + grown_rungs.index(to)

    def outcome(trial, to):
        return values[at(trial, to)], False

    def priority(job):
        return keys[at(job[0], job[2])], job

    folder = str(tmp_path_factory.mktemp("grown"))
    order = list(range(first))
    before, before_trained = _search(first, rungs, 3, order, slots, outcome, priority, folder)
    grown_order = halving.start_order(0, order, total)
    grown, grown_trained = _search(total, grown_rungs, 3, grown_order, slots, outcome,
                                   priority, folder)
    again, again_trained = _search(total, grown_rungs, 3, halving.start_order(
        0, grown_order, total), slots, outcome, priority, folder)  # fitted again: nothing
    assert again_trained == [] and [t.metrics for t in again.trials] == \
        [t.metrics for t in grown.trials]
    assert not set(grown_trained) & set(before_trained), "no job trains twice"
    for trial in range(first):  # the first trials keep every result they had
        assert grown.trials[trial].metrics[:len(before.trials[trial].metrics)] == \
            before.trials[trial].metrics
    new_jobs = [job for job in grown_trained if job[0] < first]
    assert all(start > 0 for _, start, _ in new_jobs), "an old trial starts only promoted"
    assert grown.done()
    _asha_holds(grown)
    _asha_holds(before)


@settings(max_examples=examples(50), deadline=None)
@given(num_trials=st.integers(1, 20), slots=st.integers(1, 4),
       schedule=st.sampled_from([(1, 9, 3), (1, 27, 3), (2, 16, 2)]), data=st.data())
def test_a_trial_that_cannot_train_on_is_never_promoted_later(num_trials, slots, schedule,
                                                              data):
    """What the checkpoints are given back on: once ``may_train`` leaves it out, the trial
    never starts another job, whatever results come after."""
    search = halving.Halving(num_trials, halving.rungs(*schedule), schedule[2])
    values = iter(_values(data, num_trials, len(search.rungs)))
    running, said_done = [], set()
    while True:
        while len(running) < slots and (job := search.next_job()) is not None:
            assert job[0] not in said_done, (job, said_done)
            running.append(job)
        if not running:
            break
        job = running.pop(data.draw(st.integers(0, len(running) - 1)))
        search.report(job[0], next(values))
        said_done |= set(range(num_trials)) - search.may_train()
    assert search.done()
    assert said_done == set(range(num_trials)), "at the end no trial can train on"


def test_max_time_marks_what_never_started_and_what_could_still_be_promoted():
    search = halving.Halving(5, [1, 3], 2)
    jobs = [search.next_job() for _ in range(3)]  # trials 0, 1, 2 at rung 0
    search.report(0, 1.0)
    search.report(1, 2.0)  # 0 promotable (top 1 of 2), 2 still running
    search.out_of_time()
    assert search.next_job() is None and jobs[2][0] == 2
    search.end(2, "maxTime ran out after 0 epochs")
    search.trials[2].running = False
    assert search.done()
    ended = [t.ended for t in search.trials]
    assert ended[:2] == [halving.OUT_OF_TIME, halving.STOPPED]
    assert ended[3:] == [halving.NOT_STARTED] * 2
    assert search.best().index == 0


def test_a_journal_grows_but_does_not_shrink(tmp_path):
    journal = search_journal.Journal(str(tmp_path), {"rungs": [1, 3], "trials": [{"lr": 1}],
                                                     "numTrials": 1})
    journal.record("start", 0, epochs=[0, 1])
    grown = search_journal.Journal(str(tmp_path), {"rungs": [1, 3, 9], "numTrials": 2,
                                                   "trials": [{"lr": 1}, {"lr": 2}]})
    assert grown.load() == [{"kind": "start", "trial": 0, "epochs": [0, 1]}]
    grown.record("start", 1, epochs=[0, 1])
    for shrunk in ({"rungs": [1, 3], "trials": [{"lr": 1}, {"lr": 2}], "numTrials": 1},
                   {"rungs": [1], "trials": [{"lr": 1}, {"lr": 2}], "numTrials": 2},
                   {"rungs": [1, 3, 9], "trials": [{"lr": 1}], "numTrials": 2}):
        with pytest.raises(InvalidInputError, match="grows .* but does not shrink"):
            search_journal.Journal(str(tmp_path), shrunk).load()
    with pytest.raises(InvalidInputError, match="other settings"):
        search_journal.Journal(str(tmp_path), {"rungs": [1, 3, 9], "numTrials": 2, "trials": [
            {"lr": 2}, {"lr": 1}]}).load()


class _Runner:
    """What the search loop's disk policy asks of its trials' runner."""

    def __init__(self):
        self.given, self.histories = [], {}

    def give_back(self, index):
        self.given.append(index)
        return True


def _finished_schedule():
    schedule = halving.Halving(4, [1, 3], 2)
    for value in (1.0, 2.0, 3.0, 4.0):
        index, _, _ = schedule.next_job()
        schedule.report(index, value)
    return schedule


def test_a_finished_search_gives_back_all_but_its_best_unless_kept_or_cut_by_max_time(
        tmp_path):
    for journal, out_of_time, keep, removed in (
            (None, False, False, [1, 2, 3]), (None, True, False, [1, 2, 3]),
            (True, False, False, [1, 2, 3]), (True, True, False, []),  # continued later
            (True, False, True, [])):
        runner, schedule = _Runner(), _finished_schedule()
        search = search_loop.Search(
            runner, schedule, [{}] * 4, "loss", False, 0,
            search_journal.Journal(str(tmp_path), {}) if journal else None,
            keep_checkpoints=keep)
        search.out_of_time = out_of_time
        search._give_back(final=True)
        assert sorted(runner.given) == removed, (journal, out_of_time, keep)


# --- TPE: Optuna's sampler told every rung's results ------------------------------------

GOOD = math.log10(0.03)  # the simulated objective's best learning rate


def _objective(rate: float, epochs: int) -> float:
    """A loss that falls with the epochs and is lowest at GOOD."""
    return (math.log10(rate) - GOOD) ** 2 + 1.0 / epochs


def _tpe_search(sampler_kind: str, seed: int, num_trials: int = 24):
    """A search loop on one slot as ``tuning.loop`` drives it, drawing each trial as it
    starts; returns each trial's learning rate in start order, the schedule."""
    from sparktf.ml.tuning import samplers, trials

    pytest.importorskip("optuna")
    from sparktf.ml import TFEstimator

    stage = TFEstimator()
    space = {stage.learningRate: trials.logUniform(1e-4, 1.0)}
    schedule = halving.Halving(num_trials, halving.rungs(1, 9, 3), 3)
    tpe = samplers.TPE(stage, space, seed, num_trials)
    drawn, rates = {}, []
    random_maps = trials.sampled(stage, space, num_trials, seed)
    while (job := schedule.next_job()) is not None:
        index, start, to = job
        if start == 0:
            if sampler_kind == "tpe":
                told = [samplers.Told(tuple(drawn[t.index]), {
                    schedule.rungs[k]: m for k, m in enumerate(t.metrics)},
                    complete=t.ended == halving.FINISHED, running=t.running)
                    for t in schedule.trials if t.index in drawn]
                drawn[index] = tpe.draw(index, told)
                rate = tpe.param_map(drawn[index])[stage.learningRate]
            else:
                rate = random_maps[index][stage.learningRate]
            rates.append(rate)
        schedule.report(index, _objective(rates[index], to))
    assert search_loop and schedule.done()
    return rates, schedule


def test_tpe_draws_nearer_the_good_region_as_it_learns_and_random_does_not():
    """Over 3 seeds: TPE's last 8 trials lie a quarter nearer (at least) the best learning
    rate than its first 8 (random draws, its start-up), and than random's last 8."""
    tpe_last, tpe_first, random_last = [], [], []
    for seed in (0, 1, 2):
        rates, _ = _tpe_search("tpe", seed)
        distance = [abs(math.log10(r) - GOOD) for r in rates]
        tpe_first.append(np.mean(distance[:8]))
        tpe_last.append(np.mean(distance[-8:]))
        random_rates, _ = _tpe_search("random", seed)
        random_last.append(np.mean([abs(math.log10(r) - GOOD) for r in random_rates[-8:]]))
    print("mean |log10(rate) - best|: TPE first 8", np.round(tpe_first, 3), "last 8",
          np.round(tpe_last, 3), "; random last 8", np.round(random_last, 3))
    assert np.mean(tpe_last) < 0.75 * np.mean(tpe_first)
    assert np.mean(tpe_last) < 0.75 * np.mean(random_last)


def test_tpe_draws_are_the_same_for_a_seed_and_the_same_results():
    first, _ = _tpe_search("tpe", 5, num_trials=14)
    again, _ = _tpe_search("tpe", 5, num_trials=14)
    other, _ = _tpe_search("tpe", 6, num_trials=14)
    assert first == again and first != other


def test_tpe_without_optuna_or_with_a_grid_is_refused(monkeypatch):
    import sys

    from sparktf.ml import TFEstimator
    from sparktf.ml.tuning import samplers

    monkeypatch.setitem(sys.modules, "optuna", None)  # import optuna raises ImportError
    with pytest.raises(InvalidInputError, match=r"pip install 'sparktf\[tuning\]'"):
        samplers.TPE(TFEstimator(), {"units": [1, 2]}, 0, 4)


def test_the_drawn_map_holds_hyper_params_and_choices():
    pytest.importorskip("optuna")
    from sparktf.ml import TFEstimator
    from sparktf.ml.tuning import samplers, trials

    stage = TFEstimator(hyperParams={"depth": 2})
    tpe = samplers.TPE(stage, {stage.learningRate: trials.uniform(0.1, 0.2),
                               "units": [8, 16, 32]}, 0, 4)
    drawn = tpe.draw(0, [])
    found = tpe.param_map(drawn)
    assert 0.1 <= found[stage.learningRate] <= 0.2
    assert found[stage.hyperParams]["depth"] == 2
    assert found[stage.hyperParams]["units"] in (8, 16, 32)
    assert json.loads(json.dumps(drawn)) == drawn  # the journal keeps it as it is
