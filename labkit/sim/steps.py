"""The engine loop of the simulator's step mode: one asyncio task runs the scheduler's steps back to back on the
real clock and hands every request its tokens through a queue of its own, which its HTTP handler writes.

The loop waits for each step's end target with the event loop's timer (select(): microsecond timeouts) and
completes the step as soon as it wakes, so a slow reader never holds up the engine, as on a real server.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from labkit.sim.accounts import RequestTruth
from labkit.sim.scheduler import Emission, StepScheduler


class StepLoop:
    """The asyncio side of StepScheduler: started by the first request, asleep while there is no work."""

    def __init__(self, sched: StepScheduler, on_error: Callable[[str], None]):
        self.sched = sched
        self.on_error = on_error
        self.queues: dict[int, asyncio.Queue[Emission | None]] = {}
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    def add(self, rec: RequestTruth) -> asyncio.Queue[Emission | None]:
        """Queue a request for the scheduler; its emissions arrive on the returned queue (None: engine gone)."""
        queue: asyncio.Queue[Emission | None] = asyncio.Queue()
        self.queues[rec.index] = queue
        self.sched.add(rec)
        if self._task is None:
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run())
            self._task.add_done_callback(self._ended)
        assert self._wake is not None
        self._wake.set()
        return queue

    def drop(self, rec: RequestTruth) -> None:
        """The request ended early (client gone, a fault): out of the scheduler, its queue forgotten."""
        self.sched.drop(rec)
        self.queues.pop(rec.index, None)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        clock = time.perf_counter
        wake = self._wake
        assert wake is not None
        while True:
            step = self.sched.plan(clock())
            if step is None:
                wake.clear()
                await wake.wait()
                continue
            delay = step.end - clock()
            if delay > 0:
                fut = loop.create_future()
                loop.call_at(loop.time() + delay, fut.set_result, None)
                await fut
            else:
                await asyncio.sleep(0)  # behind schedule: complete now, but let the handlers write first
            for em in self.sched.complete(step, clock()):
                queue = self.queues.get(em.rec.index)
                if queue is not None:
                    queue.put_nowait(em)
                    if em.done:
                        del self.queues[em.rec.index]

    def _ended(self, task: asyncio.Task[None]) -> None:
        """A crash of the loop must not leave every stream hanging: log it and end them all."""
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self.on_error(f"engine step loop failed: {exc!r}")
        for queue in self.queues.values():
            queue.put_nowait(None)
        self.queues.clear()
        self._task = None
