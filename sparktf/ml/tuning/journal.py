"""A search that outlives its driver: ``HalvingSearch(runId=...)`` keeps a journal.

The search's folder ``modelDir/<runId>`` holds its trials' runs (``trial-NNN``) and
``search.json``: what the search was asked (its trials' Params, rungs, factor, start order,
metric and direction) and every decision in the order the driver made it: a job started
(``start``: trial, from and to epochs), a result at a rung (``report``: the metric, the
trial's history, and whether its callbacks stopped it), a trial failed (``fail``). The
schedule (``halving``) is deterministic, so a search of the same ``runId`` replays the
journal into a fresh schedule, which then holds what the lost one held; the jobs running
when the driver was lost start again first, each continuing its run from its last
checkpoint, and the search goes on as if it had not been interrupted. The file is replaced
in one step after each decision, before the next job starts.

A search grows: fitted again with more trials (``numTrials``) or a larger ``maxEpochs``,
its journal's trials are the new search's first trials and its rungs the first rungs
(``halving.extended``), so that only the new work trains. A trial drawn as it started
(``sampler="tpe"``) has its draw in its first ``start``.
"""

from __future__ import annotations

import json

from sparktf.errors import InvalidInputError
from sparktf.ml.persistence import json_view
from sparktf.ml.runs import identity
from sparktf.ml.tuning import halving
from sparktf.runtime import storage

JOURNAL_FILE = "search.json"
GROWS = ("trials", "rungs", "order")  # lists a grown search extends


class Journal:
    """The journal of the search in ``folder``, asked ``asked`` (plain JSON values)."""

    def __init__(self, folder: str, asked: dict):
        self.path = storage.join(folder, JOURNAL_FILE)
        self.asked = json.loads(json.dumps(json_view(asked)))  # as it reads back
        self.events: list[dict] = []

    def load(self) -> list[dict]:
        """The decisions a lost driver made (none for a new search); refuses a search
        asked otherwise than the one that wrote them."""
        if not storage.exists(self.path):
            return []
        before = _read(self.path)
        differ = []
        for key in sorted({*before["asked"], *self.asked}):
            then, now = before["asked"].get(key), self.asked.get(key)
            if then == now or _grows(key, then, now):
                continue
            if _grows(key, now, then):
                raise InvalidInputError(
                    f"The search in {self.path.rsplit('/', 1)[0]} has "
                    + (f"{len(then)} trials" if key in ("trials", "order") else
                       f"{then} trials" if key == "numTrials" else
                       f"rungs up to {then[-1]} epochs")
                    + ": a search grows (more numTrials, a larger maxEpochs) but does not "
                    "shrink. Ask at least as many, or use a new runId.")
            if isinstance(then, dict) and isinstance(now, dict):  # a model's, an evaluator's
                differ += [f"{key}: {said}" for said in identity.differences(then, now)]
            else:
                differ.append(f"{key}: {then!r} then, {now!r} now")
        if differ:
            raise InvalidInputError(
                f"The search in {self.path.rsplit('/', 1)[0]} was started with other "
                "settings, so it cannot be resumed: " + "; ".join(differ) + ". Use a new "
                "runId, or the settings the search was started with.")
        self.events = list(before["events"])
        return list(self.events)

    def record(self, kind: str, trial: int, **values) -> None:
        self.events.append({"kind": kind, "trial": trial, **values})
        storage.replace_bytes(self.path, json.dumps(
            {"asked": self.asked, "events": self.events}, indent=1).encode())


def asked_before(folder: str) -> dict | None:
    """What the search whose journal is in ``folder`` was asked (None: it has none)."""
    path = storage.join(folder, JOURNAL_FILE)
    return _read(path)["asked"] if storage.exists(path) else None


def _read(path: str) -> dict:
    try:
        return json.loads(storage.read_bytes(path))
    except ValueError as e:
        raise InvalidInputError(
            f"{path} is not readable JSON ({e}): the search's journal is damaged. Remove the "
            "search's folder to start it again, or use another runId.") from e


def _grows(key: str, then, now) -> bool:
    """Whether ``now`` is what a grown search asks where ``then`` was asked: more trials,
    more rungs."""
    if key in GROWS:
        return isinstance(then, list) and isinstance(now, list) and \
            len(now) > len(then) and now[:len(then)] == then
    return key == "numTrials" and isinstance(then, int) and isinstance(now, int) and \
        now > then


def replay(events: list[dict], schedule: halving.Halving, sign: float) -> dict:
    """Puts ``events`` into a fresh ``schedule``, as the lost driver made them; returns
    what the trials' records need that the schedule does not hold: ``histories``,
    ``errors``, the ``running`` jobs (trial -> (from, to) epochs) that were not done and
    the ``draws`` of trials drawn as they started. The schedule may have more trials and
    rungs (a grown search): the decisions are put in as they were made."""
    histories: dict[int, dict] = {}
    draws: dict[int, list] = {}
    errors: dict[int, str] = {}
    running: dict[int, tuple[int, int]] = {}
    for event in events:
        kind, index = event["kind"], event["trial"]
        if kind == "start":
            schedule.started_job(index, *event["epochs"])
            running[index] = tuple(event["epochs"])
            if event.get("drawn") is not None:
                draws[index] = event["drawn"]
        elif kind == "report":
            schedule.report(index, sign * event["value"])
            if event.get("ended") is not None:  # stopped by its callbacks
                schedule.end(index, event["ended"])
            histories[index] = event["history"]
            running.pop(index, None)
        elif kind == "fail":
            schedule.fail(index)
            errors[index] = event["error"]
            if event.get("history") is not None:
                histories[index] = event["history"]
            running.pop(index, None)
    return {"histories": histories, "errors": errors, "running": running, "draws": draws}
