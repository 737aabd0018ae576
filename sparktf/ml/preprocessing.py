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

Examples are in the guide's :doc:`/guide/columns` page, "Preprocessing inside the model,
statistics from Spark" (the suite runs them).
"""

from __future__ import annotations

import math
from typing import Any

from pyspark.ml.functions import vector_to_array
from pyspark.ml.linalg import VectorUDT
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sparktf._driver import checks, sessions
from sparktf._driver.schema import column as column_of
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
    """A vocabulary layer; its first ``token_start`` indices are reserved (mask, OOV)."""

    OUTPUT_MODES = ("int", "one_hot", "multi_hot", "count", "tf_idf")

    def __init__(self, max_tokens: int | None = None, **kwargs):
        super().__init__(**({"max_tokens": max_tokens} if max_tokens is not None else {}),
                         **kwargs)
        _check_lookup(self)

    @property
    def output_mode(self) -> str:
        """The output mode, Keras's deprecated names ("binary", "tf-idf") translated."""
        mode = self.argument("output_mode")
        return {"binary": "multi_hot", "tf-idf": "tf_idf"}.get(mode, mode)

    @property
    def token_start(self) -> int:
        """Keras's ``_token_start_index``: the OOV indices, and the mask's index only for
        ``output_mode="int"`` (the other modes drop the mask instead of indexing it)."""
        mask = self.argument("mask_token") is not None and self.output_mode == "int"
        return int(mask) + int(self.argument("num_oov_indices"))

    @property
    def special(self) -> list:
        return [t for t in (self.argument("mask_token"), self.argument("oov_token"))
                if t is not None]


def _check_lookup(spec: _Lookup) -> None:
    """Refuse, before any Spark job, the settings Keras refuses or cannot adapt."""
    max_tokens, mode = spec.argument("max_tokens"), spec.argument("output_mode")
    problems = []
    if spec.output_mode not in spec.OUTPUT_MODES:
        problems.append(f"output_mode in {spec.OUTPUT_MODES}. Received: output_mode={mode!r}")
    elif max_tokens is not None and max_tokens <= 1:
        problems.append(f"max_tokens None or an integer > 1. Received: "
                        f"max_tokens={max_tokens!r}")
    elif int(spec.argument("num_oov_indices")) < 0:
        problems.append(f"num_oov_indices >= 0. Received: "
                        f"num_oov_indices={spec.argument('num_oov_indices')!r}")
    elif max_tokens is not None and max_tokens <= spec.token_start:
        # Keras's adapt would learn nothing (or slice from the end) and its vocabulary
        # could not be set back on a layer
        problems.append(f"max_tokens > the {spec.token_start} reserved indices (mask for "
                        f"'int', OOV), to leave room for learned tokens. Received: "
                        f"max_tokens={max_tokens}, output_mode={mode!r}")
    wrong = {"invert": spec.argument("invert") and spec.output_mode != "int",
             "sparse": spec.argument("sparse") and spec.output_mode == "int",
             "output_sequence_length": (spec.argument("output_sequence_length") is not None
                                        and spec.output_mode != "int"),
             "ragged": spec.argument("ragged") and spec.output_mode != "int"}
    problems += [f"{key} only with output_mode='int' (sparse: only without). Received: "
                 f"{key}={spec.argument(key)!r}, output_mode={mode!r}"
                 for key, bad in wrong.items() if bad]
    if spec.argument("pad_to_max_tokens") and max_tokens is None:
        problems.append("max_tokens set when pad_to_max_tokens=True. Received: "
                        "max_tokens=None")
    fixed = [k for k in ("vocabulary", "idf_weights") if spec.argument(k) is not None]
    if fixed:
        problems.append(f"no vocabulary of its own, since adapt computes it (Keras cannot "
                        f"adapt a layer given one). Received: {fixed}")
    if problems:
        raise InvalidInputError(f"preprocessing.{type(spec).__name__} needs "
                                + "; ".join(problems))


class StringLookup(_Lookup):
    """``keras.layers.StringLookup``: the vocabulary of a string (or array<string>) column."""

    layer = "StringLookup"
    DEFAULTS = {"mask_token": None, "oov_token": "[UNK]", "num_oov_indices": 1,
                "output_mode": "int"}


class IntegerLookup(_Lookup):
    """``keras.layers.IntegerLookup``: the vocabulary of an integer (or array) column."""

    layer = "IntegerLookup"
    DEFAULTS = {"mask_token": None, "oov_token": -1, "num_oov_indices": 1,
                "output_mode": "int"}


