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

Spark's Python workers import pyspark from ``pyspark/python/lib/pyspark.zip`` (Spark puts it
first on their path), which pip installs without bytecode, and Python writes none into a
zip: every worker daemon compiled what it imported (0.75 s of CPU for pyspark.daemon and
pyspark.worker, 0.3 s with bytecode), and every worker forked from it compiled again what
its task imports beyond that. ``zip_bytecode`` (``--zips``, run first) adds the bytecode
of each module beside its source in that zip, as zipimport reads it: stamped with the
source's time and size in the zip, so that a changed source is compiled again as before.
"""

import glob
import importlib
import importlib._bootstrap_external as bootstrap
import os
import pkgutil
import sys
import time
import zipfile

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


def zip_bytecode() -> None:
    import pyspark
    for path in glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "python", "lib",
                                       "*.zip")):
        with zipfile.ZipFile(path) as source:
            entries = source.infolist()
            if any(e.filename.endswith(".pyc") for e in entries):
                continue  # done already
            written = path + ".tmp"
            with zipfile.ZipFile(written, "w", zipfile.ZIP_DEFLATED) as out:
                for entry in entries:
                    data = source.read(entry)
                    out.writestr(entry, data)
                    if not entry.filename.endswith(".py"):
                        continue
                    # zipimport's own reading of an entry's time (_parse_dostime) and size
                    mtime = int(time.mktime((*entry.date_time, -1, -1, -1)))
                    code = compile(data, os.path.join(path, entry.filename), "exec",
                                   dont_inherit=True)
                    pyc = zipfile.ZipInfo(entry.filename + "c", entry.date_time)
                    pyc.compress_type = zipfile.ZIP_DEFLATED
                    out.writestr(pyc, bootstrap._code_to_timestamp_pyc(code, mtime,
                                                                        entry.file_size))
        os.replace(written, path)


if __name__ == "__main__":
    # --zips: the zips alone, right after pip, before anything runs Spark's Python workers
    # (a zip replaced under a running zipimport would be read at the old offsets)
    if sys.argv[1:] == ["--zips"]:
        zip_bytecode()
    else:
        main()
