"""Waiting on the event loop until a request's intended send time (docs/measurement.md, "Load levels and
arrival schedules").

Why not a plain `asyncio.sleep`: the loop's timers wake up to a millisecond late, which an open loop at a high
rate would show as lateness of the client's own making; so the sender sleeps until SPIN_S before the send and
then yields to the loop's other work (the streams' reads) until it is due.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

SPIN_S = 0.002  # asleep until this long before a send, then yielding until it is due (timer slack)


async def until(due_ns: int, now: Callable[[], int] = time.perf_counter_ns) -> None:
    """Wait until `due_ns` (perf_counter nanoseconds)."""
    wait = (due_ns - now()) / 1e9 - SPIN_S
    if wait > 0:
        await asyncio.sleep(wait)
    while now() < due_ns:
        await asyncio.sleep(0)
