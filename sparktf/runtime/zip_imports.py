"""CPython's fix for ``zipimport``'s cache invalidation (gh-103200, Python 3.13), applied
in Spark's Python workers on older Pythons.

pyspark calls ``importlib.invalidate_caches()`` at the start of every task a Python
worker runs. Before Python 3.13 a ``zipimporter`` answers that by reading its archive's
whole directory again, at once, in pure Python: once for every importer of the archive
(pyspark.zip has one per package imported from it) and for the spark-core jar that
Spark puts on the workers' path. Measured in a worker with pyspark, its SQL and pandas
modules imported: 0.45 s of CPU per call, so per task, whatever the task does.

From Python 3.13 an invalidation only marks the archive's directory stale and the next
lookup reads it again, once. This module gives the workers that behaviour:
``make_lazy()`` (idempotent) marks instead of reading, and an importer reads a marked
archive's directory at its next lookup, for every importer of that archive at once.
What any import finds is unchanged. Until that lookup, code that reads
``zipimport._zip_directory_cache`` directly (``pkgutil.iter_modules``) sees the
directory as it was, as before Python 3.10, where invalidation did nothing at all.
"""

from __future__ import annotations

import sys
import threading

_lock = threading.Lock()
_stale: set[str] = set()  # archives whose directory is read again at their next lookup
_installed = False


def make_lazy() -> None:
    """Makes ``zipimporter.invalidate_caches`` lazy in this process (Python < 3.13)."""
    global _installed
    if _installed or sys.version_info >= (3, 13):
        return
    import zipimport

    with _lock:
        if _installed:
            return
        importer = zipimport.zipimporter
        if not hasattr(importer, "invalidate_caches") or "_files" in vars(importer):
            _installed = True  # not the zipimporter this was written for: leave it
            return
        cache, read = zipimport._zip_directory_cache, zipimport._read_directory

        def files(self):
            archive = self.__dict__.get("archive")
            if archive is None:  # inside __init__, before the archive is set
                return self.__dict__["_sparktf_files"]
            if archive in _stale:
                with _lock:
                    if archive in _stale:
                        try:
                            cache[archive] = read(archive)
                        except zipimport.ZipImportError:
                            cache.pop(archive, None)
                        _stale.discard(archive)
            return cache.get(archive, {})

        def set_files(self, value):
            self.__dict__["_sparktf_files"] = value
            archive = self.__dict__.get("archive")
            if archive is not None:
                cache[archive] = value

        def invalidate_caches(self):
            """Marks the archive's directory to be read again at the next lookup."""
            _stale.add(self.archive)

        importer._files = property(files, set_files)
        importer.invalidate_caches = invalidate_caches
        _installed = True
