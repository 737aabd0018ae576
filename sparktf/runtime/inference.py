"""Scoring Arrow batches with a SavedModel signature, one loaded model per Python worker.

``score_arrays`` is the Arrow UDF of ``TFModel.transform`` and ``TFModel.udf``:
it receives only the input columns and returns only the outputs (the JVM keeps
the other columns, so they never make a round trip through Python). Rows whose
inputs are null keep null outputs. Prediction post-processing (arg-max, probability
vectors) is plain numpy in ``classify``.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import gc
import hashlib
import json
import os
import shutil
import tempfile
import threading
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparktf.runtime import (
    columns,
    deferred_imports,
    gpu,
    length_groups,
    padding,
    scoring_calls,
    storage,
    tensors,
    zip_imports,
)

REGRESSION, BINARY, MULTICLASS = "regression", "binary", "multiclass"


@dataclasses.dataclass(frozen=True)
class InputBinding:
    """A DataFrame column feeding one signature input."""

    column: str
    input_name: str
    shape: tuple  # without the batch dimension; None entries are unknown
    dtype: str


@dataclasses.dataclass(frozen=True)
class OutputBinding:
    """A signature output written to one column: 'scalar' or 'vector' per row."""

    output_name: str
    column: str
    per_row: str
    dtype: str


@dataclasses.dataclass(frozen=True)
class PredictionColumns:
    """Where a model's single output goes as prediction / probability / rawPrediction."""

    output_name: str
    kind: str  # REGRESSION, BINARY or MULTICLASS
    from_logits: bool
    prediction: str
    probability: str | None
    raw: str | None


@dataclasses.dataclass(frozen=True)
class ScoreSpec:
    """What the scoring tasks need, built on the driver."""

    model_path: str
    signature: str
    batch_size: int
    inputs: tuple[InputBinding, ...]
    outputs: tuple[OutputBinding, ...] = ()
    prediction: PredictionColumns | None = None
    use_gpu: str | bool = "auto"
    pad_length: int | None = None  # TFModel.padLength: open lengths padded to it, not grouped
    # (signature input, padding value) for the inputs of length None the model masks
    # (``padding``): padded to each call's longest row, not grouped
    padding: tuple = ()


class ModelCache:
    """This Python worker's loaded signatures, least recently used evicted first.

    Spark reuses Python workers across tasks and jobs, so a model is loaded once
    per worker, not once per partition. Entries are keyed by the SavedModel's
    identity (``identity``), not its path: a model saved again at the same path is
    loaded again. And by device: each task runs on the GPU Spark assigned it.
    """

    capacity = 4
    _entries: collections.OrderedDict = collections.OrderedDict()
    _lock = threading.Lock()

    @classmethod
    def get(cls, model_path: str, signature: str, device: str):
        key = (identity(model_path), signature, device)
        with cls._lock:
            if key in cls._entries:
                cls._entries.move_to_end(key)
                return cls._entries[key].fn
        loaded = _Loaded.load(model_path, signature, device)
        with cls._lock:
            cls._entries[key] = loaded
            while len(cls._entries) > cls.capacity:
                cls._entries.popitem(last=False)[1].close()
        _settle()
        return loaded.fn

    @classmethod
    def clear(cls) -> None:
        with cls._lock:
            while cls._entries:
                cls._entries.popitem()[1].close()


