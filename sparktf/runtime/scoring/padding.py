"""Which inputs of open length a Keras model masks, so that padding cannot change a score.

Scoring feeds a row of an input of length ``None`` at its own length (``length_groups``)
because an unmasked model (an ``Embedding`` without ``mask_zero`` into pooling or a GRU)
gives a padded row another score. Where the model masks the padding, from the layer that
takes the input (``Embedding(mask_zero=True)``, ``Masking``) until a layer that uses the
mask removes the length axis (an RNN, ``GlobalAveragePooling1D``), a padded row scores as
the row alone, and a batch can be padded to its longest row and called once.

``masked_inputs`` reads this from the model's graph, not from the user, at export; what
it cannot prove (a subclassed model, a layer it does not know, ``GlobalMaxPooling1D``,
which ignores the mask) counts as unmasked: scoring stays exact, only slower.
"""

from __future__ import annotations

import json
import os

# beside the SavedModel's own files: signature input -> the value its padding takes
PADDING = os.path.join("assets.extra", "sparktf_padding.json")

# layers that give each step's output from that step alone at inference: what padded
# steps hold never reaches a real step
_PER_STEP = {"Dense", "Dropout", "SpatialDropout1D", "GaussianNoise", "GaussianDropout",
             "AlphaDropout", "Activation", "ReLU", "LeakyReLU", "PReLU", "ELU",
             "BatchNormalization", "TimeDistributed", "Identity"}
_MERGES = {"Add", "Subtract", "Multiply", "Average", "Maximum", "Minimum"}
# how Keras merges the masks of a merge's inputs (one mask with itself: the same mask)
_MASK_MERGES = {"LogicalAnd", "LogicalOr"}
_RNNS = {"RNN", "SimpleRNN", "GRU", "LSTM", "Bidirectional"}
# A tensor holds: nothing of any padding (_CLEAN); ("raw", input) the input itself, as fed;
# ("steps", input) values per step, the padded steps' garbage included; or ("mask",
# input, value) which steps of the input are not ``value`` (Keras's mask, a tensor of its
# own in a functional graph: ``inputs != 0`` for ``Embedding(mask_zero=True)``).
_CLEAN = "clean"


class _Unknown(Exception):
    """A layer whose effect on a padded step this analysis does not know."""


def masked_inputs(model) -> dict[str, float]:
    """Model input name -> its padding value, for each input of open length whose padding
    the model masks all the way to every output; empty unless every such input is
    masked (a Keras 3 functional or ``Sequential`` model)."""
    try:
        graph = model if hasattr(model, "_nodes_by_depth") else model._functional
        return _analyse(graph) if graph is not None else {}
    except (_Unknown, AttributeError, TypeError, IndexError, KeyError, ValueError):
        return {}


def _analyse(graph) -> dict[str, float]:
    state: dict[int, object] = {}
    padding: dict[str, object] = {}
    for tensor in graph.inputs:
        shape = tuple(tensor.shape)
        if len(shape) >= 2 and shape[1] is None:
            padding[tensor.name] = None
            state[id(tensor)] = ("raw", tensor.name)
    if not padding:
        return {}
    for depth in sorted(graph._nodes_by_depth, reverse=True):
        for node in graph._nodes_by_depth[depth]:
            if not node.operation or node.is_input:
                continue
            result = _step(node, lambda t: state.get(id(t), _CLEAN), padding)
            for out in node.outputs:
                state[id(out)] = result
    if any(state.get(id(t), _CLEAN) != _CLEAN for t in graph.outputs):
        return {}  # a per-step output, or padding that reaches an output
    if any(value is None for value in padding.values()):
        return {}
    return dict(padding)


