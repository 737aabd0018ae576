"""Saving and loading ``TFEstimator`` and ``TFModel`` the pyspark.ml way.

Each stage folder holds pyspark's ``DefaultParamsWriter`` metadata (JSON Params,
so ``Pipeline`` and ``CrossValidator`` persistence work unchanged) plus its
artifacts: the SavedModel for a model (the one an MLflow address names, for a
``runs:/`` or ``models:/`` modelPath), cloudpickled ``modelFn``/``callbacks`` and
``hyperParams`` for an estimator (``hyperParams`` exactly as set; the metadata keeps a
readable JSON view of them). The metadata records a format version, checked on load,
and a model's ``sparktfModelSource``: the modelPath it was saved from.

A Keras model trained elsewhere comes in the same way (``TFModel.from_keras``): exported
as a fit exports (``export_keras``).
"""

from __future__ import annotations

import os
import re
import tempfile

import cloudpickle
from pyspark.ml.util import DefaultParamsReader, DefaultParamsWriter, MLReader, MLWriter

import sparktf
from sparktf._driver import pickling, sessions, versions
from sparktf.errors import InvalidInputError
from sparktf.runtime import storage, tf_startup
from sparktf.runtime.training import export, keras_steps, model_kind
from sparktf.runtime.training.spec import KERAS_FILE, SAVED_MODEL

FORMAT_VERSION = 1
MODEL_DIR = "savedmodel"
CALLABLES_FILE = "callables.pkl"
_NOT_JSON = ("modelFn", "callbacks")  # saved beside the metadata, pickled
_EXACT = ("hyperParams",)  # pickled beside the metadata too; the metadata has a JSON view
MODEL_SOURCE = "sparktfModelSource"


def _json_params(instance, leave_out=_NOT_JSON) -> dict:
    return {p.name: json_view(v) if p.name in _EXACT else v
            for p, v in instance._paramMap.items() if p.name not in leave_out}