def _settle() -> None:
    """After a model is loaded (rarely): one full collection, the models the cache let go
    included, then everything alive frozen again (``start_tensorflow``), so that the
    collection pyspark's daemon runs after every task does not walk the loaded models."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


@dataclasses.dataclass
class _Loaded:
    """A loaded SavedModel, its signature function, and the local copy of a remote model
    (removed when the entry leaves the cache)."""

    model: object
    fn: object
    scratch: str | None

    @classmethod
    def load(cls, model_path: str, signature: str, device: str) -> "_Loaded":
        import tensorflow as tf

        scratch = None if storage.is_local(model_path) else tempfile.mkdtemp(
            prefix="sparktf-model-", dir=storage.scratch_root())
        try:
            with tf.device(device):
                model = tf.saved_model.load(storage.get_dir(model_path, scratch))
            if signature not in model.signatures:
                raise KeyError(f"The SavedModel at {model_path} has no signature "
                               f"{signature!r}; it has {sorted(model.signatures)}.")
        except BaseException:
            if scratch:
                shutil.rmtree(scratch, ignore_errors=True)
            raise
        return cls(model, model.signatures[signature], scratch)

    def close(self) -> None:
        if self.scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)


FINGERPRINT = "fingerprint.pb"  # TensorFlow writes it into every SavedModel (TF >= 2.12)


def identity(model_path: str) -> str:
    """What tells one SavedModel from another at the same path: a digest of its
    ``fingerprint.pb`` (which hashes the graph and the variables), or of the graph and
    the variables' index (which holds every variable's checksum) where there is none."""
    names = [FINGERPRINT]
    if not storage.exists(storage.join(model_path, FINGERPRINT)):
        names = ["saved_model.pb", "variables/variables.index"]
    digest = hashlib.sha256()
    for name in names:
        uri = storage.join(model_path, *name.split("/"))
        if storage.exists(uri):
            digest.update(storage.read_bytes(uri))
    return digest.hexdigest()


_DESCRIPTIONS: dict = {}
_DESCRIPTIONS_LOCK = threading.Lock()


def describe(model_path: str, signature: str) -> tuple[dict, dict]:
    """Signature inputs and outputs: name -> (shape without batch, dtype name).

    Read from the SavedModel's graph metadata (``saved_model.pb``), without loading the
    variables, and kept per SavedModel identity.
    """
    key = (identity(model_path), signature)
    with _DESCRIPTIONS_LOCK:
        if key in _DESCRIPTIONS:
            return _DESCRIPTIONS[key]
    described = _read_signature(model_path, signature)
    with _DESCRIPTIONS_LOCK:
        _DESCRIPTIONS[key] = described
    return described


# signature input -> the model input it takes, where TensorFlow could not keep the name
# (größe -> gr__e); written by fit beside the SavedModel's own files
INPUT_NAMES = os.path.join("assets.extra", "sparktf_input_names.json")


def input_names(model_path: str) -> dict[str, str]:
    """Signature input -> model input name, for the inputs fit renamed in the signature
    (empty for any other SavedModel)."""
    key = (identity(model_path), INPUT_NAMES)  # read once per SavedModel, as describe
    with _DESCRIPTIONS_LOCK:
        if key in _DESCRIPTIONS:
            return _DESCRIPTIONS[key]
    path = storage.join(model_path, INPUT_NAMES)
    names = json.loads(storage.read_bytes(path)) if storage.exists(path) else {}
    with _DESCRIPTIONS_LOCK:
        _DESCRIPTIONS[key] = names
    return names


def padding_values(model_path: str) -> dict[str, float]:
    """Signature input -> padding value, for the inputs of length None whose padding the
    model masks (``padding``: written at export; empty for any other SavedModel)."""
    key = (identity(model_path), padding.PADDING)
    with _DESCRIPTIONS_LOCK:
        if key in _DESCRIPTIONS:
            return _DESCRIPTIONS[key]
    path = storage.join(model_path, padding.PADDING)
    values = json.loads(storage.read_bytes(path)) if storage.exists(path) else {}
    with _DESCRIPTIONS_LOCK:
        _DESCRIPTIONS[key] = values
    return values


def _read_signature(model_path: str, signature: str) -> tuple[dict, dict]:
    import tensorflow as tf
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString(storage.read_bytes(storage.join(model_path, "saved_model.pb")))
    signatures = {}
    for graph in proto.meta_graphs:
        signatures.update(graph.signature_def)
    if signature not in signatures:
        raise KeyError(f"The SavedModel at {model_path} has no signature {signature!r}; it "
                       f"has {sorted(k for k in signatures if not k.startswith('__'))}.")

    def spec(info):
        shape = info.tensor_shape
        dims = (None,) if shape.unknown_rank else tuple(
            None if d.size < 0 else int(d.size) for d in shape.dim[1:])
        return dims, tf.dtypes.as_dtype(info.dtype).name

    found = signatures[signature]
    return ({k: spec(v) for k, v in found.inputs.items()},
            {k: spec(v) for k, v in found.outputs.items()})


def per_row_kind(shape: tuple) -> str:
    """'scalar' when an output holds one value per row, else 'vector'."""
    return "scalar" if len(shape) == 0 or (len(shape) == 1 and shape[0] == 1) else "vector"


def classify(output: np.ndarray, kind: str, from_logits: bool):
    """(prediction, probability or None, raw or None) for a model's output batch."""
    out = output.reshape(len(output), -1).astype(np.float64)
    if kind == REGRESSION:
        return out[:, 0], None, None
    if kind == BINARY:
        p = 1.0 / (1.0 + np.exp(-out[:, 0])) if from_logits else out[:, 0]
        probability = np.stack([1.0 - p, p], axis=1)
        raw = np.stack([-out[:, 0], out[:, 0]], axis=1) if from_logits else probability
        return (p > 0.5).astype(np.float64), probability, raw
    if from_logits:
        shifted = np.exp(out - out.max(axis=1, keepdims=True))
        probability = shifted / shifted.sum(axis=1, keepdims=True)
    else:
        probability = out
    return probability.argmax(axis=1).astype(np.float64), probability, out


