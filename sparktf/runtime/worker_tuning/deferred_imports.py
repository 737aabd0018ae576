"""Keras's optional helpers loaded at their first use, in sparktf's own processes.

``import keras`` (and so ``import tensorflow``, which imports Keras) runs modules eagerly
only to offer optional helpers: the scikit-learn wrappers (``keras.wrappers``, which
import scikit-learn and SciPy's stats) and the visualization functions
(``keras.visualization`` and ``keras.src.visualization.plot_image_gallery``, which import
matplotlib's pyplot). Where those packages are installed, as in most data-science
environments, they are about a quarter of the import (7.6 s of CPU with them, 5.3 s
without, on this project's test machine), paid by every spare and every scoring worker.

Inside ``deferred()`` those modules are created at once and run at the first access to
an attribute they do not have yet (or at an assignment to one), so ``from keras.wrappers
import SKLearnClassifier`` or ``keras.visualization.plot_image_gallery`` work as before, a
few seconds later. They pickle by reference, as modules do; an error while one runs is
raised as an ``ImportError`` naming it, with the original as its cause.
Unlike ``importlib.util.LazyLoader``, the attributes every module has (``__name__``,
``__file__``, ``__spec__``...) do not load it: ``inspect.getmodule``, which TensorFlow's
autograph calls while tracing a step and which reads ``__file__`` of every module in
``sys.modules``, would otherwise load them in every task process.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import sys
import threading
import types
from typing import Iterator

# The modules whose code runs at first use. keras.wrappers and keras.visualization hold
# only their own __init__; plot_image_gallery is the module of keras.src.visualization
# (which Keras imports eagerly) that imports matplotlib's pyplot.
DEFERRED = frozenset({"keras.wrappers", "keras.visualization",
                      "keras.src.visualization.plot_image_gallery"})


def _module_lock(name: str):
    """The import system's own lock for ``name``: a thread that waits on it while another
    waits on one of its imports is a cycle Python's import detects (an error), not a hang."""
    manager = getattr(importlib._bootstrap, "_ModuleLockManager", None)
    return manager(name) if manager is not None else _fallback_lock


_fallback_lock = threading.RLock()


class _DeferredModule(types.ModuleType):
    """A module whose code has not run yet: it runs at the first access to, or assignment
    of, an attribute it does not have (``__name__``, ``__file__``, ``__spec__``... do not
    run it). Other threads asking meanwhile wait for it; its own code, while it runs, sees
    a partially initialized module, as with any import."""

    def __getattr__(self, name: str):
        if _running_here(self):
            raise AttributeError(f"partially initialized module {self.__name__!r} has no "
                                 f"attribute {name!r}")
        _load(self)
        return getattr(self, name)

    def __setattr__(self, name: str, value) -> None:
        if not (name.startswith("__") and name.endswith("__")) and not _running_here(self):
            _load(self)  # a value set now must not be replaced by the module's code later
        types.ModuleType.__setattr__(self, name, value)  # (the class may have changed)

    def __delattr__(self, name: str) -> None:
        if not _running_here(self):
            _load(self)
        types.ModuleType.__delattr__(self, name)

    def __dir__(self):
        if _running_here(self):
            return list(self.__dict__)
        _load(self)
        return dir(self)

    def __reduce__(self):
        return importlib.import_module, (self.__name__,)  # by reference, as any module


_loading: dict[int, int] = {}  # id of a module running now -> the thread running it


def _running_here(module: types.ModuleType) -> bool:
    """Whether this thread is running ``module``'s code now (its own lookups, in ``_load``)."""
    return _loading.get(id(module)) == threading.get_ident()


def _load(module: types.ModuleType) -> None:
    name = module.__name__
    with _module_lock(name):
        if type(module) is not _DeferredModule:
            return  # loaded while this thread waited
        spec = module.__spec__
        deferring = spec.loader
        if not isinstance(deferring, _DeferringLoader):  # run already (importlib.reload)
            object.__setattr__(module, "__class__", types.ModuleType)
            return
        object.__setattr__(module, "__loader__", deferring.loader)
        spec.loader, spec._initializing = deferring.loader, True  # `import` waits too
        _loading[id(module)] = threading.get_ident()
        try:
            deferring.loader.exec_module(module)
        except BaseException as e:  # tried again at the next access
            object.__setattr__(module, "__loader__", deferring)
            spec.loader = deferring
            if not isinstance(e, Exception):
                raise  # KeyboardInterrupt, SystemExit: as they are
            raise ImportError(f"{name} (deferred by sparktf until its first use) failed to "
                              f"load: {type(e).__name__}: {e}", name=name) from e
        finally:
            del _loading[id(module)]
            spec._initializing = False
        object.__setattr__(module, "__class__", types.ModuleType)  # a plain module now


class _DeferringLoader(importlib.abc.Loader):
    """Wraps a module's own loader: creates the module as that loader would, runs nothing;
    everything else (``get_data``, ``get_source``, resources) is the real loader's."""

    def __init__(self, loader):
        self.loader = loader

    def __getattr__(self, name: str):
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        object.__setattr__(module, "__class__", _DeferredModule)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds the ``DEFERRED`` modules as the other finders would, with a deferring loader."""

    def find_spec(self, name, path, target=None):
        if name not in DEFERRED:
            return None
        for finder in sys.meta_path:
            if isinstance(finder, _Finder) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is None:
                continue
            if hasattr(spec.loader, "exec_module") and hasattr(spec.loader, "create_module"):
                spec.loader = _DeferringLoader(spec.loader)
            return spec
        return None


def deferred():
    """Imports made inside the block create Keras's optional helper modules without
    running them (a module already imported stays as it is)."""
    return first_finder(_Finder())


@contextlib.contextmanager
def first_finder(finder: importlib.abc.MetaPathFinder) -> Iterator[None]:
    """``finder`` asked first by every import inside the block."""
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


def import_keras() -> None:
    """Imports Keras and TensorFlow with Keras's optional helpers deferred; an import
    error is left to the code that needs them (``main_fn`` may not use TensorFlow)."""
    with deferred():
        try:
            import keras  # noqa: F401
            import tensorflow  # noqa: F401
        except ImportError:
            pass
