"""A scoring task's calls: rows carried across Arrow batches into full calls, rows of an
unmasked input of length None grouped by length over the whole partition, a masked
input padded to each call's longest row; outputs in the partition's order, each row's as
the row scored alone.

``SPARKTF_FUZZ=1`` (``make fuzz``) draws 500 partitions instead of make test's 60."""

import os

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparktf.runtime.scoring import batching, inference
from sparktf.runtime.scoring.outputs import output_arrays
from sparktf.runtime.scoring.spec import InputBinding, OutputBinding, ScoreSpec
from tests.budget import examples

FUZZ = os.environ.get("SPARKTF_FUZZ") == "1"


class Recorded:
    """A signature-like function whose score depends on the row's length as fed (padding
    would change it), recording each call's rows and lengths."""

    def __init__(self, pad=None):
        self.calls: list[tuple[int, int]] = []
        self.pad = pad

    def __call__(self, x):
        import tensorflow as tf

        self.calls.append((int(x.shape[0]), int(x.shape[1])))
        values = tf.cast(x, tf.float64)
        if self.pad is None:  # unmasked: every step counts, its length too
            score = tf.reduce_sum(values, axis=1) * 1000.0 + tf.cast(tf.shape(x)[1],
                                                                    tf.float64)
        else:  # masked: steps equal to the padding value are left out
            keep = tf.cast(tf.not_equal(x, self.pad), tf.float64)
            score = tf.reduce_sum(values * keep, axis=1) * 1000.0 + tf.reduce_sum(keep, 1)
        return {"score": score}


def _spec(batch_size: int, padding=()):
    return ScoreSpec("unused", "serving_default", batch_size,
                     (InputBinding("x", "x", (None,), "int64"),),
                     outputs=(OutputBinding("score", "score", "scalar", "float64"),),
                     padding=padding)


def _score(rows_per_batch: list[list], spec: ScoreSpec, fn) -> tuple[list, list[int]]:
    """Each batch's scores as its output column, and the rows of each batch yielded."""
    calls = batching.Calls(fn, spec, "/CPU:0")
    scored, sizes = [], []

    def take():
        for n, valid, values in calls.done():
            names, arrays = output_arrays(n, spec, {"valid": valid,
                                                              "values": values})
            scored.extend(arrays[0].to_pylist())
            sizes.append(n)

    for rows in rows_per_batch:
        batch = pa.RecordBatch.from_arrays([pa.array(rows, pa.list_(pa.int64()))],
                                           names=["x"])
        calls.add(batch, *inference.prepare(spec, batch))
        take()
    calls.finish()
    take()
    return scored, sizes


def _alone(row, pad=None):
    if row is None:
        return None
    if pad is None:
        return sum(row) * 1000.0 + len(row)
    kept = [v for v in row if v != pad]
    return sum(kept) * 1000.0 + len(kept)


def test_rows_of_one_length_are_carried_across_batches_into_full_calls_in_order():
    fn = Recorded()
    batches = [[[i, i] for i in range(start, start + n)]
               for start, n in ((0, 5), (5, 7), (12, 3))]
    scored, sizes = _score(batches, _spec(4), fn)
    assert [rows for rows, _ in fn.calls] == [4, 4, 4, 3]
    assert sizes == [5, 7, 3]
    assert scored == [_alone(r) for b in batches for r in b]


def test_unmasked_rows_are_called_once_per_length_over_the_partition_not_per_batch():
    """Four Arrow batches, each holding every length 1..6: the old per-batch grouping made
    24 calls; the partition makes 6, each at one length, every row scored as alone."""
    fn = Recorded()
    batches = [[list(range(1, n + 1)) for n in (1, 2, 3, 4, 5, 6)] for _ in range(4)]
    scored, sizes = _score(batches, _spec(4096), fn)
    assert sorted(fn.calls) == [(4, n) for n in range(1, 7)]
    assert sizes == [6, 6, 6, 6]
    assert scored == [_alone(r) for b in batches for r in b]


def test_a_masked_input_is_padded_to_each_calls_longest_row_with_its_value():
    """Masking(mask_value=-1): rows of batches of different longest lengths join one call,
    padded with -1 (not 0, which the model would count)."""
    fn = Recorded(pad=-1)
    batches = [[[1, 2], [3]], [[4, 5, 6, 7], [0]], [[8, 0, 9]]]
    scored, _ = _score(batches, _spec(4096, padding=(("x", -1),)), fn)
    assert fn.calls == [(5, 4)]
    assert scored == [_alone(r, -1) for b in batches for r in b]


def test_held_rows_past_the_limit_are_called_at_once(monkeypatch):
    monkeypatch.setattr(batching, "HOLD_BYTES", 20)  # a batch holds 24 bytes
    fn = Recorded()
    batches = [[[1], [1, 2]], [[1], [1, 2]]]
    scored, sizes = _score(batches, _spec(4096), fn)
    assert fn.calls == [(1, 1), (1, 2), (1, 1), (1, 2)]
    assert sizes == [2, 2]
    assert scored == [_alone(r) for b in batches for r in b]


rows = st.one_of(st.none(), st.lists(st.integers(-3, 9), max_size=7))


@settings(max_examples=500 if FUZZ else examples(60), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(st.lists(rows, max_size=9), min_size=1, max_size=6),
       batch_size=st.integers(1, 9), masked=st.booleans(), graph=st.booleans())
