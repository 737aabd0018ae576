"""A driver lost while it writes a run's file, for the tests of exact resume."""

import builtins

from sparktf.runtime import storage


class Lost(BaseException):
    """The driver is gone (as if killed): nothing after it runs."""


class _HalfWritten:
    def __init__(self, f):
        self.f = f

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()

    def write(self, data):
        self.f.write(data[:len(data) // 2])
        raise Lost("the driver is lost while it writes result.json")


def lose_while_writing_result(monkeypatch) -> None:
    """From now on (until ``monkeypatch`` undoes it), the driver writes half of
    ``result.json`` and is lost (``Lost``)."""
    def open_then_lost(path, mode="r", *args, **kwargs):
        f = builtins.open(path, mode, *args, **kwargs)
        if "result.json" in str(path) and "w" in mode:
            return _HalfWritten(f)
        return f

    monkeypatch.setattr(storage, "open", open_then_lost, raising=False)
