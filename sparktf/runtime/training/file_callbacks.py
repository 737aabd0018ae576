"""Keras's file callbacks under a distributed fit, as Keras's multi-worker guide has them:
every worker runs them (a save may take part in the workers' collectives), the chief
writes to the path the user gave, and each other worker to a private temporary folder,
removed when its task ends."""

from __future__ import annotations

import contextlib
import csv
import io
import os
import shutil
import tempfile

from sparktf.errors import InvalidInputError
from sparktf.runtime import storage

# Keras (3 and tf_keras) callbacks that write files, and the attribute naming their path
_PATHS = {"ModelCheckpoint": "filepath", "CSVLogger": "filename", "TensorBoard": "log_dir"}


def _keras_class(callback, names) -> str | None:
    for cls in type(callback).__mro__:
        if cls.__name__ in names and cls.__module__.startswith(("keras", "tf_keras")):
            return cls.__name__
    return None


def carries_state(callback) -> bool:
    """Whether ``callback`` is one of Keras's own (or derives from one): what it keeps
    from epoch to epoch (``EarlyStopping``'s patience count, ``ReduceLROnPlateau``'s,
    ``ModelCheckpoint``'s batches since its last save) is carried into a resumed attempt
    (``run_state``). A callback of the user's own, derived from ``Callback`` itself,
    starts afresh with each attempt: what it keeps may belong to one attempt."""
    for cls in type(callback).__mro__:
        if cls.__module__.startswith(("keras", "tf_keras")):
            return cls.__name__ not in ("Callback", "BackupAndRestore")
    return False


def check(callbacks) -> None:
    """Refuses, before any job, the Keras callbacks a distributed fit cannot run."""
    for callback in callbacks:
        if _keras_class(callback, ("BackupAndRestore",)):
            raise InvalidInputError(
                "keras.callbacks.BackupAndRestore cannot restore a sparktf fit: Keras's "
                "fit reads its backup to skip epochs, and sparktf runs its own epochs. "
                "sparktf checkpoints every epoch itself and resumes a relaunched attempt "
                "from the last one (maxRetries); remove BackupAndRestore from callbacks.")


@contextlib.contextmanager
def private_paths(callbacks, is_chief: bool):
    """On a worker other than the chief, points each file callback (``ModelCheckpoint``,
    ``CSVLogger``, ``TensorBoard``) at a temporary folder of its own for the block, and
    removes the folder after it; the chief's write where the user said."""
    writers = [(c, _PATHS[name]) for c in callbacks
               for name in [_keras_class(c, _PATHS)] if name]
    if is_chief or not writers:
        yield
        return
    folder = tempfile.mkdtemp(prefix="sparktf-callbacks-", dir=storage.scratch_root())
    try:
        for i, (callback, attribute) in enumerate(writers):
            given = str(getattr(callback, attribute)).rstrip("/\\")
            own = os.path.join(folder, str(i))
            os.makedirs(own)
            setattr(callback, attribute, os.path.join(own, os.path.basename(given) or "out"))
        yield
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def resume(callbacks, history: dict, first_epoch: int) -> None:
    """A relaunched or resumed attempt carries on what Keras's file callbacks wrote before
    it (fresh copies of them): ``CSVLogger`` appends to its file (Keras's ``append``, as
    Keras advises for a continued fit) after the rows of the ``first_epoch`` epochs
    checkpointed (a row written after the last checkpoint is written again), and
    ``ModelCheckpoint(save_best_only=True)`` saves only an epoch better than the best of
    ``history``, the epochs already trained."""
    for callback in callbacks:
        name = _keras_class(callback, ("CSVLogger", "ModelCheckpoint"))
        if name == "CSVLogger":
            callback.append = True
            _keep_rows_before(str(callback.filename), first_epoch, callback.sep)
        elif (name == "ModelCheckpoint" and callback.save_best_only and
              hasattr(callback, "_is_improvement") and history.get(callback.monitor)):
            if callback.monitor_op is None:
                callback._set_monitor_op()
            for value in history[callback.monitor]:
                if callback.best is None or bool(callback._is_improvement(value,
                                                                          callback.best)):
                    callback.best = float(value)


def _keep_rows_before(path: str, first_epoch: int, sep: str) -> None:
    """Drops the rows of epochs ``first_epoch`` and later from a ``CSVLogger`` file (the
    header and the epochs before stay), replacing the file in one step."""
    if not os.path.isfile(path):
        return
    with open(path, newline="") as f:
        rows = list(csv.reader(f, delimiter=sep))
    if not rows or rows[0][:1] != ["epoch"]:
        return
    kept = [rows[0]] + [r for r in rows[1:] if r and r[0].isdigit() and int(r[0]) < first_epoch]
    if len(kept) == len(rows):
        return
    out = io.StringIO()
    csv.writer(out, delimiter=sep).writerows(kept)  # as CSVLogger writes (excel)
    storage.replace_bytes(path, out.getvalue().encode())
