"""``modelDir`` URIs: local paths, ``file://`` and anything pyarrow's filesystems reach.

TensorFlow writes to local directories; for other filesystems the files are
written locally first and copied with ``pyarrow.fs`` (HDFS, S3, GCS, ...).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from urllib.parse import urlparse

from sparktf._protocol import heartbeats


def is_local(uri: str) -> bool:
    """Whether ``uri`` is a plain path or a ``file://`` URI."""
    scheme = urlparse(uri).scheme
    return scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt")


def local_path(uri: str) -> str:
    """The filesystem path of a local ``uri``: all of it after ``file://`` (a ``#`` or
    ``?`` is part of a folder's name, not a fragment or a query)."""
    if not uri.startswith("file:"):
        return uri
    rest = uri[len("file:"):]
    if rest.startswith("//"):  # file://host/path: the host is this machine
        rest = rest[2:]
        rest = rest[rest.index("/"):] if "/" in rest else "/"
    return rest


def join(uri: str, *parts: str) -> str:
    """``uri`` with path parts appended, keeping its scheme."""
    return "/".join([uri.rstrip("/"), *parts])


def parent(uri: str) -> str:
    """The folder holding ``uri`` (the inverse of one ``join``)."""
    return uri.rstrip("/").rsplit("/", 1)[0]


def scratch_root() -> str | None:
    """Where a task's temporary folders go: a ``sparktf`` folder in its executor's own
    local directory (the ``SPARK_LOCAL_DIRS`` Spark gives its Python workers, which Spark
    removes when the executor or the application ends, also after a process of the task
    was killed and could not clean up); the system's temporary folder elsewhere."""
    dirs = os.environ.get("SPARK_LOCAL_DIRS")
    if not dirs:
        return None
    root = os.path.join(dirs.split(",")[0], "sparktf")
    try:
        os.makedirs(root, exist_ok=True)
    except OSError:
        return None
    return root


def _fs(uri: str):
    from pyarrow import fs
    return fs.FileSystem.from_uri(uri)


def put_dir(local_dir: str, uri: str) -> None:
    """Copies a local directory tree to ``uri``, replacing what is there. A file that
    could not be written raises ``OSError`` naming it (``copy_tree``)."""
    if is_local(uri):
        target = local_path(uri)
        if os.path.abspath(target) == os.path.abspath(local_dir):
            return
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(local_dir, target)
        return
    filesystem, path = _fs(uri)
    # a remote store's upload shows no progress to an export's heartbeats
    with heartbeats.unseen_work():
        filesystem.delete_dir_contents(path, missing_dir_ok=True)
        filesystem.create_dir(path, recursive=True)
        copy_tree(local_dir, filesystem, path)


COPY_CHUNK = 1 << 20


def copy_tree(local_dir: str, filesystem, path: str) -> None:
    """Every file under ``local_dir`` written to ``path`` of a pyarrow ``filesystem``, each
    closed and its close checked: ``pyarrow.fs.copy_files`` returns normally when a file's
    close fails (the upload of an S3 object's parts, refused: the object is never made),
    and a fit would have reported an export that is not there. A file that fails is
    removed (an upload's close completes it with the parts it had). One file at a time:
    ``copy_files`` writes several at once, which a model of many shards would repay."""
    for folder, _, files in os.walk(local_dir):
        relative = os.path.relpath(folder, local_dir)
        target = path if relative == "." else f"{path}/{relative.replace(os.sep, '/')}"
        if relative != ".":
            filesystem.create_dir(target, recursive=True)
        for name in files:
            destination = f"{target}/{name}"
            try:
                with open(os.path.join(folder, name), "rb") as source:
                    out = filesystem.open_output_stream(destination)
                    try:
                        shutil.copyfileobj(source, out, COPY_CHUNK)
                    finally:
                        out.close()  # an upload's parts end here: its failure too
            except OSError as e:
                # a multipart upload is completed with what it had: no truncated file stays
                # (and no error of the removal hides the write's)
                with contextlib.suppress(Exception):
                    filesystem.delete_file(destination)
                raise OSError(f"could not write {destination}: {e}") from e


