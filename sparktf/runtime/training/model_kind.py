"""What a compiled Keras model predicts, read from its loss: the kind of its scores (the
columns a ``TFModel`` makes of them) and the labels its classes can take."""

from __future__ import annotations


def prediction_kind(model) -> tuple[str, bool]:
    """('regression' | 'binary' | 'multiclass' | 'auto', from_logits) from the compiled loss."""
    loss = getattr(model, "loss", None)
    if isinstance(loss, (dict, list, tuple)) or loss is None:
        return "auto", False
    name = loss if isinstance(loss, str) else getattr(loss, "name", None) or \
        getattr(loss, "__name__", type(loss).__name__)
    config = loss.get_config() if hasattr(loss, "get_config") else {}
    from_logits = bool(config.get("from_logits", False))
    name = str(name).lower()
    if "binary" in name:
        return "binary", from_logits
    if "categorical" in name:
        return "multiclass", from_logits
    return "regression", False


def check_class_labels(model, labels_min: float, labels_max: float, all_integers: bool,
                       column: str) -> None:
    """Raises ``ValueError`` if class labels cannot index the model's output classes."""
    kind, _ = prediction_kind(model)
    try:
        width = int(model.outputs[0].shape[-1])
    except (AttributeError, IndexError, TypeError, ValueError):
        return
    if kind != "multiclass" or width < 2 or "sparse" not in str(model.loss).lower():
        return
    if not all_integers or labels_min < 0 or labels_max >= width:
        raise ValueError(f"Label column '{column}' holds values from {labels_min:g} to "
                         f"{labels_max:g}, but the model has {width} output classes: labels "
                         f"must be integers in [0, {width - 1}]. Re-index the labels (e.g. "
                         "StringIndexer) or widen the output layer.")
