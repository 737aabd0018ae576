"""The Params of ``TFEstimator`` and ``TFModel``: one place for names, docs and converters.

Converters reject bad values when they are set, with messages in the house
form: what was expected, then ``Received: name=value``.
"""

from __future__ import annotations

import zlib

from pyspark.ml.param import Param, TypeConverters
from pyspark.ml.param.shared import (
    HasFeaturesCol,
    HasInputCols,
    HasLabelCol,
    HasPredictionCol,
    HasProbabilityCol,
    HasRawPredictionCol,
    HasSeed,
    HasWeightCol,
)

from sparktf._driver.resources import task_cpus, task_gpus
from sparktf.ml.param_values import (
    callable_or_none,
    callback_list,
    choice,
    class_weight,
    column_list,
    fraction,
    hyper_params,
    int_at_least,
    location,
    new_param,
    positive_float,
    str_dict,
    verbosity,
)
from sparktf.runtime.gpu import use_gpu_value

INPUT_MODES = ("stream", "parquet")
PREDICTION_KINDS = ("auto", "regression", "binary", "multiclass")
# pyspark's HasSeed default, hash(class name), changes with every Python process unless
# PYTHONHASHSEED is set; the same fit must give the same model in every session
DEFAULT_SEED = zlib.crc32(b"TFEstimator")


class _TFSharedParams(HasFeaturesCol, HasInputCols, HasPredictionCol, HasProbabilityCol,
                      HasRawPredictionCol):
    """Params that the estimator carries to its model."""

    batchSize: Param = new_param("batchSize", "rows per batch: the global training batch for "
                              "TFEstimator, the rows per model call for TFModel",
                              int_at_least("batchSize", 1))
    useGpu: Param = new_param("useGpu", "'auto' (GPUs Spark assigns, else CPU), True (require "
                           "an assigned GPU) or False (CPU only)",
                           use_gpu_value)
    outputMapping: Param = new_param("outputMapping", "dict signature output name -> column; "
                                  "unset, each output of a model with several outputs goes "
                                  "to the column '<output>_<predictionCol>'",
                                  str_dict("outputMapping"))

    def getBatchSize(self) -> int:
        return self.getOrDefault(self.batchSize)

    def getOutputMapping(self) -> dict:
        return dict(self.getOrDefault(self.outputMapping))

    def getUseGpu(self):
        return self.getOrDefault(self.useGpu)

    def featureColumns(self) -> list[str]:
        """``inputCols`` when set, else ``[featuresCol]``."""
        if self.isSet(self.inputCols) and self.getInputCols():
            return list(self.getInputCols())
        return [self.getFeaturesCol()]


