"""``TFModel``: scores DataFrames (and SQL) with a TensorFlow SavedModel."""

from __future__ import annotations

import os
import sys
import tempfile

from pyspark import keyword_only
from pyspark.ml import Model
from pyspark.ml.functions import array_to_vector
from pyspark.ml.util import MLReadable, MLWritable
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sparktf._driver import checks, schema, sessions
from sparktf.errors import InvalidInputError
from sparktf.ml import persistence, udfs
from sparktf.ml.params import _TFModelParams, add_setters, without_none
from sparktf.ml.persistence import TFModelReader, TFModelWriter
from sparktf.runtime import storage, worker_tuning
from sparktf.runtime.scoring import length_groups, saved_models
from sparktf.runtime.scoring.spec import (
    MULTICLASS,
    REGRESSION,
    InputBinding,
    OutputBinding,
    PredictionColumns,
    ScoreSpec,
    per_row_kind,
)
from sparktf.runtime.training.spec import (
    BUILDER_IN_SAVED_MODEL,
    KERAS_FILE,
    KERAS_IN_SAVED_MODEL,
)

MLFLOW_SCHEMES = ("runs:/", "models:/")  # modelPath naming a model sparktf logged to MLflow
_SPARK_TYPES = {"float32": T.FloatType(), "float64": T.DoubleType(), "int32": T.IntegerType(),
                "int64": T.LongType(), "bool": T.BooleanType(), "string": T.StringType()}


