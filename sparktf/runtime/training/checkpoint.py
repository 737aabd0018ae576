"""Per-epoch checkpoints under ``modelDir/checkpoints``, committed atomically.

A checkpoint is a folder ``epoch-NNNNN`` holding the model's and optimizer's
variables (``tf.train.Checkpoint``) and ``state.json`` (epochs done, history so
far, and the rest of the run's state: ``run_state``). It counts only once
``latest.json`` names it, and that pointer is replaced in one step after the folder is
complete: a checkpoint cut off half way is never loaded, and the previous one stays
valid.
"""

from __future__ import annotations

import json
import os
import tempfile

from sparktf.runtime import storage

CHECKPOINTS = "checkpoints"
POINTER = "latest.json"
STATE = "state.json"
VARIABLES = "variables"
KEEP = 2  # checkpoints kept; older ones are removed after a new one is committed


def _root(model_dir: str) -> str:
    return storage.join(model_dir, CHECKPOINTS)


def latest(model_dir: str) -> dict | None:
    """``{"epoch": n, "dir": name, "history": {...}}`` of the newest committed checkpoint."""
    pointer = storage.join(_root(model_dir), POINTER)
    if not storage.exists(pointer):
        return None
    ref = json.loads(storage.read_bytes(pointer))
    state = json.loads(storage.read_bytes(storage.join(_root(model_dir), ref["dir"], STATE)))
    return {**state, "dir": ref["dir"]}


def at_epoch(epoch: int) -> dict:
    """The reference ``restore`` takes for the checkpoint written after ``epoch``."""
    return {"epoch": epoch, "dir": _name(epoch)}


def _name(epoch: int) -> str:
    return f"epoch-{epoch:05d}"


def save(model, model_dir: str, epoch: int, history: dict, is_chief: bool,
         prune_older: bool = True, state: dict | None = None,
         keep: int | None = None) -> None:
    """Writes the checkpoint after ``epoch`` epochs; only the chief's copy is committed.

    Every worker writes (TensorFlow expects all workers to take part under
    MultiWorkerMirroredStrategy); the others write to a scratch folder. With
    ``prune_older=False`` older checkpoints stay: an evaluator side-car that has not
    read them yet removes them itself (``prune``). ``state``: the run's state beyond the
    variables, read back by ``latest``; ``keep``: an older epoch whose checkpoint is not
    pruned (the best epoch's weights, for ``keepBest``).
    """
    import tensorflow as tf

    name = _name(epoch)
    with tempfile.TemporaryDirectory(prefix="sparktf-ckpt-", dir=storage.scratch_root()) as local:
        tf.train.Checkpoint(model=model, optimizer=model.optimizer).write(
            os.path.join(local, VARIABLES))
        with open(os.path.join(local, STATE), "w") as f:
            json.dump({**(state or {}), "epoch": epoch, "history": history}, f)
        if not is_chief:
            return
        storage.put_dir(local, storage.join(_root(model_dir), name))
    _commit(model_dir, name)
    if prune_older:
        prune(model_dir, epoch, keep)


def _commit(model_dir: str, name: str) -> None:
    """Points ``latest.json`` at ``name`` in one atomic step."""
    storage.replace_bytes(storage.join(_root(model_dir), POINTER),
                          json.dumps({"dir": name}).encode())


def prune(model_dir: str, epoch: int, keep: int | None = None) -> None:
    """Removes the checkpoints more than ``KEEP`` epochs older than ``epoch`` but ``keep``,
    on any filesystem: the chief's newest, or the newest the evaluator side-car has read
    (those committed after it are kept)."""
    root = _root(model_dir)
    for entry in storage.list_names(root):
        if (entry.startswith("epoch-") and int(entry[6:]) <= epoch - KEEP
                and int(entry[6:]) != keep):
            storage.remove_dir(storage.join(root, entry))


def restore(model, model_dir: str, found: dict) -> None:
    """Loads the model's and optimizer's variables from the checkpoint ``found``."""
    import tensorflow as tf

    with tempfile.TemporaryDirectory(prefix="sparktf-ckpt-", dir=storage.scratch_root()) as scratch:
        local = storage.get_dir(storage.join(_root(model_dir), found["dir"]), scratch)
        tf.train.Checkpoint(model=model, optimizer=model.optimizer).read(
            os.path.join(local, VARIABLES)).assert_existing_objects_matched()
