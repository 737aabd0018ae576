"""MLflow tracking of fits, and MLflow model URIs for ``TFModel``; optional (``sparktf[mlflow]``).

This module imports MLflow; sparktf imports it only when the application has
imported MLflow itself (a fit) or names an MLflow URI (a TFModel). A fit logs to
MLflow only when an MLflow run is active, which includes the run that
``mlflow.pyspark.ml.autolog()`` opens around every ``Estimator.fit``. It then logs
the estimator's Params (those autolog has not logged already), the per-epoch
metrics (``step`` = epoch, ``val_*`` included; a vector metric's elements as
``<name>/<index>``) and the trained model as an MLflow
``pyfunc`` model over the exported SavedModel, which ``mlflow.pyfunc.load_model``
loads and serves, predicting what ``TFModel.transform`` predicts (a column per
output), from pandas cells of any kind ``transform`` takes (ml Vectors, numpy arrays,
lists). A failure to log never fails the fit: a warning, each time, names the run and
says why.

The room: this package logs and loads; ``logged_model`` is what MLflow shows and checks
of a logged model (its signature, an input example); ``model_code`` is the code MLflow
keeps in each logged model and runs to load it. It may import the run's room
(``sparktf.ml.runs``: a scratch folder), the runtime's scoring, storage and training
summaries (the history it logs), and no stage: the stages import it, only where the
application uses MLflow.
"""

from __future__ import annotations

import atexit
import dataclasses
import importlib.metadata
import logging
import math
import os
import pickle
import sys
import tempfile

import mlflow
import pandas as pd
import pyarrow as pa
from pyspark.ml.linalg import SparseVector, Vector, Vectors

from sparktf.errors import InvalidInputError
from sparktf.ml.runs import scratch
from sparktf.ml.tracking import logged_model
from sparktf.runtime import storage
from sparktf.runtime.scoring import inference, saved_models
from sparktf.runtime.scoring import spec as score_spec
from sparktf.runtime.scoring.outputs import output_arrays
from sparktf.runtime.training import summaries

logger = logging.getLogger("sparktf")

# A pyfunc model logged before the runtime was grouped into rooms pickled its ScoreSpec
# (and bindings) as sparktf.runtime.inference.*: that name still unpickles, as the module
# that holds them now.
sys.modules.setdefault("sparktf.runtime.inference", score_spec)

MODEL_NAME = "model"  # the logged model's name (artifact path) in the run
SAVED_MODEL_ARTIFACT = "saved_model"
SPEC_ARTIFACT = "score_spec"  # the model's bindings (a ScoreSpec, pickled)
# the model's code, which MLflow runs to load it (older models logged a pickled object)
MODEL_CODE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "model_code.py")
# How Spark sends an ml Vector to Python (VectorUDT's sqlType): 0 sparse, 1 dense
VECTOR_TYPE = pa.struct([("type", pa.int8()), ("size", pa.int32()),
                         ("indices", pa.list_(pa.int32())), ("values", pa.list_(pa.float64()))])


def log_fit(estimator, model, schema=None) -> None:
    """Logs a finished fit to the active MLflow run, if there is one; ``schema``: the
    fitted frame's, which types the logged model's input columns."""
    run_id = None
    try:
        run = mlflow.active_run()
        if run is None:
            return
        run_id = run.info.run_id
        logged = mlflow.get_run(run_id).data.params
        params = {p.name: _text(v) for p, v in estimator.extractParamMap().items()
                  if not callable(v) and p.name not in ("callbacks",)}
        mlflow.log_params({k: v for k, v in params.items() if k not in logged})
        history = model.getHistory()
        epochs = max((len(v) for v in history.values()), default=0)
        for epoch in range(epochs):
            mlflow.log_metrics(epoch_metrics(history, epoch), step=epoch + 1)
        for epoch, metrics in worker_metrics(model.getWorkerTimes()):
            mlflow.log_metrics(metrics, step=epoch)
        log_model(model, schema)
    except Exception as e:  # tracking must never cost the user the trained model
        logger.warning("sparktf: could not log the fit to MLflow run %s (%s: %s); the fit "
                       "itself is unaffected", run_id, type(e).__name__, e)


def log_imported(model) -> None:
    """Logs a TFModel made from a Keras model (``TFModel.from_keras``) to the active MLflow
    run, if there is one, as a fit's model is logged."""
    run = mlflow.active_run()
    if run is None:
        return
    try:
        log_model(model)
    except Exception as e:  # as for a fit: tracking never costs the user the model
        logger.warning("sparktf: could not log the model to MLflow run %s (%s: %s); the "
                       "TFModel itself is unaffected", run.info.run_id, type(e).__name__, e)


def worker_metrics(times: dict) -> list[tuple[int, dict[str, float]]]:
    """``TFModel.getWorkerTimes`` as MLflow metrics by epoch (1-based):
    ``worker_own_seconds/<rank>`` and ``worker_wait_seconds/<rank>``."""
    return [(int(epoch), {f"worker_{key}/{rank}": float(seconds)
                          for key in ("own_seconds", "wait_seconds")
                          for rank, seconds in enumerate(times[key][i])})
            for i, epoch in enumerate(times.get("epoch", []))]


