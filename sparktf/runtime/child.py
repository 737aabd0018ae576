"""Entry point of the process that runs ``main_fn`` for one task.

A fresh process per task, because a TensorFlow gRPC server cannot be stopped
inside a process: running in Spark's reused Python worker would leave servers
and ports behind after every job. The parent task starts this with
``python -m sparktf.runtime.child PAYLOAD RESULT`` and TF_CONFIG in the
environment; this process writes ``("ok", value, peak_kb)`` or ``("error", info, peak_kb)`` to
RESULT, pickled, with its peak RSS, then announces DONE_LINE and waits until the parent closes its
stdin: the parents release their children only after a barrier, so worker 0
(which hosts TensorFlow's coordination service) never exits while a peer still
needs it.
"""

from __future__ import annotations

import os
import resource
import sys
import traceback

import cloudpickle

from sparktf.runtime.context import DONE_LINE


def _run(payload_path: str) -> tuple[str, object]:
    try:
        with open(payload_path, "rb") as f:
            payload, ctx = cloudpickle.load(f)
        main_fn, args = cloudpickle.loads(payload)
        return "ok", main_fn(args, ctx)
    except BaseException as e:  # everything, including SystemExit from user code
        return "error", {"message": f"{type(e).__name__}: {e}",
                         "traceback": traceback.format_exc()}


def main(argv: list[str]) -> int:
    payload_path, result_path = argv
    status, value = _run(payload_path)
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        blob = cloudpickle.dumps((status, value, peak_kb))
    except Exception as e:
        status = "error"
        blob = cloudpickle.dumps((status, {
            "message": f"main_fn returned a value that cannot be pickled: "
                       f"{type(e).__name__}: {e}. Return plain Python data.",
            "traceback": traceback.format_exc()}, peak_kb))
    with open(result_path, "wb") as f:
        f.write(blob)
    code = 0 if status == "ok" else 1
    if code == 0:
        print(DONE_LINE, flush=True)
        sys.stdin.read()  # returns when the parent releases us (or dies)
    sys.stdout.flush()
    sys.stderr.flush()
    # TensorFlow's gRPC threads can keep a normal interpreter shutdown waiting.
    os._exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
