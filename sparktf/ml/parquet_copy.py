"""``inputMode="parquet"``: the training columns written once as Parquet, read by the workers.

A copy is reused by a later fit (another fold or parameter map of a CrossValidator, a
repeated fit) only when its data is provably the same: every source of the frame is
a file scan and every input file still has the size and modification time it had when
the copy was written. Anything else (in-memory rows, an RDD, a JDBC table) gets a copy
of its own, removed when the fit ends. At most ``KEEP`` reusable copies stay in a
folder; the least recently used ones are removed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from typing import Iterator

from sparktf.runtime import storage

logger = logging.getLogger("sparktf")

KEEP = 4
MANIFEST = "_sparktf_manifest.json"
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
    uri = storage.join(folder, f"{frame.semanticHash() & 0xFFFFFFFF:08x}-{num_workers}")
    wanted = {"files": files, "numWorkers": num_workers}
    found = _manifest(uri)
    if found is not None and {k: found.get(k) for k in wanted} == wanted:
        logger.info("sparktf: inputMode='parquet' reuses the copy of this data at %s (its "
                    "%d input files are unchanged)", uri, len(files))
    else:
        logger.info("sparktf: inputMode='parquet' writes the training data once to %s%s", uri,
                    " (its input files changed since the copy there was made)"
                    if found is not None else "")
        storage.remove_dir(uri)
        _write(frame, uri, num_workers)
    storage.write_bytes(storage.join(uri, MANIFEST),
                        json.dumps({**wanted, "used": time.time()}).encode())
    _prune(folder, keep=uri)
    yield uri


def _write(frame, uri: str, num_workers: int) -> None:
    frame.repartition(2 * num_workers).write.mode("overwrite").parquet(uri)


def _manifest(uri: str) -> dict | None:
    if not storage.exists(storage.join(uri, DONE)):
        return None
    try:
        return json.loads(storage.read_bytes(storage.join(uri, MANIFEST)))
    except (OSError, ValueError):
        return None


def _prune(folder: str, keep: str) -> None:
    """Removes the least recently used reusable copies beyond ``KEEP``."""
    used = []
    for name in storage.list_names(folder):
        uri = storage.join(folder, name)
        if name.startswith("once-") or uri == keep:
            continue
        manifest = _manifest(uri)
        used.append((manifest.get("used", 0.0) if manifest else 0.0, uri))
    for _, uri in sorted(used, reverse=True)[KEEP - 1:]:
        logger.info("sparktf: removes the unused Parquet copy %s", uri)
        storage.remove_dir(uri)


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
    return [[path, *storage.file_state(path)] for path in paths]
