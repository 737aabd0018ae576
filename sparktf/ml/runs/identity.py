"""What a ``modelFn`` builds, as a run recognises it: the model's class, its architecture
and compile configuration as Keras serialises them, its optimizer's configuration and its
variables' shapes, built on the driver with layer names counted afresh (as a task's fresh
process counts them). Source text is no identity: a ``functools.partial``, a callable
instance or a closure over ``"relu"`` has none, or the same one for another model."""

from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import json
import logging
import os
import random
import re
import sys
import sysconfig
import threading
import types

import numpy as np

from sparktf.runtime import tf_startup

logger = logging.getLogger("sparktf")

_BUILDING = threading.Lock()
_AUTO_NAME = re.compile(r"_\d+$")
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def model_identity(model_fn, hparams: dict) -> dict:
    """The model ``model_fn(hparams)`` builds, as JSON (``describe``); a digest of the
    function's pickle where it cannot be built here (a driver without Keras, say)."""
    return built(model_fn, hparams)[1]


def built(model_fn, hparams: dict) -> tuple:
    """``(model, model_identity, None)``: the model ``model_fn(hparams)`` builds here, as a
    task's fresh process would, and what it is; ``(None, its code's identity, the error)``
    where it cannot be built on the driver."""
    try:
        # one build at a time: the driver's random state is the process's (parallel fits)
        with _BUILDING, _fresh_names(), _own_random_state(), tf_startup.quiet_start():
            model = model_fn(hparams if isinstance(hparams, KeysRead) else dict(hparams))
        return model, describe(model), None
    except Exception as e:  # noqa: BLE001 - any failure: recognised by its code instead
        logger.info("sparktf: modelFn could not build its model on the driver (%s: %s): the "
                    "run recognises it by its code", type(e).__name__, e)
        return None, {"modelFn": code_identity(model_fn)}, e


