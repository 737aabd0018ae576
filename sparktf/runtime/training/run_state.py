"""What a fit's checkpoint holds beyond its variables, so that a resumed or relaunched fit
is the uninterrupted one: Keras's random state (every ``SeedGenerator``: Dropout,
GaussianNoise, augmentation layers, ``keras.random`` calls given a generator, and the
global one), whether a callback stopped the training, and what Keras's callbacks keep
from epoch to epoch (``EarlyStopping``'s patience and best weights, ``ReduceLROnPlateau``'s
counters): their attributes of plain data that the epochs changed.

Everything here is JSON (the callbacks' state as base64 of a pickle of plain values), kept
in the checkpoint's ``state.json``.
"""

from __future__ import annotations

import base64
import logging
import pickle
import types

import numpy as np

logger = logging.getLogger("sparktf")

# Attributes of Keras's callbacks that are settings or objects, not the epochs' state; and
# EarlyStopping's comparison, made from the settings at its first epoch (it negates
# min_delta then): a resumed callback makes it again from the settings it is given now
_NOT_STATE = frozenset({"model", "_model", "params", "verbose", "min_delta", "monitor_op"})
_PLAIN = (bool, int, float, str, bytes, type(None), np.ndarray, np.generic)


def seed_generators(model) -> list:
    """The model's ``SeedGenerator``s in a fixed order (its layers', depth first), then
    Keras's global one if it exists; [] for a tf_keras model."""
    flatten = getattr(model, "_flatten_layers", None)
    if flatten is None or not hasattr(model, "_seed_generators"):
        return []
    found, seen = [], set()
    for layer in flatten(include_self=True, recursive=True):
        for generator in getattr(layer, "_seed_generators", ()):
            if id(generator) not in seen:
                seen.add(id(generator))
                found.append(generator)
    from keras.src.backend.common import global_state
    glob = global_state.get_global_attribute("global_seed_generator")
    if glob is not None and id(glob) not in seen:
        found.append(glob)
    return found


def global_seed_generator() -> None:
    """Creates Keras's global seed generator now, outside any traced step: a layer that
    draws ``keras.random`` without a generator of its own would create its variable in
    the step's ``tf.function``, which refuses it once traced again (each batch shape)."""
    from keras.src.random.seed_generator import global_seed_generator

    global_seed_generator()


def seeds(model) -> list[list[int]]:
    """Each seed generator's state (its seed and how far it has drawn)."""
    return [[int(v) for v in np.asarray(g.state.numpy()).ravel()]
            for g in seed_generators(model)]


def restore_seeds(model, saved: list[list[int]] | None) -> None:
    """Puts the seed generators back where the checkpoint found them."""
    if not saved:
        return
    generators = seed_generators(model)
    if len(generators) + 1 == len(saved):  # Keras's global one, not drawn from yet here
        from keras.src.random.seed_generator import global_seed_generator
        generators.append(global_seed_generator())
    if len(generators) != len(saved):
        logger.warning("sparktf: the checkpoint holds %d random generators and the model %d: "
                       "its random layers start afresh", len(saved), len(generators))
        return
    for generator, state in zip(generators, saved):
        generator.state.assign(np.asarray(state, dtype=generator.state.dtype))


def snapshot(callbacks) -> list[dict]:
    """Each callback's plain attributes as they are now (after ``on_train_begin``): what
    ``callbacks_state`` keeps is what the epochs changed since, not the settings."""
    return [pickle.loads(pickle.dumps(_plain_attributes(c))) for c in callbacks]


def callbacks_state(callbacks, initial: list[dict]) -> str:
    """For each callback, its class and the plain-data attributes (numbers, strings,
    arrays, lists of them: counters, best values, best weights) that changed since
    ``initial`` (``snapshot``), as base64 of a pickle."""
    states = []
    for callback, before in zip(callbacks, initial):
        changed = {name: value for name, value in _plain_attributes(callback).items()
                   if name not in before or _bytes(value) != _bytes(before[name])}
        states.append((_class_name(callback), changed))
    return base64.b64encode(pickle.dumps(states)).decode()


def restore_callbacks(callbacks, saved: str | None) -> None:
    """Gives each callback what the checkpoint kept of the callback of its class at its
    place among those of its class (a callback added, removed or moved starts afresh);
    call it after ``on_train_begin``, which resets them. Its settings stay as given now."""
    if not saved:
        return
    states = pickle.loads(base64.b64decode(saved))  # noqa: S301 - written by this fit
    kept: dict[str, list[dict]] = {}
    for name, changed in states:
        kept.setdefault(name, []).append(changed)
    seen: dict[str, int] = {}
    for callback in callbacks:
        name = _class_name(callback)
        index = seen[name] = seen.get(name, -1) + 1
        if index < len(kept.get(name, ())):
            for attribute, value in kept[name][index].items():
                setattr(callback, attribute, value)
        else:
            logger.warning("sparktf: %s has no state in the checkpoint (a callback added "
                           "since the checkpointed attempt): it starts afresh", name)


def _class_name(callback) -> str:
    kind = type(callback)
    return f"{kind.__module__}.{kind.__qualname__}"


def _bytes(value) -> bytes:
    return pickle.dumps(value)


def _plain_attributes(callback) -> dict:
    return {name: value for name, value in vars(callback).items()
            if name not in _NOT_STATE and _is_plain(value)}


def _is_plain(value) -> bool:
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType)):
        # set with what it goes with (EarlyStopping's monitor_op with the min_delta it
        # negated): a module's function, which pickles by name; not a lambda
        try:
            pickle.dumps(value)
        except (pickle.PicklingError, AttributeError, TypeError):
            return False
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain(v) for k, v in value.items())
    return isinstance(value, _PLAIN) and not (isinstance(value, np.ndarray)
                                              and value.dtype == object)