def _step(node, held, padding: dict):
    """What a node's outputs hold, from what its inputs hold (``held``)."""
    kind = type(node.operation).__name__
    layer = node.operation
    args = [a for a in _flat(node.arguments.args) if _is_tensor(a)]
    consts = [a for a in node.arguments.args if isinstance(a, (int, float, bool))]
    mask = node.arguments.kwargs.get("mask")
    given = [held(t) for t in node.input_tensors]
    if all(g == _CLEAN for g in given):
        return _CLEAN
    first = held(args[0]) if args else _CLEAN
    if any(held(t) != _CLEAN for t in args[1:]) and kind not in _MERGES | _MASK_MERGES:
        raise _Unknown(kind)
    if first[0] == "raw":
        if kind == "NotEqual" and len(args) == 1 and len(consts) == 1:
            if _integral(args[0].dtype) and consts[0] != int(consts[0]):
                # Masking(0.5) over integers: the padding (0.5 cast to 0) is never masked
                raise _Unknown(f"{first[1]} masked by a value its dtype cannot hold")
            return ("mask", first[1], consts[0])
        if kind in ("Embedding", "Masking") and len(given) == 1:
            return ("steps", first[1])
        raise _Unknown(kind)
    if first[0] == "mask":
        if kind == "Any" and len(given) == 1:
            return first
        if kind in _MASK_MERGES and all(g == first for g in given):
            return first
        raise _Unknown(kind)
    # values per step, the padded ones included
    if kind in _MERGES:
        if all(g == first for g in given):
            return first
        raise _Unknown(kind)
    masked = mask is not None and _is_tensor(mask) and held(mask)[:2] == ("mask", first[1])
    if kind in _PER_STEP and len(given) == 1 and _own_activation(layer):
        return first
    if kind == "LayerNormalization" and len(given) == 1 and _last_axis_only(layer):
        return first
    if kind in _RNNS and masked and _rnn_masks(layer, kind):
        if _returns_sequences(layer, kind):
            if _reversed(layer, kind):
                # Keras returns a backward RNN's sequence last step first but keeps the
                # input's mask: a padded step's output then sits where the mask says real
                raise _Unknown(f"{kind} returns its sequence reversed")
            _pads_with(padding, first[1], held(mask)[2])
            return first
        if _zero_output_for_mask(layer, kind):
            # its output is the last step's, zeros when that step is padding
            raise _Unknown(f"{kind} gives zeros for a padded last step")
        _pads_with(padding, first[1], held(mask)[2])
        return _CLEAN
    if kind == "GlobalAveragePooling1D" and masked and getattr(
            layer, "data_format", "channels_last") == "channels_last":
        _pads_with(padding, first[1], held(mask)[2])
        return _CLEAN
    raise _Unknown(kind)


def _own_activation(layer) -> bool:
    """A layer's activation, where it has one, is one of Keras's (each works on a value, or
    a step's last axis, alone): a callable of the user's
    (``Activation(lambda x: x - ops.mean(x, axis=1))``) may mix steps."""
    activation = getattr(layer, "activation", None)
    return activation is None or (getattr(activation, "__module__", "") or "").startswith(
        "keras.src.activations")


def _flat(args) -> list:
    """A call's arguments with the tensors of a list argument (a merge's inputs) in line."""
    return [a for arg in args for a in (arg if isinstance(arg, (list, tuple)) else [arg])]


def _integral(dtype) -> bool:
    name = str(getattr(dtype, "name", dtype))
    return name.startswith(("int", "uint")) or name == "bool"


def _is_tensor(value) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(
        value, (int, float, bool))


def _pads_with(padding: dict, name: str, value) -> None:
    """The input ``name`` is padded with ``value``, the one its mask tells from a step (not
    NaN: a step of NaN is never equal to it, so never masked)."""
    if isinstance(value, float) and value != value:
        raise _Unknown(f"{name} masked by NaN")
    if padding[name] not in (None, value):
        raise _Unknown(f"{name} masked by two values")
    padding[name] = value


def _last_axis_only(layer) -> bool:
    axis = layer.axis
    return tuple(axis if isinstance(axis, (list, tuple)) else [axis]) in ((-1,), (2,))


def _rnn_masks(layer, kind: str) -> bool:
    """An RNN uses the mask (a masked step keeps the state), unless it keeps its state
    between calls (``stateful``: a row would depend on the rows before it)."""
    inner = [layer.forward_layer, layer.backward_layer] if kind == "Bidirectional" else [layer]
    return all(type(r).__name__ in _RNNS and not getattr(r, "stateful", False)
               for r in inner)


def _reversed(layer, kind: str) -> bool:
    """Whether the sequence an RNN returns runs last step first: ``go_backwards``, or a
    ``Bidirectional`` whose forward layer goes backwards (Keras flips only the other one)."""
    inner = layer.forward_layer if kind == "Bidirectional" else layer
    return bool(getattr(inner, "go_backwards", False))


def _zero_output_for_mask(layer, kind: str) -> bool:
    inner = [layer.forward_layer, layer.backward_layer] if kind == "Bidirectional" else [layer]
    return any(getattr(r, "zero_output_for_mask", False) for r in inner)


def _returns_sequences(layer, kind: str) -> bool:
    inner = layer.forward_layer if kind == "Bidirectional" else layer
    return bool(getattr(inner, "return_sequences", False))


def write(saved_model: str, padding: dict[str, float]) -> None:
    """Records ``padding`` (signature input -> padding value) in the SavedModel."""
    if not padding:
        return
    os.makedirs(os.path.dirname(os.path.join(saved_model, PADDING)), exist_ok=True)
    with open(os.path.join(saved_model, PADDING), "w") as f:
        json.dump(padding, f)