@add_setters
class TFModel(Model, _TFModelParams, MLReadable, MLWritable):
    """Scores a DataFrame with a SavedModel: every input column kept, outputs appended.

    Returned by ``TFEstimator.fit``, or built directly for any SavedModel
    (``tf.saved_model.save``, Keras ``model.export``).

    Parameters
    ----------
    modelPath : str
        The SavedModel directory (local path or any URI pyarrow can read), or the MLflow
        address (``runs:/...``, ``models:/...``) of a model sparktf logged.
    inputMapping : dict, optional
        Column -> signature input name. Defaults to ``featuresCol``/``inputCols``
        for a single-input signature.
    outputMapping : dict, optional
        Signature output name -> column. Without it, the signature's single output
        becomes ``predictionCol`` (and ``probabilityCol``/``rawPredictionCol`` for
        classifiers), and each of several outputs the column
        ``<output>_<predictionCol>``.
    signature : str
        Signature to call, ``"serving_default"`` by default.
    batchSize : int
        Rows per signature call (4096 by default).
    padLength : int, optional
        For an input of length ``None``: unset, each row is scored at its own length, as
        alone (rows of equal length share calls); set, rows are padded at the end to this
        length (one call per batch) and a longer row is refused.

    Examples
    --------
    Examples are in :doc:`/getting-started` and the guide's :doc:`/guide/params` page
    (the suite runs them).
    """

    @keyword_only
    def __init__(self, *, modelPath=None, inputMapping=None, outputMapping=None,
                 signature="serving_default", batchSize=4096, featuresCol="features",
                 inputCols=None, predictionCol="prediction", probabilityCol="probability",
                 rawPredictionCol="rawPrediction", useGpu="auto", predictionKind="auto",
                 fromLogits=False, history=None, padLength=None):
        super().__init__()
        self._set(**without_none(self._input_kwargs))

    @keyword_only
    def setParams(self, *, modelPath=None, inputMapping=None, outputMapping=None,
                  signature="serving_default", batchSize=4096, featuresCol="features",
                  inputCols=None, predictionCol="prediction", probabilityCol="probability",
                  rawPredictionCol="rawPrediction", useGpu="auto", predictionKind="auto",
                  fromLogits=False, history=None, padLength=None):
        """Sets the given Params; see the constructor."""
        return self._set(**without_none(self._input_kwargs))

    @classmethod
    def from_keras(cls, model, path: str, *, custom_objects: dict | None = None,
                   **params) -> "TFModel":
        """A ``TFModel`` over a Keras 3 model trained elsewhere: a ``keras.Model`` in memory,
        or the path of its ``.keras`` file (loaded by ``keras.saving.load_model`` with
        ``custom_objects``).

        The model is exported to ``path`` (a folder that must not exist yet; a local path
        or any URI pyarrow can write) as ``TFEstimator.fit`` exports: the SavedModel and its
        serving signature, the ``.keras`` file ``getKerasModel()`` returns, and which inputs
        the model masks, so that sequences score unpadded at their own lengths as for a
        model sparktf fitted. ``predictionKind`` and ``fromLogits`` follow the model's
        compiled loss, as after a fit; ``params`` are ``TFModel``'s Params (the column
        bindings: ``featuresCol``, ``inputCols``, ``inputMapping``, ``outputMapping``...).
        Inside an active MLflow run, the model is logged to it, as a fit's is.

        Examples
        --------
        An example is in the guide's :doc:`/guide/params` page (the suite runs it).
        """
        keras_model = persistence.keras_model(model, custom_objects)
        path = os.fspath(path)
        unknown = sorted(set(params) - {p.name for p in cls().params})
        if unknown:
            raise InvalidInputError(f"TFModel has no Params {unknown}; see TFModel's Params. "
                                    f"Received: {params}")
        if "modelPath" in params:
            raise InvalidInputError(
                "from_keras exports the model to path, which becomes the TFModel's modelPath: "
                f"give no modelPath of your own. Received: modelPath={params['modelPath']!r}")
        if storage.exists(path):
            raise InvalidInputError(
                f"from_keras exports the model to a new folder, and {path!r} exists: give a "
                "path that does not exist yet (the export would replace what is there).")
        kind, from_logits = persistence.export_keras(keras_model, path)
        scorer = cls(modelPath=path, predictionKind=kind, fromLogits=from_logits)
        scorer._set(**params)
        if "mlflow" in sys.modules:  # MLflow is optional: only if the app uses it
            from sparktf.ml import tracking
            tracking.log_imported(scorer)
        return scorer

    def write(self):
        """An ``MLWriter``: Params metadata plus a copy of the SavedModel in the stage folder
        (for a ``runs:/`` or ``models:/`` modelPath, of the SavedModel that address names)."""
        return TFModelWriter(self)

    @classmethod
    def read(cls):
        """An ``MLReader`` for models saved with ``write()``."""
        return TFModelReader(cls)

    def _transform(self, dataset: DataFrame) -> DataFrame:
        session = sessions.Session(dataset.sparkSession)
        spec = self._score_spec(dataset.schema, session)
        fields, vector_columns = self._output_fields(spec)
        for field in fields:
            if field.name in dataset.columns:
                raise InvalidInputError(f"The output column '{field.name}' already exists in "
                                        "the DataFrame; choose another column name.")
        # the last transform's (calls, rows, longest length called) so far: bench/lengths_bench
        self._call_counts = udfs.call_counter(spec, session.sc, dataset.schema)
        with checks.executor_python(session):
            score = udfs.arrow_udf(spec, T.StructType(fields), udfs.pa_struct,
                                   self._call_counts)
            scored = dataset.withColumn(
                _OUTPUTS, score(*[dataset[schema.quoted(b.column)] for b in spec.inputs]))
        columns = [scored[schema.quoted(c)] for c in dataset.columns]
        for field in fields:
            value = scored[_OUTPUTS][field.name]
            if field.name in vector_columns:  # a null row's: null (Spark's conversion fails)
                value = F.when(value.isNotNull(), array_to_vector(value))
            columns.append(value.alias(field.name))
        return scored.select(*columns)

    def udf(self):
        """A column function giving ``predictionCol``'s value (or the single mapped output).

        Usable in the DataFrame API, ``model.udf()("features")``, and in SQL after
        ``spark.udf.register("tf_predict", model.udf())``.
        """
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        session = sessions.Session(active) if active is not None else None
        spec = self._score_spec(None, session)
        if spec.prediction is not None:
            return_type, take = T.DoubleType(), spec.prediction.prediction
        elif len(spec.outputs) == 1 and spec.outputs[0].per_row == "scalar":
            return_type = _SPARK_TYPES.get(spec.outputs[0].dtype, T.DoubleType())
            take = spec.outputs[0].column
        else:
            raise InvalidInputError("udf() returns one value per row: the model needs a single "
                                    "output or an outputMapping with one scalar output.")
        if session is not None:
            checks.app_executor_python(session)
        counter = udfs.call_counter(spec, session.sc if session is not None else None, None)
        return udfs.arrow_udf(spec, return_type,
                              lambda names, arrays: arrays[names.index(take)], counter)

    def getKerasModel(self, custom_objects: dict | None = None):
        """The trained Keras model: the ``.keras`` file its fit exported inside the
        SavedModel (so a saved ``TFModel`` and an MLflow ``runs:/`` or ``models:/`` model
        keep it), loaded by ``keras.saving.load_model``; its ``predict`` gives what
        ``transform`` gives. Custom layers, losses and metrics load as Keras loads them
        (registered with ``keras.saving.register_keras_serializable``, or in
        ``custom_objects``); where Keras cannot (a subclassed model whose class the fit
        took by value), the fit's own ``modelFn``, kept beside it, builds the model and the
        file's weights are loaded into it.

        Only a model ``TFEstimator.fit`` made has one: a ``TFModel`` built on a bare
        SavedModel raises ``InvalidInputError``."""
        import keras

        saved = self._saved_model_path()
        found = [uri for uri in (storage.join(saved, KERAS_IN_SAVED_MODEL),
                                 storage.join(storage.parent(saved), KERAS_FILE))
                 if storage.exists(uri)]
        if not found:
            raise InvalidInputError(
                f"This TFModel has no Keras model: only a model that TFEstimator.fit "
                f"returned (or such a model saved and loaded) has one, and its SavedModel "
                f"{self.getModelPath()!r} holds no {KERAS_IN_SAVED_MODEL}. Load the "
                "SavedModel itself with tf.saved_model.load() instead.")
        with tempfile.TemporaryDirectory(prefix="sparktf-keras-") as folder:
            path = persistence.local_file(found[0], os.path.join(folder, KERAS_FILE))
            try:
                return keras.saving.load_model(path, custom_objects=custom_objects)
            except (TypeError, ValueError):
                model = self._built_by_model_fn(saved)
                if model is None:
                    raise
                model.load_weights(path)
                return model

    def _built_by_model_fn(self, saved: str):
        """The fit's model as its ``modelFn`` builds it, its variables made by a call on
        zeros shaped as its inputs; None when the fit kept no ``modelFn``."""
        import cloudpickle
        import tensorflow as tf

        builder = storage.join(saved, BUILDER_IN_SAVED_MODEL)
        if storage.exists(builder):
            model_fn, hparams, inputs = cloudpickle.loads(storage.read_bytes(builder))
            model = model_fn(dict(hparams))
        else:
            return None
        if not model.built:
            def zeros(spec):
                shape = [1 if d is None else d for d in spec.shape]
                return (tf.fill(shape, "") if spec.dtype == tf.string
                        else tf.zeros(shape, spec.dtype))
            model(tf.nest.map_structure(zeros, inputs), training=False)
        return model

    def _saved_model_path(self) -> str:
        """The SavedModel folder modelPath names: an MLflow address resolved (downloaded)."""
        if not self.isDefined(self.modelPath):
            raise InvalidInputError("TFModel needs modelPath: the SavedModel to score with. "
                                    "Received: modelPath unset")
        path = self.getModelPath()
        if path.startswith(MLFLOW_SCHEMES):  # runs:/..., models:/...: MLflow is optional
            from sparktf.ml import tracking
            path = tracking.resolve(path)
        return path

    def _score_spec(self, df_schema: T.StructType | None, session=None) -> ScoreSpec:
        """Bindings of columns to signature inputs and outputs to columns, checked;
        ``session`` (``sessions.Session``) says whether the workers are tuned."""
        path = self._saved_model_path()
        if not storage.exists(path):
            raise InvalidInputError(f"No SavedModel at modelPath={path!r}. Check the path; "
                                    "it must be readable from the driver and every executor.")
        try:
            inputs, outputs = saved_models.describe(path, self.getSignature())
        except KeyError as e:
            raise InvalidInputError(str(e.args[0])) from e
        bindings = self._input_bindings(inputs, df_schema, saved_models.input_names(path))
        spec = dict(model_path=path, signature=self.getSignature(),
                    batch_size=self.getBatchSize(), inputs=bindings, use_gpu=self.getUseGpu(),
                    pad_length=self.getPadLength(),
                    padding=tuple(sorted(saved_models.padding_values(path).items())),
                    worker_tuning=worker_tuning.from_setting(
                        session.setting(worker_tuning.SETTING)) if session else True)
        if self.getOutputMapping() or len(outputs) > 1:
            return ScoreSpec(**spec, outputs=self._output_bindings(outputs))
        if len(outputs) == 1 and next(iter(outputs.values()))[1] == "string":
            (name, (shape, dtype)), = outputs.items()  # e.g. StringLookup(invert=True)
            return ScoreSpec(**spec, outputs=(OutputBinding(
                name, self.getPredictionCol(), per_row_kind(shape), dtype),))
        return ScoreSpec(**spec, prediction=self._prediction_columns(outputs))

    def _input_bindings(self, inputs: dict, df_schema, renamed: dict) -> tuple:
        """``renamed``: signature input -> model input, where the signature could not keep
        the model's name (``saved_models.input_names``)."""
        named = {renamed.get(name, name): name for name in inputs}  # model input -> signature
        # inputMapping may name an input as the model does (größe), or as the signature
        mapping = {column: named.get(name, name)
                   for column, name in self.getInputMapping().items()}
        if not mapping and not self.isSet(self.inputCols) and df_schema is not None and \
                len(inputs) > 1 and set(named) <= set(df_schema.fieldNames()):
            mapping = named  # inputs named after columns
        if not mapping:
            columns = self.featureColumns()
            if len(columns) != len(inputs):
                raise InvalidInputError(
                    f"The signature has inputs {sorted(inputs)} but {len(columns)} feature "
                    f"column(s) {columns} were given; set inputMapping={{column: input}}.")
            mapping = dict(zip(columns, sorted(inputs))) if len(inputs) == 1 else None
            if mapping is None:
                raise InvalidInputError(f"The signature has several inputs {sorted(inputs)}; "
                                        "set inputMapping={column: input_name} to bind them.")
        for column, name in mapping.items():
            if name not in inputs:
                raise InvalidInputError(f"inputMapping names input '{name}' (for column "
                                        f"'{column}'), but the signature's inputs are "
                                        f"{sorted(inputs)}.")
        missing = sorted(set(inputs) - set(mapping.values()))
        if missing:
            raise InvalidInputError(f"The signature's inputs {missing} have no column; add "
                                    "them to inputMapping.")
        if df_schema is not None:
            schema.check_feedable(df_schema, list(mapping), "input")
            for column, name in mapping.items():
                schema.check_against_input(df_schema, column, name, *inputs[name])
        return tuple(InputBinding(c, n, inputs[n][0], inputs[n][1])
                     for c, n in mapping.items())

    def _output_bindings(self, outputs: dict) -> tuple:
        """``outputMapping``'s outputs; unset, every output to '<output>_<predictionCol>'."""
        mapping = self.getOutputMapping() or {
            name: f"{name}_{self.getPredictionCol()}" for name in sorted(outputs)}
        bindings = []
        for name, column in mapping.items():
            if name not in outputs:
                raise InvalidInputError(f"outputMapping names output '{name}', but the "
                                        f"signature's outputs are {sorted(outputs)}.")
            shape, dtype = outputs[name]
            bindings.append(OutputBinding(name, column,
                                                    per_row_kind(shape), dtype))
        return tuple(bindings)

    def _prediction_columns(self, outputs: dict) -> PredictionColumns:
        (name, (shape, _)), = outputs.items()
        if None in tuple(shape):  # its length follows the row's: no prediction per row
            length_groups.refuse_prediction(name)
        kind = self.getPredictionKind()
        if kind == "auto":
            kind = (MULTICLASS if per_row_kind(shape) == "vector"
                    else REGRESSION)
        classifier = kind != REGRESSION
        return PredictionColumns(
            output_name=name, kind=kind, from_logits=self.getFromLogits(),
            prediction=self.getPredictionCol(),
            probability=self.getProbabilityCol() if classifier else None,
            raw=self.getRawPredictionCol() if classifier else None)

    @staticmethod
    def _output_fields(spec: ScoreSpec):
        fields, vectors = [], []
        for b in spec.outputs:
            base = _SPARK_TYPES.get(b.dtype, T.DoubleType())
            dtype = base if b.per_row == "scalar" else T.ArrayType(base)
            fields.append(T.StructField(b.column, dtype, True))
        p = spec.prediction
        if p is not None:
            fields.append(T.StructField(p.prediction, T.DoubleType(), True))
            for column in (p.probability, p.raw):
                if column:
                    fields.append(T.StructField(column, T.ArrayType(T.DoubleType()), True))
                    vectors.append(column)
        return fields, vectors


_OUTPUTS = "__sparktf_outputs__"
