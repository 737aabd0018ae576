"""MLflow tracking of a ``HalvingSearch`` (optional, as ``tracking``): with an MLflow run
active, the run is the search's parent run. It gets the search's Params, the best
trial's Params and metric, and the best model (``tracking.log_model``: a
``PipelineModel``'s ``TFModel`` stage). Each trial is a child run of its own: its
Params, its per-epoch metrics (``step`` = epoch, across its rungs), the metric at each
rung, and why it stopped (tag ``stopReason``; a failed trial's run ends FAILED).
The trials' own fits log nothing themselves. A failure to log never fails the search."""

from __future__ import annotations

import logging
import math
import time

import mlflow
from mlflow.entities import Metric, Param, RunTag
from pyspark.ml import PipelineModel

from sparktf.ml import tracking
from sparktf.runtime.training import summaries

logger = logging.getLogger("sparktf")
_LIMIT = 500


def log_search(search, model, dataset) -> None:
    """Logs the finished search to the active MLflow run, if there is one; ``dataset``:
    the searched frame, whose columns type the logged model's inputs."""
    parent = mlflow.active_run()
    if parent is None:
        return
    try:
        _log(search, model, parent, dataset)
    except Exception as e:  # tracking must never cost the user the search
        logger.warning("sparktf: could not log the search to MLflow run %s (%s: %s); the "
                       "search itself is unaffected", parent.info.run_id, type(e).__name__, e)


def _log(search, model, parent, dataset) -> None:
    client = mlflow.MlflowClient()
    parent_id = parent.info.run_id
    logged = client.get_run(parent_id).data.params
    mine = {f"search.{p.name}": _text(v) for p, v in search.extractParamMap().items()
            if p.name not in ("estimator", "evaluator", "estimatorParamMaps")}
    best = next(r for r in model.trialRecords if r["trial"] == model.bestTrial)
    mine.update({f"best.{k}": _text(v) for k, v in best["params"].items()})
    mlflow.log_params({k: v for k, v in mine.items() if k not in logged})
    if best["metrics"]:
        mlflow.log_metric("best_metric", float(best["metrics"][-1]))
    for record in model.trialRecords:
        _child(client, parent.info.experiment_id, parent_id, record)
    if isinstance(model.bestModel, PipelineModel):  # the TFModel stage reads the frame
        tf_model = model.bestModel.stages[-1]     # its earlier stages make (no job: a plan)
        dataset = PipelineModel(model.bestModel.stages[:-1]).transform(dataset)
    else:
        tf_model = model.bestModel
    tracking.log_model(tf_model, dataset.schema)


def _child(client, experiment_id: str, parent_id: str, record: dict) -> None:
    run = client.create_run(experiment_id, run_name=f"trial-{record['trial']:03d}",
                            tags={"mlflow.parentRunId": parent_id,
                                  "stopReason": record["stopReason"][:_LIMIT]})
    now = int(time.time() * 1000)
    params = [Param(k, _text(v)) for k, v in record["params"].items()]
    params.append(Param("epochs_trained", str(record["epochs"])))
    metrics = [Metric(tag, number, now, step + 1)
               for key, values in record["history"].items() if key != "best_epoch"
               for step, v in enumerate(values) if v is not None
               for tag, number in summaries.elements(key, v) if math.isfinite(number)]
    metrics += [Metric("rung_metric", float(m), now, e)
                for e, m in zip(record["rungEpochs"], record["metrics"])]
    for i in range(0, max(len(metrics), 1), 1000):  # MLflow takes 1,000 metrics a call
        client.log_batch(run.info.run_id, metrics=metrics[i:i + 1000],
                         params=params if i == 0 else [],
                         tags=[RunTag("trial", str(record["trial"]))] if i == 0 else [])
    failed = record["stopReason"].startswith("failed")
    client.set_terminated(run.info.run_id, "FAILED" if failed else "FINISHED")


def _text(value) -> str:
    text = str(value)
    return text if len(text) <= _LIMIT else text[:_LIMIT - 3] + "..."
