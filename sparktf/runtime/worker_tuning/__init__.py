"""What sparktf changes inside Spark's Python workers and its own task processes, in one
place, and the one setting that turns all of it off.

========================  ===============================================================
change                    where, and what it saves
========================  ===============================================================
lazy zip-import           every task of a Python worker that ran sparktf (``zip_imports``):
invalidation              pyspark's per-task ``importlib.invalidate_caches()`` re-reads
                          pyspark.zip's directory once per importer, 0.14-0.23 s of CPU
                          per task; lazily, as Python 3.13 does, 0.03 ms
deferred Keras helpers    spares and task processes (``deferred_imports``): Keras's
                          scikit-learn and matplotlib helpers load at first use, a
                          quarter of ``import keras`` (7.6 s of CPU -> 5.3 s)
TensorFlow without Keras  scoring workers (``without_keras``): ``import tensorflow``
                          leaves Keras out, which a SavedModel's signature does not
                          need (3.3 s of CPU -> 2.6 s, ~90 MB less)
frozen collector          spares and task processes after importing TensorFlow, scoring
                          workers after starting it or loading a model (``gc.freeze``):
                          pyspark's full ``gc.collect()`` after every task no longer walks
                          TensorFlow's objects, 0.2-0.5 s of CPU per task
========================  ===============================================================

``spark.sparktf.workerTuning=false`` (``SETTING``; default true) turns them all off, for
a user who suspects one of them: the driver reads it when it builds a job, scoring tasks
and fit tasks ``configure`` this process by it, and a task's own process reads it from
``ENV``. A Python worker changed by an earlier job keeps its changes (they are not
undone): set it when the session starts.
"""

from __future__ import annotations

import gc
import os

from sparktf.errors import InvalidInputError
from sparktf.runtime.worker_tuning import deferred_imports, without_keras, zip_imports

SETTING = "spark.sparktf.workerTuning"
ENV = "SPARKTF_WORKER_TUNING"  # "0" in a task's process: no changes there

_on = os.environ.get(ENV, "1") != "0"


def from_setting(value: str | None) -> bool:
    """The setting's value (None: unset, on) as a bool; anything else is refused."""
    if value is None or value.strip().lower() == "true":
        return True
    if value.strip().lower() == "false":
        return False
    raise InvalidInputError(f"{SETTING} must be true or false (it turns off what sparktf "
                            f"changes in Spark's Python workers). Received: {value!r}")


def configure(on: bool) -> None:
    """Whether this process makes the changes from now on (they are not undone)."""
    global _on
    _on = on


def enabled() -> bool:
    return _on


def env(on: bool) -> dict[str, str]:
    """What a task's process needs in its environment to follow ``on``."""
    return {} if on else {ENV: "0"}


def lazy_zip_imports() -> None:
    """pyspark's per-task zip-import invalidation, lazily (``zip_imports``)."""
    if _on:
        zip_imports.make_lazy()


def import_keras() -> None:
    """``import keras``, its optional helpers deferred to their first use where tuning is on
    (``deferred_imports``)."""
    if _on:
        deferred_imports.import_keras()
        return
    try:  # an import error is left to the code that needs them, as deferred_imports does
        import keras  # noqa: F401
        import tensorflow  # noqa: F401
    except ImportError:
        pass


def import_tensorflow() -> None:
    """``import tensorflow`` for scoring: without Keras where tuning is on
    (``without_keras``), else with it, as ``import_keras``."""
    if _on:
        without_keras.import_tensorflow()
    else:
        import_keras()


def freeze_collector() -> None:
    """Everything alive now out of the cyclic collector's later collections."""
    if _on:
        gc.freeze()


def settle_collector() -> None:
    """One full collection, then everything alive frozen again (after a model is loaded:
    the models a cache let go are collected, the new one left out of later collections)."""
    if _on:
        gc.unfreeze()
        gc.collect()
        gc.freeze()
