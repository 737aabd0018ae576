"""``inputMode="parquet"``: the training columns written once as Parquet, read by the workers.

A copy is reused by a later fit (another fold or parameter map of a CrossValidator, a
repeated fit) only when its data is provably the same: every source of the frame is
a file scan, the plan is the same and every input file still has the size and
modification time it had when the copy was written. All of that is in the copy's name
(``<plan hash>-<numWorkers>-<digest>``) and in its manifest, checked before use. Anything
else (in-memory rows, an RDD, a JDBC table) gets a copy of its own, removed when the fit
ends.

Fits may run at once (threads, ``CrossValidator(parallelism=2)``), so a shared copy is
never written where a reader looks for it. It is written to ``<name>.part-<uuid>``, its
manifest last, and published:

- on a local filesystem, by renaming the part folder to ``<name>`` (atomic; it fails when
  ``<name>`` already exists). A writer that loses that race uses the winner's copy and
  removes its own, or, if there is no complete winner, trains on its own part folder and
  removes it afterwards;
- on other filesystems (HDFS, S3, GCS), renaming a folder is not atomic (object stores
  copy object by object; HDFS moves a folder *into* an existing one), so the part folder
  stays where it was written and its manifest, one file written last, publishes it. Two
  fits that start together may each write one; both are complete and either is used.

A fit reading a copy holds a reader marker (``<name>.reader-<uuid>``) until it ends; a
copy with a reader is never removed. A remover first sets ``<name>.removing-<uuid>``,
then looks for readers, so a reader (who sets its marker before looking for the copy)
either is seen or sees the removal and writes its own. Copies of the same plan made from
input files that have since changed are removed, and at most ``KEEP`` copies stay in a
folder: the least recently used ones beyond are removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
import uuid
from typing import Iterator

from sparktf._driver import failures
from sparktf.errors import InvalidInputError
from sparktf.runtime import storage

logger = logging.getLogger("sparktf")

KEEP = 4
MANIFEST = "_sparktf_manifest.json"  # written last: a folder without it is incomplete
USED = "_sparktf_used"  # the time of the last fit that used the copy
DONE = "_SUCCESS"


@contextlib.contextmanager
def training_copy(frame, folder: str, num_workers: int) -> Iterator[str]:
    """The URI of a Parquet copy of ``frame`` under ``folder`` for the length of the block."""
    files = file_sources(frame)
    if files is None:
        uri = storage.join(folder, f"once-{uuid.uuid4().hex[:12]}")
        logger.info("sparktf: inputMode='parquet' writes the training data to %s (removed "
                    "after the fit: its sources are not files whose state can be checked)",
                    uri)
        _write(frame, uri, num_workers)
        try:
            yield uri
        finally:
            storage.remove_dir(uri)
        return
    wanted = {"plan": _plan(frame), "files": files, "numWorkers": num_workers}
    plan = f"{frame.semanticHash() & 0xFFFFFFFF:08x}-{num_workers}"
    name = f"{plan}-{_digest(wanted)}"
    reader = _mark(folder, name, "reader")  # before looking: see _remove_unread
    private = None
    try:
        uri = _found(folder, name, wanted)
        if uri is not None:
            logger.info("sparktf: inputMode='parquet' reuses the copy of this data at %s (its "
                        "%d input files are unchanged)", uri, len(files))
        else:
            uri, private = _make(frame, folder, name, wanted, plan)
        storage.write_bytes(storage.join(uri, USED), repr(time.time()).encode())
        _prune(folder, plan, keep=name)
        yield uri
    finally:
        if private is not None:
            storage.remove_dir(private)
        storage.remove_dir(reader)


def _make(frame, folder: str, name: str, wanted: dict, plan: str) -> tuple[str, str | None]:
    """Writes and publishes a copy; its URI, and that URI again if it is this fit's alone."""
    changed = any(other.startswith(f"{plan}-") and "." not in other and other != name
                  for other in storage.list_names(folder))
    part = storage.join(folder, f"{name}.part-{uuid.uuid4().hex[:12]}")
    logger.info("sparktf: inputMode='parquet' writes the training data once to %s%s",
                storage.join(folder, name),
                " (its input files changed since the copy there was made)" if changed else "")
    _write(frame, part, wanted["numWorkers"])
    storage.write_bytes(storage.join(part, MANIFEST),
                        json.dumps({**wanted, "made": time.time()}).encode())
    if not storage.is_local(folder):
        return part, None  # published by its manifest
    final = storage.join(folder, name)
    try:
        os.rename(storage.local_path(part), storage.local_path(final))
        return final, None
    except OSError:  # another fit published first, or a copy there is being removed
        pass
    if _found(folder, name, wanted) == final:
        logger.info("sparktf: another fit published the same copy at %s first: uses it",
                    final)
        storage.remove_dir(part)
        return final, None
    return part, part