def start_tensorflow() -> dict[str, str] | None:
    """Starts TensorFlow in this Python worker, seeing the executor's GPUs, with this
    task's share of the cores. Returns the settings it started with (None where
    TensorFlow already ran here).

    Spark reuses a Python worker for later tasks, which Spark may assign other GPUs of
    the executor: TensorFlow sees the executor's GPUs (its own CUDA_VISIBLE_DEVICES, in
    PCI order as Spark's discovery scripts number them) and every task places its calls
    on the one it was assigned (``task_device``). TensorFlow reads these settings once,
    when its runtime starts, so they are set for that moment only: a value left in
    ``os.environ`` would reach every later task, including the training processes a
    later ``fit`` starts from this worker (where a single inter-op thread deadlocks
    parameter-server training).
    """
    import sys
    if "tensorflow" in sys.modules:
        return None
    from pyspark import TaskContext
    context = TaskContext.get()
    settings = {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}
    # Python workers of one executor share its cores: size TF's pools to this task's
    # share, unless the executor's environment chose.
    defaults = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_NUM_INTEROP_THREADS": "1",
                "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                "TF_NUM_INTRAOP_THREADS": str(max(1, context.cpus())) if context else "1"}
    settings.update({k: v for k, v in defaults.items() if k not in os.environ})
    with environment(settings):
        deferred_imports.import_keras()  # ~2 s of CPU less where sklearn, matplotlib are
        import tensorflow as tf
        tf.config.list_physical_devices()  # CUDA reads CUDA_VISIBLE_DEVICES here
        tf.constant(0)  # the eager context: devices, memory growth, thread pools
    # pyspark's daemon runs a full gc.collect() after every task of a reused Python
    # worker: over TensorFlow's objects that took 0.2-0.5 s of CPU per task, more than
    # scoring a small partition. Frozen, they are left out of every later collection
    # (they live as long as the worker anyway; reference counting still frees objects).
    gc.freeze()
    return settings


def task_device(use_gpu) -> str:
    """The TensorFlow device this scoring task runs on: the GPU Spark assigned it (its
    address indexes the executor's visible GPUs, as for training), else the CPU."""
    from pyspark import TaskContext
    assigned = gpu.assigned(TaskContext.get())
    if gpu.visible_devices(assigned, use_gpu) == gpu.HIDE_ALL:
        return "/CPU:0"
    return f"/GPU:{int(assigned[0])}"


