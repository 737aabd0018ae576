"""``TFEstimator``: trains a Keras model on many Spark executors and returns a ``TFModel``."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import itertools
import logging
import os
import sys
import tempfile
import time
import uuid

from pyspark import keyword_only
from pyspark.ml import Estimator
from pyspark.ml.util import MLReadable, MLWritable
from pyspark.sql import DataFrame

from sparktf import tensorboard
from sparktf._driver import checks, events, failures, launch, pickling, routing, sessions
from sparktf._driver import schema as schema_checks
from sparktf._driver.resources import TaskResources
from sparktf.errors import ClusterCapacityError, InvalidInputError, SparkTFError
from sparktf.ml import fit_checks, metric_modes, parquet_copy, runs
from sparktf.ml.model import TFModel
from sparktf.ml.params import _TFEstimatorParams, add_setters, without_none
from sparktf.ml.persistence import TFEstimatorReader, TFEstimatorWriter
from sparktf.ml.progress import FitProgress, next_label
from sparktf.ml.runs import scratch
from sparktf.runtime import storage, training
from sparktf.runtime.feed.row_checks import RowChecks

logger = logging.getLogger("sparktf")

VALIDATION_FLAG = "__sparktf_validation__"
# whether a fit logs itself to the active MLflow run (a HalvingSearch's trials do not: the
# search logs each as a child run)
LOGS_TO_MLFLOW = contextvars.ContextVar("sparktf_fit_logs_to_mlflow", default=True)


@add_setters
class TFEstimator(Estimator, _TFEstimatorParams, MLReadable, MLWritable):
    """Trains a compiled Keras model with TensorFlow on ``numWorkers`` Spark tasks.

    ``fit`` runs one Spark barrier stage: every task receives its partition as
    Arrow batches, the tasks form a ``MultiWorkerMirroredStrategy`` cluster and
    train in lockstep, and the chief exports the model under ``modelDir``.

    Parameters
    ----------
    modelFn : callable
        ``hparams -> compiled keras.Model``; ``hparams`` holds ``hyperParams`` plus
        ``learningRate``, ``epochs`` and ``batchSize``.
    featuresCol : str
        The input column, of any kind (numbers, strings, binary, arrays, nested arrays,
        ml Vectors).
    inputCols : list of str
        Several input columns for a multi-input model, in the model's input order or
        named after its inputs. With neither set and no ``features`` column, every input
        named after a column is fed from it.
    labelCol : str
        The label column, numeric or an array.
    labelCols : list of str
        Several label columns, one per output of a multi-output model (matched to the
        outputs by name, else in order).
    outputMapping : dict, optional
        Carried to the ``TFModel``: signature output name -> column. Unset, each output of
        a multi-output model goes to the column ``<output>_<predictionCol>``
        (``price_prediction``), so that the model always scores.
    numWorkers, epochs, batchSize, learningRate, hyperParams, ...
        See ``explainParams()``.

    Examples
    --------
    Examples are in :doc:`/getting-started` and the guide's :doc:`/guide/params` page
    (the suite runs them).
    """

    @keyword_only
    def __init__(self, *, modelFn=None, featuresCol="features", inputCols=None,
                 labelCol="label", predictionCol="prediction", probabilityCol="probability",
                 rawPredictionCol="rawPrediction", numWorkers=1, numPs=0, epochs=1,
                 batchSize=32, learningRate=1e-3, hyperParams=None, validationFraction=0.0,
                 validationCol=None, shuffle=True, seed=None, inputMode="stream",
                 modelDir=None, maxRetries=0, useGpu="auto", callbacks=None,
                 stallTimeout=600.0, evaluator=False, tensorboard=False, summarySteps=0,
                 taskCpus=None, taskGpus=None, weightCol=None, classWeight=None, verbose=1,
                 labelCols=None, outputMapping=None, keepBest=None, keepBestMode="auto",
                 runId=None, minWorkers=None):
        super().__init__()
        self._set(**without_none(self._input_kwargs))

    @keyword_only
    def setParams(self, *, modelFn=None, featuresCol="features", inputCols=None,
                  labelCol="label", predictionCol="prediction", probabilityCol="probability",
                  rawPredictionCol="rawPrediction", numWorkers=1, numPs=0, epochs=1,
                  batchSize=32, learningRate=1e-3, hyperParams=None, validationFraction=0.0,
                  validationCol=None, shuffle=True, seed=None, inputMode="stream",
                  modelDir=None, maxRetries=0, useGpu="auto", callbacks=None,
                  stallTimeout=600.0, evaluator=False, tensorboard=False, summarySteps=0,
                  taskCpus=None, taskGpus=None, weightCol=None, classWeight=None,
                  verbose=1, labelCols=None, outputMapping=None, keepBest=None,
                  keepBestMode="auto", runId=None, minWorkers=None):
        """Sets the given Params; see the constructor."""
        return self._set(**without_none(self._input_kwargs))

    def write(self):
        """An ``MLWriter``: JSON Params metadata plus the pickled modelFn and callbacks."""
        return TFEstimatorWriter(self)

    @classmethod
    def read(cls):
        """An ``MLReader`` for estimators saved with ``write()``."""
        return TFEstimatorReader(cls)

    @scratch.removes_its_folder_on_failure
    def _fit(self, dataset: DataFrame) -> TFModel:
        events.log_phase(None, "fit called")
        features = self._feature_columns(dataset.schema)
        fit_checks.check(self, dataset, features)
        keep_best_mode = metric_modes.keep_best_mode(self)  # "auto" decided here, not in a task
        events.log_phase(None, "input checked")
        run_dir = self._run_dir(sessions.Session(dataset.sparkSession).master)
        with contextlib.ExitStack() as stack:
            if self.getRunId() is not None:
                stack.enter_context(runs.owned(run_dir))  # one driver at a time
                finished = runs.begin(run_dir, self)
                if finished is not None:
                    logger.info("sparktf: run %r finished before: its model is returned "
                                "without training again (%s)", self.getRunId(), run_dir)
                    return self._make_model([finished])
            spec = self._train_spec(run_dir, features, dataset.schema, keep_best_mode)
            payload = pickling.pickle_main(training.train_main, spec,
                                           also=[spec.model_fn, *spec.callbacks])
            frame, columns, split = self._training_frame(dataset, features)
            parquet_uri = None
            if self.getInputMode() == "parquet":
                parquet_uri = stack.enter_context(parquet_copy.training_copy(
                    frame, self._parquet_folder(), self.getNumWorkers()))
                frame = None  # the workers read the files themselves
            return self._launch(dataset.sparkSession, payload, run_dir, frame, columns, split,
                                parquet_uri, dataset.schema)

    def _launch(self, spark, payload, run_dir, frame, columns, split, parquet_uri,
                schema) -> TFModel:
        """Runs the training stage, relaunched from the last checkpoint as the failure
        policy allows; ``schema``: the fitted frame's (MLflow's model signature)."""
        resources = TaskResources.checked(self.getTaskCpus(), self.getTaskGpus())
        if self.getTensorboard():
            tensorboard.start(storage.parent(run_dir))
        stage = launch.LaunchSpec(
            payload, self.getNumWorkers(), self.getNumPs(), columns=columns, split_column=split,
            use_gpu=self.getUseGpu(), model_dir=run_dir, what="TFEstimator.fit",
            stall_timeout=self.getStallTimeout(), parquet_uri=parquet_uri,
            evaluator=self.getEvaluator(), resources=resources,
            row_checks=self._row_checks(columns), label=next_label())
        policy = failures.FailurePolicy(self.getMaxRetries())
        # read now: a setting a relaunch cannot use fails this fit before its first job
        wait_s = checks.relaunch_wait_s(sessions.Session(spark))
        for retries in itertools.count():
            progress = FitProgress(self.getVerbose(), label=stage.label)
            try:
                results = launch.launch(spark, stage, frame, on_event=progress)
                model = self._make_model(results)
                if self.getRunId() is not None:  # the history as the model has it
                    runs.finish(run_dir, {**_chief(results), "history": model.getHistory()},
                                self.getEpochs())
                events.log_phase(None, "model made")
                # MLflow is optional: only if the app uses it
                if "mlflow" in sys.modules and LOGS_TO_MLFLOW.get():
                    from sparktf.ml import tracking
                    tracking.log_fit(self, model, schema)
                return model
            except SparkTFError as failure:
                decision = policy.decide(failure, retries)
                if not decision.retry:
                    raise
                stage, workers_said = self._resized(spark, stage, resources, wait_s)
                logger.warning("sparktf: %s: training attempt %d failed (%s): %s. Relaunching "
                               "from the last checkpoint %s (%s).", stage.label, retries + 1,
                               type(failure).__name__, str(failure).splitlines()[0],
                               workers_said, decision.reason)
            finally:
                progress.finish()

    def _resized(self, spark, stage: launch.LaunchSpec, resources, wait_s: float):
        """The relaunch's stage and what to say of its workers: ``numWorkers`` when the
        cluster's task slots hold them, else as many as they hold, not fewer than
        ``minWorkers`` (``batchSize`` stays the global batch: the steps are the same)."""
        wanted, fewest, session = self.getNumWorkers(), self.getMinWorkers(), \
            sessions.Session(spark)
        others = stage.num_tasks - stage.num_workers
        workers, slots = checks.relaunch_workers(session, wanted, fewest, others,
                                                 resources.slots if resources else None,
                                                 wait_s)
        if slots is not None and slots - others < fewest:
            raise ClusterCapacityError(
                f"{stage.what} cannot relaunch: it needs {fewest + others} task slots "
                f"(minWorkers={fewest} workers" +
                (f" and {others} for the other tasks" if others else "") + ") "
                f"and the cluster has {slots} {wait_s:g} s after the attempt failed "
                f"({checks.RELAUNCH_WAIT_CONF}): executors were lost and not replaced. Add "
                "executors, or set minWorkers lower to continue on fewer workers.")
        if workers == wanted:
            said = f"on {workers} worker{'s' * (workers > 1)}"
            if stage.num_workers != wanted:
                said += f", back from {stage.num_workers}: the cluster has the slots again"
        else:
            said = (f"on {workers} of {wanted} workers: the cluster has {slots} task "
                    f"slot{'s' * (slots != 1)} now{_kept_for(stage)} "
                    f"(minWorkers={self.getMinWorkers()})")
        return dataclasses.replace(stage, num_workers=workers), said

    def _feature_columns(self, schema) -> list[str]:
        """The columns fed to the model's inputs: ``inputCols``; else ``featuresCol`` when
        set or present; else every feedable column but the labels, weight and validation
        column (the tasks feed each model input from the column of its name)."""
        if self.isSet(self.inputCols) and self.getInputCols():
            return list(self.getInputCols())
        if self.isSet(self.featuresCol) or self.getFeaturesCol() in schema.fieldNames():
            return [self.getFeaturesCol()]
        others = [*self.labelColumns(), self.getWeightColOrNone(),
                  self.getValidationCol() if self.isSet(self.validationCol) else None]
        found = schema_checks.feedable_columns(schema, [c for c in others if c])
        if not found:
            raise InvalidInputError(
                f"The DataFrame has no '{self.getFeaturesCol()}' column and no other column "
                "to feed. Set featuresCol or inputCols. Received columns: "
                f"{schema.fieldNames()}")
        logger.info("sparktf: no '%s' column and inputCols unset: each model input is fed "
                    "from the column of its name among %s", self.getFeaturesCol(), found)
        return found

    def _row_checks(self, columns: list[str]) -> RowChecks:
        """The checks the tasks make of the rows they receive (nulls, labels, weights)."""
        held_out_by = (f"validationCol={self.getValidationCol()!r}"
                       if self.isSet(self.validationCol) else
                       f"validationFraction={self.getValidationFraction()}"
                       if self.getValidationFraction() > 0 else None)
        return RowChecks(tuple(columns), tuple(self.labelColumns()), self.getWeightColOrNone(),
                         held_out_by, VALIDATION_FLAG if self.isSet(self.validationCol) else None)

    def _run_dir(self, master: str) -> str:
        """This fit's own folder under modelDir: its export and checkpoints.

        Fits sharing a modelDir (CrossValidator, repeated fits) never overwrite
        each other or resume each other's checkpoints; a relaunch of this fit does.
        """
        name = self.getRunId() or f"fit-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        run_dir = storage.join(self._model_dir(master), name)
        logger.info("sparktf: this fit writes its model and checkpoints to %s", run_dir)
        return run_dir

    def _parquet_folder(self) -> str:
        """Where inputMode='parquet' copies go: modelDir/data, or one folder in the temp dir."""
        if self.isSet(self.modelDir):
            return storage.join(self.getModelDir(), "data")
        return os.path.join(tempfile.gettempdir(), "sparktf-parquet-cache")

    def _model_dir(self, master: str) -> str:
        if self.isSet(self.modelDir):
            uri = self.getModelDir()
            try:
                storage.check_writable(uri)
            except (OSError, ValueError) as e:
                raise InvalidInputError(f"modelDir is not writable from the driver: {e}. "
                                        f"Received: modelDir={uri!r}") from e
            return uri
        if not master.startswith("local"):
            raise InvalidInputError(
                "Set modelDir to a location the driver and every executor can reach "
                "(hdfs://, s3a://, a shared mount) on a cluster master. "
                f"Received: modelDir unset with master={master!r}")
        return scratch.model_folder()

    def _train_spec(self, model_dir: str, features: list[str], schema,
                    keep_best_mode: str) -> training.TrainSpec:
        return training.TrainSpec(
            model_fn=self.getModelFn(), hparams=self.hparams(),
            feature_columns=tuple(features), label_columns=tuple(self.labelColumns()),
            spark_types=schema_checks.type_names(schema, features),
            missing_features=(None if self.getFeaturesCol() in schema.fieldNames() or
                              self.isSet(self.inputCols) else self.getFeaturesCol()),
            epochs=self.getEpochs(), batch_size=self.getBatchSize(), model_dir=model_dir,
            shuffle=self.getShuffle(), seed=self.getOrDefault(self.seed) % (2 ** 31),
            has_validation=fit_checks.holds_out_rows(self),
            callbacks=tuple(self.getCallbacks()), evaluator=self.getEvaluator(),
            summary_steps=self.getSummarySteps(), weight_column=self.getWeightColOrNone(),
            keep_best=self.getKeepBest(), keep_best_mode=keep_best_mode,
            class_weight=self.getClassWeight(),
            export_name=runs.export_name(model_dir, self.getEpochs()))

    def _training_frame(self, dataset: DataFrame, features: list[str]):
        """The columns the workers need, plus the validation flag if any, and with
        ``shuffle`` the rows' order made of their values (``routing.content_key``): the
        split and the batches are the same however Spark computes the frame."""
        weight = self.getWeightColOrNone()
        columns = list(dict.fromkeys(features + self.labelColumns() +
                                     ([weight] if weight else [])))
        selected = [schema_checks.column(c) for c in columns]
        seed = self.getOrDefault(self.seed)
        extra = []
        if self.getShuffle() and self.getInputMode() == "stream":
            extra.append(routing.content_key(selected, "order", seed)
                         .alias(routing.ORDER_COLUMN))
        if self.isSet(self.validationCol):
            flag = schema_checks.column(self.getValidationCol()).cast("boolean")
        elif self.getValidationFraction() > 0:
            flag = held_out(selected, seed, self.getValidationFraction())
        else:
            return dataset.select(*selected, *extra), columns, None
        return (dataset.select(*selected, flag.alias(VALIDATION_FLAG), *extra), columns,
                VALIDATION_FLAG)

    def _make_model(self, results: list) -> TFModel:
        chief = _chief(results)
        history = dict(chief["history"])
        for result in results:
            if isinstance(result, dict) and "evaluation" in result:
                evaluated = dict(result["evaluation"])
                epochs = evaluated.pop("epoch", [])
                if len(epochs) != len(history.get("loss", [])):
                    logger.warning("sparktf: the evaluator evaluated epochs %s only",
                                   epochs)
                history.update(evaluated)
        model = TFModel(modelPath=storage.join(chief["export_dir"], training.SAVED_MODEL))
        for param in ("featuresCol", "predictionCol", "probabilityCol", "rawPredictionCol",
                      "useGpu"):
            model._set(**{param: self.getOrDefault(param)})
        for param in ("inputCols", "outputMapping"):
            if self.isSet(param):
                model._set(**{param: self.getOrDefault(param)})
        model._set(history=history, inputMapping=chief["input_mapping"],
                   predictionKind=chief["prediction_kind"], fromLogits=chief["from_logits"],
                   workerTimes=worker_times(chief.get("workers") or []))
        return model


def worker_times(epochs: list[dict]) -> dict:
    """The chief's per-epoch figures of every worker (``step_times.epoch_figures``, with
    ``executors``) as ``TFModel.getWorkerTimes`` has them: a list per key, by epoch."""
    if not epochs:
        return {}
    times = {key: [e[key] for e in epochs]
             for key in ("epoch", "own_seconds", "wait_seconds", "steps")}
    times["executors"] = list(epochs[-1].get("executors") or [])  # the last attempt's
    return times


def held_out(columns, seed: int, fraction: float):
    """Whether ``validationFraction`` holds a row out: a draw made of the row's values
    (``columns``) and ``seed``, the same each time Spark computes the frame."""
    return routing.content_fraction(columns, "validation", seed) < fraction


def _kept_for(stage: launch.LaunchSpec) -> str:
    """What of the slots the tasks that are not workers take (they are not minWorkers'):
    ", 2 of them for the chief and 1 parameter server", or nothing."""
    others = []
    if stage.num_ps:
        others += ["the chief", f"{stage.num_ps} parameter server{'s' * (stage.num_ps > 1)}"]
    if stage.evaluator:
        others.append("the evaluator")
    taken = stage.num_tasks - stage.num_workers
    if not others:
        return ""
    named = " and ".join([", ".join(others[:-1]), others[-1]] if len(others) > 1 else others)
    return f", {taken} of them for {named}"


def _chief(results: list) -> dict:
    """The chief's answer among a fit's task results: export, history, bindings."""
    return next(r for r in results if isinstance(r, dict) and "export_dir" in r)
