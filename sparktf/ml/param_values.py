"""What each Param of ``TFEstimator`` and ``TFModel`` accepts (``params``): converters that
reject a bad value when it is set, with messages in the house form: what was expected,
then ``Received: name=value``."""

from __future__ import annotations

import math
import os
from typing import Any, Callable

from pyspark.ml.param import Param, Params, TypeConverters

from sparktf._driver.resources import positive_number
from sparktf.errors import InvalidInputError
from sparktf.ml.persistence import check_picklable


def int_at_least(name: str, low: int) -> Callable[[Any], int]:
    def convert(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) and not (
                isinstance(value, float) and value.is_integer()):
            raise InvalidInputError(f"{name} must be an integer >= {low}. "
                                    f"Received: {name}={value!r}")
        if int(value) < low:
            raise InvalidInputError(f"{name} must be >= {low}. Received: {name}={value!r}")
        return int(value)
    return convert


def positive_float(name: str, what: str = "a positive number") -> Callable[[Any], float]:
    return lambda value: positive_number(name, value, what)


def location(value: Any) -> str:
    """A URI or path (``modelDir``, ``modelPath``); a relative path is made absolute against
    the driver's working directory, where the user means it: an executor's is another."""
    value = TypeConverters.toString(value)
    if value and "://" not in value and ":/" not in value and not value.startswith("file:") \
            and not os.path.isabs(value):
        return os.path.abspath(value)
    return value


def verbosity(value: Any) -> int:
    if isinstance(value, bool) or value not in (0, 1, 2):
        raise InvalidInputError("verbose must be 0 (silent), 1 (progress bar and one line per "
                                f"epoch) or 2 (one line per epoch). Received: verbose={value!r}")
    return int(value)


def fraction(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise InvalidInputError("validationFraction must be in [0, 1). "
                                f"Received: validationFraction={value!r}")
    return float(value)


def callable_or_none(name: str) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        if value is not None and not callable(value):
            raise InvalidInputError(f"{name} must be a callable. Received: {name}={value!r}")
        return value
    return convert


def choice(name: str, choices: tuple) -> Callable[[Any], Any]:
    def convert(value: Any) -> Any:
        if isinstance(value, str):
            value = value.lower()
        if value not in choices:
            raise InvalidInputError(f"{name} must be one of {list(choices)}. "
                                    f"Received: {name}={value!r}")
        return value
    return convert


def column_list(name: str) -> Callable[[Any], list]:
    def convert(value: Any) -> list:
        if isinstance(value, str) or not isinstance(value, (list, tuple)) or not value or \
                not all(isinstance(v, str) for v in value) or len(set(value)) != len(value):
            raise InvalidInputError(f"{name} must be a non-empty list of distinct column "
                                    f"names. Received: {name}={value!r}")
        return list(value)
    return convert


def str_dict(name: str) -> Callable[[Any], dict]:
    def convert(value: Any) -> dict:
        if not isinstance(value, dict):
            raise InvalidInputError(f"{name} must be a dict. Received: {name}={value!r}")
        return dict(value)
    return convert


def hyper_params(value: Any) -> dict:
    value = str_dict("hyperParams")(value)
    check_picklable("hyperParams", value)  # saved exactly as set, as modelFn is
    return value


def class_weight(value: Any) -> dict:
    """Keras's ``class_weight``: class index -> non-negative weight. Keys may be strings
    of integers (as JSON persistence gives them back)."""
    if not isinstance(value, dict) or not value:
        raise InvalidInputError("classWeight must be a non-empty dict class index -> weight, "
                                "e.g. {0: 1.0, 1: 5.0}. Received: "
                                f"classWeight={value!r}")
    out = {}
    for key, weight in value.items():
        try:
            index = int(key)
        except (TypeError, ValueError):
            index = None
        if index is None or index < 0 or isinstance(key, bool) or (
                isinstance(key, float) and not key.is_integer()):
            raise InvalidInputError("classWeight keys must be class indices (integers >= 0). "
                                    f"Received: classWeight={value!r}")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or \
                not math.isfinite(weight) or weight < 0:
            raise InvalidInputError(f"classWeight values must be finite numbers >= 0. Received: "
                                    f"classWeight[{key!r}]={weight!r}")
        out[index] = float(weight)
    return out


def callback_list(value: Any) -> list:
    items = list(value) if isinstance(value, (list, tuple)) else None
    if items is None:
        raise InvalidInputError(f"callbacks must be a list of keras.callbacks.Callback. "
                                f"Received: callbacks={value!r}")
    for cb in items:
        if not hasattr(cb, "on_epoch_end"):
            raise InvalidInputError("callbacks must hold keras.callbacks.Callback objects. "
                                    f"Received an item of type {type(cb).__name__}")
    return items


def new_param(name: str, doc: str, converter: Callable[[Any], Any]) -> Param:
    return Param(Params._dummy(), name, doc, typeConverter=converter)
