"""CPython's fix for ``zipimport``'s cache invalidation (gh-103200, Python 3.13), applied
in Spark's Python workers on older Pythons.

pyspark calls ``importlib.invalidate_caches()`` at the start of every task a Python
worker runs. Before Python 3.13 a ``zipimporter`` answers that by reading its archive's
whole directory again, at once, in pure Python: once for every importer of the archive
(pyspark.zip has one per package imported from it; 16 importers in a worker that has
run a pandas or Arrow UDF) and for the spark-core jar Spark puts on the workers' path.
Measured here: 0.14-0.23 s of CPU per call, so per task, whatever the task does.

With ``make_lazy()`` (idempotent), as in Python 3.13, an invalidation only marks the
archive stale; the next lookup in it reads its directory again, once for all of its
importers (a few reads of 7-36 ms per task, and only when a lookup reaches the archives).
Lookups find what they would find after an eager invalidation: the archive as it is at
that lookup. As in 3.13, a directory missing from ``zipimport._zip_directory_cache``
is read again at the next lookup. Unlike 3.13, an invalidated directory stays in that
cache until the next lookup, so code that reads the cache directly
(``pkgutil.iter_modules``) sees the archive as it was then, instead of a ``KeyError``.
"""

from __future__ import annotations

import sys
import threading

# RLock: a lookup may happen in a signal handler or a finalizer while this thread holds it
_lock = threading.RLock()
_invalidations: dict[str, int] = {}  # archive -> invalidations so far
_read_at: dict[str, int] = {}  # archive -> invalidations its cached directory has seen
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
        _installed = True
        importer = zipimport.zipimporter
        if not hasattr(importer, "invalidate_caches") or "_files" in vars(importer):
            return  # not the zipimporter this was written for: leave it
        cache, read = zipimport._zip_directory_cache, zipimport._read_directory

        def files(self):
            archive = self.__dict__.get("archive")
            if archive is None:  # inside __init__, before the archive is set
                return self.__dict__["_sparktf_files"]
            seen = _invalidations.get(archive, 0)
            found = cache.get(archive)
            if found is not None and _read_at.get(archive, 0) >= seen:
                return found
            # read without the lock (a read may import, e.g. through an audit hook)
            try:
                found = read(archive)
            except zipimport.ZipImportError:
                return {}  # as 3.13: nothing found, read again at the next lookup
            with _lock:  # keep the newest read; an invalidation during it still counts
                if seen >= _read_at.get(archive, 0) or archive not in cache:
                    cache[archive] = found
                    _read_at[archive] = seen
            return found

        def set_files(self, value):
            self.__dict__["_sparktf_files"] = value
            archive = self.__dict__.get("archive")
            if archive is not None:
                cache[archive] = value

        def invalidate_caches(self):
            """Marks the archive's directory to be read again at its next lookup."""
            with _lock:
                _invalidations[self.archive] = _invalidations.get(self.archive, 0) + 1

        importer._files = property(files, set_files)
        importer.invalidate_caches = invalidate_caches
