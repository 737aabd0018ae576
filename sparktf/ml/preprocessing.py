"""What Keras's preprocessing layers learn with ``adapt()``, computed by Spark over the whole
DataFrame, so the state reaches ``modelFn`` without collecting the data.

Keras keeps preprocessing inside the model (``Normalization``, ``StringLookup``,
``IntegerLookup``, ``TextVectorization``): the SavedModel then takes raw values. Those
layers learn their state with ``adapt()`` on the data, which on Spark does not fit on
the driver. ``adapt`` computes the same state with Spark aggregations (only the
vocabularies, at most ``max_tokens`` each, and the moments come back to the driver) and
returns plain JSON data that ``hyperParams`` carries to every worker (and that saves
with the estimator); ``layers`` / ``layer`` build the ready Keras layers there.

The state equals ``layer.adapt(...)`` on the same rows collected in one process:
means and population variances per position (``Normalization(axis=-1)``), vocabularies
ordered by frequency then by token, both descending, as Keras orders them, without
the mask and OOV tokens, cut to ``max_tokens`` less the reserved indices; for
``TextVectorization`` after its default standardization (ASCII lower case, Keras's
punctuation removed) and whitespace split.

Examples
--------
>>> from sparktf.ml import preprocessing as pp
>>> state = pp.adapt(train_df, {"area": pp.Normalization(),
...                             "city": pp.StringLookup(max_tokens=50),
...                             "review": pp.TextVectorization(max_tokens=5000,
...                                                            output_sequence_length=40)})
...                                                                   # doctest: +SKIP
>>> est = TFEstimator(modelFn=build, hyperParams={"preprocessing": state})   # doctest: +SKIP
>>> def build(hp):                                   # on the workers
...     layers = pp.layers(hp["preprocessing"])      # {"area": Normalization(mean=...), ...}
...     city = layers["city"](keras.Input((1,), dtype="string", name="city"))
"""

from __future__ import annotations

from typing import Any

from pyspark.ml.functions import vector_to_array
from pyspark.ml.linalg import VectorUDT
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sparktf.errors import InvalidInputError

# keras.layers.TextVectorization's default standardize: its punctuation, removed
KERAS_PUNCTUATION = r'[!"#$%&()\*\+,-\./:;<=>?@\[\\\]^_`{|}~\']'
_ASCII_UPPER, _ASCII_LOWER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz"


class _Layer:
    """A preprocessing layer to adapt: its Keras keyword arguments."""

    layer = ""
    DEFAULTS: dict = {}

    def __init__(self, **kwargs):
        self.kwargs = dict(kwargs)

    def argument(self, name: str) -> Any:
        return self.kwargs.get(name, self.DEFAULTS.get(name))

    def __eq__(self, other) -> bool:
        return type(self) is type(other) and self.kwargs == other.kwargs

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items())
        return f"{type(self).__name__}({args})"


class Normalization(_Layer):
    """``keras.layers.Normalization(axis=-1)``: a mean and a (population) variance per
    position of the last axis (one for a numeric column, one per element of an array or
    Vector column). Other keyword arguments go to the layer."""

    layer = "Normalization"

    def __init__(self, **kwargs):
        if kwargs.get("axis", -1) != -1:
            raise InvalidInputError("preprocessing.Normalization computes per-position "
                                    "statistics of the last axis (axis=-1). Received: "
                                    f"axis={kwargs['axis']!r}")
        super().__init__(**kwargs)


class _Lookup(_Layer):
    """A vocabulary layer; ``reserved`` indices (mask, OOV) come before learned tokens."""

    def __init__(self, max_tokens: int | None = None, **kwargs):
        super().__init__(**({"max_tokens": max_tokens} if max_tokens is not None else {}),
                         **kwargs)

    @property
    def reserved(self) -> int:
        return (self.argument("mask_token") is not None) + int(self.argument("num_oov_indices"))

    @property
    def special(self) -> list:
        return [t for t in (self.argument("mask_token"), self.argument("oov_token"))
                if t is not None]


class StringLookup(_Lookup):
    """``keras.layers.StringLookup``: the vocabulary of a string (or array<string>) column."""

    layer = "StringLookup"
    DEFAULTS = {"mask_token": None, "oov_token": "[UNK]", "num_oov_indices": 1}


class IntegerLookup(_Lookup):
    """``keras.layers.IntegerLookup``: the vocabulary of an integer (or array) column."""

    layer = "IntegerLookup"
    DEFAULTS = {"mask_token": None, "oov_token": -1, "num_oov_indices": 1}


class TextVectorization(_Lookup):
    """``keras.layers.TextVectorization``: the vocabulary of a text column after Keras's
    standardization ("lower_and_strip_punctuation", "lower", "strip_punctuation" or None)
    and whitespace split. ``output_mode`` "int", "multi_hot" or "count"."""

    layer = "TextVectorization"
    DEFAULTS = {"mask_token": "", "oov_token": "[UNK]", "num_oov_indices": 1,
                "standardize": "lower_and_strip_punctuation", "split": "whitespace",
                "ngrams": None, "output_mode": "int"}

    def __init__(self, max_tokens: int | None = None, **kwargs):
        super().__init__(max_tokens, **kwargs)
        problems = {k: self.argument(k) for k in ("standardize", "split", "ngrams",
                                                  "output_mode")
                    if not _supported(k, self.argument(k))}
        if problems:
            raise InvalidInputError(
                "preprocessing.TextVectorization computes vocabularies in Spark for the "
                "built-in standardize ('lower_and_strip_punctuation', 'lower', "
                "'strip_punctuation', None), split='whitespace', no ngrams and output_mode "
                f"'int', 'multi_hot' or 'count'. Received: {problems}")


