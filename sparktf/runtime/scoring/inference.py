"""Scoring Arrow batches with a SavedModel signature, one loaded model per Python worker.

``score_arrays`` is the Arrow UDF of ``TFModel.transform`` and ``TFModel.udf``:
it receives only the input columns and returns only the outputs (the JVM keeps
the other columns, so they never make a round trip through Python). Rows whose
inputs are null keep null outputs (``outputs``); ``batching`` decides the calls.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa

from sparktf.runtime import gpu, tf_startup, worker_tuning
from sparktf.runtime.feed import columns, tensors
from sparktf.runtime.scoring import batching, length_groups
from sparktf.runtime.scoring.outputs import output_arrays
from sparktf.runtime.scoring.saved_models import ModelCache
from sparktf.runtime.scoring.spec import InputBinding, ScoreSpec


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
    # the notices of TensorFlow's start (cuInit's among them) kept off the executor's
    # stderr, the driver's console in local mode (tf_startup)
    with environment(settings), tf_startup.quiet_start():
        worker_tuning.import_tensorflow()  # without Keras: ~0.7 s of CPU less
        import tensorflow as tf
        tf.config.list_physical_devices()  # CUDA reads CUDA_VISIBLE_DEVICES here
        tf.constant(0)  # the eager context: devices, memory growth, thread pools
    # pyspark's daemon runs a full gc.collect() after every task of a reused Python
    # worker: over TensorFlow's objects that took 0.2-0.5 s of CPU per task, more than
    # scoring a small partition. Frozen, they are left out of every later collection
    # (they live as long as the worker anyway; reference counting still frees objects).
    worker_tuning.freeze_collector()
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
    row's outputs beyond float rounding. ``report`` takes (calls, rows, longest grouped
    length) at the end.
    """
    worker_tuning.configure(spec.worker_tuning)
    worker_tuning.lazy_zip_imports()  # ~0.2 s of CPU less for each later task of this worker
    start_tensorflow()
    device = task_device(spec.use_gpu)
    calls = None
    names = [b.column for b in spec.inputs]
    for arrays in columns:
        batch = pa.RecordBatch.from_arrays([_plain(a) for a in arrays], names=names)
        if not batch.num_rows:
            continue
        if calls is None:
            calls = batching.Calls(
                ModelCache.get(spec.model_path, spec.signature, device), spec, device)
        calls.add(batch, *prepare(spec, batch))
        yield from _structs(spec, calls)
    if calls is not None:
        calls.finish()
        yield from _structs(spec, calls)
        if report is not None:
            report((calls.calls, calls.rows, calls.longest))


def _structs(spec: ScoreSpec, calls: batching.Calls) -> Iterator[pa.Array]:
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
    masks): what ``batching.Calls.add`` takes."""
    valid = valid_rows(batch, [b.column for b in spec.inputs])
    if not valid.any():  # every row null: no model call, null outputs
        return valid, {}, {}, {}
    rows = batch.filter(pa.array(valid)) if not valid.all() else batch
    pads = dict(spec.padding)  # a masked input -> its padding value
    arrays, lengths, masked = {}, {}, {}
    for b in spec.inputs:
        column = _plain(rows.column(b.column))
        arrays[b.input_name] = model_input(column, b, spec.pad_length)
        row_lengths = None if spec.pad_length else batching.row_lengths(column, b.shape)
        if row_lengths is None:
            continue
        if b.input_name in pads:
            arrays[b.input_name] = batching.fill_padding(
                arrays[b.input_name], row_lengths, pads[b.input_name])
            masked[b.input_name] = row_lengths
        else:
            lengths[b.input_name] = row_lengths
    return valid, arrays, lengths, masked


def run_model(fn, spec: ScoreSpec, batch: pa.RecordBatch, device: str = "/CPU:0") -> dict:
    """Signature outputs of one batch's valid rows (numpy, or ``length_groups.RowArrays``)
    and the valid-row mask, called as ``score_arrays`` calls them."""
    calls = batching.Calls(fn, spec, device)
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
