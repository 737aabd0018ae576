"""What a ``modelFn`` builds, as a run recognises it: the model's class, its architecture
and compile configuration as Keras serialises them, its optimizer's configuration and its
variables' shapes, built on the driver with layer names counted afresh (as a task's fresh
process counts them). Source text is no identity: a ``functools.partial``, a callable
instance or a closure over ``"relu"`` has none, or the same one for another model."""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import logging
import random
import re

logger = logging.getLogger("sparktf")

_AUTO_NAME = re.compile(r"_\d+$")
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def model_identity(model_fn, hparams: dict) -> dict:
    """The model ``model_fn(hparams)`` builds, as JSON (``describe``); a digest of the
    function's pickle where it cannot be built here (a driver without Keras, say)."""
    try:
        with _fresh_names(), _own_random_state():
            model = model_fn(dict(hparams))
        return describe(model)
    except Exception as e:  # noqa: BLE001 - any failure: recognised by its pickle instead
        import cloudpickle

        logger.info("sparktf: modelFn could not build its model on the driver (%s: %s): the "
                    "run recognises it by its pickle", type(e).__name__, e)
        digest = hashlib.sha256(cloudpickle.dumps(model_fn)).hexdigest()
        return {"pickle": digest}


def describe(model) -> dict:
    """``model`` as JSON: class, architecture, compile and optimizer configuration, and the
    shape and dtype of each variable, in order."""
    kind = type(model)
    out = {"class": f"{kind.__module__}.{kind.__qualname__}"}
    for key, read in (("config", model.get_config),
                      ("compile", getattr(model, "get_compile_config", None)),
                      ("optimizer", getattr(getattr(model, "optimizer", None), "get_config",
                                            None))):
        try:
            out[key] = _json(read()) if read is not None else None
        except Exception:  # noqa: BLE001 - a subclassed model without get_config
            out[key] = None
    out["variables"] = [[list(map(_dim, v.shape)), str(v.dtype)] for v in model.weights]
    if "tf_keras" in kind.__module__ or any(b.__module__.startswith("tf_keras")
                                            for b in kind.__mro__):
        out = _strip_auto_names(out)  # tf_keras counts names per graph: no fresh count
    return out


def differences(before: dict, now: dict, limit: int = 3) -> list[str]:
    """Where two ``describe`` outputs differ, as ``path: then -> now`` (at most ``limit``)."""
    found: list[str] = []
    _walk(before, now, "", found, limit)
    return found


def _walk(a, b, path: str, found: list, limit: int) -> None:
    if len(found) >= limit or a == b:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted({*a, *b}, key=str):
            _walk(a.get(key), b.get(key), f"{path}.{key}" if path else str(key), found, limit)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            _walk(x, y, f"{path}[{i}]", found, limit)
    else:
        found.append(f"{path or 'the model'}: {_short(a)} then, {_short(b)} now")


def _short(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _json(value):
    return json.loads(json.dumps(value, default=_no_address, sort_keys=True))


def _no_address(value) -> str:
    """An object Keras could not serialise, by its repr without its memory address."""
    return _ADDRESS.sub("", repr(value))


def _dim(d):
    return None if d is None else int(d)


def _strip_auto_names(value):
    if isinstance(value, dict):
        return {k: _strip_auto_names(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strip_auto_names(v) for v in value]
    return _AUTO_NAME.sub("", value) if isinstance(value, str) else value


@contextlib.contextmanager
def _fresh_names():
    """Keras 3 names layers with counters global to the process (``dense_7`` after six
    others): count from zero while the model is built, as a task's process does, and give
    the driver its own counters back after."""
    try:
        from keras.src.backend.common import global_state
    except ImportError:
        yield
        return
    before = global_state.get_global_attribute("object_name_uids")
    global_state.set_global_attribute("object_name_uids", collections.defaultdict(int))
    try:
        yield
    finally:
        global_state.set_global_attribute("object_name_uids", before)


@contextlib.contextmanager
def _own_random_state():
    """A ``modelFn`` that seeds (``keras.utils.set_random_seed``) leaves Python's and
    NumPy's random state of the driver as it found them."""
    import numpy as np

    python, numpy = random.getstate(), np.random.get_state()
    try:
        yield
    finally:
        random.setstate(python)
        np.random.set_state(numpy)
