"""fit's progress bar as a user in a terminal sees it: the driver runs on a pseudo-terminal,
and the bar moves step by step inside each epoch."""

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios

import pytest

pytestmark = pytest.mark.timeout(600)
SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "progress_job.py")


def test_a_terminal_shows_a_bar_moving_inside_each_epoch():
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    env.update(PYTHONPATH=root)
    controller, terminal = pty.openpty()
    # a terminal window of 40 rows x 120 columns, as a user's (a new pty has no size)
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen([sys.executable, SCRIPT], stdin=terminal, stdout=terminal,
                            stderr=terminal, env=env, close_fds=True)
    os.close(terminal)
    chunks = []
    while True:
        try:
            chunk = os.read(controller, 65536)  # blocks; EIO once the script has exited
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(controller)
    assert proc.wait(timeout=60) == 0, b"".join(chunks)[-3000:].decode(errors="replace")
    screen = b"".join(chunks).decode(errors="replace")
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
