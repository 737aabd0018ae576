"""Keras's optional helpers loaded at their first use, in sparktf's own processes.

``import keras`` (and so ``import tensorflow``, which imports Keras) runs two modules
eagerly only to offer optional helpers: the scikit-learn wrappers (``keras.wrappers``,
which import scikit-learn and SciPy's stats) and the visualization functions
(``keras.visualization``, which import matplotlib's pyplot). Where those packages are
installed, as in most data-science environments, they are a quarter of the import: 1.7 s
of CPU of 6.7 s on this project's test machine, paid by every spare and every scoring
worker.

Inside ``deferred()`` those modules are created at once and run at the first access to
an attribute they do not have yet, so ``from keras.wrappers import SKLearnClassifier``
or ``keras.visualization.plot_image_gallery`` work as before, a few seconds later.
Unlike ``importlib.util.LazyLoader``, the attributes every module has (``__name__``,
``__file__``, ``__spec__``...) do not load it: ``inspect.getmodule``, which TensorFlow's
autograph calls while tracing a step and which reads ``__file__`` of every module in
``sys.modules``, would otherwise load them in every task process.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import sys
import threading
import types
from typing import Iterator

DEFERRED = frozenset({"keras.wrappers", "keras.visualization", "keras.src.visualization"})
_lock = threading.RLock()


class _DeferredModule(types.ModuleType):
    """A module whose code has not run yet: it runs at the first missing attribute. Other
    threads asking meanwhile wait for it; its own code, while it runs, sees a partially
    initialized module, as Python's import does."""

    def __getattr__(self, name: str):
        if _loading.get(id(self)) == threading.get_ident():
            raise AttributeError(f"partially initialized module {self.__name__!r} has no "
                                 f"attribute {name!r}")
        _load(self)
        return getattr(self, name)

    def __dir__(self):
        if _loading.get(id(self)) == threading.get_ident():
            return list(self.__dict__)
        _load(self)
        return dir(self)


_loading: dict[int, int] = {}  # id of a module running now -> the thread running it


def _load(module: types.ModuleType) -> None:
    with _lock:
        if type(module) is not _DeferredModule:
            return  # loaded while this thread waited
        spec = module.__spec__
        deferring = spec.loader
        module.__loader__ = spec.loader = deferring.loader
        if deferring.path is not None:
            module.__path__ = deferring.path
        _loading[id(module)] = threading.get_ident()
        try:
            deferring.loader.exec_module(module)
        except BaseException:  # tried again at the next access
            module.__loader__ = spec.loader = deferring
            module.__dict__.pop("__path__", None)
            raise
        finally:
            del _loading[id(module)]
        module.__class__ = types.ModuleType  # a plain module from now on


class _DeferringLoader(importlib.abc.Loader):
    """Wraps a module's own loader: creates the module as that loader would, runs nothing.

    A package's ``__path__`` is kept aside until it runs: importing one of its submodules
    looks it up, and so runs the package first, as Python always does."""

    def __init__(self, loader):
        self.loader = loader
        self.path = None

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self.path = module.__dict__.pop("__path__", None)
        module.__class__ = _DeferredModule


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


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Imports made inside the block create Keras's optional helper modules without
    running them (a module already imported stays as it is)."""
    finder = _Finder()
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
