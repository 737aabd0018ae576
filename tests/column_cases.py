"""Generated columns (Hypothesis) drawn from docs/guide/columns.md, with the
values each kind may hold (nulls, NaN, +-inf, unicode, empty strings and arrays, int64
extremes, nested and ragged arrays, sparse vectors), and the NumPy reference of what
``ctx.dataset()`` yields for each row: the same values, as the kind's dtype.

Shared by the unit suite (the runtime's conversion in one process, a large budget) and
the generated suite (the same columns through Spark and ``sparktf.run``).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from hypothesis import strategies as st

INT_RANGES = {"tinyint": (-128, 127), "smallint": (-2 ** 15, 2 ** 15 - 1),
              "int": (-2 ** 31, 2 ** 31 - 1), "bigint": (-2 ** 63, 2 ** 63 - 1)}
INT_DTYPES = {"tinyint": np.int8, "smallint": np.int16, "int": np.int32, "bigint": np.int64}
FLOATS = st.floats(allow_nan=True, allow_infinity=True, width=32)
DOUBLES = st.floats(allow_nan=True, allow_infinity=True)
TEXT = st.text(max_size=6)  # unicode, empty strings included


@dataclasses.dataclass(frozen=True)
class Kind:
    """One column kind: its Spark type, how to draw a row's value, and the row as
    ``ctx.dataset()`` yields it (``expect``)."""

    name: str
    ddl: str  # the Spark type (DDL); "vector" for an ml Vector
    values: st.SearchStrategy
    dtype: str  # the tensor's dtype name
    ragged: bool = False


def _leaf_dtype(leaf: str) -> str:
    return {"int": "int32", "bigint": "int64", "float": "float32", "double": "float64"}[leaf]


@st.composite
def kinds(draw) -> Kind:
    """A kind, with the fixed sizes its rows share drawn once."""
    name = draw(st.sampled_from(["tinyint", "smallint", "int", "bigint", "float", "double",
                                 "boolean", "string", "binary", "array", "ragged array",
                                 "string array", "nested array", "vector"]))
    if name in INT_RANGES:
        low, high = INT_RANGES[name]
        ints = st.one_of(st.integers(low, high), st.sampled_from([low, high, 0]))
        return Kind(name, name, ints, np.dtype(INT_DTYPES[name]).name)
    if name in ("float", "double"):
        return Kind(name, name, FLOATS if name == "float" else DOUBLES,
                    "float32" if name == "float" else "float64")
    if name == "boolean":
        return Kind(name, name, st.booleans(), "bool")
    if name == "string":
        return Kind(name, name, TEXT, "string")
    if name == "binary":
        return Kind(name, name, st.binary(max_size=6), "string")
    leaf = draw(st.sampled_from(["int", "bigint", "float", "double"]))
    leaves = (st.integers(*INT_RANGES[leaf]) if leaf in INT_RANGES
              else FLOATS if leaf == "float" else DOUBLES)
    if name == "array":
        size = draw(st.integers(1, 4))
        return Kind(f"array<{leaf}>[{size}]", f"array<{leaf}>",
                    st.lists(leaves, min_size=size, max_size=size), _leaf_dtype(leaf))
    if name == "ragged array":
        return Kind(f"array<{leaf}> ragged", f"array<{leaf}>", st.lists(leaves, max_size=4),
                    _leaf_dtype(leaf), ragged=True)
    if name == "string array":
        return Kind(name, "array<string>", st.lists(TEXT, max_size=3), "string", ragged=True)
    if name == "nested array":
        n, m = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        inner = st.lists(DOUBLES, min_size=m, max_size=m)
        return Kind(f"array<array<double>>[{n},{m}]", "array<array<double>>",
                    st.lists(inner, min_size=n, max_size=n), "float64")
    size = draw(st.integers(1, 5))
    dense = st.lists(DOUBLES.filter(math.isfinite), min_size=size, max_size=size)
    sparse = st.dictionaries(st.integers(0, size - 1), DOUBLES.filter(math.isfinite),
                             max_size=size).map(lambda d: (size, d))
    return Kind(f"vector[{size}]", "vector", st.one_of(dense, sparse), "float32")


@st.composite
def frames(draw, max_columns: int = 4, max_rows: int = 12):
    """(kinds, rows): a schema of 1..max_columns kinds and rows of values for it (an
    ``id`` first, the row's index)."""
    chosen = draw(st.lists(kinds(), min_size=1, max_size=max_columns))
    rows = draw(st.lists(st.tuples(*[k.values for k in chosen]), min_size=1,
                         max_size=max_rows))
    return chosen, [(i, *row) for i, row in enumerate(rows)]


def column_names(chosen) -> list[str]:
    return [f"c{i}" for i in range(len(chosen))]


def ddl(chosen) -> str:
    """The frame's Spark schema (vectors as ml Vectors through pyspark)."""
    return ", ".join(["id bigint"] + [f"{n} {'string' if k.ddl == 'vector' else k.ddl}"
                                      for n, k in zip(column_names(chosen), chosen)])


def expect(kind: Kind, value):
    """The row as ``ctx.dataset()`` gives it, as Python values (``tolist`` form)."""
    if kind.ddl == "vector":
        size, entries = (len(value), dict(enumerate(value))) if isinstance(value, list) \
            else value
        dense = np.zeros(size, np.float32)
        for index, v in entries.items():
            dense[index] = v
        return dense.tolist()
    if kind.dtype == "string":
        encode = (lambda s: s.encode("utf-8")) if kind.ddl != "binary" else bytes
        return [encode(v) for v in value] if isinstance(value, list) else encode(value)
    return np.asarray(value, dtype=kind.dtype).tolist()


def same(got, want) -> bool:
    """Equal, NaN equal to NaN, at any depth."""
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(
            same(g, w) for g, w in zip(got, want))
    if isinstance(want, float) and math.isnan(want):
        return isinstance(got, float) and math.isnan(got)
    return got == want and type(got) is type(want)


def read_all(ctx_dataset, names: list[str]) -> dict[str, list]:
    """Every row ``ctx.dataset()`` yields: ``id`` -> {column: value (``tolist`` form)},
    and each column's (tensor kind, dtype)."""
    import tensorflow as tf

    rows, seen = {}, {}
    for batch in ctx_dataset:
        ids = batch["id"].numpy().tolist()
        for name in names:
            value = batch[name]
            ragged = isinstance(value, tf.RaggedTensor)
            seen.setdefault(name, set()).add((ragged, value.dtype.name))
            values = value.to_list() if ragged else value.numpy().tolist()
            for row_id, v in zip(ids, values):
                rows.setdefault(row_id, {})[name] = v
    return {"rows": rows, "seen": {n: sorted(s) for n, s in seen.items()}}


def mismatches(chosen, rows, read: dict) -> list[str]:
    """What ``read`` (from ``read_all``) got wrong against the reference."""
    out = []
    names = column_names(chosen)
    if sorted(read["rows"]) != [r[0] for r in rows]:
        return [f"rows read {sorted(read['rows'])}, expected {len(rows)}"]
    for i, (name, kind) in enumerate(zip(names, chosen)):
        # a length that varies over the rows makes a RaggedTensor, else a dense tensor
        ragged = kind.ragged and len({len(row[i + 1]) for row in rows}) > 1
        if read["seen"][name] != [(ragged, kind.dtype)]:
            out.append(f"{name} ({kind.name}): tensors {read['seen'][name]}, expected "
                       f"{[(ragged, kind.dtype)]}")
    for row in rows:
        for i, (name, kind) in enumerate(zip(names, chosen)):
            got, want = read["rows"][row[0]][name], expect(kind, row[i + 1])
            if not same(got, want):
                out.append(f"row {row[0]} {name} ({kind.name}): got {got!r}, want {want!r}")
    return out


def width(kind: Kind, rows, column: int) -> int:
    """The longest row of a ragged kind (at least 1): the length its model input declares."""
    return max([1, *(len(r[column + 1]) for r in rows)])


def input_shape(kind: Kind, rows, column: int) -> tuple:
    """The row shape a model input declares for this kind (a scalar: ``()``)."""
    if kind.ragged:
        return (width(kind, rows, column),)
    first = expect(kind, rows[0][column + 1])
    return tuple(np.shape(first))


def scored(kind: Kind, value, length: int | None) -> list[float]:
    """What a model returning its input flattened as float64 (a string's byte length)
    gives for this row; a ragged row padded at the end to ``length`` (0, or "")."""
    values = expect(kind, value)
    flat = list(np.ravel(np.asarray(values, dtype=object))) if isinstance(values, list) \
        else [values]
    if length is not None:
        flat += [b"" if kind.dtype == "string" else 0] * (length - len(flat))
    return [float(len(v)) if isinstance(v, bytes) else float(v) for v in flat]
