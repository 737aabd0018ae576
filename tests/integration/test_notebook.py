"""The notebook in notebooks/ runs top to bottom (its own cells assert what they show), and
shows what it should: the plots as images, scored rows as a table, a live bar during fit."""

import json
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


NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e-?\d+)?")
WIDGET = "application/vnd.jupyter.widget-view+json"


def _shown(cell) -> list:
    """What a code cell shows, as the stored notebook is read: each output's kind (a stream's
    name, or its data's types) and its text (stdout, or a display's ``text/plain``: a
    figure's size and axes, a table's rows, a result's values), its numbers taken out to be
    compared apart. A progress widget's text is left out (it shows where the bar was when
    the cell ended), and so is stderr: what a library warns of differs by machine."""
    shown = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            if o.get("name") == "stdout":
                shown.append(("stdout", re.sub(r"(?m)^\|.*$", lambda m: NUMBER.sub(
                    "#", m.group()), o.get("text", ""))))  # a table's rows, as below
        elif o.get("output_type") in ("display_data", "execute_result"):
            data = o.get("data", {})
            text = "" if WIDGET in data else data.get("text/plain", "")
            if "text/html" in data:  # a table of scored rows: its columns and rows, not
                text = NUMBER.sub("#", text)  # each row's score (see _same)
            shown.append((o["output_type"], sorted(data), text))
        else:
            shown.append((o.get("output_type"), None))
    return shown


def _same(old: list, new: list) -> bool:
    """Shows the same: the same outputs and text (its white space aside: IPython wraps a
    long result by its width), each number within 10% of the fresh run's. Not to the last
    digit: the digits notebook's fit, seeded, gives other results run alone (as
    scripts/store_notebooks.py runs it, twice: loss 0.0873, val_accuracy 0.968) than beside
    the other notebook (0.0826, 0.9758; three such runs scored the same borderline row
    alike). Why, as far as measured (bench/RESULTS.md, 2026-12-03): the notebook's
    StandardScaler merges its partitions' summaries in the order their tasks finish, and
    the other order moves 26 of its 64 deviations in the last bit; sparktf's
    validationFraction draw and shuffle order are hashes of the rows' exact values, so a
    last-bit change gives another split and another fit. Open: draws that a last bit
    cannot move. That row then flips class, so a table
    (pandas' or Spark's ``show``) is compared by its columns and rows only. Another
    accuracy (0.1 for 0.96), another count or a swapped figure fails."""
    def parts(shown):
        return [tuple(" ".join(NUMBER.sub("#", x).split()) if isinstance(x, str) else x
                      for x in s) for s in shown]

    def numbers(shown):
        return [float(n) for s in shown for x in s if isinstance(x, str)
                for n in NUMBER.findall(x)]

    a, b = numbers(old), numbers(new)
    return parts(old) == parts(new) and len(a) == len(b) and all(
        abs(x - y) <= 0.1 * max(abs(x), abs(y)) + 1e-3 for x, y in zip(a, b))


@pytest.mark.parametrize("name", NAMES)
def test_the_notebook_is_stored_with_the_outputs_its_code_gives(name):
    """notebooks/ holds each notebook with its outputs, plots included, so that it reads
    with them where it is read (GitHub, the site); what is stored is what the code gives:
    every cell shows what the run beside this test showed (``_same``).
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
        assert _same(_shown(old), _shown(new)), \
            (f"{name}, code cell {i + 1}: {old.source[:80]!r}\nstored: {_shown(old)}\n"
             f"now: {_shown(new)}")


def test_a_stored_notebook_showing_other_results_than_its_code_does_not_pass():
    """The comparison itself, on the stored digits notebook against copies of it: a
    metric changed in its last printed digits passes, another accuracy, another count or
    the figures swapped do not."""
    stored = nbformat.read(os.path.join(NOTEBOOKS, "digits_on_spark.ipynb"), as_version=4)
    cells = [c for c in stored.cells if c.cell_type == "code"]

    def changed(edit):
        copy = nbformat.from_dict(json.loads(json.dumps(cells)))
        edit(copy)
        return [_shown(c) for c in copy]

    def text(copy, old, new):
        for c in copy:
            for o in c.outputs:
                if o.get("text") and old in o.text:
                    o.text = o.text.replace(old, new)
                    return
        raise AssertionError(f"{old!r} not in the stored notebook")

    def swap_figures(copy):
        figures = [o for c in copy for o in c.outputs if "image/png" in o.get("data", {})]
        figures[0].data, figures[1].data = figures[1].data, figures[0].data

    shown = [_shown(c) for c in cells]
    assert all(_same(a, a) for a in shown)
    accuracy = re.search(r"test accuracy: (\d\.\d+)", "".join(
        o.get("text", "") for c in cells for o in c.outputs)).group(1)
    nearly = f"{float(accuracy) + 0.0003:.4f}"
    for edit, passes in [(lambda c: text(c, accuracy, nearly), True),
                         (lambda c: text(c, accuracy, "0.1"), False),
                         (lambda c: text(c, "433 of 450", "3 of 450"), False),
                         (swap_figures, False)]:
        after = changed(edit)
        assert all(_same(a, b) for a, b in zip(shown, after)) is passes
