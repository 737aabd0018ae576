"""TensorFlow's start-up notices stay off a driver's console (``tf_startup.quiet_start``),
and what else the import prints still reaches stderr."""

import json
import subprocess
import sys

from sparktf.runtime import tf_startup

# One interpreter imports TensorFlow inside the block; the lines the block held back are
# told by wrapping NOISE (what the block filters with), so the notices that an import
# without the block would have printed are seen too, without a second TensorFlow import.
PROBE = """
import json, os, sys
from sparktf.runtime import tf_startup
class Told:
    def __init__(self, pattern):
        self.pattern, self.held = pattern, []
    def search(self, line):
        found = self.pattern.search(line)
        if found:
            self.held.append(line)
        return found
tf_startup.NOISE = told = Told(tf_startup.NOISE)
with tf_startup.quiet_start():
    import tensorflow
    os.write(2, b"a line of the user's own, written while TensorFlow loads\\n")
print("after", file=sys.stderr)
print(json.dumps(told.held))
"""


def test_the_start_up_notices_are_kept_off_and_every_other_line_is_kept_in_order():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    held, shown = json.loads(out.stdout.splitlines()[-1]), out.stderr.splitlines()
    print("held back:", held, "\nshown:", shown)
    assert held  # the import printed notices, and the block held them back
    assert not any(tf_startup.NOISE.search(line) for line in shown)
    assert shown[-2:] == ["a line of the user's own, written while TensorFlow loads", "after"]


def test_once_tensorflow_is_loaded_the_block_changes_nothing(capfd):
    import tensorflow  # noqa: F401
    with tf_startup.quiet_start():
        print("straight through", file=sys.stderr, flush=True)
    assert "straight through" in capfd.readouterr().err


def test_two_threads_in_the_block_at_once_leave_stderr_as_it_was():
    """Found by the review of issue 46: the second block saved the first one's capture as
    "stderr" and put it back, so the process's stderr went to a deleted file for good."""
    probe = """
import os, sys, threading, time
from sparktf.runtime import tf_startup
sys.modules["tensorflow"] = None; del sys.modules["tensorflow"]
def a():
    with tf_startup.quiet_start(): time.sleep(0.5)
def b():
    time.sleep(0.1)
    with tf_startup.quiet_start(): time.sleep(1.0)
before = os.readlink("/proc/self/fd/2")
threads = [threading.Thread(target=a), threading.Thread(target=b)]
[t.start() for t in threads]; [t.join() for t in threads]
print(before == os.readlink("/proc/self/fd/2"))
os.write(2, b"still reaches stderr\\n")
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.split() == ["True"], out.stderr
    assert "still reaches stderr" in out.stderr


def test_every_notice_is_hidden_unless_the_environment_asks_to_see_them(monkeypatch):
    notice = ("I0000 00:00:1795892317.050599   15148 cudart_stub.cc:31] Could not find cuda "
              "drivers on your machine, GPU will not be used.")
    monkeypatch.delenv(tf_startup.SHOW, raising=False)
    assert tf_startup.hidden(notice)
    assert not tf_startup.hidden("ValueError: a line the user can act on")
    monkeypatch.setenv(tf_startup.SHOW, "1")
    assert not tf_startup.hidden(notice)
