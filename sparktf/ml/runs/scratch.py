"""The temp-dir folder a fit without ``modelDir`` trains into, and when it goes.

A fit on a local master with no ``modelDir`` writes its checkpoints and export into
a ``sparktf-model-*`` folder of the temp dir (``model_folder``). A fit that fails
removes the folder it made (``removes_its_folder_on_failure``); a fit that succeeds
leaves it to its ``TFModel`` until the Python process ends, and then it goes. Not
earlier: the model's copies (``copy()``, a ``CrossValidator``'s best model, a
``PipelineModel`` holding it) score from the same folder, whichever is collected
first. A model saved with ``write().save(path)`` holds its own copy of the SavedModel
and a loaded one points at that copy, so a saved model outlives the folder.
"""

from __future__ import annotations

import atexit
import contextvars
import functools
import logging
import os
import re
import shutil
import socket
import tempfile

from sparktf.ml.runs import lock

logger = logging.getLogger("sparktf")

PREFIX = "sparktf-model-"

# The folders made by the fit running in this thread (or context), for it to remove
# if it fails; unset outside a fit.
_MADE: contextvars.ContextVar[list[str]] = contextvars.ContextVar("sparktf_fit_folders")


def model_folder() -> str:
    """A new ``sparktf-model-*`` folder in the temp dir, removed when this process ends
    (or when the fit making it fails); it is named after its owner (machine, process and
    the process's start), and the folders of owners that are gone (a killed driver cannot
    remove its own) are removed first."""
    sweep(tempfile.gettempdir())
    path = tempfile.mkdtemp(prefix=f"{PREFIX}{_owner(os.getpid())}-")
    atexit.register(remove, path, os.getpid())
    made = _MADE.get(None)
    if made is not None:
        made.append(path)
    return path


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname())


def _owner(pid: int) -> str:
    """This machine, process ``pid`` and its start: a folder's owner, in its name."""
    return f"{_host()}-{pid}-{lock.process_start(pid)}"


_OWNED = re.compile(rf"^{re.escape(PREFIX)}(?P<host>[A-Za-z0-9._]+)-(?P<pid>\d+)-(?P<start>\d+)-")


def sweep(folder: str) -> None:
    """Removes the ``sparktf-model-*`` folders in ``folder`` whose driver on this machine
    is gone, if they are this user's."""
    for name in os.listdir(folder):
        found = _OWNED.match(name)
        path = os.path.join(folder, name)
        if (found is None or f"{found['host']}-{found['pid']}-{found['start']}"
                == _owner(int(found["pid"])) or not _ours_on_this_host(path, found["host"])):
            continue
        shutil.rmtree(path, ignore_errors=True)
        logger.info("sparktf: removed %s, left by a driver process that is gone", path)


def _ours_on_this_host(path: str, host: str) -> bool:
    try:
        mine = os.stat(path).st_uid == os.getuid()
    except OSError:
        return False
    return mine and host == _host()


def removes_its_folder_on_failure(fit):
    """Decorates a ``_fit``: the folders ``model_folder()`` made during a call that raises
    are removed before the error leaves it."""
    @functools.wraps(fit)
    def wrapper(*args, **kwargs):
        made: list[str] = []
        token = _MADE.set(made)
        try:
            return fit(*args, **kwargs)
        except BaseException:
            for path in made:
                remove(path, os.getpid())
            raise
        finally:
            _MADE.reset(token)
    return wrapper


def remove(path: str, owner_pid: int) -> None:
    """Removes the folder ``path`` in the process ``owner_pid`` only: a child forked from
    the driver runs the driver's exit hooks too, and must not take its folders."""
    if os.getpid() != owner_pid:
        return
    try:
        shutil.rmtree(path)
    except FileNotFoundError:  # a failed fit removed it already
        pass
    except OSError as e:  # never let cleanup hide the fit's own error
        logger.warning("sparktf: could not remove the fit's temporary folder %s: %s. "
                       "Remove it by hand; set modelDir to choose where fits write.", path, e)
