"""``runId``: a fit that outlives its driver. Its folder ``modelDir/<runId>`` holds what
the fit was asked (``run.json``: the training Params and a digest of ``modelFn``), its
checkpoints, and once finished what the fit returned (``result.json``): a fit of the
same ``runId`` resumes from the last checkpoint, or returns the finished model."""

from __future__ import annotations

import hashlib
import inspect
import json
import re

from sparktf.errors import InvalidInputError
from sparktf.ml.persistence import json_view
from sparktf.runtime import storage

RUN_FILE = "run.json"
RESULT_FILE = "result.json"
# what a resumed fit must share with the fit it resumes: what the training computes
TRAINING_PARAMS = ("featuresCol", "inputCols", "labelCol", "labelCols", "epochs",
                   "batchSize", "learningRate", "hyperParams", "validationFraction",
                   "validationCol", "shuffle", "seed", "weightCol", "classWeight", "numPs",
                   "keepBest", "keepBestMode")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def check_name(run_id: str) -> None:
    if not _NAME.match(run_id):
        raise InvalidInputError(
            "runId names a folder under modelDir: letters, digits, '.', '_' and '-', "
            f"starting with a letter or digit. Received: runId={run_id!r}")


def _digest(fn) -> str:
    """``modelFn`` as its module, name and source (its bytecode where no source is)."""
    try:
        body = inspect.getsource(fn)
    except (OSError, TypeError):
        body = repr(getattr(getattr(fn, "__code__", None), "co_code", fn))
    named = f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', repr(fn))}"
    return hashlib.sha256(f"{named}\n{body}".encode()).hexdigest()


def asked(estimator) -> dict:
    """What this fit is asked to compute, as ``run.json`` keeps it."""
    params = {name: json_view(estimator.getOrDefault(name))
              for name in TRAINING_PARAMS if estimator.isDefined(name)}
    return {"params": params, "modelFn": _digest(estimator.getModelFn())}


def begin(run_dir: str, estimator) -> dict | None:
    """The finished fit's result if this run finished (no training then); else records
    what it is asked, or checks that a resumed run is asked the same."""
    now = json.loads(json.dumps(asked(estimator)))  # as it reads back
    if storage.exists(storage.join(run_dir, RESULT_FILE)):
        result = json.loads(storage.read_bytes(storage.join(run_dir, RESULT_FILE)))
        _check_same(run_dir, now)
        return result
    if storage.exists(storage.join(run_dir, RUN_FILE)):
        _check_same(run_dir, now)
        return None
    storage.write_bytes(storage.join(run_dir, RUN_FILE), json.dumps(now, indent=1).encode())
    return None


def _check_same(run_dir: str, now: dict) -> None:
    before = json.loads(storage.read_bytes(storage.join(run_dir, RUN_FILE)))
    differ = [f"{name}: {before['params'].get(name)!r} then, {now['params'].get(name)!r} now"
              for name in sorted({*before["params"], *now["params"]})
              if before["params"].get(name) != now["params"].get(name)]
    if before["modelFn"] != now["modelFn"]:
        differ.append("modelFn: another function (or its source changed)")
    if differ:
        raise InvalidInputError(
            f"The run in {run_dir} was started with other training settings, so it cannot "
            "be resumed or returned: " + "; ".join(differ) + ". Use a new runId, or the "
            "settings the run was started with.")


def finish(run_dir: str, chief_result: dict) -> None:
    """Records what the finished fit returned: a fit of the same runId returns it."""
    storage.write_bytes(storage.join(run_dir, RESULT_FILE),
                        json.dumps(chief_result, indent=1).encode())
