"""The SavedModels a scoring worker loads, and what sparktf reads from them without
loading: their signatures (``describe``), the input names fit had to change
(``input_names``) and the inputs whose padding the model masks (``padding_values``).

A Python worker keeps its loaded signatures (``ModelCache``): Spark reuses Python
workers across tasks and jobs, so a model is loaded once per worker, not per partition.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import threading

from sparktf.runtime import storage, tf_startup, worker_tuning
from sparktf.runtime.scoring import padding


class ModelCache:
    """This Python worker's loaded signatures, least recently used evicted first.

    Spark reuses Python workers across tasks and jobs, so a model is loaded once
    per worker, not once per partition. Entries are keyed by the SavedModel's
    identity (``identity``), not its path: a model saved again at the same path is
    loaded again. And by device: each task runs on the GPU Spark assigned it.
    """

    capacity = 4
    _entries: collections.OrderedDict = collections.OrderedDict()
    _lock = threading.Lock()

    @classmethod
    def get(cls, model_path: str, signature: str, device: str, settle: bool = True):
        """The signature function, loaded once; ``settle``: the collector is frozen after a
        load (``worker_tuning``), in Spark's Python workers only, never in a user's own
        process (an MLflow pyfunc's)."""
        key = (identity(model_path), signature, device)
        with cls._lock:
            if key in cls._entries:
                cls._entries.move_to_end(key)
                return cls._entries[key].fn
        loaded = _Loaded.load(model_path, signature, device)
        with cls._lock:
            cls._entries[key] = loaded
            while len(cls._entries) > cls.capacity:
                cls._entries.popitem(last=False)[1].close()
        if settle:  # the models let go collected, the new one frozen
            worker_tuning.settle_collector()
        return loaded.fn

    @classmethod
    def clear(cls) -> None:
        with cls._lock:
            while cls._entries:
                cls._entries.popitem()[1].close()


@dataclasses.dataclass
class _Loaded:
    """A loaded SavedModel, its signature function, and the local copy of a remote model
    (removed when the entry leaves the cache)."""

    model: object
    fn: object
    scratch: str | None

    @classmethod
    def load(cls, model_path: str, signature: str, device: str) -> "_Loaded":
        scratch = None if storage.is_local(model_path) else tempfile.mkdtemp(
            prefix="sparktf-model-", dir=storage.scratch_root())
        try:
            # TensorFlow may start here (an MLflow model's predict in a user's process)
            with tf_startup.quiet_start():
                import tensorflow as tf

                with tf.device(device):
                    model = tf.saved_model.load(storage.get_dir(model_path, scratch))
            if signature not in model.signatures:
                raise KeyError(f"The SavedModel at {model_path} has no signature "
                               f"{signature!r}; it has {sorted(model.signatures)}.")
        except BaseException:
            if scratch:
                shutil.rmtree(scratch, ignore_errors=True)
            raise
        return cls(model, model.signatures[signature], scratch)

    def close(self) -> None:
        if self.scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)


FINGERPRINT = "fingerprint.pb"  # TensorFlow writes it into every SavedModel (TF >= 2.12)


def identity(model_path: str) -> str:
    """What tells one SavedModel from another at the same path: a digest of its
    ``fingerprint.pb`` (which hashes the graph and the variables), or of the graph and
    the variables' index (which holds every variable's checksum) where there is none."""
    names = [FINGERPRINT]
    if not storage.exists(storage.join(model_path, FINGERPRINT)):
        names = ["saved_model.pb", "variables/variables.index"]
    digest = hashlib.sha256()
    for name in names:
        uri = storage.join(model_path, *name.split("/"))
        if storage.exists(uri):
            digest.update(storage.read_bytes(uri))
    return digest.hexdigest()


_DESCRIPTIONS: dict = {}


_DESCRIPTIONS_LOCK = threading.Lock()


def describe(model_path: str, signature: str) -> tuple[dict, dict]:
    """Signature inputs and outputs: name -> (shape without batch, dtype name).

    Read from the SavedModel's graph metadata (``saved_model.pb``), without loading the
    variables, and kept per SavedModel identity.
    """
    return _kept(model_path, signature, lambda: _read_signature(model_path, signature))


def _kept(model_path: str, what: str, read):
    """``read()``, once per SavedModel identity and ``what``: what sparktf reads of a
    SavedModel without loading it, kept for the life of the process."""
    key = (identity(model_path), what)
    with _DESCRIPTIONS_LOCK:
        if key in _DESCRIPTIONS:
            return _DESCRIPTIONS[key]
    found = read()
    with _DESCRIPTIONS_LOCK:
        _DESCRIPTIONS[key] = found
    return found


def _extra(model_path: str, relative: str) -> dict:
    """A JSON file fit wrote beside the SavedModel's own files (empty where there is none),
    read once per SavedModel."""
    path = storage.join(model_path, relative)
    return _kept(model_path, relative, lambda: json.loads(storage.read_bytes(path))
                 if storage.exists(path) else {})


# signature input -> the model input it takes, where TensorFlow could not keep the name
# (größe -> gr__e); written by fit beside the SavedModel's own files
INPUT_NAMES = os.path.join("assets.extra", "sparktf_input_names.json")


def input_names(model_path: str) -> dict[str, str]:
    """Signature input -> model input name, for the inputs fit renamed in the signature
    (empty for any other SavedModel)."""
    return _extra(model_path, INPUT_NAMES)


def padding_values(model_path: str) -> dict[str, float]:
    """Signature input -> padding value, for the inputs of length None whose padding the
    model masks (``padding``: written at export; empty for any other SavedModel)."""
    return _extra(model_path, padding.PADDING)


def _read_signature(model_path: str, signature: str) -> tuple[dict, dict]:
    with tf_startup.quiet_start():  # on a driver, among the user's own lines
        import tensorflow as tf
        from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString(storage.read_bytes(storage.join(model_path, "saved_model.pb")))
    signatures = {}
    for graph in proto.meta_graphs:
        signatures.update(graph.signature_def)
    if signature not in signatures:
        raise KeyError(f"The SavedModel at {model_path} has no signature {signature!r}; it "
                       f"has {sorted(k for k in signatures if not k.startswith('__'))}.")

    def spec(info):
        shape = info.tensor_shape
        dims = (None,) if shape.unknown_rank else tuple(
            None if d.size < 0 else int(d.size) for d in shape.dim[1:])
        return dims, tf.dtypes.as_dtype(info.dtype).name

    found = signatures[signature]
    return ({k: spec(v) for k, v in found.inputs.items()},
            {k: spec(v) for k, v in found.outputs.items()})
