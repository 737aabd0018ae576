"""Arrow record batches -> a local, memory-mapped shard -> numpy batches for TensorFlow.

The barrier task receives its partition as Arrow record batches. Each batch keeps
its columns' own types (``columns.spill_array``: int64 stays int64, strings stay
strings, arrays stay lists; ml Vectors become fixed-width float32 lists) and is
appended to an Arrow IPC file on local disk, so Python holds one batch at a time
whatever the partition's size. Epochs read the file back one record batch at a time
(in a shuffled order when asked) as numpy (``columns.chunk_values``): resident
memory stays about one batch, and the page cache keeps hot data without counting
against the process.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)

from sparktf.runtime import storage
from sparktf.runtime.feed import columns as kinds
from sparktf.runtime.feed.columns import ColumnInfo, FeedError

__all__ = ["FeedError", "Shard", "spill", "read_chunks", "step_batches", "step_rows",
           "keep_freed_memory"]

# glibc's mallopt parameters
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_KEEP_BYTES = 32 << 20


def keep_freed_memory() -> None:
    """Lets this process reuse freed buffers of up to 32 MB instead of returning them to
    the system at once. Call it in a ``tf.data.Dataset.from_generator`` generator, before
    its first element.

    TensorFlow's generator dataset sets glibc's ``M_TRIM_THRESHOLD`` to 128 KB the first
    time one runs, which also turns off glibc's growing mmap threshold: from then on every
    tensor of more than 128 KB is a fresh ``mmap``, page-faulted in and unmapped again, and
    a 10,000-row chunk of 28 floats cost 1.6-2.1 ms to go through ``from_generator``
    instead of 0.45 ms (3M rows through ``ctx.dataset()``: 1.0-1.3 s, then 0.6-0.7 s). Memory
    stays bounded: at most 32 MB of freed buffers are kept for reuse.
    """
    try:
        import ctypes
        libc = ctypes.CDLL(None)
        libc.mallopt(_M_MMAP_THRESHOLD, _KEEP_BYTES)
        libc.mallopt(_M_TRIM_THRESHOLD, _KEEP_BYTES)
    except (OSError, AttributeError):
        pass  # not glibc: its allocator has no such settings


@dataclasses.dataclass(frozen=True)
class Shard:
    """One task's spilled partition: where it lies, its columns, how many rows, and what
    each column holds over those rows (``ColumnInfo``; none for an empty shard)."""

    path: str
    columns: tuple[str, ...]
    num_rows: int
    infos: tuple = ()  # ColumnInfo per column, in ``columns`` order

    def describe(self) -> dict[str, list]:
        """Column -> ``ColumnInfo`` as JSON: enough to parse the rows without the file."""
        return {c: i.as_json() for c, i in zip(self.columns, self.infos)}


def column_to_numpy(arr: pa.Array, name: str):
    """One Arrow column, as Spark sends it, as the numpy values a batch holds."""
    return kinds.chunk_values(kinds.spill_array(arr, name), name)


def normalize(batch: pa.RecordBatch, columns: Sequence[str]) -> pa.RecordBatch:
    """A batch with only ``columns``, each as the task keeps it (``columns.spill_array``)."""
    arrays = [kinds.spill_array(batch.column(name), name) for name in columns]
    return pa.RecordBatch.from_arrays(arrays, names=list(columns))


_FILE_MAGIC = b"ARROW1\0\0"  # the Arrow IPC file's first bytes, padded to 8


class _ShardWriter:
    """Appends normalised batches to one Arrow IPC file, describing its columns.

    ``on_batch(end)``, if given, is called after each batch with the byte where it ends in
    the file: a reader may take the batches up to there (``stream_batches``)."""

    def __init__(self, path: str, columns: Sequence[str], on_batch=None):
        self.on_batch = on_batch
        self._sink = None
        self.path = path
        self.columns = tuple(columns)
        self.rows = 0
        self.infos: list[ColumnInfo | None] = [None] * len(self.columns)
        self._writer = None
        self._schema = None

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        out = normalize(batch, self.columns)
        if self._writer is None:
            self._schema = out.schema
            self._sink = pa.OSFile(self.path, "wb")
            self._writer = pa.ipc.new_file(self._sink, self._schema)
        elif out.schema != self._schema:
            raise FeedError(_schema_mismatch(self._schema, out.schema))
        self.infos = [kinds.merge([seen, kinds.describe(out.column(i))])
                      for i, seen in enumerate(self.infos)]
        self._writer.write_batch(out)
        self.rows += out.num_rows
        if self.on_batch is not None:
            self.on_batch(self._sink.tell())

    def close(self) -> Shard:
        if self._writer is None:  # an empty partition still gets a readable file
            self._writer = pa.ipc.new_file(
                self.path, pa.schema([(c, pa.float32()) for c in self.columns]))
        self._writer.close()
        if self._sink is not None:
            self._sink.close()
        infos = tuple(self.infos) if self.rows else ()
        return Shard(path=self.path, columns=self.columns, num_rows=self.rows, infos=infos)


def spill(batches: Iterable[pa.RecordBatch], path: str, columns: Sequence[str],
          split_column: str | None = None, on_batch=None) -> tuple[Shard, Shard | None]:
    """Writes the normalised batches to Arrow IPC files, one batch in memory at a time.

    With ``split_column`` (boolean), rows where it is true go to a second shard
    (``path`` + ``.validation``), e.g. a validation hold-out. ``on_batch(end)``: after
    each batch of the first shard, where it ends in the file (``stream_batches``).
    """
    main = _ShardWriter(path, columns, on_batch)
    held_out = _ShardWriter(path + ".validation", columns) if split_column else None
    try:
        for batch in batches:
            if held_out is None:
                main.write(batch)
                continue
            mask = batch.column(split_column)
            main.write(batch.filter(pa.compute.invert(mask)))
            held_out.write(batch.filter(mask))
    except BaseException:
        for writer in (main, held_out):  # the rows' own error is the one to report
            if writer is not None:
                with contextlib.suppress(Exception):
                    writer.close()
        raise
    return main.close(), held_out.close() if held_out else None


def _schema_mismatch(first: pa.Schema, later: pa.Schema) -> str:
    for a, b in zip(first, later):
        if a.type != b.type:
            return (f"Column '{a.name}' changes shape within one partition ({a.type} then "
                    f"{b.type}); every row must have the same length.")
    return f"Batch schema changed from {first} to {later}"


def num_chunks(shard: Shard) -> int:
    """How many record batches the shard's file holds."""
    with pa.OSFile(shard.path) as f:
        return pa.ipc.open_file(f).num_record_batches


