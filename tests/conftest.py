"""Shared test helpers."""

import os
import select

# Every JVM the tests start reads tests/spark-conf/spark-defaults.conf (why: that file).
os.environ["SPARK_CONF_DIR"] = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                            "spark-conf")

CHILD_MARKER = "sparktf._executor.child"
SPARE_NAME = "sparktf-spare"  # sparktf._executor.spare.SPARE_NAME


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def child_pids() -> list[int]:
    """PIDs of task processes (main_fn runners) alive on this machine; idle spares
    (``spare_pids``) are not task processes."""
    return [pid for pid in pids_with(CHILD_MARKER) if _comm(pid) != SPARE_NAME]


def spare_pids() -> list[int]:
    """PIDs of the spare processes (TensorFlow imported, waiting to fork a task process)."""
    return [pid for pid in pids_with(CHILD_MARKER) if _comm(pid) == SPARE_NAME]


def pids_with(marker: str) -> list[int]:
    """PIDs of this machine's processes whose command line contains ``marker``."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if marker.encode() in cmdline:
            pids.append(int(entry))
    return pids


def wait_gone(pids, timeout: float = 30.0) -> list[int]:
    """Blocks (pidfd, bounded) until the processes exit; returns those still alive."""
    alive = []
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        try:
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                alive.append(pid)
        finally:
            os.close(fd)
    return alive


# (model kind, workers, batch size, worst key, its relative difference): filled by
# the Keras conformance tests, printed at the end of the run.
CONFORMANCE: list[tuple] = []


def run_driver_script(script: str, *args: str, timeout: float = 850) -> dict:
    """Runs a driver script of tests/integration/scripts in its own process (its own
    SparkSession) and returns its ``RESULT name {json}`` lines as ``{name: value}``."""
    import json
    import subprocess
    import sys

    root = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    env["PYTHONPATH"] = root
    out = subprocess.run([sys.executable, script, *args], capture_output=True, text=True,
                         env=env, timeout=timeout)
    results = {}
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            name, value = line[len("RESULT "):].split(" ", 1)
            results[name] = json.loads(value)
    assert out.returncode == 0, f"exit {out.returncode}; stderr tail:\n{out.stderr[-4000:]}"
    return results


def pytest_terminal_summary(terminalreporter):
    if not CONFORMANCE:
        return
    write = terminalreporter.write_line
    write("")
    write("Keras conformance: TFEstimator.fit vs keras Model.fit on the same rows "
          "(max relative difference over the history and predictions)")
    write(f"{'model kind':40} {'workers':>7} {'batch':>6}  {'max rel diff':>12}  worst")
    for name, workers, batch, key, diff in CONFORMANCE:
        write(f"{name:40} {workers:>7} {batch:>6}  {diff:>12.2e}  {key}")
