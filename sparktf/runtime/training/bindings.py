"""Which column feeds which model input and which label column which output, and how a
batch of columns becomes ``(x, y[, sample_weight])`` as Keras's ``fit`` takes it.

Inputs are matched by name when the model's inputs are named after columns
(``keras.Input(name="age")``, dict inputs), else in order; labels go to the outputs
of the same names, else in order. Every column is checked against what its input
declares (``tensors.check_input``) once the model exists, before the first step.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

from sparktf.runtime.feed import tensors
from sparktf.runtime.feed.columns import ColumnInfo, FeedError, Padded
from sparktf.runtime.training import keras_steps


@dataclasses.dataclass(frozen=True)
class InputBinding:
    """A column feeding one model input of declared ``shape`` (None: unknown) and dtype."""

    column: str
    name: str
    shape: tuple | None
    dtype: str | None
    fixed: bool = False  # an ml Vector: never padded


@dataclasses.dataclass(frozen=True)
class Bindings:
    """How one model takes a batch of columns."""

    inputs: tuple[InputBinding, ...]
    inputs_as_dict: bool  # the model's inputs are a dict (keyed by input name)
    labels: tuple[str, ...]
    outputs: tuple[str, ...] | None  # the output each label feeds, by name (None: in order)
    outputs_as_dict: bool = False  # the model's outputs are a dict (keyed by output name)
    model_outputs: tuple[str, ...] = ()  # the model's output names, in its order
    # each label's row shape when a flat array of that size is reshaped to its output's
    # declared shape (Horovod's KerasEstimator does the same), else None
    label_shapes: tuple = ()

    def x(self, batch: dict):
        return self._arranged(self._values(batch))

    def x_template(self, batch: dict):
        """``x`` of a zero-row ``batch`` as symbolic tensors (what builds the model before
        any row is read): a dimension is unknown where the input declares it unknown, or,
        for a model that declares no inputs (a Sequential without ``Input``, a subclassed
        model), where the column's rows vary in length."""
        return self._arranged([_symbolic(batch[b.column], array, b.shape)
                               for b, array in zip(self.inputs, self._values(batch))])

    def y_template(self, batch: dict):
        """``y`` of a zero-row ``batch`` as symbolic tensors, unknown where rows vary."""
        labels = [batch[c] for c in self.labels]
        return self.arrange_labels([_symbolic(column, array, None)
                                    for column, array in zip(labels, self._labels(batch))])

    def _values(self, batch: dict) -> list:
        return [tensors.to_input(batch[b.column], b.column, b.shape, b.dtype, b.fixed)
                for b in self.inputs]

    def _arranged(self, values: list):
        if self.inputs_as_dict:
            return {b.name: v for b, v in zip(self.inputs, values)}
        return values[0] if len(values) == 1 else tuple(values)

    def y(self, batch: dict):
        return self.arrange_labels(self._labels(batch))

    def _labels(self, batch: dict) -> list:
        shapes = self.label_shapes or (None,) * len(self.labels)
        return [_reshaped(tensors.to_label(batch[c]), shape)
                for c, shape in zip(self.labels, shapes)]

    def arrange_labels(self, values: list):
        """The label columns' values (in ``labels`` order) as the model's outputs take them."""
        if len(values) == 1:
            return values[0]
        if self.outputs is None:
            return tuple(values)
        by_name = dict(zip(self.outputs, values))
        if self.outputs_as_dict:
            return by_name
        # a list of outputs takes a list of labels: Keras's own fit fails on a dict of
        # labels with sample weights there (its loss looks the weights up by position)
        return tuple(by_name[name] for name in self.model_outputs)

    @property
    def input_mapping(self) -> dict[str, str]:
        """Column -> model input name."""
        return {b.column: b.name for b in self.inputs}


def declared_inputs(model) -> list[tuple[str, tuple | None, str | None]]:
    """(name, shape without batch or None, dtype or None) of each model input, in the
    model's order; empty when the model does not declare them (subclassed, unbuilt)."""
    try:
        tensors = model.inputs or []
    except (AttributeError, ValueError):
        return []
    struct = getattr(model, "_inputs_struct", None)
    if isinstance(struct, dict) and len(struct) == len(tensors):
        named = list(struct.items())  # model.inputs flattens a dict in sorted key order
    else:
        named = [(getattr(t, "name", "") or f"input_{i}", t) for i, t in enumerate(tensors)]
    out = []
    for name, tensor in named:
        shape = tuple(tensor.shape[1:])
        dtype = getattr(tensor, "dtype", None)
        out.append((name, shape, None if dtype is None else str(getattr(dtype, "name", dtype))))
    return out


def output_names(model) -> list[str] | None:
    """The model's output names in order (Keras 3 functional models), else None."""
    try:
        names = list(model.output_names or [])
    except (AttributeError, ValueError, TypeError):
        return None
    return names or None