class TextVectorization(_Lookup):
    """``keras.layers.TextVectorization``: the vocabulary of a text column after Keras's
    standardization ("lower_and_strip_punctuation", "lower", "strip_punctuation" or None)
    and whitespace split, without ngrams; any ``output_mode`` ("tf_idf" included)."""

    layer = "TextVectorization"
    DEFAULTS = {"mask_token": "", "oov_token": "[UNK]", "num_oov_indices": 1,
                "standardize": "lower_and_strip_punctuation", "split": "whitespace",
                "ngrams": None, "output_mode": "int"}

    def __init__(self, max_tokens: int | None = None, **kwargs):
        super().__init__(max_tokens, **kwargs)
        problems = {k: self.argument(k) for k in ("standardize", "split", "ngrams")
                    if not _supported(k, self.argument(k))}
        # Keras's TextVectorization has a fixed mask ("") and one OOV index
        problems.update({k: v for k, v in kwargs.items()
                         if k in ("mask_token", "oov_token", "num_oov_indices")})
        if problems:
            raise InvalidInputError(
                "preprocessing.TextVectorization computes vocabularies in Spark for the "
                "built-in standardize ('lower_and_strip_punctuation', 'lower', "
                "'strip_punctuation', None), split='whitespace' and no ngrams, with Keras's "
                f"own mask and OOV token. Received: {problems}")


def _supported(name: str, value) -> bool:
    return {"standardize": value in ("lower_and_strip_punctuation", "lower",
                                     "strip_punctuation", None),
            "split": value == "whitespace", "ngrams": value is None}[name]


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
    unknown = {c: s for c, s in layers.items() if not isinstance(s, (Normalization, _Lookup))}
    if unknown:
        raise InvalidInputError(
            "preprocessing.adapt takes Normalization(), StringLookup(), IntegerLookup() "
            f"or TextVectorization() for each column. Received: {unknown}")
    vocabularies = _vocabularies(df, {c: s for c, s in layers.items()
                                      if isinstance(s, _Lookup)})
    state = {}
    for column, spec in layers.items():
        if isinstance(spec, Normalization):
            learned = _moments(df.where(column_of(column).isNotNull()), column)
        else:
            learned = vocabularies[column]
        state[column] = {"layer": spec.layer, "config": {**spec.kwargs, **learned}}
    return state


def _moments(rows: DataFrame, column: str) -> dict:
    """Mean and population variance per position, in one aggregation."""
    dtype = rows.schema[column].dataType
    if isinstance(dtype, VectorUDT):
        values = vector_to_array(column_of(column), "float64")
    elif isinstance(dtype, T.ArrayType):
        values = column_of(column).cast("array<double>")
    else:
        first = rows.agg(F.avg(column_of(column)).alias("m"),
                         F.var_pop(column_of(column)).alias("v")).first()
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


def _token_array(df: DataFrame, column: str, spec: _Lookup):
    """A row's tokens of ``column`` as an array (a scalar's one value), nulls left out (a
    null inner array too), and TextVectorization's empty strings; and a token's type."""
    value = column_of(column)
    dtype = df.select(value).schema[0].dataType
    if isinstance(spec, TextVectorization):
        if not isinstance(dtype, T.StringType):
            raise InvalidInputError(f"preprocessing.TextVectorization needs a string column; "
                                    f"'{column}' is {dtype.simpleString()}.")
        standardize = spec.argument("standardize")
        if standardize in ("lower", "lower_and_strip_punctuation"):
            value = F.translate(value, _ASCII_UPPER, _ASCII_LOWER)  # tf.strings.lower
        if standardize in ("strip_punctuation", "lower_and_strip_punctuation"):
            value = F.regexp_replace(value, KERAS_PUNCTUATION, "")
        # tf.strings.split: ASCII whitespace
        tokens = F.filter(F.split(value, r"\s+"), lambda token: token != "")
    else:
        while isinstance(dtype, T.ArrayType) and isinstance(dtype.elementType, T.ArrayType):
            # a null inner array holds no tokens (Spark's flatten of it would be null)
            value = F.flatten(F.filter(value, lambda inner: inner.isNotNull()))
            dtype = T.ArrayType(dtype.elementType.elementType)
        if not isinstance(dtype, T.ArrayType):
            value = F.array(value)
        tokens = F.filter(value, lambda token: token.isNotNull())
    # the tokens' own type (a collated string is not a plain one: Spark mixes neither)
    return tokens, df.select(tokens).schema[0].dataType.elementType.simpleString()