def _supported(name: str, value) -> bool:
    return {"standardize": value in ("lower_and_strip_punctuation", "lower",
                                     "strip_punctuation", None),
            "split": value == "whitespace", "ngrams": value is None,
            "output_mode": value in ("int", "multi_hot", "count")}[name]


def adapt(df: DataFrame, layers: dict) -> dict:
    """The state each layer would learn with ``adapt`` on ``df``'s column of its key.

    Parameters
    ----------
    df : DataFrame
        The training rows (nulls are left out, as a ``df.na.drop`` would).
    layers : dict
        Column -> ``Normalization()``, ``StringLookup(...)``, ``IntegerLookup(...)`` or
        ``TextVectorization(...)`` (with the Keras layer's own arguments).

    Returns
    -------
    dict
        Column -> ``{"layer": Keras class name, "config": keyword arguments}``: JSON data
        for ``hyperParams``; ``layers(state)`` builds the Keras layers from it.
    """
    missing = [c for c in layers if c not in df.columns]
    if missing:
        raise InvalidInputError(f"preprocessing.adapt: no column {missing} in the DataFrame; "
                                f"its columns are {df.columns}.")
    state = {}
    for column, spec in layers.items():
        rows = df.where(F.col(column).isNotNull())
        if isinstance(spec, Normalization):
            config = {**spec.kwargs, **_moments(rows, column)}
            state[column] = {"layer": spec.layer, "config": config}
        elif isinstance(spec, _Lookup):
            config = {**spec.kwargs, "vocabulary": _vocabulary(rows, column, spec)}
            state[column] = {"layer": spec.layer, "config": config}
        else:
            raise InvalidInputError(
                "preprocessing.adapt takes Normalization(), StringLookup(), IntegerLookup() "
                f"or TextVectorization() for each column. Received: {column}={spec!r}")
    return state


def _moments(rows: DataFrame, column: str) -> dict:
    """Mean and population variance per position, in one aggregation."""
    dtype = rows.schema[column].dataType
    if isinstance(dtype, VectorUDT):
        values = vector_to_array(F.col(column), "float64")
    elif isinstance(dtype, T.ArrayType):
        values = F.col(column).cast("array<double>")
    else:
        first = rows.agg(F.avg(column).alias("m"), F.var_pop(column).alias("v")).first()
        return {"mean": _number(first["m"]), "variance": _number(first["v"])}
    width = rows.select(F.size(values).alias("n")).first()
    if width is None:
        raise InvalidInputError(f"preprocessing.adapt: column '{column}' has no rows.")
    n = int(width["n"])
    aggregates = []
    for i in range(n):
        aggregates += [F.avg(values[i]).alias(f"m{i}"), F.var_pop(values[i]).alias(f"v{i}")]
    result = rows.agg(*aggregates).first()
    return {"mean": [_number(result[f"m{i}"]) for i in range(n)],
            "variance": [_number(result[f"v{i}"]) for i in range(n)]}


def _number(value) -> float:
    if value is None:
        raise InvalidInputError("preprocessing.adapt: a column has no non-null rows to "
                                "compute a mean and variance from.")
    return float(value)


def _tokens(rows: DataFrame, column: str, spec: _Lookup):
    """One row per token occurrence."""
    dtype = rows.schema[column].dataType
    value = F.col(column)
    if isinstance(spec, TextVectorization):
        if not isinstance(dtype, T.StringType):
            raise InvalidInputError(f"preprocessing.TextVectorization needs a string column; "
                                    f"'{column}' is {dtype.simpleString()}.")
        standardize = spec.argument("standardize")
        if standardize in ("lower", "lower_and_strip_punctuation"):
            value = F.translate(value, _ASCII_UPPER, _ASCII_LOWER)  # tf.strings.lower
        if standardize in ("strip_punctuation", "lower_and_strip_punctuation"):
            value = F.regexp_replace(value, KERAS_PUNCTUATION, "")
        token = F.explode(F.split(value, r"\s+"))  # tf.strings.split: ASCII whitespace
        return rows.select(token.alias("token")).where(F.col("token") != "")
    while isinstance(dtype, T.ArrayType) and isinstance(dtype.elementType, T.ArrayType):
        value, dtype = F.flatten(value), T.ArrayType(dtype.elementType.elementType)
    if isinstance(dtype, T.ArrayType):
        value = F.explode(value)
    return rows.select(value.alias("token")).where(F.col("token").isNotNull())


def _vocabulary(rows: DataFrame, column: str, spec: _Lookup) -> list:
    """Tokens by count, then by token, both descending (Keras's ``finalize_state``)."""
    counts = _tokens(rows, column, spec).groupBy("token").count()
    special = spec.special
    if special:
        counts = counts.where(~F.col("token").isin(*special))
    ordered = counts.orderBy(F.desc("count"), F.desc("token"))
    max_tokens = spec.argument("max_tokens")
    if max_tokens is not None:
        ordered = ordered.limit(max(0, int(max_tokens) - spec.reserved))
    return [row["token"] for row in ordered.collect()]


def layers(state: dict) -> dict:
    """Column -> the ready Keras layer for each entry of ``adapt``'s state (on a worker)."""
    return {column: layer(entry) for column, entry in state.items()}


def layer(entry: dict):
    """One ready Keras layer from an entry of ``adapt``'s state."""
    import keras

    return getattr(keras.layers, entry["layer"])(**entry["config"])