def read_chunks(shard: Shard, columns: Sequence[str] | None = None,
                order: Sequence[int] | None = None) -> Iterator[dict[str, np.ndarray]]:
    """The shard's record batches (in ``order`` if given) as dicts of numpy arrays.

    Each batch is read from the file when it is needed and freed when dropped.
    """
    names = list(columns or shard.columns)
    with pa.OSFile(shard.path) as f:
        reader = pa.ipc.open_file(f)
        for i in (range(reader.num_record_batches) if order is None else order):
            yield batch_values(reader.get_batch(int(i)), names)


def batch_values(batch: pa.RecordBatch, names: Sequence[str]) -> dict[str, np.ndarray]:
    """A spilled record batch's columns as numpy (``columns.chunk_values``)."""
    return {name: _column_view(batch.column(name), name) for name in names}


def stream_batches(path: str, ends: Iterable[int]) -> Iterator[pa.RecordBatch]:
    """The record batches of a shard file that is still being written, each as soon as it
    is complete: ``ends`` gives the byte where each one ends, in order, as they are
    written (``_ShardWriter``'s ``on_batch``). Reads the file as an Arrow IPC stream (the
    file format's body, after its 8 magic bytes), never past a batch's end."""
    f = messages = schema = None
    try:
        for end in ends:
            if f is None:  # the file exists once its first batch is told
                f = pa.OSFile(path)
                f.seek(len(_FILE_MAGIC))
                messages = pa.ipc.MessageReader.open_stream(f)
            while f.tell() < end:
                message = messages.read_next_message()
                if schema is None:
                    schema = pa.ipc.read_schema(message)
                else:
                    yield pa.ipc.read_record_batch(message, schema)
    finally:
        if f is not None:
            f.close()


