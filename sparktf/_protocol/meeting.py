"""The tasks' meeting point on the driver's event channel (``server``): the address
exchange (``gather``), the exit barrier (``wait_all_done``) and the waits of the
evaluator and the parameter-server chief. Milliseconds here, where Spark's
``allGather`` and ``barrier`` take about a second each.

``Meeting`` is the part of the server's job (``server._Job``) that these requests use;
its methods run on the server's event loop, where the job's state lives.
"""

from __future__ import annotations

import asyncio

# How long the first task to ask for the address exchange waits for every task to have
# connected. A task that cannot reach the channel exchanges through Spark's allGather
# instead; once this has passed, so does every task of the job (a consistent choice).
GATHER_GRACE_S = 30.0


class Meeting:
    """Barriers and waits over the job's state (``server._Job``: ``_note``, ``_until``,
    ``done``, ``ranks``, ``gathered``, ``epoch``, ``serving``...)."""

    async def wait_all_done(self, rank: int) -> bool:
        """A barrier for the tasks' exit: waits until every rank is done (or shutdown)."""
        await self._note(self.done.add, rank)
        await self._until(lambda: len(self.done) >= self.num_tasks or self.closing)
        return not self.closing or len(self.done) >= self.num_tasks

    async def gather(self, rank: int, value: str, round_: int = 0, what: str = "") -> dict:
        """An exchange among the tasks (round 0 their addresses, round 1 their rows): waits
        until every task has sent its ``value`` of that round, then answers
        ``{"values": [...]}`` in rank order (what Spark's ``allGather`` returns).

        Answers ``{"fallback": True}`` (exchange through Spark instead) when not every
        task has connected within ``GATHER_GRACE_S`` of the first request: one of them
        cannot reach this channel and will call ``allGather``, so every task must. The
        answer is the same for every task of the job, and the server's shutdown (the job
        ended) ends the wait. A task that connected, then lost its connection before
        sending its value (``what``), would never send it: the wait ends at once, the
        driver hears an error naming it and the round, and the job ends.
        """
        def everyone(collection) -> bool:
            return len(collection) >= self.num_tasks

        gathered = self.gathered.setdefault(round_, {})
        await self._note(gathered.__setitem__, rank, value)
        try:
            await self._until(lambda: everyone(self.ranks) or self.gather_fallback
                              or self.closing, GATHER_GRACE_S)
        except asyncio.TimeoutError:
            await self._note(self._fall_back)
        await self._until(lambda: everyone(gathered) or self.gather_fallback
                          or self.closing or bool(self._lost(gathered)))
        if self.closing:
            return {"ended": True}  # the job has ended (a task failed): no exchange
        if self.gather_fallback:
            return {"fallback": True}
        if everyone(gathered):
            return {"values": [gathered[r] for r in range(self.num_tasks)]}
        await self._give_up(self._lost(gathered), sorted(gathered), round_, what)
        return {"ended": True}

    def _fall_back(self) -> None:
        # checked again here, on the loop: the last task may have connected just as the
        # grace ended, and then some of its peers may already have the values
        if len(self.ranks) < self.num_tasks:
            self.gather_fallback = True

    def _lost(self, gathered: dict) -> list[int]:
        """Ranks that connected, then lost every connection without a goodbye, before
        sending their value of this round: they will never send it."""
        return sorted(r for r in self.dropped if r not in gathered and self.live[r] <= 0)

    async def _give_up(self, lost: list[int], waiting: list[int], round_: int,
                       what: str) -> None:
        """Ends the job for an exchange that cannot complete; the driver hears why first."""
        if self.giving_up or self.closing:
            return  # a peer that waited too has already reported it
        self.giving_up = True
        message = (
            f"rank(s) {lost} lost the connection to the driver's event channel before "
            f"sending their {what or 'value'} for the tasks' exchange (round {round_}), "
            f"while rank(s) {waiting} waited for it: the task's process died, or its network "
            "to the driver failed. The job was ended; that task's executor log tells why it "
            "ended.")
        for rank in lost:
            await asyncio.get_running_loop().run_in_executor(
                self.dispatcher, self.on_event,
                {"kind": "error", "rank": rank, "role": "?", "message": message,
                 "traceback": "", "log_tail": "", "lost_channel": True})
        await self.end_job()

    async def await_epoch(self, rank: int, after: int) -> dict:
        """Waits until an epoch after ``after`` is reported or every other task is done.

        The evaluator side-car waits here for each new checkpoint: one blocking call
        per checkpoint, no polling. ``finished`` means training is over.
        """
        def finished() -> bool:
            return len(self.done - {rank}) >= self.num_tasks - 1

        await self._until(lambda: self.epoch > after or finished() or self.closing)
        return {"epoch": self.epoch, "finished": finished() or self.closing}

    async def await_serving(self, count: int) -> dict:
        """Waits until ``count`` tasks serve: the PS chief connects only once all are up."""
        await self._until(lambda: len(self.serving) >= count or self.closing)
        return {"serving": len(self.serving)}


REQUESTS = {
    "gather": lambda job, event: job.gather(int(event.get("rank", -1)),
                                            str(event.get("value", "")),
                                            int(event.get("round", 0)),
                                            str(event.get("what", ""))),
    "await_serving": lambda job, event: job.await_serving(int(event.get("count", 0))),
    "await_epoch": lambda job, event: job.await_epoch(int(event.get("rank", -1)),
                                                      int(event.get("after", 0))),
}
