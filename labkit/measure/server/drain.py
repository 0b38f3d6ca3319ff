"""The drain check: at every boundary between labkit's requests (before a window's first request, between
requests, after its last) the engine's running and waiting gauges must read zero. When they do not, labkit
scrapes /metrics again every DRAIN_POLL_S until they do, for at most `drain_timeout` seconds, and the window's
evidence records the wait; a boundary still busy after it is flagged (`busy-at-start`, `not-drained`:
docs/measurement.md, "Drain and effective concurrency").

Only gauges set at the moment of the scrape count (vLLM's, the simulator's): SGLang's describe its last logged
batch and stay non-zero on an idle engine, so labkit neither waits for them nor flags them. Inside a window each
scrape of a wait is paired with the one before it (no labkit request in between), so requests another client
finishes meanwhile still count as foreign traffic (it was on the engine with labkit's last request); at the
window's start the wait's scrapes only record the gauges, and the window's counts begin where the wait ended.
"""

from __future__ import annotations

import asyncio
import time

from labkit.measure.server import metrics as mx
from labkit.measure.server.scrapes import busy
from labkit.measure.session import Session

DRAIN_POLL_S = 0.05  # seconds between the scrapes of a wait


async def settled(
    s: Session, samples: mx.Samples | None, *, key: str, window: str, run: int, where: str
) -> mx.Samples | None:
    """`samples` when the engine is idle in it; else the last scrape of a bounded wait for its live gauges to
    read zero (stored under `key`.drain), the wait recorded in the window's evidence as happening `where`."""
    if not busy(samples):
        return samples
    log, limit = s.log, s.ctx.drain_timeout
    t0 = time.monotonic()
    last = samples
    assert last is not None  # busy() is False for a missing scrape
    start = where == "start"
    if start:
        log.evidence.see(window, run, last)
    polled = False
    while busy(last) and time.monotonic() - t0 < limit:
        polled = True
        await asyncio.sleep(DRAIN_POLL_S)
        now = await s.scrape(f"{key}.drain")
        if now is None:  # /metrics went away: nothing more to wait on
            break
        if start:  # before labkit's first request: the window's counts start after the wait
            log.evidence.see(window, run, now)
        else:
            log.evidence.pair(window, run, last, now, 0)
        last = now
    # no poll ran (drain_timeout = 0): no wait to report, so the flag does not say "after waiting 0.0 s"
    log.evidence.drained(window, run, where, time.monotonic() - t0 if polled else 0.0, last)
    return last
