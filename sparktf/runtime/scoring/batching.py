"""The signature calls of one scoring task: rows of equal lengths together, over the whole
partition, each call of ``batchSize`` rows but for the last of each length.

How rows are batched never changes a row's outputs beyond float rounding (a row's place
in its call can change the last bit of an output, as in Keras's own ``predict``):
- an input of fixed shape: rows are carried across Arrow batches, so that every call but
  the partition's last has ``batchSize`` rows;
- an input of length ``None`` that the model masks (``ScoreSpec.padding``, found from the
  model at export: ``padding``): rows are grouped by their length rounded up to a bound
  (``bounds``: 8, 10, 12, 16, 20, 24, 32, ..., each at most a third past the one before)
  and each call's rows padded to its longest with the value the mask tells from a step:
  padded steps are masked, the row scores as alone, and a row longer than 8 is padded by
  less than a third of its length (padding every row to the longest of all doubles a
  GRU's work over lengths 1..n);
- an input of length ``None`` that the model does not mask: rows are called at their own
  length, unpadded, in one group per distinct length (``length_groups``). A group is called
  when it holds ``batchSize`` rows, and what is left of each at the partition's end, so a
  partition makes at most one call per distinct length beyond its full ones (unless its
  held rows pass ``HOLD_BYTES``: then every group is called at once, and held again).

Outputs go back in the partition's order: an Arrow batch's outputs are yielded once every
one of its rows is scored (Spark's iterator UDFs only need the outputs, in order, to add
up to the inputs), so a row of a rare length holds back the outputs after it, not their
inputs.
"""

from __future__ import annotations

import collections
import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparktf.runtime.feed import columns
from sparktf.runtime.scoring import length_groups

HOLD_BYTES = 64 << 20  # the inputs held in groups before every group is called
LOOP_ROWS = 16_384  # rows of the groups' last calls made in one graph call, at most


@dataclasses.dataclass
class _Batch:
    """One Arrow batch of the partition: its valid rows (``valid``), how many are still
    to score, and the outputs of those scored, as (row indices among the valid rows,
    outputs) per call."""

    n: int
    valid: np.ndarray
    left: int
    parts: list = dataclasses.field(default_factory=list)

    def values(self) -> dict:
        n = int(self.valid.sum())
        return length_groups.merge(self.parts, n) if self.parts else {}


@dataclasses.dataclass
class _Group:
    """Rows waiting for a call: pieces of (batch, row indices among its valid rows, input
    arrays)."""

    pieces: list = dataclasses.field(default_factory=list)
    rows: int = 0