def bind(model, feature_columns: Sequence[str], label_columns: Sequence[str],
         infos: dict, spark_types: dict | None = None, missing: str | None = None) -> Bindings:
    """The model's ``Bindings`` for these columns; ``FeedError`` naming the column when one
    cannot become what its input declares (``infos``: column -> ``ColumnInfo`` over
    every task's rows, i.e. ``ctx.feedSpec``). ``missing``: the features column the
    DataFrame lacks, when the columns were not chosen (then inputs match by name only)."""
    infos = {k: v if isinstance(v, ColumnInfo) else ColumnInfo.from_json(v)
             for k, v in (infos or {}).items()}
    declared = declared_inputs(model)
    struct = getattr(model, "_inputs_struct", None)
    if declared:
        pairs = _match_inputs(declared, list(feature_columns), missing)
    else:  # a subclassed model: the columns in order, shapes taken as they come
        pairs = [(c, (c, None, None)) for c in feature_columns]
    inputs = []
    for column, (name, shape, dtype) in pairs:
        info = infos.get(column)
        if info is not None:
            tensors.check_input(column, info, (spark_types or {}).get(column, info.dtype),
                                name, shape, dtype)
        inputs.append(InputBinding(column, name, shape, dtype,
                                   fixed=bool(info is not None and info.vector)))
    outputs, names = None, output_names(model)
    if len(label_columns) > 1:
        outputs = _match_outputs(names, list(label_columns))
    return Bindings(tuple(inputs), isinstance(struct, dict), tuple(label_columns), outputs,
                    isinstance(getattr(model, "_outputs_struct", None), dict),
                    tuple(names or ()),
                    _label_shapes(model, list(label_columns), outputs, names, infos))


def _symbolic(column, array, declared):
    """``keras_steps.symbolic`` of a zero-row column as fed (``array``): unknown where
    ``declared`` (None: nothing declared) is, or else along the rows' varying length."""
    if declared is None and isinstance(column, Padded):
        declared = (None, *array.shape[2:])
    return keras_steps.symbolic(array, declared)


def _reshaped(labels, shape):
    return labels if shape is None else labels.reshape((len(labels), *shape))


def _label_shapes(model, labels: list[str], outputs, names, infos: dict) -> tuple:
    """Labels follow the inputs' rule: a flat array label whose size is the product of
    its output's declared shape is reshaped to it; another size is refused, naming the
    column and the shape."""
    try:
        declared = [tuple(t.shape[1:]) for t in model.outputs]
    except (AttributeError, ValueError, TypeError):
        return ()
    by_name = dict(zip(names or (), declared))
    shapes = []
    for i, label in enumerate(labels):
        shape = (by_name.get(outputs[i]) if outputs and names else
                 declared[i] if i < len(declared) else None)
        info = infos.get(label)
        shapes.append(_label_shape(label, info, shape))
    return tuple(shapes)


def _label_shape(label: str, info: ColumnInfo | None, shape: tuple | None):
    """The row shape ``label`` is reshaped to, or None to keep it as it comes: the
    output's shape when the label holds as many values a row (flat or nested), or
    (sparse class labels) the output's shape but its last axis. For an output of one
    axis any other label goes to Keras as it is (class ids; a custom loss's own labels,
    such as ``[target, mask]``); for an output of more axes, a label whose length varies
    or of another size is refused, naming the column and the output's shape."""
    if info is None or shape is None or any(d is None for d in shape):
        return None
    row = tuple(info.shape)
    size = math.prod(shape)
    if row == tuple(shape):
        return None
    if None not in row and math.prod(row) == size:
        return shape
    if len(shape) < 2:
        return None
    if None not in row and math.prod(row) == math.prod(shape[:-1]):
        return shape[:-1]
    raise FeedError(
        f"Label column '{label}' holds {info.rows()}, but its output declares shape "
        f"{shape} ({size} values a row). Give the label {size} values in every row (an "
        "array of that size, flat or nested, is reshaped to the output's shape), or change "
        "the output.")


def _match_inputs(declared, feature_columns: list[str],
                  missing: str | None = None) -> list[tuple[str, tuple]]:
    """By name when every input is named after a column, else in order (unless the
    columns were not chosen: ``missing``)."""
    names = [d[0] for d in declared]
    if set(names) <= set(feature_columns) and (len(feature_columns) > 1 or missing):
        return [(d[0], d) for d in declared]
    if len(declared) == len(feature_columns) and not missing:
        return list(zip(feature_columns, declared))
    absent = [n for n in names if n not in feature_columns]
    if missing:
        raise FeedError(
            f"The DataFrame has no '{missing}' column and inputCols is not set, so each "
            f"model input is fed from the column of its name, but the model's input(s) "
            f"{absent} have no column of that name (the columns are {feature_columns}). Set "
            "featuresCol or inputCols, or name the model's inputs after columns "
            "(keras.Input(name='age')).")
    raise FeedError(
        f"The model has {len(declared)} input(s) {names} but the feature columns are "
        f"{feature_columns}; input(s) {absent} have no column of that name. Name the "
        "model's inputs after columns (keras.Input(name='age')), or set inputCols to one "
        "column per input, in the model's input order.")


def _match_outputs(names: list[str] | None, labels: list[str]) -> tuple[str, ...] | None:
    if names is None:
        return None  # in order, as a tuple
    if set(labels) <= set(names) and len(labels) == len(names):
        return tuple(labels)
    if len(names) != len(labels):
        raise FeedError(f"labelCols has {len(labels)} column(s) {labels} but the model has "
                        f"{len(names)} output(s) {names}: give one label column per output, "
                        "named after the output or in the outputs' order.")
    return tuple(names)