def _vocabularies(df: DataFrame, specs: dict) -> dict:
    """Column -> ``vocabulary`` (and ``idf_weights`` for "tf_idf"), in one Spark job per
    token type for all the columns: one pass over the rows, each row giving its
    (column, token) occurrences, its number the document they are in."""
    by_type: dict = {}
    for column, spec in specs.items():
        tokens, token_type = _token_array(df, column, spec)
        by_type.setdefault(token_type, []).append(
            F.struct(F.lit(column).alias("column"), tokens.alias("tokens")))
    counted: dict = {column: [] for column in specs}
    for entries in by_type.values():
        occurrences = (
            df.select(F.monotonically_increasing_id().alias("document"),
                      F.explode(F.array(*entries)).alias("entry"))
            .select(F.col("entry.column").alias("column"),
                    F.explode("entry.tokens").alias("token"), "document"))
        for row in _top_counts(occurrences, specs):
            counted[row["column"]].append(row)
    tf_idf = [c for c, s in specs.items() if s.output_mode == "tf_idf"]
    documents = (df.agg(*[F.count(column_of(c)).alias(c) for c in tf_idf]).first().asDict()
                 if tf_idf else {})
    return {column: _vocabulary(column, spec, counted[column], documents.get(column))
            for column, spec in specs.items()}


def _top_counts(tokens: DataFrame, specs: dict) -> list:
    """Per column and token: occurrences and documents (rows), ranked as Keras's
    ``finalize_state`` orders them (count, then token, both descending), only the ranks
    that ``max_tokens`` can keep once the mask and OOV tokens are left out.

    A distributed top-k: each partition of the counts keeps its own first ``max_tokens``
    of each column (``_first_of_each_column``: no shuffle, no window over a whole column
    in one task), and the driver ranks what comes back, at most ``max_tokens`` times the
    partitions a column; a column with no ``max_tokens`` comes back whole (its whole
    vocabulary is the state)."""
    counts = tokens.groupBy("column", "token").agg(
        F.count(F.lit(1)).alias("count"), F.countDistinct("document").alias("documents"))
    limits = {c: s.argument("max_tokens") - s.token_start + len(s.special)
              for c, s in specs.items() if s.argument("max_tokens") is not None}
    if limits:
        with checks.executor_python(sessions.Session(counts.sparkSession)):
            counts = counts.mapInArrow(_first_of_each_column(limits), counts.schema)
    ranked = []
    by_column: dict = {}
    for row in counts.collect():
        by_column.setdefault(row["column"], []).append(row)
    for column, rows in by_column.items():
        rows.sort(key=lambda r: (r["count"], r["token"]), reverse=True)
        rows = rows[:limits[column]] if column in limits else rows
        ranked += [{**r.asDict(), "rank": i + 1} for i, r in enumerate(rows)]
    return ranked


def _first_of_each_column(limits: dict):
    """A ``mapInArrow`` function: a partition's rows of each column in ``limits``, ordered
    as Keras orders a vocabulary, cut to the column's limit; other columns' rows kept."""
    def first(batches):
        import pyarrow as pa

        batches = list(batches)
        if not batches:
            return
        table = pa.Table.from_batches(batches).sort_by(
            [("column", "ascending"), ("count", "descending"), ("token", "descending")])
        columns = table.column("column").to_pylist()
        keep, seen = [], {}
        for i, column in enumerate(columns):
            seen[column] = seen.get(column, 0) + 1
            if column not in limits or seen[column] <= limits[column]:
                keep.append(i)
        yield from table.take(pa.array(keep, pa.int64())).to_batches()

    return first


def _vocabulary(column: str, spec: _Lookup, counted: list, documents: int | None) -> dict:
    """One column's vocabulary from its ranked counts, the mask and OOV tokens left out,
    at most ``max_tokens`` less the reserved indices."""
    special = spec.special
    kept = [r for r in sorted(counted, key=lambda r: r["rank"]) if r["token"] not in special]
    if spec.argument("max_tokens") is not None:
        kept = kept[:spec.argument("max_tokens") - spec.token_start]
    if not kept:
        raise InvalidInputError(f"preprocessing.adapt: column '{column}' has no tokens "
                                f"besides {special} to learn a vocabulary from.")
    vocabulary = {"vocabulary": [row["token"] for row in kept]}
    if spec.output_mode == "tf_idf":
        # Keras's _inverse_document_frequency; a document is a non-null row (empty ones
        # too); set_vocabulary gives the reserved indices the mean weight, as adapt does
        vocabulary["idf_weights"] = [math.log(1 + documents / (1 + row["documents"]))
                                     for row in kept]
    return vocabulary


def layers(state: dict) -> dict:
    """Column -> the ready Keras layer for each entry of ``adapt``'s state (on a worker)."""
    return {column: layer(entry) for column, entry in state.items()}


def layer(entry: dict):
    """One ready Keras layer from an entry of ``adapt``'s state."""
    import keras

    return getattr(keras.layers, entry["layer"])(**entry["config"])
