"""Arrow record batches -> a local, memory-mapped shard -> numpy batches for TensorFlow.

The barrier task receives its partition as Arrow record batches. Each batch is
normalised (vectors and arrays to fixed-width float32 lists, numbers to
float32/int64) and appended to an Arrow IPC file on local disk, so Python holds
one batch at a time whatever the partition's size. Epochs read the file back
one record batch at a time (in a shuffled order when asked): resident memory
stays about one batch, and the page cache keeps hot data without counting
against the process.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)

from sparktf._executor import storage

_VECTOR_FIELDS = {"type", "size", "indices", "values"}


class FeedError(ValueError):
    """A column's data cannot be fed to TensorFlow."""


@dataclasses.dataclass(frozen=True)
class Shard:
    """One task's spilled partition: where it lies, its columns, how many rows."""

    path: str
    columns: tuple[str, ...]
    widths: tuple[int, ...]  # 0 for a scalar column, else the vector length
    num_rows: int
    dtypes: tuple[str, ...] = ()  # numpy dtype name of each column's values

    def describe(self) -> dict[str, tuple[str, int]]:
        """Column -> (dtype, width): enough to parse the rows without the file."""
        return {c: (d, w) for c, d, w in zip(self.columns, self.dtypes, self.widths)}


def is_vector_type(t: pa.DataType) -> bool:
    """Whether an Arrow type is how Spark sends an ml ``VectorUDT``."""
    return pa.types.is_struct(t) and {t.field(i).name for i in range(t.num_fields)} == \
        _VECTOR_FIELDS


def _list_to_matrix(arr: pa.Array, name: str) -> np.ndarray:
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if len(arr) == 0:
        return np.zeros((0, 0), dtype=np.float32)
    if pa.types.is_fixed_size_list(arr.type):
        width = arr.type.list_size
    else:
        lengths = arr.value_lengths().to_numpy(zero_copy_only=False)
        width = int(lengths[0])
        if not np.all(lengths == width):
            raise FeedError(f"Column '{name}' holds arrays of different lengths "
                            f"({int(lengths.min())} to {int(lengths.max())}); every row must "
                            "have the same length. Pad or truncate the arrays first.")
    values = arr.flatten()
    if values.null_count:
        raise FeedError(f"Column '{name}' has null elements inside its arrays; fill or drop "
                        "them before training.")
    return values.to_numpy(zero_copy_only=False).astype(np.float32, copy=False).reshape(
        len(arr), width)


def _vector_to_matrix(arr: pa.StructArray, name: str) -> np.ndarray:
    n = len(arr)
    kinds = arr.field("type").to_numpy(zero_copy_only=False)
    values = arr.field("values")
    if np.all(kinds == 1):  # all dense: one reshape
        return _list_to_matrix(values, name)
    sizes = arr.field("size").to_numpy(zero_copy_only=False)
    dense_lengths = values.value_lengths().to_numpy(zero_copy_only=False)
    widths = np.where(kinds == 1, dense_lengths, np.nan_to_num(sizes, nan=-1)).astype(np.int64)
    width = int(widths[0]) if n else 0
    if not np.all(widths == width):
        raise FeedError(f"Column '{name}' holds vectors of different sizes ({widths.min()} "
                        f"to {widths.max()}); every vector must have the same size.")
    out = np.zeros((n, width), dtype=np.float32)
    flat_values = values.flatten().to_numpy(zero_copy_only=False)
    row_of_value = np.repeat(np.arange(n), dense_lengths)
    offsets = values.offsets.to_numpy()[:-1] - values.offsets[0].as_py()
    position = np.arange(len(flat_values)) - np.repeat(offsets, dense_lengths)
    sparse_rows = kinds[row_of_value] == 0
    flat_indices = arr.field("indices").flatten().to_numpy(zero_copy_only=False)
    columns = position.copy()
    columns[sparse_rows] = flat_indices
    out[row_of_value, columns] = flat_values
    return out


