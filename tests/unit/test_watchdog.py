"""Stall detection and checkpoint commit rules, without a JVM."""

import json
import threading

from sparktf._protocol import watchdog
from sparktf.runtime.training import checkpoint


def test_the_silent_rank_is_reported_with_everyone_last_position():
    fired = threading.Event()
    seen = {}

    def on_stall(rank, last):
        seen.update(rank=rank, last=last)
        fired.set()

    with watchdog.Watchdog(0.5, on_stall) as dog:
        dog.beat(1, {"where": "callbacks", "epoch": 2})
        dog.beat(0, {"where": "training", "epoch": 3, "step": 0})
        assert fired.wait(10), "the watchdog never fired"
    assert seen["rank"] == 1
    assert set(seen["last"]) == {0, 1}


def test_the_rank_furthest_behind_is_blamed_even_if_a_waiting_peer_went_quiet_first():
    last = {0: (1.0, {"where": "checkpoint", "epoch": 1}),   # silent first, but waiting
            1: (1.1, {"where": "callbacks", "epoch": 1})}    # stuck in user code
    assert watchdog.culprit(last) == 1
    later_epoch = {0: (1.0, {"where": "training", "epoch": 2, "step": 0}),
                   1: (1.5, {"where": "checkpoint", "epoch": 1})}
    assert watchdog.culprit(later_epoch) == 1
    same_place = {0: (2.0, {"where": "all-reduce", "epoch": 3}),
                  1: (1.0, {"where": "all-reduce", "epoch": 3})}
    assert watchdog.culprit(same_place) == 1  # equal progress: the one silent longest


def test_ranks_are_only_watched_after_their_first_heartbeat():
    fired = threading.Event()
    with watchdog.Watchdog(0.2, lambda rank, last: fired.set()):
        assert not fired.wait(0.6)  # nobody has started training yet


def test_a_finished_rank_is_no_longer_watched():
    """Rank 1 finished and waits at the exit barrier; rank 0 keeps working (exporting)."""
    fired = threading.Event()
    with watchdog.Watchdog(0.3, lambda rank, last: fired.set()) as dog:
        dog.beat(1, {"where": "training", "epoch": 1, "step": 3})
        dog.beat(1, {"where": watchdog.FINISHED})
        dog.beat(1, {"where": "training", "epoch": 1})  # late: ignored
        for _ in range(6):  # rank 0 makes progress for 0.6 s, twice the timeout
            dog.beat(0, {"where": "exporting", "epoch": 1})
            assert not fired.wait(0.1), "a finished rank was taken for a stalled one"
        assert fired.wait(10)  # rank 0 itself still is watched


def test_describe_says_where_a_rank_was():
    assert watchdog.describe({"where": "callbacks", "epoch": 2}) == "in Keras callbacks (epoch 2)"
    assert watchdog.describe({"where": "training", "epoch": 1, "step": 7}) == \
        "training (epoch 1, step 7)"


def test_a_checkpoint_counts_only_once_the_pointer_names_it(tmp_path):
    root = tmp_path / checkpoint.CHECKPOINTS
    complete, half = root / "epoch-00002", root / "epoch-00003"
    complete.mkdir(parents=True)
    half.mkdir()
    state = {"epoch": 2, "history": {"loss": [1, 0.5]}}
    (complete / checkpoint.STATE).write_text(json.dumps(state))
    assert checkpoint.latest(str(tmp_path)) is None  # nothing committed yet
    checkpoint._commit(str(tmp_path), "epoch-00002")
    found = checkpoint.latest(str(tmp_path))
    assert found["epoch"] == 2 and found["dir"] == "epoch-00002"
    assert found["history"] == {"loss": [1, 0.5]}
    assert not list(root.glob("*.tmp"))
