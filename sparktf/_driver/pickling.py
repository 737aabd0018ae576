"""Shipping user functions to the executors: cloudpickle, by value where it must be.

A function defined in a script's or notebook's neighbouring module is pickled by
reference by default and then fails to import on the executors; modules that
are the user's own (not installed packages) are pickled by value instead, and so
are the user's own modules those reach (a helper module the script's module imports).
"""

from __future__ import annotations

import contextlib
import sys
import sysconfig
import types
from typing import Any, Sequence

import cloudpickle

from sparktf.errors import InvalidInputError


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


def _installed_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple({paths["purelib"], paths["platlib"], paths["stdlib"]})


def own_module(obj):
    """The module defining ``obj`` (or its class), or ``obj`` itself if it is a module, if
    that module is the user's own, else None."""
    if isinstance(obj, types.ModuleType):
        module = obj
    else:
        name = getattr(obj, "__module__", None) or type(obj).__module__
        module = sys.modules.get(name if isinstance(name, str) else "")
    path = getattr(module, "__file__", None)
    if (module is None or path is None or module.__name__ == "__main__"
            or module.__name__.startswith(("sparktf", "pyspark"))
            or path.startswith(_installed_roots())):
        return None
    return module


@contextlib.contextmanager
def by_value(objects: Sequence[Any]):
    """Pickles the user's own modules of ``objects`` by value while the block runs.

    A function from a script's or notebook's neighbouring module would otherwise be
    pickled by reference and fail to import on the executors.
    """
    modules = _reached({m.__name__: m for m in map(own_module, objects) if m is not None})
    for module in modules.values():
        cloudpickle.register_pickle_by_value(module)
    try:
        yield
    finally:
        for module in modules.values():
            cloudpickle.unregister_pickle_by_value(module)


def _reached(modules: dict) -> dict:
    """``modules`` and the user's own modules their globals name, transitively: a helper
    module that a script's module imports (``from helpers import f``) does not import on
    the executors either."""
    pending = list(modules.values())
    while pending:
        for value in list(vars(pending.pop()).values()):
            try:
                module = own_module(value)
            except Exception:  # noqa: BLE001 - an odd global (a proxy) is not a module
                continue
            if module is not None and module.__name__ not in modules:
                modules[module.__name__] = module
                pending.append(module)
    return modules
