"""``zip_imports.make_lazy``: pyspark's per-task ``importlib.invalidate_caches()`` stops
re-reading every zip archive on the path (Python < 3.13), and imports find what they
would find after an eager invalidation: a module added or removed, an archive deleted
and restored, a cache emptied by someone else, an invalidation made during a re-read."""

import glob
import os
import subprocess
import sys
import textwrap

import pyspark
import pytest

from tests import conftest

pytestmark = pytest.mark.skipif(sys.version_info >= (3, 13),
                                reason="Python 3.13's zipimport is lazy already")

SPARK_HOME = os.path.dirname(pyspark.__file__)

# a zip of package ``pkg`` on the path, its directory reads counted (READS[archive])
PREAMBLE = """
import importlib, os, sys, threading, zipfile, zipimport
READS = {}
_real = zipimport._read_directory
def _counted(archive):
    READS[archive] = READS.get(archive, 0) + 1
    return HOOK(archive) if HOOK else _real(archive)
HOOK = None
zipimport._read_directory = _counted
from sparktf.runtime.worker_tuning import zip_imports

def write(path, modules):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("pkg/__init__.py", "")
        for name, value in modules.items():
            z.writestr(f"pkg/{name}.py", f"VALUE = {value}")

def found(name):
    sys.modules.pop(f"pkg.{name}", None)
    try:
        return importlib.import_module(f"pkg.{name}").VALUE
    except ImportError:
        return None
"""


def _python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", PREAMBLE + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": conftest.ROOT})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_lookups_after_an_invalidation_find_the_archive_as_it_is_then(tmp_path):
    out = _python(f"""
        path = {str(tmp_path / "lib.zip")!r}
        write(path, {{"one": 1}})
        sys.path.insert(0, path)
        print("one", found("one"))
        zip_imports.make_lazy()
        zip_imports.make_lazy()  # idempotent
        write(path, {{"two": 2}})
        reads = READS.get(path, 0)
        importlib.invalidate_caches()
        print("invalidation read", READS.get(path, 0) - reads)
        print("two", found("two"), "one", found("one"), "again", found("two"))
        print("reads after it", READS.get(path, 0) - reads)  # one for both importers
        os.remove(path)
        importlib.invalidate_caches()
        print("deleted", found("two"))
        write(path, {{"three": 3}})
        importlib.invalidate_caches()
        print("restored", found("three"))
        zipimport._zip_directory_cache.clear()  # as setuptools' and CPython's tests do
        print("cache cleared", found("three"))
        print("new importer", sorted(zipimport.zipimporter(path)._files))
    """)
    assert out.splitlines() == [
        "one 1", "invalidation read 0", "two 2 one None again 2", "reads after it 1",
        "deleted None", "restored 3", "cache cleared 3",
        "new importer ['pkg/__init__.py', 'pkg/three.py']"], out


def test_an_invalidation_during_a_reread_is_not_lost(tmp_path):
    """Thread A re-reads the stale archive; meanwhile the archive changes and is
    invalidated again: the next lookup reads it again and finds the change."""
    out = _python(f"""
        path = {str(tmp_path / "lib.zip")!r}
        write(path, {{"a": 1}})
        sys.path.insert(0, path)
        found("a")
        zip_imports.make_lazy()
        reading, resume = threading.Event(), threading.Event()
        def slow(archive):
            directory = _real(archive)
            if threading.current_thread().name == "A" and not reading.is_set():
                reading.set()
                resume.wait(10)
            return directory
        HOOK = slow
        importlib.invalidate_caches()
        seen = {{}}
        A = threading.Thread(target=lambda: seen.update(a=found("a")), name="A")
        A.start()
        reading.wait(10)
        write(path, {{"a": 1, "b": 2}})
        importlib.invalidate_caches()
        resume.set()
        A.join()
        print(seen["a"], found("b"))
    """)
    assert out.split() == ["1", "2"], out


def test_a_task_of_a_python_worker_no_longer_rereads_pyspark_and_the_spark_core_jar():
    """The path Spark gives its Python workers (pyspark.zip, py4j, the spark-core jar),
    pyspark's worker modules imported from it: an invalidation cost 0.14-0.23 s of CPU
    on this machine; after ``make_lazy`` next to nothing, and importing still works."""
    zips = glob.glob(os.path.join(SPARK_HOME, "python", "lib", "*.zip"))
    jar = glob.glob(os.path.join(SPARK_HOME, "jars", "spark-core_*.jar"))
    if not zips or not jar:
        pytest.skip("this pyspark has no pyspark.zip / spark-core jar to put on the path")
    out = _python(f"""
        import time
        sys.path[:0] = {zips + jar!r}
        import pyspark.worker, pyspark.sql.pandas.serializers
        assert ".zip" in pyspark.__file__, pyspark.__file__

        def cost():
            start = time.process_time()
            for _ in range(5):
                importlib.invalidate_caches()
            return (time.process_time() - start) / 5

        before = cost()
        zip_imports.make_lazy()
        after = cost()
        READS.clear()
        import pyspark.sql.functions, pyspark.ml.feature  # the archive read again, once
        print(before, after, max(READS.values()))
    """)
    before, after, reads = out.split()
    print(f"\nimportlib.invalidate_caches() per task: {float(before) * 1000:.1f} ms of CPU "
          f"before, {float(after) * 1000:.2f} ms after")
    assert float(after) < float(before) / 20
    assert int(reads) == 1  # per archive, however many importers and lookups