def _column_view(arr: pa.Array, name: str):
    if pa.types.is_fixed_size_list(arr.type) and pa.types.is_floating(arr.type.value_type):
        return arr.flatten().to_numpy(zero_copy_only=True).reshape(len(arr), arr.type.list_size)
    return kinds.chunk_values(arr, name)


def step_rows(all_rows: Sequence[int], global_batch: int) -> np.ndarray:
    """Rows each worker feeds at each step of an epoch: an int array [workers, steps].

    The step plan. Every step but the last takes exactly ``global_batch`` rows over all
    workers, the last one the rest: Keras's own batches, ``ceil(total / global_batch)``
    of them. Which worker gives which of a step's rows comes from one fixed order of all
    the epoch's rows: worker w's i-th row (in its shard's order, or its shuffled order)
    has the place ``(i + 1/2) / rows_w`` (ties: the lower rank first), and step k takes
    the rows at positions ``k * global_batch`` .. ``(k + 1) * global_batch - 1`` of that
    order. So the workers share every step in proportion to their rows, each one uses
    its rows once and in order, and one worker gets exactly Keras's batches. A worker
    can have no row in a step (a small or empty shard, a last step of fewer rows than
    workers): the step counts for nothing there (``KerasSteps``).

    The counts after each step are Sainte-Lague (Webster) apportionments of the rows
    used so far, which never decrease from one step to the next.
    """
    rows = np.asarray(all_rows, dtype=np.int64)
    total = int(rows.sum())
    steps = max(1, -(-total // global_batch))
    seats = np.minimum(np.arange(steps + 1, dtype=np.int64) * global_batch, total)
    return np.diff(_apportion(rows, seats), axis=1)


def _apportion(rows: np.ndarray, seats: np.ndarray) -> np.ndarray:
    """[workers, len(seats)]: how many of each worker's rows are among the first ``seats``
    of the step plan's order: every row whose place ``(i + 1/2) / rows_w`` is at most
    ``seats / total`` (the rounded quota), then places added or removed at the boundary,
    ties by rank (at most one per worker, so at most ``workers`` rounds)."""
    total = max(int(rows.sum()), 1)
    rows = rows[:, None]
    used = (2 * seats[None, :] * rows + total) // (2 * total)
    safe = np.maximum(rows, 1)
    last_first = np.arange(len(rows))[::-1]
    for _ in range(len(rows)):
        gap = seats - used.sum(axis=0)
        if not gap.any():
            break
        # the next places, lowest first (full workers have none); argmin: the lower rank
        nxt = np.where(used < rows, (2 * used + 1) / (2 * safe), np.inf)
        add = gap > 0
        used[np.argmin(nxt[:, add], axis=0), np.flatnonzero(add)] += 1
        # the last places taken, highest first; of equal ones the higher rank's
        last = np.where(used > 0, (2 * used - 1) / (2 * safe), -np.inf)
        drop = gap < 0
        used[last_first[np.argmax(last[::-1][:, drop], axis=0)], np.flatnonzero(drop)] -= 1
    return used


def step_batches(shard: Shard, sizes: Sequence[int], columns: Sequence[str] | None = None,
                 seed: int | None = None, infos: dict | None = None,
                 stand_in: bool = False) -> Iterator[dict]:
    """Batches of the given ``sizes`` that together hold every row of the shard once.

    ``sizes`` come from ``step_rows``: every worker runs the same number of steps
    whatever its share of the data, a small shard giving small (even empty) batches.
    With a ``seed`` the chunk order and the rows within each chunk are shuffled.
    ``infos`` (column -> ``ColumnInfo`` over every task: ``ctx.feedSpec``) shape the
    empty batches of a worker whose rows have run out. With ``stand_in``, a step of no
    rows gets a one-row batch instead (the shard's first row, else zeros: see
    ``stand_in_batch``), which the step must count for nothing.
    """
    chunks = shuffled_chunks(shard, columns, seed)
    pending: list[dict] = []
    held = 0
    names = list(columns or shard.columns)
    infos = infos or dict(zip(shard.columns, shard.infos))
    empty = (stand_in_batch(shard, names, infos) if stand_in and 0 in sizes
             else empty_batch(names, infos))
    for size in sizes:
        if size == 0:
            yield empty
            continue
        while held < size:
            chunk = next(chunks)
            pending.append(chunk)
            held += len(chunk[names[0]])
        batch, pending, held = _take(pending, size, names, held)
        yield batch


def stand_in_batch(shard: Shard, names: Sequence[str], infos: dict) -> dict:
    """One row for a step in which this worker has none: its shard's first row, or (an
    empty shard) a row of zeros and empty strings. Every worker must run the same step
    (its collectives), and a model never sees an empty batch under Keras's ``fit``:
    Keras reduces a loss over zero rows to an unreduced ``(0,)`` tensor, and batch
    statistics over zero rows are NaN."""
    if shard.num_rows:
        first = next(read_chunks(shard, names))
        return {n: first[n][:1] for n in names}
    return {n: kinds.zero_row(v) for n, v in empty_batch(names, infos).items()}


def _take(pending, size, names, held):
    """The first ``size`` rows of the pending chunks, and what remains."""
    parts = {n: [] for n in names}
    taken = 0
    while taken < size:
        chunk = pending[0]
        n_chunk = len(chunk[names[0]])
        need = size - taken
        if n_chunk <= need:
            for n in names:
                parts[n].append(chunk[n])
            pending.pop(0)
            taken += n_chunk
        else:
            for n in names:
                parts[n].append(chunk[n][:need])
            pending[0] = {n: chunk[n][need:] for n in names}
            taken += need
    batch = {n: kinds.concat(p) for n, p in parts.items()}
    return batch, pending, held - size


def empty_batch(names: Sequence[str], infos: dict) -> dict:
    """A zero-row batch with the columns' shapes and dtypes (``infos``: column ->
    ``ColumnInfo``, or its JSON form)."""
    out = {}
    for name in names:
        info = infos.get(name)
        if info is None:
            out[name] = np.zeros((0,), np.float32)
            continue
        if not isinstance(info, ColumnInfo):
            info = ColumnInfo.from_json(info)
        out[name] = kinds.empty_values(info)
    return out


def batch_sizes(rows: int, batch_size: int) -> list[int]:
    """``rows`` in batches of ``batch_size`` (the last one smaller)."""
    full, rest = divmod(rows, batch_size)
    return [batch_size] * full + ([rest] if rest else [])


def shuffled_chunks(shard: Shard, columns: Sequence[str] | None = None,
                    seed: int | None = None) -> Iterator[dict[str, np.ndarray]]:
    """The shard's chunks; with a ``seed``, in a random order with rows permuted within."""
    if seed is None:
        yield from read_chunks(shard, columns)
        return
    rng = np.random.default_rng(seed)
    for chunk in read_chunks(shard, columns, rng.permutation(num_chunks(shard))):
        rows = rng.permutation(len(next(iter(chunk.values()))))
        yield {name: values[rows] for name, values in chunk.items()}


def parquet_batches(uri: str, rank: int, num_workers: int, batch_rows: int = 10_000,
                    only: tuple[str, bool] | None = None) -> Iterator[pa.RecordBatch]:
    """This worker's share of a Parquet folder: every ``num_workers``-th file, as batches.

    ``only=(column, value)`` keeps the rows whose boolean ``column`` equals ``value``.
    """
    import pyarrow.dataset as pads
    from pyarrow import fs


    if storage.is_local(uri):
        filesystem, root = fs.LocalFileSystem(), storage.local_path(uri)
    else:
        filesystem, root = fs.FileSystem.from_uri(uri)
    files = sorted(f for f in pads.dataset(root, format="parquet", filesystem=filesystem).files)
    mine = files[rank::num_workers]
    if not mine:
        return
    where = None
    if only is not None:
        import pyarrow.compute as pc
        where = pc.field(only[0]) == only[1]
    yield from pads.dataset(mine, format="parquet", filesystem=filesystem).to_batches(
        batch_size=batch_rows, filter=where)