def json_view(value):
    """``value`` as JSON holds it, for people reading the metadata: tuples as lists, keys
    as strings, numpy values as numbers, anything else as its ``repr`` without memory
    addresses."""
    if isinstance(value, dict):
        return {k if isinstance(k, str) else repr(k): json_view(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_view(v) for v in value]
    if value is None or type(value) in (bool, int, float, str):
        return value
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return json_view(value.tolist())
    return _ADDRESS.sub("", repr(value))  # the same for the same object in another process


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def check_picklable(name: str, value: dict) -> None:
    """Refuses, when the Param is set, a dict whose items pickle cannot save exactly."""
    for key, item in value.items():
        try:
            cloudpickle.dumps((key, item))
        except Exception as e:  # pickle raises TypeError, PicklingError, AttributeError...
            raise InvalidInputError(
                f"{name}[{key!r}] cannot be pickled ({type(e).__name__}: {e}). {name} reach "
                "modelFn on every worker and are saved with the estimator: give values "
                "pickle can copy (numbers, strings, containers, numpy values) and build the "
                f"rest inside modelFn. Received: {name}[{key!r}]={item!r}") from e


def _extra() -> dict:
    return {"sparktfFormat": FORMAT_VERSION, "sparktfVersion": sparktf.__version__}


def _check_format(metadata: dict, path: str) -> None:
    found = metadata.get("sparktfFormat")
    if found != FORMAT_VERSION:
        raise InvalidInputError(
            f"The stage at {path} was saved by sparktf {metadata.get('sparktfVersion', '?')} "
            f"in format {found}; this sparktf {sparktf.__version__} reads format "
            f"{FORMAT_VERSION}. Load it with the sparktf version that saved it, or retrain.")


def spark_of(io):
    """What pyspark's ML persistence helpers take from an ``MLWriter`` or ``MLReader``
    ``io``: the session from pyspark 4.0 (Spark Connect has no SparkContext), 3.5's
    SparkContext before it."""
    return io.sparkSession if versions.has(versions.CONNECT_ML) else io.sc


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

    leave_out = _NOT_JSON  # Params saved as artifacts, not in the JSON metadata

    def __init__(self, instance):
        super().__init__()
        self.instance = instance

    def _handleOverwrite(self, path: str) -> None:
        if sessions.is_connect(self.sparkSession):  # pyspark's own asks the JVM
            storage.remove_dir(path)
        else:
            super()._handleOverwrite(path)

    def saveImpl(self, path: str) -> None:
        DefaultParamsWriter.saveMetadata(self.instance, path, spark_of(self),
                                         extraMetadata={**_extra(), **self.extra_metadata()},
                                         paramMap=_json_params(self.instance, self.leave_out))
        self.save_artifacts(path)

    def extra_metadata(self) -> dict:
        return {}

    def save_artifacts(self, path: str) -> None:
        raise NotImplementedError


class _StageReader(MLReader):
    """The stage with its saved uid and Params, then its own artifacts."""

    def __init__(self, cls):
        super().__init__()
        self.cls = cls

    def load(self, path: str):
        instance = _load_instance(self.cls, path, spark_of(self))
        self.load_artifacts(instance, path)
        return instance

    def load_artifacts(self, instance, path: str) -> None:
        raise NotImplementedError


class TFModelWriter(_StageWriter):
    """Writes a ``TFModel``: Params metadata (with the modelPath it came from) and a copy
    of its SavedModel (the one an MLflow address names)."""

    def extra_metadata(self) -> dict:
        return {MODEL_SOURCE: self.instance.getModelPath()}

    def save_artifacts(self, path: str) -> None:
        saved_model = self.instance._saved_model_path()
        storage.copy_dir(saved_model, storage.join(path, MODEL_DIR))
        keras_file = storage.join(storage.parent(saved_model), KERAS_FILE)
        if storage.exists(keras_file):  # a fitted model's Keras model (getKerasModel)
            storage.write_bytes(storage.join(path, KERAS_FILE), storage.read_bytes(keras_file))


class TFModelReader(_StageReader):
    """Reads a ``TFModel`` saved by ``TFModelWriter``; its modelPath is the saved copy."""

    def load_artifacts(self, instance, path: str) -> None:
        instance._set(modelPath=storage.join(path, MODEL_DIR))


class TFEstimatorWriter(_StageWriter):
    """Writes a ``TFEstimator``: JSON Params metadata and its pickled modelFn, callbacks
    and hyperParams."""

    def save_artifacts(self, path: str) -> None:
        pickled = {name: self.instance.getOrDefault(name) for name in _NOT_JSON + _EXACT
                   if self.instance.isSet(name)}
        with pickling.by_value([pickled.get("modelFn"), *pickled.get("callbacks", []),
                                *pickled.get("hyperParams", {}).values()]):
            blob = cloudpickle.dumps(pickled)
        storage.write_bytes(storage.join(path, CALLABLES_FILE), blob)


class TFEstimatorReader(_StageReader):
    """Reads a ``TFEstimator`` saved by ``TFEstimatorWriter``."""

    def load_artifacts(self, instance, path: str) -> None:
        instance._set(**cloudpickle.loads(storage.read_bytes(storage.join(path,
                                                                          CALLABLES_FILE))))


def local_file(uri: str, scratch: str) -> str:
    """A local path holding the file at ``uri`` (``scratch`` when it must be copied)."""
    if storage.is_local(uri):
        return storage.local_path(uri)
    with open(scratch, "wb") as f:
        f.write(storage.read_bytes(uri))
    return scratch


def keras_model(model, custom_objects: dict | None):
    """``model`` as a Keras model: itself, or the ``.keras`` file it names, loaded."""
    if isinstance(model, (str, os.PathLike)):
        with tf_startup.quiet_start():  # on a driver, among the user's own lines
            import keras

        path = os.fspath(model)
        if not path.endswith(".keras") or not storage.exists(path):
            raise InvalidInputError(f"from_keras takes a Keras model or the path of a "
                                    f"'.keras' file that exists. Received: {path!r}")
        with tempfile.TemporaryDirectory(prefix="sparktf-keras-") as folder:
            local = local_file(path, os.path.join(folder, KERAS_FILE))
            return keras.saving.load_model(local, custom_objects=custom_objects)
    if keras_steps.is_tf_keras(model):
        raise InvalidInputError(
            "from_keras takes Keras 3 models, and this one is tf_keras's (Keras 2), whose "
            "Keras model getKerasModel() could not give back: export it yourself "
            "(model.export(path)) and score it with TFModel(modelPath=path).")
    if not hasattr(model, "save") or not hasattr(model, "layers"):
        raise InvalidInputError(f"from_keras takes a Keras model (keras.Model) or a "
                                f"'.keras' file's path. Received: {model!r}")
    return model


def export_keras(model, path: str) -> tuple:
    """The Keras ``model`` exported to ``path`` as a fit exports (``TFModel.from_keras``): the
    SavedModel, its ``.keras`` and what it masks; its prediction kind and logits."""
    kind, from_logits = model_kind.prediction_kind(model)
    with tempfile.TemporaryDirectory(prefix="sparktf-export-",
                                     dir=storage.scratch_root()) as local:
        folder = os.path.join(local, SAVED_MODEL)
        try:
            export.write_saved_model(model, folder)
        except ValueError as e:  # Keras: a model never called declares no inputs
            raise InvalidInputError(
                f"The Keras model could not be exported ({e}). A subclassed model must "
                "have been called once on a batch for its serving signature to be "
                "known: call it on a few rows first.") from e
        storage.put_dir(folder, path)
    return kind, from_logits
