"""Reading the lines of one connection to the driver's event channel, each with its own
bound (``server``: a peer's first line is held to a few KB, a task's later lines may be
long), and hanging up on one."""

from __future__ import annotations

import asyncio
import socket

READ_CHUNK = 64 * 1024  # what one read takes off a connection (asyncio's buffer: 2x this)


class Lines:
    """A connection's lines, each read with its own bound. asyncio's ``readline`` buffers a
    line up to the reader's one limit before any check, and a peer's first line must be
    held to a few KB while a task's later lines (a traceback, a log tail) may be long."""

    def __init__(self, reader: asyncio.StreamReader):
        self._reader = reader
        self._buffer = bytearray()
        self._searched = 0  # the buffer's bytes already known to hold no line break

    async def next(self, limit: int) -> bytes:
        """The next line, its break included; b"" at the end of the stream. ValueError for a
        line over ``limit`` bytes, as soon as that many have come without a break."""
        while True:
            end = self._buffer.find(b"\n", self._searched)
            if end >= 0:
                if end >= limit:
                    raise ValueError(f"a line of {end + 1} bytes, over {limit}")
                line = bytes(self._buffer[:end + 1])
                del self._buffer[:end + 1]
                self._searched = 0
                return line
            self._searched = len(self._buffer)
            if len(self._buffer) > limit:
                raise ValueError(f"over {limit} bytes without a line break")
            chunk = await self._reader.read(READ_CHUNK)
            if not chunk:
                return b""  # the peer hung up (a partial last line is no event)
            self._buffer += chunk


def shut(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    try:
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)  # the task sees the hang-up; our read ends
    except OSError:
        pass
