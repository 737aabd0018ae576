"""Every Python example of the documentation site (``docs/``) runs, as a reader runs it, so
that the pages cannot drift from the code: each page's ```` ```python ```` blocks in order,
in one namespace, in a folder of their own (what they save lands there).

A page whose examples build on another's says so in a MyST comment, ``% context: <page>``
(the pages say it to readers too): the suite runs that page's examples first, once, and
each page that names it starts from a copy of its namespace. A page marked ``% run:
connect-job`` (the Spark Connect page: it starts a local Connect server and stops its
session) runs in the client of the Connect job instead, first: it starts the server the
job's scenarios then use (tests/integration/test_connect.py checks it). The README's
quick start is the getting-started page's, character for character.
"""

import contextlib
import os
import pathlib
import re
import sys

import pytest

from tests import conftest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")
               if "_build" not in p.parts)
FENCE = re.compile(r"^(?P<indent> *)```python\n(?P<code>.*?)^(?P=indent)```", re.M | re.S)

pytestmark = pytest.mark.timeout(1200)


def examples(text: str) -> list[tuple[int, str]]:
    """(line, code) of each Python block, its indentation (a block in a list item) removed."""
    found = []
    for m in FENCE.finditer(text):
        indent = len(m.group("indent"))
        code = "".join(line[indent:] for line in m.group("code").splitlines(keepends=True))
        found.append((text.count("\n", 0, m.start()) + 2, code))
    return found


def directive(text: str, name: str) -> str | None:
    m = re.search(rf"^% {name}: (\S+)\s*$", text, re.M)
    return m.group(1) if m else None


def _page(page: str) -> str:
    return (DOCS / page).read_text()


def run_page(page: str, namespace: dict) -> dict:
    for line, code in examples(_page(page)):
        print(f"--- {page}:{line}")
        exec(compile(code, f"docs/{page}:{line}", "exec"), namespace)
    return namespace


@contextlib.contextmanager
def _working_in(folder, spark):
    """Relative paths of the examples resolve in ``folder``: Python's (sparktf, MLflow) and
    the driver JVM's (Spark's writers resolve against its local file system's working
    directory, the JVM's start-up folder, which a Python ``chdir`` does not move)."""
    sc = spark.sparkContext
    jvm = sc._jvm
    local = jvm.org.apache.hadoop.fs.FileSystem.getLocal(sc._jsc.hadoopConfiguration())
    before, jvm_before = os.getcwd(), local.getWorkingDirectory()
    os.chdir(folder)
    local.setWorkingDirectory(jvm.org.apache.hadoop.fs.Path(str(folder)))
    try:
        yield
    finally:
        local.setWorkingDirectory(jvm_before)
        os.chdir(before)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("docs")


@pytest.fixture(scope="module")
def contexts(spark, folder):
    """Each context page's namespace, run once (in ``folder``), by page name."""
    done: dict = {}

    def of(name: str) -> dict:
        if name not in done:
            with _working_in(folder, spark):
                done[name] = run_page(f"{name}.md", {"__name__": f"docs_{name}"})
        return done[name]

    return of


def test_the_pages_name_contexts_that_exist():
    assert "getting-started.md" in PAGES and "guide/tuning.md" in PAGES
    for page in PAGES:
        context = directive(_page(page), "context")
        assert context is None or f"{context}.md" in PAGES, (page, context)
    assert sum(len(examples(_page(p))) for p in PAGES) >= 8  # Sphinx -W: all in a toctree


def test_the_readme_quick_start_is_the_getting_started_page_s():
    readme = examples((ROOT / "README.md").read_text())
    assert readme and readme[0][1] == examples(_page("getting-started.md"))[0][1]
    assert len(readme) == 1, "the README's other examples belong to the site's pages"


# the fences a page may hold: Python (run above), shell commands and MyST's directives
OPENING = re.compile(r"^ *(```|~~~)[ \t]*(?P<info>[^`\s]*)", re.M)
NOT_RUN = {"bash", "text", "{eval-rst}", "{include}", "{toctree}"}


def test_every_python_example_of_the_site_is_one_this_test_runs():
    """No Python block slips past ``FENCE`` (```py, ```python3, ```{code-block} python,
    ~~~python are refused here, not skipped silently), and the API reference, built from
    the docstrings, shows no ``>>>`` example of its own: the docstrings point to the pages
    whose examples run."""
    fences = {}
    for page in PAGES:
        infos = [m.group("info") for m in OPENING.finditer(_page(page))]
        # each block opens and closes with a fence: the closing ones carry no info
        fences[page] = [i for n, i in enumerate(infos) if n % 2 == 0]
    assert {p: [i for i in f if i not in NOT_RUN | {"python"}] for p, f in fences.items()
            if set(f) - NOT_RUN - {"python"}} == {}
    assert sum(f.count("python") for f in fences.values()) == sum(
        len(examples(_page(p))) for p in PAGES)
    doctests = [f"{path.relative_to(ROOT)}:{n}" for path in (ROOT / "sparktf").rglob("*.py")
                for n, line in enumerate(path.read_text().splitlines(), 1)
                if line.lstrip().startswith(">>>")]
    assert doctests == []


def test_the_pages_run_elsewhere_are_run_by_the_connect_job():
    elsewhere = [p for p in PAGES if directive(_page(p), "run") is not None]
    assert elsewhere == ["guide/connect.md"]
    assert directive(_page("guide/connect.md"), "run") == "connect-job"
    from tests.integration import test_connect
    assert "docs_page" in test_connect.SCENARIOS


@pytest.mark.parametrize("page", [p for p in PAGES if examples(_page(p))
                                  and directive(_page(p), "run") is None])
def test_the_examples_of_each_page_run(page, spark, contexts, folder):
    text = _page(page)
    if page == "getting-started.md":
        namespace = contexts("getting-started")
    else:
        context = directive(text, "context")
        namespace = dict(contexts(context)) if context else {"__name__": "docs_page"}
        with _working_in(folder, spark):
            try:
                run_page(page, namespace)
            finally:  # the MLflow page's store (relative to the folder) is not the next test's
                if "mlflow" in sys.modules:
                    conftest.reset_mlflow()
    assert not os.path.exists(ROOT / "models"), "an example wrote outside its folder"
    assert namespace, page
