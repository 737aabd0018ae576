"""The export of a trained model and the chief's answer to the driver: a SavedModel for
serving (inputs named as a signature can name them, several outputs named after the
model's) and the ``.keras`` file, written by every worker, kept from the chief."""

from __future__ import annotations

import json
import os
import re
import tempfile

from sparktf._protocol import heartbeats
from sparktf.runtime import storage
from sparktf.runtime.feed import shards
from sparktf.runtime.scoring import padding, saved_models
from sparktf.runtime.training import bindings as binding
from sparktf.runtime.training import keras_steps, model_kind
from sparktf.runtime.training.spec import (
    BUILDER_IN_SAVED_MODEL,
    KERAS_IN_SAVED_MODEL,
    SAVED_MODEL,
    TrainSpec,
)


def chief_result(model, spec: TrainSpec, ctx, history: dict,
                 bound: binding.Bindings, workers: list | None = None) -> dict | None:
    """Exports the trained model; the chief's answer to the driver (None elsewhere):
    ``workers`` is every worker's own and waited seconds by epoch (``step_times``)."""
    with heartbeats.Heartbeat(ctx).during("exporting", spec.epochs):
        inputs = _named_specs(bound.x_template(shards.empty_batch(spec.columns, ctx.feedSpec)),
                              [b.name for b in bound.inputs])
        exported, signature_inputs = _export(model, spec, ctx, inputs)
    ctx.phase("exported")
    if not ctx.isChief:
        return None
    kind, from_logits = model_kind.prediction_kind(model)
    return {"history": history, "export_dir": exported, "rows": int(sum(ctx.allNumRows)),
            "input_mapping": _signature_mapping(signature_inputs, bound),
            "prediction_kind": kind, "from_logits": from_logits, "workers": workers or []}


def _named_specs(x, names: list[str]):
    """``x`` (symbolic, ``Bindings.x_template``) as ``tf.TensorSpec``s named after the
    inputs they feed (in the bindings' order), so that a signature made from them binds
    each column by name, not by TensorFlow's ``args_0``, ``args_0_1``... in text order."""
    import tensorflow as tf

    flat = tf.nest.flatten(x)
    if len(flat) != len(names) or isinstance(x, dict):
        names = [None] * len(flat)
    return tf.nest.pack_sequence_as(x, [tf.TensorSpec(t.shape, tf.as_dtype(t.dtype), name=n)
                                        for t, n in zip(flat, names)])


def _export(model, spec: TrainSpec, ctx, inputs) -> tuple[str, dict[str, str]]:
    """Every worker exports (the chief's copy is kept): SavedModel for serving, holding the
    .keras file.
    ``inputs``: ``x`` as the columns feed it (``tf.TensorSpec``s named after the inputs).

    Returns the export URI and, for each input of the serving signature, the model input
    it takes (the same name unless TensorFlow could not name it: ``signature_names``). A
    model with several outputs names the signature's outputs after its own (``price``,
    ``dear``), not Keras's ``output_0``, ``output_1``.
    """
    target = storage.join(spec.model_dir, spec.export_name)
    with tempfile.TemporaryDirectory(prefix="sparktf-export-",
                                     dir=storage.scratch_root()) as local:
        path = os.path.join(local, SAVED_MODEL)
        mapping = write_saved_model(model, path, inputs)
        _keep_builder(spec, path, inputs)
        if ctx.isChief:
            storage.put_dir(local, target)
    return target, mapping


def write_saved_model(model, path: str, inputs=None) -> dict[str, str]:
    """The SavedModel of a Keras model at the local folder ``path``, as a fit exports it
    (and ``TFModel.from_keras`` a model trained elsewhere): the serving signature, the names
    of the inputs it renamed, the ``.keras`` file, and which inputs the model masks (the
    padding analysis). ``inputs``: ``tf.TensorSpec``s of ``x``, for a model that declares
    none. Returns, for each input of the signature, the model input it takes."""
    if keras_steps.is_tf_keras(model):
        renamed = _export_tf_keras(model, path)
    else:
        renamed = _export_saved_model(model, path, inputs)
    back = {signature: name for name, signature in renamed.items()}
    if back:  # so that a bare TFModel(modelPath) still feeds inputs by name
        os.makedirs(os.path.dirname(os.path.join(path, saved_models.INPUT_NAMES)),
                    exist_ok=True)
        with open(os.path.join(path, saved_models.INPUT_NAMES), "w") as f:
            json.dump(back, f)
    # the Keras model travels with the SavedModel (a saved TFModel, MLflow's runs:/)
    os.makedirs(os.path.join(path, "assets.extra"), exist_ok=True)
    model.save(os.path.join(path, KERAS_IN_SAVED_MODEL))
    names = list(saved_models.describe(path, "serving_default")[0])
    if not keras_steps.is_tf_keras(model):
        padding.write(path, _signature_padding(padding.masked_inputs(model), names, back))
    return {name: back.get(name, name) for name in names}


def _signature_padding(masked: dict, names: list[str], back: dict[str, str]) -> dict:
    """Signature input -> padding value, from model input -> padding value (``padding``):
    by name, or the only input of a model with one (a ``Sequential``'s is unnamed)."""
    if len(masked) == 1 and len(names) == 1:
        return {names[0]: next(iter(masked.values()))}
    found = {name: masked[back.get(name, name)] for name in names
             if back.get(name, name) in masked}
    return found if len(found) == len(masked) else {}