class Calls:
    """Scores the Arrow batches of one partition with ``fn``: ``add`` each, take the
    scored ones from ``done`` (in order), ``finish`` at the end."""

    def __init__(self, fn, spec, device: str):
        self.fn, self.spec, self.device = fn, spec, device
        self.pads = dict(spec.padding)  # a masked input -> its padding value
        self.batches: collections.deque[_Batch] = collections.deque()
        self.groups: dict[tuple, _Group] = {}
        self.held = 0
        self.calls = self.rows = self.longest = 0

    def add(self, batch: pa.RecordBatch, valid: np.ndarray, arrays: dict, lengths: dict,
            masked: dict) -> None:
        """``arrays``: each input of the batch's valid rows (``model_input``); ``lengths``
        and ``masked``: each row's length, for the inputs of length None the model does not
        mask and those it masks."""
        record = _Batch(batch.num_rows, valid, int(valid.sum()))
        self.batches.append(record)
        if not record.left:
            return
        names = list(lengths) + list(masked)
        keys = {**lengths, **{name: bounds(v) for name, v in masked.items()}}
        for rows, key in _grouped(names, keys):
            part = dict(arrays) if rows is None else {k: v[rows] for k, v in arrays.items()}
            for name, length in zip(names, key):
                if name in masked:  # the group's longest row
                    own = masked[name] if rows is None else masked[name][rows]
                    length = int(own.max()) if len(own) else 0
                else:
                    self.longest = max(self.longest, length)
                part[name] = part[name][:, :length]
            rows = np.arange(record.left) if rows is None else rows
            group = self.groups.setdefault(key, _Group())
            group.pieces.append((record, rows, part))
            group.rows += len(rows)
            self.held += sum(getattr(v, "nbytes", 0) for v in part.values())
            while group.rows >= self.spec.batch_size:
                self._call(group, self.spec.batch_size)
        if self.held > HOLD_BYTES:
            self.finish()

    def finish(self) -> None:
        """Calls every group with what it holds: the groups' last calls together, in one
        graph call that loops over them (``_looped``) where the model's outputs have the
        same shape for every length."""
        last = [self._take(self.groups[key], self.groups[key].rows)
                for key in sorted(self.groups) if self.groups[key].rows]
        self.groups.clear()
        self.held = 0
        looped = _looped(self.fn) if len(last) > 1 else None
        if looped is None:
            for taken, arrays in last:
                self._distribute(taken, self._run(arrays))
            return
        chunk: list = []
        held = 0
        for item in last:
            chunk.append(item)
            held += len(next(iter(item[1].values())))
            if held >= LOOP_ROWS:
                self._run_looped(looped, chunk)
                chunk, held = [], 0
        if chunk:
            self._run_looped(looped, chunk)

    def done(self):
        """The leading batches whose rows are all scored: (rows, valid, outputs) each."""
        while self.batches and not self.batches[0].left:
            record = self.batches.popleft()
            yield record.n, record.valid, record.values()

    def _call(self, group: _Group, size: int) -> None:
        taken, arrays = self._take(group, size)
        self._distribute(taken, self._run(arrays))

    def _take(self, group: _Group, size: int) -> tuple[list, dict]:
        """The group's first ``size`` rows: their pieces, and their inputs joined."""
        taken, count = [], 0
        while count < size:
            record, rows, part = group.pieces[0]
            take = min(size - count, len(rows))
            if take == len(rows):
                group.pieces.pop(0)
            else:
                group.pieces[0] = (record, rows[take:], {k: v[take:] for k, v in part.items()})
                rows, part = rows[:take], {k: v[:take] for k, v in part.items()}
            taken.append((record, rows, part))
            count += take
        group.rows -= count
        self.held -= sum(getattr(v, "nbytes", 0) for _, _, p in taken for v in p.values())
        return taken, {name: _joined([p[name] for _, _, p in taken], self.pads.get(name))
                       for name in taken[0][2]}

    def _distribute(self, taken: list, outputs: dict) -> None:
        """One call's outputs back to the batches its rows came from."""
        start = 0
        for record, rows, _ in taken:
            record.parts.append((rows, {k: v[start:start + len(rows)]
                                        for k, v in outputs.items()}))
            record.left -= len(rows)
            start += len(rows)
        self.calls += 1
        self.rows += start

    def _run_looped(self, looped, chunk: list) -> None:
        """The calls of ``chunk`` ((taken, arrays) each) in one graph call: their inputs
        stacked, each call's padded to the longest (with the padding value of a masked
        input; an unmasked one's padding is cut off again before its call)."""
        import tensorflow as tf

        sizes = [len(next(iter(arrays.values()))) for _, arrays in chunk]
        stacked, widths = {}, {}
        for name in chunk[0][1]:
            parts = [arrays[name] for _, arrays in chunk]
            if name in looped.open:
                widths[name] = tf.constant([p.shape[1] for p in parts], tf.int32)
                width = max(p.shape[1] for p in parts)
                # an unmasked input's padding ("" or 0) is cut off again before its call
                parts = [columns.widen(p, width, self.pads.get(name)) for p in parts]
            stacked[name] = np.concatenate(parts)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int32)
        with tf.device(self.device):
            outputs = looped.run({k: tf.constant(v) for k, v in stacked.items()},
                                 tf.constant(starts), tf.constant(sizes, tf.int32), widths)
            outputs = {k: v.numpy() for k, v in outputs.items()}
        for (taken, _), start, size in zip(chunk, starts, sizes):
            self._distribute(taken, {k: v[start:start + size] for k, v in outputs.items()})

    def _run(self, arrays: dict) -> dict:
        import tensorflow as tf

        with tf.device(self.device):
            inputs = {k: tf.constant(v) for k, v in arrays.items()}
            return {k: v.numpy() for k, v in self.fn(**inputs).items()}


