"""The windows every workload measures in: the /metrics scrapes between its requests (`TurnWindows`), each pair
handed to the run's evidence log under the window's name, and a window's speculative acceptance from its counter
deltas (`window_result`; docs/measurement.md, "Per-run evidence", "Speculative acceptance conventions").

Why between requests and never inside one: a scrape taken while a request runs would split its counters over two
windows; consecutive windows share a scrape, so no request falls between two.
"""

from __future__ import annotations

from typing import Any

from labkit.measure.records import RequestRecord
from labkit.measure.server import metrics as mx
from labkit.measure.server.drain import settled
from labkit.measure.server.scrapes import server_view, window_acceptance
from labkit.measure.session import Session


class TurnWindows:
    """The scrapes between a phase's requests: each one closes a request's window and opens the next, so
    consecutive windows share a scrape and none is taken while a request runs. Every pair goes to the run's
    evidence as `window` (the decode window, or a content category's: content.py)."""

    def __init__(self, s: Session, run: int, before: mx.Samples | None, window: str = "decode") -> None:
        self.s, self.run, self.last, self.n, self.window = s, run, before, 0, window
        self.first = before  # the window's opening scrape, after the drain wait

    @classmethod
    async def opened(cls, s: Session, run: int, window: str) -> TurnWindows:
        """The phase's windows from their opening scrape (key `<window>.before.<run>`), taken after the drain
        wait at the start."""
        key = f"{window}.before.{run}"
        before = await settled(s, await s.scrape(key), key=key, window=window, run=run, where="start")
        return cls(s, run, before, window)

    async def close(self, recs: list[RequestRecord], where: str) -> dict[str, Any] | None:
        """The scrape after `recs` (the requests `where` names): their window's engine view; then, before the
        next window opens, the wait for the engine to drain (labkit/measure/server/drain.py)."""
        self.n += 1
        key = f"{self.window}.{self.run}.{self.n}"
        now = await self.s.scrape(key)
        self.s.log.evidence.pair(self.window, self.run, self.last, now, len(recs))
        view = server_view(recs, self.last, now)
        # None once /metrics failed: no later window (nor the acceptance) has an end
        self.last = await settled(
            self.s, now, key=key, window=self.window, run=self.run, where=f"after {where}"
        )
        return view


async def window_result(
    s: Session,
    window: str,
    run: int,
    before: mx.Samples | None,
    after: mx.Samples | None,
    recs: list[RequestRecord],
    flushed: bool,
) -> mx.Acceptance | None:
    """A measured window's acceptance from its counter deltas, for the decode phase and every phase with
    windows of its own: None (noted) when a counter went backwards inside it, since its deltas then describe
    two engines; `recs` are the window's requests (docs/measurement.md, "Speculative acceptance conventions")."""
    ctx, log = s.ctx, s.log
    reset = log.evidence.reset_in(window, run)
    if reset:
        log.notes.append(f"acceptance invalid: {window} window: {reset}")
        return None
    counted = [r for r in recs if r.ok and r.chunk_n]
    return await window_acceptance(
        ctx.client,
        before,
        after,
        spec_k=ctx.spec_k,
        spec_k_source=ctx.spec_k_source,
        n_window=sum(1 for r in recs if r.http_status == 200 and r.finish_reason),
        flushed=flushed,
        notes=log.notes,
        stream=(sum(r.output_tokens or 0 for r in counted), sum(r.chunks for r in counted)),
    )
