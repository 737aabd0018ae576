"""``"auto"`` for ``metricMode`` (``HalvingSearch``) and ``keepBestMode`` (``TFEstimator``):
the direction Keras gives the metric in the model ``modelFn`` builds (``directions``),
decided on the driver before any job; a metric whose direction cannot be known is refused,
asking for the mode."""

from __future__ import annotations

from sparktf.errors import InvalidInputError
from sparktf.ml.runs import identity
from sparktf.runtime.training import directions


def is_loss(metric: str) -> bool:
    """``loss`` or ``val_loss``: minimised, whatever the model."""
    return metric.removeprefix("val_") == "loss"


def larger_is_better(model, metric: str, asked: dict, mode: str, whose: str = "",
                     error: BaseException | None = None) -> bool:
    """Whether a larger ``metric`` is better for ``model`` (built on the driver; None when
    ``error`` stopped it), as Keras decides ``mode="auto"``. ``asked``: the Param naming
    the metric and its value, for the message; ``mode``: the Param to set instead;
    ``whose``: which model, for the message (" for trial 1 (units=4)")."""
    if is_loss(metric):
        return False
    (param, value), = asked.items()
    received = f"Received: {param}={value!r}, {mode}='auto'"
    fix = (f"Set {mode}='max' or {mode}='min', whichever is better for {metric!r}")
    if model is None:
        raise InvalidInputError(
            f"{mode}='auto' takes the direction of {metric!r} from the model modelFn "
            f"builds{whose}, which could not be built on the driver "
            f"({type(error).__name__}: {error}). {fix}. {received}")
    found = directions.directions(model)
    name = metric.removeprefix("val_")
    if found.get(name) is None:
        known = ", ".join(f"{k} ({'max' if v == directions.UP else 'min'})"
                          for k, v in found.items() if v is not None)
        said = ("Keras gives it no direction (a count, a mean, a value of the model's own "
                "train step)") if name in found else \
            f"the model logs no {name!r} that sparktf can find among its metrics"
        raise InvalidInputError(
            f"{mode}='auto' takes the direction of {metric!r} from the Keras metric of "
            f"that name in the model modelFn builds{whose}, and {said}; the values whose "
            f"direction is known: {known}. {fix}. {received}")
    return found[name] == directions.UP


def keep_best_mode(est) -> str:
    """``keepBestMode`` as the fit's tasks take it: ``"min"`` or ``"max"`` (``"auto"``
    decided here, from the model ``modelFn`` builds on the driver)."""
    best, mode = est.getKeepBest(), est.getKeepBestMode()
    if best is None or mode != "auto":
        return mode
    model, error = None, None
    if not is_loss(best):
        model, _, error = identity.built(est.getModelFn(), est.hparams())
    larger = larger_is_better(model, best, {"keepBest": best}, "keepBestMode", error=error)
    return "max" if larger else "min"