def get_dir(uri: str, local_dir: str) -> str:
    """A local directory holding the tree at ``uri`` (``uri`` itself when local)."""
    if is_local(uri):
        return local_path(uri)
    from pyarrow import fs
    filesystem, path = _fs(uri)
    os.makedirs(local_dir, exist_ok=True)
    fs.copy_files(path, local_dir, source_filesystem=filesystem,
                  destination_filesystem=fs.LocalFileSystem())
    return local_dir


def exists(uri: str) -> bool:
    """Whether something exists at ``uri``."""
    if is_local(uri):
        return os.path.exists(local_path(uri))
    from pyarrow import fs
    filesystem, path = _fs(uri)
    return filesystem.get_file_info(path).type != fs.FileType.NotFound


def check_writable(uri: str) -> None:
    """Creates ``uri`` if needed and proves a file can be written there; raises OSError.

    The probe's name is unique: fits that start at once in one folder (threads,
    ``CrossValidator(parallelism=2)``) must not remove one another's probe."""
    probe = f".sparktf-write-probe-{uuid.uuid4().hex}"
    if is_local(uri):
        path = local_path(uri)
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, probe), "w") as f:
            f.write("ok")
        os.remove(os.path.join(path, probe))
        return
    filesystem, path = _fs(uri)
    filesystem.create_dir(path, recursive=True)
    with filesystem.open_output_stream(f"{path}/{probe}") as f:
        f.write(b"ok")
    filesystem.delete_file(f"{path}/{probe}")


def write_bytes(uri: str, data: bytes) -> None:
    """Writes ``data`` to the file at ``uri``, creating its folder."""
    if is_local(uri):
        path = local_path(uri)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        return
    filesystem, path = _fs(uri)
    filesystem.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with filesystem.open_output_stream(path) as f:
        f.write(data)


def replace_bytes(uri: str, data: bytes) -> None:
    """Replaces the file at ``uri`` with ``data`` in one step: a reader (or a driver killed
    mid-write) sees the old file or the new one, never one cut short."""
    if not is_local(uri):  # object stores replace a whole object on write
        write_bytes(uri, data)
        return
    path = local_path(uri)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    scratch = f"{path}.{uuid.uuid4().hex}.tmp"
    try:
        with open(scratch, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(scratch, path)
    finally:
        if os.path.exists(scratch):
            os.remove(scratch)


def read_bytes(uri: str) -> bytes:
    """The bytes of the file at ``uri``."""
    if is_local(uri):
        with open(local_path(uri), "rb") as f:
            return f.read()
    filesystem, path = _fs(uri)
    with filesystem.open_input_stream(path) as f:
        return f.read()


def list_names(uri: str) -> list[str]:
    """The names of the entries directly inside the folder at ``uri`` ([] if it is missing)."""
    if is_local(uri):
        path = local_path(uri)
        return sorted(os.listdir(path)) if os.path.isdir(path) else []
    from pyarrow import fs
    filesystem, path = _fs(uri)
    infos = filesystem.get_file_info(fs.FileSelector(path, allow_not_found=True))
    return sorted(info.base_name for info in infos)


def file_state(uri: str) -> tuple[int, int]:
    """(size in bytes, modification time in ns) of the file at ``uri``."""
    if is_local(uri):
        stat = os.stat(local_path(uri))
        return stat.st_size, stat.st_mtime_ns
    filesystem, path = _fs(uri)
    info = filesystem.get_file_info(path)
    return info.size, info.mtime_ns


def remove_file(uri: str) -> None:
    """Removes the file at ``uri``; nothing happens if it is missing."""
    if is_local(uri):
        with contextlib.suppress(FileNotFoundError):
            os.remove(local_path(uri))
        return
    filesystem, path = _fs(uri)
    with contextlib.suppress(FileNotFoundError):
        filesystem.delete_file(path)


def remove_dir(uri: str) -> None:
    """Removes the tree at ``uri``; nothing happens if it is missing."""
    if is_local(uri):
        shutil.rmtree(local_path(uri), ignore_errors=True)
        return
    from pyarrow import fs
    filesystem, path = _fs(uri)
    if filesystem.get_file_info(path).type != fs.FileType.NotFound:
        filesystem.delete_dir(path)


def copy_dir(source: str, target: str) -> None:
    """Copies the tree at ``source`` to ``target``, any two URIs."""
    import tempfile
    with tempfile.TemporaryDirectory(prefix="sparktf-copy-", dir=scratch_root()) as scratch:
        put_dir(get_dir(source, os.path.join(scratch, "tree")), target)
