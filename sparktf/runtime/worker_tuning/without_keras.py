"""TensorFlow imported without Keras, in a scoring worker that needs only TensorFlow.

``import tensorflow`` imports Keras as well: its ``__init__`` imports
``keras.src.optimizers`` (and so all of ``keras``) only to register Keras's optimizers
for SavedModels that hold one, inside a ``try`` that passes over an ``ImportError``. A
scoring worker loads a SavedModel's serving signature with ``tf.saved_model.load``,
which holds no optimizer and needs no Keras: without Keras the import costs about 2.6 s
of CPU instead of 3.3 s with Keras's helpers deferred (4.3 s for a plain import) on this
project's test machine, and ~90 MB less memory, paid by every Python worker that scores.
A user's own function that imports Keras later in the same worker pays for it then,
helpers included (~1.6 s): about 1 s more than before, in that worker only.

Inside ``absent()``, importing ``keras`` or ``tf_keras`` raises ``ImportError`` while
``importlib.util.find_spec`` still finds them where they are installed. TensorFlow's
``__init__`` reads their folders that way (``module_util.get_parent_dir_for_name``) for
``tensorflow.__path__``, so ``from tensorflow.keras import layers`` and ``tf.keras``
import Keras later in the process as they would have, and ``import keras`` works as
ever once the block is left: a user's own UDF in the same Python worker sees no
difference but the moment Keras loads. The block is process-wide: another thread's
``import keras`` during it (~2 s) fails; a scoring worker runs no such thread.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery

from sparktf.runtime.worker_tuning import deferred_imports

ABSENT = frozenset({"keras", "tf_keras"})


class _Refused(importlib.abc.Loader):
    def create_module(self, spec):
        raise ImportError(f"{spec.name} is not imported while TensorFlow loads for scoring "
                          "(sparktf.runtime.worker_tuning.without_keras)", name=spec.name)

    def exec_module(self, module) -> None:  # never reached: create_module refuses
        raise ImportError(module.__name__, name=module.__name__)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds Keras where it is installed (its origin and folders as they are), with a
    loader that refuses to import it."""

    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] not in ABSENT:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None:
            spec.loader = _Refused()
        return spec


def absent():
    """Inside the block, Keras cannot be imported but is found (a module already imported
    stays as it is)."""
    return deferred_imports.first_finder(_Finder())


def import_tensorflow() -> None:
    """``import tensorflow`` without Keras (where Keras is imported already, as it is).
    An import error is left to the code that needs TensorFlow."""
    with absent():
        try:
            import tensorflow  # noqa: F401
        except ImportError:
            pass