class _TFEstimatorParams(_TFSharedParams, HasLabelCol, HasSeed, HasWeightCol):
    """Params of ``TFEstimator``."""

    classWeight: Param = new_param("classWeight", "dict class index -> weight: Keras's "
                                "class_weight (training rows only); not with weightCol",
                                class_weight)

    labelCols: Param = new_param("labelCols", "several label columns for a model with several "
                              "outputs: matched to the outputs by the outputs' names, else "
                              "in order (instead of labelCol)", column_list("labelCols"))

    modelFn: Param = new_param("modelFn", "callable hparams -> compiled keras.Model, called on "
                            "every worker", callable_or_none("modelFn"))
    numWorkers: Param = new_param("numWorkers", "number of TensorFlow workers (barrier tasks)",
                               int_at_least("numWorkers", 1))
    minWorkers: Param = new_param("minWorkers", "fewest workers a relaunch may continue with when "
                               "executors were lost (default: numWorkers); batchSize stays "
                               "the global batch", int_at_least("minWorkers", 1))
    numPs: Param = new_param("numPs", "number of parameter servers; > 0 means asynchronous "
                          "training", int_at_least("numPs", 0))
    epochs: Param = new_param("epochs", "passes over the training data",
                           int_at_least("epochs", 1))
    learningRate: Param = new_param("learningRate", "learning rate, passed to modelFn as "
                                 "hparams['learningRate']", positive_float("learningRate"))
    hyperParams: Param = new_param("hyperParams", "dict passed to modelFn as hparams (with "
                                "learningRate, epochs and batchSize added); saved exactly "
                                "as set", hyper_params)
    validationFraction: Param = new_param("validationFraction", "fraction of rows held out for "
                                       "per-epoch validation metrics (val_*)", fraction)
    validationCol: Param = new_param("validationCol", "boolean column: true rows are held out "
                                  "for validation (instead of validationFraction)",
                                  TypeConverters.toString)
    shuffle: Param = new_param("shuffle", "shuffle the rows every epoch",
                            TypeConverters.toBoolean)
    inputMode: Param = new_param("inputMode", "'stream' (Spark streams Arrow batches into the "
                              "workers) or 'parquet' (workers read a Parquet copy)",
                              choice("inputMode", INPUT_MODES))
    modelDir: Param = new_param("modelDir", "URI every executor and the driver can reach: "
                             "checkpoints, logs, exported model (a relative path: from the "
                             "driver's working directory)", location)
    runId: Param = new_param("runId", "a name for this fit's folder under modelDir: a fit of "
                          "the same runId resumes it from its last checkpoint, or returns "
                          "its model if it finished", TypeConverters.toString)
    maxRetries: Param = new_param("maxRetries", "relaunches of a failed training attempt, "
                               "resuming from the last checkpoint",
                               int_at_least("maxRetries", 0))
    callbacks: Param = new_param("callbacks", "Keras callbacks run on the workers",
                              callback_list)
    evaluator: Param = new_param("evaluator", "add an evaluator task that evaluates each "
                              "checkpoint on the validation rows while training goes on "
                              "(its val_* metrics join the history)", TypeConverters.toBoolean)
    tensorboard: Param = new_param("tensorboard", "start a TensorBoard server on the driver over "
                                "modelDir's logs and print its URL",
                                TypeConverters.toBoolean)
    summarySteps: Param = new_param("summarySteps", "also write the training loss to TensorBoard "
                                 "every this many steps (batch_loss; 0: per epoch only)",
                                 int_at_least("summarySteps", 0))
    taskCpus: Param = new_param("taskCpus", "CPUs each training task asks for (a Spark "
                             "ResourceProfile for the training stage only)",
                             task_cpus)
    taskGpus: Param = new_param("taskGpus", "GPUs each training task asks for (a Spark "
                             "ResourceProfile for the training stage only): a fraction or a "
                             "whole number", task_gpus)
    stallTimeout: Param = new_param("stallTimeout", "seconds a training worker may go without "
                                 "progress (a blocked callback, a collective that never "
                                 "completes) before the attempt is stopped",
                                 positive_float("stallTimeout", "a positive number of seconds"))
    keepBest: Param = new_param("keepBest", "export the epoch with the best value of this "
                             "metric (e.g. 'val_loss'), not the last", TypeConverters.toString)
    keepBestMode: Param = new_param("keepBestMode", "keepBest's better direction, as Keras's "
                                 "monitor: 'min', 'max' or 'auto'",
                                 choice("keepBestMode", ("auto", "min", "max")))
    verbose: Param = new_param("verbose", "progress on the driver, as in Keras: 0 silent, 1 a "
                            "live bar per epoch (Jupyter or a terminal) and one log line per "
                            "epoch, 2 one log line per epoch", verbosity)

    def __init__(self, *args):
        super().__init__(*args)
        self._setDefault(featuresCol="features", labelCol="label", predictionCol="prediction",
                         probabilityCol="probability", rawPredictionCol="rawPrediction",
                         numWorkers=1, numPs=0, epochs=1, batchSize=32, learningRate=1e-3,
                         hyperParams={}, validationFraction=0.0, shuffle=True,
                         inputMode="stream", maxRetries=0, useGpu="auto", callbacks=[],
                         modelFn=None, stallTimeout=600.0, evaluator=False,
                         tensorboard=False, summarySteps=0, seed=DEFAULT_SEED, verbose=1,
                         outputMapping={}, keepBestMode="auto")

    def getModelFn(self):
        return self.getOrDefault(self.modelFn)

    def getNumWorkers(self) -> int:
        return self.getOrDefault(self.numWorkers)

    def getMinWorkers(self) -> int:
        """minWorkers, or numWorkers when unset."""
        if self.isDefined(self.minWorkers):
            return self.getOrDefault(self.minWorkers)
        return self.getNumWorkers()

    def getNumPs(self) -> int:
        return self.getOrDefault(self.numPs)

    def getEpochs(self) -> int:
        return self.getOrDefault(self.epochs)

    def getLearningRate(self) -> float:
        return self.getOrDefault(self.learningRate)

    def getHyperParams(self) -> dict:
        return dict(self.getOrDefault(self.hyperParams))

    def getValidationFraction(self) -> float:
        return self.getOrDefault(self.validationFraction)

    def getValidationCol(self) -> str:
        return self.getOrDefault(self.validationCol)

    def getShuffle(self) -> bool:
        return self.getOrDefault(self.shuffle)

    def getInputMode(self) -> str:
        return self.getOrDefault(self.inputMode)

    def getModelDir(self) -> str:
        return self.getOrDefault(self.modelDir)

    def getRunId(self) -> str | None:
        return self.getOrDefault(self.runId) if self.isDefined(self.runId) else None

    def getMaxRetries(self) -> int:
        return self.getOrDefault(self.maxRetries)

    def getEvaluator(self) -> bool:
        return self.getOrDefault(self.evaluator)

    def getTensorboard(self) -> bool:
        return self.getOrDefault(self.tensorboard)

    def getSummarySteps(self) -> int:
        return self.getOrDefault(self.summarySteps)

    def getTaskCpus(self) -> int | None:
        return self.getOrDefault(self.taskCpus) if self.isDefined(self.taskCpus) else None

    def getTaskGpus(self) -> float | None:
        return self.getOrDefault(self.taskGpus) if self.isDefined(self.taskGpus) else None

    def getKeepBest(self) -> str | None:
        return self.getOrDefault(self.keepBest) if self.isDefined(self.keepBest) else None

    def getKeepBestMode(self) -> str:
        return self.getOrDefault(self.keepBestMode)

    def getCallbacks(self) -> list:
        return list(self.getOrDefault(self.callbacks))

    def getStallTimeout(self) -> float:
        return self.getOrDefault(self.stallTimeout)

    def getVerbose(self) -> int:
        return self.getOrDefault(self.verbose)

    def getClassWeight(self) -> dict | None:
        return dict(self.getOrDefault(self.classWeight)) if self.isSet(self.classWeight) \
            else None

    def getLabelCols(self) -> list[str]:
        return list(self.getOrDefault(self.labelCols))

    def labelColumns(self) -> list[str]:
        """``labelCols`` when set, else ``[labelCol]``."""
        if self.isSet(self.labelCols):
            return self.getLabelCols()
        return [self.getLabelCol()]

    def getWeightColOrNone(self) -> str | None:
        """``weightCol`` when it is set to a column name, else None."""
        return self.getWeightCol() if self.isSet(self.weightCol) and self.getWeightCol() \
            else None

    def hparams(self) -> dict:
        """What ``modelFn`` receives: ``hyperParams`` plus learningRate, epochs, batchSize."""
        return {**self.getHyperParams(), "learningRate": self.getLearningRate(),
                "epochs": self.getEpochs(), "batchSize": self.getBatchSize()}


