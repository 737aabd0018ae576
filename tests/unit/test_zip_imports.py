"""``zip_imports.make_lazy``: pyspark's per-task ``importlib.invalidate_caches()`` stops
re-reading every zip archive on the path (Python < 3.13), and imports find what they
found before: a module added to an archive after an invalidation, a module removed."""

import glob
import os
import subprocess
import sys
import textwrap

import pyspark
import pytest

pytestmark = pytest.mark.skipif(sys.version_info >= (3, 13),
                                reason="Python 3.13's zipimport is lazy already")

SPARK_HOME = os.path.dirname(pyspark.__file__)


def _python(code: str, **env) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_an_import_after_an_invalidation_finds_the_archive_as_it_is_now(tmp_path):
    out = _python(f"""
        import importlib, sys, zipfile
        from sparktf.runtime import zip_imports
        path = {str(tmp_path / "lib.zip")!r}
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("pkg/__init__.py", "")
            z.writestr("pkg/one.py", "VALUE = 1")
        sys.path.insert(0, path)
        import pkg.one
        zip_imports.make_lazy()
        zip_imports.make_lazy()  # idempotent
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("pkg/__init__.py", "")
            z.writestr("pkg/two.py", "VALUE = 2")
        try:
            import pkg.two
        except ImportError:
            print("not yet: the directory is read at invalidation, as in every Python")
        importlib.invalidate_caches()
        import pkg.two
        print("two", pkg.two.VALUE)
        sys.modules.pop("pkg.one")
        importlib.invalidate_caches()
        try:
            import pkg.one
            print("one still found")
        except ImportError:
            print("one gone")
        import zipimport
        importer = zipimport.zipimporter(path)  # a new importer sees the archive too
        print("new importer", sorted(importer._files))
    """)
    assert "two 2" in out and "one gone" in out, out
    assert "new importer ['pkg/', 'pkg/__init__.py', 'pkg/two.py']" in out or \
        "new importer ['pkg/__init__.py', 'pkg/two.py']" in out, out


def test_a_task_of_a_python_worker_no_longer_rereads_pyspark_and_the_spark_core_jar():
    """The path Spark gives its Python workers (pyspark.zip, py4j, the spark-core jar),
    pyspark's worker modules imported from it: an invalidation cost 0.45 s of CPU on this
    machine; after ``make_lazy`` it costs next to nothing, and importing still works."""
    zips = glob.glob(os.path.join(SPARK_HOME, "python", "lib", "*.zip"))
    jar = glob.glob(os.path.join(SPARK_HOME, "jars", "spark-core_*.jar"))
    if not zips or not jar:
        pytest.skip("this pyspark has no pyspark.zip / spark-core jar to put on the path")
    code = f"""
        import importlib, sys, time
        sys.path[:0] = {zips + jar!r}
        import pyspark.worker, pyspark.sql.pandas.serializers
        assert ".zip" in pyspark.__file__, pyspark.__file__
        from sparktf.runtime import zip_imports

        def cost():
            start = time.process_time()
            for _ in range(5):
                importlib.invalidate_caches()
            return (time.process_time() - start) / 5

        before = cost()
        zip_imports.make_lazy()
        after = cost()
        import pyspark.sql.functions  # imports read the archive again, once
        print(before, after)
    """
    before, after = map(float, _python(code, PYTHONPATH="").split())
    print(f"\nimportlib.invalidate_caches() per task: {before * 1000:.1f} ms of CPU before, "
          f"{after * 1000:.2f} ms after")
    assert after < before / 20
