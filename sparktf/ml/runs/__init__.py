"""A run's identity and its lock: the room of what a ``runId`` is.

This package (``__init__``) holds a run's folder and records; ``identity`` what a
``modelFn`` builds, as a run recognises it; ``lock`` the one driver that owns a run;
``scratch`` the temp-dir folder of a fit that names no ``modelDir``. The room may import
``sparktf.ml.persistence`` (the JSON view of Params), the runtime's storage,
checkpoints, training spec (the export's folder) and TensorFlow start-up (``identity``
builds a model to recognise it), and nothing else of ``sparktf.ml``: the stages and tuning use it
(``pyproject.toml``'s import contracts).

``runId``: a fit that outlives its driver. Its folder ``modelDir/<runId>`` holds what
the fit was asked (``run.json``: the training Params and what the model is), its
checkpoints, and once finished what the fit returned (``result.json``): a fit of the
same ``runId`` resumes from the last checkpoint, or returns the finished model.

``epochs`` is the one training Param a run may be asked again with another value: a
run asked for more epochs than it trained continues from its last checkpoint (a
finished one too), and equals a fit asked for those epochs from the start; asked for
fewer than its last checkpoint holds, it is refused. Nothing else a fit computes depends
on how many epochs are left (a ``modelFn`` whose model reads ``hparams["epochs"]``, a
decay over the whole fit, builds another model, and is refused as such).

A run recognises its model by what ``modelFn`` builds (``model_identity``), not by the
function's source: a ``functools.partial``, a callable instance or a closure is the same
run when it builds the same model, and another run when it builds another. Both files are
replaced in one step, and one driver at a time owns a run (``owned``)."""

from __future__ import annotations

import json
import logging
import re

from sparktf.errors import InvalidInputError
from sparktf.ml.persistence import json_view
from sparktf.ml.runs import identity, lock
from sparktf.runtime import storage
from sparktf.runtime.training import checkpoint
from sparktf.runtime.training.spec import EXPORT_DIR

logger = logging.getLogger("sparktf")

RUN_FILE = "run.json"
RESULT_FILE = "result.json"
# what a resumed fit must share with the fit it resumes: what the training computes
TRAINING_PARAMS = ("featuresCol", "inputCols", "labelCol", "labelCols", "batchSize",
                   "learningRate", "hyperParams", "validationFraction", "validationCol",
                   "shuffle", "seed", "weightCol", "classWeight", "numPs", "keepBest",
                   "keepBestMode")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def check_name(run_id: str) -> None:
    if not _NAME.match(run_id):
        raise InvalidInputError(
            "runId names a folder under modelDir: letters, digits, '.', '_' and '-', "
            f"starting with a letter or digit. Received: runId={run_id!r}")


def owned(run_dir: str, what: str = "run"):
    """While the block runs, this driver's fit owns the run, or the search (``lock``)."""
    return lock.owned(run_dir, what)


def asked(estimator) -> dict:
    """What this fit is asked to compute, as ``run.json`` keeps it."""
    params = {name: json_view(estimator.getOrDefault(name))
              for name in TRAINING_PARAMS if estimator.isDefined(name)}
    return {"params": params, "epochs": estimator.getEpochs(),
            "model": identity.model_identity(estimator.getModelFn(), estimator.hparams())}


