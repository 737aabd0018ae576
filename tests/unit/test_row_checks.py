"""Row checks made as tasks receive their rows: counts per task, one message for all."""

import math

import pyarrow as pa

from sparktf.runtime.feed.row_checks import RowChecks, problem

CHECKS = RowChecks(("features", "label", "w"), ("label",), "w")


def _counts(*batches):
    counts = CHECKS.counter()
    assert sum(b.num_rows for b in counts.watch(batches)) == sum(b.num_rows for b in batches)
    return counts.as_dict()


def _batch(features, labels, weights):
    return pa.RecordBatch.from_pydict({
        "features": pa.array(features, pa.list_(pa.float64())),
        "label": pa.array(labels, pa.float64()), "w": pa.array(weights, pa.int64())})


def test_problems_are_counted_over_every_batch_and_summed_over_every_task():
    first = _counts(_batch([[1.0], None], [1.0, math.nan], [1, -2]),
                    _batch([[2.0]], [math.inf], [None]))
    second = _counts(_batch([None, [3.0]], [None, 0.5], [0, 3]))
    assert first == {"rows": 3, "nulls": {"features": 1, "label": 0, "w": 1},
                     "nonfinite": {"label": 2}, "bad_weights": 1, "null_flags": 0}
    assert second["nulls"] == {"features": 1, "label": 1, "w": 0}
    assert problem(CHECKS, [first, second]).startswith(
        "Column 'features' has 2 null value(s); sparktf does not train on nulls.")


def test_the_first_problem_in_order_rows_nulls_labels_weights():
    clean = _counts(_batch([[1.0]], [1.0], [1]))
    assert problem(CHECKS, [clean, clean]) is None
    assert "has no rows" in problem(CHECKS, [_counts(), _counts()])
    labels = _counts(_batch([[1.0], [2.0]], [math.nan, -math.inf], [1, 1]))
    assert "label column 'label' has 2 NaN or infinite" in problem(CHECKS, [labels, clean])
    weights = _counts(_batch([[1.0]], [1.0], [-1]))
    assert "weight column 'w' has 1 negative, NaN or infinite" in problem(CHECKS, [weights])


def test_integer_and_vector_labels_are_never_non_finite():
    checks = RowChecks(("label",), ("label",))
    counts = checks.counter()
    counts.add(pa.RecordBatch.from_pydict({"label": pa.array([1, 2, None], pa.int64())}))
    assert counts.as_dict()["nonfinite"] == {"label": 0}
    assert counts.as_dict()["nulls"] == {"label": 1}


def test_nan_or_inf_inside_array_labels_counts_the_rows_that_hold_them():
    """Issue 32: an array<double> label with a NaN trained to a NaN loss."""
    checks = RowChecks(("label",), ("label",))
    counts = checks.counter()
    flat = pa.array([[1.0, math.nan], [2.0], None, [math.inf, math.nan], []],
                    pa.list_(pa.float64()))
    nested = pa.array([[[1.0], [math.nan]], [[2.0]]], pa.list_(pa.list_(pa.float32())))
    fixed = pa.FixedSizeListArray.from_arrays(pa.array([1.0, 2.0, math.inf, 4.0]), 2)
    for labels in (flat, flat.slice(2), nested, fixed, fixed.slice(1)):
        counts.add(pa.RecordBatch.from_pydict({"label": labels}))
    assert counts.as_dict()["nonfinite"] == {"label": 2 + 1 + 1 + 1 + 1}
    message = problem(RowChecks((), ("label",)), [counts.as_dict()])
    assert "label column 'label' has 6 NaN or infinite" in message


def test_an_empty_training_or_validation_side_is_refused_naming_how_rows_were_held_out():
    checks = RowChecks(("features",), ("label",), held_out_by="validationCol='val'")
    clean = _counts(_batch([[1.0], [2.0]], [1.0, 2.0], [1, 1]))
    assert problem(checks, [clean], training_rows=2, validation_rows=0) == (
        "No rows are held out for validation: validationCol='val' selects none of the 2 "
        "rows. Flag some rows, raise validationFraction, or unset it to train without "
        "validation.")
    assert problem(checks, [clean], training_rows=0, validation_rows=2).startswith(
        "No rows are left to train on: validationCol='val' holds out all 2 rows")
    assert problem(checks, [clean], training_rows=1, validation_rows=1) is None
    # without a split nothing is held out, and that is fine
    assert problem(RowChecks(("features",)), [clean], training_rows=2) is None


def test_a_null_validation_flag_is_refused_naming_the_validation_column():
    """Found by review: a null in validationCol was silently taken as a training row."""
    checks = RowChecks(("features",), held_out_by="validationCol='v'", flag="held")
    counts = checks.counter()
    counts.add(pa.RecordBatch.from_pydict({"features": pa.array([1.0, 2.0, 3.0]),
                                           "held": pa.array([True, None, None])}))
    assert counts.as_dict()["null_flags"] == 2
    assert problem(checks, [counts.as_dict()], training_rows=0, validation_rows=1) == (
        "validationCol='v' is null in 2 row(s), so sparktf cannot tell whether they train "
        "or validate. Fill the column (True: validation, False: training) or drop those "
        "rows.")