@contextlib.contextmanager
def environment(values: dict[str, str]):
    """``os.environ`` with ``values`` inside the block; exactly as before after it."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def score_arrays(spec: ScoreSpec, columns: Iterator[Sequence[pa.Array]], report=None
                 ) -> Iterator[pa.Array]:
    """The Arrow UDF behind ``TFModel.transform``: input columns in, a struct of outputs out.

    ``columns`` yields, per Arrow batch, one array per ``spec.inputs`` binding. The calls
    (``scoring_calls``) take the partition's rows ``batchSize`` at a time, rows of an
    unmasked input of length None by their lengths: how rows are batched never changes a
    row's outputs. ``report`` takes (calls, rows, longest grouped length) at the end.
    """
    zip_imports.make_lazy()  # ~0.2 s of CPU less for each later task of this worker
    start_tensorflow()
    device = task_device(spec.use_gpu)
    calls = None
    names = [b.column for b in spec.inputs]
    for arrays in columns:
        batch = pa.RecordBatch.from_arrays([_plain(a) for a in arrays], names=names)
        if not batch.num_rows:
            continue
        if calls is None:
            calls = scoring_calls.Calls(
                ModelCache.get(spec.model_path, spec.signature, device), spec, device)
        calls.add(batch, *prepare(spec, batch))
        yield from _structs(spec, calls)
    if calls is not None:
        calls.finish()
        yield from _structs(spec, calls)
        if report is not None:
            report((calls.calls, calls.rows, calls.longest))


def _structs(spec: ScoreSpec, calls: scoring_calls.Calls) -> Iterator[pa.Array]:
    for n, valid, values in calls.done():
        out_names, arrays = output_arrays(n, spec, {"valid": valid, "values": values})
        yield pa.StructArray.from_arrays(arrays, names=out_names)


def _plain(array) -> pa.Array:
    return array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array


def valid_rows(batch: pa.RecordBatch, names: Sequence[str]) -> np.ndarray:
    """Rows whose input columns are all non-null, with no null element inside an array
    either: such a row gets null outputs, like a null row."""
    valid = np.ones(batch.num_rows, dtype=bool)
    for name in names:
        column = _plain(batch.column(name))
        valid &= ~column.is_null().to_numpy(zero_copy_only=False)
        valid &= ~columns.rows_with_null_elements(column)
    return valid


def prepare(spec: ScoreSpec, batch: pa.RecordBatch) -> tuple:
    """(the valid rows, each input of those rows as the signature takes it, each row's
    length for the inputs of length None the model does not mask, and for those it
    masks): what ``scoring_calls.Calls.add`` takes."""
    valid = valid_rows(batch, [b.column for b in spec.inputs])
    if not valid.any():  # every row null: no model call, null outputs
        return valid, {}, {}, {}
    rows = batch.filter(pa.array(valid)) if not valid.all() else batch
    pads = dict(spec.padding)
    arrays, lengths, masked = {}, {}, {}
    for b in spec.inputs:
        column = _plain(rows.column(b.column))
        arrays[b.input_name] = model_input(column, b, spec.pad_length)
        row_lengths = None if spec.pad_length else scoring_calls.row_lengths(column, b.shape)
        if row_lengths is None:
            continue
        if b.input_name in pads:
            arrays[b.input_name] = scoring_calls.fill_padding(
                arrays[b.input_name], row_lengths, pads[b.input_name])
            masked[b.input_name] = row_lengths
        else:
            lengths[b.input_name] = row_lengths
    return valid, arrays, lengths, masked


def run_model(fn, spec: ScoreSpec, batch: pa.RecordBatch, device: str = "/CPU:0") -> dict:
    """Signature outputs of one batch's valid rows (numpy, or ``length_groups.RowArrays``)
    and the valid-row mask, called as ``score_arrays`` calls them."""
    calls = scoring_calls.Calls(fn, spec, device)
    calls.add(batch, *prepare(spec, batch))
    calls.finish()
    (_, valid, values), = calls.done()
    return {"valid": valid, "values": values}


def model_input(column: pa.Array, binding: InputBinding, pad_length: int | None = None
                ) -> np.ndarray:
    """One input column of a batch as the signature input declares it (``columns``), an
    open length as ``pad_length`` where given (``length_groups.padded_shape``)."""
    shape = binding.shape
    if shape == (None,) and not columns.is_list_type(column.type) and \
            not columns.is_vector_type(column.type):
        shape = (1,)  # a scalar into an input of unknown length: one value per row
    elif pad_length:
        shape = length_groups.padded_shape(_plain(column), binding.column, shape, pad_length)
    values = columns.chunk_values(columns.spill_array(column, binding.column), binding.column)
    if shape == () and getattr(values, "ndim", 1) == 2 and values.shape[1] == 1:
        values = values[:, 0]
    return tensors.to_input(values, binding.column, shape, binding.dtype,
                            fixed=columns.is_vector_type(column.type))


def output_arrays(n: int, spec: ScoreSpec, outputs: dict) -> tuple[list, list]:
    """(names, arrays) of the output columns for ``n`` rows, null where inputs were null."""
    valid = outputs.get("valid", np.zeros(n, dtype=bool))
    values = outputs.get("values", {})
    names, arrays = [], []
    for b in spec.outputs:
        width = 1 if b.per_row == "scalar" else None
        arrays.append(_column(values.get(b.output_name), valid, n, width, b.dtype))
        names.append(b.column)
    p = spec.prediction
    if p is not None:
        out = values.get(p.output_name)
        if isinstance(out, length_groups.RowArrays):
            length_groups.refuse_prediction(p.output_name)
        prediction, probability, raw = (classify(out, p.kind, p.from_logits)
                                        if out is not None else (None, None, None))
        arrays.append(_column(prediction, valid, n, 1, "float64"))
        names.append(p.prediction)
        for column, value in ((p.probability, probability), (p.raw, raw)):
            if column:
                arrays.append(_column(value, valid, n, None, "float64"))
                names.append(column)
    return names, arrays


def _column(values, valid: np.ndarray, n: int, width: int | None, dtype: str) -> pa.Array:
    """A column of ``n`` rows: ``values`` at the valid rows, null elsewhere."""
    if isinstance(values, length_groups.RowArrays):
        return length_groups.list_column(values, valid, n, dtype)
    if dtype == "string":
        return _text_column(values, valid, n, width)
    mask = pa.array(~valid)
    if width == 1:
        full = np.zeros(n, dtype=dtype)
        if values is not None and valid.any():
            full[valid] = np.asarray(values).reshape(int(valid.sum()), -1)[:, 0]
        return pa.array(full, mask=~valid)
    list_type = pa.list_(pa.from_numpy_dtype(np.dtype(dtype)))
    if values is None or not valid.any():  # no row of this batch was scored (all null)
        return pa.nulls(n, list_type)
    k = np.asarray(values).reshape(len(values), -1).shape[1]
    flat = np.zeros((n, k), dtype=dtype)
    flat[valid] = np.asarray(values).reshape(int(valid.sum()), -1)
    fixed = pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), k, mask=mask)
    return pc.cast(fixed, list_type)


def _text_column(values, valid: np.ndarray, n: int, width: int | None) -> pa.Array:
    """A string output (e.g. a ``StringLookup(invert=True)`` head) as a string column (a
    list of strings per row for a vector output); null where the inputs were null."""
    rows: list = [None] * n
    if values is not None and valid.any():
        flat = np.asarray(values).reshape(int(valid.sum()), -1)
        decoded = [[v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                    for v in row] for row in flat]
        for i, row in zip(np.flatnonzero(valid), decoded):
            rows[i] = row[0] if width == 1 else row
    return pa.array(rows, type=pa.string() if width == 1 else pa.list_(pa.string()))
