"""A search's journal (sparktf.ml.tuning.journal): a driver lost after any decision,
replayed by the next driver from the file, ends as the uninterrupted search ends."""

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparktf.errors import InvalidInputError
from sparktf.ml.tuning import halving
from sparktf.ml.tuning import journal as search_journal
from tests.budget import examples


class Lost(BaseException):
    """The driver is gone: nothing after it runs."""


def _search(num_trials, rung_epochs, factor, order, slots, outcome, priority, folder,
            lose_after=None):
    """A search loop over the schedule as ``tuning.loop`` drives it, writing the journal:
    jobs finish in ``priority`` order (a function of the job, so a resumed search meets
    the same order), each with ``outcome(trial, to)``. Raises ``Lost`` after
    ``lose_after`` decisions are written. ``outcome``: (metric, whether the trial's
    callbacks stopped it). Returns the schedule and the epochs trained."""
    journal = search_journal.Journal(folder, {"rungs": rung_epochs, "order": order})
    schedule = halving.Halving(num_trials, rung_epochs, factor, order)
    state = search_journal.replay(journal.load(), schedule, 1.0)
    running = [(i, *epochs) for i, epochs in state["running"].items()]
    trained = []

    def record(kind, trial, **values):
        if lose_after is not None and len(journal.events) >= lose_after:
            raise Lost()
        journal.record(kind, trial, **values)

    while True:
        while len(running) < slots and (job := schedule.next_job()) is not None:
            record("start", job[0], epochs=list(job[1:]))
            running.append(job)
        if not running:
            break
        running.sort(key=priority)
        trial, start, to = running.pop(0)
        trained.append((trial, start, to))
        value, stops = outcome(trial, to)
        if math.isfinite(value):
            schedule.report(trial, value)
            why = None
            if stops and schedule.trials[trial].ended is None:  # its callbacks stopped it
                why = f"stopped by its callbacks after {to} epochs"
                schedule.end(trial, why)
            record("report", trial, value=value, history={"loss": [value] * to}, ended=why)
        else:
            schedule.fail(trial)
            record("fail", trial, error=f"loss {value}")
    assert schedule.done()
    return schedule, trained


@settings(max_examples=examples(80), deadline=None)
@given(num_trials=st.integers(1, 20), slots=st.integers(1, 4),
       schedule=st.sampled_from([(1, 9, 3), (1, 27, 3), (2, 16, 2), (3, 3, 3)]),
       data=st.data())
def test_a_search_lost_after_any_decision_resumes_into_the_uninterrupted_search(
        tmp_path_factory, num_trials, slots, schedule, data):
    rung_epochs, factor = halving.rungs(*schedule), schedule[2]
    order = data.draw(st.permutations(range(num_trials)))
    values = data.draw(st.lists(st.one_of(st.floats(0, 10), st.just(math.nan)),
                                min_size=num_trials * len(rung_epochs),
                                max_size=num_trials * len(rung_epochs)))
    stops = data.draw(st.lists(st.booleans(), min_size=num_trials * len(rung_epochs),
                               max_size=num_trials * len(rung_epochs)))
    keys = data.draw(st.lists(st.floats(0, 1), min_size=num_trials * len(rung_epochs),
                              max_size=num_trials * len(rung_epochs)))

    def at(trial, to):
        return trial * len(rung_epochs) + rung_epochs.index(to)

    def outcome(trial, to):
        return values[at(trial, to)], stops[at(trial, to)]

    def priority(job):
        return keys[at(job[0], job[2])], job

    run = (num_trials, rung_epochs, factor, order, slots, outcome, priority)
    whole_folder = tmp_path_factory.mktemp("whole")
    whole, whole_trained = _search(*run, str(whole_folder))
    decisions = json.loads((whole_folder / "search.json").read_text())["events"]
    lose_after = data.draw(st.integers(0, len(decisions) - 1))
    folder = str(tmp_path_factory.mktemp("lost"))
    with pytest.raises(Lost):
        _search(*run, folder, lose_after=lose_after)
    resumed, resumed_trained = _search(*run, folder)
    assert [(t.metrics, t.ended) for t in resumed.trials] == \
        [(t.metrics, t.ended) for t in whole.trials]
    assert resumed.promoted == whole.promoted
    assert (resumed.best() and resumed.best().index) == (whole.best() and whole.best().index)
    # what the lost driver finished is not trained again; the rest is, in the same order
    started, finished = {}, []
    for event in decisions[:lose_after]:
        if event["kind"] == "start":
            started[event["trial"]] = (event["trial"], *event["epochs"])
        else:
            finished.append(started[event["trial"]])
    assert resumed_trained == [job for job in whole_trained if job not in finished]


def test_a_journal_of_another_search_or_damaged_is_refused(tmp_path):
    journal = search_journal.Journal(str(tmp_path), {"rungs": [1, 3], "trials": [{"lr": 0.1}]})
    assert journal.load() == []
    journal.record("start", 0, epochs=[0, 1])
    other = search_journal.Journal(str(tmp_path), {"rungs": [1, 3], "trials": [{"lr": 0.2}]})
    with pytest.raises(InvalidInputError, match=r"other settings.*trials: \[\{'lr': 0.1\}\] "
                                                r"then, \[\{'lr': 0.2\}\] now.*new runId"):
        other.load()
    same = search_journal.Journal(str(tmp_path), {"rungs": [1, 3], "trials": [{"lr": 0.1}]})
    assert same.load() == [{"kind": "start", "trial": 0, "epochs": [0, 1]}]
    (tmp_path / "search.json").write_text('{"asked": {"rungs": [1, ')
    with pytest.raises(InvalidInputError, match="damaged.*Remove the search's folder"):
        same.load()
    schedule = halving.Halving(2, [1, 3], 3)
    with pytest.raises(InvalidInputError, match="another version"):
        search_journal.replay([{"kind": "start", "trial": 1, "epochs": [0, 1]}], schedule, 1.0)


def test_a_search_asked_the_same_in_another_process_is_the_same():
    """Objects a grid may hold (a modelFn) are told apart by what they are, not where a
    process keeps them: another driver's search with the same grid is the same search."""
    def linear(hparams):
        return hparams

    first = linear

    def linear(hparams):  # noqa: F811 - the same function, another object
        return hparams

    assert first is not linear and repr(first) != repr(linear)
    asked = [search_journal.Journal("/nowhere", {"trials": [{"modelFn": f}]}).asked
             for f in (first, linear)]
    assert asked[0] == asked[1] == {"trials": [{"modelFn": asked[0]["trials"][0]["modelFn"]}]}
    assert "0x" not in asked[0]["trials"][0]["modelFn"]