class _Looped:
    """A graph function calling ``fn`` once per call of a stack of calls (a
    ``tf.while_loop``): a call's rows are a slice of the stack, its open-length inputs
    cut to its own width. Dozens of microseconds a call instead of the eager call's
    hundreds (a partition of lengths 1..1,000 makes a thousand small calls)."""

    def __init__(self, fn):
        import tensorflow as tf

        positional, named = fn.structured_input_signature
        specs = {**{v.name: v for v in positional if getattr(v, "name", None)}, **named}
        self.open = {k for k, v in specs.items() if v.shape.rank and v.shape.rank > 1
                     and v.shape[1] is None}
        outputs = fn.structured_outputs

        def run(inputs, starts, sizes, widths):
            arrays = {k: tf.TensorArray(v.dtype, size=tf.size(starts), infer_shape=False,
                                        element_shape=tf.TensorShape([None]) + v.shape[1:])
                      for k, v in outputs.items()}
            for g in tf.range(tf.size(starts)):
                args = {}
                for k, v in inputs.items():
                    x = v[starts[g]:starts[g] + sizes[g]]
                    args[k] = x[:, :widths[k][g]] if k in widths else x
                out = fn(**args)
                arrays = {k: a.write(g, out[k]) for k, a in arrays.items()}
            return {k: a.concat() for k, a in arrays.items()}

        self.run = tf.function(run, reduce_retracing=True)


def _looped(fn) -> _Looped | None:
    """The looped call of ``fn`` (traced once per loaded signature, kept on it, so it goes
    when the model leaves the worker's cache), or None where its outputs' shapes follow
    the length (a per-token output: the calls' outputs cannot be stacked)."""
    found = getattr(fn, "_sparktf_looped", None)
    if found is not None:
        return found
    outputs = getattr(fn, "structured_outputs", None)
    if not isinstance(outputs, dict) or not outputs or any(
            not v.shape[1:].is_fully_defined() for v in outputs.values()):
        return None
    looped = _Looped(fn)
    try:
        fn._sparktf_looped = looped
    except AttributeError:
        pass  # traced again for the next partition
    return looped


def _grouped(names: list[str], lengths: dict):
    """(row indices or None for all, the rows' lengths) per distinct combination."""
    if not names:
        return [(None, ())]
    groups = length_groups.groups([lengths[k] for k in names])
    return [(None, groups[0][1])] if len(groups) == 1 else groups


def _joined(pieces: list, pad) -> np.ndarray:
    """The pieces of one input as one array; a masked input's pieces padded (with ``pad``)
    to the longest's length first."""
    if len(pieces) == 1:
        return pieces[0]
    if pad is not None and len({p.shape[1] for p in pieces}) > 1:
        width = max(p.shape[1] for p in pieces)
        pieces = [columns.widen(p, width, pad) for p in pieces]
    return np.concatenate(pieces)


def row_lengths(column: pa.Array, shape) -> np.ndarray | None:
    """Each row's length for an array column into an input of length None, else None."""
    if not length_groups.open_length(column, shape):
        return None
    return pc.list_value_length(column).to_numpy(zero_copy_only=False)


def bounds(lengths: np.ndarray) -> np.ndarray:
    """Each length rounded up to the next of 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, ...
    (a power of two, or 1.25 or 1.5 times one); 0 stays 0: an empty row is called as it
    would be alone (a model may refuse a sequence of no step), never padded."""
    given = np.asarray(lengths, dtype=np.int64)
    lengths = np.maximum(given, 1)
    power = 2 ** np.floor(np.log2(np.maximum(lengths - 1, 1))).astype(np.int64)
    steps = np.stack([power, power + power // 4, power + power // 2, 2 * power], axis=1)
    steps = np.where(steps >= lengths[:, None], steps, np.iinfo(np.int64).max)
    return np.where(given == 0, 0, np.maximum(steps.min(axis=1), 8))


def fill_padding(values: np.ndarray, lengths: np.ndarray, pad) -> np.ndarray:
    """``values`` (rows padded with zeros past their ``lengths``) padded with ``pad``."""
    if pad == 0 or not len(values) or values.ndim < 2:
        return values
    past = np.arange(values.shape[1])[None, :] >= lengths[:, None]
    values = values.copy()
    values[past] = pad
    return values
