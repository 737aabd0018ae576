"""Shipping user functions to the executors: cloudpickle, by value where it must be.

A function defined in a script's or notebook's neighbouring module is pickled by
reference by default and then fails to import on the executors; modules that
are the user's own are pickled by value instead, and so are the user's own modules
those reach (a helper module the script's module imports).

A module the executors can import goes by reference: shipping a library by value
would copy its module state, and fails on the first global that cannot be pickled
(a module-level lock). ``ImportRoots`` tells the two apart by where a module was
imported from (the ``sys.path`` entry holding its top-level package). Installed:
sysconfig's and site's folders, any ``site-packages`` or ``dist-packages`` folder
(a user-site install, Debian's), a zip or egg (a ``--py-files`` zip), Spark's
``userFiles-*`` folder (``addPyFile``), an absolute ``PYTHONPATH`` entry (the
executors of a local master inherit it; a cluster sets it on its executors too),
and a folder holding the package's distribution metadata (``pip install
--target``). Anything else is the user's own: the script's or notebook's folder,
the working directory, a folder the script put on ``sys.path``.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import importlib.metadata
import inspect
import os
import site
import sys
import sysconfig
import threading
import types
from typing import Any, Sequence

import cloudpickle

from sparktf.errors import InvalidInputError

INSTALLED_FOLDERS = ("site-packages", "dist-packages")
SPARK_FILES_PREFIX = "userFiles-"  # SparkFiles' root, where addPyFile and --py-files land


def pickle_main(main_fn, args, also: Sequence[Any] = ()) -> bytes:
    """``(main_fn, args)`` pickled for the tasks; an error that names what failed to pickle.

    ``main_fn`` and the objects in ``also`` (e.g. a modelFn, callbacks) have their
    modules pickled by value when those are the user's own, not installed packages.
    """
    if not callable(main_fn):
        raise InvalidInputError(f"main_fn must be callable as main_fn(args, ctx). "
                                f"Received: main_fn={main_fn!r}")
    try:
        with by_value([main_fn, *also]):
            return cloudpickle.dumps((main_fn, args))
    except Exception as e:
        raise InvalidInputError(
            f"main_fn and args must be picklable (cloudpickle) to reach the executors, but "
            f"pickling failed: {type(e).__name__}: {e}. Move locks, sessions, open files or "
            "sockets out of the closure and create them inside main_fn.") from e


class ImportRoots:
    """Where the executors can import modules from, as seen from the driver; made once
    per pickling, as ``PYTHONPATH`` and the installation stand then."""

    def __init__(self):
        paths = sysconfig.get_paths()
        folders = [paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")]
        folders += [*site.getsitepackages(), site.getusersitepackages()]
        # a relative entry names another folder in an executor's working directory
        folders += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                    if os.path.isabs(p)]
        self.folders = tuple({g for f in folders if f
                              for g in (os.path.abspath(f), os.path.realpath(f))})
        self._decided: dict[str, bool] = {}

    def holds(self, module: types.ModuleType) -> bool:
        """Whether the executors can import ``module`` by name (it need not travel by value)."""
        name = module.__name__
        if name not in self._decided:
            root = _import_root(module)
            self._decided[name] = (self._installed(root)
                                   or self._installed(os.path.realpath(root))  # a symlink
                                   or name.partition(".")[0] in _distributed_from(root))
        return self._decided[name]

    def _installed(self, root: str) -> bool:
        """Whether ``root``, a ``sys.path`` entry, is one the executors have too."""
        return (os.path.isfile(root)  # a zip or egg on sys.path
                or root.endswith(".egg")
                or any(part in INSTALLED_FOLDERS or part.startswith(SPARK_FILES_PREFIX)
                       for part in root.split(os.sep))
                or any(root == f or root.startswith(f.rstrip(os.sep) + os.sep)
                       for f in self.folders))


def _import_root(module: types.ModuleType) -> str:
    """The ``sys.path`` entry ``module`` was imported from: the folder (or zip) holding its
    top-level package."""
    root = os.path.abspath(module.__file__)
    # a package's file is its __init__, one level further down than its name says
    levels = module.__name__.count(".") + 1 + (getattr(module, "__path__", None) is not None)
    for _ in range(levels):
        root = os.path.dirname(root)
    return root


def _distributed_from(root: str) -> set[str]:
    """The top-level names of the distributions whose metadata sits in ``root`` (what
    ``pip install --target root`` leaves beside the packages), read as
    ``importlib.metadata.packages_distributions`` reads them."""
    names = set()
    for dist in importlib.metadata.distributions(path=[root]):
        declared = dist.read_text("top_level.txt")
        if declared is not None:
            names.update(declared.split())
            continue
        for file in dist.files or ():
            names.add(file.parts[0] if len(file.parts) > 1
                      else inspect.getmodulename(file.name) or file.name)
    return {n for n in names if "." not in n}


def own_module(obj, roots: ImportRoots | None = None):
    """The module defining ``obj`` (or its class), or ``obj`` itself if it is a module, if
    that module is the user's own and the executors cannot import it, else None."""
    while isinstance(obj, functools.partial):  # the function it calls is what travels
        obj = obj.func
    if isinstance(obj, types.ModuleType):
        module = obj
    else:
        name = getattr(obj, "__module__", None) or type(obj).__module__
        module = sys.modules.get(name if isinstance(name, str) else "")
    if (module is None or getattr(module, "__file__", None) is None
            or module.__name__ == "__main__"
            or module.__name__.startswith(("sparktf", "pyspark"))
            or (roots or ImportRoots()).holds(module)):
        return None
    return module


