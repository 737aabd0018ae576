"""Saving and loading ``TFEstimator`` and ``TFModel`` the pyspark.ml way.

Each stage folder holds pyspark's ``DefaultParamsWriter`` metadata (JSON Params,
so ``Pipeline`` and ``CrossValidator`` persistence work unchanged) plus its
artifacts: the SavedModel for a model, cloudpickled ``modelFn``/``callbacks``
for an estimator. The metadata records a format version, checked on load.
"""

from __future__ import annotations

import cloudpickle
from pyspark.ml.util import DefaultParamsReader, DefaultParamsWriter, MLReader, MLWriter

import sparktf
from sparktf._driver import pickling, sessions
from sparktf.errors import InvalidInputError
from sparktf.runtime import storage

FORMAT_VERSION = 1
MODEL_DIR = "savedmodel"
CALLABLES_FILE = "callables.pkl"
_NOT_JSON = ("modelFn", "callbacks")  # saved beside the metadata, pickled


def _json_params(instance) -> dict:
    return {p.name: v for p, v in instance._paramMap.items() if p.name not in _NOT_JSON}


def _extra() -> dict:
    return {"sparktfFormat": FORMAT_VERSION, "sparktfVersion": sparktf.__version__}


def _check_format(metadata: dict, path: str) -> None:
    found = metadata.get("sparktfFormat")
    if found != FORMAT_VERSION:
        raise InvalidInputError(
            f"The stage at {path} was saved by sparktf {metadata.get('sparktfVersion', '?')} "
            f"in format {found}; this sparktf {sparktf.__version__} reads format "
            f"{FORMAT_VERSION}. Load it with the sparktf version that saved it, or retrain.")


def _load_instance(cls, path: str, sc):
    """A ``cls`` with the uid and Params saved at ``path``, after checking the format."""
    metadata = DefaultParamsReader.loadMetadata(path, sc)
    _check_format(metadata, path)
    instance = cls()
    instance._resetUid(metadata["uid"])
    DefaultParamsReader.getAndSetParams(instance, metadata)
    return instance


class _StageWriter(MLWriter):
    """Params metadata (with the format version), then the stage's own artifacts."""

    def __init__(self, instance):
        super().__init__()
        self.instance = instance

    def _handleOverwrite(self, path: str) -> None:
        if sessions.is_connect(self.sparkSession):  # pyspark's own asks the JVM
            storage.remove_dir(path)
        else:
            super()._handleOverwrite(path)

    def saveImpl(self, path: str) -> None:
        DefaultParamsWriter.saveMetadata(self.instance, path, self.sparkSession,
                                         extraMetadata=_extra(),
                                         paramMap=_json_params(self.instance))
        self.save_artifacts(path)

    def save_artifacts(self, path: str) -> None:
        raise NotImplementedError


class _StageReader(MLReader):
    """The stage with its saved uid and Params, then its own artifacts."""

    def __init__(self, cls):
        super().__init__()
        self.cls = cls

    def load(self, path: str):
        instance = _load_instance(self.cls, path, self.sparkSession)
        self.load_artifacts(instance, path)
        return instance

    def load_artifacts(self, instance, path: str) -> None:
        raise NotImplementedError


class TFModelWriter(_StageWriter):
    """Writes a ``TFModel``: Params metadata and a copy of its SavedModel."""

    def save_artifacts(self, path: str) -> None:
        storage.copy_dir(self.instance.getModelPath(), storage.join(path, MODEL_DIR))


class TFModelReader(_StageReader):
    """Reads a ``TFModel`` saved by ``TFModelWriter``; its modelPath is the saved copy."""

    def load_artifacts(self, instance, path: str) -> None:
        instance._set(modelPath=storage.join(path, MODEL_DIR))


class TFEstimatorWriter(_StageWriter):
    """Writes a ``TFEstimator``: JSON Params metadata and its pickled modelFn/callbacks."""

    def save_artifacts(self, path: str) -> None:
        callables = {name: self.instance.getOrDefault(name) for name in _NOT_JSON
                     if self.instance.isSet(name)}
        with pickling.by_value([callables.get("modelFn"), *callables.get("callbacks", [])]):
            blob = cloudpickle.dumps(callables)
        storage.write_bytes(storage.join(path, CALLABLES_FILE), blob)


class TFEstimatorReader(_StageReader):
    """Reads a ``TFEstimator`` saved by ``TFEstimatorWriter``."""

    def load_artifacts(self, instance, path: str) -> None:
        instance._set(**cloudpickle.loads(storage.read_bytes(storage.join(path,
                                                                          CALLABLES_FILE))))
