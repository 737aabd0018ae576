"""The notebook in notebooks/ runs top to bottom (its own cells assert what they show), and
shows what it should: the plots as images, scored rows as a table, a live bar during fit."""

import os

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
