"""Which way each value of a fit's history is better: Keras's own direction for each metric
of the compiled model, as its ``MonitorCallback(mode="auto")`` (``EarlyStopping``,
``ModelCheckpoint``) decides it.

A Keras 3 metric says its direction itself (``_direction``: ``"up"`` or ``"down"``);
``loss`` and each output's ``<output>_loss`` are minimised. Keras finds a monitored name
among the compiled metrics by their own names, which a multi-output model's logs prefix
with the output's name (``kind_accuracy``) and number when two share one
(``accuracy_1``): here every key is the logs' own, so each output's metrics have their
direction too. A string metric (``"accuracy"``) is an object only once the compiled
metrics are built: ``directions`` builds them from the model's declared inputs, as the
first batch of its fit would. A tf_keras model's metrics carry no direction: each takes
the direction of the Keras 3 metric of its class (or function). A value no metric gives a
direction to (a count such as ``true_positives``, a ``Mean``, a custom train step's own
values) has none: the caller asks for the mode.

Used on the driver before any job (``metricMode``, ``keepBestMode``) and by ``keepBest``'s
callback.
"""

from __future__ import annotations

UP, DOWN = "up", "down"


def larger_is_better(model, monitor: str) -> bool | None:
    """Whether a larger ``monitor`` (a key of the history, ``val_`` or not) is better for
    ``model``; None when no direction can be known."""
    direction = directions(model).get(monitor.removeprefix("val_"))
    return None if direction is None else direction == UP


def directions(model) -> dict[str, str | None]:
    """Each key the fit of ``model`` logs (without ``val_``) -> ``"up"``, ``"down"``, or
    None where it has no direction. Builds the compiled metrics and losses it can."""
    if _is_tf_keras(model):
        return _tf_keras_directions(model)
    found: dict[str, str | None] = {"loss": DOWN}
    if not getattr(model, "compiled", False):
        return found
    _build_compiled(model)
    compile_loss = getattr(model, "_compile_loss", None)
    loss_trackers = [id(m) for m in getattr(compile_loss, "metrics", None) or []]
    # in model.metrics' order: the logs take each metric's result in it, a later key over
    # an earlier one
    for metric in model.metrics:
        if metric is getattr(model, "_loss_tracker", None) or id(metric) in loss_trackers:
            found[metric.name] = DOWN
        elif hasattr(metric, "_flat_metrics"):  # CompileMetrics
            found.update(_compiled_names(metric))
        elif hasattr(metric, "output_name") and isinstance(getattr(metric, "metrics", None),
                                                           list):  # a MetricsList
            found.update({m.name: _direction(m) for m in metric.metrics})
        else:
            found[metric.name] = _direction(metric)
    return found


def _direction(metric) -> str | None:
    direction = getattr(metric, "_direction", None)
    return direction if direction in (UP, DOWN) else None


def _compiled_names(compiled) -> dict[str, str | None]:
    """The compiled metrics under the names their results take in the logs, as
    ``CompileMetrics.result`` names them (output prefix, ``_1`` for a repeated name,
    ``weighted_`` for a weighted metric named as an unweighted one)."""
    if not getattr(compiled, "built", False):
        return {}
    found: dict[str, str | None] = {}
    counts: dict[str, int] = {}
    for lists, weighted in ((compiled._flat_metrics, False),
                            (compiled._flat_weighted_metrics, True)):
        for metrics in lists or []:
            for metric in (metrics.metrics if metrics else []):
                prefix = f"{metrics.output_name}_" if metrics.output_name else ""
                name = prefix + metric.name
                if name in counts and weighted:
                    name = prefix + "weighted_" + metric.name
                if name in counts:
                    counts[name] += 1
                    name = f"{name}_{counts[name] - 1}"
                else:
                    counts[name] = 1
                found[name] = _direction(metric)
    return found


def _build_compiled(model) -> None:
    """Builds the model's compiled metrics and losses as its fit's first batch would, from
    the model's declared inputs (the labels taken as shaped as the outputs: a string
    metric's kind, sparse or not, never changes its direction); where the inputs are not
    declared (a subclassed model never called), as for one output."""
    metrics, losses = getattr(model, "_compile_metrics", None), \
        getattr(model, "_compile_loss", None)
    unbuilt = [c for c in (metrics, losses) if c is not None and not c.built]
    if not unbuilt:
        return
    y_pred = _output_spec(model)
    if y_pred is None:
        # a model of no declared inputs (a subclassed one, a Sequential without Input):
        # one output of any shape gives each metric its kind, and a kind its direction
        from keras.src import backend

        y_pred = backend.KerasTensor((None, 1), "float32")
    for compiled in unbuilt:
        try:
            compiled.build(y_pred, y_pred)
        except Exception:  # noqa: BLE001 - metrics the fit itself would refuse: no direction
            pass


def _output_spec(model):
    """The model's outputs as symbolic tensors, or None when its inputs are not declared."""
    from keras.src import backend, tree

    inputs = getattr(model, "_inputs_struct", None)
    if inputs is None:  # a Sequential model keeps them in its functional twin
        inputs = getattr(getattr(model, "_functional", None), "_inputs_struct", None)
    if inputs is None:
        return None
    x = tree.map_structure(lambda t: backend.KerasTensor(t.shape, t.dtype), inputs)
    try:
        return backend.compute_output_spec(model, x)
    except Exception:  # noqa: BLE001 - a model that cannot be traced here: no direction
        return None


def _is_tf_keras(model) -> bool:
    return any(base.__module__.startswith("tf_keras") for base in type(model).__mro__)


def _tf_keras_directions(model) -> dict[str, str | None]:
    """A tf_keras model's values: its losses minimised, each metric in the direction of
    the Keras 3 metric of its class (a wrapped function: of the function's name)."""
    found: dict[str, str | None] = {"loss": DOWN}
    compiled_metrics = getattr(model, "compiled_metrics", None)
    compiled_loss = getattr(model, "compiled_loss", None)
    outputs = getattr(model, "outputs", None)
    builds = ((compiled_metrics, (outputs, outputs)), (compiled_loss, (outputs,)))
    for container, args in builds if outputs else ():
        if container is not None and not getattr(container, "_built", True):
            try:
                container.build(*args)
            except Exception:  # noqa: BLE001 - refused by the fit too: no direction
                pass
    losses = [id(m) for m in getattr(compiled_loss, "metrics", None) or []]
    for metric in model.metrics:
        found[metric.name] = DOWN if id(metric) in losses else _keras3_direction(metric)
    return found


def _keras3_direction(metric) -> str | None:
    """The direction of the Keras 3 metric that a tf_keras metric is."""
    import keras

    try:
        function = getattr(metric, "_fn", None)
        if type(metric).__name__ == "MeanMetricWrapper" and function is not None:
            twin = keras.metrics.get(function.__name__)
        else:
            twin = getattr(keras.metrics, type(metric).__name__).from_config(
                metric.get_config())
    except Exception:  # noqa: BLE001 - no Keras 3 metric of that kind: no direction
        return None
    return _direction(twin)
