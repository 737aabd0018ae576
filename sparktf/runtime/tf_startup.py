"""TensorFlow's start-up notices, kept off a user's console.

While TensorFlow loads, its C++ runtime writes notices straight to the process's stderr,
before any logging is set up (``TF_CPP_MIN_LOG_LEVEL`` does not hide them): oneDNN's
round-off notice, ``cudart_stub``'s "Could not find cuda drivers", the CPU-instruction
notice, absl's "All log messages before absl::InitializeLog()". None of them is something
a user can act on, and on a driver they land between the user's own lines, as do an
executor's in local mode, where its stderr is the driver's console. ``NOISE`` tells them;
``quiet_start`` keeps them off stderr wherever sparktf starts TensorFlow (the driver, a
scoring Python worker, a training task process or its spare), writing every other line
(a real warning, an error) after it, and a task process's relay drops those its process
prints later (``process.task_process``). ``SPARKTF_TF_STARTUP_LINES=1`` in a process's
environment shows them all again.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import threading
from typing import Iterator

NOISE = re.compile(r"oneDNN custom operations|cudart_stub|cuda_platform\.cc|cuInit|"
                   r"absl::InitializeLog|computation_placer|Could not find cuda drivers|"
                   r"TF-TRT Warning|cuda_(?:dnn|fft|blas)\.cc|rebuild TensorFlow with|"
                   r"cpu_feature_guard|AVX512_VNNI|in other operations, rebuild")

# set to 1 (on the driver, and in spark.executorEnv for the executors) to see the notices
SHOW = "SPARKTF_TF_STARTUP_LINES"

_redirecting = threading.Lock()


def _shown() -> bool:
    """Whether this process's environment asks to see the notices."""
    return os.environ.get(SHOW) == "1"


def hidden(line: str) -> bool:
    """Whether ``line`` is a start-up notice sparktf keeps off the console (all of them,
    unless ``SPARKTF_TF_STARTUP_LINES=1``)."""
    return bool(NOISE.search(line)) and not _shown()


def _started() -> bool:
    """Whether TensorFlow has started its runtime here (its devices found: cuInit's notice
    comes then, after the import's)."""
    context = sys.modules.get("tensorflow.python.eager.context")
    if context is None:
        return False
    try:
        return bool(context.context()._initialized)
    except Exception:  # noqa: BLE001 - another TensorFlow's internals: take it as started
        return True


@contextlib.contextmanager
def quiet_start() -> Iterator[None]:
    """Inside the block, TensorFlow's start in this process (its import, and finding its
    devices) prints only what is not a start-up notice (after the block). Elsewhere
    (TensorFlow already started, no stderr file descriptor) the block runs as it is.

    The process's stderr descriptor is a temporary file for the block's duration, so a
    line another thread writes to stderr meanwhile comes after the block: delayed, never
    lost."""
    # one block at a time redirects (another thread's, or a nested one, runs as it is: its
    # lines land in the capture of the block that holds it, and are filtered with them)
    if _started() or _shown() or not _redirecting.acquire(blocking=False):
        yield
        return
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        _redirecting.release()
        yield
        return
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            _redirecting.release()
            capture.seek(0)
            kept = [line for line in capture.read().decode("utf-8", "replace").splitlines()
                    if line.strip() and not NOISE.search(line)]
            if kept:
                print("\n".join(kept), file=sys.stderr, flush=True)