def _keep_builder(spec: TrainSpec, path: str, inputs) -> None:
    """Beside the ``.keras`` file in the SavedModel ``path``, what builds the model where
    Keras cannot load its class (a subclassed model whose class came by value):
    ``modelFn``, its hparams and its inputs' specs, pickled (``TFModel.getKerasModel``)."""
    import cloudpickle

    with open(os.path.join(path, BUILDER_IN_SAVED_MODEL), "wb") as f:
        cloudpickle.dump((spec.model_fn, dict(spec.hparams), inputs), f)


def _export_saved_model(model, path: str, inputs=None) -> dict[str, str]:
    """Keras's ``model.export``, with several outputs named after the model's outputs and
    the inputs named as a signature can name them; returns input name -> signature name
    for the inputs renamed. A model that declares no inputs (subclassed) takes them as
    ``inputs`` (``x`` as ``tf.TensorSpec``s) says, where Keras would make every input
    float32 and name them ``args_0``.... Outputs computed in half precision are exported
    as float32 (``_as_float32``)."""
    import keras
    from keras.src.export.export_utils import get_input_signature

    if inputs is not None and not binding.declared_inputs(model):
        specs = [inputs]
    else:
        specs = get_input_signature(model)
    signature, renamed = _signature(specs)
    outputs = binding.output_names(model)
    half = _half_precision(model)
    if (not outputs or len(outputs) < 2) and not half:
        model.export(path, verbose=False, input_signature=signature)
        return renamed
    archive = keras.export.ExportArchive()
    archive.track(model)

    def serve(inputs):
        results = model(inputs, training=False)
        if not outputs or len(outputs) < 2:  # its own structure, as model.export names it
            return keras.tree.map_structure(_as_float32, results)
        return dict(zip(outputs, [_as_float32(r) for r in keras.tree.flatten(results)]))

    archive.add_endpoint("serve", serve, signature)
    archive.write_out(path, verbose=False)
    return renamed


HALF = ("float16", "bfloat16")


def _half_precision(model) -> bool:
    """Whether any layer computes in half precision (a ``mixed_float16`` or
    ``mixed_bfloat16`` policy): its outputs are then exported as float32."""
    layers = model._flatten_layers(include_self=True, recursive=True)
    return any(getattr(layer, "compute_dtype", None) in HALF for layer in layers)


def _as_float32(tensor):
    """A half-precision float output as float32 (exact: every float16 and bfloat16 value
    is a float32 one), so that the export scores in float32 for every client (TFModel,
    MLflow, TensorFlow Serving); anything else as it is."""
    import tensorflow as tf

    return tf.cast(tensor, tf.float32) if tensor.dtype.name in HALF else tensor


def _export_tf_keras(model, path: str) -> dict[str, str]:
    """tf_keras' ``model.export``, with the inputs named as a signature can name them;
    returns input name -> signature name for the inputs renamed."""
    import tf_keras

    inputs = getattr(model, "inputs", None)
    signature, renamed = _signature(inputs) if inputs else (None, {})
    if not renamed:
        model.export(path)
        return renamed
    # as tf_keras' export_lib.export_model, renamed
    archive = tf_keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint("serve", model.__call__,
                         [signature] if isinstance(signature, list) and len(signature) > 1
                         else signature)
    archive.write_out(path)
    return renamed


def _signature(specs):
    """``specs`` (anything with a shape, a dtype and maybe a name: input specs, symbolic
    inputs) as ``tf.TensorSpec``s named as a SavedModel signature can name them, and
    input name -> signature name for the inputs renamed (``signature_names``)."""
    import tensorflow as tf

    renamed = signature_names([s.name for s in tf.nest.flatten(specs)
                               if getattr(s, "name", None)])

    def named(spec):
        name = getattr(spec, "name", None)
        return tf.TensorSpec(spec.shape, spec.dtype, name=renamed.get(name, name))

    return tf.nest.map_structure(named, specs), renamed


def signature_names(names: list[str]) -> dict[str, str]:
    """Input name -> a name TensorFlow can give a SavedModel signature's input, for the
    names it cannot (``größe``, ``my city``: a graph op's name is ASCII letters, digits
    and ``_.-/``): the others replaced by ``_``, unique among ``names``."""
    renamed, taken = {}, set(names)
    for name in names:
        if _SIGNATURE_NAME.fullmatch(name):
            continue
        safe = "".join(c if c.isascii() and (c.isalnum() or c in "_.-/") else "_"
                       for c in name)
        safe = safe if safe[:1].isalnum() or safe[:1] == "." else f"input_{safe}"
        candidate, n = safe, 1
        while candidate in taken:
            n += 1
            candidate = f"{safe}_{n}"
        renamed[name] = candidate
        taken.add(candidate)
    return renamed


_SIGNATURE_NAME = re.compile(r"[A-Za-z0-9.][A-Za-z0-9_.\-/]*")


def _signature_mapping(signature_inputs: dict[str, str], bound: binding.Bindings) -> dict:
    """Column -> serving signature input (``signature_inputs``: signature input -> model
    input): by the model's input names where the signature has them, else in order (a
    single input: the signature's only one)."""
    names = list(signature_inputs)
    if len(names) == 1 and len(bound.inputs) == 1:
        return {bound.inputs[0].column: names[0]}
    by_input = {name: signature for signature, name in signature_inputs.items()}
    mapping = bound.input_mapping
    if set(mapping.values()) == set(by_input):
        return {column: by_input[name] for column, name in mapping.items()}
    return dict(zip(mapping, sorted(names)))
