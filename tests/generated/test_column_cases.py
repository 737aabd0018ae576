"""Generated columns through Spark: random schemas of docs/guide/columns.md
(values with NaN, +-inf, unicode, empty strings and arrays, int64 extremes, nested and
ragged arrays, sparse vectors, null rows) in a DataFrame over 1-3 tasks, read back by
``ctx.dataset()`` in ``sparktf.run`` and scored by ``transform`` and ``udf()`` (a
SavedModel returning its inputs), against the NumPy reference of
``tests.column_cases``; and every kind that page refuses, refused on the driver with
``InvalidInputError`` before any job. (``tests/unit/test_column_cases.py`` runs the
same columns through the runtime in one process, with a larger budget.)"""

import contextlib
import os
import tempfile

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import sparktf
from sparktf.errors import InvalidInputError
from sparktf.ml import TFModel
from tests import column_cases
from tests.column_cases import read_all
from tests.generated.conftest import budget

pytestmark = pytest.mark.timeout(3600)


def read_columns(names, ctx):
    # read_all itself, not the module: the module's Hypothesis strategies do not pickle
    return read_all(ctx.dataset(batch_size=3), names)


def _spark_value(kind, value):
    if kind.ddl != "vector" or value is None:
        return value
    from pyspark.ml.linalg import Vectors

    if isinstance(value, list):
        return Vectors.dense(value)
    size, entries = value
    return Vectors.sparse(size, dict(entries))


def _frame(spark, chosen, rows, tasks):
    from pyspark.ml.linalg import VectorUDT
    from pyspark.sql import types as T

    fields = [T.StructField("id", T.LongType())]
    for name, kind in zip(column_cases.column_names(chosen), chosen):
        dtype = VectorUDT() if kind.ddl == "vector" else T._parse_datatype_string(kind.ddl)
        fields.append(T.StructField(name, dtype))
    values = [(r[0], *[_spark_value(k, v) for k, v in zip(chosen, r[1:])]) for r in rows]
    return spark.createDataFrame(values, T.StructType(fields)).repartition(tasks)


@settings(max_examples=budget(3, 100))
@given(column_cases.frames(), st.integers(1, 3))
def test_any_columns_reach_ctx_dataset_through_spark(spark, frame, tasks):
    chosen, rows = frame
    names = column_cases.column_names(chosen)
    results = sparktf.run(spark, read_columns, names, numWorkers=tasks,
                          df=_frame(spark, chosen, rows, tasks))
    read = {"rows": {}, "seen": {}}
    for result in results:
        read["rows"].update(result["rows"])
        for name, seen in result["seen"].items():
            read["seen"][name] = sorted({*map(tuple, read["seen"].get(name, [])),
                                         *map(tuple, seen)})
    for name in names:  # a task without rows yields no batch, and sees no tensor
        read["seen"].setdefault(name, [])
    assert column_cases.mismatches(chosen, rows, read) == []


@pytest.mark.parametrize("ddl,value", [
    ("map<string,double>", {"a": 1.0}), ("struct<a:double>", (1.0,)),
    ("date", __import__("datetime").date(2020, 1, 2)),
    ("timestamp", __import__("datetime").datetime(2020, 1, 2, 3, 4)),
    ("array<struct<a:int>>", [(1,)])])
def test_every_refused_kind_is_refused_on_the_driver(spark, ddl, value):
    df = spark.createDataFrame([(0, value)], f"id bigint, c0 {ddl}")
    jobs = spark.sparkContext.statusTracker().getJobIdsForGroup()
    with pytest.raises(InvalidInputError, match="'c0'"):
        sparktf.run(spark, read_columns, ["c0"], numWorkers=1, df=df)
    assert spark.sparkContext.statusTracker().getJobIdsForGroup() == jobs  # no job ran


@contextlib.contextmanager
def _scoring_case(chosen, rows):
    """(model folder, first-input model folder) for these columns, removed after."""
    from tests.generated import scoring_models

    names = column_cases.column_names(chosen)
    inputs = {n: (k.dtype, column_cases.input_shape(k, rows, i))
              for i, (n, k) in enumerate(zip(names, chosen))}
    with tempfile.TemporaryDirectory(prefix="sparktf-test-scoring-") as folder:
        whole, first = os.path.join(folder, "whole"), os.path.join(folder, "first")
        scoring_models.save(whole, inputs)
        scoring_models.save(first, {names[0]: inputs[names[0]]}, first_only=True)
        yield whole, first


@settings(max_examples=budget(2, 60))
@given(column_cases.frames(max_columns=3), st.integers(1, 3), st.booleans())
# found by it: a batch whose rows are all null failed an array output (list_size 0)
@example(([column_cases.Kind("float", "float", column_cases.FLOATS, "float32")], [(0, 0.0)]),
         2, True)
# found by make fuzz: a partition holding only the null row, with a nested-array column
@example(([column_cases.Kind("tinyint", "tinyint", column_cases.FLOATS, "int8"),
           column_cases.Kind("array<array<double>>[3,2]", "array<array<double>>",
                             column_cases.DOUBLES, "float64")],
          [(0, 2, [[1.0, -2.0], [3.0, 4.0], [5.0, 6.0]]), (1, 100, [[0.0, 0.0]] * 3)]),
         2, True)
# found by make fuzz: a null ml Vector (the test's own frame could not hold one)
@example(([column_cases.Kind("vector[1]", "vector", column_cases.FLOATS, "float32")],
          [(0, [0.0])]), 1, True)
def test_any_columns_score_through_transform_and_udf(spark, frame, tasks, null_row):
    chosen, rows = frame
    with _scoring_case(chosen, rows) as (whole, first):
        _score_and_compare(spark, chosen, rows, tasks, null_row, whole, first)


def _score_and_compare(spark, chosen, rows, tasks, null_row, whole, first):
    names = column_cases.column_names(chosen)
    if null_row:  # a null input: its row is kept, with null outputs
        rows = [*rows, (len(rows), None, *rows[0][2:])]
    df = _frame(spark, chosen, rows, tasks)
    model = TFModel(modelPath=whole, inputMapping={n: n for n in names},
                    outputMapping={f"o_{n}": f"p_{n}" for n in names})
    scored = {r["id"]: r for r in model.transform(df).collect()}
    one = TFModel(modelPath=first, inputMapping={names[0]: names[0]}, outputMapping={"y": "y"})
    by_udf = {r["id"]: r["y"] for r in df.select("id", one.udf()(names[0]).alias("y")).collect()}
    wrong = []
    for row in rows:
        for i, (name, kind) in enumerate(zip(names, chosen)):
            length = column_cases.width(kind, rows[:len(rows) - null_row], i) \
                if kind.ragged else None
            want = (None if row[1] is None else
                    column_cases.scored(kind, row[i + 1], length))
            got = scored[row[0]][f"p_{name}"]
            got = list(got) if got is not None and not isinstance(got, float) else \
                (None if got is None else [got])
            if not (got is None and want is None or column_cases.same(got, want)):
                wrong.append(f"transform row {row[0]} {name} ({kind.name}): {got} != {want}")
        want = None if row[1] is None else column_cases.scored(
            chosen[0], row[1], column_cases.width(chosen[0], rows[:len(rows) - null_row], 0)
            if chosen[0].ragged else None)[0]
        got = by_udf[row[0]]
        if not (got is None and want is None or column_cases.same(got, want)):
            wrong.append(f"udf row {row[0]} ({chosen[0].name}): {got} != {want}")
    assert wrong == []
