"""A TensorBoard server on the driver over the training logs (``TFEstimator(tensorboard=True)``).

Every fit writes its event files under ``<modelDir>/fit-.../logs``; one server per
``modelDir`` shows all of its fits side by side. It runs in a daemon thread of the
driver until ``stop()`` is called or the Python session ends.

TensorFlow 2.21 no longer installs the ``tensorboard`` package: install it with
``pip install "sparktf[tensorboard]"``.
"""

from __future__ import annotations

import atexit
import importlib
import logging
import threading

from sparktf.errors import InvalidInputError

logger = logging.getLogger("sparktf")


class _Board:
    """One running server: its URL, and how to stop it."""

    def __init__(self, logdir: str):
        from tensorboard import program

        self.logdir = logdir
        self._server = None

        def make_server(wsgi_app, flags):
            self._server = program.WerkzeugServer(wsgi_app, flags)
            return self._server

        # the port scan (6006 onwards) that TensorBoard's own default server class has
        self._board = program.TensorBoard(
            server_class=program.with_port_scanning(make_server))
        self._board.configure(argv=[None, "--logdir", logdir])
        self.url = self._board.launch()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()  # returns once serve_forever has ended
            self._server.server_close()
            self._server = None
        # TensorBoard's fast loader is a data-server process started with
        # --die-after-stdin, which TensorBoard itself only closes when Python exits
        # (tensorboard 2.21: the ingester keeps that stdin as _stdin_handle)
        stdin = getattr(getattr(self._board, "_ingester", None), "_stdin_handle", None)
        if stdin is not None and not stdin.closed:
            stdin.close()


_lock = threading.Lock()
_boards: dict[str, _Board] = {}


def check_available() -> None:
    """Raises ``InvalidInputError`` saying how to install TensorBoard if it is missing."""
    try:
        importlib.import_module("tensorboard.program")
    except ImportError as e:
        raise InvalidInputError(
            "tensorboard=True needs the tensorboard package, which TensorFlow 2.21 no longer "
            "installs. Install it with: pip install \"sparktf[tensorboard]\" (or "
            "tensorboard==2.21.0).") from e


def start(logdir: str) -> str:
    """Serves ``logdir`` (once per folder) and logs the URL; returns the URL."""
    check_available()
    with _lock:
        board = _boards.get(logdir)
        if board is None:
            board = _boards[logdir] = _Board(logdir)
            logger.info("sparktf: TensorBoard at %s (logs: %s); sparktf.tensorboard.stop() "
                        "stops it", board.url, logdir)
        return board.url


def running() -> dict[str, str]:
    """logdir -> URL of the servers this session started and has not stopped."""
    with _lock:
        return {logdir: board.url for logdir, board in _boards.items()}


def stop(logdir: str | None = None) -> None:
    """Stops the server of ``logdir``, or every server this session started."""
    with _lock:
        names = [logdir] if logdir is not None else list(_boards)
        for name in names:
            board = _boards.pop(name, None)
            if board is not None:
                board.stop()


atexit.register(stop)
