"""The trials of a ``HalvingSearch``: their Params (a grid, or draws from distributions),
and one trial's fit to a rung (``Trials.train``): a ``TFEstimator`` fit of the trial's
own ``runId``, asked for the rung's epochs, so a promoted trial continues from its
checkpoint and trains only the epochs it lacks.

A ``Pipeline`` whose last stage is the ``TFEstimator`` is tuned the same way: the stages
before it are fitted once per setting of their own Params (once for a grid that tunes
only the network) and the trial's model is their models plus its ``TFModel``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import threading
from typing import Any

import numpy as np
from pyspark.ml import Pipeline, PipelineModel
from pyspark.ml.param import Param

from sparktf.errors import InvalidInputError
from sparktf.ml import runs
from sparktf.ml.estimator import LOGS_TO_MLFLOW, TFEstimator
from sparktf.runtime import storage
from sparktf.runtime.training import checkpoint

logger = logging.getLogger("sparktf")

# hparams keys the estimator's own Params fill (TFEstimator.hparams): a hyperParams key of
# one of these names never reaches modelFn
RESERVED = ("learningRate", "epochs", "batchSize")


@dataclasses.dataclass(frozen=True)
class Distribution:
    """What a sampled trial draws for one Param or ``hyperParams`` key: ``uniform``,
    ``logUniform`` or ``choice``."""

    kind: str
    args: tuple

    def draw(self, rng: np.random.Generator):
        if self.kind == "uniform":
            return float(rng.uniform(*self.args))
        if self.kind == "logUniform":
            return float(math.exp(rng.uniform(math.log(self.args[0]), math.log(self.args[1]))))
        return _plain(self.args[int(rng.integers(len(self.args)))])

    def __repr__(self) -> str:
        return f"{self.kind}({', '.join(map(repr, self.args))})"


def uniform(low: float, high: float) -> Distribution:
    """A number drawn uniformly from [low, high)."""
    _check_range("uniform", low, high, positive=False)
    return Distribution("uniform", (float(low), float(high)))


def logUniform(low: float, high: float) -> Distribution:  # noqa: N802 - pyspark's casing
    """A number whose logarithm is drawn uniformly: as likely in [1e-4, 1e-3) as in
    [1e-3, 1e-2) (learning rates)."""
    _check_range("logUniform", low, high, positive=True)
    return Distribution("logUniform", (float(low), float(high)))


def choice(values) -> Distribution:
    """One of ``values`` (a list, tuple, range or 1-d array), each as likely."""
    given = values
    if isinstance(values, (list, tuple, range)) or isinstance(values, np.ndarray) \
            and values.ndim == 1:
        values = tuple(values)
    else:
        values = ()
    if not values:
        raise InvalidInputError("choice takes a non-empty list of values (in an order: a set "
                                f"has none, and the draws follow the seed). Received: {given!r}")
    return Distribution("choice", values)


def _check_range(kind: str, low, high, positive: bool) -> None:
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                  for v in (low, high))
    if not numbers or not low < high or positive and low <= 0:
        raise InvalidInputError(
            f"{kind}(low, high) takes finite numbers with low < high"
            + (" and low > 0" if positive else "") + f". Received: {kind}({low!r}, {high!r})")


def tuned_stage(estimator) -> tuple[TFEstimator, list]:
    """The ``TFEstimator`` to tune and the stages before it (a Pipeline's)."""
    if isinstance(estimator, TFEstimator):
        return estimator, []
    if isinstance(estimator, Pipeline):
        stages = list(estimator.getStages())
        if stages and isinstance(stages[-1], TFEstimator):
            return stages[-1], stages[:-1]
    raise InvalidInputError(
        "HalvingSearch tunes a TFEstimator, or a Pipeline whose last stage is one: a trial "
        "continues from its checkpoint, which only a TFEstimator keeps. Received: "
        f"estimator={type(estimator).__name__}")


def sampled(stage: TFEstimator, distributions: dict, num_trials: int, seed: int) -> list[dict]:
    """``num_trials`` param maps drawn from ``distributions`` ({Param or hyperParams key:
    Distribution or list}); trial i draws in the keys' order from one seeded stream. Each
    map holds every value its trial drew: ``hyperParams`` too when a draw is the
    estimator's own value."""
    for key in distributions:
        if isinstance(key, str):
            _check_key(key)
    dists = {key: dist if isinstance(dist, Distribution) else choice(dist)
             for key, dist in distributions.items()}
    rng = np.random.default_rng(seed)
    base = stage.getHyperParams()
    maps = []
    for _ in range(num_trials):
        drawn: dict = {}
        hyper = dict(base)
        for key, dist in dists.items():
            if isinstance(key, Param):
                drawn[key] = dist.draw(rng)
            else:
                hyper[key] = dist.draw(rng)
        if any(isinstance(key, str) for key in dists):
            drawn[stage.hyperParams] = hyper
        maps.append(drawn)
    return maps


def _check_key(key: str) -> None:
    if key in RESERVED:
        raise InvalidInputError(
            f"{key!r} as a hyperParams key never reaches modelFn: hparams[{key!r}] is the "
            f"estimator's {key} Param. Tune the Param itself (est.{key})"
            + (": or rather not at all, the rungs decide the epochs" if key == "epochs"
               else "") + ".")


def check_maps(maps: list[dict], stage: TFEstimator, prefix: list) -> None:
    """Refuses what the search cannot tune, before any job: ``epochs`` (the rungs decide
    it), ``runId`` and ``modelDir`` (each trial has its own), a Param of no stage."""
    owners = {stage.uid, *(s.uid for s in prefix)}
    for param_map in maps:
        for param in param_map:
            if not isinstance(param, Param) or param.parent not in owners:
                raise InvalidInputError(
                    f"{param!r} is not a Param of the estimator's stages: tune the "
                    "estimator's own Params (est.learningRate), or keys of hyperParams.")
            if param == stage.hyperParams:
                for key in param_map[param]:
                    _check_key(key)
            if param.parent == stage.uid and param.name in ("epochs", "runId", "modelDir"):
                raise InvalidInputError(
                    f"HalvingSearch decides {param.name} for its trials"
                    + (": set minEpochs and maxEpochs instead" if param.name == "epochs"
                       else "") + f". Remove {param.name} from the grid or distributions.")


def labels(maps: list[dict], stage: TFEstimator, drawn: tuple = ()) -> list[dict]:
    """Each trial's Params as people read them: ``{"learningRate": 0.01, "units": 32}``
    (``hyperParams`` keys that differ between trials, and the ``drawn`` ones, as names of
    their own, a trial that sets no ``hyperParams`` showing the estimator's; a Param of a
    Pipeline's earlier stage as ``Stage.name``)."""
    hypers = [m.get(stage.hyperParams, stage.getHyperParams()) for m in maps]
    hyper_keys = sorted((k for k in {k for h in hypers for k in h}
                         if k in drawn or len({json.dumps(_plain(h.get(k)), default=repr)
                                               for h in hypers}) > 1), key=str)
    classes = {}
    for param_map in maps:
        for param in param_map:
            if param.parent != stage.uid:
                classes.setdefault(param.parent.rsplit("_", 1)[0], set()).add(param.parent)
    out = []
    for param_map, hyper in zip(maps, hypers):
        label: dict[str, Any] = {}
        for param, value in param_map.items():
            if param == stage.hyperParams:
                label.update({str(k): _plain(value.get(k)) for k in hyper_keys})
            elif param.parent == stage.uid:
                label[param.name] = _plain(value)
            else:  # Stage.name; the stage's uid where two stages of a class are tuned
                kind = param.parent.rsplit("_", 1)[0]
                owner = kind if len(classes[kind]) == 1 else param.parent
                label[f"{owner}.{param.name}"] = _plain(value)
        if stage.hyperParams not in param_map:
            label.update({str(k): _plain(hyper.get(k)) for k in hyper_keys})
        out.append(label)
    return out


def shown(label: dict) -> str:
    """A trial's label as its lines say it: ``learningRate=0.01, units=32``."""
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in label.items()) or "the estimator's Params"


