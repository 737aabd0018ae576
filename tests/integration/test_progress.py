"""fit's progress bar as a user in a terminal sees it: the driver runs on a pseudo-terminal,
and the bar moves step by step inside each epoch."""

import re

import pytest

from tests import conftest

pytestmark = pytest.mark.timeout(600)
JOB = conftest.Job("progress", "tests/integration/scripts/progress_job.py", terminal=True,
                   expected_s=34)


def test_a_terminal_shows_a_bar_moving_inside_each_epoch():
    finished = JOB.finished()
    screen = finished.stdout
    assert finished.returncode == 0, screen[-3000:]
    # 2,560 rows, global batch 64: 40 steps per epoch, each >= 50 ms
    seen = {(int(e), int(n)) for e, n in
            re.findall(r"sparktf epoch (\d)/2:\s+\d+%\|[^|]*\|\s+(\d+)/40", screen)}
    print("\n(epoch, steps done) drawn:", sorted(seen))
    for epoch in (1, 2):
        inside = [n for e, n in seen if e == epoch and 0 < n < 40]
        assert len(inside) >= 2, f"epoch {epoch}: the bar did not move inside the epoch"
        assert (epoch, 40) in seen, f"epoch {epoch}: the bar did not finish"
    assert "rows/s=" in screen and "loss=" in screen
    assert re.search(r"epoch 2/2 loss=\d", screen), "no epoch summary line"
