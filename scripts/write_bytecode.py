"""Writes the bytecode of what sparktf, its Spark workers and its tests import, by importing it.

``make`` runs this once after pip (``--no-compile``), in each environment it builds. Compiling
every installed file instead (``compileall``: 15,000 files, 78 s of CPU for .venv) compiled
three times what is ever imported (this: ~5,400 modules, ~35 s of CPU with the imports
themselves). Whatever a test imports beyond this list is compiled at its first import: the
Makefile lets Python write bytecode (``unexport PYTHONDONTWRITEBYTECODE``); without bytecode
every Spark Python worker and task process would compile TensorFlow again on every import
(12.7 s instead of 6 s for ``import tensorflow``).

A module that this environment cannot import (the lowest versions' environment has no
MLflow, notebooks, scikit-learn or Spark Connect client) is skipped.
"""

import importlib
import pkgutil
import sys

sys.dont_write_bytecode = False  # whatever PYTHONDONTWRITEBYTECODE says: that is the point

MODULES = [
    # what sparktf's driver, its Spark Python workers and its task processes import
    "numpy", "pandas", "pyarrow", "pyarrow.parquet", "cloudpickle", "tqdm.auto",
    "tensorflow", "keras", "pyspark.sql", "pyspark.ml", "pyspark.ml.torch.distributor",
    "pyspark.sql.connect.session",
    # what the tests, the demo and the notebooks use besides
    "pytest", "hypothesis", "tf_keras", "tensorboard.program", "mlflow", "mlflow.pyfunc",
    "sklearn.datasets", "sklearn.model_selection", "matplotlib.pyplot", "nbclient",
    "nbformat", "ipykernel.kernelapp", "ipywidgets",
]


def main() -> None:
    import sparktf
    names = MODULES + [info.name for info in pkgutil.walk_packages(sparktf.__path__, "sparktf.")]
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:  # not installed here, or an optional dependency of it is not
            pass


if __name__ == "__main__":
    main()
