"""Driver for test_notebook.py: runs a notebook top to bottom in a fresh kernel, as Jupyter
would, and saves it with its outputs for the test to look at.

    python tests/integration/scripts/notebook_job.py NOTEBOOK WORKDIR

The kernel's working directory is WORKDIR, its temp dir WORKDIR/tmp; the executed notebook
is WORKDIR/executed.ipynb (also when a cell failed: the test reports the error output). Prints
``RESULT notebook {"path": ..., "error": ...}``.
"""

import json
import os
import sys

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError


def main(notebook_path: str, workdir: str) -> None:
    with open(notebook_path) as f:
        notebook = nbformat.read(f, as_version=4)
    # the kernel's temp dir (a notebook saves its model there) goes with WORKDIR
    os.environ["TMPDIR"] = os.path.join(workdir, "tmp")
    os.makedirs(os.environ["TMPDIR"])
    client = NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": workdir}})
    error = None
    try:
        client.execute()
    except CellExecutionError as e:
        error = str(e)[-3000:]
    path = os.path.join(workdir, "executed.ipynb")
    nbformat.write(notebook, path)
    print("RESULT notebook " + json.dumps({"path": path, "error": error}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
