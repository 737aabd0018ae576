"""Stores each notebook of ``notebooks/`` with its outputs, plots included: runs it top to
bottom in a fresh kernel as the suite does (``tests/integration/scripts/notebook_job.py``)
and writes the executed notebook in its place, without what it printed to stderr (library
warnings, this machine's paths and addresses: not for the site). Run after changing a notebook;
``tests/integration/test_notebook.py`` fails while a stored notebook shows other than its
code gives.

    .venv/bin/python scripts/store_notebooks.py [NAME.ipynb ...]
"""

import json
import os
import subprocess
import sys
import tempfile

import nbformat

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = os.path.join(ROOT, "notebooks")
JOB = os.path.join(ROOT, "tests", "integration", "scripts", "notebook_job.py")


def without_stderr(notebook):
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs
                            if not (o.output_type == "stream" and o.name == "stderr")]
    return notebook


def store(name: str) -> None:
    path = os.path.join(NOTEBOOKS, name)
    with tempfile.TemporaryDirectory(prefix="sparktf-notebook-") as workdir:
        done = subprocess.run([sys.executable, JOB, path, workdir], capture_output=True,
                              text=True, cwd=ROOT, check=True)
        line = [x for x in done.stdout.splitlines() if x.startswith("RESULT notebook ")][-1]
        result = json.loads(line[len("RESULT notebook "):])
        if result["error"]:
            sys.exit(f"{name} failed, not stored:\n{result['error']}")
        notebook = nbformat.read(result["path"], as_version=4)
        nbformat.write(without_stderr(notebook), path)
    print(f"stored {name} with its outputs")


if __name__ == "__main__":
    for name in sys.argv[1:] or sorted(n for n in os.listdir(NOTEBOOKS) if n.endswith(".ipynb")):
        store(name)