def epoch_metrics(history: dict, epoch: int) -> dict[str, float]:
    """The history's values at ``epoch`` (0-based) as MLflow metrics: a vector metric's
    (``F1Score(average=None)``) one per element, ``<name>/<index>``."""
    return dict(tag_value for key, values in history.items() if epoch < len(values)
                for tag_value in summaries.elements(key, values[epoch]))


def log_model(model, schema=None) -> None:
    """Logs ``model`` (a TFModel) as a pyfunc model over its SavedModel, with its signature
    and an input example (``logged_model``): the input columns typed as ``schema`` (the
    fit's frame's Spark schema) has them, else as the serving signature takes them."""
    version = importlib.metadata.version
    spec = model._score_spec(None)
    fields, _ = model._output_fields(spec)
    with tempfile.TemporaryDirectory(prefix="sparktf-mlflow-") as local:
        saved = storage.get_dir(spec.model_path, os.path.join(local, SAVED_MODEL_ARTIFACT))
        bindings = os.path.join(local, SPEC_ARTIFACT)
        with open(bindings, "wb") as f:
            pickle.dump(spec, f)
        mlflow.pyfunc.log_model(
            name=MODEL_NAME, python_model=MODEL_CODE,
            artifacts={SAVED_MODEL_ARTIFACT: saved, SPEC_ARTIFACT: bindings},
            signature=logged_model.signature(spec, fields, schema),
            input_example=logged_model.example(spec, schema),
            pip_requirements=["sparktf", f"tensorflow=={version('tensorflow')}",
                              f"pyarrow=={version('pyarrow')}", "pandas"])


def _text(value) -> str:
    text = str(value)
    return text if len(text) <= 500 else text[:497] + "..."


def resolve(uri: str) -> str:
    """The SavedModel inside an MLflow model logged by sparktf (``runs:/...``,
    ``models:/name/version``), downloaded to this machine once per URI, into a folder
    removed when this process ends (MLflow's own default folder is never removed)."""
    if uri in _resolved:
        return _resolved[uri]
    folder = tempfile.mkdtemp(prefix="sparktf-mlflow-")
    atexit.register(scratch.remove, folder, os.getpid())
    local = mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=folder)
    found = [root for root, _, files in os.walk(os.path.join(local, "artifacts"))
             if "saved_model.pb" in files]
    saved = found[0] if len(found) == 1 else None
    if saved is None:
        raise InvalidInputError(f"{uri} is not a model logged by sparktf (no SavedModel in "
                                "its artifacts); give modelPath a SavedModel or the URI of a "
                                "model sparktf logged.")
    _resolved[uri] = saved
    return saved


_resolved: dict[str, str] = {}


class SparkTFPyfunc(mlflow.pyfunc.PythonModel):
    """An MLflow pyfunc model: pandas rows in, ``TFModel.transform``'s output columns out."""

    def __init__(self, spec):
        self.spec = spec  # None in a model logged as code (model_code.py)

    def load_context(self, context):
        if self.spec is None:
            with open(context.artifacts[SPEC_ARTIFACT], "rb") as f:
                self.spec = pickle.load(f)
        self.spec = dataclasses.replace(
            self.spec, model_path=context.artifacts[SAVED_MODEL_ARTIFACT])

    # the input's type hint is one MLflow infers no signature from (the logged model has its
    # own, logged_model's): without one, MLflow warns at each import of this module
    def predict(self, context, model_input: pd.DataFrame, params=None):
        batch = arrow_batch(model_input)
        fn = saved_models.ModelCache.get(self.spec.model_path, self.spec.signature, "/CPU:0",
                                         settle=False)  # a user's process: its collector stays
        outputs = inference.run_model(fn, self.spec, batch)
        names, arrays = output_arrays(batch.num_rows, self.spec, outputs)
        return pd.DataFrame({n: a.to_pylist() for n, a in zip(names, arrays)})


def arrow_batch(frame) -> pa.RecordBatch:
    """pandas rows as Spark sends them to ``transform``: ml Vector cells as Spark's vector
    struct, numpy array cells as lists."""
    arrays = [_cells(frame[c].tolist()) if frame[c].dtype == object
              else pa.Array.from_pandas(frame[c]) for c in frame.columns]
    return pa.RecordBatch.from_arrays(arrays, names=[str(c) for c in frame.columns])


def _cells(values: list) -> pa.Array:
    if any(isinstance(v, Vector) for v in values):
        return pa.array([_vector(v) for v in values], type=VECTOR_TYPE)
    return pa.array([v.tolist() if hasattr(v, "tolist") else v for v in values],
                    from_pandas=True)


def _vector(value) -> dict | None:
    if value is None or isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, SparseVector):
        return {"type": 0, "size": value.size, "indices": value.indices.tolist(),
                "values": value.values.tolist()}
    values = value.toArray() if isinstance(value, Vector) else Vectors.dense(value).toArray()
    return {"type": 1, "size": None, "indices": None, "values": values.tolist()}