def begin(run_dir: str, estimator) -> dict | None:
    """The finished fit's result if this run finished the epochs asked (no training then);
    else records what it is asked, or checks that a resumed run is asked the same but
    perhaps more epochs. A run that has no checkpoint yet (its first fit failed before its
    first epoch ended) starts afresh."""
    now = json.loads(json.dumps(asked(estimator)))  # as it reads back
    latest = checkpoint.latest(run_dir) if storage.exists(
        storage.join(run_dir, RUN_FILE)) else None
    finished = storage.exists(storage.join(run_dir, RESULT_FILE))
    if finished or latest is not None:
        before = _check_same(run_dir, now)
    if finished:
        result = _read(run_dir, RESULT_FILE)
        if "epochs" not in result:  # an older sparktf's: the epochs its run was asked, kept
            result["epochs"] = before["epochs"]  # before run.json says the continuation's
            storage.replace_bytes(storage.join(run_dir, RESULT_FILE),
                                  json.dumps(result, indent=1).encode())
        if result["epochs"] == now["epochs"]:
            return result
        if latest is None:
            raise InvalidInputError(
                f"The run in {run_dir} finished {before['epochs']} epochs and has no "
                f"checkpoint left to continue from to {now['epochs']}. Ask "
                f"epochs={before['epochs']} for its model, or use a new runId.")
    if latest is not None:
        _check_epochs(run_dir, latest["epoch"], now["epochs"])
        if before["epochs"] != now["epochs"]:
            logger.info("sparktf: run %s trained %d epochs: it continues from its last "
                        "checkpoint to %d", run_dir, latest["epoch"], now["epochs"])
            _record(run_dir, now)
        return None
    if storage.exists(storage.join(run_dir, RUN_FILE)):
        logger.info("sparktf: run %s trained no epoch before: it starts afresh with this "
                    "fit's settings", run_dir)
    _record(run_dir, now)
    return None


def _record(run_dir: str, now: dict) -> None:
    storage.replace_bytes(storage.join(run_dir, RUN_FILE),
                          json.dumps(now, indent=1).encode())


def _check_epochs(run_dir: str, trained: int, wanted: int) -> None:
    if wanted < trained:
        raise InvalidInputError(
            f"The run in {run_dir} trained {trained} epochs already, so it cannot return a "
            f"model of {wanted}: its checkpoints are past it. Ask epochs >= {trained} to "
            "continue it, or use a new runId.")


def _read(run_dir: str, name: str) -> dict:
    path = storage.join(run_dir, name)
    try:
        return json.loads(storage.read_bytes(path))
    except ValueError as e:  # written in place by an older sparktf and cut short
        raise InvalidInputError(
            f"{path} is not readable JSON ({e}): the run's record is damaged. Remove the "
            f"run's folder {run_dir} to start it again, or use another runId.") from e


def _check_same(run_dir: str, now: dict) -> dict:
    """The run's ``run.json``, if it was asked the same as ``now`` (but epochs)."""
    before = _read(run_dir, RUN_FILE)
    if "epochs" not in before:  # written by an older sparktf: among the Params
        before["epochs"] = before["params"].pop("epochs")
    differ = [f"{name}: {before['params'].get(name)!r} then, {now['params'].get(name)!r} now"
              for name in sorted({*before["params"], *now["params"]})
              if before["params"].get(name) != now["params"].get(name)]
    if "model" in before:
        said = identity.differences(before["model"], now["model"])
        if said:
            differ.append("modelFn builds another model (" + "; ".join(said) + ")")
    if differ:
        raise InvalidInputError(
            f"The run in {run_dir} was started with other training settings, so it cannot "
            "be resumed or returned: " + "; ".join(differ) + ". Use a new runId, or the "
            "settings the run was started with.")
    return before


def export_name(run_dir: str, epochs: int) -> str:
    """The folder in the run that this fit exports to: ``export``, or ``export-<epochs>``
    when the run continues past a finished result, whose model (a ``TFModel`` may still
    score with it) stays as it was."""
    if storage.exists(storage.join(run_dir, RESULT_FILE)):
        return f"{EXPORT_DIR}-{epochs}"
    return EXPORT_DIR


def finish(run_dir: str, chief_result: dict, epochs: int) -> None:
    """Records what the finished fit of ``epochs`` returned: a fit of the same runId and
    epochs returns it."""
    storage.replace_bytes(storage.join(run_dir, RESULT_FILE),
                          json.dumps({**chief_result, "epochs": epochs}, indent=1).encode())

