"""The notebook in notebooks/ runs top to bottom (its own cells assert what they show), and
shows what it should: the plots as images, scored rows as a table, a live bar during fit."""

import os
import re

import nbformat
import pytest

from tests import conftest

NOTEBOOKS = os.path.join(os.path.dirname(__file__), "..", "..", "notebooks")
NAMES = sorted(n for n in os.listdir(NOTEBOOKS) if n.endswith(".ipynb"))
JOBS = {name: conftest.Job(f"notebook {name}", "tests/integration/scripts/notebook_job.py",
                           os.path.join(NOTEBOOKS, name), conftest.Job.WORKDIR, expected_s=140)
        for name in NAMES}

pytestmark = pytest.mark.timeout(900)

# what each notebook must print, the column its table of scored rows shows, its epochs
EXPECTED = {
    "digits_on_spark.ipynb": (["test accuracy: 0.9", "identical predictions after reload: True"],
                              "confidence", 12),
    "structured_data_on_spark.ipynb": (["test rmse: 0.", "inputs fed by name: {'city': 'city'",
                                        "cities: [", "identical predictions after reload: True"],
                                       "prediction", 20),
}


def test_every_notebook_has_its_expectations():
    assert sorted(EXPECTED) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_notebook_executes(name):
    ran = JOBS[name].finished().results()["notebook"]
    assert ran["error"] is None, ran["error"]
    notebook = nbformat.read(ran["path"], as_version=4)
    outputs = [o for cell in notebook.cells if cell.cell_type == "code"
               for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    printed, table_column, epochs = EXPECTED[name]
    text = "".join(o.get("text", "") for o in outputs)
    for line in printed:
        assert line in text, line
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 2, "the training curves and the confusion matrix are not shown"
    for image in images:
        assert len(image["data"]["image/png"]) > 10_000  # a rendered plot, base64
    assert any("<table" in o.get("data", {}).get("text/html", "") and table_column in
               o["data"]["text/html"] for o in outputs), "no table of scored rows"
    widgets = [o for o in outputs
               if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert widgets, "fit showed no progress widget"
    assert any(f"sparktf epoch 1/{epochs}" in o["data"].get("text/plain", "")
               for o in widgets), \
        [o["data"].get("text/plain") for o in widgets][:3]


def _shown(cell) -> list:
    """What a code cell shows, as the stored notebook is read: each output's kind (a stream's
    name, or its data's types), and the text it prints with its numbers masked (timings and
    rates differ from run to run; what is printed, and in which order, does not). stderr is
    left out: what a library warns of differs by machine."""
    shown = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            if o.get("name") == "stdout":
                shown.append(("stdout", re.sub(r"\d+(\.\d+)?(e-?\d+)?", "#", o.get("text", ""))))
        elif o.get("output_type") in ("display_data", "execute_result"):
            shown.append((o["output_type"], sorted(o.get("data", {}))))
        else:
            shown.append((o.get("output_type"), None))
    return shown


@pytest.mark.parametrize("name", NAMES)
def test_the_notebook_is_stored_with_the_outputs_its_code_gives(name):
    """notebooks/ holds each notebook with its outputs, plots included, so that it reads
    with them where it is read (GitHub, the site); what is stored is what the code gives:
    every cell shows what the run beside this test showed, its printed lines to the number.
    After changing a notebook, store its outputs again:
    ``.venv/bin/python scripts/store_notebooks.py``."""
    stored = nbformat.read(os.path.join(NOTEBOOKS, name), as_version=4)
    ran = nbformat.read(JOBS[name].finished().results()["notebook"]["path"], as_version=4)
    cells = [c for c in stored.cells if c.cell_type == "code"]
    fresh = [c for c in ran.cells if c.cell_type == "code"]
    assert [c.source for c in cells] == [c.source for c in fresh]
    assert any("image/png" in o.get("data", {}) for c in cells for o in c.get("outputs", [])), \
        f"{name} is stored without its plots: run scripts/store_notebooks.py"
    for i, (old, new) in enumerate(zip(cells, fresh)):
        assert _shown(old) == _shown(new), f"{name}, code cell {i + 1}: {old.source[:80]!r}"