def _write(frame, uri: str, num_workers: int) -> None:
    try:
        frame.repartition(2 * num_workers).write.mode("overwrite").parquet(uri)
    except Exception as e:  # the frame's own plan failed: say so, as a fit in stream mode
        error = failures.input_failure(e, "TFEstimator.fit")
        if error is None:
            raise
        raise error from e


def _found(folder: str, name: str, wanted: dict) -> str | None:
    """A complete, published copy of exactly ``wanted`` that nobody is removing, if any."""
    names = storage.list_names(folder)
    if any(other.startswith(f"{name}.removing-") for other in names):
        return None
    if storage.is_local(folder):
        candidates = [name] if name in names else []
    else:
        candidates = [other for other in names if other.startswith(f"{name}.part-")]
    for candidate in candidates:
        uri = storage.join(folder, candidate)
        manifest = _manifest(uri)
        if manifest is not None and {k: manifest.get(k) for k in wanted} == wanted:
            return uri
    return None


def _manifest(uri: str) -> dict | None:
    if not storage.exists(storage.join(uri, DONE)):
        return None
    try:
        return json.loads(storage.read_bytes(storage.join(uri, MANIFEST)))
    except (OSError, ValueError):
        return None


def _mark(folder: str, name: str, kind: str) -> str:
    """Creates the marker folder ``<name>.<kind>-<uuid>`` and returns its URI."""
    marker = storage.join(folder, f"{name}.{kind}-{uuid.uuid4().hex[:12]}")
    storage.write_bytes(storage.join(marker, "pid"), str(os.getpid()).encode())
    return marker


def _prune(folder: str, plan: str, keep: str) -> None:
    """Removes the unread copies of ``plan`` made from other input files, and the least
    recently used unread copies beyond ``KEEP``."""
    names = storage.list_names(folder)
    copies: dict[str, list[str]] = {}
    for other in names:
        base, _, kind = other.partition(".")
        published = not kind if storage.is_local(folder) else kind.startswith("part-")
        if published and base != keep and not base.startswith("once-") and \
                _manifest(storage.join(folder, other)) is not None:
            copies.setdefault(base, []).append(other)
    stale = [base for base in copies if base.startswith(f"{plan}-")]
    by_use = sorted((base for base in copies if base not in stale),
                    key=lambda base: _used(folder, copies[base]), reverse=True)
    for base in stale + by_use[KEEP - 1:]:
        if _remove_unread(folder, base, copies[base]):
            logger.info("sparktf: removes the unused Parquet copy %s",
                        storage.join(folder, base))


def _used(folder: str, names: list[str]) -> float:
    """When a fit last used one of ``names`` (0 when it cannot be read)."""
    times = [0.0]
    for other in names:
        with contextlib.suppress(OSError, ValueError):
            times.append(float(storage.read_bytes(storage.join(folder, other, USED))))
    return max(times)


def _remove_unread(folder: str, base: str, names: list[str]) -> bool:
    """Removes the copies ``names`` of ``base`` unless a fit reads them; whether it did."""
    removing = _mark(folder, base, "removing")
    try:
        if any(other.startswith(f"{base}.reader-") for other in storage.list_names(folder)):
            return False
        for other in names:
            storage.remove_dir(storage.join(folder, other))
        return True
    finally:
        storage.remove_dir(removing)


def _plan(frame) -> str:
    """A digest of the frame's canonical plan and schema: equal for the same query."""
    plan = frame._jdf.queryExecution().analyzed().canonicalized().toString()
    return hashlib.sha256(f"{plan}\n{frame.schema.json()}".encode()).hexdigest()


def _digest(wanted: dict) -> str:
    return hashlib.sha256(json.dumps(wanted, sort_keys=True).encode()).hexdigest()[:12]


def file_sources(frame) -> list[list] | None:
    """``[path, size, mtime]`` of every input file when every source of ``frame`` is a file
    scan (Spark's ``HadoopFsRelation``); None when some source is not, or cannot be told."""
    try:
        leaves = frame._jdf.queryExecution().analyzed().collectLeaves().iterator()
    except Exception:  # noqa: BLE001 - no JVM plan to inspect (Spark Connect)
        return None
    while leaves.hasNext():
        leaf = leaves.next()
        if leaf.getClass().getSimpleName() != "LogicalRelation" or \
                leaf.relation().getClass().getSimpleName() != "HadoopFsRelation":
            return None
    paths = sorted(frame.inputFiles())
    if not paths:
        return None
    try:
        return [[path, *storage.file_state(path)] for path in paths]
    except FileNotFoundError as e:  # Spark's list of the files is older than the folder
        raise InvalidInputError(
            f"A file of the DataFrame given to fit is gone: {e.filename or e}. Read the "
            "data again (spark.read...) after the files changed, or run "
            "REFRESH TABLE for a table.") from e