def column_to_numpy(arr: pa.Array, name: str) -> np.ndarray:
    """One Arrow column as a numpy array: (n,) for numbers, (n, width) float32 for vectors."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.null_count:
        raise FeedError(f"Column '{name}' has {arr.null_count} null value(s) in this partition; "
                        "sparktf does not train on nulls. Drop or fill them first, e.g. "
                        f"df.na.drop(subset=['{name}']).")
    t = arr.type
    if is_vector_type(t):
        return _vector_to_matrix(arr, name)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _list_to_matrix(arr, name)
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return arr.to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return arr.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    raise FeedError(f"Column '{name}' has type {t}, which cannot be fed to TensorFlow; use a "
                    "numeric, array<float|double> or ml Vector column.")


def _to_arrow(matrix: np.ndarray) -> pa.Array:
    if matrix.ndim == 1:
        return pa.array(matrix)
    flat = pa.array(matrix.reshape(-1))
    return pa.FixedSizeListArray.from_arrays(flat, matrix.shape[1])


def normalize(batch: pa.RecordBatch, columns: Sequence[str]) -> pa.RecordBatch:
    """A batch with only ``columns``, each as float32/int64 or a fixed-width float32 list."""
    arrays = [_to_arrow(column_to_numpy(batch.column(name), name)) for name in columns]
    return pa.RecordBatch.from_arrays(arrays, names=list(columns))


class _ShardWriter:
    """Appends normalised batches to one Arrow IPC file."""

    def __init__(self, path: str, columns: Sequence[str]):
        self.path = path
        self.columns = tuple(columns)
        self.rows = 0
        self._writer = None
        self._schema = None

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        out = normalize(batch, self.columns)
        if self._writer is None:
            self._schema = out.schema
            self._writer = pa.ipc.new_file(self.path, self._schema)
        elif out.schema != self._schema:
            raise FeedError(_schema_mismatch(self._schema, out.schema))
        self._writer.write_batch(out)
        self.rows += out.num_rows

    def close(self) -> Shard:
        if self._writer is None:  # an empty partition still gets a readable file
            self._writer = pa.ipc.new_file(
                self.path, pa.schema([(c, pa.float32()) for c in self.columns]))
        self._writer.close()
        schema = self._schema or pa.schema([(c, pa.float32()) for c in self.columns])
        widths = tuple(t.list_size if pa.types.is_fixed_size_list(t) else 0
                       for t in schema.types)
        dtypes = tuple((t.value_type if pa.types.is_fixed_size_list(t) else t).to_pandas_dtype()
                       .__name__ for t in schema.types)
        return Shard(path=self.path, columns=self.columns, widths=widths, num_rows=self.rows,
                     dtypes=dtypes)


def spill(batches: Iterable[pa.RecordBatch], path: str, columns: Sequence[str],
          split_column: str | None = None) -> tuple[Shard, Shard | None]:
    """Writes the normalised batches to Arrow IPC files, one batch in memory at a time.

    With ``split_column`` (boolean), rows where it is true go to a second shard
    (``path`` + ``.validation``), e.g. a validation hold-out.
    """
    main = _ShardWriter(path, columns)
    held_out = _ShardWriter(path + ".validation", columns) if split_column else None
    try:
        for batch in batches:
            if held_out is None:
                main.write(batch)
                continue
            mask = batch.column(split_column)
            main.write(batch.filter(pa.compute.invert(mask)))
            held_out.write(batch.filter(mask))
    finally:
        shards = (main.close(), held_out.close() if held_out else None)
    return shards


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
            batch = reader.get_batch(int(i))
            yield {name: _column_view(batch.column(name)) for name in names}


def _column_view(arr: pa.Array) -> np.ndarray:
    if pa.types.is_fixed_size_list(arr.type):
        return arr.flatten().to_numpy(zero_copy_only=True).reshape(len(arr), arr.type.list_size)
    return arr.to_numpy(zero_copy_only=True)


def step_rows(all_rows: Sequence[int], global_batch: int) -> np.ndarray:
    """Rows each worker feeds at each step of an epoch: an int array [workers, steps].

    Steps are ``ceil(total / global_batch)``, the number Keras's ``fit`` takes. After
    step k a worker with n of the N rows has used ``round(k * global_batch * n / N)``
    (at most n): one worker gets Keras's own batches (full ones, then the rest), and
    several workers share each step's global batch in proportion to their rows, so
    all of them run the same number of steps and use every row once.
    """
    rows = np.asarray(all_rows, dtype=np.int64)
    total = int(rows.sum())
    steps = max(1, -(-total // global_batch))
    k = np.arange(steps + 1, dtype=np.int64)[None, :]
    used = (2 * k * global_batch * rows[:, None] + total) // max(2 * total, 1)
    return np.diff(np.minimum(used, rows[:, None]), axis=1)


def step_batches(shard: Shard, sizes: Sequence[int], columns: Sequence[str] | None = None,
                 seed: int | None = None) -> Iterator[dict[str, np.ndarray]]:
    """Batches of the given ``sizes`` that together hold every row of the shard once.

    ``sizes`` come from ``step_rows``: every worker runs the same number of steps
    whatever its share of the data, a small shard giving small (even empty) batches.
    With a ``seed`` the chunk order and the rows within each chunk are shuffled.
    """
    chunks = shuffled_chunks(shard, columns, seed)
    pending: list[dict[str, np.ndarray]] = []
    held = 0
    names = list(columns or shard.columns)
    empty = empty_batch(shard, names)
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
    batch = {n: p[0] if len(p) == 1 else np.concatenate(p) for n, p in parts.items()}
    return batch, pending, held - size


def empty_batch(shard: Shard, names: Sequence[str]) -> dict[str, np.ndarray]:
    """A zero-row batch with the shard's column shapes and dtypes."""
    with pa.OSFile(shard.path) as f:
        schema = pa.ipc.open_file(f).schema
    out = {}
    for name in names:
        t = schema.field(name).type
        if pa.types.is_fixed_size_list(t):
            out[name] = np.zeros((0, t.list_size), dtype=t.value_type.to_pandas_dtype())
        else:
            out[name] = np.zeros((0,), dtype=t.to_pandas_dtype())
    return out


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