class _TFModelParams(_TFSharedParams):
    """Params of ``TFModel``."""

    modelPath: Param = new_param("modelPath", "URI of the SavedModel to score with (a "
                              "relative path: from the driver's working directory)", location)
    inputMapping: Param = new_param("inputMapping", "dict column -> signature input name",
                                 str_dict("inputMapping"))
    signature: Param = new_param("signature", "SavedModel signature to call",
                              TypeConverters.toString)
    history: Param = new_param("history", "per-epoch training metrics of a model sparktf "
                            "trained", str_dict("history"))
    workerTimes: Param = new_param(
        "workerTimes", "each worker's own seconds and its seconds waiting for the others in "
        "the gradient all-reduce, per epoch of a model sparktf trained on several workers",
        str_dict("workerTimes"))
    predictionKind: Param = new_param("predictionKind", "how the output becomes predictionCol: "
                                   "'regression', 'binary', 'multiclass' or 'auto' (multiclass "
                                   "when the output has more than one value per row)",
                                   choice("predictionKind", PREDICTION_KINDS))
    fromLogits: Param = new_param("fromLogits", "whether the classifier outputs logits (then "
                               "probabilityCol applies sigmoid/softmax)",
                               TypeConverters.toBoolean)
    padLength: Param = new_param("padLength", "unset: a row of an input of length None is "
                              "scored at its own length; n: such rows are padded at the end to "
                              "n (faster for recurrent models over many distinct lengths)",
                              int_at_least("padLength", 1))

    def __init__(self, *args):
        super().__init__(*args)
        self._setDefault(featuresCol="features", predictionCol="prediction",
                         probabilityCol="probability", rawPredictionCol="rawPrediction",
                         batchSize=4096, useGpu="auto", signature="serving_default",
                         inputMapping={}, outputMapping={}, history={}, workerTimes={},
                         predictionKind="auto", fromLogits=False)

    def getModelPath(self) -> str:
        return self.getOrDefault(self.modelPath)

    def getInputMapping(self) -> dict:
        return dict(self.getOrDefault(self.inputMapping))

    def getSignature(self) -> str:
        return self.getOrDefault(self.signature)

    def getPredictionKind(self) -> str:
        return self.getOrDefault(self.predictionKind)

    def getFromLogits(self) -> bool:
        return self.getOrDefault(self.fromLogits)

    def getPadLength(self) -> int | None:
        return self.getOrDefault(self.padLength) if self.isDefined(self.padLength) else None

    def getHistory(self) -> dict:
        """Per-epoch training metrics, e.g. ``{"loss": [...], "accuracy": [...]}``."""
        return {k: list(v) for k, v in self.getOrDefault(self.history).items()}

    def getWorkerTimes(self) -> dict:
        """Where each worker's time went, epoch by epoch, in a fit on several workers
        (all-reduce): ``epoch`` (1-based), ``own_seconds`` and ``wait_seconds`` (a list
        by worker rank for each epoch: its own work, feeding, steps and callbacks, apart
        from its wait for the others in the gradient all-reduce), ``steps`` and
        ``executors`` (each rank's ``host:port``). Empty for one worker, parameter
        servers and tf_keras models. The driver names a worker whose own time stands
        out (see "Stragglers, named" in the guide's
        training page, docs/guide/training.md)."""
        return {k: (list(v) if isinstance(v, list) else v)
                for k, v in self.getOrDefault(self.workerTimes).items()}


def add_setters(cls):
    """Class decorator: a ``setX`` for every Param ``x`` of ``cls`` that lacks one."""
    for name in dir(cls):
        param = getattr(cls, name, None)
        if not isinstance(param, Param):
            continue
        setter_name = "set" + name[0].upper() + name[1:]
        if hasattr(cls, setter_name):
            continue

        def setter(self, value, _name=name):
            return self._set(**{_name: value})

        setter.__name__ = setter.__qualname__ = setter_name
        setter.__doc__ = f"Sets the value of :py:attr:`{name}`."
        setattr(cls, setter_name, setter)
    return cls


def without_none(kwargs: dict) -> dict:
    """Keyword arguments given to a constructor or ``setParams``, minus those left as None."""
    return {k: v for k, v in kwargs.items() if v is not None}