def test_any_partition_scores_each_row_as_alone_in_at_most_a_call_per_length(
        batches, batch_size, masked, graph):
    """Row counts (empty batches, all-null ones), batch sizes, lengths (0 included), masked
    or not, eager calls (``Recorded``) or a signature's graph (the last calls looped in one
    graph call): each row's score is its score alone, the outputs add up to the inputs in
    order, and the calls are the full ones plus at most one per distinct length."""
    pad = 0 if masked else None
    fn = _signature(pad) if graph else Recorded(pad=pad)
    spec = _spec(batch_size, padding=(("x", 0),) if masked else ())
    scored, sizes = _score([b for b in batches if b], spec, fn)
    flat = [r for b in batches for r in b]
    assert sizes == [len(b) for b in batches if b]
    assert scored == [_alone(r, pad) for r in flat]
    if graph:
        return  # its calls are not recorded
    valid = [r for r in flat if r is not None]
    assert sum(n for n, _ in fn.calls) == len(valid)
    assert all(n <= batch_size for n, _ in fn.calls)
    lengths = {len(r) for r in valid}
    groups = len(set(batching.bounds(sorted(lengths)).tolist()) if masked
                 else lengths)
    assert len(fn.calls) <= len(valid) // batch_size + groups
    if not masked:
        assert all(length in lengths for _, length in fn.calls)
    elif fn.calls:  # padded to the call's longest row, within its bound
        assert max(length for _, length in fn.calls) <= max(lengths)


def test_masked_rows_are_grouped_by_bounds_a_third_apart():
    # an empty row stays in a group of its own: called as alone, never padded (review)
    assert batching.bounds(np.array([0, 1, 8, 9, 13, 33, 49, 64, 65, 1000])).tolist() == \
        [0, 8, 8, 10, 16, 40, 64, 64, 80, 1024]
    lengths = np.arange(9, 5000)
    assert (batching.bounds(lengths) < lengths * 4 / 3 + 1).all()
    fn = Recorded(pad=0)
    batches = [[[1] * 3, [1] * 30, [1] * 7, [1] * 31]]
    scored, _ = _score(batches, _spec(4096, padding=(("x", 0),)), fn)
    assert sorted(fn.calls) == [(2, 7), (2, 31)]
    assert scored == [_alone(r, 0) for r in batches[0]]


def test_run_model_scores_one_batch_as_the_partition_would():
    fn = Recorded()
    batch = pa.RecordBatch.from_arrays([pa.array([[1, 2], None, [3]])], names=["x"])
    out = inference.run_model(fn, _spec(8), batch)
    assert out["valid"].tolist() == [True, False, True]
    np.testing.assert_array_equal(out["values"]["score"], [_alone([1, 2]), _alone([3])])
    assert sorted(fn.calls) == [(1, 1), (1, 2)]


def _signature(masked_pad=None):
    """A loaded signature's kind of function: ``Recorded``'s score as a graph."""
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int64, name="x")])
    def serve(x):
        values = tf.cast(x, tf.float64)
        if masked_pad is None:
            return {"score": tf.reduce_sum(values, axis=1) * 1000.0
                    + tf.cast(tf.shape(x)[1], tf.float64)}
        keep = tf.cast(tf.not_equal(x, masked_pad), tf.float64)
        return {"score": tf.reduce_sum(values * keep, axis=1) * 1000.0
                + tf.reduce_sum(keep, axis=1)}

    return serve.get_concrete_function()


def test_the_groups_last_calls_are_one_graph_call_giving_what_each_call_gives():
    """A thousand lengths' last calls in one looped graph call: each row's score is its
    score alone, and the loop is traced once per signature."""
    fn = _signature()
    looped = batching._looped(fn)
    assert looped is not None and looped.open == {"x"} and batching._looped(fn) is looped
    rng = np.random.default_rng(0)
    batches = [[rng.integers(0, 9, size=rng.integers(0, 40)).tolist() for _ in range(300)]
               for _ in range(3)]
    scored, sizes = _score(batches, _spec(64), fn)
    assert sizes == [300, 300, 300]
    assert scored == [_alone(r) for b in batches for r in b]


def test_a_per_token_output_is_never_looped():
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float32, name="x")])
    def running(x):
        return {"running": tf.cumsum(x, axis=1)}

    assert batching._looped(running.get_concrete_function()) is None


def test_text_tokens_of_many_lengths_go_through_the_looped_graph_call():
    """Found by the review of issue 46: an unmasked string input's calls were stacked with
    an int 0 as padding, which no tensor of strings takes (every job over text failed)."""
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.string, name="x")])
    def serve(x):
        sizes = tf.cast(tf.reduce_sum(tf.strings.length(x), axis=1), tf.float64)
        return {"score": sizes * 1000.0 + tf.cast(tf.shape(x)[1], tf.float64)}

    fn = serve.get_concrete_function()
    assert batching._looped(fn) is not None
    spec = ScoreSpec("unused", "serving_default", 64, (InputBinding("x", "x", (None,), "string"),),
                     outputs=(OutputBinding("score", "score", "scalar", "float64"),))
    rows = [["ab", "c"], ["xyz"], None, [], ["a"] * 5, ["de", "f", "gh"]]
    calls = batching.Calls(fn, spec, "/CPU:0")
    batch = pa.RecordBatch.from_arrays([pa.array(rows, pa.list_(pa.string()))], names=["x"])
    calls.add(batch, *inference.prepare(spec, batch))
    calls.finish()
    (n, valid, values), = calls.done()
    names, arrays = output_arrays(n, spec, {"valid": valid, "values": values})
    assert arrays[0].to_pylist() == [None if r is None else
                                     sum(map(len, r)) * 1000.0 + len(r) for r in rows]