class KeysRead(dict):
    """``hparams`` that note which keys ``modelFn`` read (``read``), so what its model can
    depend on; every key, once it iterated, copied, compared or printed the whole dict
    (``dict(hparams)``, ``**hparams``, ``json.dumps``). Passed to ``built`` as it is."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.read: set = set()

    def _whole(self):
        self.read.update(dict.keys(self))

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)

    def __contains__(self, key):
        self.read.add(key)
        return super().__contains__(key)

    def pop(self, key, *default):
        self.read.add(key)
        return super().pop(key, *default)

    def setdefault(self, key, default=None):
        self.read.add(key)
        return super().setdefault(key, default)


def _reads_whole(name: str):
    method = getattr(dict, name)

    def whole(self, *args, **kwargs):
        self._whole()
        return method(self, *args, **kwargs)

    whole.__name__ = name
    return whole


for _name in ("__iter__", "keys", "items", "values", "copy", "popitem", "__repr__",
              "__eq__", "__ne__", "__or__", "__ror__", "__reduce__", "__reduce_ex__"):
    setattr(KeysRead, _name, _reads_whole(_name))


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
    out["config"] = _without_lambda_code(out["config"])
    out["variables"] = [[list(map(_dim, v.shape)), str(v.dtype)] for v in model.weights]
    # what the configuration cannot say: the code of the user's own classes (a subclassed
    # model is its code), Lambda layers' functions and a loss of the user's own, with
    # the values their closures hold
    layers = model._flatten_layers(include_self=True, recursive=True) \
        if hasattr(model, "_flatten_layers") else [model, *getattr(model, "layers", [])]
    classes = list(dict.fromkeys(type(layer) for layer in layers))
    out["code"] = {
        "classes": [code_identity(c) for c in classes if not _library(c)],
        "lambdas": [code_identity(layer.function) for layer in layers
                    if hasattr(layer, "function") and callable(layer.function)],
        "loss": code_identity(getattr(model, "loss", None)),
    }
    if "tf_keras" in kind.__module__ or any(b.__module__.startswith("tf_keras")
                                            for b in kind.__mro__):
        out = _strip_auto_names(out)  # tf_keras counts names per graph: no fresh count
    return out


def code_identity(obj, depth: int = 0, seen: set | None = None):
    """``obj`` as JSON that two driver processes agree on: a function as its bytecode,
    constants, names and the values its closure and defaults hold (not its file or line:
    a notebook cell's file changes with each kernel); a partial as its function and
    arguments; a class of the user's own as its methods; an instance as its class and
    plain attributes; plain values as themselves; a library's function or class (Keras,
    TensorFlow, anything installed) by name."""
    seen = set() if seen is None else seen
    if depth > 8:
        return _name(obj)
    if isinstance(obj, (types.FunctionType, type)) or hasattr(obj, "__dict__"):
        if id(obj) in seen:  # met before (a class whose method names it): by name
            return {"seen": _name(obj)}
        seen.add(id(obj))
    deeper = depth + 1
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, (set, frozenset)):  # in an order that is not the process's hashes'
        return {"set": sorted(json.dumps(code_identity(v, deeper, seen), sort_keys=True)
                              for v in obj)}
    if isinstance(obj, (list, tuple)):
        items = [code_identity(v, deeper, seen) for v in obj]
        if len(items) > _LONGEST:  # a data set in a closure: its digest, not its values
            return {"items": len(items), "digest": hashlib.sha256(
                json.dumps(items, sort_keys=True).encode()).hexdigest()}
        return items
    if isinstance(obj, dict):
        return {str(k): code_identity(v, deeper, seen)
                for k, v in sorted(obj.items(), key=str)}
    if isinstance(obj, functools.partial):
        return {"partial": code_identity(obj.func, deeper, seen),
                "args": code_identity(list(obj.args), deeper, seen),
                "keywords": code_identity(obj.keywords, deeper, seen)}
    if isinstance(obj, types.MethodType):
        return {"method": code_identity(obj.__func__, deeper, seen),
                "of": code_identity(obj.__self__, deeper, seen)}
    if isinstance(obj, types.FunctionType):
        if _library(obj):
            return _name(obj)
        closure = [c.cell_contents for c in obj.__closure__ or ()
                   if _filled(c)]
        return {"function": obj.__qualname__, "code": _code(obj.__code__),
                "closure": code_identity(closure, deeper, seen),
                "defaults": code_identity(list(obj.__defaults__ or ()), deeper, seen)}
    if isinstance(obj, type):
        if _library(obj):
            return _name(obj)
        return {"class": obj.__qualname__,
                "bases": [_name(b) if _library(b) else code_identity(b, deeper, seen)
                          for b in obj.__bases__],
                "members": {k: code_identity(v, deeper, seen)
                            for k, v in sorted(vars(obj).items())
                            if isinstance(v, (types.FunctionType, staticmethod, classmethod))
                            or (isinstance(v, (bool, int, float, str))
                                and not k.startswith("__"))}}  # not __firstlineno__
    if isinstance(obj, (staticmethod, classmethod)):
        return code_identity(obj.__func__, deeper, seen)
    if isinstance(obj, np.ndarray):
        return {"array": hashlib.sha256(np.ascontiguousarray(obj).tobytes()).hexdigest(),
                "shape": list(obj.shape), "dtype": str(obj.dtype)}
    if isinstance(obj, np.generic):
        return obj.item()
    if _library(type(obj)):
        return _name(type(obj))
    return {"instance": code_identity(type(obj), deeper, seen),
            "attributes": code_identity(getattr(obj, "__dict__", {}), deeper, seen)}


def _code(code: types.CodeType) -> dict:
    """Bytecode, constants (nested code included) and names: not the file, line or
    position tables."""
    consts = [_code(c) if isinstance(c, types.CodeType) else
              c if c is None or isinstance(c, (bool, int, float, str)) else
              code_identity(c) if isinstance(c, (frozenset, tuple)) else repr(c)
              for c in code.co_consts]
    return {"bytecode": hashlib.sha256(code.co_code).hexdigest()[:16], "consts": consts,
            "names": list(code.co_names)}


def _filled(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def _library(obj) -> bool:
    """Whether ``obj`` (a function or class) comes from a library: Python's, an installed
    package's, or Keras/TensorFlow/NumPy; not the user's script, notebook or own package."""
    module = getattr(obj, "__module__", None) or ""
    if module == "__main__" or not module:
        return False
    if module.split(".")[0] in _LIBRARIES:
        return True
    loaded = sys.modules.get(module)
    path = getattr(loaded, "__file__", None) or ""
    return not path or any(path.startswith(root) for root in _library_roots())


_LONGEST = 1000  # items of a list kept as they are in run.json; a longer one by digest
_LIBRARIES = {"keras", "tf_keras", "tensorflow", "numpy", "builtins", "functools",
              "operator", "math"}


@functools.lru_cache(maxsize=1)
def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple({os.path.realpath(paths[k]) + os.sep for k in
                  ("stdlib", "platstdlib", "purelib", "platlib")} |
                 {os.path.abspath(paths[k]) + os.sep for k in
                  ("stdlib", "platstdlib", "purelib", "platlib")})


def _name(obj) -> str:
    return f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', type(obj).__name__)}"


def _without_lambda_code(config):
    """The configuration with each Lambda layer's function left out (marshalled code holds
    its file and line numbers); ``code_identity`` of the function stands for it."""
    if isinstance(config, dict):
        if config.get("class_name") == "__lambda__":
            return {"class_name": "__lambda__"}
        return {k: _without_lambda_code(v) for k, v in config.items()}
    if isinstance(config, list):
        return [_without_lambda_code(v) for v in config]
    return config


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
    legacy = _tf_keras_names()
    try:
        yield
    finally:
        global_state.set_global_attribute("object_name_uids", before)
        if legacy is not None:
            legacy.restore()


class _tf_keras_names:
    """tf_keras (Keras 2) counts names per graph (``auc_2`` for a second ``AUC()``):
    counted from zero as in a task's process, the driver's counts given back after."""

    def __new__(cls):
        backend = sys.modules.get("tf_keras.src.backend")  # never imported for this
        if backend is None:
            return None
        self = super().__new__(cls)
        self.backend = backend
        self.uids = dict(backend.PER_GRAPH_OBJECT_NAME_UIDS)
        self.names = set(backend.OBSERVED_NAMES)
        backend.reset_uids()
        return self

    def restore(self) -> None:
        self.backend.reset_uids()
        self.backend.PER_GRAPH_OBJECT_NAME_UIDS.update(self.uids)
        self.backend.OBSERVED_NAMES.update(self.names)


@contextlib.contextmanager
def _own_random_state():
    """A ``modelFn`` that seeds (``keras.utils.set_random_seed``) leaves Python's and
    NumPy's random state of the driver as it found them."""
    python, numpy = random.getstate(), np.random.get_state()
    try:
        yield
    finally:
        random.setstate(python)
        np.random.set_state(numpy)
