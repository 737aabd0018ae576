"""Saving and loading ``HalvingSearch`` and ``HalvingSearchModel`` the pyspark.ml way.

A search's folder holds its JSON Params metadata (``persistence``'s, with the format
version), the estimator and evaluator in folders of their own (their own writers:
``TFEstimator``, ``Pipeline``, pyspark's evaluators) and the trials' Params pickled
exactly, each Param named by its stage's uid and name (``search.pkl``). A model's holds
the same, plus its best model (``bestModel``) and the trials (``trials.json``).
"""

from __future__ import annotations

import io
import json
import pickle

import cloudpickle
from pyspark.ml.param import Param
from pyspark.ml.util import DefaultParamsReader

from sparktf.ml.persistence import (
    _NOT_JSON,
    _StageReader,
    _StageWriter,
    json_view,
    spark_of,
)
from sparktf.ml.tuning import trials
from sparktf.runtime import storage

OBJECTS = ("estimator", "evaluator")  # saved in folders of their own
PICKLED = ("estimatorParamMaps", "paramDistributions")
SEARCH_FILE, TRIALS_FILE, BEST_MODEL = "search.pkl", "trials.json", "bestModel"
FIXED = ("trial", "params", "epochs", "rungEpochs", "metrics", "stopReason", "best")


# Modules a search saved before sparktf.ml moved into rooms named in its pickles, and where
# they live now
_MOVED = {"sparktf.ml.trials": "sparktf.ml.tuning.trials"}


class _Unpickler(pickle.Unpickler):
    """Unpickles a search's blob, its classes found where they live today."""

    def find_class(self, module: str, name: str):
        return super().find_class(_MOVED.get(module, module), name)


def _loads(data: bytes):
    return _Unpickler(io.BytesIO(data)).load()


def _named(param_map: dict) -> list:
    return [(p.parent, p.name, v) if isinstance(p, Param) else (None, p, v)
            for p, v in param_map.items()]


def _params_of(estimator) -> dict:
    stage, prefix = trials.tuned_stage(estimator)
    return {(p.parent, p.name): p for s in (stage, *prefix) for p in s.params}


def _resolved(named: list, params: dict) -> dict:
    return {params[(uid, name)] if uid is not None else name: v for uid, name, v in named}


class _SearchWriter(_StageWriter):
    leave_out = (*_NOT_JSON, *OBJECTS, *PICKLED)

    def save_artifacts(self, path: str) -> None:
        search = self.instance
        for name in OBJECTS:
            if search.isDefined(name) and search.getOrDefault(name) is not None:
                search.getOrDefault(name).write().save(storage.join(path, name))
        pickled = {name: search.getOrDefault(name) for name in PICKLED if search.isDefined(name)}
        blob = {"estimatorParamMaps": [_named(m) for m in
                                       pickled.get("estimatorParamMaps") or []],
                "paramDistributions": _named(pickled.get("paramDistributions") or {}),
                "set": sorted(pickled)}
        blob.update(self.more())
        storage.write_bytes(storage.join(path, SEARCH_FILE), cloudpickle.dumps(blob))

    def more(self) -> dict:
        return {}


class _SearchReader(_StageReader):
    def load_artifacts(self, instance, path: str) -> None:
        for name in OBJECTS:
            folder = storage.join(path, name)
            if storage.exists(folder):
                instance._set(**{name: DefaultParamsReader.loadParamsInstance(
                    folder, spark_of(self))})
        blob = _loads(storage.read_bytes(storage.join(path, SEARCH_FILE)))
        params = _params_of(instance.getEstimator())
        if "estimatorParamMaps" in blob["set"]:
            instance._set(estimatorParamMaps=[_resolved(m, params)
                                              for m in blob["estimatorParamMaps"]])
        if "paramDistributions" in blob["set"]:
            instance._set(paramDistributions=_resolved(blob["paramDistributions"], params))
        self.more(instance, path, blob, params)

    def more(self, instance, path: str, blob: dict, params: dict) -> None:
        pass


class SearchWriter(_SearchWriter):
    """Writes a ``HalvingSearch``."""


class SearchReader(_SearchReader):
    """Reads a ``HalvingSearch`` saved by ``SearchWriter``."""


class SearchModelWriter(_SearchWriter):
    """Writes a ``HalvingSearchModel``: the search's Params, its best model and trials."""

    def more(self) -> dict:
        return {"bestParams": _named(self.instance.bestParams)}

    def save_artifacts(self, path: str) -> None:
        super().save_artifacts(path)
        model = self.instance
        model.bestModel.write().save(storage.join(path, BEST_MODEL))
        storage.write_bytes(storage.join(path, TRIALS_FILE), json.dumps(
            {"bestTrial": model.bestTrial, "trials": json_view(model.trialRecords)},
            indent=1).encode())


class SearchModelReader(_SearchReader):
    """Reads a ``HalvingSearchModel`` saved by ``SearchModelWriter``."""

    def more(self, instance, path: str, blob: dict, params: dict) -> None:
        instance.bestModel = DefaultParamsReader.loadParamsInstance(
            storage.join(path, BEST_MODEL), spark_of(self))
        instance.bestParams = _resolved(blob["bestParams"], params)
        saved = json.loads(storage.read_bytes(storage.join(path, TRIALS_FILE)))
        instance.bestTrial, instance.trialRecords = saved["bestTrial"], saved["trials"]


def trial_rows(records: list[dict], best: int | None) -> tuple[list, str]:
    """The trials as rows and a DDL schema: the fixed columns, then one per tuned Param
    unless its name is taken: a bigint, double, boolean or string column when every
    trial's value is one, else the value as JSON text."""
    names = list(dict.fromkeys(k for r in records for k in r["params"] if k not in FIXED))
    kinds = {n: _kind([r["params"][n] for r in records if n in r["params"]]) for n in names}
    rows = []
    for r in records:
        params = {k: json.dumps(json_view(v)) for k, v in r["params"].items()}
        own = [_cell(kinds[n], r["params"][n], params[n]) if n in r["params"] else None
               for n in names]
        rows.append((r["trial"], params, r["epochs"], list(r["rungEpochs"]),
                     [float(m) for m in r["metrics"]], r["stopReason"], r["trial"] == best,
                     *own))
    schema = ("trial int, params map<string,string>, epochs int, rungEpochs array<int>, "
              "metrics array<double>, stopReason string, best boolean")
    for n in names:
        schema += f", `{n}` {kinds[n]}"
    return rows, schema


def _kind(values: list) -> str:
    if values and all(isinstance(v, bool) for v in values):
        return "boolean"
    if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "bigint"
    if values and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                      for v in values):
        return "double"
    return "string"  # JSON text, but a plain string as it is


def _cell(kind: str, value, text: str):
    if kind == "double":
        return float(value)
    if kind in ("bigint", "boolean") or isinstance(value, str):
        return value
    return text
