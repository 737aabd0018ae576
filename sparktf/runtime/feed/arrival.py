"""A task's rows while they arrive: what ``main_fn`` may read before the partition is in.

The task starts ``main_fn`` as soon as the tasks have exchanged their addresses, while
its intake still writes the partition to the shard file (``sparktf.runtime.process.task``). Until
then ``ctx`` holds a ``Pending`` share: ``ctx.dataset()`` can stream the record batches
already written, and what needs every row (``ctx.numRows``, ``allNumRows``, ``feedSpec``,
the shards) waits for the ``Share``, which the task sends once every task's rows are in.

The task tells its process on stdin, one JSON line each, after the line with its order:
``{"end": n}`` when the shard file holds a complete record batch up to byte ``n``, then
``{"share": ...}`` (the ``Share``'s fields) once every task's rows are in. End of input
is the release (``child``); a share that never came fails whoever waits for it.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
from typing import Iterator

from sparktf.runtime.feed import columns
from sparktf.runtime.feed.shards import Shard


@dataclasses.dataclass(frozen=True)
class Share:
    """This task's rows and what every task received, once all of it is in."""

    numRows: int = 0
    allNumRows: tuple = ()
    shard: Shard | None = None
    validationShard: Shard | None = None
    allValidationRows: tuple = ()
    feedSpec: dict = dataclasses.field(default_factory=dict)

    def as_json(self) -> dict:
        def shard(s):
            return None if s is None else {"path": s.path, "columns": list(s.columns),
                                           "num_rows": s.num_rows,
                                           "infos": [i.as_json() for i in s.infos]}
        return {"numRows": self.numRows, "allNumRows": list(self.allNumRows),
                "shard": shard(self.shard), "validationShard": shard(self.validationShard),
                "allValidationRows": list(self.allValidationRows),
                "feedSpec": {n: i.as_json() for n, i in self.feedSpec.items()}}

    @classmethod
    def from_json(cls, d: dict) -> "Share":
        def shard(s):
            return None if s is None else Shard(
                s["path"], tuple(s["columns"]), s["num_rows"],
                tuple(columns.ColumnInfo.from_json(i) for i in s["infos"]))
        return cls(d["numRows"], tuple(d["allNumRows"]), shard(d["shard"]),
                   shard(d["validationShard"]), tuple(d["allValidationRows"]),
                   {n: columns.ColumnInfo.from_json(i) for n, i in d["feedSpec"].items()})


class Pending:
    """The share of a task whose rows are still arriving, in its TensorFlow process.

    ``path`` is the shard file being written, ``columns`` its columns. Pickled, it carries
    only those two; the process's stdin (``listen``) fills it in."""

    def __init__(self, path: str, columns_: tuple[str, ...]):
        self.path, self.columns = path, tuple(columns_)
        self._changed = threading.Condition()
        self._ends: list[int] = []
        self._share: Share | None = None
        self._failed: str | None = None

    def __getstate__(self):
        return {"path": self.path, "columns": self.columns}

    def __setstate__(self, state):
        self.__init__(state["path"], state["columns"])

    def add_end(self, end: int) -> None:
        with self._changed:
            self._ends.append(end)
            self._changed.notify_all()

    def settle(self, share: Share) -> None:
        with self._changed:
            self._share = share
            self._changed.notify_all()

    def fail(self, message: str) -> None:
        with self._changed:
            if self._share is None:
                self._failed = message
            self._changed.notify_all()

    @property
    def settled(self) -> bool:
        return self._share is not None

    def share(self) -> Share:
        """The share, once every task's rows are in (blocks until then)."""
        with self._changed:
            self._changed.wait_for(lambda: self._share is not None or self._failed)
            if self._share is None:
                raise RuntimeError(f"this task's rows never arrived: {self._failed}")
            return self._share

    def ends(self) -> Iterator[int]:
        """Where each complete record batch of the shard file ends, as the batches are
        written; ends once the share is in (every batch told)."""
        told = 0
        while True:
            with self._changed:
                self._changed.wait_for(lambda told=told: len(self._ends) > told or
                                       self._share is not None or self._failed)
                new, settled = self._ends[told:], self._share is not None
                if not new and not settled:
                    raise RuntimeError(f"this task's rows never arrived: {self._failed}")
            yield from new
            told += len(new)
            if settled and told == len(self._ends):
                return


_released = threading.Event()
_listening = False


def listen(pending: Pending) -> None:
    """Takes the task's lines on stdin in a thread: batch ends and the share into
    ``pending``; the end of input is the release (``wait_released``)."""
    global _listening

    def take():
        for line in sys.stdin:
            message = json.loads(line)
            if "end" in message:
                pending.add_end(int(message["end"]))
            elif "share" in message:
                pending.settle(Share.from_json(message["share"]))
        pending.fail("the task ended before every task's rows were in")
        _released.set()

    _listening = True
    threading.Thread(target=take, name="sparktf-arrival", daemon=True).start()


def wait_released() -> None:
    """Returns when the task releases this process (closes its stdin)."""
    if _listening:
        _released.wait()
    else:
        sys.stdin.read()
