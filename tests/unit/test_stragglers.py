"""The driver's straggler decision (``_driver.stragglers``): a worker whose own time is
at least 1.3x the others' median, by at least half a second over the epoch, is named
once; a balanced epoch, a single worker or a small difference says nothing."""

import logging

from hypothesis import given
from hypothesis import strategies as st

from sparktf._driver import stragglers


def test_the_slow_worker_is_named_with_its_ratio_to_the_others_median():
    assert stragglers.straggler([1.0, 1.1, 3.0, 0.9]) == (2, 3.0, 1.0)
    # two workers: the other one is the median (the mean of both would hide half of it)
    assert stragglers.straggler([2.0, 1.0]) == (0, 2.0, 1.0)


def test_balanced_single_or_small_differences_are_silent():
    assert stragglers.straggler([5.0]) is None
    assert stragglers.straggler([1.0, 1.2, 1.1]) is None  # 1.2 / 1.05 < 1.3
    assert stragglers.straggler([0.1, 0.3]) is None  # 3x, but 0.2 s over an epoch
    assert stragglers.straggler([10.0, 12.9]) is None  # 2.9 s, but 1.29x


@given(st.lists(st.floats(0.0, 1e4, allow_nan=False), min_size=1, max_size=64))
def test_a_named_worker_is_the_slowest_and_stands_out_by_both_measures(own):
    found = stragglers.straggler(own)
    if len(own) < 2:
        assert found is None
        return
    slowest = max(own)
    others = sorted(own)[:-1]
    median = (others[(len(others) - 1) // 2] + others[len(others) // 2]) / 2
    stands_out = slowest - median >= stragglers.MIN_EXCESS_S and \
        slowest >= stragglers.RATIO * median
    assert (found is not None) == stands_out
    if found is not None:
        assert own[found[0]] == slowest and found[2] == median


def test_the_driver_line_names_rank_executor_and_how_much(caplog):
    caplog.set_level(logging.WARNING, logger="sparktf")
    event = {"kind": "workers", "epoch": 3, "own_seconds": [1.0, 4.0, 1.2],
             "wait_seconds": [3.1, 0.1, 2.9], "executors": ["h:1", "h:2", "h:3"]}
    stragglers.report(event, "fit 2")
    stragglers.report({**event, "own_seconds": [1.0, 1.1, 1.2]})  # balanced: nothing
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1
    assert lines[0].startswith("sparktf: fit 2: epoch 3: worker rank 1 on executor h:2 is "
                               "the straggler")
    assert "took 4.00 s, 3.6x the other workers' median 1.10 s" in lines[0]
    assert "the others waited 3.00 s for it" in lines[0]