@contextlib.contextmanager
def by_value(objects: Sequence[Any]):
    """Pickles the user's own modules of ``objects`` by value while the block runs.

    A function from a script's or notebook's neighbouring module would otherwise be
    pickled by reference and fail to import on the executors.

    Fits pickling at once (``CrossValidator(parallelism=2)``, a ``HalvingSearch``) share
    the registrations: a module stays registered until the last block that asked for it
    ends, and one the application registered itself stays registered.
    """
    roots = ImportRoots()
    modules = _reached({m.__name__: m for m in (own_module(o, roots)
                                                for o in _with_partials_parts(objects))
                        if m is not None}, roots)
    with _REGISTERED_LOCK:
        for name, module in modules.items():
            if not _REGISTERED[name] and name in cloudpickle.list_registry_pickle_by_value():
                _REGISTERED[name] += 1  # the application's own: never unregistered here
            if not _REGISTERED[name]:
                cloudpickle.register_pickle_by_value(module)
            _REGISTERED[name] += 1
    try:
        yield
    finally:
        with _REGISTERED_LOCK:
            for name, module in modules.items():
                _REGISTERED[name] -= 1
                if not _REGISTERED[name]:
                    cloudpickle.unregister_pickle_by_value(module)


# module name -> how many by_value blocks (and 1 for the application's own) hold it
_REGISTERED: collections.Counter = collections.Counter()
_REGISTERED_LOCK = threading.Lock()


def _with_partials_parts(objects: Sequence[Any]) -> list:
    """``objects`` and, for a ``functools.partial``, the function and arguments it holds."""
    found, pending = [], list(objects)
    while pending:
        obj = pending.pop()
        found.append(obj)
        if isinstance(obj, functools.partial):
            pending += [obj.func, *obj.args, *obj.keywords.values()]
    return found


def _reached(modules: dict, roots: ImportRoots) -> dict:
    """``modules`` and the user's own modules their globals name, transitively: a helper
    module that a script's module imports (``from helpers import f``) does not import on
    the executors either."""
    pending = list(modules.values())
    while pending:
        for value in list(vars(pending.pop()).values()):
            try:
                module = own_module(value, roots)
            except Exception:  # noqa: BLE001 - an odd global (a proxy) is not a module
                continue
            if module is not None and module.__name__ not in modules:
                modules[module.__name__] = module
                pending.append(module)
    return modules
