"""Entry point of the process that runs ``main_fn`` for one task.

A fresh process per task, because a TensorFlow gRPC server cannot be stopped
inside a process: running in Spark's reused Python worker would leave servers
and ports behind after every job. The process is either started for the task
(``python -m sparktf.runtime.process.child``) or forked by the Python worker's spare
(``python -m sparktf.runtime.process.child --spare FD IDLE_S``, see ``spare``), which has
imported TensorFlow already.

Protocol with the parent task (``sparktf.runtime.process.task``):

1. import TensorFlow at once, while the parent is still receiving the data;
2. read one line from stdin, JSON ``{"payload", "result", "cwd", "temp"}``: the path
   of ``(payload, ctx, env)`` pickled, where to write the result, the working
   directory, the temp dir (EOF instead means the parent gave up: exit quietly); while
   the task's rows still arrive, the next lines tell of them (``arrival``);
3. put ``env`` (TF_CONFIG) into the environment and run ``main_fn(args, ctx)``;
4. write ``(status, value or error info, peak RSS KiB)`` to the result path;
5. on success print DONE_LINE and wait until the parent closes stdin: parents
   release their children only after a barrier, so worker 0 (which hosts
   TensorFlow's coordination service) never exits while a peer still needs it.
"""

from __future__ import annotations

import faulthandler
import json
import os
import resource
import sys
import tempfile
import traceback

import cloudpickle

from sparktf._protocol.wire import DONE_LINE, phase
from sparktf.errors import InvalidInputError
from sparktf.runtime import tf_startup, worker_tuning
from sparktf.runtime.feed import arrival
from sparktf.runtime.process import keras_fixes, spare, step_times


def _preimport() -> None:
    """Imports TensorFlow and Keras: overlaps their import with the data transfer, or
    serves every fork of a spare. Keras's optional scikit-learn and matplotlib helpers
    load at their first use (``deferred_imports``): a quarter of the import, which a task
    process does not pay again either (tracing a step leaves them unloaded)."""
    with tf_startup.quiet_start():  # in local mode the executor's stderr is the console
        worker_tuning.import_keras()
    # Out of the cyclic collector from now on (they live as long as the process): its
    # collections during training skip them, and a spare's forks do not copy the pages
    # the collector would write to.
    worker_tuning.freeze_collector()


def _run(payload_path: str) -> tuple[str, object]:
    try:
        with open(payload_path, "rb") as f:
            payload, ctx, env = cloudpickle.load(f)
        if isinstance(getattr(ctx, "share", None), arrival.Pending):
            arrival.listen(ctx.share)  # the rows' arrival, then the release, on stdin
        os.environ.update(env)
        try:
            main_fn, args = cloudpickle.loads(payload)
        except ModuleNotFoundError as e:
            raise ModuleNotFoundError(
                f"{e}: main_fn, or something it refers to, comes from module {e.name!r}, "
                "which the executors' Python cannot import: install it on every executor, or "
                "ship it with SparkContext.addPyFile (spark-submit --py-files).",
                name=e.name) from e
        keras_fixes.apply()  # Keras 3's own fit under MultiWorkerMirroredStrategy
        step_times.use_context(ctx)  # and its steps timed (the straggler named)
        return "ok", main_fn(args, ctx)
    except BaseException as e:  # everything, including SystemExit from user code
        # the user's data at fault (a column its model input cannot take): the driver
        # raises InvalidInputError, and no relaunch is tried
        return "error", {"message": f"{type(e).__name__}: {e}",
                         "traceback": traceback.format_exc(),
                         "invalid_input": isinstance(e, InvalidInputError)}


def _task() -> None:
    """Runs one task's order from stdin; never returns."""
    # A crash in native code (TensorFlow's, or an extension's) prints the Python stack of
    # every thread to the task's output, which the driver shows with the failure.
    faulthandler.enable(all_threads=True)
    line = sys.stdin.readline().strip()
    if not line:
        os._exit(0)
    order = json.loads(line)
    os.chdir(order["cwd"])
    # The task ends with os._exit, so exit hooks that remove temp files (TensorFlow's
    # autograph leaves a module per converted function) never run: its temp dir is a
    # folder of its own, which the parent removes after it.
    tempfile.tempdir = os.environ["TMPDIR"] = order["temp"]
    status, value = _run(order["payload"])
    phase("main_fn returned")
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        blob = cloudpickle.dumps((status, value, peak_kb))
    except Exception as e:
        status = "error"
        blob = cloudpickle.dumps((status, {
            "message": f"main_fn returned a value that cannot be pickled: "
                       f"{type(e).__name__}: {e}. Return plain Python data.",
            "traceback": traceback.format_exc()}, peak_kb))
    with open(order["result"], "wb") as f:
        f.write(blob)
    if status == "ok":
        print(DONE_LINE, flush=True)
        arrival.wait_released()  # when the parent releases us (or dies)
    sys.stdout.flush()
    sys.stderr.flush()
    # TensorFlow's gRPC threads can keep a normal interpreter shutdown waiting.
    os._exit(0 if status == "ok" else 1)


def _forked() -> None:
    phase("forked from the spare")
    _task()


def main(argv: list[str]) -> None:
    if argv[:1] == [spare.SPARE_FLAG]:
        spare.set_name(spare.SPARE_NAME)
        _preimport()
        spare.serve(int(argv[1]), float(argv[2]), _forked)
        return
    _preimport()
    phase("imported")
    _task()


if __name__ == "__main__":
    main(sys.argv[1:])