def _plain(value):
    """A numpy scalar as the Python number it holds; anything else as it is."""
    return value.item() if isinstance(value, np.generic) else value


class Trials:
    """Runs the trials' fits: trial ``i`` is the run ``trial-<i>`` under ``folder``."""

    def __init__(self, estimator, maps: list[dict], folder: str, train, validation=None,
                 evaluator=None, metric: str | None = None):
        self.stage, self.prefix = tuned_stage(estimator)
        self.maps, self.folder = maps, folder
        self.train_rows, self.validation, self.evaluator = train, validation, evaluator
        self.metric = metric
        self.models: dict[int, Any] = {}
        self.histories: dict[int, dict] = {}
        self._prefix_models: dict[str, PipelineModel] = {}
        self._lock = threading.Lock()
        # refuses early; a trial drawn when it starts (sampler="tpe") has none before
        self.estimators = [self._estimator(i) if m is not None else None
                           for i, m in enumerate(maps)]

    def drawn(self, index: int, param_map: dict) -> None:
        """Trial ``index``'s Params, drawn as it starts."""
        self.maps[index] = param_map
        self.estimators[index] = self._estimator(index)

    def run_dir(self, index: int) -> str:
        return storage.join(self.folder, f"trial-{index:03d}")

    def give_back(self, index: int) -> bool:
        """Removes trial ``index``'s checkpoints (its record, history and export stay);
        whether it had any."""
        found = storage.join(self.run_dir(index), checkpoint.CHECKPOINTS)
        if not storage.exists(found):
            return False
        storage.remove_dir(found)
        return True

    def as_far_as_it_got(self, index: int) -> None:
        """Trial ``index``'s history as its last checkpoint holds it (its job was cancelled
        at maxTime)."""
        latest = checkpoint.latest(self.run_dir(index))
        if latest and latest.get("history"):
            with self._lock:
                self.histories[index] = latest["history"]

    def _afresh_if_given_back(self, index: int, epochs: int) -> None:
        """A trial whose checkpoints were given back and is now asked for more epochs than
        it trained (an extended search promoted it) trains from the start."""
        run_dir = self.run_dir(index)
        if not storage.exists(storage.join(run_dir, runs.RESULT_FILE)) or \
                checkpoint.latest(run_dir) is not None:
            return
        trained = json.loads(storage.read_bytes(storage.join(run_dir, runs.RESULT_FILE)))
        if trained.get("epochs", epochs) >= epochs:
            return
        logger.info("sparktf: trial %d's checkpoints were given back when it could no longer "
                    "be promoted: it trains from the start to %d epochs", index, epochs)
        storage.remove_dir(run_dir)

    def _estimator(self, index: int) -> TFEstimator:
        own = {p: v for p, v in self.maps[index].items() if p.parent == self.stage.uid}
        return self.stage.copy(own).setRunId(f"trial-{index:03d}") \
            .setModelDir(self.folder).setVerbose(0)

    def _prefix_model(self, index: int) -> PipelineModel | None:
        """The fitted stages before the TFEstimator for this trial's Params (fitted once
        per setting of theirs)."""
        if not self.prefix:
            return None
        own = {p: v for p, v in self.maps[index].items() if p.parent != self.stage.uid}
        key = json.dumps(sorted((p.parent, p.name, repr(v)) for p, v in own.items()))
        with self._lock:
            if key not in self._prefix_models:
                self._prefix_models[key] = Pipeline(stages=self.prefix).copy(own).fit(
                    self.train_rows)
            return self._prefix_models[key]

    def train(self, index: int, epochs: int) -> float:
        """Fits trial ``index`` to ``epochs`` (continuing its run); its metric there. Raises
        what the fit raises (a ``TaskFailedError`` is the trial's own failure)."""
        token = LOGS_TO_MLFLOW.set(False)  # the search logs its trials
        try:
            self._afresh_if_given_back(index, epochs)
            prefix = self._prefix_model(index)
            rows = prefix.transform(self.train_rows) if prefix is not None else self.train_rows
            fitted = self.estimators[index].copy({self.stage.epochs: epochs}).fit(rows)
        finally:
            LOGS_TO_MLFLOW.reset(token)
        model = PipelineModel([*prefix.stages, fitted]) if prefix is not None else fitted
        history = fitted.getHistory()
        with self._lock:
            self.models[index], self.histories[index] = model, history
        if self.evaluator is not None:
            return float(self.evaluator.evaluate(model.transform(self.validation)))
        values = history.get(self.metric)
        if not values:
            raise InvalidInputError(
                f"metric={self.metric!r} is not in the fit's history, which has "
                f"{sorted(history)}: name a key of it (val_ keys need validationFraction or "
                "validationCol on the estimator), or give an evaluator.")
        value = values[min(epochs, len(values)) - 1]
        if isinstance(value, (list, tuple)):
            raise InvalidInputError(
                f"metric={self.metric!r} has a value per element ({value}), and a search "
                "ranks trials by one number: name a scalar metric (F1Score(average="
                "'macro') rather than average=None, say) or give an evaluator.")
        return float(value)

    def model(self, index: int, epochs: int):
        """Trial ``index``'s model at ``epochs``: what its last fit returned, or for a
        search resumed from its journal the finished run's, which a fit returns without
        training."""
        if index not in self.models:
            self.train(index, epochs)
        return self.models[index]

    def stopped(self, index: int) -> bool:
        """Whether a callback of trial ``index``'s fit stopped its run (it trains no more)."""
        latest = checkpoint.latest(storage.join(self.folder,
                                                self.estimators[index].getRunId()))
        return bool(latest and latest.get("stopped"))

    def epochs_trained(self, index: int) -> int:
        history = self.histories.get(index) or {}
        return max((len(v) for k, v in history.items() if k != "best_epoch"), default=0)
