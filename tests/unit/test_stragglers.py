"""The driver's straggler decision (``_driver.stragglers``): a worker whose own time is
at least 1.3x the typical worker's (the other one of two; the median of all of three or
more), by at least half a second over the epoch, is named; all such workers in one line
an epoch; a balanced epoch, a single worker or a small difference says nothing."""

import logging
import statistics

from hypothesis import given
from hypothesis import strategies as st

from sparktf._driver import stragglers


def test_the_slow_worker_is_named_with_its_ratio_to_the_typical_worker():
    assert stragglers.stragglers([1.0, 1.1, 3.0, 0.9]) == [(2, 3.0 / 1.05, 1.05)]
    # two workers: the other one is the typical one (the mean of both would hide half)
    assert stragglers.stragglers([2.0, 1.0]) == [(0, 2.0, 1.0)]
    # two slow workers of four: both named, the slowest first
    assert [r for r, _, _ in stragglers.stragglers([1.0, 4.0, 1.2, 3.9])] == [1, 3]


def test_balanced_single_typical_or_small_differences_are_silent():
    assert stragglers.stragglers([5.0]) == []
    assert stragglers.stragglers([1.0, 1.2, 1.1]) == []  # 1.2 / 1.1 < 1.3
    assert stragglers.stragglers([0.1, 0.3]) == []  # 3x, but 0.2 s over an epoch
    assert stragglers.stragglers([10.0, 12.9]) == []  # 2.9 s, but 1.29x
    # two equally slow workers of three are the typical ones: the fast one is not late
    assert stragglers.stragglers([1.0, 2.0, 2.0]) == []


@given(st.lists(st.floats(0.0, 1e4, allow_nan=False), min_size=1, max_size=64))
def test_a_worker_is_named_exactly_when_it_stands_out_from_the_typical_one(own):
    found = {rank: (ratio, typical) for rank, ratio, typical in stragglers.stragglers(own)}
    for rank, seconds in enumerate(own):
        if len(own) < 2:
            assert not found
            continue
        typical = own[1 - rank] if len(own) == 2 else statistics.median(own)
        stands_out = seconds - typical >= stragglers.MIN_EXCESS_S and \
            seconds >= stragglers.RATIO * typical
        assert (rank in found) == stands_out, (rank, own)
        if stands_out:
            assert found[rank][1] == typical


def test_the_driver_line_names_rank_executor_and_how_much(caplog):
    caplog.set_level(logging.WARNING, logger="sparktf")
    event = {"kind": "workers", "epoch": 3, "own_seconds": [1.0, 4.0, 1.2],
             "wait_seconds": [3.1, 0.1, 2.9], "executors": ["h:1", "h:2", "h:3"]}
    stragglers.report(event, "fit 2")
    stragglers.report({**event, "own_seconds": [1.0, 1.1, 1.2]})  # balanced: nothing
    stragglers.report({**event, "own_seconds": [0.0, 0.6, 0.0]})  # typical 0 s
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert lines[0].startswith("sparktf: fit 2: epoch 3: the straggler is worker rank 1 on "
                               "executor h:2: 4.00 s of its own work")
    assert "3.3x the typical worker's 1.20 s" in lines[0]
    assert "The other workers waited 3.00 s for it" in lines[0]
    assert "many times the typical worker's 0.00 s" in lines[1]
