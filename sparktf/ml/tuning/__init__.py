"""``HalvingSearch``: tuning that stops bad trials early, as a pyspark.ml ``Estimator``.

Asynchronous successive halving (``halving``) over a ``ParamGridBuilder`` grid or
sampled trials: every trial trains ``minEpochs``; as soon as a trial is among the best
1/``reductionFactor`` of those that reached its rung, it continues from its checkpoint
to the next rung (``reductionFactor`` times the epochs, up to ``maxEpochs``); the others
stop there. ``parallelism`` trials train at once, each a ``TFEstimator`` fit of its own
``runId`` (``trials``). The metric is a key of the fits' history (``metric``, e.g.
``val_loss``) or an ``evaluator`` on validation rows held out as ``TrainValidationSplit``
holds them (``trainRatio``, ``seed``). With a ``runId`` the search keeps a journal of its
decisions and a search of the same ``runId`` resumes from it (``journal``), or
grows: fitted again with more ``numTrials`` or a larger ``maxEpochs``, it trains only the
new work. Sampled trials are drawn at random or by Optuna's TPE (``sampler``,
``samplers``); ``maxTime`` bounds the search's wall time; a trial that can no longer be
promoted gives its checkpoints back (``keepTrialCheckpoints``).

The room: this package is the estimator and its model (the public ``sparktf.ml.tuning``);
``params`` the Params they share, ``halving`` the schedule (pure bookkeeping), ``trials``
a trial's Params and fit, ``samplers`` how sampled trials are drawn, ``loop`` the search
on the driver, ``journal`` what a resumed or grown search reads back, ``checks`` what is
refused before any job, ``persistence`` saving and loading, ``tracking`` MLflow. A trial
is a ``TFEstimator`` fit, as a user's; the search also reads a run's room
(``sparktf.ml.runs``), the runtime's storage, checkpoints (a trial's epochs; those it
gives back) and summaries (a vector metric's elements for MLflow), and the driver's
sessions, versions and capacity check. It starts no job of its own and no stage imports it
(import contracts).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
import uuid

from pyspark import keyword_only
from pyspark.ml import Estimator, Model
from pyspark.ml.util import MLReadable, MLWritable
from pyspark.sql import functions as F

from sparktf._driver import checks as driver_checks
from sparktf._driver import sessions
from sparktf.errors import InvalidInputError
from sparktf.ml import runs
from sparktf.ml.params import add_setters, without_none
from sparktf.ml.persistence import json_view
from sparktf.ml.runs import scratch
from sparktf.ml.tuning import checks as search_checks
from sparktf.ml.tuning import halving, samplers, trials
from sparktf.ml.tuning import journal as search_journal
from sparktf.ml.tuning import loop as search_loop
from sparktf.ml.tuning import persistence as search_persistence
from sparktf.ml.tuning.params import HalvingSearchParams
from sparktf.ml.tuning.trials import choice, logUniform, uniform
from sparktf.runtime import storage
from sparktf.runtime.process import cluster

__all__ = ["HalvingSearch", "HalvingSearchModel", "uniform", "logUniform", "choice"]

logger = logging.getLogger("sparktf")


@add_setters
class HalvingSearch(Estimator, HalvingSearchParams, MLReadable, MLWritable):
    """Tunes a ``TFEstimator`` (or a Pipeline ending in one) by asynchronous successive
    halving: bad trials stop after ``minEpochs``, the best continue from their checkpoints.

    Examples
    --------
    Examples are in the guide's :doc:`/guide/tuning` page (the suite runs them).
    """

    @keyword_only
    def __init__(self, *, estimator=None, estimatorParamMaps=None, paramDistributions=None,
                 numTrials=None, evaluator=None, metric="val_loss", metricMode="auto",
                 minEpochs=1, maxEpochs=None, reductionFactor=3, parallelism=None,
                 trainRatio=0.75, seed=0, verbose=1, runId=None, sampler="random",
                 maxTime=None, keepTrialCheckpoints=False):
        super().__init__()
        self._set(**without_none(self._input_kwargs))

    @keyword_only
    def setParams(self, *, estimator=None, estimatorParamMaps=None, paramDistributions=None,
                  numTrials=None, evaluator=None, metric="val_loss", metricMode="auto",
                  minEpochs=1, maxEpochs=None, reductionFactor=3, parallelism=None,
                  trainRatio=0.75, seed=0, verbose=1, runId=None, sampler="random",
                  maxTime=None, keepTrialCheckpoints=False):
        """Sets the given Params; see the constructor."""
        return self._set(**without_none(self._input_kwargs))

    def copy(self, extra=None) -> HalvingSearch:
        """A copy with a copied estimator (and evaluator), as pyspark's tuning copies."""
        that = super().copy(extra)
        if self.isDefined(self.estimator):
            that.setEstimator(self.getEstimator().copy())
        if self.getEvaluator() is not None:
            that.setEvaluator(self.getEvaluator().copy())
        return that

    def write(self):
        return search_persistence.SearchWriter(self)

    @classmethod
    def read(cls):
        return search_persistence.SearchReader(cls)

    def trial_maps(self) -> list[dict]:
        """Each trial's Params: the grid, or ``numTrials`` draws (at random: those a
        model-based sampler's trials are checked with before any job)."""
        stage, prefix = trials.tuned_stage(self.getEstimator())
        grid, dists = self.getEstimatorParamMaps(), self.getParamDistributions()
        if (grid is None) == (dists is None):
            raise InvalidInputError(
                "HalvingSearch needs the trials' Params one way: estimatorParamMaps (a "
                "ParamGridBuilder grid) or paramDistributions with numTrials. Received "
                + ("both" if grid is not None else "neither") + ".")
        if dists is not None:
            if not self.isDefined(self.numTrials):
                raise InvalidInputError("paramDistributions needs numTrials: how many trials "
                                        "to draw.")
            maps = trials.sampled(stage, dists, self.getOrDefault(self.numTrials),
                                  self.getOrDefault(self.seed))
        else:
            maps = [dict(m) for m in grid] or [{}]
        trials.check_maps(maps, stage, prefix)
        return maps

    @scratch.removes_its_folder_on_failure
    def _fit(self, dataset):
        started = time.monotonic()
        if not self.isDefined(self.estimator):
            raise InvalidInputError("HalvingSearch needs estimator: the TFEstimator (or a "
                                    "Pipeline ending in one) to tune.")
        stage, _ = trials.tuned_stage(self.getEstimator())
        maps = self.trial_maps()
        if not self.isDefined(self.maxEpochs) and \
                self.getOrDefault(self.minEpochs) > stage.getEpochs():
            raise InvalidInputError(
                f"minEpochs={self.getOrDefault(self.minEpochs)} is more than maxEpochs, which "
                f"is unset and so the estimator's epochs={stage.getEpochs()}. Set maxEpochs.")
        rungs = halving.rungs(self.getOrDefault(self.minEpochs), self.getMaxEpochs(),
                              self.getOrDefault(self.reductionFactor))
        self._check_budget()
        session = sessions.Session(dataset.sparkSession)
        run_id = self.getRunId()
        if run_id is not None:
            runs.check_name(run_id)
            if not stage.isSet(stage.modelDir):
                raise InvalidInputError(
                    "runId names the search's folder under the estimator's modelDir, where "
                    "it outlives this driver: set modelDir on the estimator as well. "
                    f"Received: runId={run_id!r} with modelDir unset")
        folder = storage.join(stage._model_dir(session.master), run_id or
                              f"search-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}")
        train, validation = self._split(dataset)
        try:
            with contextlib.ExitStack() as stack:
                if run_id is not None:
                    stack.enter_context(runs.owned(folder, "search"))  # one driver at a time
                search, runner = self._search(maps, rungs, folder, train, validation, run_id)
                if self.getMaxTime() is not None:
                    search.deadline = started + self.getMaxTime()
                search.run(self.getParallelism() or self._slots_for(session, stage),
                           dataset.sparkSession)
                best, records = search.result()
                best_model = runner.model(
                    best, search.schedule.rungs[search.schedule.trials[best].rung])
        finally:
            for frame in (train, validation):
                if frame is not dataset and frame is not None:
                    frame.unpersist()
        model = self._copyValues(HalvingSearchModel(
            bestModel=best_model, bestParams=runner.maps[best], trialRecords=records,
            bestTrial=best))
        if "mlflow" in sys.modules:
            from sparktf.ml.tuning import tracking as search_tracking
            search_tracking.log_search(self, model, dataset)
        return model

    def _search(self, maps, rungs, folder, train, validation, run_id):
        """The search's loop over its trials, resumed from its journal if it has a
        ``runId`` and a lost driver wrote one, or grown from a finished search's."""
        stage, _ = trials.tuned_stage(self.getEstimator())
        factor, seed = self.getOrDefault(self.reductionFactor), self.getOrDefault(self.seed)
        drawn = tuple(k for k in self.getParamDistributions() or {} if isinstance(k, str))
        labels = trials.labels(maps, stage, drawn=drawn)
        runner = trials.Trials(self.getEstimator(), maps, folder, train, validation,
                               self.getEvaluator(), self.getOrDefault(self.metric))
        larger_is_better = search_checks.check(self, runner.estimators, rungs, labels)
        sampler, num_trials = None, len(maps)
        if self.getParamDistributions() is not None and \
                self.getOrDefault(self.sampler) == "tpe":  # drawn as they start
            sampler = samplers.TPE(stage, self.getParamDistributions(), seed, num_trials)
            labels = [{} for _ in maps]
            runner = trials.Trials(self.getEstimator(), [None] * num_trials, folder, train,
                                   validation, self.getEvaluator(),
                                   self.getOrDefault(self.metric))
        before = search_journal.asked_before(folder) if run_id is not None else None
        if before is not None:  # a grown search keeps the rungs it has results at
            rungs = halving.extended(before.get("rungs", rungs), rungs, factor)
        order = halving.start_order(seed, before.get("order") if before else None, num_trials)
        metric = self.getOrDefault(self.metric) if self.getEvaluator() is None \
            else self.getEvaluator().getMetricName()
        journal = None if run_id is None else search_journal.Journal(folder, {
            "trials": labels if sampler is None else None, "rungs": rungs,
            "reductionFactor": factor, "order": order, "metric": metric,
            "largerIsBetter": larger_is_better,
            **self._shared_settings(sampler, num_trials)})
        search = search_loop.Search(
            runner, halving.Halving(num_trials, rungs, factor, order), labels, metric,
            larger_is_better, self.getOrDefault(self.verbose), journal, sampler=sampler,
            keep_checkpoints=self.getOrDefault(self.keepTrialCheckpoints))
        return search, runner

    def _check_budget(self) -> None:
        max_time = self.getMaxTime()
        if max_time is not None and not max_time > 0:
            raise InvalidInputError("maxTime is the seconds the search may take: a number "
                                    f"above 0. Received: maxTime={max_time}")
        if self.getOrDefault(self.sampler) == "tpe":
            if self.getParamDistributions() is None:
                raise InvalidInputError(
                    "sampler='tpe' draws trials from paramDistributions, and the search has "
                    "a grid (estimatorParamMaps), whose trials are enumerated: set "
                    "paramDistributions with numTrials, or leave sampler='random'.")

    def _shared_settings(self, sampler, num_trials: int) -> dict:
        """What every trial's fit shares, which a resumed search must share too: the rows'
        split, the evaluator, the estimator's training Params and model, the Params of a
        Pipeline's earlier stages; a model-based sampler's space and number of trials."""
        stage, prefix = trials.tuned_stage(self.getEstimator())
        shared = {"seed": self.getOrDefault(self.seed)}
        if sampler is not None:
            shared.update(sampler="tpe", numTrials=num_trials, space=[
                [getattr(k, "name", k), repr(d)] for k, d in zip(sampler.keys, sampler.dists)])
        evaluator = self.getEvaluator()
        if evaluator is not None:
            shared["trainRatio"] = self.getOrDefault(self.trainRatio)
            shared["evaluator"] = {"class": type(evaluator).__name__, **{
                p.name: json_view(v) for p, v in evaluator.extractParamMap().items()}}
        fit = runs.asked(stage)
        shared.update({f"estimator.{k}": v for k, v in sorted(fit["params"].items())})
        shared["estimator.model"] = fit["model"]
        for i, before in enumerate(prefix):
            shared.update({f"stage {i} {type(before).__name__}.{p.name}": json_view(v)
                           for p, v in before.extractParamMap().items()})
        return shared

    def _split(self, dataset):
        """The rows the trials train on and those the evaluator scores: with an evaluator,
        split as ``TrainValidationSplit`` splits (``rand(seed) >= trainRatio`` validates),
        so that both compare the same rows; else the whole frame (the fits hold out their
        own validation rows)."""
        if self.getEvaluator() is None:
            return dataset, None
        ratio = self.getOrDefault(self.trainRatio)
        if not 0 < ratio < 1:
            raise InvalidInputError(f"trainRatio must be in (0, 1). Received: trainRatio={ratio}")
        rand = self.uid + "_rand"
        df = dataset.select("*", F.rand(self.getOrDefault(self.seed)).alias(rand))
        held = df[rand] >= ratio
        return df.filter(~held).cache(), df.filter(held).cache()

    @staticmethod
    def _slots_for(session, stage) -> int:
        """How many trials the cluster's task slots hold at once."""
        tasks = len(cluster.assign_roles(stage.getNumWorkers(), stage.getNumPs(),
                                         stage.getEvaluator()))
        slots = driver_checks.check_capacity(session, tasks, "HalvingSearch")
        return max(1, slots // tasks)


class HalvingSearchModel(Model, HalvingSearchParams, MLReadable, MLWritable):
    """What a ``HalvingSearch`` found: ``bestModel`` (the best trial's ``TFModel`` or
    ``PipelineModel``, at the highest rung it reached), ``bestParams`` (its param map) and
    ``trials`` (a DataFrame: each trial's Params, epochs trained, metric at each rung, why
    it stopped). ``transform`` scores with ``bestModel``."""

    def __init__(self, bestModel=None, bestParams=None, trialRecords=None, bestTrial=None):
        super().__init__()
        self.bestModel = bestModel
        self.bestParams = dict(bestParams or {})
        self.trialRecords = list(trialRecords or [])
        self.bestTrial = bestTrial

    def _transform(self, dataset):
        return self.bestModel.transform(dataset)

    @property
    def trials(self):
        """The trials as a DataFrame of the active session: ``trial``, ``params`` (name ->
        value as text), ``epochs`` trained, ``rungEpochs`` and ``metrics`` (the metric at
        each rung it reached), ``stopReason``, ``best``."""
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
        return spark.createDataFrame(*search_persistence.trial_rows(self.trialRecords,
                                                                    self.bestTrial))

    def copy(self, extra=None) -> HalvingSearchModel:
        that = HalvingSearchModel(self.bestModel.copy(extra), self.bestParams,
                                  self.trialRecords, self.bestTrial)
        that._resetUid(self.uid)
        return self._copyValues(that, extra)

    def write(self):
        return search_persistence.SearchModelWriter(self)

    @classmethod
    def read(cls):
        return search_persistence.SearchModelReader(cls)

