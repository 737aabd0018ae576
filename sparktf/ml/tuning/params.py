"""The Params that a ``HalvingSearch`` and the ``HalvingSearchModel`` it fits share: what
is tuned, over which trials, by which metric, on which rungs, at which parallelism, for how
long; their defaults and getters."""

from __future__ import annotations

from pyspark.ml.param import Param, Params, TypeConverters
from pyspark.ml.param.shared import HasSeed

from sparktf.ml.param_values import choice as one_of
from sparktf.ml.param_values import int_at_least, new_param, verbosity
from sparktf.ml.tuning import samplers, trials


class HalvingSearchParams(HasSeed):
    estimator: Param = Param(Params._dummy(), "estimator", "the TFEstimator to tune, or a "
                             "Pipeline whose last stage is one")
    estimatorParamMaps: Param = Param(Params._dummy(), "estimatorParamMaps", "the trials' "
                                      "Params: a ParamGridBuilder grid")
    paramDistributions: Param = Param(Params._dummy(), "paramDistributions", "sampled trials: "
                                      "Param or hyperParams key -> uniform, logUniform, "
                                      "choice (or a list)")
    numTrials: Param = new_param("numTrials", "how many trials to draw from "
                                 "paramDistributions", int_at_least("numTrials", 1))
    evaluator: Param = Param(Params._dummy(), "evaluator", "a pyspark evaluator of each "
                             "trial's model on the held-out rows at each rung (instead of "
                             "metric)")
    metric: Param = new_param("metric", "the key of the fit's history the trials are "
                              "compared by (e.g. 'val_loss'), at each rung's last epoch",
                              TypeConverters.toString)
    metricMode: Param = new_param("metricMode", "'min', 'max', or 'auto' (the direction Keras "
                                  "gives the metric in the model modelFn builds: loss "
                                  "minimised, accuracy maximised...)",
                                  one_of("metricMode", ("auto", "min", "max")))
    minEpochs: Param = new_param("minEpochs", "epochs every trial trains (the first rung)",
                                 int_at_least("minEpochs", 1))
    maxEpochs: Param = new_param("maxEpochs", "epochs of the last rung (unset: the "
                                 "estimator's epochs)", int_at_least("maxEpochs", 1))
    reductionFactor: Param = new_param("reductionFactor", "each rung trains this many times "
                                       "the epochs of the one before, for the best 1/factor "
                                       "of its trials", int_at_least("reductionFactor", 2))
    parallelism: Param = new_param("parallelism", "trials training at once (unset: as many "
                                   "as the cluster's task slots hold)",
                                   int_at_least("parallelism", 1))
    trainRatio: Param = new_param("trainRatio", "with an evaluator: the fraction of rows the "
                                  "trials train on (the rest validate), as TrainValidationSplit",
                                  TypeConverters.toFloat)
    verbose: Param = new_param("verbose", "0: silent; 1 or 2: a line per rung decision",
                               verbosity)
    runId: Param = new_param("runId", "a name for the search's folder under the estimator's "
                             "modelDir: a search of the same runId resumes from its journal "
                             "after its driver was lost, or grows (more numTrials, a larger "
                             "maxEpochs)", TypeConverters.toString)
    sampler: Param = new_param("sampler", "how sampled trials are drawn: 'random' (each from "
                               "paramDistributions up front) or 'tpe' (Optuna's TPE, each as "
                               "it starts, told every result at every rung)",
                               one_of("sampler", samplers.SAMPLERS))
    maxTime: Param = new_param("maxTime", "seconds the search may take: no job starts after "
                               "them, running jobs stop at their last checkpoint, the result "
                               "is the best so far (unset: no limit)", TypeConverters.toFloat)
    keepTrialCheckpoints: Param = new_param("keepTrialCheckpoints", "keep every trial's "
                                            "checkpoints (default: a trial that can no longer "
                                            "be promoted gives them back)",
                                            TypeConverters.toBoolean)

    def __init__(self, *args):
        super().__init__(*args)
        self._setDefault(metric="val_loss", metricMode="auto", minEpochs=1,
                         reductionFactor=3, trainRatio=0.75, verbose=1, seed=0,
                         sampler="random", keepTrialCheckpoints=False)

    def getEstimator(self):
        return self.getOrDefault(self.estimator)

    def getEstimatorParamMaps(self) -> list | None:
        return self.getOrDefault(self.estimatorParamMaps) \
            if self.isDefined(self.estimatorParamMaps) else None

    def getParamDistributions(self) -> dict | None:
        return self.getOrDefault(self.paramDistributions) \
            if self.isDefined(self.paramDistributions) else None

    def getEvaluator(self):
        return self.getOrDefault(self.evaluator) if self.isDefined(self.evaluator) else None

    def getMaxEpochs(self) -> int:
        if self.isDefined(self.maxEpochs):
            return self.getOrDefault(self.maxEpochs)
        return trials.tuned_stage(self.getEstimator())[0].getEpochs()

    def getRunId(self) -> str | None:
        return self.getOrDefault(self.runId) if self.isDefined(self.runId) else None

    def getParallelism(self) -> int | None:
        return self.getOrDefault(self.parallelism) if self.isDefined(self.parallelism) \
            else None

    def getMaxTime(self) -> float | None:
        return self.getOrDefault(self.maxTime) if self.isDefined(self.maxTime) else None

    def getNumTrials(self) -> int | None:
        return self.getOrDefault(self.numTrials) if self.isDefined(self.numTrials) else None

    def getMetric(self) -> str:
        return self.getOrDefault(self.metric)

    def getMetricMode(self) -> str:
        return self.getOrDefault(self.metricMode)

    def getMinEpochs(self) -> int:
        return self.getOrDefault(self.minEpochs)

    def getReductionFactor(self) -> int:
        return self.getOrDefault(self.reductionFactor)

    def getTrainRatio(self) -> float:
        return self.getOrDefault(self.trainRatio)

    def getVerbose(self) -> int:
        return self.getOrDefault(self.verbose)

    def getSampler(self) -> str:
        return self.getOrDefault(self.sampler)

    def getKeepTrialCheckpoints(self) -> bool:
        return self.getOrDefault(self.keepTrialCheckpoints)
